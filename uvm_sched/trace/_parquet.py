"""Parquet storage of a Trace: the event columns, plus metadata and per-tick device times
in the file's key/value metadata under ``uvm_sched.*`` keys."""
from __future__ import annotations

import base64
import json
import numpy as np

from .._files import atomic_path

from ._model import COLUMNS, Trace, TraceError

SCHEMA_VERSION = 1
_MAGIC = b"PAR1"


def is_parquet(head: bytes) -> bool:
    return head.startswith(_MAGIC)


def save_parquet(trace: Trace, path) -> None:
    """Write ``trace`` to ``path`` (Parquet, zstd), atomically: a crash leaves no
    half-written file under ``path``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({k: trace.columns[k] for k in COLUMNS})
    meta = {
        b"uvm_sched.schema_version": str(SCHEMA_VERSION).encode(),
        b"uvm_sched.meta": json.dumps(trace.meta).encode(),
        # float64 little-endian; base64 keeps the footer plain text.
        b"uvm_sched.tick_ns": base64.b64encode(
            np.ascontiguousarray(trace.tick_ns, "<f8").tobytes()
        ),
    }
    table = table.replace_schema_metadata(meta)
    with atomic_path(path) as tmp:  # never a half-written trace under the real name
        pq.write_table(table, tmp, compression="zstd")
    del table
    _release_arrow_pool()


def _release_arrow_pool() -> None:
    """Hand the Arrow pool's freed buffers back to the system: its allocator keeps them
    for reuse (measured: ~60 MiB held after saving and loading a 300k-event trace), and
    a trace's life after I/O is numpy's, so they would only sit in the process's RSS."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


def load_parquet(path) -> Trace:
    """Read a trace written by ``save_parquet``. TraceError for a file that is not one
    (truncated, corrupt, foreign Parquet, or a newer schema)."""
    import pyarrow as pa

    try:
        trace = _load_parquet(path)
        _release_arrow_pool()  # the table's buffers not kept by the columns
        return trace
    except TraceError:
        raise
    except FileNotFoundError:
        raise
    # A corrupt footer surfaces as whatever pyarrow trips on (Arrow errors, OSError, or a
    # UnicodeDecodeError from a mangled column name): all of them mean "not a readable trace".
    except (pa.ArrowException, OSError, ValueError, UnicodeDecodeError, KeyError, TypeError,
            IndexError, OverflowError, MemoryError) as e:
        raise TraceError(f"{path}: not a readable Parquet trace ({type(e).__name__}: {e})") from None


def _load_parquet(path) -> Trace:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    md = table.schema.metadata or {}
    version = md.get(b"uvm_sched.schema_version")
    if version is None:
        raise TraceError(
            f"{path}: a Parquet file, but not a uvm_sched trace (no uvm_sched.schema_version key)"
        )
    raw = version
    try:
        version = int(raw)
    except ValueError:
        raise TraceError(f"{path}: unreadable trace schema version {str(raw)[:20]!r}") from None
    if version < 1:
        raise TraceError(f"{path}: trace schema version {version} is not one uvm_sched ever "
                         f"wrote (1..{SCHEMA_VERSION}): a corrupt file")
    if version > SCHEMA_VERSION:
        raise TraceError(
            f"{path}: trace schema version {version} is newer than this uvm_sched reads "
            f"({SCHEMA_VERSION}); upgrade uvm_sched"
        )
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise TraceError(f"{path}: trace file lacks column(s) {missing}")
    cols = {}
    for c in COLUMNS:
        col = table.column(c)
        if col.null_count:
            raise TraceError(f"{path}: column {c!r} has {col.null_count:,} null value(s)")
        try:
            cols[c] = col.to_numpy()
        except (pa.ArrowException, ValueError) as e:
            raise TraceError(f"{path}: column {c!r} unreadable ({e})") from None
    try:
        raw = base64.b64decode(md.get(b"uvm_sched.tick_ns", b""), validate=True)
        if len(raw) % 8:
            raise ValueError(f"{len(raw):,} bytes is not a whole number of float64")
        tick_ns = np.frombuffer(raw, "<f8").copy()
    except ValueError as e:  # binascii.Error is a ValueError
        raise TraceError(f"{path}: corrupt per-tick device times (uvm_sched.tick_ns: {e})") from None
    try:
        meta = json.loads(md.get(b"uvm_sched.meta", b"{}"))
    except (ValueError, UnicodeDecodeError) as e:
        raise TraceError(f"{path}: corrupt trace metadata (uvm_sched.meta: {e})") from None
    if not isinstance(meta, dict):
        raise TraceError(f"{path}: trace metadata is a {type(meta).__name__}, expected a JSON object")
    return Trace(cols, tick_ns=tick_ns, meta=meta)
