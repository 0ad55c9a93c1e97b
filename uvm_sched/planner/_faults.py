"""What a fault-sampled warm-up sees: the rule of Note [Fault probes], simulated on a trace.

Note [Fault probes]
~~~~~~~~~~~~~~~~~~~
Rationale. CUPTI's unified-memory GPU page-fault records (``uvm_sched.native.cupti_*``)
give the faulting address and a time, without a framework. But a fault shows only the
first touch of a page that is not resident: a persistent block (weights, optimizer state)
stays resident after its first touch, so its later uses -- the backward read of a weight,
the optimizer step -- never fault, and a plan built on first touches alone would evict a
weight right after its forward read.

The same holds for a non-persistent block that lives long: an activation saved for the
backward pass faults (at most) at its first touch, and its backward read -- the use that
sets when it may leave the device -- is invisible.

Approach. During the warm-up iterations the runtime *probes* a rotating share of the
probe candidates: a probed block is moved to the host (a prefetch to the host) right
after its last observed touch, so that its next use faults and shows itself. Each probe
learns one more touch per block; a probe that sees no fault before the iteration ends
(a non-persistent block: before its free) closes the block (its touch list is then
complete: the block is idle after its last touch until the next iteration's first, or
dead until its free). The first probe of a block moves it where nothing is known yet:
at the iteration's start (the marker) for a persistent block, right after its
allocation for a non-persistent one -- from the second warm-up iteration on: the runtime
learns which allocator event names a long-lived block from the first iteration's events.

* Candidates: the persistent blocks in allocation order, then the non-persistent blocks
  of the iteration allocated and freed in it and alive at least ``long_life`` (default
  ``LONG_LIFE``, 10%) of its allocator events (``long_lived``), in allocation order. A
  non-persistent block is named by its allocation event in the iteration (its address
  changes from one iteration to the next: the native probe learns it at that event and
  skips the probe where that event allocated no block of that size, or the block is gone
  by the probe's tick). Shorter-lived blocks are not probed: no idle stretch between their
  touches is worth a plan action, and a probe costs a round trip of the block.
* Rotation: the candidates are split into ``ceil(1 / share)`` groups (candidate j in
  group ``j mod groups``); warm-up iteration i probes group ``i mod groups``. The default
  share is 1: every open candidate each iteration. The probes a block needs do not depend
  on the share (one per touch, and one that closes its list), so a full share learns the
  same in the fewest iterations; a smaller share only spreads the bytes over more of them.
* Length (the rule, not a constant count): the warm-up probes while some probed block's
  list is still open -- each iteration then reveals one more use of it -- and stops after
  the first iteration that leaves none open (``iterations``; a warm-up iteration with
  nothing left to probe is not run), or at the cost cap of ``max_iters`` probed iterations
  (default ``MAX_WARMUP``); the lists still open then keep their unknown tails (below).
  The Scheduler's warm-up lasts at least its ``warmup_iters`` and until the sampler's
  rule stops (``_runtime_faults.warmed_up``); the loop runs unplanned meanwhile.
* Cost (bounded, reported): each probe migrates the block once to the host and back by
  faults, ``probe_bytes`` = the sum of the probed blocks' sizes per probe; at most
  ``max_iters x share`` probes per block, and per warm-up iteration at most one per
  candidate of its group (``probes_per_iter``, ``probe_bytes_per_iter``: the largest).
* Ticks: a fault at allocator-event tick k of an iteration is a touch at tick k (the
  runtime maps CUPTI timestamps to ticks by the ring's clock, ``_runtime_faults``).

What the planner is given: the touches observed, exact up to each block's last observed
one (each probe reveals the *next* touch, so none hides between two observed ones), and,
for a block not closed by the end of the warm-up, its unknown tail -- the ticks after its
last observed touch, to the iteration's end -- marked busy (``busy_tails``, rows
``assumed``): idle where the probes showed it idle, resident where nothing is known. A
non-persistent block whose list is still open is given no samples at all: it keeps the
oblivious rule, as if unprobed. Measured (results/persistent.md): busy tails to the free
kept the zoo's activations resident and made fault-sampled plans up to 3x slower than the
persistent-only rule on BERT and GPT-2, whose activations the oblivious model already
plans well; the earlier compromise, the partial list with one read at the free, called the
stretch after the last observed touch idle, and a U-Net's skip connection is read in it
(its decoder reads the encoder's activation): U-Net at 30% of the peak on h200-pcie5 0.48x
demand paging against 0.28x with activations unprobed, 0.25x with open lists dropped.
Assumed ticks are not certain uses: the planner's budget check counts observed touches
only. Faults of non-persistent blocks that were not probed are dropped (their first touch
alone would read as a complete list): they keep the oblivious rule.

Limitations. Blocks are probed whole (a touch of a page already faulted back in that
iteration is not seen, so a block is seen at page-first-touch granularity: here, the
block's first access after the probe point). Non-persistent blocks that live shorter than
``long_life`` are not probed: they get no samples and keep the oblivious rule.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["fault_samples", "probe_groups", "samples_from_faults"]

# the share of the iteration's allocator events (ticks) a non-persistent block must live to
# be probed: shorter-lived blocks have no idle stretch worth a plan action between their
# touches, and each probe costs a round trip of the block (results/persistent.md shows the
# figures across 0 .. 0.25)
LONG_LIFE = 0.1
# the warm-up's cost cap, in probed iterations: the rule stops earlier where every list
# closes (results/persistent.md shows the figures across 2 .. 32 and the iterations used)
MAX_WARMUP = 16


def probe_groups(n_blocks: int, share: float) -> np.ndarray:
    """Group (0 .. ceil(1/share) - 1) of each of ``n_blocks`` persistent blocks in allocation
    order; warm-up iteration i probes group ``i mod groups`` (Note [Fault probes])."""
    if not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1] (the fraction of persistent blocks probed "
                         f"per warm-up iteration), got {share}")
    return np.arange(n_blocks, dtype=np.int64) % math.ceil(1.0 / share - 1e-9)


def long_lived(alloc_tick, free_tick, n_ticks: int, long_life: float) -> np.ndarray:
    """Which non-persistent blocks the warm-up probes (Note [Fault probes]): allocated and
    freed inside the iteration (the allocator names them by their allocation event) and
    alive at least ``long_life`` x ``n_ticks`` allocator events (ticks)."""
    if not 0 <= long_life <= 1:
        raise ValueError(f"long_life must be in [0, 1] (the share of the iteration's ticks a "
                         f"non-persistent block must live to be probed), got {long_life}")
    a, f = np.asarray(alloc_tick, np.int64), np.asarray(free_tick, np.int64)
    return (a >= 0) & (f >= 0) & (f - a >= max(1.0, long_life * int(n_ticks)))


def fault_samples(trace, pattern=None, *, max_iters: int = MAX_WARMUP, share: float = 1.0,
                  long_life: float | None = LONG_LIFE):
    """The touch-form samples (``planner._sampling`` doc) that a fault-sampled warm-up
    probing ``share`` of the probe candidates per iteration would collect under the rule of
    Note [Fault probes] (until no list is open, at most ``max_iters`` probed iterations),
    from ``trace``'s ground-truth ACCESS rows of the
    representative iteration (``pattern``, default ``pattern.analyze(trace)``).
    Candidates: the persistent blocks, then the non-persistent ones alive at least
    ``long_life`` of the iteration's ticks (``long_lived``; None: persistent blocks only).

    Returns a DataFrame (iteration, block, persistent, tick, assumed: ticks in allocator
    events from the iteration's start; ``assumed`` rows are the busy tails of blocks not
    closed, ``busy_tails``; the idle stretches between rows are known) with ``attrs``:
    ``iterations`` (warm-up iterations the rule ran: the last that probed anything),
    ``probes`` (block probes made over the warm-up), ``probe_bytes`` (bytes moved to the
    host by them; as many come back by faults), ``probes_per_iter`` / ``probe_bytes_per_iter``
    (the most in one warm-up iteration), ``closed`` / ``open`` (sampled blocks whose touch
    list is / is not known complete), ``persistent_blocks``, ``local_blocks`` (the
    non-persistent candidates). Pass it as ``samples=`` to ``plan(mode="sampled")``.
    """
    import pandas as pd

    from ..trace import EventKind

    if int(max_iters) < 1:
        raise ValueError(f"max_iters must be >= 1 (the warm-up's cap in probed iterations), "
                         f"got {max_iters}")
    if not trace.has_accesses:
        raise ValueError("fault_samples simulates faults from the trace's ACCESS rows: this "
                         "trace has none (record it with accesses, or use oblivious mode)")
    if pattern is None:
        from ..pattern import analyze

        pattern = analyze(trace)
    start, stop = int(pattern.start_tick), int(pattern.stop_tick)
    pb = pattern.blocks
    pers = pb["persistent"].to_numpy(bool)
    local = ~pers & (long_lived(pb["alloc_tick"], pb["free_tick"], stop - start, long_life)
                     if long_life is not None else False)
    blocks = pd.concat([pb[pers].sort_values("ordinal"), pb[local].sort_values("ordinal")])
    groups = probe_groups(len(blocks), share)
    rows = np.flatnonzero((trace.kind == EventKind.ACCESS) & (trace.tick >= start)
                          & (trace.tick < stop))
    bid, tick = trace.block[rows], trace.tick[rows] - start
    order = np.lexsort((tick, bid))
    bid, tick = bid[order], tick[order]
    n_groups = int(groups.max(initial=0)) + 1
    out_b, out_p, out_t = [], [], []
    per_iter = np.zeros((int(max_iters), 2), np.int64)  # probes, bytes per iteration
    closed_set: set[tuple[bool, int]] = set()
    for j, (b, ordinal, size, p_, at, ft) in enumerate(zip(
            blocks.index.to_numpy(), blocks["ordinal"].to_numpy(np.int64),
            blocks["size"].to_numpy(np.int64), blocks["persistent"].to_numpy(bool),
            blocks["alloc_tick"].to_numpy(np.int64), blocks["free_tick"].to_numpy(np.int64))):
        lo, hi = np.searchsorted(bid, b), np.searchsorted(bid, b, side="right")
        touches = np.unique(tick[lo:hi])  # this block's ground truth, sorted
        # the probe point is right after the last observed touch; before any is seen: at
        # the marker (persistent) or right after the block's allocation (non-persistent)
        seen = -2 if p_ else int(at) - 1
        first_seen = seen
        for i in range(int(max_iters)):
            if i % n_groups != groups[j] or (not p_ and i == 0):
                continue  # (a non-persistent candidate is known after the first iteration)
            if not p_ and seen >= ft:
                break  # freed at the probe point: nothing can follow, no probe needed
            per_iter[i] += (1, int(size))
            k = np.searchsorted(touches, seen, side="right")
            if k == len(touches):
                # no fault until the iteration's end (the block's free): the list is complete
                if seen > first_seen:
                    closed_set.add((bool(p_), int(ordinal)))
                break
            seen = int(touches[k])
            out_b.append(int(ordinal))
            out_p.append(bool(p_))
            out_t.append(seen)
        if not p_ and seen > first_seen and seen >= ft:
            closed_set.add((False, int(ordinal)))
    sampled = set(zip(out_p, out_b))
    df = pd.DataFrame({"iteration": np.zeros(len(out_b), np.int64),
                       "block": np.asarray(out_b, np.int64),
                       "persistent": np.asarray(out_p, bool),
                       "tick": np.asarray(out_t, np.int64)})
    df = busy_tails(df, stop - start, sampled - closed_set)
    closed = len(sampled & closed_set)
    df.attrs.update(iterations=int(np.flatnonzero(per_iter[:, 0]).max(initial=-1)) + 1,
                    probes=int(per_iter[:, 0].sum()), probe_bytes=int(per_iter[:, 1].sum()),
                    probes_per_iter=int(per_iter[:, 0].max()),
                    probe_bytes_per_iter=int(per_iter[:, 1].max()),
                    closed=closed, open=len(sampled) - closed, persistent_blocks=int(pers.sum()),
                    local_blocks=int(local.sum()))
    return df


def busy_tails(samples, n_ticks: int, open_blocks):
    """``samples`` (touch form) with the tail of each open persistent block's touch list
    added as rows with ``assumed=True`` (observed rows: False), every tick after its last
    observed touch to the iteration's last, and the rows of each open non-persistent block
    dropped (it keeps the oblivious rule). ``open_blocks``: (persistent, ordinal) pairs.
    Why: probes reveal touches in order, so a list is exact up to its last observed touch
    and unknown after it; the planner then trusts the idle stretches between observed
    touches and, where nothing is known, keeps a persistent block resident; an activation's
    partial list is not used at all -- its unknown tail has no model better than the
    oblivious rule's (Note [Fault probes])."""
    import pandas as pd

    samples = samples.assign(assumed=False)
    extra = []
    pers, blk = samples["persistent"].to_numpy(bool), samples["block"].to_numpy()
    drop = np.zeros(len(samples), bool)
    for p_, b in sorted(open_blocks):
        rows = (pers == p_) & (blk == b)
        if not rows.any():
            continue
        if not p_:
            drop |= rows
            continue
        last = int(samples.loc[rows, "tick"].max())
        extra.append(pd.DataFrame({"iteration": 0, "block": np.int64(b), "persistent": True,
                                   "tick": np.arange(last + 1, int(n_ticks), dtype=np.int64),
                                   "assumed": True}))
    out = pd.concat([samples[~drop], *extra], ignore_index=True)
    out.attrs.update(samples.attrs)
    return out


def samples_from_faults(trace, addresses, pattern, ticks, fault_addrs, *, k0: int,
                        open_addrs=(), local=((), ())):
    """Touch-form samples (``planner._sampling`` doc) from fault records of a live run.

    ``trace``/``addresses``/``pattern``/``k0`` as for ``samples_from_touches``; ``ticks``:
    the ring tick in force at each fault (the allocator events served before it, minus
    one: ``_runtime_faults`` maps CUPTI times to it), ``fault_addrs``: the faulting
    page's address, anywhere inside a block. A fault belongs to the block whose bytes hold
    its address and that is alive at its tick; faults in no such block are dropped. Faults
    of every iteration of ``pattern`` count, folded onto the representative iteration by
    their tick within their own (the block at the same address there). ``open_addrs``:
    addresses of the persistent blocks whose touch list the warm-up did not close: their
    tails are marked busy (``busy_tails``). ``local``: (probed, open) -- the allocation
    events (from the iteration's start) of the non-persistent blocks the warm-up probed,
    and of those it did not close; the faults of other non-persistent blocks are dropped
    (a first touch alone would pass for a complete list: those blocks keep the oblivious
    rule, as in ``fault_samples``), open ones are dropped too (``busy_tails``).
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
    allb = pattern.blocks
    pers = allb["persistent"].to_numpy(bool)
    pb = allb[pers]
    at = np.asarray(addresses, np.uint64)[pb.index.to_numpy(np.int64)]
    opened = pb["ordinal"].to_numpy(np.int64)[np.isin(at, np.asarray(open_addrs, np.uint64))]
    lb = allb[~pers]
    l_ord, l_ev = lb["ordinal"].to_numpy(np.int64), lb["alloc_event"].to_numpy(np.int64)
    probed = l_ord[np.isin(l_ev, np.asarray(local[0], np.int64))]
    out = out[out["persistent"].to_numpy(bool) | np.isin(out["block"].to_numpy(), probed)]
    l_open = l_ord[np.isin(l_ev, np.asarray(local[1], np.int64))]
    return busy_tails(out.reset_index(drop=True), int(pattern.stop_tick - pattern.start_tick),
                      {(True, o) for o in opened.tolist()} | {(False, int(o)) for o in l_open})
