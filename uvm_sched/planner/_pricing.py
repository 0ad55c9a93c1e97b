"""Pricing a plan against not acting: a plan is a hint that must never hurt.

The schedule builder predicts its own stall from its model of one learned iteration (copy
queues, windows, guards); what it cannot see is the rest of the trace: an iteration period
learned shorter than the marked one (an LSTM's time-step loop: the plan then fires every
time step), transfers the link cannot hide at all (an iteration whose compute is shorter
than moving the excess once), the pool's dead ranges. So the plan is priced the way a user
would judge it, by running it: the simulator replays the trace with what the planner knows
of its accesses -- in oblivious mode the allocator events alone (ALLOC, FREE and markers:
the ground-truth ACCESS rows are stripped, so it still never reads them; accesses follow
the simulator's extremal model, written at the ALLOC and read at the FREE, the oblivious
use model); in sampled mode with samples drawn from the trace itself, the trace as it is
(the samples are its accesses) -- under three candidates, and the fastest is emitted:

1. ``plan``: the full schedule;
2. ``advice-only``: the schedule without its eviction/prefetch pairs (populates, discards,
   remote mapping and read-mostly advice stay);
3. ``none``: no action at all (demand paging).

A tie (equal up to float rounding) keeps the earlier candidate: acting less only where
that is faster. ``plan.meta
["pricing"]`` holds the three predicted iteration times (s) and the choice; when it is not
the full plan, ``plan.meta["fallback"]`` says why in words. No constant is involved: the
candidates are compared as they run.

Import note: this is the one place where the planner calls the simulator (lazily, at run
time; the simulator imports the planner's ``Plan`` type at module level).
"""
from __future__ import annotations

__all__ = ["price", "CANDIDATES"]

CANDIDATES = ("plan", "advice-only", "none")


def _allocator_view(trace):
    """``trace`` without ACCESS rows (see ``trace.zoo.allocator_only``)."""
    from ..trace.zoo import allocator_only

    return allocator_only(trace) if trace.has_accesses else trace


def price(trace, candidates: dict, budget: int, prof, *, accesses: bool = False
          ) -> tuple[str, dict]:
    """Simulate each of ``candidates`` (``{label: Plan}``, in order of preference) on
    ``trace`` (its allocator events only, unless ``accesses``: the planner knows them) at
    ``budget`` bytes on ``prof``; returns the label of the fastest (earliest on ties) and
    ``{label: iteration seconds}``. Raises the simulator's ``BudgetError`` when a tick's
    working set exceeds the budget (nothing can be judged)."""
    from ..sim import simulate

    view = trace if accesses else _allocator_view(trace)
    cache: dict = {}
    times = {label: float(simulate(view, p, prof, budget, _cache=cache).iteration_time_s)
             for label, p in candidates.items()}
    fastest = min(times.values())
    # the earliest candidate as fast as the fastest: equal up to float rounding (sums of
    # the same tick times in another order) is a tie, and a tie keeps the plan
    best = next(k for k in candidates if times[k] <= fastest * (1 + 1e-9))
    return best, times

