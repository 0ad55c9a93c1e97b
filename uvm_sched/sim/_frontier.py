"""The savings/slowdown frontier of a ``compare`` frame: one definition, for every reader.

The rule: a budget's *saving* is the share of the trace's peak it does not hold on the
device (``1 - budget_pct / 100``), and a (saving, slowdown) point of one policy is on the
frontier when no other budget of the same policy saves at least as much and runs faster.
Walking a policy's points from the largest saving down (ties: the faster first), a point is
kept only if it is strictly faster than every point already walked.

Why here: the frontier is a result about simulated runs, not a way of showing them. The
command line prints it (``uvm-sched compare``) and ``uvm_sched.viz.frontier`` draws it; both
read this function, so the table and the figure cannot disagree about which points are on it.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

__all__ = ["savings_frontier"]

_NEEDED = ("policy", "budget_pct", "slowdown")


def savings_frontier(compare: pd.DataFrame) -> pd.DataFrame:
    """A copy of a ``uvm_sched.sim.compare`` frame with two columns added: ``saving`` (the
    fraction of the trace's peak bytes the budget does not hold: ``1 - budget_pct / 100``)
    and ``frontier`` (True for a point no other budget of the same policy beats: it saves
    at least as much and is faster). Rows keep the frame's order; a row without a finite
    slowdown (an infeasible budget) is never on the frontier. Raises ValueError naming the
    missing columns when the frame lacks ``policy``, ``budget_pct`` or ``slowdown``."""
    missing = [c for c in _NEEDED if c not in compare.columns]
    if missing:
        raise ValueError(
            f"frontier needs a frame from uvm_sched.sim.compare with columns "
            f"{sorted(_NEEDED)}; this one lacks {sorted(missing)}")
    df = compare.copy()
    df["saving"] = 1.0 - df["budget_pct"].astype(float) / 100.0
    on = np.zeros(len(df), dtype=bool)
    slow = df["slowdown"].to_numpy(dtype=float)
    saving = df["saving"].to_numpy(dtype=float)
    for idx in df.groupby("policy", sort=False).indices.values():
        best = math.inf
        # largest saving first; among equal savings the faster point speaks for them
        for i in sorted((i for i in idx if math.isfinite(slow[i])),
                        key=lambda i: (-saving[i], slow[i])):
            if slow[i] < best:
                on[i] = True
                best = slow[i]
    df["frontier"] = on
    return df
