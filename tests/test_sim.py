"""The simulator: hand-worked cases, the Plan executor, invariants on every policy."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from uvm_sched.hw import load_profile
from uvm_sched.planner import Plan
from uvm_sched.sim import POLICIES, BudgetError, SimResult, compare, simulate
from uvm_sched.trace import AccessMode, TraceBuilder

MiB = 1 << 20
MS = 1e-3


def _hw(**kw):
    """Round numbers so the cases can be worked by hand: 4 MiB/ms eviction, 8 MiB/ms fault
    migration, 0.25 ms per 2 MiB fault batch, 4 MiB/ms prefetch; a prefetch/advise call
    costs 1 fs (next to nothing: these cases time copies and faults; the call cost has its
    own in test_sim_advice.py)."""
    base = dict(
        h2d_prefetch_Bps=4 * MiB / MS, d2h_prefetch_Bps=8 * MiB / MS, h2d_fault_Bps=8 * MiB / MS,
        d2h_evict_Bps=4 * MiB / MS, remote_access_Bps=1 * MiB / MS, fault_batch_latency_s=0.25 * MS,
        fault_batch_bytes=2 * MiB, page_bytes=64 * 1024, va_block_bytes=2 * MiB,
        action_call_s=1e-15,
    )
    base.update(kw)
    return dataclasses.replace(load_profile("h200-pcie5"), name="test", **base)


def _two_written(name: str):
    """A builder holding two 4 MiB blocks A and X, written at ticks 0 and 1 (1 ms each):
    (builder, A, X)."""
    b = TraceBuilder(name=name)
    a = b.alloc(4 * MiB)
    x = b.alloc(4 * MiB)
    b.access(a, AccessMode.WRITE)
    b.next_tick(1e6)
    b.access(x, AccessMode.WRITE)
    b.next_tick(1e6)
    return b, a, x


def _thrash_trace(iters=3):
    """Two 4 MiB blocks A and X used in turn, one per 1 ms tick."""
    b, a, x = _two_written("thrash")
    for _ in range(iters):
        b.mark()
        b.access(a, AccessMode.READ_WRITE)
        b.next_tick(1e6)
        b.access(x, AccessMode.READ_WRITE)
        b.next_tick(1e6)
    return b.build()


def test_one_block_thrashing_costs_eviction_plus_fault_per_tick():
    # budget holds one block: every tick writes back the other (4 MiB at 4 MiB/ms = 1 ms)
    # and faults its own in (2 batches x 0.25 ms + 4 MiB at 8 MiB/ms = 1 ms), then computes
    # 1 ms: 3 ms per tick, 6 ms per 2-tick iteration.
    r = simulate(_thrash_trace(), "demand", _hw(), 4 * MiB)
    assert r.iteration_time_s == pytest.approx(6 * MS)
    assert r.compute_time_s == pytest.approx(2 * MS)
    assert r.stall_breakdown["eviction"] == pytest.approx(2 * MS)
    assert r.stall_breakdown["fault"] == pytest.approx(2 * MS)
    assert r.stall_breakdown["link"] == pytest.approx(0)
    assert r.bytes_h2d == 8 * MiB and r.bytes_d2h == 8 * MiB
    assert r.faults == 4
    assert r.peak_resident_bytes == 4 * MiB
    # with room for both there is nothing to move
    assert simulate(_thrash_trace(), "demand", _hw(), 8 * MiB).iteration_time_s == pytest.approx(2 * MS)


def _stream_trace(n_blocks: int, *, idle_ticks: int = 0, name: str = "stream"):
    """``n_blocks`` persistent 4 MiB blocks written one per 1 ms tick, then 3 iterations
    that read each in turn (1 ms a tick) and then run ``idle_ticks`` more 1 ms ticks that
    touch only a 64 KiB block."""
    b = TraceBuilder(name=name)
    blocks = [b.alloc(4 * MiB) for _ in range(n_blocks)]
    small = b.alloc(64 * 1024)
    for x in blocks:
        b.access(x, AccessMode.WRITE)
        b.next_tick(1e6)
    for _ in range(3):
        b.mark()
        for x in blocks:
            b.access(x, AccessMode.READ)
            b.next_tick(1e6)
        for _ in range(idle_ticks):
            b.access(small, AccessMode.READ_WRITE)
            b.next_tick(1e6)
    return b.build()


def test_a_cyclic_stream_bigger_than_the_device_misses_every_time():
    # 8 persistent 4 MiB blocks read in a cycle with room for 2: eviction by migration age
    # always throws out the block needed soonest, so every tick pays 1 ms + 1 ms as above.
    t = _stream_trace(8)
    r = simulate(t, "demand", _hw(), 8 * MiB)
    assert r.iteration_time_s == pytest.approx(8 * 3 * MS)
    assert r.bytes_h2d == 32 * MiB and r.bytes_d2h == 32 * MiB
    # the bound: 24 MiB must come in at 8 MiB/ms (3 ms), which hides behind 8 ms of compute
    bound = simulate(t, "bound", _hw(), 8 * MiB)
    assert bound.iteration_time_s == pytest.approx(8 * MS)
    # with a slow link the transfer dominates: 24 MiB at 1 MiB/ms after the first boundary,
    # all of it before the last block's kernel starts (its deadline), which then runs 1 ms
    slow = _hw(h2d_prefetch_Bps=1 * MiB / MS, h2d_fault_Bps=1 * MiB / MS)
    assert simulate(t, "bound", slow, 8 * MiB).iteration_time_s == pytest.approx(25 * MS)
    assert simulate(t, "demand", slow, 8 * MiB).iteration_time_s >= 25 * MS


def _hide_trace(iters=3, cut_short=False):
    """Per iteration: tick a allocs S, tick a+1 allocs U, tick a+2 reads P, S, U and frees
    S, U. P (4 MiB, persistent) is the first allocation of the trace. ``cut_short`` adds a
    last iteration that stops after its first two allocations."""
    b = TraceBuilder(name="hide+partial" if cut_short else "hide")
    p = b.alloc(4 * MiB)
    b.access(p, AccessMode.WRITE)
    b.next_tick(1e6)
    for i in range(iters + cut_short):
        b.mark()
        s = b.alloc(MiB)
        b.access(s, AccessMode.WRITE)
        b.next_tick(1e6)
        u = b.alloc(MiB)
        b.access(u, AccessMode.WRITE)
        b.next_tick(1e6)
        if i == iters:
            break  # the cut-short iteration
        for x in (p, s, u):
            b.access(x)
        b.free(s)
        b.free(u)
        b.next_tick(1e6)
    return b.build()


def _hide_plan(**meta):
    # event 1 = ALLOC U: prefetch P, issued before tick a+1's kernel, 4 MiB at 4 MiB/ms lands
    # exactly as that 1 ms kernel ends; event 3 = FREE U: evict P after tick a+2's kernel.
    m = dict(budget_bytes=6 * MiB, period_events=4, alloc_sizes=[MiB, MiB])
    m.update(meta)
    return Plan(
        {"tick": [1, 3], "action": ["prefetch_to_device", "prefetch_to_host"], "block": [0, 0],
         "persistent": [True, True], "offset": [0, 0], "bytes": [4 * MiB, 4 * MiB]}, m)


def test_a_prefetch_that_exactly_hides_behind_a_kernel_costs_nothing():
    t = _hide_trace()
    r = simulate(t, _hide_plan(), _hw(), 6 * MiB)
    assert r.iteration_time_s == pytest.approx(3 * MS)
    assert r.stall_time_s == pytest.approx(0, abs=1e-12)
    assert r.bytes_h2d == 4 * MiB and r.bytes_d2h == 4 * MiB and r.faults == 0
    assert set(r.transfers["cause"]) == {"plan"}
    # half the link: the kernel that reads P waits 1 ms for the copy in flight ("link")
    r2 = simulate(t, _hide_plan(), _hw(h2d_prefetch_Bps=2 * MiB / MS), 6 * MiB)
    assert r2.iteration_time_s == pytest.approx(4 * MS)
    assert r2.stall_breakdown["link"] == pytest.approx(1 * MS)


def test_a_plan_is_disarmed_for_an_iteration_whose_sizes_diverge():
    t = _hide_trace()
    plan = _hide_plan(alloc_sizes=[MiB, 2 * MiB])
    r = simulate(t, plan, _hw(), 6 * MiB)
    assert r.divergences == 1
    assert not (r.transfers["cause"] == "plan").any()


def test_actions_lists_what_the_plan_executor_carried_out_over_the_whole_trace():
    # _hide_plan plus a discard of U at its FREE (event 3): U is 1 MiB, it shares 2 MiB
    # pages with other blocks, so the executor skips it and so must the record
    base = _hide_plan()
    extra = {"tick": 3, "action": "discard", "block": 1, "persistent": False, "offset": 0,
             "bytes": MiB}
    acts = base.actions.to_dict("records") + [extra]
    plan = Plan({c: [a[c] for a in acts] for c in extra}, base.meta)
    r = simulate(_hide_trace(iters=3), plan, _hw(), 6 * MiB)
    assert list(r.actions.columns) == ["tick", "stage", "action", "block", "event"]
    # iterations start at ticks 1, 4, 7: event 1 (ALLOC U) is at tick a+1, before its
    # kernel; event 3 (FREE U) at tick a+2, after it; P is trace block 0
    want = []
    for a in (1, 4, 7):
        want += [(a + 1, "pre", "prefetch_to_device", 0, 1),
                 (a + 2, "post", "prefetch_to_host", 0, 3)]
    assert list(r.actions.itertuples(index=False, name=None)) == want
    assert r.counters["window_start"] == 7  # the warm-up iterations are in it too
    json.dumps(r.to_dict())  # the frame stays out of the JSON form
    assert "actions" not in r.to_dict()
    # a diverging iteration carries nothing out; baselines have an empty record
    div = simulate(_hide_trace(iters=3), _hide_plan(alloc_sizes=[MiB, 2 * MiB]), _hw(), 6 * MiB)
    assert len(div.actions) == 0 and list(div.actions.columns) == list(r.actions.columns)
    for pol in ("demand", "swap-activations", "ideal", "bound"):
        assert len(simulate(_hide_trace(), pol, _hw(), 6 * MiB).actions) == 0


def test_actions_to_end_runs_through_an_incomplete_last_iteration():
    t = _hide_trace(iters=3, cut_short=True)
    short = simulate(t, _hide_plan(), _hw(), 6 * MiB)
    full = simulate(t, _hide_plan(), _hw(), 6 * MiB, actions_to_end=True)
    assert short.counters["window_stop"] == 10 and t.n_ticks == 12
    assert int(short.actions["tick"].max()) == 9
    extra = full.actions[full.actions["tick"] >= 10]
    assert list(extra.itertuples(index=False, name=None)) == [
        (11, "pre", "prefetch_to_device", 0, 1)]
    # the window's figures do not change
    a, b2 = short.to_dict(), full.to_dict()
    assert a == b2


def test_period_sync_matches_marker_sync_on_a_regular_trace():
    t = _hide_trace()
    a = simulate(t, _hide_plan(), _hw(), 6 * MiB)
    # warm-up has one ALLOC (P) before the first iteration: with period sync the
    # iterations are counted from event 0, so shift nothing but check it runs and is sane
    b = simulate(t, _hide_plan(sync="period"), _hw(), 6 * MiB)
    assert b.iteration_time_s >= a.compute_time_s


def test_period_sync_from_the_iterations_first_event_is_marker_sync():
    t = _hide_trace()
    a = simulate(t, _hide_plan(), _hw(), 6 * MiB)
    # P's ALLOC (event 0) precedes the first iteration: the grid starts at event 1
    b = simulate(t, _hide_plan(sync="period", period_start_event=1), _hw(), 6 * MiB)
    assert b.divergences == 0 and a.divergences == 0
    assert b.iteration_time_s == pytest.approx(a.iteration_time_s)
    assert b.actions.equals(a.actions) and len(a.actions) == 6
    # counted from event 0 instead, the grid is one event early: the first "iteration"
    # (P's ALLOC, then S, U, free S) diverges, the later ones start at the FREE of U, so
    # event 1 is the next ALLOC S (tick a) and event 3 the FREE of S (tick a+2)
    c = simulate(t, _hide_plan(sync="period"), _hw(), 6 * MiB, actions_to_end=True)
    shifted = []
    for a in (4, 7):
        shifted += [(a, "pre", "prefetch_to_device", 0, 1), (a + 2, "post", "prefetch_to_host", 0, 3)]
    assert list(c.actions.itertuples(index=False, name=None)) == shifted


def test_budget_below_one_ticks_working_set_is_rejected_naming_the_tick():
    t = _thrash_trace()
    with pytest.raises(BudgetError, match=r"tick \d+.*4,194,304 bytes"):
        simulate(t, "demand", _hw(), 3 * MiB)


def _random_trace(seed, iters=3):
    rng = np.random.default_rng(seed)
    b = TraceBuilder(name=f"rand{seed}")
    weights = [b.alloc(int(rng.integers(1, 6)) * MiB + int(rng.integers(0, 4096))) for _ in range(4)]
    for w in weights:
        b.access(w, AccessMode.WRITE)
    b.next_tick(5e5)
    n_layers = 6
    sizes = [int(rng.integers(1, 8)) * MiB + int(rng.integers(0, 65536)) for _ in range(n_layers)]
    for _ in range(iters):
        b.mark()
        acts = []
        for i in range(n_layers):
            a = b.alloc(sizes[i])
            b.access(a, AccessMode.WRITE)
            b.access(weights[i % 4])
            if acts:
                b.access(acts[-1])
            acts.append(a)
            b.next_tick(float(rng.integers(2, 10)) * 1e5)
        for i in reversed(range(n_layers)):
            tmp = b.alloc(MiB)
            b.access(tmp, AccessMode.WRITE)
            b.access(acts[i])
            b.access(weights[i % 4], AccessMode.READ_WRITE, offset=0, length=MiB // 2)
            b.free(tmp)
            b.free(acts[i])
            b.next_tick(float(rng.integers(2, 10)) * 1e5)
    return b.build()


POLICIES_NO_PLANNER = [p for p in POLICIES if p != "uvm-sched"]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("pct", ["100%", "60%", "45%"])
@pytest.mark.parametrize("pool", [True, False])
def test_invariants_hold_for_every_policy(seed, pct, pool):
    t = _random_trace(seed)
    hw = load_profile("h200-pcie5")
    try:
        res = {p: simulate(t, p, hw, pct, pool=pool) for p in POLICIES_NO_PLANNER}
    except BudgetError:
        pytest.skip("budget below a working set for this seed")
    ideal, bound = res["ideal"], res["bound"]
    for p, r in res.items():
        assert isinstance(r, SimResult)
        assert r.iteration_time_s >= r.compute_time_s - 1e-12, p
        assert r.iteration_time_s >= ideal.iteration_time_s - 1e-12, p
        assert r.iteration_time_s >= bound.iteration_time_s * (1 - 1e-9), p
        assert r.stall_time_s == pytest.approx(sum(r.stall_breakdown.values()), abs=1e-9), p
        json.dumps(r.to_dict())
        if p in ("ideal", "bound"):
            continue
        assert r.peak_resident_bytes <= r.budget_bytes, p
        assert (r.timeline["resident_bytes"] <= r.budget_bytes).all(), p
        assert r.timeline["stall_s"].sum() == pytest.approx(r.stall_time_s, abs=1e-9)
        assert r.timeline["compute_s"].sum() == pytest.approx(r.compute_time_s)
        tr = r.transfers
        assert int(tr.loc[tr.direction == "h2d", "bytes"].sum()) == r.bytes_h2d, p
        assert int(tr.loc[tr.direction == "d2h", "bytes"].sum()) == r.bytes_d2h, p
        assert int(r.timeline["h2d_bytes"].sum()) == r.bytes_h2d
        c = r.counters
        # the byte ledger: what came onto the device minus what left is what is held
        inflow = c["ledger_populated"] + c["ledger_migrated_in"] + c["ledger_reused_in"]
        outflow = (c["ledger_evicted_out"] + c["ledger_dropped_dup"] - c["pending_end"]
                   + c["ledger_discarded"] + c["ledger_freed"] + c["ledger_reused_out"])
        assert inflow - outflow == c["claimed_end"], p
        assert c["resident_end"] + c["pending_end"] == c["claimed_end"], p
        # determinism
        again = simulate(t, p, hw, pct, pool=pool)
        assert again.to_dict() == r.to_dict(), p


def test_demand_with_room_for_everything_moves_nothing_after_warm_up():
    t = _random_trace(3)
    r = simulate(t, "demand", "h200-pcie5", "100%")
    assert r.bytes_h2d == 0 and r.bytes_d2h == 0
    # the pool hands out freed resident ranges (split ones keep their tail): no first-touch
    # faults once warm, although the sizes do not match one to one
    assert r.stall_time_s == pytest.approx(0, abs=1e-12)
    assert r.counters["ledger_reused_in"] > 0
    # cudaFree per tensor: every new block is fresh memory and faults on first touch
    r = simulate(t, "demand", "h200-pcie5", "100%", pool=False)
    assert r.bytes_h2d == 0 and r.faults > 0 and r.stall_breakdown["fault"] > 0


def test_extremal_assumption_without_access_rows():
    # alloc = write, free = read. Per iteration (1 ms ticks, room for 2 of 3 blocks,
    # cudaFree semantics): t0 alloc A: first touch, 2 batches = 0.5 ms; t1 alloc X: 0.5 ms;
    # t2 alloc Y: write back A (1 ms) + 0.5 ms; t3 free A (read): write back X (1 ms), fault A
    # (0.5 ms latency + 0.5 ms bytes); t4 free X, Y (read): room is free, fault X (1 ms).
    b = TraceBuilder(name="extremal")
    for _ in range(3):
        b.mark()
        a = b.alloc(4 * MiB)
        b.next_tick(1e6)
        x = b.alloc(4 * MiB)
        b.next_tick(1e6)
        y = b.alloc(4 * MiB)
        b.next_tick(1e6)
        b.free(a)
        b.next_tick(1e6)
        b.free(x)
        b.free(y)
        b.next_tick(1e6)
    t = b.build()
    assert not t.has_accesses
    r = simulate(t, "demand", _hw(), 8 * MiB, pool=False)
    assert r.iteration_time_s == pytest.approx(10.5 * MS)
    assert r.stall_breakdown["eviction"] == pytest.approx(2 * MS)
    assert r.stall_breakdown["fault"] == pytest.approx(3.5 * MS)
    assert r.bytes_h2d == 8 * MiB and r.bytes_d2h == 8 * MiB


def test_extremal_budget_check_counts_the_free_tick():
    b = TraceBuilder(name="extremal")
    b.mark()
    a = b.alloc(4 * MiB)
    b.next_tick(1e6)
    x = b.alloc(4 * MiB)
    b.next_tick(1e6)
    b.free(a)
    b.free(x)
    b.next_tick(1e6)
    with pytest.raises(BudgetError, match="tick 2"):
        simulate(b.build(), "demand", _hw(), 5 * MiB)


def _ro_trace():
    b, a, x = _two_written("ro")
    for _ in range(3):
        b.mark()
        s_ = b.alloc(64 * 1024)
        b.access(s_, AccessMode.WRITE)
        b.access(a)
        b.next_tick(1e6)
        b.access(x)
        b.free(s_)
        b.next_tick(1e6)
    return b.build()


def test_read_mostly_blocks_are_dropped_not_written_back():
    t = _ro_trace()
    budget = 4 * MiB + 128 * 1024
    plan = Plan({"tick": [0, 0], "action": ["advise_read_mostly"] * 2, "block": [0, 1],
                 "persistent": [True, True], "offset": [0, 0], "bytes": [4 * MiB] * 2},
                dict(budget_bytes=budget, period_events=2, alloc_sizes=[64 * 1024]))
    demand = simulate(t, "demand", _hw(), budget)
    ro = simulate(t, plan, _hw(), budget)
    assert demand.bytes_d2h >= 8 * MiB
    assert ro.bytes_d2h < MiB  # only the small scratch block may be written back
    assert ro.bytes_h2d == demand.bytes_h2d == 8 * MiB
    assert ro.iteration_time_s < demand.iteration_time_s


def test_remote_access_advice_reads_over_the_link_without_migrating():
    t = _ro_trace()
    budget = 4 * MiB + 128 * 1024
    acts = {"tick": [0, 0], "action": ["advise_preferred_host", "advise_accessed_by"],
            "block": [1, 1], "persistent": [True, True], "offset": [0, 0], "bytes": [4 * MiB] * 2}
    plan = Plan(acts, dict(budget_bytes=budget, period_events=2, alloc_sizes=[64 * 1024]))
    r = simulate(t, plan, _hw(), budget)
    # X (4 MiB) is read in place every iteration at 1 MiB/ms: 4 ms of link stall at least
    assert r.stall_breakdown["link"] >= 4 * MS - 1e-9
    assert (r.transfers["cause"] == "remote").sum() == 1


def _mlp_trace(layers=4, iters=3):
    """Each layer has its own weight; forward allocs an activation per layer, backward
    reads them in reverse and frees them."""
    b = TraceBuilder(name="mlp")
    ws = [b.alloc(2 * MiB) for _ in range(layers)]
    for w in ws:
        b.access(w, AccessMode.WRITE)
    b.next_tick(1e6)
    for _ in range(iters):
        b.mark()
        acts = []
        for i in range(layers):
            a = b.alloc(4 * MiB)
            b.access(ws[i])
            b.access(a, AccessMode.WRITE)
            acts.append(a)
            b.next_tick(1e6)
        for i in reversed(range(layers)):
            b.access(ws[i], AccessMode.READ_WRITE)
            b.access(acts[i])
            b.free(acts[i])
            b.next_tick(1e6)
    return b.build()


def test_swap_activations_evicts_after_forward_and_prefetches_one_tick_before_backward():
    from uvm_sched.sim._policies import SwapActivations
    from uvm_sched.sim._prep import prepare

    t = _mlp_trace()
    prep = prepare(t, 2 * MiB, 64 * 1024)
    s = SwapActivations(prep)
    # iteration 1 spans ticks 1..8: forward 1..4 (the last weight is first read at 4)
    assert s.turns[1] == 4
    # activation 0 (tick 1) is next used at tick 8: evicted after tick 1, fetched at tick 7;
    # activation 3 is used at 4 and 5: too close to swap
    post = {k: [b for _, b, _, _ in v] for k, v in s.post.items() if 1 <= k <= 8}
    pre = {k: [b for _, b, _, _ in v] for k, v in s.pre.items() if 1 <= k <= 8}
    a0 = 4  # dense ids: 4 weights, then the activations in allocation order
    assert a0 in post[1] and a0 in pre[7]
    assert all(a0 + 3 not in v for v in post.values())
    r = simulate(t, "swap-activations", _hw(), 12 * MiB)
    d = simulate(t, "demand", _hw(), 12 * MiB)
    assert r.iteration_time_s <= d.iteration_time_s


def test_compare_gives_one_row_per_budget_and_policy():
    t = _random_trace(1)
    df = compare(t, "h200-pcie5", ["100%", "60%"], policies=POLICIES_NO_PLANNER)
    assert len(df) == 2 * len(POLICIES_NO_PLANNER)
    assert {"budget_bytes", "budget_pct", "policy", "iteration_time_s", "slowdown",
            "stall_time_s", "bytes_h2d", "bytes_d2h", "faults"} <= set(df.columns)
    ideal = df[df.policy == "ideal"]
    assert np.allclose(ideal.slowdown, 1.0)
    assert (df.slowdown.dropna() >= 1.0 - 1e-9).all()


def test_unknown_policy_and_options_are_refused():
    t = _thrash_trace()
    with pytest.raises(ValueError, match="unknown policy"):
        simulate(t, "lru", _hw(), 8 * MiB)
    with pytest.raises(TypeError, match="unknown option"):
        simulate(t, "demand", _hw(), 8 * MiB, colour="red")


def test_bound_counts_data_written_in_the_window_that_must_cross_back_before_it_is_needed():
    """A (8 MiB) and B (8 MiB) are written at ticks 0 and 1 and read at ticks 2 and 3, budget
    8 MiB: at the boundary after tick 1, 8 MiB written on the device must already be on the
    host (d2h at best 8 MiB/ms: 1 ms) and come back after it (h2d at best 8 MiB/ms: 1 ms).
    Compute is 4 x 0.01 ms, so the bound is max(0.02, 1) + max(0.02, 1) = 2 ms (without the
    d2h term it was 1.02 ms)."""
    b = TraceBuilder(name="writeback")
    a = b.alloc(8 * MiB)
    b.access(a, AccessMode.WRITE)
    b.next_tick(0.01e6)
    x = b.alloc(8 * MiB)
    b.access(x, AccessMode.WRITE)
    b.next_tick(0.01e6)
    b.access(a, AccessMode.READ)
    b.next_tick(0.01e6)
    b.access(x, AccessMode.READ)
    b.next_tick(0.01e6)
    t = b.build()
    hw = _hw(remote_access_Bps=1 * MiB / MS)
    bound = simulate(t, "bound", hw, 8 * MiB)
    assert bound.iteration_time_s == pytest.approx(2 * MS)
    assert (bound.bytes_d2h, bound.bytes_h2d) == (8 * MiB, 8 * MiB)
    for policy in ("demand", "swap-activations", "prefetch-on-alloc"):
        assert simulate(t, policy, hw, 8 * MiB).iteration_time_s >= bound.iteration_time_s


def test_bound_counts_when_data_is_needed_not_only_how_much():
    """Persistent A and B (4 MiB each) are read at the first two ticks of each iteration,
    then 8 ticks of 1 ms compute touch a small block; budget 4 MiB, every path 1 MiB/ms.
    Before the iteration at most 4 MiB of A and B are on the device, so 4 MiB must come in
    before B's kernel (tick 1) starts, with only tick 0's 1 ms to hide behind: 4 - 1 = 3 ms
    of stall over the 10 ms of compute. Counting the bytes alone (they could hide behind
    all 10 ms) the bound was the ideal time."""
    t = _stream_trace(2, idle_ticks=8, name="deadline")
    bw = 1 * MiB / MS
    hw = _hw(h2d_prefetch_Bps=bw, h2d_fault_Bps=bw, d2h_prefetch_Bps=bw, d2h_evict_Bps=bw,
             remote_access_Bps=bw)
    budget = 4 * MiB
    bound = simulate(t, "bound", hw, budget)
    assert bound.iteration_time_s == pytest.approx(13 * MS)
    assert bound.bytes_h2d == 4 * MiB
    for policy in ("demand", "swap-activations", "prefetch-on-alloc"):
        assert simulate(t, policy, hw, budget).iteration_time_s >= bound.iteration_time_s


def test_action_rows_codes_each_name_and_names_the_first_unknown():
    """A Plan's action names become the engine's codes row by row (sorted by tick, the
    plan's order within one tick), and an unknown name raises KeyError naming the first
    unknown one in sorted order (a missing name reads as ``'None'``)."""
    import pandas as pd

    from uvm_sched.sim._policies import _CODES, _action_rows

    names = list(_CODES)
    df = pd.DataFrame({"tick": [3, 1, 2, 1] * 3, "action": (names * 2)[:12],
                       "block": range(12), "persistent": [False, True] * 6,
                       "offset": [-1, 0, 5, 7] * 3, "bytes": [0, 10, -1, 3] * 3})
    k, code, block, pers, lo, hi = _action_rows(df)
    order = np.argsort(df["tick"].to_numpy(), kind="stable")
    assert k.tolist() == df["tick"].to_numpy()[order].tolist()
    assert code.tolist() == [_CODES[a] for a in df["action"].to_numpy()[order]]
    assert block.tolist() == order.tolist()
    assert lo.tolist() == [max(o, 0) for o in df["offset"].to_numpy()[order]]
    assert hi.tolist() == [max(o, 0) + n if n > 0 else -1 for o, n in
                           zip(df["offset"].to_numpy()[order], df["bytes"].to_numpy()[order])]
    assert [len(c) for c in _action_rows(df.iloc[:0])] == [0] * 6
    with pytest.raises(KeyError, match="'aa'"):
        _action_rows(df.assign(action=["zz", "aa"] + names[:1] * 10))
    with pytest.raises(KeyError, match="'None'"):
        _action_rows(df.assign(action=[None, "x"] + names[:1] * 10))
