"""The compiled loops of the timing pass (see ``_fast_timing`` for the contract: the same
values as ``_queues._timing_once``). Imported only when numba is installed; module-level
kernels, so that numba's on-disk cache (``cache=True``) keeps them between processes.

Each kernel is the loop of the plain-Python function it names, over arrays in place of
``_Gap`` objects, with the same floating-point operations in the same order (so the same
IEEE values) and integer bytes."""
from __future__ import annotations

import numpy as np
from numba import njit

from ._fast_kernels import segments

__all__ = ["fifo", "resident_as_selected", "prefetch_points", "pull_forward", "saved_by_tick",
           "prefetch_stall"]

jit = njit(nogil=True, cache=True)


@jit
def stretched_end(s0, dur, bs, be, slow):  # _queues._stretched_end
    if slow >= 1.0:
        return s0 + dur
    k = np.searchsorted(be, s0, side="right")
    t, left = s0, dur
    while left > 0.0:
        if k >= bs.shape[0] or t + left <= bs[k]:
            return t + left
        if t < bs[k]:
            left -= bs[k] - t
            t = bs[k]
        if slow > 0.0 and left <= slow * (be[k] - t):
            return t + left / slow
        left -= slow * (be[k] - t)
        t = be[k]
        k += 1
    return t


@jit
def fifo(r, a, dur, order, period, bs, be, slow, has_busy):
    """``_queues.cyclic_fifo``'s loop: in-iteration issue times ``r``, earliest starts
    ``a``, durations ``dur`` (ns), in ``order``; twice, the second pass starting with the
    first one's backlog. Returns in-iteration (start, end) ns."""
    n = r.shape[0]
    start = np.zeros(n)
    end = np.zeros(n)
    carry = 0.0
    for _ in range(2):
        free_at = carry
        for j in range(n):
            i = order[j]
            s0 = max(r[i], free_at, a[i])
            start[i] = s0
            free_at = stretched_end(s0, dur[i], bs, be, slow) if has_busy else s0 + dur[i]
            end[i] = free_at
        carry = max(0.0, free_at - period)
    return start, end


@jit
def add_window(sv, a, b, T, sz, seg):  # the cyclic segments of [a, b) save sz bytes
    c = segments(a, b, T, seg)
    for j in range(c):
        sv[seg[2 * j]] += sz
        sv[seg[2 * j + 1]] -= sz
    return c


@jit
def resident_from(base, sv, T):  # base - cumsum(sv)[:T]
    out = np.empty(T, np.int64)
    run = 0
    for t in range(T):
        run += sv[t]
        out[t] = base[t] - run
    return out


@jit
def selected_point(ke, kp_min, kp_sel):  # _queues.selected_point
    return max(ke + 1, kp_min, kp_sel)


@jit
def resident_as_selected(blk, dead, t_off, ke, kp_min, kp_sel, q, size, live_to, base, T):
    """``_queues._resident_as_selected`` over every gap given (all chosen)."""
    nq = q.shape[0]
    sv = np.zeros(T + 1, np.int64)
    seg = np.empty(4, np.int64)
    for i in range(blk.shape[0]):
        b = blk[i]
        if dead[i]:
            end = live_to[b] + 1
        else:
            end = q[min(selected_point(ke[i], kp_min[i], kp_sel[i]), nq - 1)] + 1
        add_window(sv, t_off[i], end, T, size[b], seg)
    return resident_from(base, sv, T)


@jit
def earliest_with_room(resident, q, T, budget, sz, lo, hi, cap):
    """``_queues._earliest_with_room``: the earliest control point in [lo, hi] from which
    ``sz`` bytes fit until ``hi``'s tick (looking back at most ``cap`` ticks); claims the
    room in ``resident``."""
    end = q[hi] + 1
    start = max(q[lo] + 1, end - cap)
    if start >= end:
        return hi
    first_ok = start
    for t in range(end - 1, start - 1, -1):  # the last tick without room
        if resident[t % T] + sz > budget:
            first_ok = t + 1
            break
    k = np.searchsorted(q, first_ok - 1, side="left")
    k = min(max(k, lo), hi)
    for t in range(q[k] + 1, end):
        resident[t % T] += sz
    return k


@jit
def prefetch_points(order, blk, u2, ke, kp, kp_min, kp_sel, chosen, bad, resident, q, tau,
                    C, h2d, free_event, size, T, budget, cap):
    """``_queues._prefetch_points`` over the prefetches ``order`` (indices, deadline order
    latest first): sets ``kp``, drops (``chosen``/``bad``) a gap without a control point
    before its use. Returns how many it dropped."""
    nq = q.shape[0]
    dropped = 0
    cur = np.inf
    for i in order:
        b = blk[i]
        finish = min(C[u2[i]], cur)
        latest = finish - h2d[b]
        k = np.searchsorted(tau, latest, side="right") - 1
        fe = free_event[b]
        if fe >= 0:
            k = min(k, fe - 1)
        hi = selected_point(ke[i], kp_min[i], kp_sel[i])
        lo = max(k, ke[i] + 1, kp_min[i])
        if lo < hi and hi < nq:
            k = earliest_with_room(resident, q, T, budget, size[b], lo, hi, cap)
        else:
            k = max(k, hi)
        if k >= nq or q[k] >= u2[i] or (fe >= 0 and k >= fe):
            chosen[i] = False
            bad[i] = True
            dropped += 1
            continue
        kp[i] = k
        cur = min(cur, max(latest, tau[k]))
    return dropped


@jit
def resident_seen(blk, dead, t_off, e_done, ke, kp, kp_min, kp_sel, chosen, end_lo, q, C,
                  size, live_to, base, T):
    """``_early._resident_seen``: only the chosen seen gaps (dead tails, blocks with seen
    uses), each from where its eviction has landed to where its block is counted back."""
    nq = q.shape[0]
    sv = np.zeros(T + 1, np.int64)
    for i in range(blk.shape[0]):
        b = blk[i]
        if not chosen[i] or not (dead[i] or end_lo[b] < 0):
            continue
        back = min(kp[i], selected_point(ke[i], kp_min[i], kp_sel[i]))
        a = max(t_off[i], np.searchsorted(C, e_done[i], side="left"))
        e = live_to[b] + 1 if dead[i] else q[min(back, nq - 1)] + 1
        sz = size[b]
        if e - a >= T:
            sv[0] += sz
            sv[T] -= sz
        elif e > a:
            lo, hi = (a - T, e - T) if a >= T else (a, e)
            if hi > T:  # [lo, T) and [0, hi - T)
                sv[lo] += sz
                sv[T] -= sz
                sv[0] += sz
                sv[hi - T] -= sz
            else:
                sv[lo] += sz
                sv[hi] -= sz
    return resident_from(base, sv, T)


@jit
def pull_forward(order, blk, ke, kp, kp_min, kp_sel, chosen, end_lo, resident, q, T,
                 budget, size, cap):
    """``_early.pull_forward`` over the prefetches ``order`` (indices, deadline order
    earliest first; the dropped ones skipped). Returns how many moved."""
    nq = q.shape[0]
    moved = prev = 0
    for i in order:
        if not chosen[i]:
            continue
        b = blk[i]
        back = min(kp[i], selected_point(ke[i], kp_min[i], kp_sel[i]))
        if end_lo[b] < 0:
            lo = max(ke[i] + 1, kp_min[i], prev)
            if lo < back and back < nq:
                k = earliest_with_room(resident, q, T, budget, size[b], lo, back, cap)
                if k < back:
                    kp[i] = k
                    moved += 1
        prev = max(prev, min(kp[i], back))
    return moved


@jit
def saved_by_tick(blk, dead, t_off, t_on, chosen, bad, size, live_to, T):
    """The saved-bytes step of ``_queues._timing_once``: each chosen gap saves its block's
    bytes over [t_off, t_on) (a dead tail to its block's end); a gap with no tick left is
    dropped. Returns (saved per tick, how many dropped)."""
    sv = np.zeros(T + 1, np.int64)
    seg = np.empty(4, np.int64)
    dropped = 0
    for i in range(blk.shape[0]):
        if not chosen[i]:
            continue
        b = blk[i]
        if dead[i]:
            t_on[i] = live_to[b] + 1
        if add_window(sv, t_off[i], t_on[i], T, size[b], seg) == 0:
            chosen[i] = False
            bad[i] = True
            dropped += 1
    out = np.empty(T, np.int64)
    run = 0
    for t in range(T):
        run += sv[t]
        out[t] = run
    return out, dropped


@jit
def prefetch_stall(issue_tick, issue_at, p_start, p_end, u2, C):
    """``_stall.prefetch_stall``'s loop over the prefetches in issue order: the compute's
    delay at the iteration's end (ns), a Fenwick tree of maxima over deadline ticks."""
    n = C.shape[0]
    tree = np.zeros(n + 1)
    delay = 0.0
    free_at = 0.0
    for j in range(issue_tick.shape[0]):
        start = max(issue_at[j] + fenwick_most(tree, issue_tick[j]), free_at)
        free_at = start + (p_end[j] - p_start[j])
        late = free_at - C[u2[j]]
        if late > delay:
            delay = late
        if late > 0:
            i = u2[j] + 1
            while i <= n:
                tree[i] = max(tree[i], late)
                i += i & -i
    return delay


@jit
def fenwick_most(tree, i):  # the largest of the entries at indices <= i (0 where none)
    i += 1
    most = 0.0
    while i > 0:
        most = max(most, tree[i])
        i -= i & -i
    return most
