"""A lower bound on the iteration time of any schedule, given the link and the budget.

Argument. Take the measured window (ticks ``[ws, we)``) and any boundary between two of
its ticks (after tick ``t``, for ``t`` in ``ws-1 .. we-2``). Let ``N(t)`` be the bytes of
data that exist at that boundary (written at or before tick ``t``, or before the window)
and are accessed again after it within the window (for a partial access, the largest
single range accessed counts). At the boundary the device holds at most ``B`` bytes (the
budget; memory claimed by copies in flight counts), so at least ``N(t) - B`` of those bytes
are on the host and must cross the link after the boundary and before the window ends --
by migration or by remote access, no faster than ``bw`` = the fastest host-to-device path
of the profile (max of prefetch, fault and remote-access bandwidths). The kernels before
the boundary take ``C(<=t)`` at least, those after it ``C(>t)``, and the transfer after the
boundary can at best overlap them entirely. Hence, for every ``t``,

    T >= C(<=t) + max(C(>t), (N(t) - B)^+ / bw),

and the bound is the largest right-hand side (at least the compute time, the ``ideal``).

The device-to-host direction adds a second term. Of the ``N(t) - B`` bytes on the host at
the boundary, at most ``N_old(t)`` (data that existed before the window) can have been there
all along; the rest, ``(N(t) - N_old(t) - B)^+``, was written on the device inside the
window and had to cross the link back before the boundary, no faster than ``bw_out`` (the
fastest device-to-host path: prefetch, eviction or remote access). That transfer overlaps
at best the kernels before the boundary, so

    T >= max(C(<=t), (N(t) - N_old(t) - B)^+ / bw_out) + max(C(>t), (N(t) - B)^+ / bw).

(In the simulator every kernel writes on the device; a real input batch copied straight
into host-preferred memory would not cross back, which is why inputs are the one case this
term could overstate.)

Deadlines. The bytes above do not all have until the window's end: a block's next access
after the boundary is its deadline. Let ``N(t, d)`` be the bytes, of data existing at
boundary ``t``, that the blocks whose next access is at a tick in ``(t, d]`` need there
(the next access's own range). At least ``N(t, d) - B`` of them are on the host at the
boundary and must cross before kernel ``d`` starts, and the kernels strictly between take
``C(t+1 .. d-1)``, so

    T >= C + max over t < d of (N(t, d) - B)^+ / bw - C(t+1 .. d-1),

(``d`` = the window's last tick with every block's largest range is the first term
again, less its last kernel's overlap: so this one is the tighter wherever data is needed
early). Every pair (t, d) is a T x T table, built in row chunks: O(T^2 + A) time, O(T)
memory per chunk row.

It ignores fault latencies, so it is loose when they dominate, and it lets the link run
flat out with perfect foresight, but no schedule the simulator runs can beat it.
"""
from __future__ import annotations

import numpy as np

from ._prep import Prepared

__all__ = ["lower_bound"]


def lower_bound(prep: Prepared, hw, budget: int) -> tuple[float, int, int, int]:
    """(bound seconds, binding boundary tick, bytes that must come in after it, bytes that
    must have gone out before it)."""
    ws, we = prep.window
    dur = prep.dur_s[ws:we]
    C = float(dur.sum())
    nb = len(prep.bsize)
    at, ab, an = prep.ab_tick, prep.ab_block, prep.ab_need
    big = np.iinfo(np.int64).max
    first_any = np.full(nb, big, np.int64)
    np.minimum.at(first_any, ab, at)
    inw = (at >= ws) & (at < we)
    tb, bb, nbb = at[inw], ab[inw], an[inw]
    if not len(tb):
        return C, ws, 0, 0
    first_w = np.full(nb, big, np.int64)
    last_w = np.full(nb, -1, np.int64)
    need = np.zeros(nb, np.int64)
    np.minimum.at(first_w, bb, tb)
    np.maximum.at(last_w, bb, tb)
    np.maximum.at(need, bb, nbb)
    blocks = np.flatnonzero(last_w >= 0)
    old = first_any[blocks] < ws  # existed before the window
    start = np.where(old, ws - 1, first_w[blocks])
    stop = last_w[blocks]  # needed at boundaries start .. stop-1
    ok = stop > start
    blocks, start, stop, old = blocks[ok], start[ok], stop[ok], old[ok]
    nbnd = we - ws  # boundaries after ticks ws-1 .. we-2

    def needed(sel: np.ndarray) -> np.ndarray:
        d = np.zeros(nbnd + 1, np.int64)
        np.add.at(d, start[sel] - (ws - 1), need[blocks[sel]])
        np.add.at(d, stop[sel] - (ws - 1), -need[blocks[sel]])
        return np.cumsum(d)[:nbnd]

    N = needed(np.ones(len(blocks), bool))
    N_old = needed(old)
    bw = max(hw.h2d_prefetch_Bps, hw.h2d_fault_Bps, hw.remote_access_Bps)
    bw_out = max(hw.d2h_prefetch_Bps, hw.d2h_evict_Bps, hw.remote_access_Bps)
    cb = np.concatenate([[0.0], np.cumsum(dur)])[:nbnd]  # compute up to and incl. boundary tick
    ca = C - cb
    excess = np.maximum(N - int(budget), 0)
    written_back = np.maximum(N - N_old - int(budget), 0)
    T = np.maximum(cb, written_back / bw_out) + np.maximum(ca, excess / bw)
    i = int(np.argmax(T))
    best = (max(C, float(T[i])), ws - 1 + i, int(excess[i]), int(written_back[i]))
    dl = _deadline_bound(prep, dur, int(budget), bw, first_any)
    if dl is not None and dl[0] > best[0]:
        return dl
    return best


def _deadline_bound(prep: Prepared, dur: np.ndarray, budget: int, bw: float,
                    first_any: np.ndarray, rows_per_chunk: int = 256):
    """The deadline term of the module docstring: (bound seconds, boundary tick, bytes that
    must come in between it and their deadline, 0), or None when no pair binds."""
    ws, we = prep.window
    W = we - ws
    at, ab, an = prep.ab_tick, prep.ab_block, prep.ab_need
    inw = (at >= ws) & (at < we)
    if not inw.any() or W < 1:
        return None
    # one row per (block, tick) in the window: the largest range accessed at that tick
    key = ab[inw].astype(np.int64) * (W + 1) + (at[inw] - ws)
    order = np.argsort(key, kind="stable")
    key, need = key[order], an[inw][order]
    first = np.concatenate([[True], key[1:] != key[:-1]])
    starts = np.flatnonzero(first)
    need = np.maximum.reduceat(need, starts)
    key = key[starts]
    blk, tk = key // (W + 1), key % (W + 1)  # window tick index of each access
    # Intervals of boundaries (row i = boundary after window tick i-1) during which the
    # block's data exists and its next access is at window tick j: from the previous
    # access (row = its tick + 1) to row j; before the first access only if the data
    # existed before the window (row 0).
    same = np.concatenate([[False], blk[1:] == blk[:-1]])
    prev = np.concatenate([[0], tk[:-1]])
    old = first_any[blk] < ws
    lo = np.where(same, prev + 1, 0)
    ok = same | old
    lo, hi, j, n = lo[ok], tk[ok], tk[ok], need[ok]  # rows lo..hi (hi = j: boundary before j)
    ok = hi >= lo
    lo, hi, j, n = lo[ok], hi[ok], j[ok], n[ok]
    if not len(lo):
        return None
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
    return C + best, ws - 1 + best_row, best_bytes, 0
