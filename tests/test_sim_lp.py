"""The LP lower bound ("lp-bound"): hand-worked optima, a lower bound on every simulated
policy, the size guard."""
from __future__ import annotations

import importlib.util
import sys

import pytest

from uvm_sched.sim import LP_BOUND, compare, simulate
from uvm_sched.trace import AccessMode, TraceBuilder

from test_sim import _random_trace, _thrash_trace  # noqa: E402  (tests/ is on the path)
from test_sim_books import MS, MiB, _hw, _ZERO_COPY_PLAN, _plan, _zero_copy_trace  # noqa: E402

needs_highspy = pytest.mark.skipif(importlib.util.find_spec("highspy") is None,
                                   reason="the LP bound needs HiGHS: pip install highspy")


@needs_highspy
def test_with_room_for_everything_the_lp_bound_is_the_compute_time():
    r = simulate(_thrash_trace(), LP_BOUND, _hw(2.0), 8 * MiB)
    assert r.iteration_time_s == pytest.approx(2 * MS)
    assert r.stall_time_s == pytest.approx(0, abs=1e-12)


@needs_highspy
def test_the_lp_optimum_of_the_zero_copy_case_is_worked_by_hand():
    # _zero_copy_trace at 8 MiB/ms each way, a 2 MiB budget, 0.01 ms ticks. The optimum
    # writes 96% of Z in place during the stall before t1 (0.24 ms: 1.92 MiB) while t0's
    # 0.01 ms kernel covers writing back 4% of A (0.08 MiB) to make room for Z's other 4%;
    # those 4% of A come back within t1's 0.01 ms, and the stall before t3 reads 96% of Z
    # in place again: slots of 0.25, 0.01, 0.25, 0.01 ms. The simulator's best plan (the
    # whole of Z each way) takes 0.54 ms; the fast bound says 0.5 ms.
    t = _zero_copy_trace()
    lp = simulate(t, LP_BOUND, _hw(), 2 * MiB)
    assert lp.iteration_time_s == pytest.approx(0.52 * MS)
    assert lp.counters["lp_ticks_per_slot"] == 1
    assert list(lp.timeline["stall_s"] / MS) == pytest.approx([0.24, 0, 0.24, 0])
    # (the bytes are not unique: any transfer that fits in a slot's time costs nothing)
    assert lp.bytes_d2h >= 2 * MiB * (1 - 1e-6)
    plan = simulate(t, _plan(_ZERO_COPY_PLAN, 2 * MiB, 4, [2 * MiB, 2 * MiB]), _hw(), 2 * MiB)
    assert plan.iteration_time_s >= lp.iteration_time_s
    assert simulate(t, "bound", _hw(), 2 * MiB).iteration_time_s < lp.iteration_time_s


@needs_highspy
def test_new_data_and_clean_copies_need_nothing_moved_back():
    # P (4 MiB) is written whole, reading nothing, at t0; Q (4 MiB) only read at t1; budget
    # 4 MiB, 1 ms ticks, 4 MiB/ms. P's old data is dead at each write and Q's host copy
    # stays valid, so Q comes in during t0 (1 ms) and is dropped for nothing before the next
    # t0: the LP needs no stall at all
    b = TraceBuilder(name="write-only")
    p = b.alloc(4 * MiB)
    q = b.alloc(4 * MiB)
    b.access(p, AccessMode.WRITE)
    b.next_tick(1e6)
    b.access(q, AccessMode.WRITE)
    b.next_tick(1e6)
    for _ in range(3):
        b.mark()
        b.access(p, AccessMode.WRITE)
        b.next_tick(1e6)
        b.access(q, AccessMode.READ)
        b.next_tick(1e6)
    t = b.build()
    r = simulate(t, LP_BOUND, _hw(4.0), 4 * MiB)
    assert r.iteration_time_s == pytest.approx(2 * MS)
    assert r.bytes_h2d >= 4 * MiB * (1 - 1e-6)  # Q crosses (P is born on the device)
    assert simulate(t, "demand", _hw(4.0), 4 * MiB).iteration_time_s >= r.iteration_time_s


@pytest.fixture(scope="module")
def zoo_cases():
    from uvm_sched.trace import zoo

    return {"unet": zoo.record("unet", batch=2, image=64, iters=3),
            "gpt2_small": zoo.record("gpt2_small", batch=1, seq=64, iters=3)}


@needs_highspy
@pytest.mark.parametrize("model", ["unet", "gpt2_small"])
@pytest.mark.parametrize("pct", ["75%", "50%"])
@pytest.mark.parametrize("slots", ["uniform", "weighted"])
def test_the_lp_bound_is_at_least_ideal_and_at_most_every_simulated_policy(zoo_cases, model, pct,
                                                                           slots):
    t = zoo_cases[model]
    # a coarse program keeps the test fast; coarsening keeps it a relaxation, over uniform
    # slots and over slots weighted by where the budget binds (_lp_slots) alike
    df = compare(t, "h200-pcie5", [pct], policies=["ideal", LP_BOUND, "demand",
                                                   "prefetch-on-alloc", "swap-activations",
                                                   "uvm-sched"], lp_max_columns=15_000,
                 lp_slots=slots)
    assert (df["error"] == "").all(), df["error"].tolist()
    by = dict(zip(df["policy"], df["iteration_time_s"]))
    assert by[LP_BOUND] >= by["ideal"] * (1 - 1e-9)
    for p in ("demand", "prefetch-on-alloc", "swap-activations", "uvm-sched"):
        assert by[p] >= by[LP_BOUND] * (1 - 1e-9), (p, by)


@needs_highspy
@pytest.mark.parametrize("seed", [0, 1])
def test_a_program_over_the_size_limit_is_coarsened_in_time_and_stays_below_the_exact_one(seed):
    t = _random_trace(seed)
    exact = simulate(t, LP_BOUND, "h200-pcie5", "50%", lp_coarsen=1)
    limit = exact.counters["lp_columns"] * 2 // 3
    coarse = simulate(t, LP_BOUND, "h200-pcie5", "50%", lp_max_columns=limit)
    assert coarse.counters["lp_ticks_per_slot"] > 1
    assert coarse.counters["lp_columns"] <= limit
    ideal = simulate(t, "ideal", "h200-pcie5", "50%")
    assert ideal.iteration_time_s * (1 - 1e-9) <= coarse.iteration_time_s
    assert coarse.iteration_time_s <= exact.iteration_time_s * (1 + 1e-9)
    assert exact.iteration_time_s <= simulate(t, "demand", "h200-pcie5", "50%").iteration_time_s


@needs_highspy
def test_a_program_too_large_even_coarsened_is_refused_with_its_size():
    from uvm_sched.sim._lp import LpTooLarge

    with pytest.raises(LpTooLarge, match=r"needs [\d,]+ columns even with every tick of the "
                                         r"[\d,]+-tick window merged, over the limit of 5"):
        simulate(_zero_copy_trace(), LP_BOUND, _hw(), 2 * MiB, lp_max_columns=5)


def test_without_highspy_the_lp_bound_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "highspy", None)
    with pytest.raises(ImportError, match="pip install highspy"):
        simulate(_zero_copy_trace(), LP_BOUND, _hw(), 2 * MiB)
    # compare() keeps going and says why in the row
    df = compare(_zero_copy_trace(), _hw(), [2 * MiB], policies=["demand", LP_BOUND])
    assert "pip install highspy" in df.loc[df.policy == LP_BOUND, "error"].item()


@needs_highspy
def test_blocks_alike_form_one_class_and_the_optimum_is_worked_by_hand():
    # the case above with Q split into four 1 MiB blocks read at the same tick: they give
    # the same sub-program, so the program has two classes (P, the four Qs) and the same
    # optimum, 2 ms (no stall), as with one sub-program per block
    b = TraceBuilder(name="write-only-split")
    p = b.alloc(4 * MiB)
    qs = [b.alloc(MiB) for _ in range(4)]
    b.access(p, AccessMode.WRITE)
    b.next_tick(1e6)
    for q in qs:
        b.access(q, AccessMode.WRITE)
    b.next_tick(1e6)
    for _ in range(3):
        b.mark()
        b.access(p, AccessMode.WRITE)
        b.next_tick(1e6)
        for q in qs:
            b.access(q, AccessMode.READ)
        b.next_tick(1e6)
    t = b.build()
    r = simulate(t, LP_BOUND, _hw(4.0), 4 * MiB)
    assert r.counters["lp_classes"] == 2 and r.counters["lp_blocks"] == 5
    assert r.iteration_time_s == pytest.approx(2 * MS)
    from uvm_sched.sim._lp import lp_bound
    from uvm_sched.sim._prep import prepare

    hw = _hw(4.0)
    prep = prepare(t, hw.va_block_bytes, hw.page_bytes)
    apart = lp_bound(prep, hw, 4 * MiB, merge=False)
    assert apart.classes == 5 and apart.time_s == pytest.approx(2 * MS)


def _class_cases():
    from uvm_sched.pattern._synth import training_trace

    return [("mlp-l3", training_trace(layers=3, iters=3, batch=64, markers=True)),
            ("mlp-l5", training_trace(layers=5, iters=3, batch=512, markers=True)),
            ("random-0", _random_trace(0)), ("random-1", _random_trace(1))]


@needs_highspy
@pytest.mark.parametrize("case", range(4))
@pytest.mark.parametrize("pct", ["60%", "85%"])
def test_block_classes_keep_the_optimum_of_one_program_per_block(case, pct):
    from uvm_sched.hw import load_profile
    from uvm_sched.sim._lp import lp_bound
    from uvm_sched.sim._prep import prepare
    from uvm_sched._budget import resolve_budget

    name, t = _class_cases()[case]
    hw = load_profile("h200-pcie5")
    prep = prepare(t, hw.va_block_bytes, hw.page_bytes)
    B = resolve_budget(pct, t.peak_bytes, default_bytes=hw.device_capacity_bytes)
    for k in (1, 3):
        merged = lp_bound(prep, hw, B, coarsen=k)
        apart = lp_bound(prep, hw, B, coarsen=k, merge=False)
        assert merged.classes <= apart.classes
        assert merged.time_s == pytest.approx(apart.time_s, rel=1e-7), (name, k)


@needs_highspy
@pytest.mark.parametrize("case", range(4))
def test_a_coarse_program_of_classes_is_between_ideal_and_the_exact_lp(case):
    name, t = _class_cases()[case]
    exact = simulate(t, LP_BOUND, "h200-pcie5", "60%", lp_coarsen=1)
    ideal = simulate(t, "ideal", "h200-pcie5", "60%").iteration_time_s
    for k in (2, 5, 1000):
        coarse = simulate(t, LP_BOUND, "h200-pcie5", "60%", lp_coarsen=k)
        assert coarse.counters["lp_classes"] <= exact.counters["lp_classes"]
        assert ideal * (1 - 1e-9) <= coarse.iteration_time_s
        assert coarse.iteration_time_s <= exact.iteration_time_s * (1 + 1e-9), (name, k)


@needs_highspy
def test_past_its_time_budget_the_lp_reports_the_fast_bound_and_says_why():
    t = _random_trace(0)
    r = simulate(t, LP_BOUND, "h200-pcie5", "50%", lp_time_limit_s=1e-6)
    assert r.policy == LP_BOUND and r.counters["lp_fallback"] == "bound"
    assert "within its 1e-06 s budget" in r.counters["lp_status"]
    assert "columns" in r.counters["lp_status"]
    fast = simulate(t, "bound", "h200-pcie5", "50%")
    assert r.iteration_time_s == fast.iteration_time_s
    assert r.iteration_time_s <= simulate(t, "demand", "h200-pcie5", "50%").iteration_time_s


@needs_highspy
@pytest.mark.parametrize("case", range(4))
def test_a_finer_partition_never_gives_a_smaller_bound_than_a_coarser_one_it_refines(case):
    # with k' dividing k every slot of k ticks is a union of slots of k' ticks, so the
    # coarse program is a relaxation of the fine one (Note [The LP bound]'s coarsening
    # argument): along the chain 12 -> 6 -> 3 -> 1 the optimum may only rise
    name, t = _class_cases()[case]
    times = [simulate(t, LP_BOUND, "h200-pcie5", "60%", lp_coarsen=k).iteration_time_s
             for k in (12, 6, 3, 1)]
    for coarse, fine in zip(times, times[1:]):
        assert coarse <= fine * (1 + 1e-9), (name, times)
