"""Prefetches pulled forward: after the backward pass has placed each prefetch as late as its
deadline and the prefetches behind it allow (``_queues``; ``_core``, Note [Timing]), each is
moved, in deadline order, to the earliest control point from which its block fits under the
budget, never before the prefetch of an earlier deadline.

Why: a prefetch started as late as its deadline allows queues behind the others, and the h2d
engine sits idle while a later prefetch waits for its issue point; the LP's optimum keeps the
link busy wherever memory has room (``benchmarks/results/lp.md``). Keeping the issue order the
deadline order means that moving one earlier never puts it ahead of a prefetch needed first
on the FIFO engine.

Which room counts:

* an eviction frees its room when it lands (``e_done``), not from its issue as the selection
  counts it (Note [Budget counts an eviction from its issue]): a prefetch that took room still
  being written back would make the driver evict something else;
* only room a *seen* gap frees -- a gap between sampled touches, or a dead tail -- and only
  the prefetches of blocks with seen uses move. A gap of the lifetime-ends use model
  (oblivious mode) is a guess: a block touched inside it is faulted back by the driver into
  the room an early prefetch took (measured on the zoo: U-Net, BERT and GPT-2 oblivious plans
  on PCIe 3-28% slower when guessed room was used too).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import _queues

if TYPE_CHECKING:
    from ._core import _Timeline

__all__ = ["pull_forward"]


def pull_forward(chosen, tl: _Timeline) -> int:
    """Move the chosen gaps' prefetches (``kp``) earlier where the budget has room (the
    module's rule). Returns how many moved. O(G log G + ticks looked at, at most
    ``_queues._earliest_with_room``'s cap per prefetch)."""
    C, nq, end_lo = tl.C, len(tl.q), tl.p.end_lo
    resident = _resident_seen(chosen, tl)
    pf = [g for g in chosen if g.chosen and not g.dead]
    moved = prev = 0
    for g in sorted(pf, key=lambda g: (C[g.u2], g.blk)):
        back = _back_from(g)
        if end_lo[g.blk] < 0:  # a block with seen uses (the module's rule)
            lo = max(g.ke + 1, g.kp_min, prev)
            if lo < back < nq:
                k = _queues._earliest_with_room(resident, tl, int(tl.size[g.blk]), lo, back)
                if k < back:
                    g.kp = k
                    moved += 1
        prev = max(prev, min(g.kp, back))
    return moved


def _back_from(g) -> int:
    """The control point from which the budget counts the gap's block back on the device:
    the prefetch's, or the selection's where the prefetch is later (a late prefetch's block
    is counted from where the selection assumed it, as ``_queues._resident_as_selected``)."""
    return min(g.kp, max(g.ke + 1, g.kp_min, g.kp_sel))


def _resident_seen(chosen, tl: _Timeline) -> np.ndarray:
    """Resident bytes per tick counting only the seen gaps (between sampled touches, dead
    tails), each from the tick its eviction has landed to the control point its block is
    counted back from."""
    q, C, T, nq = tl.q, tl.C, tl.T, len(tl.q)
    end_lo, live_to, size = tl.p.end_lo, tl.p.live_to, tl.size
    sv = np.zeros(T + 1, np.int64)
    for g in chosen:
        if not g.chosen or (end_lo[g.blk] >= 0 and not g.dead):
            continue
        gone = max(g.t_off, int(np.searchsorted(C, g.e_done, side="left")))
        back = int(live_to[g.blk]) + 1 if g.dead else int(q[min(_back_from(g), nq - 1)]) + 1
        for a, b in _queues.segments(gone, back, T):
            sv[a] += size[g.blk]
            sv[b] -= size[g.blk]
    return tl.base - np.cumsum(sv)[:T]
