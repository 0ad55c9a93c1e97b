"""Allocator events at one instant are one tick to the planner (``planner/_instants.py``,
Note [Ticks of no device time]): a trace with one tick per allocator event (a torch memory
snapshot) is planned with each tick of no device time merged into the tick after it."""
from __future__ import annotations

import numpy as np
import pytest

from uvm_sched.planner import PlanError, plan, trace_fingerprint
from uvm_sched.planner._instants import instants_merged
from uvm_sched.trace import TraceBuilder

OP_NS = 50_000.0
MiB = 1 << 20


def _per_event_training(layers=6, iters=3, act=64 * MiB, temp=8 * MiB, time_of_ops=True):
    """A training loop recorded one tick per allocator event, as a snapshot has it: each op
    allocates its output and a workspace and frees the workspace at one instant (ticks of no
    time), then its kernel runs (the last tick of the op takes ``OP_NS``); the backward pass
    frees the activations in reverse. ``time_of_ops`` False: no tick's time is known."""
    tb = TraceBuilder(name="per-event")
    op_ns = OP_NS if time_of_ops else float("nan")
    instant = 0.0 if time_of_ops else float("nan")
    w = tb.alloc(32 * MiB)
    tb.next_tick(op_ns)
    for _ in range(iters):
        tb.mark()
        acts = []
        for _ in range(layers):
            acts.append(tb.alloc(act))
            tb.next_tick(instant)
            ws = tb.alloc(temp)
            tb.next_tick(instant)
            tb.free(ws)
            tb.next_tick(op_ns)
        for a in reversed(acts):
            g = tb.alloc(temp)
            tb.next_tick(instant)
            tb.free(a)
            tb.next_tick(instant)
            tb.free(g)
            tb.next_tick(op_ns)
    tb.free(w)
    return tb.build()


def test_ticks_of_no_time_join_the_tick_after_them_and_keep_the_event_order():
    tr = _per_event_training()
    merged, merged_tick = instants_merged(tr)
    assert np.array_equal(merged.tick, merged_tick[tr.tick])
    # three ticks per op become one: the weight's tick, 3 x 12 ops, the weight's free
    assert tr.n_ticks == 1 + 3 * 12 * 3 + 1
    assert merged.n_ticks == 1 + 3 * 12 + 1 == merged.meta["ticks_merged"]["to"]
    assert merged.meta["ticks_merged"]["from"] == tr.n_ticks
    assert np.array_equal(merged.kind, tr.kind) and np.array_equal(merged.block, tr.block)
    assert (np.diff(merged.tick) >= 0).all()
    assert np.nansum(merged.tick_ns) == np.nansum(tr.tick_ns)
    assert instants_merged(merged) is None  # nothing left to merge


def test_a_tick_of_unknown_time_is_not_taken_for_one_of_no_time():
    assert instants_merged(_per_event_training(time_of_ops=False)) is None


def test_the_planner_plans_the_merged_trace_and_says_so():
    tr = _per_event_training()
    p = plan(tr, "50%", "h200-pcie5", mode="oblivious", price=False)
    assert p.meta["ticks_merged"] == instants_merged(tr)[0].meta["ticks_merged"]
    on_merged = plan(instants_merged(tr)[0], "50%", "h200-pcie5", mode="oblivious", price=False)
    assert p.actions.equals(on_merged.actions)  # rows are allocator events: the same on both
    assert len(p.actions) > 0
    assert p.meta["trace_fingerprint"] == trace_fingerprint(tr)  # the trace as given


def test_a_budget_only_the_instants_apart_can_hold_is_planned_on_the_trace_as_given():
    # each op allocates and frees a 64 MiB workspace at one instant, then allocates its
    # 8 MiB output: merged, one tick holds a workspace and an output that never coexist
    tb = TraceBuilder(name="workspace-first")
    w = tb.alloc(32 * MiB)
    tb.next_tick(OP_NS)
    for _ in range(3):
        tb.mark()
        outs = []
        for _ in range(2):
            ws = tb.alloc(64 * MiB)
            tb.next_tick(0.0)
            tb.free(ws)
            tb.next_tick(0.0)
            outs.append(tb.alloc(8 * MiB))
            tb.next_tick(OP_NS)
        for o in outs:
            tb.free(o)
            tb.next_tick(OP_NS)
    tb.free(w)
    tr = tb.build()
    budget = 64 * MiB + 4 * MiB  # a workspace, not a workspace and an output at once
    with pytest.raises(PlanError, match="cannot be met"):
        plan(instants_merged(tr)[0], budget, "h200-pcie5", mode="oblivious", price=False)
    p = plan(tr, budget, "h200-pcie5", mode="oblivious", price=False)
    assert "ticks_merged" not in p.meta
