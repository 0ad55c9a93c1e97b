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

from .._errors import Error, Warning as _Warning
from .._files import atomic_path, write_atomic

__all__ = ["Plan", "PlanError", "PlanMismatchWarning", "ACTIONS", "PLAN_VERSION",
           "trace_fingerprint"]

PLAN_VERSION = 1

# Bounds on the numbers of a plan (a file may say anything; the executor allocates per
# allocator event of the iteration, so an unchecked period_events of 2**29 cost 4.2 GB).
# The largest iteration we have recorded has ~10**4 allocator events; 2**24 is 1,600x that.
MAX_PERIOD_EVENTS = 1 << 24
MAX_BYTES = 1 << 50  # one block, or one action's range: 1 PiB (as the trace's MAX_BLOCK_BYTES)
MAX_BUDGET_BYTES = 1 << 60  # = uvm_sched._budget.MAX_BUDGET_BYTES
MAX_PLAN_FILE_BYTES = 1 << 30  # a plan of MAX_PERIOD_EVENTS rows is ~1 GiB of JSON
SYNCS = ("marker", "period")

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


class PlanMismatchWarning(_Warning, UserWarning):
    """A plan is used with a trace it was not made for (``Plan.check_trace``)."""


class Plan:
    """Actions (``.actions``, a pandas DataFrame) plus metadata (``.meta``).

    Columns of ``actions``: ``tick`` (allocator-event ordinal in the iteration),
    ``action`` (one of ``ACTIONS``), ``block`` (ordinal, see module doc), ``persistent``,
    ``offset`` and ``bytes`` (the byte range of the block the action covers; ``bytes`` 0:
    to the block's end, whatever its size at run time).

    ``meta`` holds at least ``version``, ``budget_bytes``, ``hw``, ``mode``,
    ``period_events`` (allocator events per iteration) and ``alloc_sizes`` (the byte size
    of each allocation of the iteration, in order: the executor's divergence check; 0 for
    an allocation whose size changes with the batch's shapes, checked by position only).
    """

    def __init__(self, actions, meta: Mapping[str, Any]) -> None:
        import pandas as pd

        try:
            df = pd.DataFrame(actions).copy()
        except (ValueError, TypeError) as e:
            raise PlanError(f"plan actions are not a table ({e})") from None
        if len(df) == 0:
            df = pd.DataFrame({c: pd.Series(dtype=t) for c, t in _COLUMNS.items()})
        missing = [c for c in _COLUMNS if c not in df.columns]
        if missing:
            raise PlanError(f"plan actions lack column(s) {missing}")
        df = df[list(_COLUMNS)]
        for c, t in _COLUMNS.items():
            if t is object:
                continue
            col = df[c]
            if col.dtype.kind == ("b" if t is bool else "i") or (t is not bool and col.dtype.kind == "u"):
                df[c] = col.astype(t)  # already typed (the planner's own frames): no cell walk
                continue
            ok = col.map(lambda v: isinstance(v, (bool, np.bool_)) if t is bool else
                         isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)))
            if not ok.all():
                i = int(np.flatnonzero(~ok.to_numpy(bool))[0])
                raise PlanError(f"plan row {i}: {c} is {col.iloc[i]!r}, expected "
                                + ("true/false" if t is bool else "a whole number"))
            try:
                df[c] = col.astype(t)
            except (OverflowError, ValueError, TypeError) as e:
                raise PlanError(f"plan column {c!r} does not fit {np.dtype(t)} ({e})") from None
        bad = ~df["action"].isin(ACTIONS)
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise PlanError(
                f"plan row {i}: unknown action {df['action'].iloc[i]!r}; known: {', '.join(ACTIONS)}"
            )
        if not isinstance(meta, Mapping):
            raise PlanError(f"plan metadata is a {type(meta).__name__}, expected a mapping")
        meta = dict(meta)
        meta.setdefault("version", PLAN_VERSION)
        for key in ("budget_bytes", "period_events", "alloc_sizes"):
            if key not in meta:
                raise PlanError(f"plan metadata lacks {key!r}")
        _meta_int(meta, "version", 1, PLAN_VERSION)
        _meta_int(meta, "budget_bytes", 1, MAX_BUDGET_BYTES)
        period = _meta_int(meta, "period_events", 1, MAX_PERIOD_EVENTS)
        if "period_start_event" in meta:
            _meta_int(meta, "period_start_event", 0, 1 << 62)
        sizes = meta["alloc_sizes"]
        if not isinstance(sizes, (list, tuple, np.ndarray)):
            raise PlanError(f"plan alloc_sizes is a {type(sizes).__name__}, expected a list of bytes")
        if len(sizes) > period:
            raise PlanError(f"plan has {len(sizes):,} alloc_sizes but only {period:,} allocator "
                            "events per iteration")
        if not _all_bytes(sizes):
            for j, v in enumerate(sizes):  # the first one that is not, for the message
                if not _is_int(v) or not 0 <= v <= MAX_BYTES:
                    raise PlanError(f"plan alloc_sizes[{j}] is {v!r}, expected bytes in "
                                    f"0..{MAX_BYTES:,}")
        if meta.get("sync", "marker") not in SYNCS:
            raise PlanError(f"plan sync is {meta.get('sync')!r}; known: {', '.join(SYNCS)}")
        if "mode" in meta:
            from ._planner import MODES

            if meta["mode"] not in MODES:
                raise PlanError(f"plan mode is {meta['mode']!r}; known: {', '.join(MODES)}")
        fp = meta.get("trace_fingerprint")
        if fp is not None and not (isinstance(fp, str) and len(fp) <= 128):
            raise PlanError(f"plan trace_fingerprint is {fp!r}, expected a hex string")
        if len(df) and ((df["tick"] < 0) | (df["tick"] >= period)).any():
            i = int(np.flatnonzero(((df["tick"] < 0) | (df["tick"] >= period)).to_numpy())[0])
            raise PlanError(
                f"plan row {i}: tick {int(df['tick'].iloc[i])} is outside the iteration "
                f"(0..{period - 1} allocator events)"
            )
        for c, hi in (("block", 1 << 62), ("offset", MAX_BYTES), ("bytes", MAX_BYTES)):
            out = ((df[c] < 0) | (df[c] > hi)).to_numpy()
            if out.any():
                i = int(np.flatnonzero(out)[0])
                raise PlanError(f"plan row {i}: {c} {int(df[c].iloc[i]):,} is outside 0..{hi:,}")
        n_alloc = len(sizes)
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
        """Counts and bytes per action, for humans and the plan file's header (a
        whole-block action on a position sized at run time counts the planned size)."""
        acts = self.actions
        planned = self.meta.get("planned_alloc_sizes")
        if planned is not None and len(acts):
            nbytes = acts["bytes"].to_numpy(np.int64).copy()
            blk = acts["block"].to_numpy(np.int64)
            fill = (nbytes == 0) & ~acts["persistent"].to_numpy(bool) & (blk < len(planned))
            nbytes[fill] = np.asarray(planned, np.int64)[blk[fill]]
            acts = acts.assign(bytes=nbytes)
        g = acts.groupby("action")["bytes"]
        return {a: {"count": int(g.count().get(a, 0)), "bytes": int(g.sum().get(a, 0))}
                for a in ACTIONS}

    # -- files -------------------------------------------------------------------------
    def save(self, path) -> None:
        """Write the plan: ``.json`` (human-readable) or ``.parquet``, atomically (whole or
        not at all; an existing file stays as it was on failure). Raises ``OSError``."""
        path = Path(path)
        if path.suffix == ".parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            t = pa.Table.from_pandas(self.actions, preserve_index=False)
            t = t.replace_schema_metadata({b"uvm_sched.plan_meta": json.dumps(
                self.meta, default=_json_default).encode()})
            with atomic_path(path) as tmp:
                pq.write_table(t, tmp)
            return
        doc = {
            "format": "uvm_sched.plan",
            "version": PLAN_VERSION,
            "meta": self.meta,
            "summary": self.summary(),
            "columns": list(_COLUMNS),
            "actions": [list(r) for r in self.actions.itertuples(index=False, name=None)],
        }
        write_atomic(path, json.dumps(doc, indent=1, default=_json_default))

    @classmethod
    def load(cls, path) -> "Plan":
        """Read a plan written by ``save`` (JSON or Parquet). Raises ``FileNotFoundError``,
        or ``PlanError`` for anything else wrong with the file: not a regular file, over
        ``MAX_PLAN_FILE_BYTES``, not a plan, truncated, or a number out of its bounds."""
        from .._files import input_file

        path = Path(path)
        input_file(path, "plan", MAX_PLAN_FILE_BYTES, PlanError)
        try:
            return cls._load(path)
        except (PlanError, FileNotFoundError):
            raise
        except OSError as e:
            raise PlanError(f"{path}: cannot read plan ({e})") from None
        except RecursionError:
            raise PlanError(f"{path}: nests too deeply to be a plan") from None
        except Exception as e:  # noqa: BLE001 - pyarrow/pandas/json raise a dozen types on a bad file
            raise PlanError(f"{path}: not a readable plan ({type(e).__name__}: {e})") from None

    @classmethod
    def _load(cls, path: Path) -> "Plan":
        with open(path, "rb") as f:
            head = f.read(4)
        if head == b"PAR1":
            import pyarrow.parquet as pq

            t = pq.read_table(path)
            raw = (t.schema.metadata or {}).get(b"uvm_sched.plan_meta")
            if raw is None:
                raise PlanError(f"{path}: a Parquet file, but not a uvm_sched plan")
            return cls._checked(t.to_pandas(), json.loads(raw), path)
        try:
            doc = json.loads(path.read_bytes())
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise PlanError(f"{path}: not a plan file (JSON error: {e})") from None
        if not isinstance(doc, dict) or doc.get("format") != "uvm_sched.plan":
            raise PlanError(f"{path}: not a uvm_sched plan (no \"format\": \"uvm_sched.plan\")")
        for key, typ in (("actions", list), ("columns", list), ("meta", dict)):
            if not isinstance(doc.get(key), typ):
                raise PlanError(f"{path}: plan file lacks {key!r} (a JSON "
                                f"{'object' if typ is dict else 'array'})")
        import pandas as pd

        cols = doc["columns"]
        if sorted(map(str, cols)) != sorted(_COLUMNS) or len(cols) != len(_COLUMNS):
            raise PlanError(f"{path}: plan columns are {cols}, expected {list(_COLUMNS)}")
        bad = next((i for i, r in enumerate(doc["actions"])
                    if not isinstance(r, list) or len(r) != len(cols)), None)
        if bad is not None:
            raise PlanError(f"{path}: plan row {bad} is {doc['actions'][bad]!r}, expected "
                            f"{len(cols)} values ({', '.join(cols)})")
        df = pd.DataFrame(doc["actions"], columns=cols)
        return cls._checked(df, doc["meta"], path)

    @classmethod
    def _checked(cls, df, meta, path) -> "Plan":
        if not isinstance(meta, dict):
            raise PlanError(f"{path}: plan metadata is a {type(meta).__name__}, expected an object")
        try:
            return cls(df, meta)
        except PlanError as e:
            raise PlanError(f"{path}: {e}") from None

    # -- the trace a plan is for --------------------------------------------------------
    def check_trace(self, trace) -> None:
        """Raise ``PlanError`` unless this plan was made for ``trace``: the same allocator
        events (``meta["trace_fingerprint"]``), or at least an iteration that occurs in it
        (the plan's ``alloc_sizes`` in order among the trace's allocations). A plan for
        another trace names blocks that are not there; simulated, it only measures noise."""
        fp = self.meta.get("trace_fingerprint")
        if fp is not None and fp == trace_fingerprint(trace):
            return
        from ..trace._model import EventKind

        alloc = trace.size[trace.kind == EventKind.ALLOC]
        want = np.asarray(self.meta["alloc_sizes"], dtype=np.int64)
        if _occurs(alloc, want):
            return
        src = self.meta.get("source") or "another trace"
        raise PlanError(
            f"the plan was made for {src} (fingerprint {fp or 'none'}), not this trace "
            f"(fingerprint {trace_fingerprint(trace)}): its iteration of {len(want):,} "
            f"allocations ({', '.join(f'{int(v):,}' for v in want[:3])}"
            f"{', ...' if len(want) > 3 else ''} bytes) does not occur among the trace's "
            f"{len(alloc):,} allocations. Plan for this trace (uvm-sched plan), or pass "
            "--force to simulate it anyway")


def trace_fingerprint(trace) -> str:
    """A short hex digest of a trace's allocator events (the kind and bytes of every alloc
    and free, in order): what a plan is made from, so what must match to replay it."""
    import hashlib

    from ..trace._model import EventKind

    sel = trace.kind <= EventKind.FREE
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(trace.kind[sel], np.uint8).tobytes())
    h.update(np.ascontiguousarray(trace.size[sel], "<i8").tobytes())
    return h.hexdigest()[:24]


def _occurs(hay: np.ndarray, needle: np.ndarray) -> bool:
    """True when ``needle`` occurs as a contiguous run in ``hay`` (candidates narrowed one
    position at a time: O(len(hay) + matches))."""
    m = len(needle)
    if m == 0:
        return True
    if m > len(hay):
        return False
    cand = np.arange(len(hay) - m + 1)
    for j in range(m):
        if not len(cand):
            return False
        if needle[j]:  # 0: any size (a plan's position sized at run time)
            cand = cand[hay[cand + j] == needle[j]]
    return bool(len(cand))


def _all_bytes(sizes) -> bool:
    """Every entry of ``sizes`` is a whole number (not a bool) in 0..MAX_BYTES, checked
    without a Python call per entry (a plan at 1M events has half a million): an integer
    array by its range, a list of plain ints by its types and range (anything else is
    left to the per-entry check, which names the first bad one)."""
    if isinstance(sizes, np.ndarray):
        return sizes.dtype.kind in "iu" and (not len(sizes) or (
            int(sizes.min()) >= 0 and int(sizes.max()) <= MAX_BYTES))
    return set(map(type, sizes)) <= {int} and (not len(sizes) or (
        min(sizes) >= 0 and max(sizes) <= MAX_BYTES))


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _meta_int(meta: dict, key: str, lo: int, hi: int) -> int:
    v = meta[key]
    if not _is_int(v) or not lo <= v <= hi:
        raise PlanError(f"plan {key} is {v!r}, expected a whole number in {lo:,}..{hi:,}")
    return int(v)


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
