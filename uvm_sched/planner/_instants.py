"""Allocator events at one instant are one tick to the planner.

Note [Ticks of no device time]. The planner's clock is device time: a tick is a span in
which kernels run, its control points are where a copy can be issued ahead of the kernels
after it, and its guards (``AUTO_GUARDS``) are counted in ticks. A trace whose ticks are
allocator events (a torch memory snapshot, a profiler's memory events: one tick per event)
has runs of ticks no time separates -- the allocations and frees of one op, stamped with
one microsecond -- and there a guard of 32 ticks can be no time at all: gaps open and close
within an instant, their prefetches can only be late, and the schedule meets the budget on
paper by moving blocks it cannot hide. LLaMA-7B from its snapshot at 75% of peak on
h200-pcie5 (56% of its ticks take no time): the plan moved 44 GB of activations each way,
1.16x demand paging on the ground truth, where the same events with the recorder's ticks
(one per op) gave 0.39x (its excess mapped host-resident instead). So the planner merges
each tick of no device time into the tick after it -- the events keep their order, so the
plan's rows (allocator-event ordinals) are the same on the trace as given -- and builds the
schedule on the merged trace. The candidates are priced on the trace as given (``_pricing``
simulates it as the user's simulator would): priced on the merged ticks, where a tick's
faults are serviced as one batch, demand paging looked cheaper (LLaMA-7B at 30% of peak: no
plan chosen, 1.00x demand paging, where priced on the ticks as given the advice went out,
0.25x). A tick of unknown time is not taken for one of no time. Where the merged trace
cannot be planned for the budget (a merged tick holds what its instants held one after
another) the trace is planned as given. No constant: a tick merges only where its clock
says no time passed.
"""
from __future__ import annotations

import numpy as np

__all__ = ["instants_merged", "planned_merged", "judged_on"]


def instants_merged(trace):
    """``(merged, merged_tick)``: ``trace`` with each tick of no device time merged into the
    tick after it (Note [Ticks of no device time]) and the merged tick of each of its ticks;
    None where no tick but the last takes no time, or the trace has no clock."""
    from ..pattern._analyze import _tick_time
    from ..trace import Trace

    if not trace.has_clock or trace.n_ticks < 2:
        return None
    tns, _ = _tick_time(trace)
    none = tns[:-1] == 0  # NaN (unknown) compares False
    if not none.any():
        return None
    merged_tick = np.concatenate([[0], np.cumsum(~none)])  # of each tick
    cols = trace.columns
    cols["tick"] = merged_tick[cols["tick"]]
    given = np.isfinite(trace.tick_ns)
    n = int(merged_tick[-1]) + 1
    total = np.bincount(merged_tick, weights=np.where(given, trace.tick_ns, 0.0), minlength=n)
    known = np.bincount(merged_tick, weights=given, minlength=n) > 0
    meta = dict(trace.meta, ticks_merged={"from": int(trace.n_ticks), "to": n})
    merged = Trace(cols, tick_ns=np.where(known, total, np.nan), meta=meta, validate=False)
    return merged, merged_tick


def planned_merged(trace, budget, prof, mode: str, opts: dict):
    """``plan(trace, budget, prof, mode, **opts)`` made on ``trace`` with its ticks of no
    device time merged (the ``pattern`` option derived again), its meta naming ``trace``
    and the merge (``meta["ticks_merged"]``); None where nothing merges, ``samples`` are
    given (their ticks are the trace's), or the merged trace cannot be planned for the
    budget (``PlanError``: the caller plans ``trace`` as given)."""
    from ._plan import Plan, PlanError, trace_fingerprint
    from ._planner import plan

    found = instants_merged(trace) if opts.get("samples") is None else None
    if found is None:
        return None
    merged, merged_tick = found
    given = {k: v for k, v in opts.items() if k != "pattern"}
    try:
        out = plan(merged, budget, prof, mode, _judged_on=(trace, merged_tick), **given)
    except PlanError:
        return None  # a merged tick holds more than the budget
    if isinstance(out, Plan):  # (not the unpriced tables of the pricing's own calls)
        out.meta["trace_fingerprint"] = trace_fingerprint(trace)
        out.meta["ticks_merged"] = merged.meta["ticks_merged"]
    return out


def judged_on(trace, pattern, judge) -> tuple:
    """``(trace, iteration start ticks)`` a plan made from ``trace`` (and its ``pattern``) is
    priced on: ``judge`` = ``(trace as given, merged tick of each of its ticks)`` where the
    plan was made on the merged ticks (Note [Ticks of no device time]), else ``trace``."""
    starts = [int(a) for a, _ in pattern.iterations]
    if judge is None:
        return trace, starts
    given, merged_tick = judge
    return given, np.searchsorted(merged_tick, starts).tolist()
