"""The builder's predicted stall (``_core``, Note [Prediction]): late prefetches accumulated
along the h2d queue, and waits for evictions still in flight. Works on ``_core._Timeline``
and the chosen gaps' fields as the timing pass left them.
"""
from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

import numpy as np

from . import _fast_timing

if TYPE_CHECKING:
    from ._core import _Timeline

__all__ = ["prefetch_stall", "eviction_wait"]


def prefetch_stall(chosen, tl: _Timeline) -> float:
    """Device ns the compute waits for late prefetches. Late prefetches overlap: a wait
    delays the compute, and with it every later issue and deadline, so the waits are not
    added up: the compute's delay at a tick is the most any prefetch due by then lands
    after its use would start (the delay so far included), and the iteration's stall is
    that delay at its end. Each prefetch is issued when its control point runs (the ideal
    time plus the delay so far) and queued on the h2d engine (FIFO in issue order). A
    Fenwick tree of maxima over deadline ticks gives the delay at an issue. O(G log T).
    The loop is compiled where the timing pass is (``_fast_timing``); this one is its
    reference."""
    pf = sorted((g for g in chosen if not g.dead), key=lambda g: g.p_start)
    if not pf:
        return 0.0
    # Each copy starts when its control point's last queued kernel (tick q[kp]) ends, so
    # after the delay through q[kp]; a prefetch due by then was issued before it (its
    # control point precedes its deadline), so the delay there is known. The delay is a
    # maximum, not a sum: summing each late prefetch's wait beyond the delay known when it
    # was taken counted a wait again wherever a later prefetch was due earlier, and a run
    # of ticks of no device time (a snapshot's allocator events at one timestamp) fed the
    # waits back (LLaMA-7B from a snapshot at 75% of peak: 5.2e47 s predicted).
    # The loop reads Python floats (the same IEEE values as the arrays', so the same sums).
    kp = np.fromiter((g.kp for g in pf), np.int64, len(pf))
    issue_at = tl.tau[kp]
    issue_tick = tl.q[kp]
    if _fast_timing.available():  # the loop below compiled (the same operations)
        p_start, p_end = (np.fromiter((getattr(g, k) for g in pf), np.float64, len(pf))
                          for k in ("p_start", "p_end"))
        return float(_fast_timing.kernels().prefetch_stall(
            issue_tick, issue_at, p_start, p_end,
            np.fromiter((g.u2 for g in pf), np.int64, len(pf)), tl.C))
    issue_ticks, issue_at_l, C = issue_tick.tolist(), issue_at.tolist(), tl.listed("C")
    n = len(C)
    tree = [0.0] * (n + 1)

    def raise_to(i: int, v: float) -> None:
        i += 1
        while i <= n:
            tree[i] = max(tree[i], v)
            i += i & -i

    def upto(i: int) -> float:  # the delay through tick i: the most at deadlines <= i
        i += 1
        most = 0.0
        while i > 0:
            most = max(most, tree[i])
            i -= i & -i
        return most

    delay = 0.0
    free_at = 0.0
    for g, issue_tick, issued in zip(pf, issue_ticks, issue_at_l):
        start = max(issued + upto(issue_tick), free_at)
        free_at = start + (g.p_end - g.p_start)  # its time on the queue (duplex cap included)
        late = free_at - C[g.u2]
        if late > delay:
            delay = late
        if late > 0:
            raise_to(g.u2, late)
    return delay


def eviction_wait(chosen, resident, tl: _Timeline) -> float:
    """Device ns the compute waits for evictions still in flight when it needs their room
    (the budget counts an eviction from its issue). Walks the over-budget ticks with the
    delay so far (a wait at one tick gives later evictions time to land). The d2h engine is
    FIFO, so the evictions in flight at a tick are a contiguous run of the queue: each tick
    costs two binary searches. O(G log G + T log G)."""
    if not chosen:
        return 0.0
    C, T, budget = tl.C, tl.T, tl.budget
    order = sorted(chosen, key=lambda g: g.e_done)
    toff = np.array([g.t_off for g in order], np.int64)
    edone = np.array([g.e_done for g in order])
    sz = np.array([tl.size[g.blk] for g in order], np.int64)
    S = np.concatenate([[0], np.cumsum(sz)])
    # t_off is monotone in queue order only up to ties; a running max keeps searches valid
    toff_run = np.maximum.accumulate(toff)
    # bytes in flight at the ideal start of each tick (an upper bound on what is pending)
    t_done = np.searchsorted(C, edone, side="left")
    pend = np.zeros(2 * T + 2, np.int64)
    np.add.at(pend, np.minimum(toff, 2 * T + 1), sz)
    np.add.at(pend, np.minimum(np.maximum(t_done, toff), 2 * T + 1), -sz)
    pend = np.cumsum(pend)
    pend = pend[:T] + pend[T:2 * T]
    risky = np.flatnonzero((pend > 0) & (resident + pend > budget))
    delay = 0.0
    # bisect on lists: np.searchsorted's positions (side "right" is bisect_right, "left"
    # bisect_left) and the same IEEE values, without a numpy call per scalar
    C_l, toff_l, edone_l, S_l = tl.listed("C"), toff_run.tolist(), edone.tolist(), S.tolist()
    room = (budget - resident[risky]).tolist()
    for t, free in zip(risky.tolist(), room):
        now = C_l[t] + delay
        hi = bisect.bisect_right(toff_l, t)
        lo = bisect.bisect_right(edone_l, now)
        if hi <= lo:
            continue
        need = (S_l[hi] - S_l[lo]) - free
        if need > 0:
            k = min(bisect.bisect_left(S_l, S_l[lo] + need) - 1, hi - 1)
            delay += max(0.0, edone_l[k] - now)
    return delay
