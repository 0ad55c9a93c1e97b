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
        fs = planner.fault_samples(t, p, warmup_iters=w, share=1.0, long_life=None)
        seen = fs[~fs["assumed"]]
        for ordinal, ticks in truth.items():
            got = np.sort(seen.loc[seen["block"] == ordinal, "tick"].to_numpy())
            assert got.tolist() == ticks[:w].tolist()  # the first w touches, in order


def test_a_probe_that_sees_no_fault_closes_the_block_and_open_tails_are_busy(loop):
    t, p = loop
    truth = _truth(t, p)
    most = max(len(v) for v in truth.values())
    short = planner.fault_samples(t, p, warmup_iters=most, share=1.0, long_life=None)
    assert short.attrs["open"] > 0
    T = p.stop_tick - p.start_tick
    for ordinal, ticks in truth.items():
        rows = short[short["block"] == ordinal]
        tail = rows.loc[rows["assumed"], "tick"].tolist()
        last = int(rows.loc[~rows["assumed"], "tick"].max())
        # open: every tick after the last observed touch is assumed busy; closed: none
        assert tail == (list(range(last + 1, T)) if len(ticks) >= most else [])
    full = planner.fault_samples(t, p, warmup_iters=most + 1, share=1.0, long_life=None)
    assert full.attrs["open"] == 0 and not full["assumed"].any()
    assert len(full) == sum(len(v) for v in truth.values())


def test_the_share_rotates_and_bounds_the_probe_cost(loop):
    t, p = loop
    sizes = p.blocks[p.blocks["persistent"]]["size"].to_numpy()
    assert probe_groups(6, 0.5).tolist() == [0, 1, 0, 1, 0, 1]
    assert probe_groups(4, 1 / 3).tolist() == [0, 1, 2, 0]
    half = planner.fault_samples(t, p, warmup_iters=2, share=0.5, long_life=None)
    # two iterations, half the blocks each: every block probed exactly once
    assert half.attrs["probes"] == len(sizes)
    assert half.attrs["probe_bytes"] == int(sizes.sum())
    assert sorted(half["block"].unique()) == sorted(_truth(t, p))
    with pytest.raises(ValueError, match="share must be in"):
        planner.fault_samples(t, p, share=0)


def test_closed_fault_samples_plan_as_full_sampling_of_the_persistent_blocks(loop):
    t, p = loop
    closed = planner.fault_samples(t, p, warmup_iters=4, share=1.0, long_life=None)
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
        fs = planner.fault_samples(t, p, warmup_iters=w, share=share)
        for budget in ("75%", "50%"):
            fault = sim.simulate(t, "uvm-sched", budget=budget, mode="sampled",
                                 plan_opts={"samples": fs})
            assert fault.iteration_time_s <= sim.simulate(t, "demand", budget=budget)\
                .iteration_time_s


def test_a_trace_without_accesses_is_refused_with_the_fix():
    t = training_trace(iters=3, layers=2, accesses=False)
    with pytest.raises(ValueError, match="ACCESS rows"):
        planner.fault_samples(t)
