"""Write-backs the compute waits behind, for guessed uses: where the builder predicts that
the compute waits for evictions in flight, the blocks of the lifetime-ends use model whose
write-backs it waits behind leave right after their ALLOC in a further build, kept only
where its predicted stall is lower (``_core.build_schedule``).

Note [Write-backs the compute waits behind]
-------------------------------------------
A block of the lifetime-ends use model is guessed to be used within ``guard`` ticks of
each end of its lifetime (``_planner``, Note [Use ticks]), so its gap opens at the widest
guard after its ALLOC. Where a forward pass makes activations faster than the d2h engine
writes them back, evictions that all start a widest guard after their ALLOC queue up on
the engine, and the budget counts each gone from its issue (``_core``, Note [Budget
counts an eviction from its issue]): the selection sees room the link has not made yet,
and the compute waits (``eviction_wait_s``) while the engine sat idle before the first of
them was issued. It is the oblivious case of ``_core``'s Note [Evictions right after a
seen touch], and the builder predicts it: ResNet-50 on GH200 C2C at 50% waited 1.2 ms
(simulated link stall) where 1.1 ms was predicted, its first write-back issued 33 ticks
into the iteration.

So where a wait is predicted, the blocks whose write-backs are still in flight at a tick
where the compute waits (the backlog it waits behind, ``_stall.eviction_wait``) get their
gaps at every guard level leaving at the narrowest guard after the ALLOC, the levels
varying the prefetch end only, and the schedule is built again; the backlog of that build
joins the set, and so on while each build lowers the predicted stall without ending
further over budget (at most ``rounds`` builds; the first that does not pay stops it).
The set is the cause, not a constant: a block that no wait waits behind keeps its guard.

What it risks: a read the model cannot see between the ALLOC and the widest guard (a skip
input read a dozen ops after its allocation) finds the block gone and faults it back. So
such a block's eviction is issued again at the widest guard's own point, as Note
[Evictions at the wider guards] does for a narrowed guard (``_wider_guards``): where a
read brought it back, it leaves again once the widest guard has passed.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

if TYPE_CHECKING:
    from ._core import Schedule, _Timeline

__all__ = ["narrower_alloc_guards", "widest_guard_points"]


def narrower_alloc_guards(tl: _Timeline, guards, first: Schedule, build: Callable,
                          rounds: int) -> Schedule:
    """The schedule kept of ``first`` and the builds ``build(alloc_guard)`` makes, each
    with the guessed-use blocks of the last kept one's backlog one guard level narrower
    after their ALLOC (Note [Write-backs the compute waits behind]); ``alloc_guard``: (n,)
    ticks, the widest guard after each block's ALLOC. At most ``rounds`` further builds."""
    p, out = tl.p, first
    levels = np.unique(np.asarray(guards, np.int64))  # ticks, narrowest first
    cap = np.full(len(p.size), levels[-1], np.int64)
    for _ in range(rounds):
        if out.predicted["eviction_wait_s"] <= 0 or not out.eviction_backlog:
            break
        backlog = np.asarray(out.eviction_backlog, np.int64)
        backlog = backlog[p.end_lo[backlog] >= 0]  # guessed uses only
        # one level below the guard its gap opens at now (a short-lived block's widest
        # guard may already be narrower than the widest level)
        now = np.minimum(cap[backlog], _widest_alloc_guard(p, guards, backlog))
        narrower = cap.copy()
        narrower[backlog] = levels[np.maximum(np.searchsorted(levels, now) - 1, 0)]
        if (narrower == cap).all():
            break
        alt = build(narrower)
        if not (alt.predicted["stall_s"] < out.predicted["stall_s"] and
                alt.predicted["max_over_budget_bytes"] <= out.predicted["max_over_budget_bytes"]):
            break
        out, cap = alt, narrower
    return out


def widest_guard_points(tl: _Timeline, guards, alloc_guard: np.ndarray) -> dict[int, int]:
    """Per guessed-use block whose guard after its ALLOC is narrowed (``alloc_guard``,
    ticks), the control point (first iteration) its eviction is issued at when its gap
    opens at the widest guard that applies to it, as ``_core`` opens it (Note [Candidate
    gaps]): where Note [Write-backs the compute waits behind] repeats it."""
    p = tl.p
    blocks = np.flatnonzero((alloc_guard < max(guards)) & (p.end_lo >= 0))
    widest = _widest_alloc_guard(p, guards, blocks)
    keep = (widest > alloc_guard[blocks]) & (widest >= 0)
    blocks, u1 = blocks[keep], p.end_lo[blocks[keep]].astype(np.int64) + widest[keep]
    k = np.searchsorted(tl.q, u1, side="left")
    k = np.maximum(k, p.alloc_event[blocks].astype(np.int64))
    return dict(zip(blocks.tolist(), k.tolist()))


def _widest_alloc_guard(p, guards, blocks: np.ndarray) -> np.ndarray:
    """Per block of the lifetime-ends use model, the widest guard (ticks) its gap opens at
    after its ALLOC, as ``_core`` opens it (Note [Candidate gaps]); -1: none."""
    from ._core import WIDE_GUARD_LIFETIMES, WIDE_GUARD_TICKS

    lo, hi = p.end_lo[blocks].astype(np.int64), p.end_hi[blocks].astype(np.int64)
    out = np.full(len(blocks), -1, np.int64)
    for g in guards:  # widest first: the first level that opens a gap
        a, b = np.minimum(lo + g, hi), np.maximum(hi - g, lo)
        ok = (out < 0) & (b - a >= 2)
        if g > WIDE_GUARD_TICKS:
            ok &= hi - lo >= WIDE_GUARD_LIFETIMES * g
        out[ok] = np.minimum(lo + g, hi)[ok] - lo[ok]
    return out
