"""The simulator's event loop as compiled kernels (numba ``@njit(nogil=True)``); see ``_fast``
for the contract: the same state changes, in the same order, as ``_engine.Engine`` driven by
``_api._run``, so that every figure is identical. Each function here names the ``Engine``
method it mirrors; the comments that say *why* live there. Imported only when numba is
installed; kernels are module-level so that numba's on-disk cache keeps them.

This file holds the per-tick loop (``run``), faults, remote access, the window snapshot and
the plan table; the state layout (``I``, ``F``, ``st``) and the memory steps it calls
(claim, copy, evict, trim, alloc, free, the plan's actions) are in ``_fast_memory``.
"""
from __future__ import annotations

import numpy as np

from ._mechanisms import COUNTER_MIN_BYTES
# CLAIMED, ERR, ERR_NEED and DISCARD are read by _fast through this module
from ._fast_memory import (  # noqa: F401
    ANY_REMOTE, ANY_RMOSTLY, BD2H, BH2D, C_COUNTER, C_FAULT, C_REMOTE, CLAIMED, DISCARD, DUPLEX,
    ERR, ERR_NEED, FAULTS, H2D_FREE, HOST, L_MIG, L_POP, L_RIN, L_ROUT, NF, NI, NOW, NTR, PEAK,
    PEND, PN, REC, TD2H, TH2D, _act, _alloc, _bring_in, _claim, _free, _make_room, _push, _retire,
    _xfer, jit)

__all__ = ["run", "plan_table"]


@jit
def _remote(I, F, led, st, trf, tri, flags, rc, rn, rw, rr, now, hwk, fbb):  # Engine._remote
    (rb, oh, ready, hold, alive, dirty, stamp, rmostly, cblock, csize, ht, hb, mapped) = st
    pref_host, acc_by = flags
    lat_s, bw_read, bw_write, counters = hwk[0], hwk[3], hwk[4], hwk[5]
    t0 = now
    rmax = ready[rc[0]]
    hmax = hold[rc[0]]
    for c in rc:
        if ready[c] > rmax:
            rmax = ready[c]
        if hold[c] > hmax:
            hmax = hold[c]
    now = max(now, rmax, hmax)
    far = np.empty(len(rc), np.int64)
    batches = 0
    for i in range(len(rc)):
        c = rc[i]
        far[i] = rn[i] - rb[c]
        bk = cblock[c]
        if pref_host[bk] and not acc_by[bk] and not mapped[c]:
            batches += -(-far[i] // fbb)
    lat = batches * lat_s
    if I[REC]:
        I[FAULTS] += batches
    for c in rc:
        if pref_host[cblock[c]]:
            mapped[c] = True
    now += lat
    rbytes = 0
    wbytes = 0
    for i in range(len(rc)):
        if rr[i]:
            rbytes += far[i]
        if rw[i]:
            wbytes += far[i]
    end = now
    if rbytes:
        end = max(end, _xfer(I, F, trf, tri, 0, now, rbytes, bw_read, C_REMOTE, -1, 0.0))
    if wbytes:
        end = max(end, _xfer(I, F, trf, tri, 1, now, wbytes, bw_write, C_REMOTE, -1, 0.0))
    led[L_RIN] += rbytes
    led[L_ROUT] += wbytes
    for i in range(len(rc)):
        c = rc[i]
        oh[c] = max(oh[c], far[i])
    for i in range(len(rc)):
        if rw[i] and rb[rc[i]] > 0:
            dirty[rc[i]] = True
    nm = 0
    mig = np.empty(len(rc), np.int64)
    if counters:
        for i in range(len(rc)):
            bk = cblock[rc[i]]
            if acc_by[bk] and not pref_host[bk] and far[i] >= COUNTER_MIN_BYTES:
                mig[nm] = rc[i]
                nm += 1
    return lat, end - t0 - lat, end, mig[:nm]


@jit
def _kernel(I, F, led, st, trf, tri, q, qs, sel, pinned, flags, t, acc_ptr, acc_chunk,
            acc_need, acc_write, acc_read, B, hwf, fbb, zero_fill):  # Engine.kernel
    (rb, oh, ready, hold, alive, dirty, stamp, rmostly, cblock, csize, ht, hb, mapped) = st
    pref_host, acc_by = flags
    s, e = acc_ptr[t], acc_ptr[t + 1]
    if s == e:
        return 0.0, 0.0, 0.0
    cc = acc_chunk[s:e]
    nd = acc_need[s:e]
    wr = acc_write[s:e]
    rd = acc_read[s:e]
    lat_s, bw_fault, bw_evict = hwf[0], hwf[1], hwf[2]
    now = F[NOW]
    st_link = 0.0
    st_fault = 0.0
    st_evict = 0.0
    mig = cc[:0]
    if I[ANY_REMOTE]:
        rem = np.zeros(len(cc), np.bool_)
        for i in range(len(cc)):
            c = cc[i]
            bk = cblock[c]
            rem[i] = (pref_host[bk] or (acc_by[bk] and oh[c] >= nd[i] - rb[c])) and \
                rb[c] < nd[i] and not rmostly[bk]
        if rem.any():
            x, y, now, mig = _remote(I, F, led, st, trf, tri, flags, cc[rem], nd[rem],
                                     wr[rem], rd[rem], now, hwf, fbb)
            st_fault += x
            st_link += y
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
    if len(mig):
        _bring_in(I, F, led, st, trf, tri, q, qs, sel, pinned, mig, now, B, bw_evict,
                  bw_fault, C_COUNTER, -1)
    F[NOW] = now
    return st_fault, st_evict, st_link


@jit
def _fault(I, F, led, st, trf, tri, q, qs, sel, pinned, cc, nd, now, st_link, st_fault,
           st_evict, B, lat_s, bw_fault, bw_evict, fbb, zero_fill):
    """Engine.kernel's demand faults: the chunks short of what the kernel needs come in
    (after room is made); returns (now, link, fault, evict stalls)."""
    (rb, oh, ready, hold, alive, dirty, stamp, rmostly, cblock, csize, ht, hb, mapped) = st
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
        a_block, a_lo, a_hi, a_flag, B, V, fbb, hwf, pool, zero_fill, discard_min, is_start,
        stop_above):
    """The whole run (``_api._run``'s loop): returns the state arrays, the window's
    timeline, its copies, which table actions ran, the figures at the window's end and
    whether it stopped above ``stop_above`` s (``_api``, Note [A run stopped once ...])."""
    nc = len(csize)
    nb = len(bsize)
    I = np.zeros(NI, np.int64)
    F = np.zeros(NF, np.float64)
    F[DUPLEX] = hwf[9]
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
    rows_f = np.zeros((max(W, 0), 7))  # start, compute, stall, fault, evict, link, host
    rows_i = np.zeros((max(W, 0), 3), np.int64)  # resident (claimed), h2d, d2h
    ran = np.zeros(len(a_code), np.bool_)
    mapped = np.zeros(nc, np.bool_)
    flags = (pref_host, acc_by)
    bws = (hwf[2], hwf[4], hwf[5])
    # fault latency, fault and eviction rates, remote read and write rates, access counters
    kw = np.array([hwf[0], hwf[1], hwf[2], hwf[3], hwf[6], hwf[8]])
    call_s = hwf[7]
    # window figures: T, sf, se, sl | claimed, pending, resident, bytes_h2d, bytes_d2h,
    # faults, peak, n transfers, ledger (10)
    outf = np.zeros(6)
    outi = np.zeros(8 + 10, np.int64)
    t_start = 0.0
    sf = se = sl = sh = 0.0
    done = stopped = False
    end_t = n_ticks if to_end else we
    for t in range(end_t):
        if t == we:
            _snapshot(I, F, led, rb, outf, outi, t_start, sf, se, sl, sh)
            done = True
            I[REC] = 0
        if t == ws:
            I[REC] = 1
            t_start = F[NOW]
            _retire(I, ht, hb, F[NOW])
            I[PEAK] = I[CLAIMED]
        ht, hb, trf, tri = _room(I, ht, hb, trf, tri, a_ptr[2 * t + 2] - a_ptr[2 * t])
        st = (rb, oh, ready, hold, alive, dirty, stamp, rmostly, cblock, csize, ht, hb, mapped)
        if t == 0 or is_start[t]:
            F[HOST] = max(F[HOST], F[NOW])  # Note [Host calls]: the loop's sync
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
                F[HOST] += call_s  # _api._run_reference's issue
                _act(I, F, led, st, trf, tri, q, qs, sel, pinned, flags, a_code[j], b,
                     a_lo[j], a_hi[j], max(F[NOW], F[HOST]), B, V, bchunk0, bnchunk, bsize,
                     bws)
                ran[j] = True
        h = max(0.0, F[HOST] - F[NOW])  # _api._run_reference: launched after the calls
        F[NOW] += h
        f, v, l_ = _kernel(I, F, led, st, trf, tri, q, qs, sel, pinned, flags, t, acc_ptr,
                           acc_chunk, acc_need, acc_write, acc_read, B, kw, fbb, zero_fill)
        F[NOW] += dur[t]
        for i in range(s, e):
            if ev_kind[i] == 1:
                _free(I, led, st, dq, dqs, sel, ev_block[i], bchunk0, bnchunk, pool)
        for j in range(a_ptr[2 * t + 1], a_ptr[2 * t + 2]):
            b = a_block[j]
            if _executes(a_code[j], b, alive[bchunk0[b]], a_flag[j], bsize, discard_min):
                F[HOST] += call_s
                _act(I, F, led, st, trf, tri, q, qs, sel, pinned, flags, a_code[j], b,
                     a_lo[j], a_hi[j], max(F[NOW], F[HOST]), B, V, bchunk0, bnchunk, bsize,
                     bws)
                ran[j] = True
        _retire(I, ht, hb, F[NOW])
        if I[ERR]:
            break
        if I[REC]:
            sf += f
            se += v
            sl += l_
            sh += h
            _row(rows_f, rows_i, t - ws, tick_start - t_start, dur[t], f, v, l_, h, I)
            if F[NOW] - t_start > stop_above:  # the clock never goes back: T is above too
                stopped = True
                break
    if not done:
        _snapshot(I, F, led, rb, outf, outi, t_start, sf, se, sl, sh)
    return I, outf, outi, rows_f, rows_i, trf, tri, ran, stopped


@jit
def _row(rows_f, rows_i, r, start, compute, f, v, l_, h, I):
    """Timeline row ``r`` (``_api._TIMELINE_COLS`` after ``tick``)."""
    rows_f[r, 0] = start
    rows_f[r, 1] = compute
    rows_f[r, 2] = f + v + l_ + h
    rows_f[r, 3] = f
    rows_f[r, 4] = v
    rows_f[r, 5] = l_
    rows_f[r, 6] = h
    rows_i[r, 0] = I[CLAIMED]
    rows_i[r, 1] = I[TH2D]
    rows_i[r, 2] = I[TD2H]


@jit
def _room(I, ht, hb, trf, tri, na):
    """The release heap and the copy log, grown to hold what one tick can add: per action
    at most 2 releases and 3 copies, the kernel 3 and 7 (remote 2, faults 3, the access
    counters' migration 2)."""
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
def _snapshot(I, F, led, rb, outf, outi, t_start, sf, se, sl, sh):  # _api._window_result's
    outf[0] = F[NOW] - t_start
    outf[1] = sf
    outf[2] = se
    outf[3] = sl
    outf[4] = t_start
    outf[5] = sh
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
                if armed and (j >= len(sizes) or (sizes[j] != 0 and sizes[j] != bsize[ev_block[i]])):
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
