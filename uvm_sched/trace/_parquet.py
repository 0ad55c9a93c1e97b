"""Parquet storage of a Trace: the event columns, plus metadata and per-tick device times
in the file's key/value metadata under ``uvm_sched.*`` keys."""
from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np

from ._model import COLUMNS, Trace, TraceError

SCHEMA_VERSION = 1
_MAGIC = b"PAR1"


def is_parquet(head: bytes) -> bool:
    return head.startswith(_MAGIC)


def save_parquet(trace: Trace, path) -> None:
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
    tmp = Path(str(path) + ".tmp")
    pq.write_table(table, tmp, compression="zstd")
    tmp.replace(path)  # never leave a half-written trace under the real name


def load_parquet(path) -> Trace:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as e:
        raise TraceError(f"{path}: not a readable Parquet trace ({e})") from None
    md = table.schema.metadata or {}
    version = md.get(b"uvm_sched.schema_version")
    if version is None:
        raise TraceError(
            f"{path}: a Parquet file, but not a uvm_sched trace (no uvm_sched.schema_version key)"
        )
    if int(version) > SCHEMA_VERSION:
        raise TraceError(
            f"{path}: trace schema version {int(version)} is newer than this uvm_sched reads "
            f"({SCHEMA_VERSION}); upgrade uvm_sched"
        )
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise TraceError(f"{path}: trace file lacks column(s) {missing}")
    cols = {c: table.column(c).to_numpy() for c in COLUMNS}
    tick_ns = np.frombuffer(base64.b64decode(md.get(b"uvm_sched.tick_ns", b"")), "<f8")
    meta = json.loads(md.get(b"uvm_sched.meta", b"{}"))
    return Trace(cols, tick_ns=tick_ns.copy(), meta=meta)
