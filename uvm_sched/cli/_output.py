"""What every command shares on the way out: where results go, how files are written, and
how errors become exit codes.

The rules, and why:

- Exit codes: 0 success; 2 usage errors and bad input (an unreadable or corrupt file, a bad
  budget, an unknown model or hardware profile); 1 anything unexpected (``--debug`` shows the
  traceback); 130 an interrupt. ``exit_code`` is the one place an exception becomes a code,
  so every command answers the same failure the same way, in one line on stderr.
- Results go to stdout (rich tables, or JSON with ``--json``); progress bars and notes about
  files written go to stderr under ``--json``, so JSON output can be piped as is.
- Every file is written whole or not at all (``uvm_sched._files``: beside, fsync, rename):
  ``writable`` checks an output before any slow work and ``output`` writes it, and these
  two are the only places that say "cannot write": on a full disk or in a read-only folder
  the command exits 2 and an existing file keeps its contents.
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
import traceback
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from .._errors import Error

PROG = "uvm-sched"
EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130


# ----------------------------------------------------------------------------------------
# errors
class UsageError(Error):
    """Bad input from the user (a file, a budget, a name): exit code 2, one line."""


class PartMissing(Error):
    """A part of uvm_sched this subcommand needs is not in this build (exit code 1)."""


def part(module: str, attr: str, what: str) -> Any:
    """``module.attr``, or a PartMissing error saying which part of the package is absent."""
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        missing = e.name or ""
        if missing == module or module.startswith(missing + ".") or missing.startswith(module):
            raise PartMissing(
                f"{what} ({module}) is not available in this build of uvm_sched") from None
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


def one_line(e: BaseException) -> str:
    """An exception's message on one line (its type's name when it has none)."""
    return " ".join(str(e).split()) or type(e).__name__


def exit_code(args: argparse.Namespace) -> int:
    """Run the command ``args.func`` chose and turn what happens into the exit code, with
    one line on stderr for a failure (the traceback too under ``--debug``)."""
    prog = f"{PROG} {args.command}"
    debug = bool(getattr(args, "debug", False))
    func: Callable[[argparse.Namespace, Out], int] = args.func
    try:
        out = Out(args)
        with warnings.catch_warnings():
            # a --plan for another trace is this command's own error (or, with --force, its
            # own one-line warning): the simulator's warning would say it twice
            warnings.filterwarnings("ignore", message="the plan was made for")
            return int(func(args, out) or 0)
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        return EXIT_INTERRUPTED
    except PartMissing as e:
        if debug:
            traceback.print_exc()
        sys.stderr.write(f"{prog}: error: {one_line(e)}\n")
        return EXIT_FAIL
    except ImportError as e:
        # a part that is present but leans on one that is not (or not yet) in this build
        if debug:
            traceback.print_exc()
        sys.stderr.write(f"{prog}: error: a part of uvm_sched this command needs is missing "
                         f"({one_line(e)})\n")
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
            sys.stderr.write(f"{prog}: error: {one_line(e)}\n")
            return EXIT_USAGE
        hint = "" if debug else " (rerun with --debug for the traceback)"
        sys.stderr.write(f"{prog}: internal error: {type(e).__name__}: {one_line(e)}{hint}\n")
        return EXIT_FAIL


# ----------------------------------------------------------------------------------------
# output
class Out:
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
    def progress(self, total: int | None = None, description: str = "") -> Iterator["Steps"]:
        """A rich progress bar on stderr (shown only on a terminal and without --quiet)."""
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn,
                                   TextColumn, TimeElapsedColumn)

        prog = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                        MofNCompleteColumn(), TimeElapsedColumn(), console=self.stderr,
                        transient=True, disable=not self.progress_on)
        with prog:
            task = prog.add_task(description, total=total)
            yield Steps(prog, task)


class Steps:
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


def clean(o: Any) -> Any:
    """NaN/inf -> None, recursively (JSON has no NaN; strict parsers reject it)."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {str(k): clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [clean(v) for v in o]
    try:
        import numpy as np

        if isinstance(o, np.floating):
            return clean(float(o))
        if isinstance(o, np.integer):
            return int(o)
        if isinstance(o, np.ndarray):
            return clean(o.tolist())
    except ImportError:  # pragma: no cover
        pass
    return o


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]],
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
# files written
def writable(path: str, *inputs: "str | None") -> Path:
    """``path`` as a Path whose folder exists and that names none of ``inputs`` (checked
    before long work, not after: writing a plan over its own trace would destroy it)."""
    from .._files import same_file

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
def output(path: Path) -> Iterator[Path]:
    """A temporary path to write beside ``path``, renamed over it when the block ends
    (``uvm_sched._files.atomic_path``); a failure to write (a full disk, a read-only
    folder) is bad input with the old file kept."""
    from .._files import atomic_path

    try:
        with atomic_path(path) as tmp:
            yield tmp
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e} (nothing written; "
                         "an existing file is unchanged)") from None


def write_text(path: Path, text: str) -> None:
    with output(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_report(dest: Path, html: str, plotly: str) -> "Path | None":
    """The report page; with ``--plotly file`` plotly.js beside it first (the page loads it
    by name, so no page exists without its script). Returns the script's path, if any."""
    js = None
    if plotly == "file":
        write_js = part("uvm_sched.viz", "write_plotly_js", "the HTML report")
        try:
            js = write_js(dest.parent)
        except OSError as e:
            raise UsageError(f"cannot write plotly.js beside {dest}: {e.strerror or e} "
                             "(nothing written; --plotly inline puts it in the page)") from None
    write_text(dest, html)
    return js


def report_note(dest: Path, js: "Path | None", what: str = "the report") -> str:
    """What a report command wrote, with full paths and sizes."""
    from .._fmt import fmt_bytes

    text = f"wrote {what} to {dest.resolve()} ({fmt_bytes(dest.stat().st_size)})"
    if js is not None:
        text += (f" and plotly.js beside it, {js.resolve()} ({fmt_bytes(js.stat().st_size)}; "
                 "the page loads it by name: keep the two together)")
    return text + "; open it in a browser"


def save_figure(fig, path: Path) -> None:
    """Write a plotly figure as self-contained HTML, a matplotlib one as an image."""
    with output(path) as tmp:
        if hasattr(fig, "write_html"):
            fig.write_html(str(tmp), include_plotlyjs=True)
        else:
            fig.savefig(str(tmp), format=path.suffix.lstrip(".") or None)
