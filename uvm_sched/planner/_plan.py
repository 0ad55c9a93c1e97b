"""The Plan: a table of actions the native executor fires within every iteration.

Time in a plan is the runtime's clock: ``tick`` is the ordinal of an *allocator event*
(malloc or free, counted from 0 at the start of an iteration). An action with tick ``k``
is issued right after allocator event ``k`` of the iteration has been served. The
simulator maps each allocator event back to the compute tick where it happens, so both
sides share this one definition.

Blocks are named by ``block`` (an ordinal) and ``persistent``:

* ``persistent=False``: the block is the ``block``-th allocation of the current
  iteration (0-based);
* ``persistent=True``: the block outlives iterations (weights, optimizer state); ``block``
  is its ordinal among all allocations since the trace/runtime started (warm-up included).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from .._errors import Error

__all__ = ["Plan", "PlanError", "ACTIONS", "PLAN_VERSION"]

PLAN_VERSION = 1

# The order is the ABI with the native executor (action codes 0..5): append only.
ACTIONS = (
    "prefetch_to_device",
    "prefetch_to_host",
    "advise_preferred_host",
    "advise_accessed_by",
    "advise_read_mostly",
    "discard",
)

_COLUMNS = {
    "tick": np.int64,
    "action": object,
    "block": np.int64,
    "persistent": bool,
    "offset": np.int64,
    "bytes": np.int64,
}


class PlanError(Error, ValueError):
    """A plan is malformed, of an unknown version, or does not fit the trace/runtime."""


class Plan:
    """Actions (``.actions``, a pandas DataFrame) plus metadata (``.meta``).

    Columns of ``actions``: ``tick`` (allocator-event ordinal in the iteration),
    ``action`` (one of ``ACTIONS``), ``block`` (ordinal, see module doc), ``persistent``,
    ``offset`` and ``bytes`` (the byte range of the block the action covers).

    ``meta`` holds at least ``version``, ``budget_bytes``, ``hw``, ``mode``,
    ``period_events`` (allocator events per iteration) and ``alloc_sizes`` (the byte size
    of each allocation of the iteration, in order: the executor's divergence check).
    """

    def __init__(self, actions, meta: Mapping[str, Any]) -> None:
        import pandas as pd

        df = pd.DataFrame(actions).copy()
        if len(df) == 0:
            df = pd.DataFrame({c: pd.Series(dtype=t) for c, t in _COLUMNS.items()})
        missing = [c for c in _COLUMNS if c not in df.columns]
        if missing:
            raise PlanError(f"plan actions lack column(s) {missing}")
        df = df[list(_COLUMNS)].astype({c: t for c, t in _COLUMNS.items() if t is not object})
        bad = ~df["action"].isin(ACTIONS)
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise PlanError(
                f"plan row {i}: unknown action {df['action'].iloc[i]!r}; known: {', '.join(ACTIONS)}"
            )
        meta = dict(meta)
        meta.setdefault("version", PLAN_VERSION)
        for key in ("budget_bytes", "period_events", "alloc_sizes"):
            if key not in meta:
                raise PlanError(f"plan metadata lacks {key!r}")
        period = int(meta["period_events"])
        if len(df) and ((df["tick"] < 0) | (df["tick"] >= period)).any():
            i = int(np.flatnonzero(((df["tick"] < 0) | (df["tick"] >= period)).to_numpy())[0])
            raise PlanError(
                f"plan row {i}: tick {int(df['tick'].iloc[i])} is outside the iteration "
                f"(0..{period - 1} allocator events)"
            )
        n_alloc = len(meta["alloc_sizes"])
        local = df[~df["persistent"]]
        if len(local) and (local["block"] >= n_alloc).any():
            b = int(local["block"].max())
            raise PlanError(f"plan names iteration block {b} but the iteration has {n_alloc} allocations")
        self.actions = df.sort_values("tick", kind="stable").reset_index(drop=True)
        self.meta = meta

    def __len__(self) -> int:
        return len(self.actions)

    def __repr__(self) -> str:
        counts = self.actions["action"].value_counts().to_dict()
        return (f"<Plan {self.meta.get('mode', '?')} budget={int(self.meta['budget_bytes']):,} B "
                f"period={self.meta['period_events']} events, {len(self)} actions {counts}>")

    def summary(self) -> dict[str, Any]:
        """Counts and bytes per action, for humans and the plan file's header."""
        g = self.actions.groupby("action")["bytes"]
        return {a: {"count": int(g.count().get(a, 0)), "bytes": int(g.sum().get(a, 0))}
                for a in ACTIONS}

    # -- files -------------------------------------------------------------------------
    def save(self, path) -> None:
        """Write the plan: ``.json`` (human-readable) or ``.parquet``."""
        path = Path(path)
        if path.suffix == ".parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            t = pa.Table.from_pandas(self.actions, preserve_index=False)
            t = t.replace_schema_metadata({b"uvm_sched.plan_meta": json.dumps(self.meta).encode()})
            pq.write_table(t, path)
            return
        doc = {
            "format": "uvm_sched.plan",
            "version": PLAN_VERSION,
            "meta": self.meta,
            "summary": self.summary(),
            "columns": list(_COLUMNS),
            "actions": [list(r) for r in self.actions.itertuples(index=False, name=None)],
        }
        path.write_text(json.dumps(doc, indent=1, default=_json_default))

    @classmethod
    def load(cls, path) -> "Plan":
        """Read a plan written by ``save`` (JSON or Parquet)."""
        path = Path(path)
        try:
            with open(path, "rb") as f:
                head = f.read(4)
        except OSError as e:
            raise PlanError(f"{path}: cannot read plan ({e})") from None
        if head == b"PAR1":
            import pyarrow.parquet as pq

            t = pq.read_table(path)
            raw = (t.schema.metadata or {}).get(b"uvm_sched.plan_meta")
            if raw is None:
                raise PlanError(f"{path}: a Parquet file, but not a uvm_sched plan")
            return cls._checked(t.to_pandas(), json.loads(raw), path)
        try:
            doc = json.loads(path.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise PlanError(f"{path}: not a plan file (JSON error: {e})") from None
        if not isinstance(doc, dict) or doc.get("format") != "uvm_sched.plan":
            raise PlanError(f"{path}: not a uvm_sched plan (no \"format\": \"uvm_sched.plan\")")
        import pandas as pd

        df = pd.DataFrame(doc["actions"], columns=doc["columns"])
        return cls._checked(df, doc["meta"], path)

    @classmethod
    def _checked(cls, df, meta, path) -> "Plan":
        v = int(meta.get("version", 0))
        if v > PLAN_VERSION or v < 1:
            raise PlanError(f"{path}: plan version {v} is not one this uvm_sched reads (1..{PLAN_VERSION})")
        return cls(df, meta)


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, (np.bool_,)):
        return bool(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")
