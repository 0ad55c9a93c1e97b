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
    nq = len(tl.q)
    # Python lists: the same values as the arrays' elements, without a numpy scalar each
    C, end_lo, size = tl.listed("C"), tl.listed("end_lo"), tl.listed("size")
    resident = _resident_seen(chosen, tl)
    pf = [g for g in chosen if g.chosen and not g.dead]
    moved = prev = 0
    for g in sorted(pf, key=lambda g: (C[g.u2], g.blk)):
        back = _back_from(g)
        if end_lo[g.blk] < 0:  # a block with seen uses (the module's rule)
            lo = max(g.ke + 1, g.kp_min, prev)
            if lo < back < nq:
                k = _queues._earliest_with_room(resident, tl, int(size[g.blk]), lo, back)
                if k < back:
                    g.kp = k
                    moved += 1
        prev = max(prev, min(g.kp, back))
    return moved


def _back_from(g) -> int:
    """The control point from which the budget counts the gap's block back on the device:
    the prefetch's, or the selection's where the prefetch is later (a late prefetch's block
    is counted from where the selection assumed it, as ``_queues._resident_as_selected``)."""
    return min(g.kp, _queues.selected_point(g))


def _resident_seen(chosen, tl: _Timeline) -> np.ndarray:
    """Resident bytes per tick counting only the seen gaps (between sampled touches, dead
    tails), each from the tick its eviction has landed to the control point its block is
    counted back from. Vectorised (the cyclic segments of ``_queues.segments``)."""
    q, C, T, nq = tl.q, tl.C, tl.T, len(tl.q)
    end_lo, live_to = tl.p.end_lo, tl.p.live_to
    seen = [g for g in chosen if g.chosen and (g.dead or end_lo[g.blk] < 0)]
    sv = np.zeros(T + 1, np.int64)
    if seen:
        blk = np.fromiter((g.blk for g in seen), np.int64, len(seen))
        t_off = np.fromiter((g.t_off for g in seen), np.int64, len(seen))
        e_done = np.fromiter((g.e_done for g in seen), float, len(seen))
        dead = np.fromiter((g.dead for g in seen), bool, len(seen))
        k = np.fromiter((min(_back_from(g), nq - 1) for g in seen), np.int64, len(seen))
        a = np.maximum(t_off, np.searchsorted(C, e_done, side="left"))
        b = np.where(dead, live_to[blk].astype(np.int64) + 1, q[k] + 1)
        sz = tl.size[blk]
        full = b - a >= T
        inside = (b > a) & ~full
        lo = np.where(a >= T, a - T, a)  # a window starting in the unrolled iteration
        hi = np.where(a >= T, b - T, b)
        wraps = inside & (hi > T)  # [lo, T) and [0, hi - T)
        one = inside & ~wraps
        np.add.at(sv, lo[one], sz[one])
        np.add.at(sv, hi[one], -sz[one])
        np.add.at(sv, lo[wraps], sz[wraps])
        np.add.at(sv, np.full(int(wraps.sum()), T), -sz[wraps])
        np.add.at(sv, np.zeros(int(wraps.sum()), np.int64), sz[wraps])
        np.add.at(sv, hi[wraps] - T, -sz[wraps])
        sv[0] += int(sz[full].sum())
        sv[T] -= int(sz[full].sum())
    return tl.base - np.cumsum(sv)[:T]
