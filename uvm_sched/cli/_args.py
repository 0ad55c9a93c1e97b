"""Flags more than one command takes, the value types argparse checks them with, and the
parser class every command's parser is made of.

The rule: a flag that one command alone takes is declared in that command's module, beside
its ``run``; a flag shared by several (``--hw``, ``--mode``, ``--tune``, ``--force``, the
TRACE argument, the output options) is declared once here, so its name, default and help
read the same in every ``--help``. Values are checked by argparse (a usage error, exit 2,
before any file is read).
"""
from __future__ import annotations

import argparse
import math

from ._output import EXIT_USAGE

DEFAULT_HW = "h200-pcie5"
DEFAULT_BUDGET = "50%"

FORMATTER = argparse.RawDescriptionHelpFormatter


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``uvm-sched plan: error: ... (see --help)``, exit 2."""

    def error(self, message: str):  # noqa: D401 - argparse API
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def common() -> Parser:
    """Options every subcommand takes (also accepted before the subcommand name)."""
    p = Parser(add_help=False)
    g = p.add_argument_group("output")
    # SUPPRESS: a subcommand that does not see the flag must not overwrite the main parser's
    g.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                   help="print machine-readable JSON on stdout (nothing else goes there)")
    g.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                   help="no progress bars or notes")
    g.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show the full traceback on errors")
    return p


def trace_arg(p: argparse.ArgumentParser, *, several: str | None = None) -> None:
    """The TRACE argument and its --device, for every command that reads a trace;
    ``several``: the help of a TRACE argument that takes one or more files."""
    if several:
        p.add_argument("trace", metavar="TRACE", nargs="+", help=several)
    else:
        p.add_argument("trace", metavar="TRACE")
    p.add_argument("--device", metavar="DEV", default=None,
                   help="whose events to read: cpu, cuda or cuda:N (profiler traces, "
                        "Execution Traces; memory snapshots: cuda:N); default: the one "
                        "device with events")
    p.add_argument("--assume-tick-us", metavar="US", type=float, default=None,
                   help="device time to assume per tick where the trace has none (traces "
                        "without a clock); figures then rest on this assumption")


def hw_arg(p: argparse.ArgumentParser, default: str = DEFAULT_HW) -> None:
    p.add_argument("--hw", default=default, metavar="PROFILE",
                   help=f"hardware profile name or TOML path (default {default}); "
                        "shipped: h200-pcie5, h100-pcie5, a100-40gb-pcie4, gh200-c2c, "
                        "a100-40gb-g10")


def compute_times_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--compute-times", metavar="FILE", default=None,
                   help="measured compute times in place of the trace's own (its roofline): "
                        "a GPU profile with kernel times and ProfilerStep marks, a "
                        "Scheduler's saved trace (wall time between its markers), or JSON "
                        "seconds per iteration ([0.12, 0.11] or {\"iteration_s\": [...]}); "
                        "the median iteration is spread over the ticks in proportion to "
                        "their own times, and the output says so")


def plotly_arg(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--plotly", choices=("inline", "file", "cdn"), default=default,
                   help="how the page gets plotly.js: inline (in the page, one ~5 MB file), "
                        "file (plotly-VERSION.min.js written beside the page, loaded by a "
                        "relative path: small page, opens offline while the two stay "
                        "together) or cdn (linked from cdn.plot.ly: small, needs the network); "
                        f"default {default}")


def force_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true",
                   help="use a --plan made for another trace anyway (a warning, not an error)")


def mode_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mode", choices=("auto", "oblivious", "sampled"), default="auto",
                   help="planner mode: oblivious reads only allocator events; sampled also uses "
                        "access samples (drawn from the trace's accesses); auto (default): "
                        "sampled when the trace carries accesses, else oblivious")


def tune_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tune", type=tune_list, metavar="CANDIDATES",
                   help="uvm-sched: also plan with these guards (ticks or auto) or, in sampled "
                        "or auto mode, oblivious (the plan without the samples); simulate each "
                        "and keep the fastest, as Scheduler(tune=...) does by the clock (e.g. "
                        "16,8)")


# ----------------------------------------------------------------------------------------
# value types
def positive_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}")
    return v


def tune_list(s: str) -> tuple:
    """'16,8,oblivious' -> (16, 8, 'oblivious')."""
    out: list[int | str] = []
    for x in (y.strip() for y in s.split(",")):
        if x.isdigit():
            out.append(int(x))
        elif x in ("auto", "oblivious"):
            out.append(x)
        else:
            raise argparse.ArgumentTypeError(
                f"tuning candidates are guards (ticks, or auto) or oblivious, got {x!r}")
    return tuple(out)


def fraction(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {s!r}") from None
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {s!r}")
    return v


def nonnegative(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {s!r}") from None
    if not (v >= 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {s!r}")
    return v
