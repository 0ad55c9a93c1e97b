"""Trace -> the arrays the simulator's event loop reads (all vectorised, O(n log n)).

Memory layout (the approximation, stated once):

* Every block (allocation) is laid out on its own 2 MiB-aligned VA range, as our pool does
  for large allocations, and split into *chunks* of ``hw.va_block_bytes`` (the driver's VA
  block, the unit of residency and eviction); the last chunk holds the remainder. A block
  smaller than a VA block is one chunk of its own size: in a real pool small blocks share a
  VA block (and are evicted together); we keep them apart, which makes eviction slightly
  finer-grained than the driver's for small tensors. Small tensors are a small share of the
  bytes of a training iteration, so this moves the totals little.
* Accesses: the trace's ACCESS rows when it has them (ground truth, with partial ranges);
  otherwise the *extremal* assumption: the block is written whole at its ALLOC tick and read
  whole at its FREE tick (by that tick's kernel, which runs before the tick's frees).
  A never-freed block without ACCESS rows is only written once: nothing else is knowable.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..trace import AccessMode, EventKind, Trace, TraceError

__all__ = ["Prepared", "prepare"]


@dataclass
class Prepared:
    n_ticks: int
    dur_s: np.ndarray  # compute seconds per tick
    # blocks (dense index 0..n_blocks-1 in ALLOC order)
    block_id: np.ndarray  # trace block id per dense block
    bsize: np.ndarray
    balloc_tick: np.ndarray
    bfree_tick: np.ndarray  # -1: never freed
    bchunk0: np.ndarray  # first chunk of the block
    bnchunk: np.ndarray
    # chunks
    csize: np.ndarray
    cblock: np.ndarray
    # allocator events in row order (CSR by tick)
    ev_ptr: np.ndarray  # n_ticks+1
    ev_kind: np.ndarray  # EventKind.ALLOC / FREE
    ev_block: np.ndarray  # dense block
    # accesses per tick (CSR by tick), deduplicated per (tick, chunk)
    acc_ptr: np.ndarray
    acc_chunk: np.ndarray
    acc_need: np.ndarray  # bytes of the chunk the tick needs (page-rounded for partial)
    acc_write: np.ndarray  # bool: some access of the tick writes the chunk
    acc_read: np.ndarray  # bool: some access of the tick reads it (a pure write does not)
    # per-access-row block view (for the bound and swap-activations)
    ab_tick: np.ndarray
    ab_block: np.ndarray
    ab_need: np.ndarray
    ab_read: np.ndarray  # bool: the row reads (its data must be there; a pure write need not)
    ab_write: np.ndarray  # bool: the row writes
    ground_truth: bool
    iter_starts: np.ndarray  # MARK ticks
    window: tuple[int, int]  # measured ticks [start, stop)
    ws_bytes: np.ndarray  # per tick working set (bytes)


def _tick_seconds(trace: Trace) -> np.ndarray:
    """Device time per tick in s: ``tick_ns`` where known; where unknown, the gap between
    the first event time of the tick and of the next (the host-side clock, an upper bound on
    device time when the host waited), the last tick taking the median known value."""
    n = trace.n_ticks
    if n and len(trace) and not trace.has_clock:
        # unknown is unknown: 1 ns per event (t_ns counting ticks) would be made up.
        # TraceError (a ValueError): the input lacks what is needed, the CLI's exit 2
        raise TraceError(
            f"trace {trace.meta.get('name') or ''!r} has no clock (no time_us, op times or "
            "kernel times): its compute time is unknown; to simulate with an assumed time, "
            "use trace.assume_tick_ns(ns) (CLI: --assume-tick-us US)")
    tns = np.asarray(trace.tick_ns, np.float64)[:n].copy()
    bad = ~np.isfinite(tns)
    if bad.any() and len(trace):
        first_t = np.full(n, np.nan)
        ticks, idx = np.unique(trace.tick, return_index=True)
        first_t[ticks] = trace.t_ns[idx]
        # carry forward over ticks without events, then diff
        filled = first_t.copy()
        for i in range(1, n):  # n is the tick count (thousands): cheap
            if np.isnan(filled[i]):
                filled[i] = filled[i - 1]
        gap = np.empty(n)
        gap[:-1] = np.diff(filled)
        known = np.concatenate([tns[~bad], gap[:-1][np.isfinite(gap[:-1])]])
        gap[-1] = float(np.median(known)) if len(known) else 0.0
        tns[bad] = np.maximum(gap[bad], 0.0)
    tns = np.where(np.isfinite(tns), np.maximum(tns, 0.0), 0.0)
    return tns * 1e-9


def _learned_window(trace: Trace, n_ticks: int) -> tuple[int, int]:
    """Without markers, the last iteration ``pattern.analyze`` found (a learned period
    accepted on its evidence, or an importer's step ends): an iteration time is one
    iteration's, never the whole trace's. The whole trace when no iteration was found
    (it is then one iteration, and the pattern's notes say why)."""
    from ..pattern import PatternError, analyze

    try:
        its = analyze(trace).iterations
    except PatternError:  # no allocations: nothing repeats
        return (0, n_ticks)
    if len(its) < 2:
        return (0, n_ticks)
    start, stop = its[-1]
    return (int(start), int(min(stop, n_ticks)))


def _window(trace: Trace, n_ticks: int, ev_tick: np.ndarray) -> tuple[np.ndarray, tuple[int, int]]:
    marks = trace.iteration_starts
    marks = marks[marks < n_ticks]
    if len(marks) == 0:
        return marks, _learned_window(trace, n_ticks)
    if len(marks) == 1:
        return marks, (int(marks[0]), n_ticks)
    # the part after the last mark is complete when it has as many allocator events or as
    # many ticks as the iteration before it (a trace that ends exactly at an iteration's end
    # has no final mark; a first iteration may allocate weights or optimizer state once, so
    # it can have more events than the steady-state iterations after it)
    last = int(np.sum(ev_tick >= marks[-1]))
    prev = int(np.sum((ev_tick >= marks[-2]) & (ev_tick < marks[-1])))
    last_ticks, prev_ticks = n_ticks - int(marks[-1]), int(marks[-1] - marks[-2])
    if last > 0 and (last >= prev or last_ticks >= prev_ticks):
        return marks, (int(marks[-1]), n_ticks)
    return marks, (int(marks[-2]), int(marks[-1]))


def prepare(trace: Trace, va_block_bytes: int, page_bytes: int,
            window: tuple[int, int] | None = None) -> Prepared:
    """Lay out blocks and chunks and index accesses per tick (see module doc)."""
    n_ticks = max(trace.n_ticks, int(trace.tick.max()) + 1 if len(trace) else 0)
    kind, blk, tick, size = trace.kind, trace.block, trace.tick, trace.size
    a_rows = np.flatnonzero(kind == EventKind.ALLOC)
    block_id = blk[a_rows]
    order = np.argsort(block_id, kind="stable")
    sorted_ids = block_id[order]

    def dense(ids: np.ndarray) -> np.ndarray:
        pos = np.searchsorted(sorted_ids, ids)
        return order[pos]

    nb = len(a_rows)
    bsize = size[a_rows].astype(np.int64)
    balloc = tick[a_rows].astype(np.int64)
    f_rows = np.flatnonzero(kind == EventKind.FREE)
    bfree = np.full(nb, -1, np.int64)
    if len(f_rows):
        bfree[dense(blk[f_rows])] = tick[f_rows]
    V = int(va_block_bytes)
    bn = np.maximum(1, -(-bsize // V)).astype(np.int64)
    b0 = np.zeros(nb, np.int64)
    if nb:
        b0[1:] = np.cumsum(bn)[:-1]
    nc = int(bn.sum())
    cblock = np.repeat(np.arange(nb, dtype=np.int64), bn)
    within = np.arange(nc, dtype=np.int64) - b0[cblock]
    csize = np.minimum(V, bsize[cblock] - within * V).clip(min=0)

    ev_rows = np.flatnonzero((kind == EventKind.ALLOC) | (kind == EventKind.FREE))
    ev_tick = tick[ev_rows]
    ev_ptr = np.searchsorted(ev_tick, np.arange(n_ticks + 1)).astype(np.int64)
    ev_kind = kind[ev_rows].astype(np.int8)
    ev_block = dense(blk[ev_rows]) if len(ev_rows) else np.zeros(0, np.int64)

    gt = trace.has_accesses
    if gt:
        r = np.flatnonzero(kind == EventKind.ACCESS)
        at = tick[r].astype(np.int64)
        ab = dense(blk[r])
        mode = trace.mode[r]
        aw = (mode & AccessMode.WRITE) != 0
        ar = ((mode & AccessMode.READ) != 0) | (mode == AccessMode.NONE)  # unknown: a read
        off = trace.offset[r].astype(np.int64)
        ln = trace.length[r].astype(np.int64)
    else:
        ab = np.concatenate([np.arange(nb), dense(blk[f_rows]) if len(f_rows) else np.zeros(0, np.int64)])
        at = np.concatenate([balloc, tick[f_rows].astype(np.int64)])
        aw = np.concatenate([np.ones(nb, bool), np.zeros(len(f_rows), bool)])
        ar = ~aw
        off = np.full(len(ab), -1, np.int64)
        ln = np.full(len(ab), -1, np.int64)
        o = np.argsort(at, kind="stable")
        ab, at, aw, ar, off, ln = ab[o], at[o], aw[o], ar[o], off[o], ln[o]
    whole, lo, hi, tk, ch, need, w, r_ = _access_chunks(ab, at, aw, ar, off, ln, bsize, b0,
                                                        bn, csize, nc, V, int(page_bytes))
    acc_ptr = np.searchsorted(tk, np.arange(n_ticks + 1)).astype(np.int64)
    ws = np.bincount(tk, weights=need, minlength=n_ticks)[:n_ticks].astype(np.int64) if len(tk) else np.zeros(n_ticks, np.int64)
    # per access row need (block level) for the bound
    ab_need = np.where(whole, bsize[ab], hi - lo)

    marks, win = _window(trace, n_ticks, ev_tick)
    if window is not None:
        win = (int(window[0]), int(window[1]))
    return Prepared(
        n_ticks=n_ticks, dur_s=_tick_seconds(trace) if trace.n_ticks == n_ticks else
        np.concatenate([_tick_seconds(trace), np.zeros(n_ticks - trace.n_ticks)]),
        block_id=block_id, bsize=bsize, balloc_tick=balloc, bfree_tick=bfree,
        bchunk0=b0, bnchunk=bn, csize=csize.astype(np.int64), cblock=cblock,
        ev_ptr=ev_ptr, ev_kind=ev_kind, ev_block=ev_block,
        acc_ptr=acc_ptr, acc_chunk=ch.astype(np.int64), acc_need=need.astype(np.int64),
        acc_write=w.astype(bool), acc_read=r_.astype(bool), ab_tick=at, ab_block=ab, ab_need=ab_need.astype(np.int64),
        ab_read=np.asarray(ar, bool), ab_write=np.asarray(aw, bool),
        ground_truth=gt, iter_starts=marks, window=win, ws_bytes=ws,
    )


def _access_chunks(ab, at, aw, ar, off, ln, bsize, b0, bn, csize, nc: int, V: int, P: int):
    """The access rows (block ``ab`` at tick ``at``, write/read flags, byte range ``off``,
    ``ln``; -1: whole) split into the chunks they touch and deduplicated per (tick, chunk):
    ``whole, lo, hi`` per row, then ``tick, chunk, need`` (bytes, page-rounded for partial
    accesses), ``write, read`` per (tick, chunk), sorted by (tick, chunk)."""
    whole = (off < 0) | (ln < 0)
    lo = np.where(whole, 0, off)
    hi = np.where(whole, bsize[ab], np.minimum(off + np.maximum(ln, 0), bsize[ab]))
    c_lo = b0[ab] + lo // V
    c_hi = np.maximum(b0[ab] + -(-hi // V), c_lo + 1)  # at least one chunk (zero-size blocks)
    c_hi = np.minimum(c_hi, b0[ab] + bn[ab])
    cnt = c_hi - c_lo
    # one row per (access, chunk) it touches: the largest arrays here (~2.5 per event on
    # LLM traces), so each temporary is dropped as soon as it is used (peak memory)
    rep = np.repeat(np.arange(len(ab)), cnt)
    ch = np.arange(len(rep)) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    ch += c_lo[rep]
    del c_lo, c_hi, cnt
    # bytes of chunk `ch` inside [lo, hi) of the block, page-rounded for partial accesses
    cbeg = (ch - b0[ab[rep]]) * V
    ov = np.minimum(cbeg + csize[ch], hi[rep])
    ov -= np.maximum(cbeg, lo[rep])
    del cbeg
    ov = np.maximum(ov, 0)
    part = ~whole[rep]
    ov = np.where(part, np.minimum(-(-ov // P) * P, csize[ch]), csize[ch])
    del part
    # deduplicate (tick, chunk): max need, any write
    key = at[rep] * (nc + 1) + ch
    o = np.argsort(key, kind="stable")
    key = key[o]
    ch, ov = ch[o], ov[o]
    rep = rep[o]
    del o
    tk, wr, rd = at[rep], aw[rep], ar[rep]
    del rep
    if len(key):
        first = np.ones(len(key), bool)
        first[1:] = key[1:] != key[:-1]
        del key
        # the rows of one (tick, chunk) are contiguous: reduce each run (ov >= 0, so the
        # max is the need a zero start and ``maximum.at`` gave, at a fraction of the cost)
        grp = np.flatnonzero(first)
        need = np.maximum.reduceat(ov, grp).astype(np.int64)
        w = np.logical_or.reduceat(wr, grp)
        r_ = np.logical_or.reduceat(rd, grp)
        del grp, ov, wr, rd
        tk, ch = tk[first], ch[first]
    else:
        need, w, r_ = ov, wr, rd
    return whole, lo, hi, tk, ch, need, w, r_
