"""Reading and checking what the user gave: trace and plan files, hardware profiles,
budgets, zoo sizes, tuning candidates.

The rule: input is checked before slow work. A command reads its files and checks every
option here first (a missing file, a bad budget, an unknown profile, a plan made for another
trace), so a mistake costs the user a second, not the minutes of a recording or a simulation.
Any failure to read an input is a ``UsageError`` naming the file (exit 2); the one exception
is running out of memory or an interrupt, which are not the input's fault.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from .._fmt import fmt_bytes, fmt_count, fmt_seconds
from ._output import PROG, UsageError, one_line, part


def require_input(path: str, what: str = "trace") -> Path:
    """``path`` exists and is readable (checked first, before any slow import or work)."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{path}: no such {what} file" + (" or folder" if what == "trace" else ""))
    if not os.access(p, os.R_OK):
        raise UsageError(f"{path}: {what} is not readable (permission denied)")
    if p.is_dir() and what != "trace":
        raise UsageError(f"{path}: is a folder, not a {what} file")
    return p


def read_input(path: str, what: str, reader):
    """``reader(path)`` for an input file; any failure to parse it is bad input (a
    UsageError naming the file), except running out of memory or an interrupt."""
    p = require_input(path, what)
    try:
        return reader(p)
    except (MemoryError, KeyboardInterrupt):
        raise
    except Exception as e:  # noqa: BLE001 - a file that does not parse is bad input
        msg = str(e).strip() or type(e).__name__
        if str(p) not in msg:
            msg = f"{path}: {msg}"
        raise UsageError(f"cannot read {what}: {msg}") from e


def load_trace(path: str, device: str | None = None, assume_tick_us: float | None = None,
               compute_times: str | None = None):
    """The trace at ``path`` (any format ``uvm_sched.trace.load`` reads, file or folder);
    ``device`` ("cpu", "cuda", "cuda:N"): whose events to read, for formats with several;
    ``assume_tick_us``: device time assumed for ticks the trace has no time for;
    ``compute_times``: the file of measured compute times (``--compute-times``)."""
    load = part("uvm_sched.trace", "load", "trace loading")
    if device is None:
        trace = read_input(path, "trace", load)
    else:
        trace = read_input(path, "trace", lambda p: load(p, device=device))
    if assume_tick_us is not None:
        if not assume_tick_us > 0:
            raise UsageError(f"--assume-tick-us must be > 0, got {assume_tick_us}")
        trace = trace.assume_tick_ns(assume_tick_us * 1e3)
    if compute_times is not None:
        trace = trace.with_compute_times(measured_times(compute_times, load))
    return trace


# a JSON list of seconds is small; a larger file is a trace (a profiler JSON), read as one
_SECONDS_FILE_MAX = 1 << 20


def measured_times(path: str, load):
    """``--compute-times FILE``: JSON seconds per iteration (a list, or an object with an
    ``iteration_s`` list), else a trace ``load`` reads (a GPU profile, a saved Scheduler
    trace)."""
    p = Path(path)
    if p.is_file() and p.stat().st_size <= _SECONDS_FILE_MAX:
        try:
            doc = json.loads(p.read_bytes())
        except (ValueError, UnicodeDecodeError):
            doc = None  # not JSON: a trace file
        secs = doc.get("iteration_s") if isinstance(doc, dict) else doc
        if isinstance(secs, list) and secs and all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in secs):
            return [float(x) for x in secs]
    return read_input(path, "compute-times trace", load)


def load_plan(path: str):
    Plan = part("uvm_sched.planner", "Plan", "plans")
    return read_input(path, "plan", Plan.load)


def check_plan_fits(plan, trace, force: bool) -> None:
    """A plan made for another trace is an error (its blocks are not this trace's), or with
    --force a warning on stderr."""
    try:
        plan.check_trace(trace)
    except ValueError as e:  # PlanError
        if not force:
            raise UsageError(str(e)) from None
        msg = one_line(e).split(" Plan for this trace")[0]
        sys.stderr.write(f"{PROG}: warning: {msg} (--force: using it anyway)\n")


def profile(name: str):
    from ..hw import ProfileError, load_profile

    try:
        return load_profile(name)
    except ProfileError as e:
        raise UsageError(str(e)) from None


# ----------------------------------------------------------------------------------------
# budgets and tuning
def budget_bytes(spec: str | None, peak_bytes: int, hw) -> int:
    """A budget string read with ``resolve_budget`` (None = the device's capacity)."""
    from .._budget import resolve_budget

    try:
        return resolve_budget(spec, peak_bytes, default_bytes=hw.device_capacity_bytes)
    except (ValueError, TypeError) as e:
        raise UsageError(f"bad --budget {spec!r}: {e}") from None


def budget_list(spec: str) -> list[str]:
    items = [s.strip() for s in spec.split(",") if s.strip()]
    if not items:
        raise UsageError(f"bad --budget {spec!r}: give one or more budgets, e.g. 75%,50%,30%")
    return items


def check_budget_syntax(specs: Sequence[str]) -> None:
    """Reject an unreadable budget before any long work (peak 1 GiB as a stand-in)."""
    from .._budget import resolve_budget

    for s in specs:
        try:
            resolve_budget(s, 2**30)
        except (ValueError, TypeError) as e:
            raise UsageError(f"bad --budget {s!r}: {e}") from None


def planner_mode(trace, mode: str) -> tuple[str, str]:
    """The mode the planner runs for ``--mode`` on ``trace`` and why (``planner.resolve_mode``),
    said before any simulation."""
    resolve = part("uvm_sched.planner", "resolve_mode", "the planner")
    return resolve(trace, mode)


def check_tune(tune, mode: str) -> tuple:
    """The --tune candidates, checked against the planner mode before any simulation."""
    if not tune:
        return ()
    check = part("uvm_sched.planner", "tuning_candidates", "the planner")
    try:
        check(tune, mode, {})
    except ValueError as e:
        raise UsageError(str(e)) from None
    return tune


# ----------------------------------------------------------------------------------------
# the model zoo's sizes
def zoo_sizes(model: str, batch, seq, image) -> dict[str, int]:
    """The size options given for a zoo model, checked by the zoo (a text model takes seq,
    a vision model image) before any recording starts."""
    opts = {k: v for k, v in (("batch", batch), ("seq", seq), ("image", image)) if v is not None}
    build = part("uvm_sched.trace.zoo", "build", "the model zoo")
    try:
        build(model, **opts)
    except (ValueError, TypeError) as e:
        msg = str(e)
        raise UsageError(msg if model in msg else f"{model}: {msg}") from None
    return opts


def sizes_of(d: dict) -> dict[str, int]:
    """The zoo sizes named in ``d`` (a zoo.info dict or a recorded trace's meta)."""
    return {k: int(d[k]) for k in ("batch", "seq", "image") if d.get(k) is not None}


def sizes_text(sizes: dict[str, int]) -> str:
    """'batch 8, 1,024 tokens' / 'batch 64, 224 px images'."""
    parts = [f"batch {sizes['batch']:,}"] if "batch" in sizes else []
    if "seq" in sizes:
        parts.append(f"{sizes['seq']:,} tokens")
    if "image" in sizes:
        parts.append(f"{sizes['image']:,} px images")
    return ", ".join(parts)


# ----------------------------------------------------------------------------------------
# what a trace holds
def trace_info(trace) -> dict[str, Any]:
    """Trace facts for humans and --json: counts in events/ticks, bytes, ns."""
    import numpy as np

    from ..trace._model import EventKind

    kind = trace.kind
    known = np.isfinite(trace.tick_ns)
    return {
        "name": trace.meta.get("name") or trace.meta.get("model") or trace.meta.get("source"),
        "source": trace.meta.get("source"),
        "events": int(len(trace)),
        "ticks": int(trace.n_ticks),
        "blocks": int(np.count_nonzero(kind == EventKind.ALLOC)),
        "accesses": int(np.count_nonzero(kind == EventKind.ACCESS)),
        "iteration_marks": int(len(trace.iteration_starts)),
        "peak_bytes": int(trace.peak_bytes),
        "device_time_ns": float(np.sum(trace.tick_ns[known])) if known.any() else None,
        "time_source": trace.time_source,
        "meta": {k: v for k, v in trace.meta.items()
                 if k not in ("alloc_sizes", "tick_ops", "block_names")},
    }


def trace_line(info: dict[str, Any]) -> str:
    t = info.get("device_time_ns")
    return (f"{info['name'] or 'trace'}: {fmt_count(info['events'])} events, "
            f"{fmt_count(info['ticks'])} ticks, {fmt_count(info['blocks'])} allocations "
            f"(blocks, all iterations), "
            f"{info['iteration_marks']} iteration marks, peak {fmt_bytes(info['peak_bytes'])}"
            + (f", device time {fmt_seconds(t / 1e9)}" if t else
               ", time unavailable (no clock)" if info["meta"].get("clock") == "none" else "")
            + (f" ({info['meta']['clock']})"
               if str(info["meta"].get("clock", "")).startswith("assumed") else
               f" ({info['time_source']})" if t and info.get("time_source") else ""))
