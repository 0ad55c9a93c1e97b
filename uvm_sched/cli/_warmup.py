"""``uvm-sched warmup``: compile the planner's and the simulator's kernels into numba's
cache, once after installing, so that a Scheduler's first plan does not wait for the
compiler (``uvm_sched._warmup``: what runs and why).  Prints the seconds it took: the
compile cost on a cold cache, a few seconds on a warm one."""
from __future__ import annotations

import argparse

from ._output import EXIT_OK, Out, part

EXAMPLES = "  uvm-sched warmup          # once, after pip install\n"


def add_arguments(p: argparse.ArgumentParser) -> None:
    del p  # no flags of its own beyond the shared output ones


def run(args: argparse.Namespace, out: Out) -> int:
    compile_kernels = part("uvm_sched._warmup", "compile_kernels", "the kernel warm-up")
    doc = compile_kernels()
    if out.json:
        out.emit_json(doc)
        return EXIT_OK
    what = ("the planner's and the simulator's kernels are in numba's cache"
            if doc["numba"] else "numba is not installed: nothing to compile (plain Python)")
    out.stdout.print(f"{what} ({doc['seconds']:.1f} s)", markup=False)
    return EXIT_OK
