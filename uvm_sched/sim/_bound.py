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
term could overstate.) It still ignores fault latencies, so it is loose when they dominate,
but no schedule the simulator runs can beat it. O(T + A).
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
    return max(C, float(T[i])), ws - 1 + i, int(excess[i]), int(written_back[i])
