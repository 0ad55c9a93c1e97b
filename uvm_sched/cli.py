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
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
import time
import traceback
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

from ._errors import Error
from ._fmt import fmt_bytes, fmt_count, fmt_pct, fmt_ratio, fmt_seconds

__all__ = ["main", "build_parser"]

PROG = "uvm-sched"
DEFAULT_HW = "h200-pcie5"
DEFAULT_BUDGET = "50%"
DEFAULT_COMPARE_BUDGETS = "75%,50%,30%"
DEMO_REPORT = "uvm_sched_demo.html"
# The demo's model, at the zoo's default (training) sizes like `record` and the benchmark
# tables, so its figure is the tables' row; --small is the smallest setting (used by tests).
DEMO_DEFAULT = {"model": "gpt2_small", "iters": 3}
DEMO_SMALL = {"model": "unet", "batch": 16, "image": 128, "iters": 3}

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


# ----------------------------------------------------------------------------------------
# errors
class UsageError(Error):
    """Bad input from the user (a file, a budget, a name): exit code 2, one line."""


class PartMissing(Error):
    """A part of uvm_sched this subcommand needs is not in this build (exit code 1)."""


def _part(module: str, attr: str, what: str) -> Any:
    """``module.attr``, or a PartMissing error saying which part of the package is absent."""
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        missing = e.name or ""
        if missing == module or module.startswith(missing + ".") or missing.startswith(module):
            raise PartMissing(f"{what} ({module}) is not available in this build of uvm_sched") from None
        raise PartMissing(
            f"{what} needs the Python package {missing!r}, which is not installed "
            f"(pip install {missing})"
        ) from None
    obj = getattr(mod, attr, None)
    if obj is None:
        raise PartMissing(f"{what} ({module}.{attr}) is not available in this build of uvm_sched")
    return obj


def _input_error_types() -> tuple[type, ...]:
    """Exception types that mean "the input is bad" (exit 2). Only classes from modules that
    are already imported are looked up, so an error path never imports a missing part."""
    types: list[type] = [UsageError, FileNotFoundError, IsADirectoryError, NotADirectoryError,
                         PermissionError]
    for mod, name in (("uvm_sched.trace._model", "TraceError"),
                      ("uvm_sched.planner._plan", "PlanError"),
                      ("uvm_sched.pattern", "PatternError"),
                      ("uvm_sched.hw", "ProfileError"),
                      ("uvm_sched.sim", "BudgetError")):
        m = sys.modules.get(mod)
        t = getattr(m, name, None) if m is not None else None
        if isinstance(t, type):
            types.append(t)
    return tuple(types)


# ----------------------------------------------------------------------------------------
# output
class _Out:
    """Where results, notes and progress go, decided once from the options."""

    def __init__(self, args: argparse.Namespace) -> None:
        from rich.console import Console

        self.json = bool(getattr(args, "json", False))
        self.quiet = bool(getattr(args, "quiet", False))
        # Off a terminal rich would wrap tables at 80 columns; a wider fixed width keeps each
        # row on one line in logs and pipes.
        width = None if sys.stdout.isatty() else 160
        self.stdout = Console(file=sys.stdout, width=width, highlight=False, soft_wrap=False)
        self.stderr = Console(file=sys.stderr, stderr=True, highlight=False)
        self.progress_on = (not self.quiet) and sys.stderr.isatty()

    def note(self, text: str) -> None:
        """A line for humans (files written, hints): stdout, or stderr under --json."""
        if self.quiet:
            return
        (self.stderr if self.json else self.stdout).print(text, markup=False)

    def emit_json(self, obj: Any) -> None:
        sys.stdout.write(json.dumps(obj, indent=2, default=_json_default, allow_nan=False) + "\n")
        sys.stdout.flush()

    @contextmanager
    def progress(self, total: int | None = None, description: str = "") -> Iterator["_Steps"]:
        """A rich progress bar on stderr (shown only on a terminal and without --quiet)."""
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn,
                                   TextColumn, TimeElapsedColumn)

        prog = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                        MofNCompleteColumn(), TimeElapsedColumn(), console=self.stderr,
                        transient=True, disable=not self.progress_on)
        with prog:
            task = prog.add_task(description, total=total)
            yield _Steps(prog, task)


class _Steps:
    def __init__(self, prog, task) -> None:
        self._prog, self._task = prog, task

    def step(self, description: str) -> None:
        """Say what is being done now (the bar keeps its count)."""
        self._prog.update(self._task, description=description)

    def advance(self, n: int = 1) -> None:
        self._prog.advance(self._task, n)


def _json_default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return None if not math.isfinite(float(o)) else float(o)
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")


def _clean(o: Any) -> Any:
    """NaN/inf -> None, recursively (JSON has no NaN; strict parsers reject it)."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    try:
        import numpy as np

        if isinstance(o, np.floating):
            return _clean(float(o))
        if isinstance(o, np.integer):
            return int(o)
        if isinstance(o, np.ndarray):
            return _clean(o.tolist())
    except ImportError:  # pragma: no cover
        pass
    return o


def _table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]],
           *, right: Sequence[int] = ()):
    from rich.table import Table

    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for i, c in enumerate(columns):
        # on a narrow terminal, headers and figures fold onto a second line rather than being
        # cut off with an ellipsis
        t.add_column(c, justify="right" if i in right else "left", no_wrap=(i == 0),
                     overflow="fold")
    for r in rows:
        t.add_row(*[str(x) for x in r])
    return t


# ----------------------------------------------------------------------------------------
# shared input handling
def _require_input(path: str, what: str = "trace") -> Path:
    """``path`` exists and is readable (checked first, before any slow import or work)."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{path}: no such {what} file" + (" or folder" if what == "trace" else ""))
    if not os.access(p, os.R_OK):
        raise UsageError(f"{path}: {what} is not readable (permission denied)")
    if p.is_dir() and what != "trace":
        raise UsageError(f"{path}: is a folder, not a {what} file")
    return p


def _load_trace(path: str, device: str | None = None, assume_tick_us: float | None = None):
    """The trace at ``path`` (any format ``uvm_sched.trace.load`` reads, file or folder);
    ``device`` ("cpu", "cuda", "cuda:N"): whose events to read, for formats with several;
    ``assume_tick_us``: device time assumed for ticks the trace has no time for."""
    load = _part("uvm_sched.trace", "load", "trace loading")
    if device is None:
        trace = _read_input(path, "trace", load)
    else:
        trace = _read_input(path, "trace", lambda p: load(p, device=device))
    if assume_tick_us is not None:
        if not assume_tick_us > 0:
            raise UsageError(f"--assume-tick-us must be > 0, got {assume_tick_us}")
        trace = trace.assume_tick_ns(assume_tick_us * 1e3)
    return trace


def _trace_arg(p, *, several: str | None = None) -> None:
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


def _load_plan(path: str):
    Plan = _part("uvm_sched.planner", "Plan", "plans")
    return _read_input(path, "plan", Plan.load)


def _read_input(path: str, what: str, reader):
    """``reader(path)`` for an input file; any failure to parse it is bad input (a
    UsageError naming the file), except running out of memory or an interrupt."""
    p = _require_input(path, what)
    try:
        return reader(p)
    except (MemoryError, KeyboardInterrupt):
        raise
    except Exception as e:  # noqa: BLE001 - a file that does not parse is bad input
        msg = str(e).strip() or type(e).__name__
        if str(p) not in msg:
            msg = f"{path}: {msg}"
        raise UsageError(f"cannot read {what}: {msg}") from e


def _profile(name: str):
    from .hw import ProfileError, load_profile

    try:
        return load_profile(name)
    except ProfileError as e:
        raise UsageError(str(e)) from None


def _budget_bytes(spec: str | None, peak_bytes: int, hw) -> int:
    """A budget string read with ``resolve_budget`` (None = the device's capacity)."""
    from ._budget import resolve_budget

    try:
        return resolve_budget(spec, peak_bytes, default_bytes=hw.device_capacity_bytes)
    except (ValueError, TypeError) as e:
        raise UsageError(f"bad --budget {spec!r}: {e}") from None


def _budget_list(spec: str) -> list[str]:
    items = [s.strip() for s in spec.split(",") if s.strip()]
    if not items:
        raise UsageError(f"bad --budget {spec!r}: give one or more budgets, e.g. 75%,50%,30%")
    return items


def _check_budget_syntax(specs: Sequence[str]) -> None:
    """Reject an unreadable budget before any long work (peak 1 GiB as a stand-in)."""
    from ._budget import resolve_budget

    for s in specs:
        try:
            resolve_budget(s, 2**30)
        except (ValueError, TypeError) as e:
            raise UsageError(f"bad --budget {s!r}: {e}") from None


def _writable(path: str, *inputs: "str | None") -> Path:
    """``path`` as a Path whose folder exists and that names none of ``inputs`` (checked
    before long work, not after: writing a plan over its own trace would destroy it)."""
    from ._files import same_file

    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"cannot write {path}: folder {parent} does not exist")
    if p.is_dir():
        raise UsageError(f"cannot write {path}: it is a folder")
    for src in inputs:
        if src is not None and same_file(p, src):
            raise UsageError(f"cannot write {path}: it is the input {src}; writing there would "
                             "replace the input. Give another output file (-o)")
    if p.exists() and not p.is_file():
        raise UsageError(f"cannot write {path}: not a regular file (a device or FIFO?)")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write {path}: folder {parent} is not writable")
    return p


@contextmanager
def _output(path: Path) -> Iterator[Path]:
    """A temporary path to write beside ``path``, renamed over it when the block ends
    (``uvm_sched._files.atomic_path``); a failure to write (a full disk, a read-only
    folder) is bad input with the old file kept."""
    from ._files import atomic_path

    try:
        with atomic_path(path) as tmp:
            yield tmp
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e} (nothing written; "
                         "an existing file is unchanged)") from None


def _write_text(path: Path, text: str) -> None:
    with _output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def _write_report(dest: Path, html: str, plotly: str) -> Path | None:
    """The report page; with ``--plotly file`` plotly.js beside it first (the page loads it
    by name, so no page exists without its script). Returns the script's path, if any."""
    js = None
    if plotly == "file":
        write_js = _part("uvm_sched.viz", "write_plotly_js", "the HTML report")
        try:
            js = write_js(dest.parent)
        except OSError as e:
            raise UsageError(f"cannot write plotly.js beside {dest}: {e.strerror or e} "
                             "(nothing written; --plotly inline puts it in the page)") from None
    _write_text(dest, html)
    return js


def _report_note(dest: Path, js: Path | None, what: str = "the report") -> str:
    """What a report command wrote, with full paths and sizes."""
    text = f"wrote {what} to {dest.resolve()} ({fmt_bytes(dest.stat().st_size)})"
    if js is not None:
        text += (f" and plotly.js beside it, {js.resolve()} ({fmt_bytes(js.stat().st_size)}; "
                 "the page loads it by name: keep the two together)")
    return text + "; open it in a browser"


def _trace_info(trace) -> dict[str, Any]:
    """Trace facts for humans and --json: counts in events/ticks, bytes, ns."""
    import numpy as np

    from .trace._model import EventKind

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
        "meta": {k: v for k, v in trace.meta.items() if k not in ("alloc_sizes", "tick_ops", "block_names")},
    }


def _trace_line(info: dict[str, Any]) -> str:
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


# ----------------------------------------------------------------------------------------
# simulation results
def _result_row(res, ideal) -> dict[str, Any]:
    """One policy's figures (seconds, bytes, counts) for tables and JSON."""
    d = {
        "policy": res.policy if isinstance(res.policy, str) else "plan",
        "iteration_time_s": float(res.iteration_time_s),
        "slowdown": float(res.slowdown(ideal)) if ideal is not None else None,
        "stall_time_s": float(res.stall_time_s),
        "bytes_h2d": int(res.bytes_h2d),
        "bytes_d2h": int(res.bytes_d2h),
        "faults": int(res.faults),
        "peak_resident_bytes": int(res.peak_resident_bytes),
        "divergences": int(res.divergences),
    }
    return d


# short headers so the table fits an 80-column terminal; --help and the report spell them out
# (peak resident bytes is in --json and the report)
_RESULT_COLS = ("policy", "time", "vs ideal", "stall", "host→dev", "dev→host", "faults")


def _result_cells(r: dict[str, Any]) -> list[str]:
    if r["policy"] == "bound":
        # a limit, not a run: no schedule can beat its time, and at least its bytes must
        # cross the link (nothing was moved; faults are not modelled by the bound)
        return [r["policy"], "≥ " + fmt_seconds(r["iteration_time_s"]),
                "≥ " + fmt_ratio(r["slowdown"]), "≥ " + fmt_seconds(r["stall_time_s"]),
                "≥ " + fmt_bytes(r["bytes_h2d"], digits=1),
                "≥ " + fmt_bytes(r["bytes_d2h"], digits=1), "-"]
    return [r["policy"], fmt_seconds(r["iteration_time_s"]), fmt_ratio(r["slowdown"]),
            fmt_seconds(r["stall_time_s"]), fmt_bytes(r["bytes_h2d"], digits=1),
            fmt_bytes(r["bytes_d2h"], digits=1), fmt_count(r["faults"])]


BOUND_NOTE = ("bound: a limit, not a run -- no schedule can beat its time at this budget on "
              "this link (≥ bytes: what must cross the link at least)")


def _policies(spec: str | None, known: Sequence[str]) -> list[str]:
    if not spec:
        return list(known)
    out = [p.strip() for p in spec.split(",") if p.strip()]
    bad = [p for p in out if p not in known]
    if bad:
        raise UsageError(f"unknown policy {bad[0]!r}; known: {', '.join(known)}")
    return out


def _as_uvm_sched(res):
    """A result of simulating a Plan object, labelled as the planner's policy: the simulator
    names it "plan", while tables and the report know the planner as "uvm-sched"."""
    import dataclasses

    return dataclasses.replace(res, policy="uvm-sched") if dataclasses.is_dataclass(res) else res


def _simulate_policies(trace, hw, budget_bytes: int, policies: Sequence[str], out: _Out, *,
                       plan=None, mode: str = "oblivious", label: str = "simulating",
                       tune: tuple = ()):
    """SimResults for ``ideal`` and each policy (a Plan stands in for ``uvm-sched`` when
    given, so the plan shown in a report is the one simulated)."""
    simulate = _part("uvm_sched.sim", "simulate", "the simulator")
    names = list(dict.fromkeys(["ideal", *policies]))
    results = {}
    with out.progress(total=len(names), description=label) as bar:
        for name in names:
            bar.step(f"{label}: {name}")
            if name == "uvm-sched" and plan is not None:
                results[name] = _as_uvm_sched(simulate(trace, plan, hw, budget=budget_bytes))
            elif name == "uvm-sched":
                results[name] = simulate(trace, name, hw, budget=budget_bytes, mode=mode,
                                         tune=tune)
            else:
                results[name] = simulate(trace, name, hw, budget=budget_bytes)
            bar.advance()
    return results


# ----------------------------------------------------------------------------------------
# subcommands
def _zoo_sizes(model: str, batch, seq, image) -> dict[str, int]:
    """The size options given for a zoo model, checked by the zoo (a text model takes seq,
    a vision model image) before any recording starts."""
    opts = {k: v for k, v in (("batch", batch), ("seq", seq), ("image", image)) if v is not None}
    build = _part("uvm_sched.trace.zoo", "build", "the model zoo")
    try:
        build(model, **opts)
    except (ValueError, TypeError) as e:
        msg = str(e)
        raise UsageError(msg if model in msg else f"{model}: {msg}") from None
    return opts


def _sizes_of(d: dict) -> dict[str, int]:
    """The zoo sizes named in ``d`` (a zoo.info dict or a recorded trace's meta)."""
    return {k: int(d[k]) for k in ("batch", "seq", "image") if d.get(k) is not None}


def _sizes_text(sizes: dict[str, int]) -> str:
    """'batch 8, 1,024 tokens' / 'batch 64, 224 px images'."""
    parts = [f"batch {sizes['batch']:,}"] if "batch" in sizes else []
    if "seq" in sizes:
        parts.append(f"{sizes['seq']:,} tokens")
    if "image" in sizes:
        parts.append(f"{sizes['image']:,} px images")
    return ", ".join(parts)


def cmd_record(args, out: _Out) -> int:
    zoo_names = _part("uvm_sched.trace.zoo", "names", "the model zoo")
    zoo_info = _part("uvm_sched.trace.zoo", "info", "the model zoo")
    names = list(zoo_names())
    if args.list:
        infos = [zoo_info(n) for n in names]
        if out.json:
            out.emit_json({"models": names, "defaults": {i["name"]: _sizes_of(i) for i in infos}})
        else:
            w = max(map(len, names))
            out.stdout.print("\n".join(f"{i['name']:<{w}}  {_sizes_text(_sizes_of(i)):<24}  "
                                       f"{i['about']}" for i in infos), markup=False)
        return EXIT_OK
    if args.model and (args.script or _is_python(args.model)) and args.model not in names:
        return _record_script(args, out, [args.model, *args.script])
    if not args.model:
        raise UsageError("record needs a MODEL (uvm-sched record --list shows the zoo) or a "
                         "script: uvm-sched record -- python train.py ARGS")
    if args.script:
        raise UsageError(f"record takes a zoo MODEL or `-- python SCRIPT ARGS`, not both "
                         f"(got {args.model!r} and {' '.join(args.script)!r})")
    if args.model not in names:
        raise UsageError(f"unknown model {args.model!r}; the zoo has: {', '.join(names)}")
    dest = _writable(args.output or f"{args.model}.parquet")
    _profile(args.hw)  # an unknown profile is a usage error before minutes of recording
    record = _part("uvm_sched.trace.zoo", "record", "the model zoo")
    opts = _zoo_sizes(args.model, args.batch, args.seq, args.image)
    t0 = time.perf_counter()
    with out.progress(description=f"recording {args.model}") as bar:
        bar.step(f"recording {args.model} on meta tensors")
        trace = record(args.model, iters=args.iters, hw=args.hw, amp=args.amp, **opts)
    elapsed = time.perf_counter() - t0
    with _output(dest) as tmp:
        trace.save(tmp)
    info = _trace_info(trace)
    used = _sizes_of(trace.meta)
    if out.json:
        out.emit_json(_clean({"path": str(dest), "model": args.model, "record_s": elapsed,
                              "sizes": used, **info}))
    else:
        given = set(opts)
        defaults = [k for k in used if k not in given]
        words = {"batch": "batch", "seq": "tokens", "image": "image side"}
        out.stdout.print(f"{args.model} at {_sizes_text(used)}"
                         + (f" ({', '.join(words[k] for k in defaults)}: the model's default, "
                            "as in the benchmark tables)" if defaults else ""), markup=False)
        out.stdout.print(_trace_line(info), markup=False)
        out.note(f"wrote {dest} (recorded in {fmt_seconds(elapsed)})")
    return EXIT_OK


def _is_python(word: str) -> bool:
    return os.path.basename(word).startswith("python")


def _record_script(args, out: _Out, command: list[str]) -> int:
    """``uvm-sched record -- python SCRIPT ARGS``: the script runs unchanged in a child
    Python inside ``uvm_sched.trace.recording()`` (uvm_sched.trace._live)."""
    import shutil
    import subprocess

    if not _is_python(command[0]):
        raise UsageError(f"record runs a Python script: `uvm-sched record -- python SCRIPT "
                         f"ARGS` (or `python -m MODULE ARGS`), got {command[0]!r}")
    if len(command) < 2:
        raise UsageError("record -- python needs a script: uvm-sched record -- python "
                         "train.py ARGS")
    exe = shutil.which(command[0])
    if exe is None:
        raise UsageError(f"no Python named {command[0]!r} on PATH")
    if command[1] != "-m" and not Path(command[1]).is_file():
        raise FileNotFoundError(f"no such script: {command[1]}")
    name = Path(command[2] if command[1] == "-m" and len(command) > 2 else command[1]).stem
    dest = _writable(args.output or f"{name}.parquet")
    _profile(args.hw)
    t0 = time.perf_counter()
    child = [exe, "-m", "uvm_sched.trace._live", str(dest), args.hw, args.device or "-", "--",
             *command[1:]]
    # the script's own prints must not mix into --json output on stdout
    rc = subprocess.call(child, stdout=sys.stderr if out.json else None)
    elapsed = time.perf_counter() - t0
    if rc != 0:
        sys.stderr.write(f"{PROG} record: the script exited with status {rc}; no trace "
                         "written\n")
        return EXIT_USAGE if rc == 2 else EXIT_FAIL
    trace = _load_trace(str(dest), None, None)
    info = _trace_info(trace)
    m = trace.meta
    if out.json:
        out.emit_json(_clean({"path": str(dest), "command": command, "record_s": elapsed,
                              "optimizer_steps": m.get("optimizer_steps"),
                              "markers": len(trace.iteration_starts),
                              "steps_signal": m.get("steps_signal"), "route": m.get("route"),
                              "time_source": m.get("time_source"), **info}))
    else:
        out.stdout.print(f"{' '.join(command)}: {m.get('optimizer_steps', 0):,} optimizer "
                         f"step(s), {len(trace.iteration_starts):,} iteration marker(s) from "
                         f"{m.get('steps_signal')}", markup=False)
        out.stdout.print(_trace_line(info), markup=False)
        out.stdout.print(f"device time: {m.get('time_source')}", markup=False)
        out.note(f"wrote {dest} (recorded in {fmt_seconds(elapsed)})")
    return EXIT_OK


def cmd_analyze(args, out: _Out) -> int:
    # one trace per rank (a multi-GPU run saves one per process): each reported on its own
    traces = [_load_trace(path, args.device, args.assume_tick_us) for path in args.trace]
    analyze = _part("uvm_sched.pattern", "analyze", "pattern analysis")
    reports = []
    with out.progress(total=len(traces), description="analysing") as bar:
        for path, trace in zip(args.trace, traces):
            bar.step(f"learning the iteration pattern of {path}")
            reports.append((path, trace, analyze(trace)))
            bar.advance()
    if out.json:
        docs = [{"trace": _trace_info(t), "pattern": p.summary()} for _, t, p in reports]
        out.emit_json(_clean(docs[0] if len(docs) == 1 else
                             {"ranks": [dict(d, path=path, rank=t.meta.get("rank"),
                                             device=t.meta.get("device"))
                                        for d, (path, t, _) in zip(docs, reports)]}))
        return EXIT_OK
    for path, trace, pattern in reports:
        if len(reports) > 1:
            out.stdout.print(f"== rank {trace.meta.get('rank', '?')}, device "
                             f"{trace.meta.get('device', '?')}: {path}", markup=False)
        out.stdout.print(_trace_line(_trace_info(trace)), markup=False)
        out.stdout.print(str(pattern), markup=False)
    return EXIT_OK


_PREDICTED_SHOWN = ("ideal_s", "stall_s", "bytes_h2d", "bytes_d2h", "peak_resident_bytes")


def _fmt_any(key: str, v: Any) -> str:
    """A figure by its key's unit suffix: ``*_s`` seconds, ``*bytes*`` bytes, else a count."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return str(v)
    if key.endswith("_s"):
        return fmt_seconds(v)
    if "bytes" in key:
        return fmt_bytes(v)
    return fmt_count(v) if float(v).is_integer() else f"{v:.3g}"


def cmd_plan(args, out: _Out) -> int:
    trace = _load_trace(args.trace, args.device, args.assume_tick_us)  # bad input first, before any missing part
    hw = _profile(args.hw)
    _check_budget_syntax([args.budget])
    dest = _writable(args.output, args.trace) if args.output else None
    plan_fn = _part("uvm_sched.planner", "plan", "the planner")
    opts: dict[str, Any] = {}
    if args.sample_rate is not None:
        opts["sample_rate"] = args.sample_rate
    if args.noise is not None:
        opts["noise"] = args.noise
    if opts and args.mode != "sampled":
        raise UsageError("--sample-rate/--noise only apply with --mode sampled")
    with out.progress(description="planning") as bar:
        budget = _budget_bytes(args.budget, trace.peak_bytes, hw)
        bar.step(f"planning for {fmt_bytes(budget)} ({args.mode})")
        t0 = time.perf_counter()
        plan = plan_fn(trace, budget, hw, mode=args.mode, **opts)
        elapsed = time.perf_counter() - t0
    if dest is not None:
        with _output(dest) as tmp:
            plan.save(tmp)
    summary = plan.summary()
    meta = {k: v for k, v in plan.meta.items() if k != "alloc_sizes"}
    meta["alloc_count"] = len(plan.meta.get("alloc_sizes", ()))
    if out.json:
        out.emit_json(_clean({"path": str(dest) if dest else None, "actions": len(plan),
                              "plan_s": elapsed, "meta": meta, "summary": summary}))
        return EXIT_OK
    peak = trace.peak_bytes
    out.stdout.print(
        f"plan ({plan.meta.get('mode', args.mode)}) for {fmt_bytes(budget)} on {hw.name}: "
        f"{fmt_pct(budget / peak) if peak else '-'} of peak {fmt_bytes(peak)}, "
        f"{fmt_count(plan.meta['period_events'])} allocator events per iteration, "
        f"{fmt_count(len(plan))} actions (planned in {fmt_seconds(elapsed)})", markup=False)
    rows = [(a, fmt_count(v["count"]), fmt_bytes(v["bytes"])) for a, v in summary.items()
            if v["count"]]
    out.stdout.print(_table("actions per iteration", ("action", "count", "bytes"), rows,
                            right=(1, 2)))
    pred = plan.meta.get("predicted")
    if isinstance(pred, dict) and pred:
        shown = [(k, v) for k, v in pred.items() if k in _PREDICTED_SHOWN]
        if shown:
            out.stdout.print("planner's own estimate: " + ", ".join(
                f"{k.removesuffix('_s').removesuffix('_bytes').replace('_', ' ')} {_fmt_any(k, v)}"
                for k, v in shown)
                + (" (times assume 1 µs per tick: the trace has no clock)"
                   if plan.meta.get("tick_time_source") == "unknown" else ""), markup=False)
            out.stdout.print(
                "  (its queue model while planning: copies at the link's prefetch rate, a late "
                "prefetch or a waited-for eviction counted whole as stall, no demand faults; "
                f"`{PROG} simulate TRACE --plan FILE` runs the plan through the simulator's "
                "Unified Memory model -- faults, eviction, overlap with compute -- and that "
                "measured figure is the one the tables quote: expect the two to differ)",
                markup=False)
    if dest is not None:
        out.note(f"wrote {dest}")
    else:
        out.note("(plan not saved; pass -o plan.json to keep it)")
    return EXIT_OK


def cmd_simulate(args, out: _Out) -> int:
    trace = _load_trace(args.trace, args.device, args.assume_tick_us)  # bad input first, before any missing part
    hw = _profile(args.hw)
    if args.budget is not None:
        _check_budget_syntax([args.budget])
    plan = _load_plan(args.plan) if args.plan else None
    if plan is not None:
        _check_plan_fits(plan, trace, args.force, out)
    known = list(_part("uvm_sched.sim", "POLICIES", "the simulator"))
    if plan is not None and args.policy not in (None, "uvm-sched"):
        raise UsageError("--plan replays a saved plan; leave out --policy (or say uvm-sched)")
    policy = "uvm-sched" if plan is not None else (args.policy or "uvm-sched")
    _policies(policy, known)
    if args.budget is None and plan is not None:
        budget = int(plan.meta["budget_bytes"])
    else:  # as --help says: the plan's budget, else 50% (not the device's capacity)
        budget = _budget_bytes(args.budget or DEFAULT_BUDGET, trace.peak_bytes, hw)
    if args.tune and (plan is not None or policy != "uvm-sched"):
        raise UsageError("--tune plans candidates for the uvm-sched policy; it does not apply "
                         "to a saved plan or another policy")
    results = _simulate_policies(trace, hw, budget, [policy], out, plan=plan, mode=args.mode,
                                 tune=_check_tune(args.tune, args.mode))
    ideal = results["ideal"]
    res = results[policy]
    row = _result_row(res, ideal)
    row["policy"] = policy if plan is None else f"plan {Path(args.plan).name}"
    if out.json:
        d = res.to_dict()
        d["slowdown"] = row["slowdown"]
        out.emit_json(_clean({"trace": args.trace, "hw": hw.name, "budget_bytes": budget,
                              "peak_bytes": trace.peak_bytes, "time_source": trace.time_source,
                              "result": d,
                              "ideal": ideal.to_dict()}))
        return EXIT_OK
    _print_budget_line(out, trace.peak_bytes, budget, hw.name)
    out.stdout.print(_time_line(trace), markup=False)
    t = _table(None, _RESULT_COLS, [_result_cells(_result_row(ideal, ideal)), _result_cells(row)],
               right=range(1, 7))
    out.stdout.print(t)
    if policy == "bound":
        out.stdout.print(f"no schedule can beat {fmt_seconds(res.iteration_time_s)} "
                         f"({fmt_ratio(row['slowdown'])} of ideal) at this budget on {hw.name}: "
                         "a lower bound, not a run (nothing was moved)", markup=False)
        return EXIT_OK
    br = getattr(res, "stall_breakdown", None) or {}
    if br:
        out.stdout.print("stall breakdown: " + ", ".join(f"{k} {fmt_seconds(v)}" for k, v in br.items()),
                         markup=False)
    pred = (plan.meta.get("predicted") or {}) if plan is not None else {}
    if "stall_s" in pred:
        out.stdout.print(
            f"the planner estimated a {fmt_seconds(pred['stall_s'])} stall while planning (its "
            f"queue model); the simulator measures {fmt_seconds(res.stall_time_s)}, with demand "
            "faults, the driver's eviction and overlap with compute -- this figure is the "
            "one to quote", markup=False)
    tuned = res.counters.get("tuned_guard")
    if tuned is not None:
        times = ", ".join(f"{k[len('tuning_'):-2]} {fmt_seconds(v)}" for k, v in res.counters.items()
                          if k.startswith("tuning_") and k.endswith("_s"))
        out.stdout.print(f"tuned: kept {tuned} (iteration time per candidate: {times})",
                         markup=False)
    return EXIT_OK


def _check_plan_fits(plan, trace, force: bool, out: _Out) -> None:
    """A plan made for another trace is an error (its blocks are not this trace's), or with
    --force a warning on stderr."""
    try:
        plan.check_trace(trace)
    except ValueError as e:  # PlanError
        if not force:
            raise UsageError(str(e)) from None
        msg = _one_line(e).split(" Plan for this trace")[0]
        sys.stderr.write(f"{PROG}: warning: {msg} (--force: using it anyway)\n")


def _check_tune(tune, mode: str) -> tuple:
    """The --tune candidates, checked against the planner mode before any simulation."""
    if not tune:
        return ()
    check = _part("uvm_sched.planner", "tuning_candidates", "the planner")
    try:
        check(tune, mode, {})
    except ValueError as e:
        raise UsageError(str(e)) from None
    return tune


def _time_line(trace) -> str:
    """Where the simulated compute time comes from, and that a figure is one iteration's."""
    return (f"compute time: {trace.time_source}; iteration time = one iteration "
            f"({'marked' if len(trace.iteration_starts) else 'learned, else the whole trace'})")


def _print_budget_line(out: _Out, peak: int, budget: int, hw_name: str) -> None:
    share = f" ({fmt_pct(budget / peak)} of peak {fmt_bytes(peak)})" if peak else ""
    out.stdout.print(f"budget {fmt_bytes(budget)}{share} on {hw_name}", markup=False)


def _frontier(df) -> list[dict[str, Any]]:
    """Per policy, the points (saving, slowdown) no other budget of the same policy beats:
    saving = 1 - budget/peak (share of peak memory not held on the device)."""
    out: list[dict[str, Any]] = []
    for policy, g in df.groupby("policy", sort=False):
        pts = sorted(((float(r.saving), float(r.slowdown), int(r.budget_bytes))
                      for r in g.itertuples() if math.isfinite(float(r.slowdown))),
                     key=lambda p: (-p[0], p[1]))
        best = math.inf
        for saving, slow, b in pts:
            # walking from the largest saving down, keep a point only if it is faster than
            # every point that saves more
            if slow < best:
                out.append({"policy": policy, "saving": saving, "slowdown": slow,
                            "budget_bytes": b})
                best = slow
    return out


def cmd_compare(args, out: _Out) -> int:
    trace = _load_trace(args.trace, args.device, args.assume_tick_us)  # bad input first, before any missing part
    hw = _profile(args.hw)
    specs = _budget_list(args.budget)
    _check_budget_syntax(specs)
    compare = _part("uvm_sched.sim", "compare", "the simulator")
    known = list(_part("uvm_sched.sim", "POLICIES", "the simulator"))
    policies = _policies(args.policies, known)
    plot = _writable(args.plot, args.trace) if args.plot else None
    frontier_fig: Any = _part("uvm_sched.viz", "frontier", "plots") if plot else None
    import pandas as pd

    budgets = [_budget_bytes(s, trace.peak_bytes, hw) for s in specs]
    tune = _check_tune(args.tune, args.mode)
    frames = []
    with out.progress(total=len(budgets), description="comparing") as bar:
        for spec, b in zip(specs, budgets):
            bar.step(f"simulating {len(policies)} policies at {spec} ({fmt_bytes(b)})")
            frames.append(compare(trace, hw, [b], policies=policies, mode=args.mode,
                                  tune=tune))
            bar.advance()
    df = pd.concat(frames, ignore_index=True)
    peak = trace.peak_bytes
    df["saving"] = [1.0 - b / peak if peak else float("nan") for b in df["budget_bytes"]]
    front = _frontier(df)
    if plot is not None:
        fig = frontier_fig(df)
        _save_figure(fig, plot)
    if out.json:
        out.emit_json(_clean({"trace": args.trace, "hw": hw.name, "peak_bytes": peak,
                              "time_source": trace.time_source,
                              "rows": df.to_dict(orient="records"), "frontier": front,
                              "plot": str(plot) if plot else None}))
        return EXIT_OK
    out.stdout.print(f"{trace.meta.get('name') or args.trace}: peak {fmt_bytes(peak)} on {hw.name}",
                     markup=False)
    out.stdout.print(_time_line(trace), markup=False)
    errors = df["error"] if "error" in df.columns else None
    for b, g in df.groupby("budget_bytes", sort=False):
        share = f"{fmt_pct(b / peak)} of peak" if peak else ""
        rows = []
        for i, r in zip(g.index, g.itertuples()):
            if errors is not None and isinstance(errors[i], str) and errors[i]:
                rows.append([r.policy, "infeasible", "-", "-", "-", "-", "-"])
                continue
            rows.append(_result_cells({"policy": r.policy, "iteration_time_s": r.iteration_time_s,
                                       "slowdown": r.slowdown, "stall_time_s": r.stall_time_s,
                                       "bytes_h2d": r.bytes_h2d, "bytes_d2h": r.bytes_d2h,
                                       "faults": r.faults}))
        out.stdout.print(_table(f"budget {fmt_bytes(b)} ({share})", _RESULT_COLS[:7], rows,
                                right=range(1, 7)))
        if errors is not None:
            why = next((e for e in errors[g.index] if isinstance(e, str) and e), None)
            if why:
                out.stdout.print(f"  infeasible: {why}", markup=False)
    rows = [[f["policy"], fmt_pct(f["saving"]), fmt_bytes(f["budget_bytes"]),
             ("≥ " if f["policy"] == "bound" else "") + fmt_ratio(f["slowdown"])]
            for f in front if f["policy"] != "ideal"]
    out.stdout.print(_table("frontier: memory saved vs slowdown",
                            ("policy", "memory saved", "budget", "slowdown"), rows,
                            right=(1, 2, 3)))
    if "bound" in set(df["policy"]):
        out.stdout.print(BOUND_NOTE, markup=False)
    if plot is not None:
        out.note(f"wrote {plot}")
    return EXIT_OK


def _save_figure(fig, path: Path) -> None:
    """Write a plotly figure as self-contained HTML, a matplotlib one as an image."""
    with _output(path) as tmp:
        if hasattr(fig, "write_html"):
            fig.write_html(str(tmp), include_plotlyjs=True)
        else:
            fig.savefig(str(tmp), format=path.suffix.lstrip(".") or None)


def cmd_report(args, out: _Out) -> int:
    trace = _load_trace(args.trace, args.device, args.assume_tick_us)  # bad input first, before any missing part
    hw = _profile(args.hw)
    if args.budget is not None:
        _check_budget_syntax([args.budget])
    dest = _writable(args.output, args.trace, args.plan)
    report = _part("uvm_sched.viz", "report", "the HTML report")
    plan = _load_plan(args.plan) if args.plan else None
    if plan is not None:
        _check_plan_fits(plan, trace, args.force, out)
    if args.budget is None and plan is not None:
        budget = int(plan.meta["budget_bytes"])
    else:
        budget = _budget_bytes(args.budget or DEFAULT_BUDGET, trace.peak_bytes, hw)
    results = []
    if not args.no_sim:
        known = list(_part("uvm_sched.sim", "POLICIES", "the simulator"))
        # bound: the report's verdict says what no schedule can beat
        policies = _policies(args.policies or ",".join(p for p in ("demand", "bound", "uvm-sched")
                                                       if p in known), known)
        sims = _simulate_policies(trace, hw, budget, policies, out, plan=plan, mode=args.mode)
        results = list(sims.values())
    with out.progress(description="report") as bar:
        bar.step("drawing the report")
        title = args.title or f"uvm_sched: {trace.meta.get('name') or Path(args.trace).name}"
        html = report(trace, plan=plan, results=results or None, title=title,
                      plotly=args.plotly)
    js = _write_report(dest, html, args.plotly)
    if out.json:
        out.emit_json({"path": str(dest), "bytes": dest.stat().st_size, "budget_bytes": budget,
                       "plotly_js": str(js) if js else None,
                       "results": [_clean(r.to_dict()) for r in results]})
    else:
        out.note(_report_note(dest, js))
    return EXIT_OK


_EXPORTERS = {"torch-snapshot": "export_torch_snapshot", "perfetto": "export_perfetto"}
_EXPORT_SUFFIX = {"torch-snapshot": ".pickle", "perfetto": ".json"}


def cmd_export(args, out: _Out) -> int:
    trace = _load_trace(args.trace, args.device, args.assume_tick_us)  # bad input first, before any missing part
    fn = _part("uvm_sched.trace", _EXPORTERS[args.to], f"the {args.to} exporter")
    dest = _writable(args.output or (Path(args.trace).stem + _EXPORT_SUFFIX[args.to]), args.trace)
    with out.progress(description="export") as bar:
        bar.step(f"writing {args.to}")
        with _output(dest) as tmp:
            fn(trace, tmp)
    if out.json:
        out.emit_json({"path": str(dest), "format": args.to, "bytes": dest.stat().st_size})
    else:
        out.note(f"wrote {dest} ({args.to}, {fmt_bytes(dest.stat().st_size)})")
    return EXIT_OK


def cmd_demo(args, out: _Out) -> int:
    preset: dict[str, Any] = dict(DEMO_SMALL if args.small else DEMO_DEFAULT)
    if args.model is not None and args.model != preset["model"]:
        # another model: the preset's sizes belong to the preset's model
        preset = {"model": args.model, "iters": preset["iters"]}
    for k in ("batch", "seq", "image", "iters"):
        if getattr(args, k) is not None:
            preset[k] = getattr(args, k)
    hw = _profile(args.hw)
    _check_budget_syntax([args.budget])
    dest = None if args.no_report else _writable(args.output)
    zoo_names = _part("uvm_sched.trace.zoo", "names", "the model zoo")
    record = _part("uvm_sched.trace.zoo", "record", "the model zoo")
    plan_fn = _part("uvm_sched.planner", "plan", "the planner")
    simulate = _part("uvm_sched.sim", "simulate", "the simulator")
    policies = list(_part("uvm_sched.sim", "POLICIES", "the simulator"))
    report: Any = _part("uvm_sched.viz", "report", "the HTML report") if dest else None
    if preset["model"] not in zoo_names():
        raise UsageError(f"unknown model {preset['model']!r}; the zoo has: {', '.join(zoo_names())}")
    sizes = _zoo_sizes(preset["model"], preset.get("batch"), preset.get("seq"), preset.get("image"))
    names = list(dict.fromkeys(["ideal", *policies]))
    timings: dict[str, float] = {}
    js = None
    t_all = time.perf_counter()
    with out.progress(total=3 + len(names) + (1 if dest else 0), description="demo") as bar:
        bar.step(f"recording {preset['model']} on meta tensors")
        t0 = time.perf_counter()
        trace = record(preset["model"], iters=preset["iters"], hw=hw.name, **sizes)
        for k in ("batch", "seq", "image"):  # the sizes the zoo actually used
            preset[k] = trace.meta.get(k, preset.get(k))
        timings["record_s"] = time.perf_counter() - t0
        bar.advance()
        budget = _budget_bytes(args.budget, trace.peak_bytes, hw)
        bar.step(f"planning for {fmt_bytes(budget)}")
        t0 = time.perf_counter()
        plan = plan_fn(trace, budget, hw, mode="oblivious")
        timings["plan_s"] = time.perf_counter() - t0
        bar.advance()
        results = {}
        t0 = time.perf_counter()
        for name in names:
            bar.step(f"simulating {name}")
            if name == "uvm-sched":
                results[name] = _as_uvm_sched(simulate(trace, plan, hw, budget=budget))
            else:
                results[name] = simulate(trace, name, hw, budget=budget)
            bar.advance()
        timings["simulate_s"] = time.perf_counter() - t0
        if dest is not None:
            bar.step("drawing the report")
            t0 = time.perf_counter()
            title = (f"uvm_sched demo: {preset['model']} batch {preset['batch']}, "
                     f"budget {fmt_bytes(budget)} on {hw.name}")
            html = report(trace, plan=plan, results=list(results.values()), title=title,
                          plotly=args.plotly)
            js = _write_report(dest, html, args.plotly)
            timings["report_s"] = time.perf_counter() - t0
            bar.advance()
    timings["total_s"] = time.perf_counter() - t_all
    ideal = results["ideal"]
    rows = []
    for name, res in results.items():
        r = _result_row(res, ideal)
        r["policy"] = name
        rows.append(r)
    peak = trace.peak_bytes
    if out.json:
        out.emit_json(_clean({"model": preset["model"], "batch": preset["batch"],
                              "seq": preset.get("seq"), "image": preset.get("image"), "iters": preset["iters"], "hw": hw.name,
                              "peak_bytes": peak, "budget_bytes": budget, "results": rows,
                              "plan": {"actions": len(plan), "summary": plan.summary()},
                              "report": str(dest) if dest else None,
                              "plotly_js": str(js) if dest and js else None, "timings": timings}))
        return EXIT_OK
    info = _trace_info(trace)
    out.stdout.print(f"{preset['model']} at {_sizes_text(_sizes_of(trace.meta))}", markup=False)
    out.stdout.print(_trace_line(info), markup=False)
    _print_budget_line(out, peak, budget, hw.name)
    out.stdout.print(_table(f"every policy at {fmt_pct(budget / peak) if peak else '-'} of peak "
                            "(iteration time, slowdown vs ideal, stall, bytes moved each way, "
                            "fault batches)",
                            _RESULT_COLS, [_result_cells(r) for r in rows], right=range(1, 7)))
    if "bound" in results:
        out.stdout.print(BOUND_NOTE, markup=False)
    best = min((r for r in rows if r["policy"] not in ("ideal", "bound")),
               key=lambda r: r["iteration_time_s"], default=None)
    if best is not None:
        out.stdout.print(f"fastest real policy: {best['policy']} at {fmt_ratio(best['slowdown'])} "
                         f"of ideal while holding {fmt_bytes(budget)} instead of {fmt_bytes(peak)}",
                         markup=False)
    if dest is not None:
        out.note(_report_note(dest, js, "the timeline report"))
    out.note(f"done in {fmt_seconds(timings['total_s'])}")
    return EXIT_OK


# ----------------------------------------------------------------------------------------
# parser
class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``uvm-sched plan: error: ... (see --help)``, exit 2."""

    def error(self, message: str):  # noqa: D401 - argparse API
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


_FMT = argparse.RawDescriptionHelpFormatter

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

TRACE is any file or folder uvm_sched.trace.load reads: a uvm_sched Parquet trace, a
torch.cuda.memory._dump_snapshot pickle, a Kineto/profiler JSON, a G10-style kernels folder.
Budgets: bytes (40GiB, 40GB, 123456) or a share of the trace's peak (50%).
Exit codes: 0 ok, 2 usage or bad input, 1 unexpected failure (--debug shows the traceback).
"""


def _common() -> argparse.ArgumentParser:
    """Options every subcommand takes (also accepted before the subcommand name)."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("output")
    # SUPPRESS: a subcommand that does not see the flag must not overwrite the main parser's
    g.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                   help="print machine-readable JSON on stdout (nothing else goes there)")
    g.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                   help="no progress bars or notes")
    g.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show the full traceback on errors")
    return p


def _hw_arg(p, default=DEFAULT_HW):
    p.add_argument("--hw", default=default, metavar="PROFILE",
                   help=f"hardware profile name or TOML path (default {default}); "
                        "shipped: h200-pcie5, h100-pcie5, a100-40gb-pcie4, gh200-c2c, a100-40gb-g10")


def _plotly_arg(p, default: str) -> None:
    p.add_argument("--plotly", choices=("inline", "file", "cdn"), default=default,
                   help="how the page gets plotly.js: inline (in the page, one ~5 MB file), "
                        "file (plotly-VERSION.min.js written beside the page, loaded by a "
                        "relative path: small page, opens offline while the two stay "
                        "together) or cdn (linked from cdn.plot.ly: small, needs the network); "
                        f"default {default}")


def _force_arg(p):
    p.add_argument("--force", action="store_true",
                   help="use a --plan made for another trace anyway (a warning, not an error)")


def _mode_arg(p):
    p.add_argument("--mode", choices=("oblivious", "sampled"), default="oblivious",
                   help="planner mode: oblivious reads only allocator events (default); sampled "
                        "also uses access samples")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``uvm-sched`` (exposed for docs and tests)."""
    from . import __version__

    common = _common()
    parser = _Parser(prog=PROG, formatter_class=_FMT, epilog=MAIN_EPILOG,
                     description="Plan prefetch/evict schedules for CUDA Unified Memory from "
                                 "allocator traces,\nand judge them in a simulator against the "
                                 "usual policies.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--json", action="store_true", default=False, help=argparse.SUPPRESS)
    parser.add_argument("-q", "--quiet", action="store_true", default=False, help=argparse.SUPPRESS)
    parser.add_argument("--debug", action="store_true", default=False, help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    def add(name, func, help_, epilog):
        p = sub.add_parser(name, help=help_, description=help_[0].upper() + help_[1:] + ".",
                           parents=[common], formatter_class=_FMT, epilog="examples:\n" + epilog)
        p.set_defaults(func=func)
        return p

    p = add("demo", cmd_demo,
            "record a small model, plan for half its peak, simulate every policy, write a report",
            "  uvm-sched demo\n  uvm-sched demo --small -o /tmp/demo.html\n"
            "  uvm-sched demo --model resnet50 --batch 8 --budget 30% --hw gh200-c2c\n")
    p.add_argument("--small", action="store_true",
                   help=f"the smallest setting ({DEMO_SMALL['model']} batch {DEMO_SMALL['batch']}, "
                        f"{DEMO_SMALL['image']} px images): seconds instead of a minute")
    p.add_argument("--model", help=f"zoo model (default {DEMO_DEFAULT['model']})")
    p.add_argument("--batch", type=_positive_int,
                   help="batch size (default: the model's training size, as record uses; "
                        "uvm-sched record --list shows them)")
    p.add_argument("--seq", type=_positive_int, help="tokens per sample (text models)")
    p.add_argument("--image", type=_positive_int, help="image side in pixels (vision models)")
    p.add_argument("--iters", type=_positive_int, help="iterations to record (default 3)")
    p.add_argument("--budget", default=DEFAULT_BUDGET, help="device memory budget (default 50%%)")
    _hw_arg(p)
    _plotly_arg(p, "file")
    p.add_argument("-o", "--output", default=DEMO_REPORT,
                   help=f"HTML report to write (default ./{DEMO_REPORT})")
    p.add_argument("--no-report", action="store_true", help="skip the HTML report")

    p = add("record", cmd_record, "record a training script as it runs, or a zoo model's "
            "training iterations on meta tensors",
            "  uvm-sched record -o train.parquet -- python train.py --epochs 1\n"
            "  uvm-sched record --list\n  uvm-sched record resnet50 --batch 32 -o resnet50.parquet\n"
            "  uvm-sched record gpt2_small --batch 8 --seq 512 --iters 4 -o gpt2.parquet\n")
    p.add_argument("model", nargs="?", metavar="MODEL", help="zoo model name (see --list)")
    p.add_argument("script", nargs="*", metavar="-- python SCRIPT ARGS",
                   help="run this training script unchanged and record it (iterations = its "
                        "optimizer steps, or its uvm_sched.step() calls)")
    p.add_argument("--device", help="-- python: the tensors' device to record (cpu, cuda; "
                                    "default cuda when available)")
    p.add_argument("--list", action="store_true", help="list the zoo's models and exit")
    p.add_argument("--batch", type=_positive_int,
                   help="batch size (default: the model's training size, as in the benchmark "
                        "tables; --list shows each model's)")
    p.add_argument("--seq", type=_positive_int, help="tokens per sample (text models; default "
                                                     "as --batch)")
    p.add_argument("--image", type=_positive_int, help="image side in pixels (vision models; "
                                                       "default as --batch)")
    p.add_argument("--iters", type=_positive_int, default=3, help="iterations to record (default 3)")
    p.add_argument("--amp", action="store_true", help="mixed precision (bf16 autocast)")
    _hw_arg(p)
    p.add_argument("-o", "--output", metavar="FILE",
                   help="Parquet trace to write (default MODEL.parquet)")

    p = add("analyze", cmd_analyze, "characterise a trace: period, block classes, lifetimes",
            "  uvm-sched analyze gpt2.parquet\n  uvm-sched analyze snapshot.pickle --json\n"
            "  uvm-sched analyze trace0.parquet trace1.parquet   (one per rank)\n")
    _trace_arg(p, several="trace file(s); several: one per rank, reported per rank")

    p = add("plan", cmd_plan, "plan prefetches and evictions for a memory budget",
            "  uvm-sched plan gpt2.parquet --budget 50% -o plan.json\n"
            "  uvm-sched plan gpt2.parquet --budget 12GiB --hw gh200-c2c --mode sampled "
            "--sample-rate 0.1 -o plan.parquet\n")
    _trace_arg(p)
    p.add_argument("--budget", default=DEFAULT_BUDGET, help="device memory budget (default 50%%)")
    _hw_arg(p)
    _mode_arg(p)
    p.add_argument("--sample-rate", type=_fraction, metavar="P",
                   help="sampled mode: probability that one access is observed, in (0, 1] "
                        "(default 1)")
    p.add_argument("--noise", type=_nonnegative, metavar="TICKS",
                   help="sampled mode: standard deviation of the observed tick, in ticks "
                        "(default 0)")
    p.add_argument("-o", "--output", metavar="FILE", help="plan file to write (.json or .parquet)")

    p = add("simulate", cmd_simulate, "simulate one policy (or a saved plan) against the ideal run",
            "  uvm-sched simulate gpt2.parquet --policy demand --budget 50%\n"
            "  uvm-sched simulate gpt2.parquet --plan plan.json --hw h200-pcie5\n")
    _trace_arg(p)
    p.add_argument("--policy", help="ideal, demand, prefetch-on-alloc, swap-activations, bound, "
                                    "uvm-sched (default uvm-sched)")
    p.add_argument("--plan", metavar="FILE", help="replay a saved plan instead of planning")
    _force_arg(p)
    p.add_argument("--budget", help="device memory budget (default: the plan's, else 50%%)")
    _hw_arg(p)
    _mode_arg(p)
    _tune_arg(p)

    p = add("compare", cmd_compare, "every policy side by side at one or more budgets",
            "  uvm-sched compare gpt2.parquet\n"
            "  uvm-sched compare gpt2.parquet --budget 75%,50%,30% --hw gh200-c2c --json\n"
            "  uvm-sched compare gpt2.parquet --plot frontier.html\n")
    _trace_arg(p)
    p.add_argument("--budget", default=DEFAULT_COMPARE_BUDGETS,
                   help=f"comma-separated budgets (default {DEFAULT_COMPARE_BUDGETS.replace('%', '%%')})")
    _hw_arg(p)
    _mode_arg(p)
    _tune_arg(p)
    p.add_argument("--policies", help="comma-separated subset of the policies (default all)")
    p.add_argument("--plot", metavar="FILE", help="also write the savings/slowdown frontier (HTML)")

    p = add("report", cmd_report, "write an interactive HTML timeline of a trace and its plan",
            "  uvm-sched report gpt2.parquet -o report.html\n"
            "  uvm-sched report gpt2.parquet --plan plan.json -o report.html\n")
    _trace_arg(p)
    p.add_argument("--plan", metavar="FILE", help="a saved plan to draw and simulate")
    _force_arg(p)
    p.add_argument("--budget", help="budget to simulate at (default: the plan's, else 50%%)")
    _hw_arg(p)
    _mode_arg(p)
    p.add_argument("--policies", help="policies to simulate for the stall and copy-engine views "
                                      "(default demand,bound,uvm-sched)")
    p.add_argument("--no-sim", action="store_true", help="draw the trace (and plan) only")
    p.add_argument("--title", help="page title")
    _plotly_arg(p, "inline")
    p.add_argument("-o", "--output", default="report.html", metavar="FILE",
                   help="HTML file to write (default report.html)")

    p = add("export", cmd_export, "convert a trace for other viewers",
            "  uvm-sched export gpt2.parquet --to torch-snapshot -o gpt2.pickle   "
            "# pytorch.org/memory_viz\n"
            "  uvm-sched export gpt2.parquet --to perfetto -o gpt2.json          "
            "# ui.perfetto.dev\n")
    _trace_arg(p)
    p.add_argument("--to", required=True, choices=sorted(_EXPORTERS), help="output format")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="file to write (default: the trace's name with .pickle / .json)")
    return parser


def _positive_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}")
    return v


def _tune_list(s: str) -> tuple:
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


def _tune_arg(p):
    p.add_argument("--tune", type=_tune_list, metavar="CANDIDATES",
                   help="uvm-sched: also plan with these guards (ticks or auto) or, in sampled "
                        "mode, oblivious (the plan without the samples); simulate each and keep "
                        "the fastest, as Scheduler(tune=...) does by the clock (e.g. 16,8)")


def _fraction(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {s!r}") from None
    if not 0 < v <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {s!r}")
    return v


def _nonnegative(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {s!r}") from None
    if not (v >= 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {s!r}")
    return v


# ----------------------------------------------------------------------------------------
def _one_line(e: BaseException) -> str:
    msg = " ".join(str(e).split()) or type(e).__name__
    return msg


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``uvm-sched``; returns the exit code (0 ok, 2 usage/input, 1 failure)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    prog = f"{PROG} {args.command}"
    debug = bool(getattr(args, "debug", False))
    try:
        out = _Out(args)
        with warnings.catch_warnings():
            # a --plan for another trace is this command's own error (or, with --force, its
            # own one-line warning): the simulator's warning would say it twice
            warnings.filterwarnings("ignore", message="the plan was made for")
            return int(args.func(args, out) or 0)
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        return 130
    except PartMissing as e:
        if debug:
            traceback.print_exc()
        sys.stderr.write(f"{prog}: error: {_one_line(e)}\n")
        return EXIT_FAIL
    except ImportError as e:
        # a part that is present but leans on one that is not (or not yet) in this build
        if debug:
            traceback.print_exc()
        sys.stderr.write(f"{prog}: error: a part of uvm_sched this command needs is missing "
                         f"({_one_line(e)})\n")
        return EXIT_FAIL
    except BrokenPipeError:
        # the reader went away (e.g. `| head`): nothing left to say
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return EXIT_OK
    except Exception as e:  # noqa: BLE001 - the one place errors become exit codes
        if debug:
            traceback.print_exc()
        if isinstance(e, _input_error_types()):
            sys.stderr.write(f"{prog}: error: {_one_line(e)}\n")
            return EXIT_USAGE
        hint = "" if debug else " (rerun with --debug for the traceback)"
        sys.stderr.write(f"{prog}: internal error: {type(e).__name__}: {_one_line(e)}{hint}\n")
        return EXIT_FAIL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
