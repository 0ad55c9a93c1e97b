"""Access samples for the ``sampled`` mode: first/last touch of each block per iteration.

On a GPU the samples come from an access-sampling source (CUPTI unified-memory fault
records over a short profiling window, or a dispatch-mode tracer in PyTorch); offline they
are drawn here from a trace's ground-truth ACCESS rows, with a sampling rate and tick noise,
so the planner's sensitivity to sparse and imprecise samples can be measured.

A sample frame is a pandas DataFrame, one row per (iteration, block) observed:

* ``block`` -- the block's plan ordinal (see ``Plan``), ``persistent`` (bool, default False);
* ``first_touch``, ``last_touch`` -- ticks relative to the iteration's start;
* optional ``iteration`` (several iterations are merged: earliest first, latest last touch),
  ``read_only`` (bool: every sampled touch was a read), ``touched_bytes`` (the most bytes a
  single touch covered; the block's size where unknown).
"""
from __future__ import annotations

import numpy as np

__all__ = ["SAMPLE_COLUMNS", "draw_samples", "merge_samples"]

SAMPLE_COLUMNS = ("block", "persistent", "first_touch", "last_touch")


def draw_samples(trace, pattern, *, sample_rate: float = 1.0, noise: float = 0.0,
                 seed: int = 0):
    """Samples of the representative iteration drawn from ``trace``'s ACCESS rows.

    ``sample_rate`` (0..1]: probability that one access is observed. ``noise``: standard
    deviation, in ticks, of a Gaussian error added to each observed tick (rounded, clipped
    to the block's lifetime within the iteration). Returns a sample frame (module doc).
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
    g = df.groupby(["iteration", "persistent", "block"], sort=True)
    out = g.agg(first_touch=("tick", "min"), last_touch=("tick", "max"),
                read_only=("read", "all"), touched_bytes=("touched_bytes", "max"))
    return out.reset_index()


def merge_samples(samples) -> dict:
    """(persistent, ordinal) -> (first_touch, last_touch, read_only, touched_bytes or -1),
    merged over iterations. Raises ``ValueError`` naming a missing column."""
    import pandas as pd

    df = pd.DataFrame(samples)
    missing = [c for c in ("block", "first_touch", "last_touch") if c not in df.columns]
    if missing:
        raise ValueError(
            f"access samples lack column(s) {missing}; expected {', '.join(SAMPLE_COLUMNS)} "
            "(+ optional iteration, read_only, touched_bytes)"
        )
    df = df.copy()
    if "persistent" not in df.columns:
        df["persistent"] = False
    if "read_only" not in df.columns:
        df["read_only"] = False
    if "touched_bytes" not in df.columns:
        df["touched_bytes"] = -1
    bad = df["last_touch"] < df["first_touch"]
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise ValueError(f"access sample row {i}: last_touch {int(df['last_touch'].iloc[i])} "
                         f"is before first_touch {int(df['first_touch'].iloc[i])}")
    g = df.groupby(["persistent", "block"], sort=False).agg(
        first=("first_touch", "min"), last=("last_touch", "max"),
        ro=("read_only", "all"), tb=("touched_bytes", "max"))
    return {(bool(p), int(b)): (int(r.first), int(r.last), bool(r.ro), int(r.tb))
            for (p, b), r in zip(g.index, g.itertuples(index=False))}
