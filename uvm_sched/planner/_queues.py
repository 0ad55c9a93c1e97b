"""The two copy-engine queues: where the chosen gaps' evictions and prefetches run, and the
bytes each tick saves as a result (``_core``, Note [Timing]; Note [Timeline] for ``C``,
``q`` and ``tau``). Works on ``_core._Timeline`` and the gaps' fields in place.
"""
from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

import numpy as np

from . import _early

if TYPE_CHECKING:
    from ._core import _Timeline

__all__ = ["segments", "timing", "cyclic_fifo", "busy_intervals", "selected_point"]


def segments(t_off: int, t_on: int, T: int) -> list[tuple[int, int]]:
    """The cyclic tick segments (in 0..T) of an unrolled window [t_off, t_on)."""
    if t_on <= t_off:
        return []
    if t_on - t_off >= T:
        return [(0, T)]
    if t_on <= T:
        return [(t_off, t_on)]
    if t_off >= T:
        return [(t_off - T, t_on - T)]
    return [(t_off, T), (0, t_on - T)]


def timing(chosen, tl: _Timeline) -> np.ndarray:
    """Place the chosen gaps on the two copy engines (FIFO in issue order) and return the
    bytes each tick saves (``_core``, Note [Timing]). Evictions go as early as allowed;
    prefetches as late as their deadline and the prefetches behind them allow (backward
    list scheduling). A gap the link cannot serve in time is dropped (``bad``); repeated
    until the choice is stable."""
    from . import _fast_timing  # (it reads this module's functions: imported at run time)

    for _ in range(4):
        live = [g for g in chosen if g.chosen]
        # the compiled pass where the compiled sweep runs (the same values, _fast_timing)
        saved, dropped = _fast_timing.timing_once(live, tl) \
            if live and _fast_timing.available() else _timing_once(live, tl)
        if not dropped:
            return saved
    return saved


# How far back (ticks) a prefetch looks for room to land early: bounds the work per
# prefetch (``_earliest_with_room``, ``_early.pull_forward``).
ROOM_LOOKBACK_TICKS = 4096


def _earliest_with_room(resident, tl: _Timeline, sz: int, lo: int, hi: int,
                        cap=ROOM_LOOKBACK_TICKS) -> int:
    """The earliest control point in [lo, hi] from which the block (``sz`` bytes) can be
    back on the device until ``hi``'s tick without exceeding the budget; claims the room
    in ``resident``. Looks back at most ``cap`` ticks. O(ticks looked at), vectorised."""
    q, T = tl.q, tl.T
    end = int(q[hi]) + 1
    start = max(int(q[lo]) + 1, end - cap)
    if start >= end:
        return hi
    ticks = np.arange(start, end)
    idx = ticks % T if end > T else ticks
    bad = np.flatnonzero(resident[idx] + sz > tl.budget)
    first_ok = start if not len(bad) else int(ticks[bad[-1]]) + 1
    # the earliest control point whose issue tick (q + 1) is at or after first_ok
    k = int(np.searchsorted(q, first_ok - 1, side="left"))
    k = min(max(k, lo), hi)
    s0 = int(q[k]) + 1
    if s0 < end:
        sl = np.arange(s0, end)
        np.add.at(resident, sl % T, sz)
    return k


def cyclic_fifo(issue: np.ndarray, dur: np.ndarray, after: np.ndarray, period: float,
                 second: np.ndarray, busy=None) -> tuple[np.ndarray, np.ndarray]:
    """Start times of copies on one FIFO copy engine in the steady state of a periodic
    iteration. ``issue``: unrolled issue times (the second iteration's control points are
    ``period`` later), ``after``: unrolled times a copy may not start before (its block's
    own eviction), ``second``: the copy is issued in the unrolled second iteration. Every
    iteration issues all of them, so a copy of the second iteration shares the engine with
    the first iteration's copies at the same point of the iteration: the queue runs on
    in-iteration times, twice (the second pass starts with the backlog the first one left
    over the iteration's end). ``busy``: ``(starts, ends, slow)``, the other direction's
    busy intervals (in-iteration ns, sorted, disjoint) during which a copy runs at
    ``slow`` times its own rate (the link's duplex cap; ``_mechanisms.copy_end``'s rule: the
    copies placed first keep their times). Returns unrolled start times and the unrolled
    end times. O(G log G) (plus the busy intervals a copy spans)."""
    shift = np.where(second, period, 0.0)
    r = issue - shift
    a = after - shift
    order = np.lexsort((np.arange(len(r)), r))
    start = [0.0] * len(r)
    end = [0.0] * len(r)
    carry = 0.0
    # the loop reads Python floats (the same IEEE values as the arrays': the same sums and
    # maxima), a few times faster than indexing numpy arrays element by element
    rl, al, dl = r.tolist(), a.tolist(), np.asarray(dur, np.float64).tolist()
    if busy is not None:
        busy = (np.asarray(busy[0]).tolist(), np.asarray(busy[1]).tolist(), busy[2])
    for _ in range(2):
        free_at = carry
        for i in order.tolist():
            s0 = max(rl[i], free_at, al[i])
            start[i] = s0
            free_at = s0 + dl[i] if busy is None else _stretched_end(s0, dl[i], *busy)
            end[i] = free_at
        carry = max(0.0, free_at - period)
    return np.asarray(start) + shift, np.asarray(end) + shift


def busy_intervals(start: np.ndarray, dur: np.ndarray, period: float):
    """The merged busy intervals of one copy engine whose copies (in-iteration ``start``
    ns, ``dur`` ns) repeat every ``period`` ns: this iteration's, the one before and the
    one after (a copy queued past the iteration's end overlaps the next one's)."""
    if not len(start):
        return np.zeros(0), np.zeros(0)
    s = np.concatenate([start - period, start, start + period])
    e = s + np.concatenate([dur, dur, dur])
    o = np.argsort(s, kind="stable")
    s, e = s[o], np.maximum.accumulate(e[o])
    new = np.concatenate([[True], s[1:] > e[:-1]])
    last = np.concatenate([np.flatnonzero(new)[1:] - 1, [len(s) - 1]])
    return s[new], e[last]


def _stretched_end(s0: float, dur: float, bs: np.ndarray, be: np.ndarray,
                   slow: float) -> float:
    """End of a copy that starts at ``s0`` and takes ``dur`` ns alone, running at ``slow``
    times its rate inside the intervals [bs, be) (0: it waits them out)."""
    if slow >= 1.0:
        return s0 + dur
    k = bisect.bisect_right(be, s0)  # np.searchsorted(be, s0, side="right")
    t, left = s0, dur
    while left > 0.0:
        if k >= len(bs) or t + left <= bs[k]:
            return t + left
        if t < bs[k]:  # full rate up to the next busy interval
            left -= bs[k] - t
            t = bs[k]
        if slow > 0.0 and left <= slow * (be[k] - t):
            return t + left / slow
        left -= slow * (be[k] - t)
        t = float(be[k])
        k += 1
    return t


def _timing_once(chosen, tl: _Timeline):
    """One timing pass: evictions on the d2h queue, prefetch points by backward list
    scheduling, prefetches on the h2d queue, then the bytes saved per tick. Returns
    ``(saved, dropped)``: how many gaps it dropped."""
    C, q, tau, T, E = tl.C, tl.q, tl.tau, tl.T, tl.E
    busy = None
    if chosen:
        ke = np.fromiter((g.ke for g in chosen), np.int64, len(chosen))
        dur = tl.d2h[np.fromiter((g.blk for g in chosen), np.int64, len(chosen))]
        st, en = cyclic_fifo(tau[ke], dur, np.zeros(len(chosen)), C[T], ke >= E)
        for g, e in zip(chosen, en.tolist()):
            g.e_done = e
        busy = (*busy_intervals(st - np.where(ke >= E, C[T], 0.0), dur, C[T]), tl.duplex_slow)
    pf = [g for g in chosen if not g.dead]
    dropped = _prefetch_points(pf, tl, _resident_as_selected(chosen, tl))
    _early.pull_forward(chosen, tl)
    pf = [g for g in pf if g.chosen]
    if pf:
        kp = np.array([g.kp for g in pf], np.int64)
        st, en = cyclic_fifo(tau[kp], tl.h2d[[g.blk for g in pf]],
                             np.array([g.e_done for g in pf]), C[T], kp >= E, busy)
        for g, s0, e in zip(pf, st.tolist(), en.tolist()):
            g.p_start, g.p_end = s0, e
            g.t_on = int(q[g.kp]) + 1
    saved = [0] * (T + 1)  # Python ints: exact sums, no numpy scalar per gap
    size, live_to = tl.listed("size"), tl.listed("live_to")
    for g in chosen:
        if not g.chosen:
            continue
        if g.dead:
            g.t_on = int(live_to[g.blk]) + 1
        segs = segments(g.t_off, g.t_on, T)
        if not segs:
            g.chosen, g.bad = False, True  # the link is too busy for this gap to save anything
            dropped += 1
            continue
        for s, e in segs:
            saved[s] += size[g.blk]
            saved[e] -= size[g.blk]
    return np.cumsum(np.asarray(saved, np.int64))[:T], dropped


def selected_point(g) -> int:
    """The control point from which the selection counts gap ``g``'s block back on the
    device: its own choice, never before the eviction's next point or the earliest prefetch
    point (``kp_min``)."""
    return max(g.ke + 1, g.kp_min, g.kp_sel)


def _resident_as_selected(chosen, tl: _Timeline) -> np.ndarray:
    """Resident bytes per tick if every prefetch were issued where the selection put it."""
    T, nq = tl.T, len(tl.q)
    # Python lists and ints: the same values and exact sums, no numpy scalar per gap
    q, size, live_to = tl.listed("q"), tl.listed("size"), tl.listed("live_to")
    sv = [0] * (T + 1)
    for g in chosen:
        end = int(live_to[g.blk]) + 1 if g.dead else \
            int(q[min(selected_point(g), nq - 1)]) + 1
        for a, b in segments(g.t_off, end, T):
            sv[a] += size[g.blk]
            sv[b] -= size[g.blk]
    return tl.base - np.cumsum(np.asarray(sv, np.int64))[:T]


def _prefetch_points(pf, tl: _Timeline, resident: np.ndarray) -> int:
    """Backward list scheduling of the prefetches ``pf`` (``_core``, Note [Timing]): from
    the latest deadline, each as late as its use and the prefetch behind it allow, then at
    the control point at or before that. Sets ``kp``; drops (``bad``) a gap whose prefetch
    has no control point before its use. Returns how many it dropped."""
    q, nq = tl.q, len(tl.q)
    # Python lists and bisect in the loop: the same IEEE values and the same positions as
    # indexing the arrays and np.searchsorted (side "right" is bisect_right), a few times
    # faster per gap (one numpy call per scalar costs ~2 us; tens of thousands of gaps)
    C, tau, h2d = tl.listed("C"), tl.listed("tau"), tl.listed("h2d")
    free_event = tl.listed("free_event")
    dropped = 0
    pf.sort(key=lambda g: (-C[g.u2], g.blk))
    cur = np.inf
    for g in pf:
        finish = min(C[g.u2], cur)
        latest = finish - h2d[g.blk]
        kp = bisect.bisect_right(tau, latest) - 1
        fe = free_event[g.blk]
        if fe >= 0:
            kp = min(kp, fe - 1)
        # Never earlier than the selection assumed unless the budget has room for the
        # block over the extra ticks: bringing it back early claims memory (the driver
        # would evict something else where there is none); where there is no room a
        # congested link makes the prefetch late instead (predicted as stall).
        hi = selected_point(g)
        lo = max(kp, g.ke + 1, g.kp_min)
        if lo < hi < nq:
            kp = _earliest_with_room(resident, tl, int(tl.size[g.blk]), lo, hi)
        else:
            kp = max(kp, hi)
        if kp >= nq or q[kp] >= g.u2 or (fe >= 0 and kp >= fe):
            g.chosen, g.bad = False, True
            dropped += 1
            continue
        g.kp = kp
        cur = min(cur, max(latest, tau[kp]))
    return dropped
