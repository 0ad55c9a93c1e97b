"""The pricing's view for a plan made from given access samples (Note [The samples' view]).

Note [The samples' view]
~~~~~~~~~~~~~~~~~~~~~~~~
A plan made from samples the caller gives (the runtime's dispatch tracer, a fault-sampled
warm-up, ``samples=``) is priced on what the planner knew: the trace's allocator events
(ALLOC, FREE, markers; the ground-truth ACCESS rows, where the trace has any, are
stripped) with, in every iteration, each sampled block touched at its sampled ticks (the
observed rows; an open list's unknown tail, its ``assumed`` rows, as one read in it,
``_one_unseen_use``), and every other block used as the oblivious views have it (written
at its ALLOC, read at its FREE; a never-freed block read once per iteration,
``_pricing``'s kept reads).

Why not the allocator-event views of oblivious mode: they hold none of the sampled uses, so
no plan looks cheap there and a plan that acts on the uses the samples show is refuted by
accesses that are not the planner's. Measured (benchmarks/results/persistent.md): a
mixed-precision AdamW trace at 4 accumulation steps, h200-pcie5 at 30% of the peak, whose
weights and optimizer state are read in every micro-batch: the fault-sampled plan 0.23x
demand paging, priced there at 1.46x no plan (no plan 0.135 s in that view against 1.64 s on
the trace), so advice-only was emitted, 0.42x demand paging. A plan from samples drawn
from the trace itself is judged on the trace as before (the samples are its accesses).

Summary-form samples (first and last touch only: busy in between) get no such view: the
busy stretch would be a touch per tick per block; they are priced on the allocator events,
as before.

Mapping (``Plan`` semantics): a persistent ordinal ``j`` is the trace's ``j``-th ALLOC, a
non-persistent one the ``j``-th ALLOC of the iteration; a sample tick ``t`` of the
iteration starting at tick ``s`` is trace tick ``s + t`` (dropped at or past the
iteration's end, or outside the block's life in it).
"""
from __future__ import annotations

import numpy as np

__all__ = ["judged_view", "known_view"]


def judged_view(trace, pattern, mode: str, samples) -> tuple:
    """What a plan made in ``mode`` is priced on, and whether that holds accesses (``price``'s
    ``accesses``): what the planner read. Sampled mode with samples drawn from ``trace`` read
    its ground truth: the trace itself; with given touch-form ``samples``, the samples' view
    (``known_view``); oblivious mode, and summary-form samples: the allocator events
    (``trace``, whose ACCESS rows ``price`` then strips)."""
    if mode != "sampled":
        return trace, False
    if samples is None:
        return trace, True
    known = known_view(trace, pattern, samples)
    return (trace, False) if known is None else (known, True)


def known_view(trace, pattern, samples):
    """``trace``'s allocator events with the accesses given by touch-form ``samples``
    (``planner._sampling`` doc) and the oblivious use model for the blocks they do not
    name (Note [The samples' view]); None for summary-form samples."""
    import pandas as pd

    from ..trace import AccessMode, EventKind, Trace
    from ..trace.zoo import allocator_only
    from ._pricing import _kept_reads_view

    df = pd.DataFrame(samples)
    if "tick" not in df.columns or "block" not in df.columns:
        return None
    df = _one_unseen_use(df)
    bare = allocator_only(trace) if trace.has_accesses else trace
    starts = [int(a) for a, _ in pattern.iterations]
    base = _kept_reads_view(bare, starts)
    if not (base.kind == EventKind.ACCESS).any():  # no block kept: no rows written there
        base = _extremal(bare)
    c = base.columns
    bt = base.block_table()
    alloc_rows = np.flatnonzero(c["kind"] == EventKind.ALLOC)
    alloc_blk, alloc_tick = c["block"][alloc_rows], c["tick"][alloc_rows]
    pers = df["persistent"].to_numpy(bool) if "persistent" in df.columns \
        else np.zeros(len(df), bool)
    ordl = df["block"].to_numpy(np.int64)
    rel = df["tick"].to_numpy(np.int64)
    read = df["read"].to_numpy(bool) if "read" in df.columns else np.zeros(len(df), bool)
    a_of = pd.Series(bt["alloc_tick"].to_numpy(np.int64), index=bt.index)
    f_of = pd.Series(bt["free_tick"].to_numpy(np.int64), index=bt.index)
    is_acc = c["kind"] == EventKind.ACCESS
    drop = np.zeros(len(c["tick"]), bool)
    nb, nt, nm = [], [], []
    for s, e in pattern.iterations:
        s, e = int(s), int(e)
        mine = alloc_blk[(alloc_tick >= s) & (alloc_tick < e)]
        bid = np.full(len(df), -1, np.int64)
        p_ok = pers & (ordl >= 0) & (ordl < len(alloc_blk))
        bid[p_ok] = alloc_blk[ordl[p_ok]]
        l_ok = ~pers & (ordl >= 0) & (ordl < len(mine))
        bid[l_ok] = mine[ordl[l_ok]]
        t = s + rel
        ok = (bid >= 0) & (t < e)
        if not ok.any():
            continue
        at = a_of.reindex(bid[ok]).to_numpy(np.int64)
        ft = f_of.reindex(bid[ok]).to_numpy(np.int64)
        alive = (t[ok] >= at) & ((ft < 0) | (t[ok] <= ft))
        idx = np.flatnonzero(ok)[alive]
        # the sampled blocks' model accesses inside this iteration give way to the samples
        drop |= is_acc & (c["tick"] >= s) & (c["tick"] < e) & np.isin(c["block"], bid[idx])
        nb.append(bid[idx])
        nt.append(t[idx])
        nm.append(np.where(read[idx], AccessMode.READ, AccessMode.WRITE).astype(np.uint8))
    if not nb:
        return Trace(c, tick_ns=base.tick_ns, meta={**base.meta, "samples_view": True})
    blk, tick, mode = np.concatenate(nb), np.concatenate(nt), np.concatenate(nm)
    key = np.unique(np.stack([blk, tick], 1), axis=0, return_index=True)[1]
    blk, tick, mode = blk[key], tick[key], mode[key]
    # place each touch after its block's ALLOC row and before its FREE row (a touch at the
    # ALLOC or FREE tick), else after the rows of its tick
    pos = np.searchsorted(c["tick"], tick, side="right")
    arow = bt["alloc_row"].reindex(blk).to_numpy(np.int64)
    frow = bt["free_row"].reindex(blk).to_numpy(np.int64)
    ftick = bt["free_tick"].reindex(blk).to_numpy(np.int64)
    k_new = np.where((frow >= 0) & (tick == ftick), frow * 2 - 1,
                     np.where(pos <= arow, arow * 2 + 1, pos * 2 - 1))
    keep = ~drop
    rows = np.flatnonzero(keep)
    order = np.lexsort((np.concatenate([rows * 2, k_new]),
                        np.concatenate([c["tick"][keep], tick])))
    t_ns = c["t_ns"][np.clip(k_new // 2, 0, len(c["tick"]) - 1)]
    extra = {"tick": tick, "t_ns": t_ns, "kind": np.full(len(tick), EventKind.ACCESS, np.uint8),
             "block": blk, "size": bt["size"].reindex(blk).to_numpy(np.int64), "mode": mode}
    cols = {}
    for k, v in c.items():
        add = extra.get(k)
        if add is None:
            add = np.full(len(tick), -1 if k in ("offset", "length") else 0, v.dtype)
        cols[k] = np.concatenate([v[keep], np.asarray(add, v.dtype)])[order]
    return Trace(cols, tick_ns=base.tick_ns, meta={**base.meta, "samples_view": True})


def _one_unseen_use(df):
    """``df`` with each block's ``assumed`` rows (an open list's unknown tail) cut to one
    read: the k-th such block (in (persistent, ordinal) order) at the k-th tick of its tail
    (modulo its length), as ``_pricing``'s kept reads spread a never-freed block's one use.
    Why: the tail is where the planner knows nothing and keeps the block; a touch at every
    tick of it would put every open block in the iteration's last tick's working set
    (measured: above the budget on a 30% AdamW row, which left the plan unpriced)."""
    if "assumed" not in df.columns:
        return df
    a = df["assumed"].to_numpy(bool)
    if not a.any():
        return df
    tail = df[a].sort_values(["persistent", "block", "tick"], kind="stable")
    pick = []
    for k, (_, g) in enumerate(tail.groupby(["persistent", "block"], sort=True)):
        pick.append(g.index[k % len(g)])
    out = df[~a | df.index.isin(pick)].copy()
    out["read"] = (out["read"].to_numpy(bool) if "read" in out.columns
                   else np.zeros(len(out), bool)) | out["assumed"].to_numpy(bool)
    return out


def _extremal(view):
    """``view`` (allocator events only) with the oblivious use model written out: each block
    written whole right after its ALLOC row, read whole right before its FREE row (what the
    simulator assumes of a trace without ACCESS rows, explicit, since a trace with any ACCESS
    row is judged by its ACCESS rows alone)."""
    from ..trace import AccessMode, EventKind, Trace

    c = view.columns
    alloc = np.flatnonzero(c["kind"] == EventKind.ALLOC)
    free = np.flatnonzero(c["kind"] == EventKind.FREE)
    src = np.concatenate([alloc, free])
    n = len(c["tick"])
    key = np.concatenate([np.arange(n) * 2, alloc * 2 + 1, free * 2 - 1])
    order = np.argsort(key, kind="stable")
    cols = {}
    for k, v in c.items():
        add = v[src].copy()
        if k == "kind":
            add[:] = EventKind.ACCESS
        elif k == "mode":
            add = np.concatenate([np.full(len(alloc), AccessMode.WRITE, v.dtype),
                                  np.full(len(free), AccessMode.READ, v.dtype)])
        elif k in ("offset", "length"):
            add[:] = -1
        cols[k] = np.concatenate([v, add])[order]
    return Trace(cols, tick_ns=view.tick_ns, meta=view.meta)
