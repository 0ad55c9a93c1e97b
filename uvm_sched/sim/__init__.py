"""A discrete-event model of CUDA Unified Memory under a memory budget, to judge prefetch
plans (and the baselines) without a GPU.

``simulate(trace, policy, hw, budget) -> SimResult``; ``compare(trace, hw, budgets,
policies) -> DataFrame``; ``savings_frontier(compare_frame)`` (which budgets of a policy no
other beats: the one definition the CLI prints and ``viz.frontier`` draws); ``POLICIES``;
``BudgetError``; ``side_by_side`` and ``TWINS`` (``_twins``: the GPU kit's microbenchmarks
rebuilt as tiny traces, measured beside simulated). The model: ``_engine`` (driver
residency, faults, eviction, copy engines, pool reuse), ``_mechanisms`` (the driver's rules
the engines share, each with its source: advice, access counters, host calls, the duplex
cap; what is left out and why), ``_prep`` (layout of blocks in
2 MiB VA blocks, accesses), ``_policies`` (baselines and the Plan executor), ``_bound``
(the fast lower bound and its argument), ``_lp`` (the LP lower bound, ``"lp-bound"``),
``_fast`` (the event loop compiled: the same results as ``_engine``'s, several times
faster). Imports no torch/cupy; numba only in ``_fast_kernels``, optional (without it the
plain-Python loop runs).
"""
from ._api import LP_BOUND, POLICIES, compare, simulate
from ._frontier import savings_frontier
from ._result import BudgetError, SimResult
from ._twins import TWINS, side_by_side

__all__ = ["simulate", "compare", "savings_frontier", "SimResult", "BudgetError", "POLICIES",
           "LP_BOUND", "TWINS", "side_by_side"]
