"""One definition of a plan's execution: replaying a trace through the native executor
(host backend) issues the actions the simulator assumed -- same allocator events, same
blocks."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

native = pytest.importorskip("uvm_sched.native")

from uvm_sched.planner import ACTIONS, Plan, plan  # noqa: E402
from uvm_sched.sim import simulate  # noqa: E402
from uvm_sched.trace import EventKind  # noqa: E402

from _planner_helpers import host_backend, training_trace  # noqa: E402


host = pytest.fixture(host_backend)


def _sim_actions(trace, p):
    """(tick, stage, action, trace block id) the simulator carried out for plan ``p`` over
    the whole trace (``SimResult.actions``, the record of what reached its engine)."""
    acts = simulate(trace, p, "h200-pcie5", p.meta["budget_bytes"], actions_to_end=True).actions
    return [(int(t), str(s), str(a), int(b)) for t, s, a, b in
            acts[["tick", "stage", "action", "block"]].itertuples(index=False, name=None)]


def _executor_actions(trace, p):
    """The same, from the native executor's events after a replay of ``trace``."""
    ev = native.replay(trace, p)
    rows = np.flatnonzero((trace.kind == EventKind.ALLOC) | (trace.kind == EventKind.FREE))
    alloc_rows = np.flatnonzero(trace.kind == EventKind.ALLOC)
    addr_block: dict[int, int] = {}
    freed: dict[int, int] = {}
    n_alloc = 0
    out = []
    for e in ev:
        k, a = int(e["kind"]), int(e["addr"])
        if k == 0:
            addr_block[a] = int(trace.block[alloc_rows[n_alloc]])
            n_alloc += 1
        elif k == 1:
            freed = {a: addr_block.pop(a)}
        elif 16 <= k < 16 + len(ACTIONS):
            blk = addr_block.get(a, freed.get(a))
            row = rows[int(e["tick"])]  # the allocator event the action follows
            stage = "pre" if trace.kind[row] == EventKind.ALLOC else "post"
            out.append((int(trace.tick[row]), stage, ACTIONS[k - 16], blk))
    return out


def _compare(tr, budget, keep, **meta):
    p = plan(tr, budget, "h200-pcie5", mode="oblivious")  # (the executor's own events)
    if meta:  # the same actions under other synchronisation
        p = Plan(p.actions, {**p.meta, **meta})
    assert len(p) > 0
    sim = [a for a in _sim_actions(tr, p) if keep(a[2])]
    exe = [a for a in _executor_actions(tr, p) if keep(a[2])]
    assert sim, "the simulator issued nothing: the test would prove nothing"
    missing = Counter(sim) - Counter(exe)
    extra = Counter(exe) - Counter(sim)
    assert not missing and not extra, (
        f"simulator-only: {sorted(missing.elements())[:8]}; executor-only: {sorted(extra.elements())[:8]}")


@pytest.mark.parametrize("budget", ["75%", "50%"])
def test_executor_issues_what_the_simulator_assumed(host, budget):
    _compare(training_trace(iters=4), budget, lambda a: a != "discard")


def test_executor_discards_a_freed_block_at_its_free_event(host):
    tr = training_trace(iters=4)
    p = plan(tr, "50%", "h200-pcie5")
    n_discard = int((p.actions["action"] == "discard").sum())
    assert n_discard > 0
    log = native.action_log(native.replay(tr, p))
    issued = log[(log["action"] == "discard") & (log["status"] == "issued")]
    assert len(issued) >= n_discard  # at least one armed iteration's worth


def test_simulator_discards_at_free_events_like_the_executor(host):
    _compare(training_trace(iters=4), "50%", lambda a: a == "discard")


@pytest.mark.parametrize("start", [None, 12, 30])
def test_a_period_plan_is_armed_on_the_simulators_grid_wherever_replay_arms_it(host, start):
    # 12: the first iteration's first allocator event (the weights come before it); None:
    # the grid from event 0; 30: mid-iteration. replay arms at a MARK, at whatever phase
    # of the period grid that is
    meta = {"sync": "period"} if start is None else {"sync": "period", "period_start_event": start}
    _compare(training_trace(iters=4), "50%", lambda a: True, **meta)
