"""The ``uvm-sched`` command: record, analyse, plan, simulate, compare, report and export
memory traces, and a ``demo`` that does the whole job on a small built-in model.

Exit codes: 0 success; 2 usage errors and bad input (unreadable or corrupt file, bad budget,
unknown model or hardware profile); 1 anything unexpected (``--debug`` shows the traceback).
Results go to stdout (rich tables, or JSON with ``--json``); progress bars and notes about
files written go to stderr, so ``--json`` output can be piped as is.

Every file is written whole or not at all (``uvm_sched._files``: beside, fsync, rename): on
a full disk or in a read-only folder the command exits 2 and an existing file keeps its
contents. An output that names one of the command's inputs is refused before any work. A
``--plan`` made for another trace is an error (``--force``: a warning).

Layout (pip's ``commands/``), and why: one private module per command (``_record``,
``_plan``, ...) holds that command's flags (``add_arguments``) beside the ``run`` that reads
them, so a flag and its use are read together; ``COMMANDS`` below names each command's module
and summary, the one list ``--help`` and the parser are built from; ``_output`` is the one
place for output, written files and exit codes; ``_inputs`` reads and checks input before slow
work; ``_args`` holds the flags several commands share; ``_results`` lays simulation results
out. Commands print what the package computes (``uvm_sched.sim``, ``uvm_sched.viz``): no
domain result is defined here.
"""
from __future__ import annotations

import argparse
import importlib
from typing import NamedTuple, Sequence

from ._args import FORMATTER, Parser, common
from ._output import PROG, exit_code
# the CLI's two error types, under the names callers and tests have always used
from ._output import PartMissing, UsageError  # noqa: F401

__all__ = ["main", "build_parser", "COMMANDS", "CommandInfo"]


class CommandInfo(NamedTuple):
    """Where a command lives: its module (with ``EXAMPLES``, ``add_arguments(parser)`` and
    ``run(args, out) -> exit code``) and the one-line summary ``--help`` shows."""

    module: str
    summary: str


# in the order `uvm-sched --help` lists them
COMMANDS: dict[str, CommandInfo] = {
    "demo": CommandInfo(
        "uvm_sched.cli._demo",
        "record a small model, plan for half its peak, simulate every policy, write a report"),
    "record": CommandInfo(
        "uvm_sched.cli._record",
        "record a training script as it runs, or a zoo model's training iterations on meta "
        "tensors"),
    "analyze": CommandInfo(
        "uvm_sched.cli._analyze", "characterise a trace: period, block classes, lifetimes"),
    "plan": CommandInfo(
        "uvm_sched.cli._plan", "plan prefetches and evictions for a memory budget"),
    "simulate": CommandInfo(
        "uvm_sched.cli._simulate",
        "simulate one policy (or a saved plan) against the ideal run"),
    "compare": CommandInfo(
        "uvm_sched.cli._compare", "every policy side by side at one or more budgets"),
    "report": CommandInfo(
        "uvm_sched.cli._report", "write an interactive HTML timeline of a trace and its plan"),
    "export": CommandInfo("uvm_sched.cli._export", "convert a trace for other viewers"),
    "sidebyside": CommandInfo(
        "uvm_sched.cli._sidebyside",
        "the GPU kit's microbenchmarks beside their simulator twins (measured | simulated)"),
    "warmup": CommandInfo(
        "uvm_sched.cli._warmup",
        "compile the planner's and simulator's kernels into numba's cache (once, after "
        "installing)"),
}

MAIN_EPILOG = """\
examples:
  uvm-sched demo                                   # the whole job on a small built-in model
  uvm-sched record gpt2_small --batch 8 -o gpt2.parquet
  uvm-sched analyze gpt2.parquet
  uvm-sched plan gpt2.parquet --budget 50% -o plan.json
  uvm-sched simulate gpt2.parquet --policy demand --budget 50%
  uvm-sched compare gpt2.parquet --budget 75%,50%,30% --hw gh200-c2c
  uvm-sched report gpt2.parquet --plan plan.json -o report.html
  uvm-sched export snapshot.pickle --to perfetto -o trace.json
  uvm-sched sidebyside --measured calibration.json   # the simulator against a GPU
  uvm-sched warmup                                 # once after installing: compile kernels

TRACE is any file or folder uvm_sched.trace.load reads: a uvm_sched Parquet trace, a
torch.cuda.memory._dump_snapshot pickle, a Kineto/profiler JSON, a G10-style kernels folder.
Budgets: bytes (40GiB, 40GB, 123456) or a share of the trace's peak (50%).
Exit codes: 0 ok, 2 usage or bad input, 1 unexpected failure (--debug shows the traceback).
"""


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``uvm-sched`` (exposed for docs and tests): one subparser per
    entry of ``COMMANDS``, its flags added by its module, ``func`` its module's ``run``."""
    from .. import __version__

    shared = common()
    parser = Parser(prog=PROG, formatter_class=FORMATTER, epilog=MAIN_EPILOG,
                    description="Plan prefetch/evict schedules for CUDA Unified Memory from "
                                "allocator traces,\nand judge them in a simulator against the "
                                "usual policies.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--json", action="store_true", default=False, help=argparse.SUPPRESS)
    parser.add_argument("-q", "--quiet", action="store_true", default=False, help=argparse.SUPPRESS)
    parser.add_argument("--debug", action="store_true", default=False, help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for name, info in COMMANDS.items():
        mod = importlib.import_module(info.module)
        summary = info.summary
        p = sub.add_parser(name, help=summary, description=summary[0].upper() + summary[1:] + ".",
                           parents=[shared], formatter_class=FORMATTER,
                           epilog="examples:\n" + mod.EXAMPLES)
        mod.add_arguments(p)
        p.set_defaults(func=mod.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``uvm-sched``; returns the exit code (0 ok, 2 usage/input, 1 failure)."""
    args = build_parser().parse_args(argv)
    return exit_code(args)

