"""The LP bound over non-uniform slots (Note [Slot partitions]): any partition of the
window into consecutive slots keeps it a lower bound, a refinement never lowers it, and
uniform slots given as starts are the program of ``lp_coarsen``."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from uvm_sched.sim import LP_BOUND, simulate
from uvm_sched.sim._lp_slots import Slots, family, tick_weights, uniform, weighted

from test_sim_lp import _class_cases  # noqa: E402  (tests/ is on the path)

needs_highspy = pytest.mark.skipif(importlib.util.find_spec("highspy") is None,
                                   reason="the LP bound needs HiGHS: pip install highspy")


def test_a_partition_names_each_ticks_slot_and_whether_it_starts_one():
    part = Slots([0, 2, 3, 7], 9)
    assert part.S == 4 and part.widest == 4
    assert part.of.tolist() == [0, 0, 1, 2, 2, 2, 2, 3, 3]
    assert part.first.tolist() == [True, False, True, True, False, False, False, True, False]
    assert part.sums(np.arange(9)).tolist() == [1, 2, 18, 15]
    assert uniform(9, 4).starts.tolist() == [0, 4, 8]


def test_a_partition_must_start_at_tick_zero_and_stay_in_the_window():
    with pytest.raises(ValueError, match=r"begin at tick 0 and lie in \[0, 9\)"):
        Slots([1, 4], 9)
    with pytest.raises(ValueError, match=r"begin at tick 0 and lie in \[0, 9\)"):
        Slots([0, 9], 9)


@pytest.mark.parametrize("seed", range(5))
def test_weighted_slots_at_a_multiple_of_n_refine_those_at_n(seed):
    rng = np.random.default_rng(seed)
    dur = rng.exponential(1e-3, 300)
    w = tick_weights(dur, rng.uniform(0, 2e9, 300), int(1e9))
    assert (w > 0).all()
    for n in (1, 3, 7, 20):
        coarse, fine = weighted(w, n), weighted(w, 4 * n)
        assert set(coarse.starts.tolist()) <= set(fine.starts.tolist()), n
        # about n slots of equal weight: none holds more than one step plus one tick
        assert coarse.sums(w).max() <= w.sum() / n + w.max() + 1e-9
    part_at, finest = family(_Prep(dur), 1, "weighted")
    assert part_at(1).S == len(dur) and part_at(finest).S == 1  # exact .. one slot


class _Prep:
    """Just what ``family`` reads of a prepared trace."""

    def __init__(self, w) -> None:
        self.window = (0, len(w))
        self.dur_s = np.asarray(w, float)
        self.balloc_tick = np.zeros(0, np.int64)
        self.bfree_tick = np.zeros(0, np.int64)
        self.bsize = np.zeros(0, np.int64)


def _prep_and_budget(t, pct):
    from uvm_sched._budget import resolve_budget
    from uvm_sched.hw import load_profile
    from uvm_sched.sim._prep import prepare

    hw = load_profile("h200-pcie5")
    prep = prepare(t, hw.va_block_bytes, hw.page_bytes)
    return prep, hw, resolve_budget(pct, t.peak_bytes, default_bytes=hw.device_capacity_bytes)


@needs_highspy
@pytest.mark.parametrize("case", range(4))
def test_uniform_slots_given_as_starts_are_the_program_of_lp_coarsen(case):
    from uvm_sched.sim._lp import lp_bound

    name, t = _class_cases()[case]
    prep, hw, B = _prep_and_budget(t, "60%")
    W = prep.window[1] - prep.window[0]
    for k in (1, 3, 7):
        a = lp_bound(prep, hw, B, coarsen=k)
        b = lp_bound(prep, hw, B, slots=np.arange(0, W, k))
        assert (a.columns, a.rows) == (b.columns, b.rows), (name, k)
        assert a.time_s == pytest.approx(b.time_s, rel=1e-9), (name, k)


@needs_highspy
@pytest.mark.parametrize("case", range(4))
@pytest.mark.parametrize("seed", range(3))
def test_a_random_refinement_never_gives_a_smaller_bound_and_none_beats_the_exact_lp(case, seed):
    # a coarse partition's slots are unions of the fine one's: its program is one more
    # coarsening of the fine program (Note [Slot partitions]), so along a chain of random
    # refinements down to one tick per slot the optimum may only rise
    from uvm_sched.sim._lp import lp_bound

    name, t = _class_cases()[case]
    prep, hw, B = _prep_and_budget(t, "60%")
    W = prep.window[1] - prep.window[0]
    rng = np.random.default_rng(seed)
    order = rng.permutation(np.arange(1, W))
    ideal = simulate(t, "ideal", hw, B).iteration_time_s
    times = []
    for n in (0, 2, W // 8, W // 3, W - 1):  # the first n of one random order: nested
        starts = np.concatenate([[0], np.sort(order[:n])])
        r = lp_bound(prep, hw, B, slots=starts, merge=bool(seed % 2))
        times.append(r.time_s)
    for coarse, fine in zip(times, times[1:]):
        assert coarse <= fine * (1 + 1e-9), (name, times)
    assert ideal * (1 - 1e-9) <= times[0]
    assert times[-1] == pytest.approx(lp_bound(prep, hw, B, coarsen=1).time_s, rel=1e-9)


@needs_highspy
@pytest.mark.parametrize("case", range(4))
def test_weighted_levels_that_refine_each_other_give_rising_bounds(case):
    from uvm_sched.sim._lp import lp_bound

    name, t = _class_cases()[case]
    prep, hw, B = _prep_and_budget(t, "60%")
    part_at, finest = family(prep, B, "weighted")
    times = [lp_bound(prep, hw, B, slots=weighted(tick_weights(
        prep.dur_s[prep.window[0]:prep.window[1]], _live(prep), B), n).starts).time_s
        for n in (1, 2, 4, 8, 16, 32, finest)]
    for coarse, fine in zip(times, times[1:]):
        assert coarse <= fine * (1 + 1e-9), (name, times)
    assert part_at(1).S == prep.window[1] - prep.window[0]


def _live(prep):
    from uvm_sched.sim._lp_slots import live_bytes

    return live_bytes(prep)


@needs_highspy
@pytest.mark.parametrize("case", range(4))
@pytest.mark.parametrize("slots", ["uniform", "weighted"])
def test_refining_within_a_time_budget_is_between_the_first_solve_and_the_exact_lp(case, slots):
    name, t = _class_cases()[case]
    exact = simulate(t, LP_BOUND, "h200-pcie5", "60%", lp_coarsen=1)
    start = exact.counters["lp_columns"] // 6
    first = simulate(t, LP_BOUND, "h200-pcie5", "60%", lp_max_columns=start, lp_slots=slots)
    refined = simulate(t, LP_BOUND, "h200-pcie5", "60%", lp_max_columns=start,
                       lp_slots=slots, lp_refine_s=60.0)
    assert first.iteration_time_s <= refined.iteration_time_s * (1 + 1e-9), name
    assert refined.iteration_time_s <= exact.iteration_time_s * (1 + 1e-9), name
    if name == "mlp-l5":  # uniform at a sixth of the exact columns: half the exact bound
        # (1.30 vs 2.56 ms; weighted slots 2.39); a program this small is solved in
        # milliseconds: the budget reaches the exact optimum
        assert slots == "weighted" or first.iteration_time_s < 0.9 * exact.iteration_time_s
        assert refined.iteration_time_s == pytest.approx(exact.iteration_time_s, rel=1e-9)


def test_a_refinement_budget_must_be_positive():
    from uvm_sched.sim._lp_refine import lp_bound_within

    with pytest.raises(ValueError, match="must be positive; got 0 s"):
        lp_bound_within(None, None, 1, 0)
