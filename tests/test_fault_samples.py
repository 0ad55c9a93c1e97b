"""planner.fault_samples: what the fault-probing warm-up (Note [Fault probes]) observes,
simulated from a trace's ground truth."""
from __future__ import annotations

import numpy as np
import pytest

from _planner_helpers import training_trace
from uvm_sched import pattern, planner, sim
from uvm_sched.planner._faults import probe_groups


@pytest.fixture(scope="module")
def loop():
    t = training_trace(iters=5, layers=3)
    return t, pattern.analyze(t)


def _truth(t, p):
    """(ordinal -> sorted touch ticks) of the persistent blocks in the representative iteration."""
    from uvm_sched.trace import EventKind

    b = p.blocks[p.blocks["persistent"]]
    rows = (t.kind == EventKind.ACCESS) & (t.tick >= p.start_tick) & (t.tick < p.stop_tick)
    out = {}
    for bid, ordinal in zip(b.index, b["ordinal"]):
        out[int(ordinal)] = np.unique(t.tick[rows & (t.block == bid)] - p.start_tick)
    return out


def test_each_probe_learns_the_next_touch_after_the_last_one_seen(loop):
    t, p = loop
    truth = _truth(t, p)
    for w in (1, 2, 3):
        fs = planner.fault_samples(t, p, max_iters=w, share=1.0, long_life=None)
        seen = fs[~fs["assumed"]]
        for ordinal, ticks in truth.items():
            got = np.sort(seen.loc[seen["block"] == ordinal, "tick"].to_numpy())
            assert got.tolist() == ticks[:w].tolist()  # the first w touches, in order


def test_a_probe_that_sees_no_fault_closes_the_block_and_open_tails_are_busy(loop):
    t, p = loop
    truth = _truth(t, p)
    most = max(len(v) for v in truth.values())
    short = planner.fault_samples(t, p, max_iters=most, share=1.0, long_life=None)
    assert short.attrs["open"] > 0
    T = p.stop_tick - p.start_tick
    for ordinal, ticks in truth.items():
        rows = short[short["block"] == ordinal]
        tail = rows.loc[rows["assumed"], "tick"].tolist()
        last = int(rows.loc[~rows["assumed"], "tick"].max())
        # open: every tick after the last observed touch is assumed busy; closed: none
        assert tail == (list(range(last + 1, T)) if len(ticks) >= most else [])
    full = planner.fault_samples(t, p, max_iters=most + 1, share=1.0, long_life=None)
    assert full.attrs["open"] == 0 and not full["assumed"].any()
    assert len(full) == sum(len(v) for v in truth.values())


def test_the_share_rotates_and_bounds_the_probe_cost(loop):
    t, p = loop
    sizes = p.blocks[p.blocks["persistent"]]["size"].to_numpy()
    assert probe_groups(6, 0.5).tolist() == [0, 1, 0, 1, 0, 1]
    assert probe_groups(4, 1 / 3).tolist() == [0, 1, 2, 0]
    half = planner.fault_samples(t, p, max_iters=2, share=0.5, long_life=None)
    # two iterations, half the blocks each: every block probed exactly once
    assert half.attrs["probes"] == len(sizes)
    assert half.attrs["probe_bytes"] == int(sizes.sum())
    assert sorted(half["block"].unique()) == sorted(_truth(t, p))
    with pytest.raises(ValueError, match="share must be in"):
        planner.fault_samples(t, p, share=0)


def test_closed_fault_samples_plan_as_full_sampling_of_the_persistent_blocks(loop):
    t, p = loop
    closed = planner.fault_samples(t, p, max_iters=4, share=1.0, long_life=None)
    assert closed.attrs["open"] == 0
    drawn = planner.draw_samples(t, p)
    persistent = drawn[drawn["persistent"]].drop(columns=["read", "touched_bytes"])
    for budget in ("75%", "50%"):
        fault = sim.simulate(t, "uvm-sched", budget=budget, mode="sampled",
                             plan_opts={"samples": closed})
        same = sim.simulate(t, "uvm-sched", budget=budget, mode="sampled",
                            plan_opts={"samples": persistent})
        demand = sim.simulate(t, "demand", budget=budget)
        assert fault.iteration_time_s <= demand.iteration_time_s
        # every persistent touch known: the plan of full sampling restricted to them
        assert fault.iteration_time_s == pytest.approx(same.iteration_time_s)


def test_open_fault_samples_never_plan_slower_than_demand(loop):
    t, p = loop
    for w, share in ((1, 1.0), (2, 0.5), (3, 1.0)):
        fs = planner.fault_samples(t, p, max_iters=w, share=share)
        for budget in ("75%", "50%"):
            fault = sim.simulate(t, "uvm-sched", budget=budget, mode="sampled",
                                 plan_opts={"samples": fs})
            assert fault.iteration_time_s <= sim.simulate(t, "demand", budget=budget)\
                .iteration_time_s


def test_a_trace_without_accesses_is_refused_with_the_fix():
    t = training_trace(iters=3, layers=2, accesses=False)
    with pytest.raises(ValueError, match="ACCESS rows"):
        planner.fault_samples(t)


# ---- non-persistent blocks: the same rule from their allocation (hand-worked) ----------------
def _hand_loop(iters: int = 5):
    """W persistent, touched at ticks 0, 7, 9 of each 10-tick iteration; activation a alive
    0..8 (freed at 8), touched at 0, 2 (a mid-lifetime read) and 7; scratch s alive within
    tick 1 only (too short-lived to probe)."""
    from uvm_sched.trace import AccessMode as M, TraceBuilder

    tb = TraceBuilder(name="hand")
    W = tb.alloc(4 << 20)
    tb.next_tick(1000.0)
    for _ in range(iters):
        tb.mark()
        a = tb.alloc(8 << 20)
        tb.access(a, M.WRITE)
        tb.access(W, M.READ)
        tb.next_tick(1e5)  # 0
        s = tb.alloc(1 << 20)
        tb.access(s, M.READ_WRITE)
        tb.free(s)
        tb.next_tick(1e5)  # 1
        tb.access(a, M.READ)
        tb.next_tick(1e5)  # 2
        for _ in range(4):
            tb.next_tick(1e5)  # 3..6
        tb.access(a, M.READ)
        tb.access(W, M.READ)
        tb.next_tick(1e5)  # 7
        tb.free(a)
        tb.next_tick(1e5)  # 8
        tb.access(W, M.READ_WRITE)
        tb.next_tick(1e5)  # 9
    t = tb.build()
    return t, pattern.analyze(t)


def _ticks(fs):
    """(persistent, block, assumed) -> ticks."""
    by = fs.groupby(["persistent", "block", "assumed"])["tick"]
    return {k: sorted(g.tolist()) for k, g in by}


def test_an_activation_is_probed_from_its_allocation_and_used_once_its_list_closes():
    t, p = _hand_loop()
    assert p.stop_tick - p.start_tick == 10
    one = planner.fault_samples(t, p, max_iters=1, share=1.0)
    # iteration 0 probes W at the marker (a first touch; its tail busy); a is known only
    # from that iteration's allocator events: not probed yet, no samples (the oblivious rule)
    assert _ticks(one) == {(True, 0, False): [0], (True, 0, True): list(range(1, 10))}
    assert one.attrs["probes"] == 1
    three = planner.fault_samples(t, p, max_iters=3, share=1.0)
    # iterations 1 and 2 probe a right after its allocation, then after tick 0: its list
    # (0, 2) is still open, so it is dropped; W's three touches are seen
    assert _ticks(three) == {(True, 0, False): [0, 7, 9]}
    assert (three.attrs["iterations"], three.attrs["open"]) == (3, 2)  # the cap stopped it
    five = planner.fault_samples(t, p, max_iters=5, share=1.0)
    # W's fourth probe (iteration 3) and a's fourth (iteration 4) see no fault before the
    # iteration's end / the free: both lists closed
    assert _ticks(five) == {(False, 0, False): [0, 2, 7], (True, 0, False): [0, 7, 9]}
    # the rule stops there: a larger cap runs no sixth iteration and learns the same
    assert five.attrs["iterations"] == 5
    more = planner.fault_samples(t, p, max_iters=16, share=1.0)
    assert more.attrs["iterations"] == 5 and _ticks(more) == _ticks(five)
    assert more.attrs["probe_bytes"] == five.attrs["probe_bytes"]
    assert (five.attrs["closed"], five.attrs["open"]) == (2, 0)
    assert (five.attrs["persistent_blocks"], five.attrs["local_blocks"]) == (1, 1)
    # W probed in iterations 0..3 (4 MiB), a in 1..4 (8 MiB): 8 probes, at most 2 at once
    assert (five.attrs["probes"], five.attrs["probes_per_iter"]) == (8, 2)
    assert five.attrs["probe_bytes"] == 4 * (12 << 20)
    assert five.attrs["probe_bytes_per_iter"] == 12 << 20


def test_activations_rotate_with_the_persistent_blocks_and_short_lived_ones_are_not_probed():
    t, p = _hand_loop()
    half = planner.fault_samples(t, p, max_iters=2, share=0.5)
    # groups: W (persistent first) 0, a 1; iteration 0 probes W, iteration 1 probes a
    assert (half.attrs["probes"], half.attrs["probes_per_iter"]) == (2, 1)
    assert half.attrs["probe_bytes_per_iter"] == 8 << 20
    # (a's list, one touch seen, is open: dropped; W's observed touch is kept)
    assert {k for k in _ticks(half) if not k[2]} == {(True, 0, False)}
    assert (half.attrs["open"], half.attrs["iterations"]) == (2, 2)
    # the scratch block (ordinal 1, alive within one tick) never gets a sample
    assert not ((~half["persistent"]) & (half["block"] == 1)).any()
    # long_life: a must live 8 of the 10 ticks; 0.9 leaves it out, None probes W alone
    assert planner.fault_samples(t, p, share=1.0, long_life=0.8).attrs["local_blocks"] == 1
    assert planner.fault_samples(t, p, share=1.0, long_life=0.9).attrs["local_blocks"] == 0
    only_w = planner.fault_samples(t, p, max_iters=4, share=1.0, long_life=None)
    assert only_w["persistent"].all() and only_w.attrs["local_blocks"] == 0
    with pytest.raises(ValueError, match="long_life must be in"):
        planner.fault_samples(t, p, long_life=1.5)


def test_assumed_sample_rows_are_not_taken_as_certain_by_the_budget_check():
    import pandas as pd

    t, p = _hand_loop()
    # W observed at tick 9 only, ticks 0..8 assumed; a has no samples (oblivious: certain at
    # its allocation, tick 0, 8 MiB). With W held in place (no remote fallback) the observed
    # touch alone needs at most 8 MiB at any tick; the assumed rows taken as certain would
    # need W + a = 12 MiB at tick 0 and refuse 9 MiB.
    fs = pd.DataFrame({"iteration": 0, "block": 0, "persistent": True,
                       "tick": list(range(10)), "assumed": [True] * 9 + [False]})
    pl = planner.plan(t, 9 << 20, "h200-pcie5", mode="sampled", pattern=p, samples=fs,
                      remote_fallback=False)
    assert pl.meta["mode"] == "sampled"
    with pytest.raises(planner.PlanError, match="cannot be met"):
        planner.plan(t, 9 << 20, "h200-pcie5", mode="sampled", pattern=p, remote_fallback=False,
                     samples=fs.assign(assumed=False))
