"""The compiled selection sweep and its binary heaps (see ``_fast`` for the contract:
the same decisions as ``_reference.select``). Imported only when numba is installed; the
kernels are module-level so that numba's on-disk cache (``cache=True``) keeps them between
processes (a first compile takes ~6 s on a 2-core machine)."""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["kernel"]

jit = njit(nogil=True, cache=True)


@jit
def less(h, i, j):
    for c in range(h.shape[1]):
        if h[i, c] != h[j, c]:
            return h[i, c] < h[j, c]
    return False


@jit
def swap(h, i, j):
    for c in range(h.shape[1]):
        h[i, c], h[j, c] = h[j, c], h[i, c]


@jit
def push(h, n, row):  # push row; returns the new size
    h[n, :] = row
    i = n
    while i > 0:
        up = (i - 1) >> 1
        if less(h, i, up):
            swap(h, i, up)
            i = up
        else:
            break
    return n + 1


@jit
def pop(h, n, out):  # the smallest item into `out`; returns the new size
    out[:] = h[0]
    n -= 1
    if n > 0:
        h[0, :] = h[n]
        i = 0
        while True:
            lo, r = 2 * i + 1, 2 * i + 2
            m = i
            if lo < n and less(h, lo, m):
                m = lo
            if r < n and less(h, r, m):
                m = r
            if m == i:
                break
            swap(h, i, m)
            i = m
    return n


@jit
def segments(a, b, T, out):  # _queues.segments into out[0:2], out[2:4]; returns count
    if b <= a:
        return 0
    if b - a >= T:
        out[0], out[1] = 0, T
        return 1
    if b <= T:
        out[0], out[1] = a, b
        return 1
    if a >= T:
        out[0], out[1] = a - T, b - T
        return 1
    out[0], out[1], out[2], out[3] = a, T, 0, b - T
    return 2


@jit
def first_chosen(gi, grp, ptr, members, chosen):
    k = grp[gi]
    if k < 0:
        return -1
    for j in range(ptr[k], ptr[k + 1]):
        if chosen[members[j]]:
            return members[j]
    return -1


@jit
def by_start(items, T):  # CSR of items (gi, s, e) by s, stable
    cnt = np.zeros(T + 1, np.int64)
    for r in range(items.shape[0]):
        cnt[items[r, 1] + 1] += 1
    for t in range(T):
        cnt[t + 1] += cnt[t]
    pos = cnt[:T].copy()
    out = np.empty_like(items)
    for r in range(items.shape[0]):
        s = items[r, 1]
        out[pos[s], :] = items[r]
        pos[s] += 1
    return cnt, out


@jit
def windows_by_start(t_off, t_on, t_on_late, chosen, bad, T):
    """(gi, s, e) items: the on-time window segments of the unchosen gaps and the late
    window segments of every gap (bad ones left out), each as CSR by start tick."""
    n = t_off.shape[0]
    seg = np.empty(4, np.int64)
    st = np.empty((2 * n, 3), np.int64)
    lt = np.empty((2 * n, 3), np.int64)
    ns = nl = 0
    for gi in range(n):
        if bad[gi]:
            continue
        if not chosen[gi]:
            c = segments(t_off[gi], t_on[gi], T, seg)
            for j in range(c):
                st[ns, 0], st[ns, 1], st[ns, 2] = gi, seg[2 * j], seg[2 * j + 1]
                ns += 1
        c = segments(t_off[gi], t_on_late[gi], T, seg)
        for j in range(c):
            lt[nl, 0], lt[nl, 1], lt[nl, 2] = gi, seg[2 * j], seg[2 * j + 1]
            nl += 1
    sptr, sitems = by_start(st[:ns], T)
    lptr, litems = by_start(lt[:nl], T)
    return sptr, sitems, lptr, litems


@jit
def append(picked, npk, gi):  # picked[npk] = gi, the array grown when full; returns both
    if npk == picked.shape[0]:
        picked = np.concatenate((picked, np.empty(npk, np.int64)))
    picked[npk] = gi
    return picked, npk + 1


@jit
def upgrade_ends(diff, t, T, sz, seg2):
    """A chosen sibling upgraded to a narrower guard: its two extra end segments
    (``seg2``) save ``sz`` bytes; those ahead of ``t`` go into ``diff``. Returns the bytes
    saved at ``t`` itself (the caller takes them off ``run`` and ``need``)."""
    now = 0
    for j in range(2):
        s2, e2 = seg2[2 * j], seg2[2 * j + 1]
        if e2 <= s2:
            continue
        if s2 <= t and t < e2:
            now += sz
            diff[min(e2, T)] += sz
        elif s2 > t and s2 < T:
            diff[s2] -= sz
            diff[min(e2, T)] += sz
    return now


@jit
def unpark(t, late, nlh, row5, litems, park_head, park_next):  # Note [parked late items]
    r = park_head[t]
    park_head[t] = -1
    while r >= 0:
        gi, s, e = litems[r, 0], litems[r, 1], litems[r, 2]
        row5[0], row5[1], row5[2], row5[3], row5[4] = -e, gi, s, e, r
        nlh = push(late, nlh, row5)
        r = park_next[r]
    return nlh


@jit
def kernel(blk, t_off, t_on, t_on_late, level, chosen, bad, kp_min, grp, ptr, members,
           resident, budget, size, T, q):
    n = blk.shape[0]
    seg = np.empty(4, np.int64)
    seg2 = np.empty(4, np.int64)
    sptr, sitems, lptr, litems = windows_by_start(t_off, t_on, t_on_late, chosen, bad, T)
    ns, nl = sitems.shape[0], litems.shape[0]
    heap = np.empty((max(ns, 1), 6), np.int64)  # (level, -reach, -size, gi, s, e)
    late = np.empty((max(nl, 1), 5), np.int64)  # (-e, gi, s, e, item)
    # Note [parked late items]: an item whose gap is chosen and already saving at this
    # tick is popped and put back by the reference without effect, at every tick until
    # its saving window ends (O(T x items): 1.6M pops per sweep at 300k events). Here it
    # is parked until the first tick it could act again (t_on only grows, so waking at
    # the t_on it has now is never late; if it is still saving then, it is parked again).
    # The items left in the heap keep their order, so the sweep decides the same.
    park_head = np.full(T + 1, -1, np.int64)
    park_next = np.full(max(nl, 1), -1, np.int64)
    deferred = np.empty((max(ns, 1), 6), np.int64)
    keep = np.empty((max(nl, 1), 5), np.int64)
    row6 = np.empty(6, np.int64)
    row5 = np.empty(5, np.int64)
    nh = nlh = 0
    diff = np.zeros(T + 1, np.int64)
    run = 0
    picked = np.empty(4 * n + 1, np.int64)
    npk = 0
    nq = q.shape[0]
    for t in range(T):
        run += diff[t]
        for r in range(sptr[t], sptr[t + 1]):
            gi, s, e = sitems[r, 0], sitems[r, 1], sitems[r, 2]
            reach = t_on[gi] if (e == T and t_on[gi] > T) else e
            row6[0], row6[1], row6[2] = level[gi], -reach, -size[blk[gi]]
            row6[3], row6[4], row6[5] = gi, s, e
            nh = push(heap, nh, row6)
        for r in range(lptr[t], lptr[t + 1]):
            gi, s, e = litems[r, 0], litems[r, 1], litems[r, 2]
            row5[0], row5[1], row5[2], row5[3], row5[4] = -e, gi, s, e, r
            nlh = push(late, nlh, row5)
        nlh = unpark(t, late, nlh, row5, litems, park_head, park_next)
        need = resident[t] + run - budget
        nd = 0
        while need > 0 and nh > 0:
            nh = pop(heap, nh, row6)
            gi, s, e = row6[3], row6[4], row6[5]
            if chosen[gi] or bad[gi] or e <= t:
                continue
            c = first_chosen(gi, grp, ptr, members, chosen)
            sz = size[blk[gi]]
            if c >= 0:
                if level[c] > level[gi]:
                    continue
                if t_off[c] <= t and t < t_on[c]:
                    deferred[nd, :] = row6
                    nd += 1
                    continue
                chosen[c] = False
                chosen[gi] = True
                picked, npk = append(picked, npk, gi)
                seg2[0], seg2[1] = t_off[gi], min(t_off[c], t_on[gi])
                seg2[2], seg2[3] = max(t_on[c], t_off[gi]), t_on[gi]
                now = upgrade_ends(diff, t, T, sz, seg2)
                run -= now
                need -= now
                continue
            chosen[gi] = True
            picked, npk = append(picked, npk, gi)
            run -= sz
            diff[e] += sz
            need -= sz
            c2 = segments(t_off[gi], t_on[gi], T, seg)
            for j in range(c2):
                s2, e2 = seg[2 * j], seg[2 * j + 1]
                if (s2 != s or e2 != e) and s2 > t:
                    diff[s2] -= sz
                    diff[e2] += sz
        for r in range(nd):
            nh = push(heap, nh, deferred[r])
        nk = 0
        while need > 0 and nlh > 0:
            nlh = pop(late, nlh, row5)
            gi, e = row5[1], row5[3]
            if e <= t:
                continue
            if bad[gi] or (not chosen[gi] and first_chosen(gi, grp, ptr, members,
                                                             chosen) >= 0):
                continue
            t_unr = t if t >= t_off[gi] else t + T
            if chosen[gi] and t_off[gi] <= t_unr and t_unr < t_on[gi]:
                wake = t_on[gi] - (t_unr - t)  # > t
                if wake < e:  # (else it expires first: the reference drops it then)
                    park_next[row5[4]] = park_head[wake]
                    park_head[wake] = row5[4]
                continue
            keep[nk, :] = row5
            nk += 1
            k = np.searchsorted(q, t_unr)
            if k >= nq:
                raise IndexError("planner: a late prefetch past the last control point")
            kp_min[gi] = max(kp_min[gi], k)
            end = min(q[k] + 1 - (t_unr - t), e)
            t_on[gi] = max(t_on[gi], q[k] + 1)
            if not chosen[gi]:
                chosen[gi] = True
                picked, npk = append(picked, npk, gi)
            sz = size[blk[gi]]
            run -= sz
            diff[end] += sz
            need -= sz
        for r in range(nk):
            nlh = push(late, nlh, keep[r])
    return picked[:npk].copy()
