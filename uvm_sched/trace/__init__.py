"""Traces: the event data model, files, importers/exporters and the workload recorder."""
from __future__ import annotations

from pathlib import Path

from ._model import COLUMNS, AccessMode, EventKind, Trace, TraceBuilder, TraceError

__all__ = ["Trace", "TraceBuilder", "TraceError", "EventKind", "AccessMode", "COLUMNS", "load"]


def load(path) -> Trace:
    """Open a trace file, recognising its format by content (not by name).

    Formats: a uvm_sched Parquet trace; more are added by the importers.
    Raises ``TraceError`` for a file that is truncated, corrupt or of no known format.
    """
    from ._parquet import is_parquet, load_parquet

    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no such trace file or folder: {p}")
    if p.is_file():
        with open(p, "rb") as f:
            head = f.read(16)
        if is_parquet(head):
            return load_parquet(p)
    raise TraceError(f"{p}: not a trace format uvm_sched knows")
