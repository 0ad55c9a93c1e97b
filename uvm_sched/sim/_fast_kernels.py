"""The simulator's event loop as compiled kernels (numba ``@njit(nogil=True)``); see ``_fast``
for the contract: the same state changes, in the same order, as ``_engine.Engine`` driven by
``_api._run``, so that every figure is identical. Each function here names the ``Engine``
method it mirrors; the comments that say *why* live there. Imported only when numba is
installed; kernels are module-level so that numba's on-disk cache keeps them.

State that the reference keeps in attributes lives in two arrays: ``I`` (int64 scalars,
indices below) and ``F`` (float64: the clock and the two copy engines' free times); the
per-chunk arrays and the pending releases travel together as the tuple ``st`` = (rb, oh,
ready, hold, alive, dirty, stamp, rmostly, cblock, csize, heap times, heap bytes).
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["run", "plan_table"]

jit = njit(nogil=True, cache=True)

# I: int64 scalar state
CLAIMED, DEAD_RES, SEQ, QH, QN, DH, DN, PEAK, BH2D, BD2H, FAULTS, TH2D, TD2H, PEND, PN, NTR, \
    REC, ANY_REMOTE, ANY_RMOSTLY, ERR, ERR_NEED, NI = range(22)
# F: float64 scalar state
NOW, H2D_FREE, D2H_FREE, NF = range(4)
# the ledger (Engine.led, same order)
L_POP, L_MIG, L_REUSED_IN, L_EVICTED, L_DISCARDED, L_FREED, L_REUSED_OUT, L_DUP, L_RIN, \
    L_ROUT = range(10)
# causes of a copy (the transfers table's names, _fast.CAUSES)
C_PLAN, C_EVICT, C_FAULT, C_REMOTE = range(4)
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


@jit
def _xfer(I, F, trf, tri, d2h, start, nbytes, bw, cause, block, extra_s):  # Engine._xfer
    if not d2h:
        s = max(start, F[H2D_FREE])
        e = s + nbytes / bw + extra_s
        F[H2D_FREE] = e
    else:
        s = max(start, F[D2H_FREE])
        e = s + nbytes / bw + extra_s
        F[D2H_FREE] = e
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
    (rb, oh, ready, hold, alive, dirty, stamp, rmostly, cblock, csize, ht, hb) = st
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
    _heap_push(I, ht, hb, end, total)
    return end, wb


@jit
def _trim(I, F, led, st, trf, tri, cc, nd, short, t, bw):  # Engine._trim
    (rb, oh, ready, hold, alive, dirty, stamp, rmostly, cblock, csize, ht, hb) = st
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
    _heap_push(I, ht, hb, end, tot)
    return end


@jit
def _make_room(I, F, led, st, trf, tri, q, qs, pin, sel, need, at, B, bw_evict,
               has_trim, cc, nd):  # Engine._make_room
    (rb, oh, ready, hold, alive, dirty, stamp, rmostly, cblock, csize, ht, hb) = st
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
    (rb, oh, ready, hold, alive, dirty, stamp, rmostly, cblock, csize, ht, hb) = st
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
    (rb, oh, ready, hold, alive, dirty, stamp, rmostly, cblock, csize, ht, hb) = st
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
def _act(I, F, led, st, trf, tri, q, qs, sel, pin, flags, action, b, lo, hi, at, B, V,
         bchunk0, bnchunk, bsize, bws):  # Engine.act
    (rb, oh, ready, hold, alive, dirty, stamp, rmostly, cblock, csize, ht, hb) = st
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
        _evict_chunks(I, F, led, st, trf, tri, sel[:n].copy(), n, at, bw_d2h_pf, C_PLAN, b)
        return
    if action == PREFETCH:
        n = 0
        rsum = 0
        msum = 0
        for c in range(a, z):
            if csize[c] - rb[c] > 0:
                sel[n] = c
                n += 1
                rsum += rb[c]
                msum += csize[c] - rb[c]
        if n == 0:
            return
        if msum + rsum > B:
            k = 0
            cum = 0
            for i in range(n):
                cum += csize[sel[i]] - rb[sel[i]]
                if cum + rsum <= B:
                    k += 1
                else:
                    break
            n = k
            if n == 0:
                return
        ch = sel[:n].copy()
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
        end = _xfer(I, F, trf, tri, 0, t, xb, bw_h2d_pf, C_PLAN, b, 0.0) if xb else t
        keep = rmostly[b]
        for c in ch:
            rb[c] = csize[c]
            if not keep:
                oh[c] = 0
            ready[c] = end
        _push(I, stamp, q, qs, ch, n)
        return
    I[ERR] = 2  # unknown action code
    I[ERR_NEED] = action


@jit
def _remote(I, F, led, st, trf, tri, rc, rn, rw, rr, now, bw):  # Engine._remote
    (rb, oh, ready, hold, alive, dirty, stamp, rmostly, cblock, csize, ht, hb) = st
    t0 = now
    rmax = ready[rc[0]]
    hmax = hold[rc[0]]
    for c in rc:
        if ready[c] > rmax:
            rmax = ready[c]
        if hold[c] > hmax:
            hmax = hold[c]
    now = max(now, rmax, hmax)
    rbytes = 0
    wbytes = 0
    for i in range(len(rc)):
        far = rn[i] - rb[rc[i]]
        if rr[i]:
            rbytes += far
        if rw[i]:
            wbytes += far
    end = now
    if rbytes:
        end = max(end, _xfer(I, F, trf, tri, 0, now, rbytes, bw, C_REMOTE, -1, 0.0))
    if wbytes:
        end = max(end, _xfer(I, F, trf, tri, 1, now, wbytes, bw, C_REMOTE, -1, 0.0))
    led[L_RIN] += rbytes
    led[L_ROUT] += wbytes
    for i in range(len(rc)):
        c = rc[i]
        oh[c] = max(oh[c], rn[i] - rb[c])
    for i in range(len(rc)):
        if rw[i] and rb[rc[i]] > 0:
            dirty[rc[i]] = True
    return end - t0, end


@jit
def _kernel(I, F, led, st, trf, tri, q, qs, sel, pinned, flags, t, acc_ptr, acc_chunk,
            acc_need, acc_write, acc_read, B, hwf, fbb, zero_fill):  # Engine.kernel
    (rb, oh, ready, hold, alive, dirty, stamp, rmostly, cblock, csize, ht, hb) = st
    pref_host, acc_by = flags
    s, e = acc_ptr[t], acc_ptr[t + 1]
    if s == e:
        return 0.0, 0.0, 0.0
    cc = acc_chunk[s:e]
    nd = acc_need[s:e]
    wr = acc_write[s:e]
    rd = acc_read[s:e]
    lat_s, bw_fault, bw_evict, bw_remote = hwf[0], hwf[1], hwf[2], hwf[3]
    now = F[NOW]
    st_link = 0.0
    st_fault = 0.0
    st_evict = 0.0
    if I[ANY_REMOTE]:
        rem = np.zeros(len(cc), np.bool_)
        for i in range(len(cc)):
            bk = cblock[cc[i]]
            rem[i] = pref_host[bk] and acc_by[bk] and rb[cc[i]] < nd[i]
        if rem.any():
            x, now = _remote(I, F, led, st, trf, tri, cc[rem], nd[rem], wr[rem], rd[rem], now,
                             bw_remote)
            st_link += x
            keepm = ~rem
            cc, nd, wr = cc[keepm], nd[keepm], wr[keepm]
    if len(cc):
        r = ready[cc[0]]
        for c in cc:
            if ready[c] > r:
                r = ready[c]
        if r > now:
            st_link += r - now
            now = r
    now, st_link, st_fault, st_evict = _fault(I, F, led, st, trf, tri, q, qs, sel, pinned,
                                              cc, nd, now, st_link, st_fault, st_evict, B,
                                              lat_s, bw_fault, bw_evict, fbb, zero_fill)
    for i in range(len(cc)):
        if wr[i]:
            c = cc[i]
            dirty[c] = True
            if I[ANY_RMOSTLY] and rmostly[cblock[c]]:
                oh[c] = min(oh[c], csize[c] - rb[c])
    F[NOW] = now
    return st_fault, st_evict, st_link


@jit
def _fault(I, F, led, st, trf, tri, q, qs, sel, pinned, cc, nd, now, st_link, st_fault,
           st_evict, B, lat_s, bw_fault, bw_evict, fbb, zero_fill):
    """Engine.kernel's demand faults: the chunks short of what the kernel needs come in
    (after room is made); returns (now, link, fault, evict stalls)."""
    (rb, oh, ready, hold, alive, dirty, stamp, rmostly, cblock, csize, ht, hb) = st
    nm = 0
    for i in range(len(cc)):
        if rb[cc[i]] < nd[i]:
            nm += 1
    if nm:
        fc = np.empty(nm, np.int64)
        old = np.empty(nm, np.int64)
        new = np.empty(nm, np.int64)
        full = np.empty(nm, np.int64)
        j = 0
        for i in range(len(cc)):
            c = cc[i]
            if rb[c] < nd[i]:
                fc[j] = c
                old[j] = rb[c]
                new[j] = max(nd[i], rb[c])
                full[j] = csize[c] if new[j] * 100 > csize[c] * 51 else new[j]
                j += 1
        h = hold[fc[0]]
        for c in fc:
            if hold[c] > h:
                h = hold[c]
        if h > now:
            st_link += h - now
            now = h
        fsum = 0
        for i in range(nm):
            fsum += full[i] - old[i]
        rsum = 0
        for c in cc:
            rsum += rb[c]
        if fsum <= B - rsum:
            new = full
        grow = new - old
        need = 0
        for i in range(nm):
            need += grow[i]
        for c in cc:
            pinned[c] = True
        t_room = _make_room(I, F, led, st, trf, tri, q, qs, pinned, sel, need, now, B,
                            bw_evict, True, cc, nd)
        for c in cc:
            pinned[c] = False
        if t_room > now:
            st_evict += t_room - now
            now = t_room
        _claim(I, need)
        xbytes = 0
        batches = 0
        xb = np.empty(nm, np.int64)
        for i in range(nm):
            xb[i] = min(grow[i], oh[fc[i]])
            xbytes += xb[i]
            if zero_fill:
                batches += -(-grow[i] // fbb)
            else:
                batches += -(-xb[i] // fbb)
        lat = batches * lat_s
        if xbytes:
            s0 = max(now, F[H2D_FREE])
            if s0 > now:
                st_link += s0 - now
            end = _xfer(I, F, trf, tri, 0, now, xbytes, bw_fault, C_FAULT, -1, lat)
            st_fault += end - s0
            now = end
        else:
            st_fault += lat
            now += lat
        led[L_MIG] += xbytes
        led[L_POP] += need - xbytes
        if I[REC]:
            I[FAULTS] += batches
        for i in range(nm):
            c = fc[i]
            rb[c] = new[i]
            if not (I[ANY_RMOSTLY] and rmostly[cblock[c]]):
                oh[c] = oh[c] - xb[i]
            ready[c] = now
        _push(I, stamp, q, qs, fc, nm)
    return now, st_link, st_fault, st_evict


@jit
def _executes(code, b, alive_b, flag, bsize, discard_min):  # _api._executes
    if code == DISCARD:
        if bsize[b] < discard_min:
            return False
        return alive_b == 1 or flag
    return alive_b == 1


@jit
def run(n_ticks, ws, we, to_end, dur, ev_ptr, ev_kind, ev_block, acc_ptr, acc_chunk,
        acc_need, acc_write, acc_read, bchunk0, bnchunk, bsize, csize, cblock, a_ptr, a_code,
        a_block, a_lo, a_hi, a_flag, B, V, fbb, hwf, pool, zero_fill, discard_min):
    """The whole run (``_api._run``'s loop): returns the state arrays, the window's
    timeline, its copies, which table actions ran, and the figures at the window's end."""
    nc = len(csize)
    nb = len(bsize)
    I = np.zeros(NI, np.int64)
    F = np.zeros(NF, np.float64)
    led = np.zeros(10, np.int64)
    rb = np.zeros(nc, np.int64)
    oh = np.zeros(nc, np.int64)
    ready = np.zeros(nc)
    hold = np.zeros(nc)
    alive = np.zeros(nc, np.int8)
    dirty = np.zeros(nc, np.bool_)
    stamp = np.full(nc, -1, np.int64)
    pinned = np.zeros(nc, np.bool_)
    rmostly = np.zeros(nb, np.bool_)
    pref_host = np.zeros(nb, np.bool_)
    acc_by = np.zeros(nb, np.bool_)
    # every valid queue entry names a distinct chunk and a push adds at most nc, so after a
    # compaction there is always room: fixed capacities suffice
    q = np.zeros(2 * nc + 1024, np.int64)
    qs = np.zeros(2 * nc + 1024, np.int64)
    dq = np.zeros(2 * nc + 1024, np.int64)
    dqs = np.zeros(2 * nc + 1024, np.int64)
    sel = np.zeros(nc + 1, np.int64)
    ht = np.zeros(1024)
    hb = np.zeros(1024, np.int64)
    trf = np.zeros((1024, 2))
    tri = np.zeros((1024, 4), np.int64)
    W = we - ws
    rows_f = np.zeros((max(W, 0), 6))  # start, compute, stall, fault, evict, link
    rows_i = np.zeros((max(W, 0), 3), np.int64)  # resident (claimed), h2d, d2h
    ran = np.zeros(len(a_code), np.bool_)
    flags = (pref_host, acc_by)
    bws = (hwf[2], hwf[4], hwf[5])
    kw = np.array([hwf[0], hwf[1], hwf[2], hwf[3]])
    # window figures: T, sf, se, sl | claimed, pending, resident, bytes_h2d, bytes_d2h,
    # faults, peak, n transfers, ledger (10)
    outf = np.zeros(5)
    outi = np.zeros(8 + 10, np.int64)
    t_start = 0.0
    sf = se = sl = 0.0
    done = False
    end_t = n_ticks if to_end else we
    for t in range(end_t):
        if t == we:
            _snapshot(I, F, led, rb, outf, outi, t_start, sf, se, sl)
            done = True
            I[REC] = 0
        if t == ws:
            I[REC] = 1
            t_start = F[NOW]
            _retire(I, ht, hb, F[NOW])
            I[PEAK] = I[CLAIMED]
        ht, hb, trf, tri = _room(I, ht, hb, trf, tri, a_ptr[2 * t + 2] - a_ptr[2 * t])
        st = (rb, oh, ready, hold, alive, dirty, stamp, rmostly, cblock, csize, ht, hb)
        tick_start = F[NOW]
        I[TH2D] = 0
        I[TD2H] = 0
        s, e = ev_ptr[t], ev_ptr[t + 1]
        for i in range(s, e):
            if ev_kind[i] == 0:
                _alloc(I, led, st, q, qs, dq, dqs, sel, ev_block[i], bchunk0, bnchunk, bsize,
                       pool)
        for j in range(a_ptr[2 * t], a_ptr[2 * t + 1]):
            b = a_block[j]
            if _executes(a_code[j], b, alive[bchunk0[b]], a_flag[j], bsize, discard_min):
                _act(I, F, led, st, trf, tri, q, qs, sel, pinned, flags, a_code[j], b,
                     a_lo[j], a_hi[j], F[NOW], B, V, bchunk0, bnchunk, bsize, bws)
                ran[j] = True
        f, v, l_ = _kernel(I, F, led, st, trf, tri, q, qs, sel, pinned, flags, t, acc_ptr,
                           acc_chunk, acc_need, acc_write, acc_read, B, kw, fbb, zero_fill)
        F[NOW] += dur[t]
        for i in range(s, e):
            if ev_kind[i] == 1:
                _free(I, led, st, dq, dqs, sel, ev_block[i], bchunk0, bnchunk, pool)
        for j in range(a_ptr[2 * t + 1], a_ptr[2 * t + 2]):
            b = a_block[j]
            if _executes(a_code[j], b, alive[bchunk0[b]], a_flag[j], bsize, discard_min):
                _act(I, F, led, st, trf, tri, q, qs, sel, pinned, flags, a_code[j], b,
                     a_lo[j], a_hi[j], F[NOW], B, V, bchunk0, bnchunk, bsize, bws)
                ran[j] = True
        _retire(I, ht, hb, F[NOW])
        if I[ERR]:
            break
        if I[REC]:
            sf += f
            se += v
            sl += l_
            r = t - ws
            rows_f[r, 0] = tick_start - t_start
            rows_f[r, 1] = dur[t]
            rows_f[r, 2] = f + v + l_
            rows_f[r, 3] = f
            rows_f[r, 4] = v
            rows_f[r, 5] = l_
            rows_i[r, 0] = I[CLAIMED]
            rows_i[r, 1] = I[TH2D]
            rows_i[r, 2] = I[TD2H]
    if not done:
        _snapshot(I, F, led, rb, outf, outi, t_start, sf, se, sl)
    return I, outf, outi, rows_f, rows_i, trf, tri, ran


@jit
def _room(I, ht, hb, trf, tri, na):
    """The release heap and the copy log, grown to hold what one tick can add: per action
    at most 2 releases and 3 copies, the kernel 2 and 5."""
    if I[PN] + 2 * na + 8 > len(ht):
        sz = 2 * (I[PN] + 2 * na + 8)
        ht2 = np.zeros(sz)
        hb2 = np.zeros(sz, np.int64)
        ht2[:I[PN]] = ht[:I[PN]]
        hb2[:I[PN]] = hb[:I[PN]]
        ht, hb = ht2, hb2
    if I[NTR] + 3 * na + 8 > len(trf):
        sz = 2 * (I[NTR] + 3 * na + 8)
        trf2 = np.zeros((sz, 2))
        tri2 = np.zeros((sz, 4), np.int64)
        trf2[:I[NTR]] = trf[:I[NTR]]
        tri2[:I[NTR]] = tri[:I[NTR]]
        trf, tri = trf2, tri2
    return ht, hb, trf, tri


@jit
def _snapshot(I, F, led, rb, outf, outi, t_start, sf, se, sl):  # _api._window_result's
    outf[0] = F[NOW] - t_start
    outf[1] = sf
    outf[2] = se
    outf[3] = sl
    outf[4] = t_start
    outi[0] = I[CLAIMED]
    outi[1] = I[PEND]
    outi[2] = rb.sum()
    outi[3] = I[BH2D]
    outi[4] = I[BD2H]
    outi[5] = I[FAULTS]
    outi[6] = I[PEAK]
    outi[7] = I[NTR]
    outi[8:] = led


@jit
def plan_table(end_t, ev_ptr, ev_kind, ev_block, bsize, balloc_tick, is_mark, first_mark,
               by_period, period, anchor, sizes, k_ptr, k_code, k_ord, k_pers, k_lo, k_hi,
               discard_code):
    """``_policies.PlanSchedule.at`` over ticks ``0 .. end_t - 1``: the actions it returns,
    as a table sorted by (tick, stage) with row ranges ``ptr[2t] .. ptr[2t+1]`` (pre) and
    ``.. ptr[2t+2]`` (post); per row the discard-at-free flag; and the divergences counted
    before each tick."""
    nb = len(bsize)
    cap = 1024
    code = np.zeros(cap, np.int64)
    blk = np.zeros(cap, np.int64)
    lo_ = np.zeros(cap, np.int64)
    hi_ = np.zeros(cap, np.int64)
    kk = np.zeros(cap, np.int64)
    ptr = np.zeros(2 * end_t + 1, np.int64)
    div_before = np.zeros(end_t + 1, np.int64)
    allocs = np.zeros(max(1, len(ev_block)), np.int64)
    nalloc = 0
    local = -1
    armed = False
    div = 0
    g = 0
    n = 0
    post_i = np.zeros(16, np.int64)  # the tick's post actions: indices into the k table
    post_b = np.zeros(16, np.int64)
    post_k = np.zeros(16, np.int64)
    freed_named = np.zeros(nb, np.int64) - 1  # tick at which a discard named its own FREE
    for t in range(end_t):
        div_before[t] = div
        if not by_period and is_mark[t]:
            local = -1
            nalloc = 0
            armed = True
        npost = 0
        s, e = ev_ptr[t], ev_ptr[t + 1]
        for i in range(s, e):
            if by_period:
                gi = g
                g += 1
                if gi < anchor:
                    continue
                if (gi - anchor) % period == 0:
                    local = -1
                    nalloc = 0
                    armed = True
            if not by_period and not (first_mark >= 0 and t >= first_mark):
                continue
            local += 1
            k = local
            is_alloc = ev_kind[i] == 0
            if is_alloc:
                j = nalloc
                allocs[nalloc] = ev_block[i]
                nalloc += 1
                if armed and (j >= len(sizes) or sizes[j] != bsize[ev_block[i]]):
                    armed = False
                    div += 1
            if not armed or k >= period:
                continue
            for r in range(k_ptr[k], k_ptr[k + 1]):
                o = k_ord[r]
                if k_pers[r]:
                    b = o if o < nb and balloc_tick[o] <= t else -1
                else:
                    b = allocs[o] if o < nalloc else -1
                if b < 0:
                    continue
                if k_code[r] == discard_code and not is_alloc and b == ev_block[i]:
                    freed_named[b] = t
                if is_alloc:
                    if n + 1 > cap:
                        cap *= 2
                        code, blk, lo_, hi_, kk = (_grow(code, cap), _grow(blk, cap),
                                                   _grow(lo_, cap), _grow(hi_, cap),
                                                   _grow(kk, cap))
                    code[n], blk[n], lo_[n], hi_[n], kk[n] = k_code[r], b, k_lo[r], k_hi[r], k
                    n += 1
                else:
                    if npost + 1 > len(post_i):
                        post_i = _grow(post_i, 2 * len(post_i))
                        post_b = _grow(post_b, 2 * len(post_b))
                        post_k = _grow(post_k, 2 * len(post_k))
                    post_i[npost], post_b[npost], post_k[npost] = r, b, k
                    npost += 1
        ptr[2 * t + 1] = n
        if n + npost > cap:
            cap = 2 * (n + npost)
            code, blk, lo_, hi_, kk = (_grow(code, cap), _grow(blk, cap), _grow(lo_, cap),
                                       _grow(hi_, cap), _grow(kk, cap))
        for x in range(npost):
            r = post_i[x]
            code[n], blk[n], lo_[n], hi_[n], kk[n] = k_code[r], post_b[x], k_lo[r], k_hi[r], \
                post_k[x]
            n += 1
        ptr[2 * t + 2] = n
    div_before[end_t] = div
    # the discard-at-free flag: the block is in the set at() builds for the row's tick
    flag = np.zeros(n, np.bool_)
    for t in range(end_t):
        for x in range(ptr[2 * t], ptr[2 * t + 2]):
            flag[x] = freed_named[blk[x]] == t
    return ptr, code[:n], blk[:n], lo_[:n], hi_[:n], kk[:n], flag, div_before


@jit
def _grow(a, cap):
    b = np.zeros(cap, a.dtype)
    b[:len(a)] = a
    return b
