"""The timing pass compiled (numba ``@njit(nogil=True)``, ``_fast_timing_kernels``).

The rule is ``_queues._timing_once`` (plain Python, the definition, with
``_early.pull_forward``; and ``_stall.prefetch_stall``'s loop, for the prediction); this
module computes the same values -- the gaps' ``e_done``,
``kp``, ``p_start``, ``p_end``, ``t_on``, ``chosen`` and ``bad``, the bytes saved per tick
and the count dropped -- over arrays in place of ``_Gap`` objects, with the same
floating-point operations in the same order, and releases the GIL in its loops (the
runtime plans on a background thread). The orders the reference sorts its lists in are
stable sorts here too (``np.lexsort`` on the same keys, ties in list order), so the queues
see the copies in the same order. ``tests/test_planner_fast.py`` checks that the plans are
identical on generated traces, and that this path was taken.

It is used where the compiled selection sweep is (``_fast.available()``: numba installed,
``UVM_SCHED_PLANNER_KERNEL`` not ``python``).
"""
from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _fast

if TYPE_CHECKING:
    from ._core import _Timeline

__all__ = ["available", "calls", "kernels", "timing_once"]

_mod: Any = None  # _fast_timing_kernels, once imported
_state = {"calls": 0}


def available() -> bool:
    """True when the compiled timing pass can be used (as the compiled sweep)."""
    global _mod
    if not _fast.available():
        return False
    if _mod is None:
        from . import _fast_timing_kernels  # imports numba, present when _fast is
        _mod = _fast_timing_kernels
    return True


def kernels() -> Any:
    """The compiled kernels' module (after ``available()`` said True)."""
    assert _mod is not None
    return _mod


def calls() -> int:
    """How many timing passes the compiled path has made in this process (for tests that
    check the fast path was taken)."""
    return _state["calls"]


def _fifo(issue, dur, after, period: float, second, busy):
    """``_queues.cyclic_fifo`` (same arguments and result), its loop compiled."""
    shift = np.where(second, period, 0.0)
    r = issue - shift
    a = after - shift
    order = np.lexsort((np.arange(len(r)), r))
    if busy is None:
        bs = be = np.zeros(0)
        slow, has_busy = 1.0, False
    else:
        bs, be = np.asarray(busy[0], np.float64), np.asarray(busy[1], np.float64)
        slow, has_busy = float(busy[2]), True
    start, end = _mod.fifo(r, a, np.asarray(dur, np.float64), order, float(period), bs, be,
                           slow, has_busy)
    return start + shift, end + shift


def timing_once(chosen, tl: _Timeline) -> tuple[np.ndarray, int]:
    """``_queues._timing_once`` (same arguments, the same effects on the gaps, the same
    result: bytes saved per tick and how many gaps were dropped), compiled. ``chosen``:
    the gaps of the pass, all chosen, at least one. O(G log G + T + ticks looked at)."""
    from . import _queues

    assert available() and chosen
    n = len(chosen)
    fields = operator.attrgetter("blk", "ke", "u2", "kp", "kp_min", "kp_sel", "t_off",
                                 "t_on", "dead", "bad")
    table = np.array([fields(g) for g in chosen], np.int64).reshape(n, 10).T
    blk, ke, u2, kp, kp_min, kp_sel, t_off, t_on = (np.ascontiguousarray(c)
                                                     for c in table[:8])
    dead, bad = table[8] != 0, table[9] != 0
    live = np.ones(n, bool)
    C, q, tau, T, E, budget = tl.C, tl.q, tl.tau, tl.T, tl.E, int(tl.budget)
    size, live_to, end_lo, free_event = (tl.int64(k) for k in
                                         ("size", "live_to", "end_lo", "free_event"))
    period = C[T]
    cap = _queues.ROOM_LOOKBACK_TICKS
    # evictions on the d2h queue, as early as allowed
    dur = tl.d2h[blk]
    second = ke >= E
    st, e_done = _fifo(tau[ke], dur, np.zeros(n), period, second, None)
    busy = (*_queues.busy_intervals(st - np.where(second, period, 0.0), dur, period),
            tl.duplex_slow)
    # prefetch points, backward from the latest deadline (ties: block, then list order)
    pf = np.flatnonzero(~dead)
    c_u2 = C[u2[pf]]
    latest_first = pf[np.lexsort((blk[pf], -c_u2))]
    resident = _mod.resident_as_selected(blk, dead, t_off, ke, kp_min, kp_sel, q, size,
                                         live_to, tl.base, T)
    dropped = int(_mod.prefetch_points(latest_first, blk, u2, ke, kp, kp_min, kp_sel, live,
                                       bad, resident, q, tau, C, tl.h2d, free_event, size,
                                       T, budget, cap))
    # pulled forward where seen gaps leave room (_early)
    seen = _mod.resident_seen(blk, dead, t_off, e_done, ke, kp, kp_min, kp_sel, live, end_lo,
                              q, C, size, live_to, tl.base, T)
    _mod.pull_forward(pf[np.lexsort((blk[pf], c_u2))], blk, ke, kp, kp_min, kp_sel, live,
                      end_lo, seen, q, T, budget, size, cap)
    # prefetches on the h2d queue, in the backward pass's order
    go = latest_first[live[latest_first]]
    p_start = np.fromiter((g.p_start for g in chosen), np.float64, n)
    p_end = np.fromiter((g.p_end for g in chosen), np.float64, n)
    if len(go):
        p_start[go], p_end[go] = _fifo(tau[kp[go]], tl.h2d[blk[go]], e_done[go], period,
                                       kp[go] >= E, busy)
        t_on[go] = q[kp[go]] + 1
    saved, lost = _mod.saved_by_tick(blk, dead, t_off, t_on, live, bad, size, live_to, T)
    _state["calls"] += 1
    for g, e, k, s0, e1, on, c, b in zip(chosen, e_done.tolist(), kp.tolist(),
                                         p_start.tolist(), p_end.tolist(), t_on.tolist(),
                                         live.tolist(), bad.tolist()):
        g.e_done, g.kp, g.p_start, g.p_end, g.t_on, g.chosen, g.bad = e, k, s0, e1, on, c, b
    return saved, dropped + int(lost)
