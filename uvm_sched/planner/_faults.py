"""What a fault-sampled warm-up sees: the rule of Note [Fault probes], simulated on a trace.

Note [Fault probes]
~~~~~~~~~~~~~~~~~~~
Rationale. CUPTI's unified-memory GPU page-fault records (``uvm_sched.native.cupti_*``)
give the faulting address and a time, without a framework. But a fault shows only the
first touch of a page that is not resident: a persistent block (weights, optimizer state)
stays resident after its first touch, so its later uses -- the backward read of a weight,
the optimizer step -- never fault, and a plan built on first touches alone would evict a
weight right after its forward read.

Approach. During the warm-up iterations the runtime *probes* a rotating share of the
persistent blocks: a probed block is moved to the host (a prefetch to the host) right
after its last observed touch, so that its next use faults and shows itself. Each probe
learns one more touch per block; a probe that sees no fault before the iteration ends
closes the block (its touch list is then complete: the block is idle after its last
touch until the next iteration's first). The first probe of a block moves it at the
iteration's start (the marker), where nothing is known yet.

* Rotation: the persistent blocks in allocation order are split into
  ``ceil(1 / share)`` groups (block j in group ``j mod groups``); warm-up iteration i
  probes group ``i mod groups``.
* Cost (bounded, reported): each probe migrates the block once to the host and back by
  faults, ``probe_bytes`` = the sum of the probed blocks' sizes per probe; at most
  ``warmup_iters x share`` probes per block.
* Ticks: a fault at allocator-event tick k of an iteration is a touch at tick k (the
  runtime maps CUPTI timestamps to ticks by the ring's clock, ``_runtime_faults``).

What the planner is given: the touches observed, exact up to each block's last observed
one (each probe reveals the *next* touch, so none hides between two observed ones), and,
for a block not closed by the end of the warm-up, its unknown tail -- the ticks after its
last observed touch -- marked busy (``busy_tails``): idle where the probes showed it
idle, resident where nothing is known.

Limitations. Blocks are probed whole (a touch of a page already faulted back in that
iteration is not seen, so a block is seen at page-first-touch granularity: here, the
block's first access after the probe point). Non-persistent blocks are not probed: their
lifetimes come from the allocator; they get no samples and keep the oblivious rule.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["fault_samples", "probe_groups", "samples_from_faults"]


def probe_groups(n_blocks: int, share: float) -> np.ndarray:
    """Group (0 .. ceil(1/share) - 1) of each of ``n_blocks`` persistent blocks in allocation
    order; warm-up iteration i probes group ``i mod groups`` (Note [Fault probes])."""
    if not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1] (the fraction of persistent blocks probed "
                         f"per warm-up iteration), got {share}")
    return np.arange(n_blocks, dtype=np.int64) % math.ceil(1.0 / share - 1e-9)


def fault_samples(trace, pattern=None, *, warmup_iters: int = 3, share: float = 0.5):
    """The touch-form samples (``planner._sampling`` doc) that a fault-sampled warm-up of
    ``warmup_iters`` iterations probing ``share`` of the persistent blocks per iteration
    would collect (Note [Fault probes]), from ``trace``'s ground-truth ACCESS rows of the
    representative iteration (``pattern``, default ``pattern.analyze(trace)``).

    Returns a DataFrame (iteration, block, persistent, tick, assumed: ticks in allocator
    events from the iteration's start; ``assumed`` rows are the busy tails of blocks not
    closed, ``busy_tails``; the idle stretches between rows are known) with ``attrs``:
    ``probes`` (block probes made), ``probe_bytes`` (bytes moved
    to the host by them; as many come back by faults), ``closed`` / ``open`` (sampled
    blocks whose touch list is / is not known complete), ``persistent_blocks``. Pass it as
    ``samples=`` to ``plan(mode="sampled")``.
    """
    import pandas as pd

    from ..trace import EventKind

    if int(warmup_iters) < 1:
        raise ValueError(f"warmup_iters must be >= 1, got {warmup_iters}")
    if not trace.has_accesses:
        raise ValueError("fault_samples simulates faults from the trace's ACCESS rows: this "
                         "trace has none (record it with accesses, or use oblivious mode)")
    if pattern is None:
        from ..pattern import analyze

        pattern = analyze(trace)
    start, stop = int(pattern.start_tick), int(pattern.stop_tick)
    blocks = pattern.blocks[pattern.blocks["persistent"].to_numpy(bool)].sort_values("ordinal")
    groups = probe_groups(len(blocks), share)
    rows = np.flatnonzero((trace.kind == EventKind.ACCESS) & (trace.tick >= start)
                          & (trace.tick < stop))
    bid, tick = trace.block[rows], trace.tick[rows] - start
    order = np.lexsort((tick, bid))
    bid, tick = bid[order], tick[order]
    n_groups = int(groups.max(initial=0)) + 1
    out_b, out_t = [], []
    probes = probe_bytes = closed = 0
    closed_set: set[int] = set()
    for j, (b, ordinal, size) in enumerate(zip(blocks.index.to_numpy(),
                                               blocks["ordinal"].to_numpy(np.int64),
                                               blocks["size"].to_numpy(np.int64))):
        lo, hi = np.searchsorted(bid, b), np.searchsorted(bid, b, side="right")
        touches = np.unique(tick[lo:hi])  # this block's ground truth, sorted
        seen = -1  # tick of the last observed touch (-1: none, probe at the marker)
        n_probes = sum(1 for i in range(int(warmup_iters)) if i % n_groups == groups[j])
        done = False
        for _ in range(n_probes):
            probes += 1
            probe_bytes += int(size)
            k = np.searchsorted(touches, seen, side="right")
            if k == len(touches):
                done = True  # no fault until the iteration's end: the list is complete
                break
            seen = int(touches[k])
            out_b.append(int(ordinal))
            out_t.append(seen)
        if done and seen >= 0:
            closed += 1
            closed_set.add(int(ordinal))
    sampled = len(set(out_b))
    df = pd.DataFrame({"iteration": np.zeros(len(out_b), np.int64),
                       "block": np.asarray(out_b, np.int64),
                       "persistent": np.ones(len(out_b), bool),
                       "tick": np.asarray(out_t, np.int64)})
    df = busy_tails(df, stop - start, set(out_b) - closed_set)
    df.attrs.update(probes=probes, probe_bytes=probe_bytes,
                    closed=closed, open=sampled - closed, persistent_blocks=len(blocks))
    return df


def busy_tails(samples, n_ticks: int, open_blocks):
    """``samples`` (touch form, persistent blocks) with the tail of each open block's touch
    list -- every tick after its last observed touch, to the iteration's last -- added as
    rows with ``assumed=True`` (observed rows: False). Why: probes reveal touches in order,
    so a list is exact up to its last observed touch and unknown after it; the planner
    then trusts the idle stretches between observed touches and keeps the block resident
    where nothing is known (Note [Fault probes])."""
    import pandas as pd

    samples = samples.assign(assumed=False)
    extra = []
    for b in sorted(open_blocks):
        rows = samples["persistent"].to_numpy(bool) & (samples["block"].to_numpy() == b)
        if not rows.any():
            continue
        last = int(samples.loc[rows, "tick"].max())
        ticks = np.arange(last + 1, int(n_ticks), dtype=np.int64)
        extra.append(pd.DataFrame({"iteration": 0, "block": np.int64(b), "persistent": True,
                                   "tick": ticks, "assumed": True}))
    out = pd.concat([samples, *extra], ignore_index=True) if extra else samples
    out.attrs.update(samples.attrs)
    return out


def samples_from_faults(trace, addresses, pattern, ticks, fault_addrs, *, k0: int,
                        open_addrs=()):
    """Touch-form samples (``planner._sampling`` doc) from fault records of a live run.

    ``trace``/``addresses``/``pattern``/``k0`` as for ``samples_from_touches``; ``ticks``:
    the ring tick in force at each fault (the allocator events served before it, minus
    one: ``_runtime_faults`` maps CUPTI times to it), ``fault_addrs``: the faulting
    page's address, anywhere inside a block. A fault belongs to the block whose bytes hold
    its address and that is alive at its tick; faults in no such block are dropped. Faults
    of every iteration of ``pattern`` count, folded onto the representative iteration by
    their tick within their own (the block at the same address there). ``open_addrs``:
    addresses of the persistent blocks whose touch list the warm-up did not close: their
    tails are marked busy (``busy_tails``).
    O((B + F) log B) for B blocks and F faults, plus O(B) per fault whose address lies in
    a block reused at another size (rare).
    """
    from ._sampling import samples_from_touches

    ticks = np.asarray(ticks, np.int64)
    fa = np.asarray(fault_addrs, np.uint64)
    bt = trace.block_table()
    if not len(ticks) or not len(bt):
        return samples_from_touches(trace, addresses, pattern, ticks[:0], fa[:0], k0=k0)\
            .assign(assumed=False)
    blk = bt.index.to_numpy(np.int64)
    base = np.asarray(addresses, np.uint64)[blk]
    end = base + bt["size"].to_numpy(np.int64).astype(np.uint64)
    a_t = bt["alloc_tick"].to_numpy(np.int64) + int(k0)
    f_t = bt["free_tick"].to_numpy(np.int64)
    f_t = np.where(f_t >= 0, f_t + int(k0), np.iinfo(np.int64).max)
    order = np.argsort(base, kind="stable")
    sb = base[order]
    j = np.searchsorted(sb, fa, side="right") - 1
    cand = order[np.maximum(j, 0)]
    ok = (j >= 0) & (fa < end[cand]) & (a_t[cand] <= ticks) & (ticks <= f_t[cand])
    owner = np.where(ok, base[cand], 0).astype(np.uint64)
    for i in np.flatnonzero(~ok & (j >= 0)):  # the nearest block below was another's
        m = (base <= fa[i]) & (fa[i] < end) & (a_t <= ticks[i]) & (ticks[i] <= f_t)
        if m.any():
            owner[i], ok[i] = base[np.flatnonzero(m)[0]], True
    # fold every iteration's faults onto the representative by their tick within their
    # iteration (each warm-up iteration probed other blocks and points): the block is the
    # one at the same address there (persistent blocks: the same block)
    tt = ticks[ok] - int(k0)
    its = np.asarray(pattern.iterations, np.int64).reshape(-1, 2)
    i = np.searchsorted(its[:, 0], tt, side="right") - 1
    inside = (i >= 0) & (tt < its[np.maximum(i, 0), 1])
    rep = tt[inside] - its[i[inside], 0] + int(pattern.start_tick) + int(k0)
    out = samples_from_touches(trace, addresses, pattern, rep + 1, owner[ok][inside], k0=k0)
    pb = pattern.blocks[pattern.blocks["persistent"].to_numpy(bool)]
    at = np.asarray(addresses, np.uint64)[pb.index.to_numpy(np.int64)]
    opened = pb["ordinal"].to_numpy(np.int64)[np.isin(at, np.asarray(open_addrs, np.uint64))]
    return busy_tails(out, int(pattern.stop_tick - pattern.start_tick), set(opened.tolist()))
