"""A lower bound on the iteration time of any schedule, given the link and the budget.

Argument. Take the measured window (ticks ``[ws, we)``) and any boundary between two of
its ticks (after tick ``t``, for ``t`` in ``ws-1 .. we-2``). Let ``N(t)`` be the bytes of
data that exist at that boundary and that the *next* access after it, within the window,
reads: for each block whose next access reads, the range that access reads. (A pure write
reads nothing: served in place on the host, zero-copy, it sends its bytes device->host
and needs none back, so data next written, not read, need not be anywhere. Data read
again later but after a pure write is new data born at that write.) At the boundary the
device holds at most ``B`` bytes (the budget; memory claimed by copies in flight counts),
so at least ``N(t) - B`` of those bytes are on the host and must cross the link after the
boundary and before the window ends -- by migration or by remote access, no faster than
``bw`` = the fastest host-to-device path of the profile (max of prefetch, fault and
remote-access bandwidths). The kernels before the boundary take ``C(<=t)`` at least, those
after it ``C(>t)``, and the transfer after the boundary can at best overlap them
entirely. Hence, for every ``t``,

    T >= C(<=t) + max(C(>t), (N(t) - B)^+ / bw),

and the bound is the largest right-hand side (at least the compute time, the ``ideal``).

The device-to-host direction adds a second term. Of the ``N(t) - B`` bytes on the host at
the boundary, at most ``N_old(t)`` can have got there without crossing device->host in
the window: data that existed before the window, or data born by a read of fresh pages
(a zero-copy read populates them on the host). The rest, ``(N(t) - N_old(t) - B)^+``, was
written inside the window -- on the device, or in place on the host, which sends it over
the link too -- and had to cross back before the boundary, no faster than ``bw_out`` (the
fastest device-to-host path: prefetch, eviction or remote access). That transfer overlaps
at best the kernels before the boundary, so

    T >= max(C(<=t), (N(t) - N_old(t) - B)^+ / bw_out) + max(C(>t), (N(t) - B)^+ / bw).

Deadlines. The bytes above do not all have until the window's end: a block's next access
after the boundary is its deadline. Let ``N(t, d)`` be the bytes, of data existing at
boundary ``t``, that the blocks whose next access is a read at a tick in ``(t, d]`` read
there. At least ``N(t, d) - B`` of them are on the host at the
boundary and must cross before kernel ``d`` starts, and the kernels strictly between take
``C(t+1 .. d-1)``, so

    T >= C + max over t < d of (N(t, d) - B)^+ / bw - C(t+1 .. d-1),

(``d`` = the window's last tick is the first term again, less its last kernel's overlap:
so this one is the tighter wherever data is needed early). Every pair (t, d) is a T x T
table: the reference walks it in row chunks (O(T^2 + A) time); ``_bound_fast`` sweeps the
deadline with a segment tree over the boundaries (O((T + A) log T) time, O(T) memory).

It ignores fault latencies, so it is loose when they dominate, and it lets the link run
flat out with perfect foresight, but no schedule the simulator runs can beat it (a plan
that discards live data is outside: it changes what the program computes). The
``"lp-bound"`` policy (``_lp``) is tighter and slower: it accounts for every boundary at
once.
"""
from __future__ import annotations

import numpy as np

from ._prep import Prepared

__all__ = ["lower_bound"]


def _read_intervals(prep: Prepared, first_any: np.ndarray, born_read: np.ndarray):
    """The boundaries at which data must exist for a later read, in window rows (row ``r``:
    the boundary after window tick ``r - 1``): for each read of a block at window tick
    ``j`` (the largest range it reads, ``n`` bytes), rows ``lo .. j`` from the block's
    previous access of any kind (row: its tick + 1) -- or from row 0 when that read is the
    block's first in the window and the data existed before it. A pure write reads
    nothing, so no interval ends at it; it ends the one before it. Returns (lo, hi = j, n,
    host_born): ``host_born`` marks data that may sit on the host without having crossed
    device->host in the window (it existed before, or was born by a read of fresh pages,
    which a zero-copy read populates on the host)."""
    ws, we = prep.window
    W = we - ws
    at, ab, an = prep.ab_tick, prep.ab_block, prep.ab_need
    inw = (at >= ws) & (at < we)
    empty = np.zeros(0, np.int64)
    if not inw.any() or W < 1:
        return empty, empty, empty, np.zeros(0, bool)
    # one row per (block, tick) in the window: the largest range read at that tick
    key = ab[inw].astype(np.int64) * (W + 1) + (at[inw] - ws)
    nread = np.where(prep.ab_read[inw], an[inw], 0)
    order = np.argsort(key, kind="stable")
    key, nread = key[order], nread[order]
    first = np.concatenate([[True], key[1:] != key[:-1]])
    starts = np.flatnonzero(first)
    nread = np.maximum.reduceat(nread, starts)
    key = key[starts]
    blk, tk = key // (W + 1), key % (W + 1)
    same = np.concatenate([[False], blk[1:] == blk[:-1]])
    prev = np.concatenate([[0], tk[:-1]])
    old = first_any[blk] < ws
    lo = np.where(same, prev + 1, 0)
    ok = (same | old) & (nread > 0)
    lo, hi, n, blk = lo[ok], tk[ok], nread[ok], blk[ok]
    ok = hi >= lo
    return lo[ok], hi[ok], n[ok], (first_any[blk] < ws)[ok] | born_read[blk[ok]]


def _born_read(prep: Prepared) -> np.ndarray:
    """Per block: whether its first access ever reads without writing (fresh pages read
    before any write: a zero-copy read populates them on the host)."""
    nb = len(prep.bsize)
    b, t = prep.ab_block, prep.ab_tick
    first = np.full(nb, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first, b, t)
    at_first = t == first[b]
    wrote = np.zeros(nb, bool)
    np.logical_or.at(wrote, b[at_first], prep.ab_write[at_first])
    touched = first < np.iinfo(np.int64).max
    return touched & ~wrote


def lower_bound(prep: Prepared, hw, budget: int) -> tuple[float, int, int, int]:
    """(bound seconds, binding boundary tick, bytes that must come in after it, bytes that
    must have gone out before it)."""
    ws, we = prep.window
    dur = prep.dur_s[ws:we]
    C = float(dur.sum())
    nb = len(prep.bsize)
    big = np.iinfo(np.int64).max
    first_any = np.full(nb, big, np.int64)
    np.minimum.at(first_any, prep.ab_block, prep.ab_tick)
    lo, hi, n, hb = _read_intervals(prep, first_any, _born_read(prep))
    if not len(lo):
        return C, ws, 0, 0
    nbnd = we - ws  # boundaries after ticks ws-1 .. we-2 (rows 0 .. nbnd-1)

    def needed(sel: np.ndarray) -> np.ndarray:
        d = np.zeros(nbnd + 1, np.int64)
        np.add.at(d, lo[sel], n[sel])
        np.add.at(d, hi[sel] + 1, -n[sel])
        return np.cumsum(d)[:nbnd]

    N = needed(np.ones(len(lo), bool))
    N_old = needed(hb)
    # each way at its fastest path, with no duplex cap: the cap only slows copies, so a
    # bound that ignores it stays a lower bound
    bw = max(hw.h2d_prefetch_Bps, hw.h2d_fault_Bps, hw.remote_access_Bps)
    bw_out = max(hw.d2h_prefetch_Bps, hw.d2h_evict_Bps, hw.remote_access_Bps)
    cb = np.concatenate([[0.0], np.cumsum(dur)])[:nbnd]  # compute up to and incl. boundary tick
    ca = C - cb
    excess = np.maximum(N - int(budget), 0)
    written_back = np.maximum(N - N_old - int(budget), 0)
    T = np.maximum(cb, written_back / bw_out) + np.maximum(ca, excess / bw)
    i = int(np.argmax(T))
    best = (max(C, float(T[i])), ws - 1 + i, int(excess[i]), int(written_back[i]))
    dl = _deadline_bound(dur, int(budget), bw, lo, hi, n)
    if dl is not None and dl[0] > best[0]:
        return (dl[0], ws - 1 + dl[1], dl[2], 0)
    return best


def _deadline_bound(dur: np.ndarray, budget: int, bw: float, lo: np.ndarray,
                    hi: np.ndarray, n: np.ndarray):
    """The deadline term of the module docstring over ``_read_intervals`` (rows ``lo ..
    hi``, read at window tick ``j = hi``): (bound seconds, boundary row, bytes that must
    come in between it and their deadline), or None when no pair binds. Compiled
    (``_bound_fast``) where the simulator's kernels are, else the reference."""
    from . import _fast

    if not _fast.available():
        return _deadline_bound_reference(dur, budget, bw, lo, hi, n)
    from ._bound_fast import deadline_sweep

    P = np.concatenate([[0.0], np.cumsum(dur)])
    lo, hi, n = (np.ascontiguousarray(a, np.int64) for a in (lo, hi, n))
    stall, r, need = deadline_sweep(P, lo, hi, n, int(budget), float(bw))
    _fast._state["calls"] += 1
    if not stall > 0:
        return None
    return float(P[-1]) + stall, int(r), int(need) - int(budget)


def _deadline_bound_reference(dur: np.ndarray, budget: int, bw: float, lo: np.ndarray,
                              hi: np.ndarray, n: np.ndarray, rows_per_chunk: int = 256):
    """``_deadline_bound`` over the whole (boundary, deadline) table, in row chunks: O(W^2)
    time, O(W) memory per chunk row (the definition the compiled sweep is tested against)."""
    W = len(dur)
    j = hi
    P = np.concatenate([[0.0], np.cumsum(dur)])  # P[k] = compute of window ticks < k
    C = float(P[-1])
    state = np.zeros(W, np.int64)  # bytes per deadline column at the current row
    best, best_row, best_bytes = 0.0, 0, 0
    cols = np.arange(W)
    for r0 in range(0, W, rows_per_chunk):
        r1 = min(W, r0 + rows_per_chunk)
        # row r0 starts from `state` (intervals begun before the chunk); those beginning in
        # it are added at their first row, those ending in it removed after their last row
        D = np.zeros((r1 - r0 + 1, W), np.int64)
        D[0] = state
        m = (lo >= r0) & (lo < r1)
        np.add.at(D, (lo[m] - r0, j[m]), n[m])
        m = (hi + 1 > r0) & (hi + 1 <= r1)
        np.add.at(D, (hi[m] + 1 - r0, j[m]), -n[m])
        M = np.cumsum(D, axis=0)  # rows r0 .. r1 (the last is the next chunk's state)
        state = M[-1]
        M = M[:-1]
        N = np.cumsum(M, axis=1)  # bytes with next access at column <= j
        rows = np.arange(r0, r1)[:, None]
        # stall forced: (N - B)/bw minus the compute of window ticks rows .. j-1
        S = (N - budget) / bw - (P[cols][None, :] - P[rows])
        S[cols[None, :] < rows] = -np.inf
        k = int(np.argmax(S))
        v = float(S.flat[k])
        if v > best:
            best, best_row = v, r0 + k // W
            best_bytes = int(N.flat[k] - budget)
    if best <= 0:
        return None
    return C + best, best_row, best_bytes
