"""Access samples for the ``sampled`` mode: the ticks at which each block is touched.

On a GPU the samples come from an access-sampling source (CUPTI unified-memory fault
records over a short profiling window, or a dispatch-mode tracer in PyTorch); offline they
are drawn here from a trace's ground-truth ACCESS rows, with a sampling rate and tick noise,
so the planner's sensitivity to sparse and imprecise samples can be measured.

A sample frame is a pandas DataFrame in one of two forms:

* touch form (what a fault record or a tracer gives, and what ``draw_samples`` returns):
  one row per observed touch -- ``block`` (the block's plan ordinal, see ``Plan``),
  ``persistent`` (bool, default False), ``tick`` (relative to the iteration's start),
  optional ``iteration``, ``read`` (bool: the touch only read) and ``touched_bytes``
  (bytes the touch covered; the block's size where unknown). Every observed touch tick is a
  use, so the planner sees reads in the middle of a lifetime (a U-Net's skip connection read
  by the decoder, a weight read in the forward and again in the backward pass);
* summary form: one row per (iteration, block) with ``first_touch`` and ``last_touch``
  (plus the optional ``iteration``, ``read_only``, ``touched_bytes``): only the two ends are
  known, a block is assumed busy in between.

Samples of several iterations are merged (the union of their touches), which is how sparse
sampling (``sample_rate`` < 1) recovers the touches one iteration missed.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["SAMPLE_COLUMNS", "TOUCH_COLUMNS", "assumed_ticks", "draw_samples",
           "merge_samples", "samples_from_touches"]

SAMPLE_COLUMNS = ("block", "persistent", "first_touch", "last_touch")
TOUCH_COLUMNS = ("block", "persistent", "tick")


def draw_samples(trace, pattern, *, sample_rate: float = 1.0, noise: float = 0.0,
                 seed: int = 0) -> pd.DataFrame:
    """Samples of the representative iteration drawn from ``trace``'s ACCESS rows.

    ``sample_rate`` (0..1]: probability that one access is observed. ``noise``: standard
    deviation, in ticks, of a Gaussian error added to each observed tick (rounded, clipped
    to the block's lifetime within the iteration). Returns a touch-form sample frame (module
    doc): one row per observed (block, tick), the bytes and read flag merged per tick.
    """
    import pandas as pd

    from ..trace import AccessMode, EventKind

    if not 0 < sample_rate <= 1:
        raise ValueError(f"sample_rate must be in (0, 1], got {sample_rate}")
    if noise < 0:
        raise ValueError(f"noise must be >= 0 ticks, got {noise}")
    if not trace.has_accesses:
        raise ValueError(
            "sampled mode needs access samples: this trace has no ACCESS rows to draw them "
            "from; pass samples=<DataFrame> or use mode='oblivious'"
        )
    start, stop = int(pattern.start_tick), int(pattern.stop_tick)
    blocks = pattern.blocks
    rows = np.flatnonzero((trace.kind == EventKind.ACCESS) & (trace.tick >= start)
                          & (trace.tick < stop))
    bid = trace.block[rows]
    keep = np.isin(bid, blocks.index.to_numpy())
    rows, bid = rows[keep], bid[keep]
    rng = np.random.default_rng(seed)
    if sample_rate < 1:
        m = rng.random(len(rows)) < sample_rate
        rows, bid = rows[m], bid[m]
    tick = (trace.tick[rows] - start).astype(np.float64)
    if noise > 0:
        tick = tick + np.round(rng.normal(0.0, noise, len(rows)))
    b = blocks.loc[bid]
    T = stop - start
    lo = np.where(b["alloc_tick"].to_numpy() >= 0, b["alloc_tick"].to_numpy(), 0)
    hi = np.where(b["free_tick"].to_numpy() >= 0, b["free_tick"].to_numpy(), T - 1)
    tick = np.clip(tick, lo, hi).astype(np.int64)
    size = b["size"].to_numpy()
    off, ln = trace.offset[rows], trace.length[rows]
    touched = np.where((off >= 0) & (ln >= 0), np.minimum(ln, size), size)
    df = pd.DataFrame({
        "iteration": 0,
        "block": b["ordinal"].to_numpy(),
        "persistent": b["persistent"].to_numpy().astype(bool),
        "tick": tick,
        "read": (trace.mode[rows] & AccessMode.WRITE) == 0,
        "touched_bytes": touched,
    })
    g = df.groupby(["iteration", "persistent", "block", "tick"], sort=True)
    out = g.agg(read=("read", "all"), touched_bytes=("touched_bytes", "max"))
    return out.reset_index()


def samples_from_touches(trace, addresses, pattern, clocks, touched_addrs, *, k0: int) -> pd.DataFrame:
    """Touch-form samples (module doc) from observed touches of a live run.

    ``trace``/``addresses``: ``trace_from_events(events, return_addresses=True)`` of the
    drained allocator events, ``k0`` the ring tick of their first event (trace tick = ring
    tick - k0); ``pattern``: its ``pattern.analyze``. ``clocks``/``touched_addrs``: one
    entry per observed touch, the allocator-event clock (``native.event_clock()``) read
    right after the op and the base address of the block it touched (a tensor's storage
    ``data_ptr``). An op's kernel runs after the allocator event before the clock reading
    (its own output's allocation, if any), so its trace tick is ``clock - 1 - k0``.
    Touches of addresses that were no live block then, or outside the representative
    iteration, are dropped. O((B + S) log B) for B blocks and S touches.
    """
    import pandas as pd

    clocks = np.asarray(clocks, np.int64)
    taddr = np.asarray(touched_addrs, np.uint64)
    empty = pd.DataFrame({c: pd.Series(dtype=t) for c, t in
                          (("iteration", "int64"), ("block", "int64"), ("persistent", bool),
                           ("tick", "int64"))})
    bt = trace.block_table()
    if not len(clocks) or not len(bt):
        return empty
    blk = bt.index.to_numpy(np.int64)
    baddr = np.asarray(addresses, np.uint64)[blk]
    a_tick = bt["alloc_tick"].to_numpy(np.int64)
    f_tick = bt["free_tick"].to_numpy(np.int64)
    tick = clocks - 1 - int(k0)
    # blocks grouped by address, in allocation order within a group: a touch belongs to the
    # last block at its address allocated at or before its tick, if not freed before it
    ua, bg = np.unique(baddr, return_inverse=True)
    span = int(max(a_tick.max(initial=0), tick.max(initial=0))) + 2
    bkey = bg.astype(np.int64) * span + a_tick
    order = np.argsort(bkey, kind="stable")
    bkey = bkey[order]
    tg = np.searchsorted(ua, taddr)
    ok = (tg < len(ua)) & (tick >= 0)
    ok[ok] &= ua[tg[ok]] == taddr[ok]
    j = np.full(len(tick), -1, np.int64)
    j[ok] = np.searchsorted(bkey, tg[ok].astype(np.int64) * span + tick[ok], side="right") - 1
    ok &= j >= 0
    jj = order[np.maximum(j, 0)]
    ok &= bg[jj] == tg.clip(0, len(ua) - 1)
    ok &= (f_tick[jj] < 0) | (tick <= f_tick[jj])
    start, stop = int(pattern.start_tick), int(pattern.stop_tick)
    ok &= (tick >= start) & (tick < stop)
    hit = blk[jj[ok]]
    known = np.isin(hit, pattern.blocks.index.to_numpy())
    if not known.any():
        return empty
    b = pattern.blocks.loc[hit[known]]
    return pd.DataFrame({
        "iteration": 0,
        "block": b["ordinal"].to_numpy(np.int64),
        "persistent": b["persistent"].to_numpy(bool),
        "tick": tick[ok][known] - start,
    }).drop_duplicates(ignore_index=True)


def assumed_ticks(samples) -> dict:
    """(persistent, ordinal) -> the sorted ticks at which a touch-form frame's rows are all
    ``assumed`` (a fault-sampled block's unknown tail, ``planner._faults.busy_tails``):
    uses the planner plans for but does not count as certain. Empty where the frame has no
    ``assumed`` column (or is None)."""
    import pandas as pd

    if samples is None:
        return {}
    df = pd.DataFrame(samples)
    if "assumed" not in df.columns or "tick" not in df.columns:
        return {}
    pers = df["persistent"].to_numpy(bool) if "persistent" in df.columns \
        else np.zeros(len(df), bool)
    key = pd.DataFrame({"p": pers, "b": df["block"].to_numpy(np.int64),
                        "t": df["tick"].to_numpy(np.int64),
                        "a": df["assumed"].to_numpy(bool)})
    only = key.groupby(["p", "b", "t"], sort=True)["a"].all()
    only = only[only]
    out: dict = {}
    for (p_, b, t) in only.index:
        out.setdefault((bool(p_), int(b)), []).append(int(t))
    return {k: np.asarray(v, np.int64) for k, v in out.items()}


def merge_samples(samples) -> dict:
    """(persistent, ordinal) -> (first_touch, last_touch, read_only, touched_bytes or -1,
    touch ticks: a sorted int64 array, or None for summary-form samples), merged over
    iterations. Raises ``ValueError`` naming a missing column or a bad row."""
    import pandas as pd

    df = pd.DataFrame(samples)
    touch_form = "tick" in df.columns
    need = ("block", "tick") if touch_form else ("block", "first_touch", "last_touch")
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise ValueError(
            f"access samples lack column(s) {missing}; expected either one row per touch "
            f"({', '.join(TOUCH_COLUMNS)}; + optional iteration, read, touched_bytes) or one "
            f"row per block ({', '.join(SAMPLE_COLUMNS)}; + optional iteration, read_only, "
            "touched_bytes)"
        )
    df = df.copy()
    if "persistent" not in df.columns:
        df["persistent"] = False
    if "touched_bytes" not in df.columns:
        df["touched_bytes"] = -1
    if touch_form:
        if "read" not in df.columns:
            df["read"] = False
        bad = df["tick"] < 0
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise ValueError(f"access sample row {i}: tick {int(df['tick'].iloc[i])} is "
                             "negative; ticks count from the iteration's start")
        df = df.sort_values(["persistent", "block", "tick"], kind="stable")
        pers = df["persistent"].to_numpy(bool)
        blk = df["block"].to_numpy(np.int64)
        tick = df["tick"].to_numpy(np.int64)
        # one vectorised pass: group starts where (persistent, block) changes
        cut = np.flatnonzero((pers[1:] != pers[:-1]) | (blk[1:] != blk[:-1])) + 1
        starts = np.concatenate([[0], cut]) if len(df) else np.zeros(0, np.int64)
        ro = np.logical_and.reduceat(df["read"].to_numpy(bool), starts) if len(df) else starts
        tb = np.maximum.reduceat(df["touched_bytes"].to_numpy(np.int64), starts) \
            if len(df) else starts
        # sorted within each block: a tick equal to the one before it in its block repeats
        new = np.ones(len(tick), bool)
        new[1:] = tick[1:] != tick[:-1]
        new[starts] = True
        kept = np.cumsum(new)[np.append(starts[1:], len(tick)) - 1] if len(tick) else starts
        out = {}
        for k, ticks in enumerate(np.split(tick[new], kept[:-1])):
            s0 = int(starts[k])
            out[(bool(pers[s0]), int(blk[s0]))] = (int(ticks[0]), int(ticks[-1]), bool(ro[k]),
                                                   int(tb[k]), ticks)
        return out
    if "read_only" not in df.columns:
        df["read_only"] = False
    bad = df["last_touch"] < df["first_touch"]
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise ValueError(f"access sample row {i}: last_touch {int(df['last_touch'].iloc[i])} "
                         f"is before first_touch {int(df['first_touch'].iloc[i])}")
    g = df.groupby(["persistent", "block"], sort=False).agg(
        first=("first_touch", "min"), last=("last_touch", "max"),
        ro=("read_only", "all"), tb=("touched_bytes", "max"))
    return {(bool(p), int(b)): (int(r.first), int(r.last), bool(r.ro), int(r.tb), None)
            for (p, b), r in zip(g.index, g.itertuples(index=False))}
