"""The representative iteration's tables (``Pattern.blocks`` and ``Pattern.events``): block
identity (persistent, ordinals), lifetimes, ground-truth access statistics, classes and
stability across iterations. The definitions are in ``_analyze``'s module doc.

Everything is vectorised over the allocator events (no per-event Python loop): the event
positions of each block's ALLOC and FREE are found once (``_EventIndex``) and every column
is computed from them.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..trace._model import EventKind

__all__ = ["AllocEvents", "block_tables", "CLASSES", "ACTIVATION_SHARE"]

CLASSES = ("persistent", "activation", "transient", "workspace")
ACTIVATION_SHARE = 0.25  # a block living >= 25% of the iteration is an activation


@dataclasses.dataclass
class AllocEvents:
    """The trace's allocator events (ALLOC and FREE rows, in order) as columns."""

    kind: np.ndarray  # int8: 0 alloc, 1 free
    size: np.ndarray  # bytes
    block: np.ndarray  # block id
    tick: np.ndarray  # trace tick

    @property
    def n(self) -> int:
        return len(self.kind)


@dataclasses.dataclass
class _EventIndex:
    """Where each block's ALLOC and FREE are among the allocator events."""

    is_alloc: np.ndarray  # (n,) bool
    alloc_pos: np.ndarray  # (A,) event of ALLOC ordinal i (global ordinal in the trace)
    free_pos: np.ndarray  # (A,) event of its FREE, n = never freed
    ev_aidx: np.ndarray  # (n,) the ALLOC ordinal each event belongs to
    alloc_before: np.ndarray  # (n+1,) ALLOCs before event position k

    @classmethod
    def of(cls, ev: AllocEvents) -> _EventIndex:
        n = ev.n
        is_alloc = ev.kind == 0
        alloc_pos = np.flatnonzero(is_alloc)  # alloc index i = global ALLOC ordinal
        n_alloc = len(alloc_pos)
        a_block = ev.block[alloc_pos]
        order = np.argsort(a_block, kind="stable")
        free_ev = np.flatnonzero(~is_alloc)
        fi = order[np.searchsorted(a_block[order], ev.block[free_ev])]
        free_pos = np.full(n_alloc, n, np.int64)  # n = never freed
        free_pos[fi] = free_ev
        ev_aidx = np.empty(n, np.int64)
        ev_aidx[alloc_pos] = np.arange(n_alloc)
        ev_aidx[free_ev] = fi
        return cls(is_alloc, alloc_pos, free_pos, ev_aidx,
                   np.concatenate(([0], np.cumsum(is_alloc))))


def span_ms(cum, cnan, a, b) -> np.ndarray:
    """Device time of ticks [a, b) in ms (NaN where a tick's time is unknown)."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    ms = (cum[b] - cum[a]) / 1e6
    return np.where(cnan[b] - cnan[a] > 0, np.nan, ms)


def block_tables(trace, ev: AllocEvents, seg, rep: int, ts: int, te: int, cum, cnan):
    """``(blocks, events)`` of iteration ``rep`` (allocator events ``seg[rep]``, ticks
    ``[ts, te)``); ``cum``/``cnan``: cumulative device ns and unknown ticks (for the ms
    columns)."""
    import pandas as pd

    n, n_ticks = ev.n, trace.n_ticks
    es, ee = int(seg[rep, 0]), int(seg[rep, 1])
    T = max(te - ts, 1)
    ix = _EventIndex.of(ev)
    sel, persistent, ordinal, in_a, in_f = _identity(ix, seg, rep, n)
    ap, fp = ix.alloc_pos[sel], ix.free_pos[sel]
    a_abs = ev.tick[ap]
    f_abs = np.where(fp < n, ev.tick[np.minimum(fp, n - 1)], n_ticks)
    lifetime = f_abs - a_abs
    lo = np.where(in_a, a_abs - ts, 0)
    hi = np.where(in_f, f_abs - ts, T - 1)
    nb = len(sel)
    has_acc = trace.has_accesses
    if has_acc:
        first_acc, last_acc, n_acc, access_ticks, max_idle, max_idle_ms = _accesses(
            trace, ev.block[ap], persistent, lo, hi, ts, te, cum, cnan)
    else:
        first_acc = np.full(nb, -1, np.int64)
        last_acc = np.full(nb, -1, np.int64)
        n_acc = np.zeros(nb, np.int64)
        access_ticks = [None] * nb
        max_idle = hi - lo
        max_idle_ms = span_ms(cum, cnan, ts + lo, ts + hi)
    stability, life_stab = _stability(ix, ev, seg, rep, sel, persistent, ordinal)
    blocks = pd.DataFrame(
        {
            "ordinal": ordinal.astype(np.int64),
            "persistent": persistent,
            "size": ev.size[ap].astype(np.int64),
            "cls": pd.Categorical(_classes(ev, es, ee, ts, T, a_abs, f_abs, persistent,
                                           n_acc if has_acc else None),
                                  categories=list(CLASSES)),
            "alloc_tick": np.where(in_a, a_abs - ts, -1).astype(np.int64),
            "free_tick": np.where(in_f, f_abs - ts, -1).astype(np.int64),
            "alloc_event": np.where(in_a, ap - es, -1).astype(np.int64),
            "free_event": np.where(in_f, fp - es, -1).astype(np.int64),
            "first_access_tick": first_acc,
            "last_access_tick": last_acc,
            "access_ticks": access_ticks,
            "max_idle_ticks": max_idle.astype(np.int64),
            "max_idle_ms": max_idle_ms.astype(np.float64),
            "idle_from": "access" if has_acc else "lifetime",
            "lifetime_ticks": lifetime.astype(np.int64),
            "lifetime_ms": span_ms(cum, cnan, a_abs, np.minimum(f_abs + 1, n_ticks)),
            "stability": stability,
            "lifetime_stability": life_stab,
        },
        index=pd.Index(ev.block[ap], name="block"),
    )
    rows = np.searchsorted(sel, ix.ev_aidx[es:ee])
    events = pd.DataFrame(
        {
            "event": np.arange(ee - es, dtype=np.int64),
            "kind": np.where(ix.is_alloc[es:ee], "alloc", "free").astype(object),
            "tick": (ev.tick[es:ee] - ts).astype(np.int64),
            "block": ev.block[es:ee].astype(np.int64),
            "ordinal": ordinal[rows].astype(np.int64),
            "persistent": persistent[rows],
            "size": ev.size[es:ee].astype(np.int64),
        }
    )
    return blocks, events


def _identity(ix: _EventIndex, seg, rep: int, n: int):
    """The blocks of iteration ``rep`` (ALLOC ordinals ``sel``: allocated before its end and
    freed at or after its start), which are persistent, their ordinals, and whether their
    ALLOC / FREE fall inside it."""
    es, ee = int(seg[rep, 0]), int(seg[rep, 1])
    alloc_pos, free_pos, alloc_before = ix.alloc_pos, ix.free_pos, ix.alloc_before
    sel = np.flatnonzero((np.arange(len(alloc_pos)) < alloc_before[ee]) & (free_pos >= es))
    ap, fp = alloc_pos[sel], free_pos[sel]
    in_a, in_f = ap >= es, fp < ee
    persistent = ~in_a & ~in_f
    j_rep = sel - int(alloc_before[es])
    never = in_a & (fp == n)
    if never.any() and rep > 0:
        # allocated here, never freed: persistent unless the previous iteration's block of
        # the same ordinal was freed
        p0, p1 = alloc_before[seg[rep - 1, 0]], alloc_before[seg[rep - 1, 1]]
        prev = p0 + j_rep[never]
        prev_freed = np.zeros(len(prev), bool)
        okp = prev < p1
        prev_freed[okp] = free_pos[prev[okp]] < n
        persistent[never] = ~prev_freed
    elif never.any():
        persistent[never] = True
    ordinal = np.where(persistent, sel, j_rep)
    carried = ~in_a & in_f
    if carried.any():
        k = np.searchsorted(seg[:, 0], ap[carried], "right") - 1
        okk = (k >= 0) & (ap[carried] < seg[np.maximum(k, 0), 1])
        ordinal[carried] = np.where(okk, sel[carried] - alloc_before[seg[np.maximum(k, 0), 0]],
                                    -1)
    return sel, persistent, ordinal, in_a, in_f


def _accesses(trace, bid, persistent, lo, hi, ts: int, te: int, cum, cnan):
    """Ground-truth accesses of the blocks ``bid`` within ticks ``[ts, te)``: first and
    last access tick, accesses (distinct ticks), the ticks themselves, and the longest idle
    run in ticks and ms (between accesses, or before the first / after the last; cyclic
    across the iteration boundary for persistent blocks)."""
    T = max(te - ts, 1)
    nb = len(bid)
    first_acc = np.full(nb, -1, np.int64)
    last_acc = np.full(nb, -1, np.int64)
    t_all = trace.tick
    r_lo, r_hi = np.searchsorted(t_all, [ts, te], "left")
    rows = r_lo + np.flatnonzero(trace.kind[r_lo:r_hi] == EventKind.ACCESS)
    blk = trace.block[rows]
    bo = np.argsort(bid, kind="stable")
    pos = np.minimum(np.searchsorted(bid[bo], blk), max(nb - 1, 0))
    valid = bid[bo][pos] == blk if nb else np.zeros(len(blk), bool)
    key = np.unique(bo[pos[valid]] * T + (t_all[rows][valid] - ts))
    r_u, t_u = key // T, key % T
    n_acc = np.bincount(r_u, minlength=nb)
    offs = np.concatenate(([0], np.cumsum(n_acc)))
    got = n_acc > 0
    first_acc[got] = t_u[offs[:-1][got]]
    last_acc[got] = t_u[offs[1:][got] - 1]
    flat, bounds = t_u.tolist(), offs.tolist()
    access_ticks = [tuple(flat[a:z]) for a, z in zip(bounds[:-1], bounds[1:])]
    # idle runs: between consecutive accesses, before the first, after the last
    max_idle = np.where(got, 0, hi - lo + 1)
    max_idle_ms = np.where(got, 0.0, span_ms(cum, cnan, ts + lo, ts + hi + 1))
    same = r_u[1:] == r_u[:-1]
    if same.any():
        g_r = r_u[1:][same]
        g0, g1 = t_u[:-1][same] + 1, t_u[1:][same]  # idle ticks [g0, g1)
        np.maximum.at(max_idle, g_r, g1 - g0)
        gms = np.nan_to_num(span_ms(cum, cnan, ts + g0, ts + g1), nan=-1.0)
        np.maximum.at(max_idle_ms, g_r, gms)
    head = np.where(got, first_acc - lo, 0)
    tail = np.where(got, hi - last_acc, 0)
    head_ms = span_ms(cum, cnan, ts + lo, ts + np.maximum(first_acc, lo))
    tail_ms = span_ms(cum, cnan, ts + np.minimum(last_acc + 1, hi + 1), ts + hi + 1)
    cyc = persistent & got  # the gap wraps into the next iteration
    ends = np.where(cyc, head + tail, np.maximum(head, tail))
    ends_ms = np.where(cyc, head_ms + tail_ms, np.fmax(head_ms, tail_ms))
    max_idle = np.where(got, np.maximum(max_idle, ends), max_idle)
    max_idle_ms = np.where(got, np.fmax(max_idle_ms, ends_ms), max_idle_ms)
    max_idle_ms = np.where(max_idle_ms < 0, np.nan, max_idle_ms)
    return first_acc, last_acc, n_acc, access_ticks, max_idle, max_idle_ms


def _classes(ev: AllocEvents, es: int, ee: int, ts: int, T: int, a_abs, f_abs, persistent,
             n_acc) -> np.ndarray:
    """Each block's class (first match: persistent, workspace, activation, transient);
    ``n_acc``: accesses per block where ground truth is known, else None."""
    is_alloc = ev.kind[es:ee] == 0
    rep_live = np.cumsum(np.where(is_alloc, ev.size[es:ee], -ev.size[es:ee]))
    turn = int(ev.tick[es + int(np.argmax(rep_live))]) if ee > es else ts
    lifetime = f_abs - a_abs
    cls = np.full(len(a_abs), "transient", dtype=object)
    act = ((a_abs <= turn) & (f_abs > turn)) | (lifetime >= ACTIVATION_SHARE * T)
    cls[act] = "activation"
    ws = lifetime <= 1
    if n_acc is not None:
        ws &= n_acc <= 1
    cls[ws] = "workspace"
    cls[persistent] = "persistent"
    return cls


def _stability(ix: _EventIndex, ev: AllocEvents, seg, rep: int, sel, persistent, ordinal):
    """Per block, the share of iterations whose block of the same ordinal has its size
    (``stability``) and also its lifetime in events (``lifetime_stability``); for a
    persistent block, the share of iterations at whose end it is live."""
    n = ev.n
    es, ee = int(seg[rep, 0]), int(seg[rep, 1])
    alloc_pos, free_pos, alloc_before = ix.alloc_pos, ix.free_pos, ix.alloc_before
    K = len(seg)
    r0 = int(alloc_before[es])
    rn = int(alloc_before[ee]) - r0
    stab_ord = np.ones(max(rn, 0))
    life_ord = np.ones(max(rn, 0))
    if rn > 0 and K > 0:
        it = np.searchsorted(seg[:, 0], alloc_pos, "right") - 1
        ok = it >= 0
        ok[ok] = alloc_pos[ok] < seg[it[ok], 1]
        idx = np.flatnonzero(ok)
        it_start = seg[it[idx], 0]
        j = idx - alloc_before[it_start]
        m = j < rn
        idx, it_start, j = idx[m], it_start[m], j[m]
        rep_idx = r0 + np.arange(rn)
        rep_size = ev.size[alloc_pos[rep_idx]]
        rep_arel = alloc_pos[rep_idx] - es
        rep_frel = np.where(free_pos[rep_idx] < n, free_pos[rep_idx] - es, -1)
        same_size = ev.size[alloc_pos[idx]] == rep_size[j]
        frel = np.where(free_pos[idx] < n, free_pos[idx] - it_start, -1)
        same_life = same_size & (alloc_pos[idx] - it_start == rep_arel[j]) & (frel == rep_frel[j])
        stab_ord = np.bincount(j[same_size], minlength=rn) / K
        life_ord = np.bincount(j[same_life], minlength=rn) / K
    nb = len(sel)
    stability = np.full(nb, np.nan)
    life_stab = np.full(nb, np.nan)
    use = ~persistent & (ordinal >= 0) & (ordinal < rn)
    stability[use] = stab_ord[ordinal[use]]
    life_stab[use] = life_ord[ordinal[use]]
    if persistent.any():
        # share of iterations at whose end the block is live
        be = seg[:, 1]
        k_lo = np.searchsorted(be, alloc_pos[sel][persistent], "right")
        k_hi = np.searchsorted(be, free_pos[sel][persistent], "right")
        share = np.maximum(0, k_hi - k_lo) / K
        stability[persistent] = share
        life_stab[persistent] = share
    return stability, life_stab
