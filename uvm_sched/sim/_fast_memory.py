"""The compiled simulator's state layout and memory steps (numba ``@njit(nogil=True)``):
the pending-release heap, claims, copies, the LRU queues, eviction, trimming, making room,
allocation, release and the plan's actions. Split from ``_fast_kernels`` (the per-tick loop,
faults, remote access and the plan table) so that each file reads in one look; the
contract is the same: each function mirrors the ``_engine.Engine`` method it names, and
the comments that say *why* live there.

State that the reference keeps in attributes lives in two arrays: ``I`` (int64 scalars,
indices below) and ``F`` (float64: the clock, the two copy engines' free times and tail
rates, and the profile's duplex cap); the
per-chunk arrays and the pending releases travel together as the tuple ``st`` = (rb, oh,
ready, hold, alive, dirty, stamp, rmostly, cblock, csize, heap times, heap bytes).

Numba's on-disk cache keys a kernel on its own file only: after editing this file, clear
``__pycache__`` (or touch ``_fast_kernels.py``) so that the cached loop recompiles with it.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ._mechanisms import copy_end as _copy_end

jit = njit(nogil=True, cache=True)

# I: int64 scalar state
CLAIMED, DEAD_RES, SEQ, QH, QN, DH, DN, PEAK, BH2D, BD2H, FAULTS, TH2D, TD2H, PEND, PN, NTR, \
    REC, ANY_REMOTE, ANY_RMOSTLY, ERR, ERR_NEED, NI = range(22)
# F: float64 scalar state
NOW, H2D_FREE, D2H_FREE, H2D_RATE, D2H_RATE, DUPLEX, HOST, NF = range(8)
# the ledger (Engine.led, same order)
L_POP, L_MIG, L_REUSED_IN, L_EVICTED, L_DISCARDED, L_FREED, L_REUSED_OUT, L_DUP, L_RIN, \
    L_ROUT = range(10)
# causes of a copy (the transfers table's names, _fast.CAUSES)
C_PLAN, C_EVICT, C_FAULT, C_REMOTE, C_COUNTER = range(5)
# engine action codes (_engine)
PREFETCH, EVICT, PREF_HOST, ACCESSED_BY, READ_MOSTLY, DISCARD = range(6)


@jit
def _heap_less(ht, hb, i, j):
    if ht[i] != ht[j]:
        return ht[i] < ht[j]
    return hb[i] < hb[j]


@jit
def _heap_push(I, ht, hb, t, b):
    n = I[PN]
    ht[n] = t
    hb[n] = b
    i = n
    while i > 0:
        up = (i - 1) >> 1
        if _heap_less(ht, hb, i, up):
            ht[i], ht[up] = ht[up], ht[i]
            hb[i], hb[up] = hb[up], hb[i]
            i = up
        else:
            break
    I[PN] = n + 1
    I[PEND] += b


@jit
def _heap_pop(I, ht, hb):
    """(time, bytes) of the smallest entry, removed (heapq.heappop on (time, bytes))."""
    t, b = ht[0], hb[0]
    n = I[PN] - 1
    I[PN] = n
    I[PEND] -= b
    if n > 0:
        ht[0], hb[0] = ht[n], hb[n]
        i = 0
        while True:
            lo, r = 2 * i + 1, 2 * i + 2
            m = i
            if lo < n and _heap_less(ht, hb, lo, m):
                m = lo
            if r < n and _heap_less(ht, hb, r, m):
                m = r
            if m == i:
                break
            ht[i], ht[m] = ht[m], ht[i]
            hb[i], hb[m] = hb[m], hb[i]
            i = m
    return t, b


@jit
def _retire(I, ht, hb, t):  # Engine._retire
    while I[PN] > 0 and ht[0] <= t:
        _, b = _heap_pop(I, ht, hb)
        I[CLAIMED] -= b


@jit
def _claim(I, n):  # Engine._claim
    I[CLAIMED] += n
    if I[CLAIMED] > I[PEAK]:
        I[PEAK] = I[CLAIMED]


# the duplex rule compiled from its one definition (``_mechanisms.copy_end``)
copy_end = jit(_copy_end)


@jit
def _xfer(I, F, trf, tri, d2h, start, nbytes, bw, cause, block, extra_s):  # Engine._xfer
    if not d2h:
        s = max(start, F[H2D_FREE])
        e = copy_end(s, nbytes, bw, F[D2H_FREE], F[D2H_RATE], F[DUPLEX]) + extra_s
        F[H2D_FREE] = e
        F[H2D_RATE] = bw
    else:
        s = max(start, F[D2H_FREE])
        e = copy_end(s, nbytes, bw, F[H2D_FREE], F[H2D_RATE], F[DUPLEX]) + extra_s
        F[D2H_FREE] = e
        F[D2H_RATE] = bw
    if I[REC] and nbytes > 0:
        if not d2h:
            I[BH2D] += nbytes
            I[TH2D] += nbytes
        else:
            I[BD2H] += nbytes
            I[TD2H] += nbytes
        n = I[NTR]
        trf[n, 0] = s
        trf[n, 1] = e
        tri[n, 0] = d2h
        tri[n, 1] = nbytes
        tri[n, 2] = block
        tri[n, 3] = cause
        I[NTR] = n + 1
    return e


@jit
def _push(I, stamp, q, qs, chunks, n):  # Engine._push (and _compact_q)
    if n == 0:
        return
    if I[QN] + n > len(q):
        w = 0
        for i in range(I[QH], I[QN]):
            if stamp[q[i]] == qs[i]:
                q[w] = q[i]
                qs[w] = qs[i]
                w += 1
        I[QH] = 0
        I[QN] = w
    s0 = I[SEQ]
    I[SEQ] = s0 + n
    qn = I[QN]
    for i in range(n):
        c = chunks[i]
        stamp[c] = s0 + i
        q[qn + i] = c
        qs[qn + i] = s0 + i
    I[QN] = qn + n


@jit
def _push_dead(I, stamp, alive, dq, dqs, chunks, n):  # Engine._push_dead
    if n == 0:
        return
    if I[DN] + n > len(dq):
        w = 0
        for i in range(I[DH], I[DN]):
            c = dq[i]
            if stamp[c] == dqs[i] and alive[c] == 2:
                dq[w] = c
                dqs[w] = dqs[i]
                w += 1
        I[DH] = 0
        I[DN] = w
    dn = I[DN]
    for i in range(n):
        dq[dn + i] = chunks[i]
        dqs[dn + i] = stamp[chunks[i]]
    I[DN] = dn + n


@jit
def _take_lru(I, stamp, q, qs, rb, pin, need, sel):  # Engine._take_lru; count into sel
    got = 0
    pos = I[QH]
    n = 0
    qn = I[QN]
    while got < need and pos < qn:
        c = q[pos]
        pos += 1
        if stamp[c] == qs[pos - 1] and rb[c] > 0 and not pin[c]:
            sel[n] = c
            n += 1
            got += rb[c]
            stamp[c] = -1
    h = I[QH]
    while h < pos and stamp[q[h]] != qs[h]:
        h += 1
    I[QH] = h
    return n


@jit
def _evict_chunks(I, F, led, st, trf, tri, ch, n, start, bw, cause, block):
    """Engine._evict_chunks over ch[:n]: (end of the write-back, bytes written)."""
    (rb, oh, ready, hold, alive, dirty, stamp, rmostly, cblock, csize, ht, hb, mapped) = st
    if n == 0:
        return start, 0
    wb = 0
    total = 0
    dsum = 0
    anydead = False
    rmax = ready[ch[0]]
    for i in range(n):
        c = ch[i]
        r = rb[c]
        dup = rmostly[cblock[c]] and not dirty[c] and oh[c] >= r
        if not dup:
            wb += r
        total += r
        if alive[c] == 2:
            dsum += r
            anydead = True
        if ready[c] > rmax:
            rmax = ready[c]
    led[L_EVICTED] += wb
    led[L_DUP] += total - wb
    if anydead:
        I[DEAD_RES] -= dsum
    s = max(start, rmax)
    end = _xfer(I, F, trf, tri, 1, s, wb, bw, cause, block, 0.0) if wb else s
    for i in range(n):
        c = ch[i]
        dead = alive[c] == 2
        dup = rmostly[cblock[c]] and not dirty[c] and oh[c] >= rb[c]
        if not dead and not dup:
            oh[c] = min(csize[c], oh[c] + rb[c])
        if dead:
            oh[c] = 0
        rb[c] = 0
        stamp[c] = -1
        hold[c] = end
        dirty[c] = False
        mapped[c] = False
    _heap_push(I, ht, hb, end, total)
    return end, wb


@jit
def _trim(I, F, led, st, trf, tri, cc, nd, short, t, bw):  # Engine._trim
    (rb, oh, ready, hold, alive, dirty, stamp, rmostly, cblock, csize, ht, hb, mapped) = st
    m = 0
    cum = 0
    for i in range(len(cc)):
        if rb[cc[i]] - nd[i] > 0:
            m += 1
            cum += rb[cc[i]] - nd[i]
            if cum >= short:
                break
    if m == 0:
        return t
    sel = np.empty(m, np.int64)
    ex = np.empty(m, np.int64)
    j = 0
    for i in range(len(cc)):
        if j == m:
            break
        e = rb[cc[i]] - nd[i]
        if e > 0:
            sel[j] = cc[i]
            ex[j] = e
            j += 1
    tot = 0
    dsum = 0
    anydead = False
    rmax = ready[sel[0]]
    for i in range(m):
        c = sel[i]
        tot += ex[i]
        if alive[c] == 2:
            anydead = True
            dsum += ex[i]
        if ready[c] > rmax:
            rmax = ready[c]
    if anydead:
        I[DEAD_RES] -= dsum
    led[L_EVICTED] += tot
    s = max(t, rmax)
    end = _xfer(I, F, trf, tri, 1, s, tot, bw, C_EVICT, -1, 0.0)
    for i in range(m):
        c = sel[i]
        rb[c] -= ex[i]
        if alive[c] != 2:
            oh[c] = min(csize[c], oh[c] + ex[i])
        hold[c] = max(hold[c], end)
        mapped[c] = False
    _heap_push(I, ht, hb, end, tot)
    return end


@jit
def _make_room(I, F, led, st, trf, tri, q, qs, pin, sel, need, at, B, bw_evict,
               has_trim, cc, nd):  # Engine._make_room
    (rb, oh, ready, hold, alive, dirty, stamp, rmostly, cblock, csize, ht, hb, mapped) = st
    _retire(I, ht, hb, at)
    t = at
    deficit = I[CLAIMED] + need - B
    if deficit <= 0:
        return t
    if I[PEND] >= deficit:
        while I[CLAIMED] + need > B:
            e, b = _heap_pop(I, ht, hb)
            I[CLAIMED] -= b
            t = max(t, e)
        return t
    n = _take_lru(I, stamp, q, qs, rb, pin, deficit - I[PEND], sel)
    end, _ = _evict_chunks(I, F, led, st, trf, tri, sel, n, t, bw_evict, C_EVICT, -1)
    short = I[CLAIMED] - I[PEND] + need - B
    if short > 0 and has_trim:
        end = max(end, _trim(I, F, led, st, trf, tri, cc, nd, short, t, bw_evict))
    while I[PN] > 0 and I[CLAIMED] + need > B:
        e, b = _heap_pop(I, ht, hb)
        I[CLAIMED] -= b
        t = max(t, e)
    if I[CLAIMED] + need > B:
        if I[ERR] == 0:
            I[ERR] = 1
            I[ERR_NEED] = need
    return max(t, end)


@jit
def _alloc(I, led, st, q, qs, dq, dqs, sel, b, bchunk0, bnchunk, bsize, pool):  # Engine.alloc
    (rb, oh, ready, hold, alive, dirty, stamp, rmostly, cblock, csize, ht, hb, mapped) = st
    c0, nch = bchunk0[b], bnchunk[b]
    for c in range(c0, c0 + nch):
        alive[c] = 1
        rb[c] = 0
        oh[c] = 0
        dirty[c] = False
    if not pool or I[DEAD_RES] <= 0:
        return
    want = min(bsize[b], I[DEAD_RES])
    if want <= 0:
        return
    if not I[DH] < I[DN]:
        return
    got = 0
    n = 0
    while I[DH] < I[DN]:
        c = dq[I[DH]]
        ok = stamp[c] == dqs[I[DH]] and alive[c] == 2 and rb[c] > 0
        I[DH] += 1
        if ok:
            sel[n] = c
            n += 1
            got += rb[c]
            if got >= want:
                break
    use = min(got, want)
    over = got - use
    if over > 0:
        last = sel[n - 1]
        n -= 1
        rb[last] = over
        I[DH] -= 1
    for i in range(n):
        rb[sel[i]] = 0
        stamp[sel[i]] = -1
    I[DEAD_RES] -= use
    led[L_REUSED_OUT] += use
    before = 0
    k = 0
    for c in range(c0, c0 + nch):
        f = min(max(use - before, 0), csize[c])
        before += csize[c]
        rb[c] = f
        if f > 0:
            sel[k] = c
            k += 1
    led[L_REUSED_IN] += use
    _push(I, stamp, q, qs, sel, k)


@jit
def _free(I, led, st, dq, dqs, sel, b, bchunk0, bnchunk, pool):  # Engine.free
    (rb, oh, ready, hold, alive, dirty, stamp, rmostly, cblock, csize, ht, hb, mapped) = st
    c0, nch = bchunk0[b], bnchunk[b]
    n = 0
    tot = 0
    for c in range(c0, c0 + nch):
        alive[c] = 2
        oh[c] = 0
        if rb[c] > 0:
            sel[n] = c
            n += 1
            tot += rb[c]
    if n == 0:
        return
    if pool:
        I[DEAD_RES] += tot
        _push_dead(I, stamp, alive, dq, dqs, sel, n)
    else:
        led[L_FREED] += tot
        I[CLAIMED] -= tot
        for i in range(n):
            rb[sel[i]] = 0
            stamp[sel[i]] = -1


@jit
def _duplicate_to_host(I, F, st, trf, tri, ch, n, start, bw, block):
    """Engine._duplicate_to_host over ch[:n]."""
    (rb, oh, ready, hold, alive, dirty, stamp, rmostly, cblock, csize, ht, hb, mapped) = st
    wb = 0
    rmax = start
    for i in range(n):
        c = ch[i]
        if dirty[c] or oh[c] < rb[c]:
            wb += rb[c]
        if ready[c] > rmax:
            rmax = ready[c]
    if wb == 0:
        return
    _xfer(I, F, trf, tri, 1, rmax, wb, bw, C_PLAN, block, 0.0)
    for i in range(n):
        c = ch[i]
        if dirty[c] or oh[c] < rb[c]:
            oh[c] = min(csize[c], oh[c] + rb[c])
            dirty[c] = False


@jit
def _act(I, F, led, st, trf, tri, q, qs, sel, pin, flags, action, b, lo, hi, at, B, V,
         bchunk0, bnchunk, bsize, bws):  # Engine.act
    (rb, oh, ready, hold, alive, dirty, stamp, rmostly, cblock, csize, ht, hb, mapped) = st
    pref_host, acc_by = flags
    bw_evict, bw_d2h_pf, bw_h2d_pf = bws
    if action == PREF_HOST:
        pref_host[b] = True
        I[ANY_REMOTE] = 1
        return
    if action == ACCESSED_BY:
        acc_by[b] = True
        I[ANY_REMOTE] = 1
        return
    if action == READ_MOSTLY:
        rmostly[b] = True
        I[ANY_RMOSTLY] = 1
        return
    c0, nch = bchunk0[b], bnchunk[b]
    size = bsize[b]
    lo = max(0, lo)
    hi = size if hi < 0 else min(hi, size)
    a = c0 + lo // V
    z = max(a + 1, c0 + -(-hi // V))
    z = min(z, c0 + nch)
    if action == DISCARD:
        tot = 0
        dsum = 0
        anydead = False
        for c in range(a, z):
            if rb[c] > 0:
                tot += rb[c]
                if alive[c] == 2:
                    anydead = True
                    dsum += rb[c]
        for c in range(a, z):
            oh[c] = 0
        if tot > 0:
            if anydead:
                I[DEAD_RES] -= dsum
            led[L_DISCARDED] += tot
            I[CLAIMED] -= tot
            for c in range(a, z):
                if rb[c] > 0:
                    rb[c] = 0
                    dirty[c] = False
                    stamp[c] = -1
        return
    if action == EVICT:
        n = 0
        for c in range(a, z):
            if rb[c] > 0:
                sel[n] = c
                n += 1
        if rmostly[b]:
            _duplicate_to_host(I, F, st, trf, tri, sel[:n].copy(), n, at, bw_d2h_pf, b)
        else:
            _evict_chunks(I, F, led, st, trf, tri, sel[:n].copy(), n, at, bw_d2h_pf, C_PLAN,
                          b)
        return
    if action == PREFETCH:
        n = 0
        for c in range(a, z):
            sel[n] = c
            n += 1
        _bring_in(I, F, led, st, trf, tri, q, qs, sel, pin, sel[:n].copy(), at, B, bw_evict,
                  bw_h2d_pf, C_PLAN, b)
        return
    I[ERR] = 2  # unknown action code
    I[ERR_NEED] = action


@jit
def _bring_in(I, F, led, st, trf, tri, q, qs, sel, pin, cand, at, B, bw_evict, bw, cause,
              block):  # Engine._bring_in
    (rb, oh, ready, hold, alive, dirty, stamp, rmostly, cblock, csize, ht, hb, mapped) = st
    ch = np.empty(len(cand), np.int64)
    n = 0
    rsum = 0
    msum = 0
    for c in cand:
        if csize[c] - rb[c] > 0:
            ch[n] = c
            n += 1
            rsum += rb[c]
            msum += csize[c] - rb[c]
    if n == 0:
        return
    if msum + rsum > B:
        k = 0
        cum = 0
        for i in range(n):
            cum += csize[ch[i]] - rb[ch[i]]
            if cum + rsum <= B:
                k += 1
            else:
                break
        n = k
        if n == 0:
            return
    ch = ch[:n]
    need = 0
    for c in ch:
        need += csize[c] - rb[c]
    for c in ch:
        pin[c] = True
    t = _make_room(I, F, led, st, trf, tri, q, qs, pin, sel, need, at, B, bw_evict,
                   False, ch, ch)
    for c in ch:
        pin[c] = False
    _claim(I, need)
    xb = 0
    hmax = hold[ch[0]]
    for c in ch:
        xb += min(csize[c] - rb[c], oh[c])
        if hold[c] > hmax:
            hmax = hold[c]
    led[L_MIG] += xb
    led[L_POP] += need - xb
    t = max(t, hmax)
    end = _xfer(I, F, trf, tri, 0, t, xb, bw, cause, block, 0.0) if xb else t
    for c in ch:
        rb[c] = csize[c]
        if not rmostly[cblock[c]]:
            oh[c] = 0
        ready[c] = end
        mapped[c] = False
    _push(I, stamp, q, qs, ch, n)
