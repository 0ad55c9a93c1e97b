"""Compile the planner's and the simulator's kernels ahead of need.

The rule: one plan and one simulation per planning mode of a small generated trace (no
torch, no GPU) run every numba kernel a Scheduler's first plan runs, so numba's cache
(``cache=True``: ``__pycache__`` beside the sources, or ``$NUMBA_CACHE_DIR``) holds them
afterwards.  Why: with a cold cache the first plan waits for the compiler (about two minutes
on two busy cores); on a fresh GPU machine no plan armed within 300 ResNet-50 steps
(``benchmarks/results/gpu_h200.md``).  Without numba the planner and simulator run their
plain-Python references and there is nothing to compile.
"""
from __future__ import annotations

import importlib.util
import time
from typing import Any

__all__ = ["compile_kernels", "PYTHON_KERNELS_ENV"]

#: the switches that make the planner and the simulator run their plain-Python references
PYTHON_KERNELS_ENV = {"UVM_SCHED_PLANNER_KERNEL": "python", "UVM_SCHED_SIM_KERNEL": "python"}


def compile_kernels() -> dict[str, Any]:
    """Plan and simulate a small generated trace in each planning mode; returns
    ``{"seconds": wall seconds, "numba": whether numba is installed}`` (seconds: the
    compile cost when the cache was cold, a few seconds when it was warm)."""
    from .pattern._synth import training_trace
    from .sim import simulate

    t0 = time.perf_counter()
    trace = training_trace(layers=5, iters=3, batch=512, markers=True)
    for mode in ("oblivious", "sampled"):
        simulate(trace, "uvm-sched", "h200-pcie5", "50%", mode=mode)
    return {"seconds": time.perf_counter() - t0,
            "numba": importlib.util.find_spec("numba") is not None}
