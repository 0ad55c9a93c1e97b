"""The LP bound within a time budget instead of a fixed column cap (``_lp``).

Note [Refining within a time budget]
------------------------------------
Rationale. ``max_columns`` is a proxy for solve time, and a poor one: HiGHS solves some
100,000-column programs of the zoo in one second and others in twenty
(``benchmarks/results/lp.md``, column "LP s"). Where the first solve was quick, a finer
partition fits the same time.

Approach. Solve at ``start_columns``; while the program was coarsened (more than one tick
in some slot) and the next solve is predicted to fit what is left of ``seconds``, raise the
cap by ``growth`` and solve again (the same program again where no finer level fits the
larger cap yet), each solve limited by HiGHS to the time left. The
prediction is the last build and solve time times ``growth ** 1.5`` (the simplex's time
grew about that fast with the columns on the zoo: unet 54k -> 77k columns, 1.1 -> 2.6 s).

Why the result is a lower bound. Every program solved to its optimum is a relaxation of the
exact one (Note [The LP bound], Note [Slot partitions]), so each optimum is a lower bound,
and so is the largest of them, which is what is returned: a finer partition that does not
refine the previous one may give less, and then the earlier optimum stands. A solve stopped
by the time limit proves nothing and is dropped; the first one must finish
(``LpOverBudget`` otherwise, as from ``lp_bound``).
"""
from __future__ import annotations

import time

from ._lp import MAX_COLUMNS, LpOverBudget, LpResult, lp_bound
from ._prep import Prepared

GROWTH = 2.0  # the cap's factor per refinement


def lp_bound_within(prep: Prepared, hw, budget: int, seconds: float, *,
                    start_columns: int = MAX_COLUMNS, slots="weighted",
                    growth: float = GROWTH, lossless: bool = False) -> LpResult:
    """The largest LP bound (``lp_bound`` over ``slots``) found within about ``seconds``
    of wall time under ``budget`` bytes on ``hw``: solved at ``start_columns`` columns,
    then at ``growth`` times more while the next solve is predicted to fit (Note [Refining
    within a time budget]; ``lossless``: as ``lp_bound``). Raises what ``lp_bound`` raises
    on the first solve."""
    if seconds <= 0:
        raise ValueError(f"the LP bound's time budget must be positive; got {seconds} s")
    t0 = time.perf_counter()
    cols = int(start_columns)
    best = last = lp_bound(prep, hw, budget, max_columns=cols, slots=slots,
                           time_limit_s=seconds, lossless=lossless)
    while last.coarsen > 1:
        left = seconds - (time.perf_counter() - t0)
        if (last.build_s + last.solve_s) * growth ** 1.5 > left:
            break
        cols = int(cols * growth)
        try:
            r = lp_bound(prep, hw, budget, max_columns=cols, slots=slots, time_limit_s=left,
                         lossless=lossless)
        except LpOverBudget:
            break
        # the same program again where no finer level fits the larger cap yet (uniform
        # levels jump: k = 12 -> 6 may double the columns and more): the cap grows on
        last = r
        if r.time_s >= best.time_s:  # on a tie the finer program is reported
            best = r
    return best
