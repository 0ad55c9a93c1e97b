"""Traces: the event data model, files, importers/exporters and the workload recorder.

``load(path, **options)`` opens, by content (never by name):

* a uvm_sched Parquet trace (``Trace.save``);
* a PyTorch memory snapshot pickle (``torch.cuda.memory._dump_snapshot``), option
  ``device`` (CUDA device index or ``"cuda:N"``; default: the one device with events);
* a Kineto / Chrome trace JSON, plain or gzip (``torch.profiler`` with
  ``profile_memory=True``; PyTorch <= 1.9's ``[memory]`` events without ``Addr`` too),
  option ``device="cuda"`` (or ``"cuda:N"``, ``"cpu"``);
* a ``torch.profiler`` memory timeline raw export (``export_memory_timeline(
  "x.raw.json.gz")``), and a PyTorch Execution Trace (Chakra JSON, ground-truth accesses;
  option ``device``), told apart from Kineto JSON by content;
* a kernel-level workload folder (``kernels.csv`` + ``tensors.csv``, the G10 artifact's
  format), option ``iterations=2``;
* a ``.npy`` drain of the native allocator's events (``numpy.save(path,
  uvm_sched.drain_events())``).

Exporters: ``export_torch_snapshot(trace, path)`` (for ``torch.cuda._memory_viz`` /
pytorch.org/memory_viz) and ``export_perfetto(trace, path)`` (block lifetimes for
ui.perfetto.dev). ``record`` and ``zoo`` (the workload recorder) and ``recording`` (one's
own loop, live) load lazily.
"""
from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

from ._export import export_perfetto, export_torch_snapshot
from ._model import (COLUMNS, CPU_WALL_CLOCK, AccessMode, EventKind, Trace, TraceBuilder,
                     TraceError)

# name -> module providing it, imported on first use (the recorder needs torch, and its
# code may be absent from a partial checkout: importing uvm_sched.trace must not fail).
_LAZY = {"record": "uvm_sched.trace._recorder", "zoo": "uvm_sched.trace.zoo",
         "recording": "uvm_sched.trace._live"}


def _available(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


__all__ = [
    "Trace", "TraceBuilder", "TraceError", "EventKind", "AccessMode", "COLUMNS",
    "load", "export_torch_snapshot", "export_perfetto", "CPU_WALL_CLOCK",
] + [name for name, mod in _LAZY.items() if _available(mod)]


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'uvm_sched.trace' has no attribute {name!r}")
    try:
        m = importlib.import_module(mod)
    except ModuleNotFoundError as e:
        if e.name != mod:  # the module exists but something it imports is missing: say so
            raise
        raise AttributeError(
            f"uvm_sched.trace.{name} is unavailable: its module {mod} is not installed"
        ) from None
    value = m if name == "zoo" else getattr(m, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


_OPTIONS = {
    "parquet": set(),
    "snapshot": {"device"},
    "kineto": {"device"},
    "workload": {"iterations"},
    "npy": set(),
}


def _check_options(fmt: str, p: Path, options: dict) -> None:
    extra = sorted(set(options) - _OPTIONS[fmt])
    if extra:
        allowed = sorted(_OPTIONS[fmt]) or "none"
        raise TypeError(f"{p}: option(s) {extra} do not apply to a {fmt} trace (options: {allowed})")


# The largest file ``load`` reads (bytes). Pickles and JSON are parsed in memory, at 1-3x
# their size; 8 GiB is ~10x the largest memory snapshot we have seen (a GPT-style model's
# full history) and keeps a sparse or runaway file from costing more memory than a machine
# has. ``load(path, max_bytes=...)`` raises or lowers it.
MAX_FILE_BYTES = 8 << 30
_HEAD = 16  # bytes the format is recognised from


def load(path, *, max_bytes: int = MAX_FILE_BYTES, **options: Any) -> Trace:
    """Open a trace file or workload folder, recognising its format by content.

    Formats and their options are listed in the module docstring. ``max_bytes``: the
    largest file read, in bytes (gzip content: at most ``GZIP_MAX_RATIO`` times the archive
    plus 64 MiB, and at most ``max_bytes``). Raises ``FileNotFoundError`` for a
    missing path, ``TraceError`` for a file that is truncated, corrupt, inconsistent, of
    no known format, too large, or not a regular file (a FIFO or device is never read;
    nothing is half-loaded), ``TypeError`` for an option the format does not take.
    """
    from .._files import input_file

    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no such trace file or folder: {p}")
    if p.is_dir():
        from ._kernels_csv import is_workload_folder, load_kernels_csv

        if not is_workload_folder(p):
            listing = sorted(x.name for x in p.iterdir())[:10]
            raise TraceError(
                f"{p}: a folder, but not a workload folder (expected kernels.csv and "
                f"tensors.csv; it holds {listing})"
            )
        _check_options("workload", p, options)
        return _translated(p, "workload", lambda: load_kernels_csv(p, **options))
    size = input_file(p, "trace", int(max_bytes), TraceError)
    with open(p, "rb") as f:
        head = f.read(_HEAD)
    from ._kineto import is_gzip, load_kineto, looks_like_json
    from ._parquet import is_parquet, load_parquet
    from ._snapshot import is_pickle, load_snapshot

    if is_parquet(head):
        _check_options("parquet", p, options)
        return _translated(p, "parquet", lambda: load_parquet(p))
    if is_pickle(head):
        _check_options("snapshot", p, options)
        return _translated(p, "snapshot", lambda: load_snapshot(p, _read(p, size), **options))
    if is_gzip(head) or looks_like_json(head):
        _check_options("kineto", p, options)
        return _translated(p, "kineto", lambda: load_kineto(
            p, _gunzip(p, _read(p, size), _gzip_limit(size, int(max_bytes))) if is_gzip(head)
            else _read(p, size),
            **options))
    if head.startswith(b"\x93NUMPY"):
        _check_options("npy", p, options)
        return _translated(p, "npy", lambda: _load_npy(p))
    if not head:
        raise TraceError(f"{p}: empty file")
    hint = " (a zip archive: a torch.save file?)" if head.startswith(b"PK") else ""
    raise TraceError(
        f"{p}: not a trace format uvm_sched knows{hint}; expected Parquet, a PyTorch memory "
        "snapshot pickle, a Kineto/Chrome trace JSON (optionally .gz), a native event drain "
        "(.npy) or a workload folder"
    )


# gzip content read per byte of archive, at most: JSON traces compress 5-20x; a bomb of
# repeated bytes ~1000x. At 100x (+ 64 MiB for small archives) refusing a bomb costs at
# most that much memory, never the gigabytes it claims.
GZIP_MAX_RATIO = 100
_GZIP_SLACK = 64 << 20


def _gzip_limit(size: int, max_bytes: int) -> int:
    return min(max_bytes, GZIP_MAX_RATIO * size + _GZIP_SLACK)


def _read(p: Path, size: int) -> bytes:
    """The file's bytes; at most ``size`` + 1 are read (a file that grew meanwhile is cut
    there, and then fails to parse, rather than read without end)."""
    with open(p, "rb") as f:
        return f.read(size + 1)


def _gunzip(p: Path, data: bytes, limit: int) -> bytearray:
    """gzip content of at most ``limit`` bytes (``_gzip_limit``: a small archive can
    inflate a thousandfold), inflated 16 MiB at a time into one buffer, so that refusing
    costs about ``limit`` bytes, not twice that."""
    import zlib

    out = bytearray()
    rest = data
    while rest:  # gzip allows several members one after the other
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        pending = rest
        while True:
            try:
                out += d.decompress(pending, 16 << 20)
            except zlib.error as e:
                raise TraceError(f"{p}: corrupt gzip ({e})") from None
            if len(out) > limit:
                raise TraceError(
                    f"{p}: gzip content is larger than {limit:,} bytes ({GZIP_MAX_RATIO}x the "
                    f"archive's {len(data):,} bytes + 64 MiB, at most max_bytes): a "
                    "decompression bomb, or gunzip it first")
            pending = d.unconsumed_tail
            if d.eof or not pending:
                break
        if not d.eof:
            raise TraceError(f"{p}: truncated gzip (the archive ends before its content does)")
        rest = d.unused_data
    return out


def _translated(p: Path, fmt: str, read) -> Trace:
    """``read()``, with every failure to parse the file as a TraceError naming it: an
    importer's own checks raise TraceError; the rest (a 5000-digit number, a wrong type in
    a field, a missing key) are the same thing, bad input, and get the same type."""
    try:
        return read()
    except (TraceError, FileNotFoundError, PermissionError):
        raise
    except RecursionError:
        raise TraceError(f"{p}: nests too deeply to be a {fmt} trace") from None
    except MemoryError:
        raise TraceError(f"{p}: asks for more memory than exists: corrupt, or not a {fmt} "
                         "trace") from None
    except (ValueError, OverflowError, KeyError, IndexError, TypeError, AttributeError,
            EOFError, UnicodeError) as e:
        raise TraceError(f"{p}: not a readable {fmt} trace ({type(e).__name__}: {e})") from None


def _load_npy(p: Path) -> Trace:
    """A numpy ``.npy`` of native allocator events (``drain_events()``)."""
    import numpy as np

    try:
        events = np.load(p, allow_pickle=False)
    except Exception as e:  # noqa: BLE001 -- numpy raises several types on corrupt headers
        raise TraceError(f"{p}: not a readable .npy file ({type(e).__name__}: {e})") from None
    if events.dtype.names is None:
        raise TraceError(f"{p}: a .npy of {events.dtype}, not a structured array of native events")
    try:
        from ._native import trace_from_events
    except ModuleNotFoundError as e:
        if e.name != "uvm_sched.trace._native":
            raise
        raise TraceError(
            f"{p}: a native event drain, but uvm_sched.trace._native (its converter) is not "
            "installed"
        ) from None
    try:
        return trace_from_events(events, meta={"name": p.stem})
    except TraceError:
        raise
    except (ValueError, KeyError, TypeError, IndexError) as e:
        raise TraceError(f"{p}: not a native event drain ({type(e).__name__}: {e})") from None
