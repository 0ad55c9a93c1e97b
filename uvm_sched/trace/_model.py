"""The trace data model: one row per allocator/access/marker event, stored as columns.

Vocabulary (used across the package):

* **tick** -- one step of the compute stream (one op or kernel). Events carry the tick
  at which they happen; within a tick the order of rows is the order of events:
  allocations, then the accesses of the tick's kernel, then frees.
  ``Trace.tick_ns[t]`` is the device time of tick ``t`` in nanoseconds (NaN where unknown).
* **block** -- one allocation, from its ALLOC to its FREE. Block ids are unique within a
  trace and never reused (importers that see reused addresses mint new ids), so a block id
  names one lifetime.
* **iteration** -- a MARK event at tick ``t`` says a training iteration starts at ``t``.
* **allocator event** -- an ALLOC or FREE row; the runtime (and a ``Plan``) count time in
  allocator events, since that is all an allocator sees.
"""
from __future__ import annotations

import json
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from .._errors import Error

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["EventKind", "AccessMode", "Trace", "TraceBuilder", "TraceError", "COLUMNS"]


class TraceError(Error, ValueError):
    """A trace (or a file holding one) is inconsistent; the message names the first bad row."""


class EventKind(IntEnum):
    ALLOC = 0
    FREE = 1
    ACCESS = 2
    MARK = 3


class AccessMode(IntEnum):
    NONE = 0
    READ = 1
    WRITE = 2
    READ_WRITE = 3


# name -> numpy dtype; the order is the on-disk column order.
COLUMNS: dict[str, np.dtype] = {
    "tick": np.dtype(np.int64),
    "t_ns": np.dtype(np.int64),
    "kind": np.dtype(np.uint8),
    "block": np.dtype(np.int64),  # -1 for MARK rows
    "size": np.dtype(np.int64),  # bytes of the block (ALLOC/FREE/ACCESS rows), 0 for MARK
    "stream": np.dtype(np.int64),
    "device": np.dtype(np.int16),
    "mode": np.dtype(np.uint8),  # AccessMode, ACCESS rows only
    "offset": np.dtype(np.int64),  # byte offset of a partial access; -1 = whole block
    "length": np.dtype(np.int64),  # bytes of a partial access; -1 = whole block
}

# Bounds on numbers read from a file. A block of more than 1 PiB exists on no device or
# host; and with every size under it, a trace whose allocations add up past 2**62 bytes
# would overflow the int64 running total (peak_bytes) -- both can only be corruption.
MAX_BLOCK_BYTES = 1 << 50
MAX_TOTAL_BYTES = 1 << 62

#: ``meta["time_source"]`` of a trace timed by a CPU's clock (a CPU profile).
CPU_WALL_CLOCK = "CPU wall clock — not a GPU estimate"

_DEFAULTS = {"stream": 0, "device": 0, "mode": 0, "offset": -1, "length": -1}


def _as_column(name: str, values: Any, dtype: np.dtype) -> np.ndarray:
    """``values`` as a contiguous array of ``dtype``; TraceError where that would lose
    information (non-numbers, NaN, fractions, values out of the column's range)."""
    try:
        src = np.asarray(values)
        if src.dtype.kind == "f":
            ok = np.isfinite(src)
            if not ok.all():
                row = int(np.flatnonzero(~ok.ravel())[0])
                raise TraceError(f"column {name!r} has a non-finite value at row {row:,}")
            frac = src != np.floor(src)
            if frac.any():
                row = int(np.flatnonzero(frac.ravel())[0])
                raise TraceError(
                    f"column {name!r} has a fractional value {float(src.ravel()[row])} at row {row:,}"
                )
        elif src.dtype.kind not in "iub":
            raise TraceError(f"column {name!r} holds {src.dtype} values, expected integers")
        if src.size and src.dtype.kind in "iuf":
            info = np.iinfo(dtype)
            lo, hi = src.min(), src.max()
            if lo < info.min or hi > info.max:
                raise TraceError(
                    f"column {name!r} has values in [{lo}, {hi}], outside {dtype} "
                    f"[{info.min}, {info.max}]"
                )
        return np.ascontiguousarray(src, dtype=dtype)
    except (TypeError, ValueError, OverflowError) as e:
        if isinstance(e, TraceError):
            raise
        raise TraceError(f"column {name!r} cannot be read as {dtype} ({e})") from None


class Trace:
    """An immutable, validated event trace (struct of arrays).

    ``events``: mapping of column name -> 1-D array (all of equal length; ``tick``, ``kind``,
    ``block`` and ``size`` are required, ``t_ns`` defaults to ``tick``, the rest to their
    neutral values). ``tick_ns``: device time per tick in ns (length ``n_ticks``; NaN where
    unknown; ``None`` = unknown everywhere). ``meta``: JSON-able metadata (``source``,
    ``name``, ``hw``, ``units``...).
    """

    def __init__(
        self,
        events: Mapping[str, Any],
        *,
        tick_ns: Any = None,
        meta: Mapping[str, Any] | None = None,
        validate: bool = True,
    ) -> None:
        missing = [c for c in ("tick", "kind", "block", "size") if c not in events]
        if missing:
            raise TraceError(f"trace events lack required column(s) {missing}")
        n = len(np.asarray(events["tick"]))
        cols: dict[str, np.ndarray] = {}
        for name, dtype in COLUMNS.items():
            if name in events and events[name] is not None:
                arr = _as_column(name, events[name], dtype)
            elif name == "t_ns":
                arr = np.asarray(events["tick"], dtype=dtype).copy()
            else:
                arr = np.full(n, _DEFAULTS[name], dtype=dtype)
            if arr.shape != (n,):
                raise TraceError(f"column {name!r} has shape {arr.shape}, expected ({n},)")
            arr.setflags(write=False)
            cols[name] = arr
        self._cols = cols
        # max(0, ...): a trace of negative ticks must reach validate() to be named there.
        n_ticks = max(0, int(cols["tick"].max()) + 1) if n else 0
        if tick_ns is None:
            # A corrupt tick column must not ask for gigabytes of NaN; sparse ticks this far
            # apart can still be had by passing tick_ns.
            if n_ticks > 64 * n + (1 << 26):
                raise TraceError(
                    f"events reach tick {n_ticks - 1:,} with only {n:,} events: a corrupt tick "
                    "column? (pass tick_ns explicitly for a trace this sparse)"
                )
            tns = np.full(n_ticks, np.nan)
        else:
            try:
                tns = np.asarray(tick_ns, dtype=np.float64).copy()
            except (TypeError, ValueError) as e:
                raise TraceError(f"tick_ns is not an array of numbers ({e})") from None
            if tns.ndim != 1 or len(tns) < n_ticks:
                raise TraceError(
                    f"tick_ns has {tns.shape} entries but the events reach tick {n_ticks - 1}"
                )
        tns.setflags(write=False)
        self.tick_ns: np.ndarray = tns
        self.meta: dict[str, Any] = dict(meta or {})
        try:
            json.dumps(self.meta)  # metadata must survive a file round trip
        except (TypeError, ValueError) as e:
            raise TraceError(f"trace meta must be JSON-able ({e})") from None
        if validate:
            self.validate()

    def __setstate__(self, state: dict) -> None:
        # pickle/copy rebuild the arrays writeable: freeze them again (a Trace is immutable)
        self.__dict__.update(state)
        for arr in self._cols.values():
            arr.setflags(write=False)
        self.tick_ns.setflags(write=False)

    # -- columns -------------------------------------------------------------------------
    def __getattr__(self, name: str) -> np.ndarray:
        cols = self.__dict__.get("_cols")
        if cols is not None and name in cols:
            return cols[name]
        raise AttributeError(name)

    @property
    def columns(self) -> dict[str, np.ndarray]:
        """The event columns (read-only arrays), keyed by name."""
        return dict(self._cols)

    def __len__(self) -> int:
        return len(self._cols["tick"])

    @property
    def n_events(self) -> int:
        return len(self)

    @property
    def n_ticks(self) -> int:
        """Number of ticks (``len(tick_ns)``)."""
        return len(self.tick_ns)

    def __repr__(self) -> str:
        name = self.meta.get("name") or self.meta.get("source") or "trace"
        return (
            f"<Trace {name}: {self.n_events:,} events, {self.n_ticks:,} ticks, "
            f"{len(self.iteration_starts)} marks, peak {self.peak_bytes:,} bytes>"
        )

    # -- derived views -------------------------------------------------------------------
    @property
    def time_source(self) -> str:
        """Where the device time per tick comes from, in words: ``meta["time_source"]``
        (written by importers and recorders: "GPU trace (kernel durations)", "roofline from
        recorded shapes (<hw>)", ``CPU_WALL_CLOCK``...), else what the meta implies. Every
        figure in seconds derived from this trace carries it."""
        m = self.meta
        src = m.get("time_source")
        if isinstance(src, str) and src:
            return src
        clock = m.get("clock")
        if isinstance(clock, str) and clock.startswith("assumed"):
            return clock
        if clock == "none":
            return "unknown (the trace has no clock)"
        if m.get("source") == "recorder":
            return f"roofline from recorded shapes ({m.get('hw', '?')})"
        if m.get("source") == "kineto" and m.get("device") == "cpu":
            return CPU_WALL_CLOCK
        return "the trace's own clock"

    @property
    def iteration_starts(self) -> np.ndarray:
        """Ticks at which MARK events say an iteration starts (sorted, unique)."""
        return np.unique(self._cols["tick"][self._cols["kind"] == EventKind.MARK])

    def block_table(self) -> pd.DataFrame:
        """Per-block summary as a pandas DataFrame indexed by block id: size (bytes),
        alloc_tick, free_tick (-1 if never freed), alloc_row, free_row, stream."""
        import pandas as pd

        k, b = self._cols["kind"], self._cols["block"]
        a = np.flatnonzero(k == EventKind.ALLOC)
        f = np.flatnonzero(k == EventKind.FREE)
        df = pd.DataFrame(
            {
                "size": self._cols["size"][a],
                "alloc_tick": self._cols["tick"][a],
                "alloc_row": a,
                "stream": self._cols["stream"][a],
            },
            index=pd.Index(b[a], name="block"),
        )
        free_tick = pd.Series(self._cols["tick"][f], index=b[f])
        free_row = pd.Series(f, index=b[f])
        df["free_tick"] = free_tick.reindex(df.index).fillna(-1).astype(np.int64)
        df["free_row"] = free_row.reindex(df.index).fillna(-1).astype(np.int64)
        return df

    def live_bytes(self) -> np.ndarray:
        """Bytes allocated and not yet freed after each event (int64, one per row)."""
        k = self._cols["kind"]
        delta = np.where(k == EventKind.ALLOC, self._cols["size"], 0) - np.where(
            k == EventKind.FREE, self._cols["size"], 0
        )
        return np.cumsum(delta, dtype=np.int64)

    @property
    def peak_bytes(self) -> int:
        """Largest number of bytes live at once (allocator view), in bytes."""
        if not len(self):
            return 0
        return int(max(0, self.live_bytes().max()))

    @property
    def has_accesses(self) -> bool:
        """True when the trace carries ground-truth ACCESS rows."""
        return bool(np.any(self._cols["kind"] == EventKind.ACCESS))

    def to_pandas(self) -> pd.DataFrame:
        """The events as a pandas DataFrame (``kind``/``mode`` as categorical names)."""
        import pandas as pd

        df = pd.DataFrame({k: v for k, v in self._cols.items()})
        df["kind"] = pd.Categorical.from_codes(
            df["kind"].astype(np.int64), [e.name.lower() for e in EventKind]
        )
        df["mode"] = pd.Categorical.from_codes(
            df["mode"].astype(np.int64), [m.name.lower() for m in AccessMode]
        )
        return df

    def slice_ticks(self, start: int, stop: int) -> "Trace":
        """Events with ``start <= tick < stop``, ticks renumbered from 0. Blocks alive at
        ``start`` are re-allocated at tick 0 (so the slice validates on its own)."""
        t, k, b = self._cols["tick"], self._cols["kind"], self._cols["block"]
        inside = (t >= start) & (t < stop)
        before = t < start
        allocated_before = set(b[before & (k == EventKind.ALLOC)].tolist())
        freed_before = set(b[before & (k == EventKind.FREE)].tolist())
        carried = np.array(sorted(allocated_before - freed_before), dtype=np.int64)
        bt = self.block_table()
        pre = {
            "tick": np.zeros(len(carried), np.int64),
            "t_ns": np.full(len(carried), self._cols["t_ns"][inside][0] if inside.any() else 0),
            "kind": np.full(len(carried), EventKind.ALLOC, np.uint8),
            "block": carried,
            "size": bt.loc[carried, "size"].to_numpy() if len(carried) else carried,
            "stream": bt.loc[carried, "stream"].to_numpy() if len(carried) else carried,
            "device": self._cols["device"][bt.loc[carried, "alloc_row"].to_numpy()]
            if len(carried)
            else carried,
        }
        cols = {}
        for name in COLUMNS:
            main = self._cols[name][inside]
            if name == "tick":
                main = main - start
            extra = pre.get(name, np.full(len(carried), _DEFAULTS.get(name, 0)))
            cols[name] = np.concatenate([np.asarray(extra, COLUMNS[name]), main])
        return Trace(cols, tick_ns=self.tick_ns[start:stop], meta=self.meta)

    @property
    def has_clock(self) -> bool:
        """False when the trace holds no time at all: no known ``tick_ns`` and ``t_ns`` just
        the tick (or ``meta["clock"] == "none"``). Its times are then unknown, not zero."""
        if np.isfinite(self.tick_ns).any():
            return True
        return not (self.meta.get("clock") == "none"
                    or np.array_equal(self._cols["t_ns"], self._cols["tick"]))

    def assume_tick_ns(self, ns: float) -> "Trace":
        """This trace with ``ns`` nanoseconds assumed for every tick of unknown device time,
        and ``meta["clock"]`` saying so (for traces without a clock, to simulate at all)."""
        if not (isinstance(ns, (int, float)) and np.isfinite(ns) and ns > 0):
            raise ValueError(f"assumed tick time must be a positive number of ns, got {ns!r}")
        tns = np.where(np.isfinite(self.tick_ns), self.tick_ns, float(ns))
        meta = dict(self.meta, clock=f"assumed {float(ns):g} ns per tick")
        return Trace(self._cols, tick_ns=tns, meta=meta, validate=False)

    def with_compute_times(self, measured: Any) -> "Trace":
        """This trace with measured compute times in place of its own estimate (the
        roofline of a recorded trace): every tick scaled so that the median iteration takes
        the median measured one. ``measured``: a Trace with kernel times (a GPU profile)
        or with timed markers (``Scheduler.trace()``), or seconds per iteration. The rule
        and why: ``_compute``; ``time_source`` says where the time then comes from."""
        from ._compute import with_compute_times

        return with_compute_times(self, measured)

    # -- validation ----------------------------------------------------------------------
    def validate(self) -> None:
        """Raise ``TraceError`` naming the first bad row: negative size or one over
        ``MAX_BLOCK_BYTES``, allocations adding up past ``MAX_TOTAL_BYTES``, ticks or time going
        backwards, free/access before alloc, double alloc, double free, access after free,
        unknown kind or access mode, negative or infinite device time in ``tick_ns``. O(n log n)."""
        c = self._cols
        n = len(self)
        neg = np.flatnonzero(self.tick_ns < 0)  # NaN (unknown) compares False
        if len(neg):
            t = int(neg[0])
            raise TraceError(f"invalid trace: tick_ns[{t:,}] = {self.tick_ns[t]} ns is negative")
        inf = np.flatnonzero(np.isinf(self.tick_ns))
        if len(inf):
            t = int(inf[0])
            raise TraceError(f"invalid trace: tick_ns[{t:,}] is infinite (unknown device time "
                             "is NaN)")
        if n == 0:
            return
        big = np.flatnonzero(c["size"] > MAX_BLOCK_BYTES)
        if len(big):
            r = int(big[0])
            raise TraceError(f"invalid trace at row {r:,}: size {int(c['size'][r]):,} bytes is "
                             f"over {MAX_BLOCK_BYTES:,} (1 PiB): a corrupt size "
                             f"({self._describe_row(r)})")
        total = float(np.sum(c["size"][c["kind"] == EventKind.ALLOC], dtype=np.float64))
        if total > MAX_TOTAL_BYTES:
            raise TraceError(f"invalid trace: its allocations add up to {total:,.0f} bytes, over "
                             f"{MAX_TOTAL_BYTES:,} (2**62): corrupt sizes")
        problems: list[tuple[int, str]] = []

        def first(mask: np.ndarray, why: str, rows: np.ndarray | None = None) -> None:
            idx = np.flatnonzero(mask)
            if len(idx):
                r = int(idx[0] if rows is None else rows[idx].min())
                problems.append((r, why))

        first(c["kind"] > EventKind.MARK, "unknown event kind")
        first(c["mode"] > AccessMode.READ_WRITE, "unknown access mode")
        first(c["size"] < 0, "negative size")
        first(c["tick"] < 0, "negative tick")
        first(np.diff(c["tick"]) < 0, "tick goes backwards", np.arange(1, n))
        first(np.diff(c["t_ns"]) < 0, "time (t_ns) goes backwards", np.arange(1, n))
        is_block_evt = c["kind"] != EventKind.MARK
        rows = np.flatnonzero(is_block_evt)
        if len(rows):
            order = rows[np.argsort(c["block"][rows], kind="stable")]
            blk, knd = c["block"][order], c["kind"][order]
            start = np.ones(len(order), bool)
            start[1:] = blk[1:] != blk[:-1]
            end = np.ones(len(order), bool)
            end[:-1] = blk[1:] != blk[:-1]
            first(start & (knd == EventKind.FREE), "free of a block never allocated", order)
            first(start & (knd == EventKind.ACCESS), "access to a block never allocated", order)
            first(~start & (knd == EventKind.ALLOC), "block id allocated twice", order)
            after_free = np.zeros(len(order), bool)
            after_free[1:] = (knd[:-1] == EventKind.FREE) & ~start[1:]
            first(after_free & (knd == EventKind.FREE), "double free", order)
            first(after_free & (knd == EventKind.ACCESS), "access to a freed block", order)
            first(c["block"][rows] < 0, "negative block id on a block event", rows)
            # A FREE must name the size it was allocated with: allocators are called that way.
            alloc_size = np.zeros(len(order), np.int64)
            grp = np.cumsum(start) - 1
            alloc_size = c["size"][order][start][grp]
            first(
                (knd == EventKind.FREE) & (c["size"][order] != alloc_size),
                "free size differs from the allocated size",
                order,
            )
            acc = (knd == EventKind.ACCESS) & (c["offset"][order] >= 0)
            first(
                acc & (c["offset"][order] + np.maximum(c["length"][order], 0) > alloc_size),
                "access beyond the end of its block",
                order,
            )
        if problems:
            row, why = min(problems)
            raise TraceError(f"invalid trace at row {row:,}: {why} ({self._describe_row(row)})")

    def _describe_row(self, row: int) -> str:
        c = self._cols
        kind = EventKind(int(c["kind"][row])).name.lower() if c["kind"][row] <= 3 else "?"
        return (
            f"kind={kind} block={int(c['block'][row])} size={int(c['size'][row]):,} "
            f"tick={int(c['tick'][row])} t_ns={int(c['t_ns'][row])}"
        )

    # -- files -----------------------------------------------------------------------------
    def save(self, path) -> None:
        """Write the trace as Parquet (with schema version) to ``path``."""
        from ._parquet import save_parquet

        save_parquet(self, path)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trace):
            return NotImplemented
        return (
            all(np.array_equal(self._cols[k], other._cols[k]) for k in COLUMNS)
            and np.array_equal(self.tick_ns, other.tick_ns, equal_nan=True)
            and self.meta == other.meta
        )

    __hash__ = None  # type: ignore[assignment]


class TraceBuilder:
    """Appends events one by one (for importers and the recorder), then builds a Trace
    (``build()``).

    Ticks only move forward: ``next_tick(ns)`` closes the current tick with its device
    time in ns. Block ids are minted by ``alloc`` (or given explicitly).
    """

    def __init__(self, **meta: Any) -> None:
        self._rows: dict[str, list] = {name: [] for name in COLUMNS}
        self._tick_ns: list[float] = []
        self.tick = 0
        self._next_block = 0
        self._live: dict[int, int] = {}
        self.meta: dict[str, Any] = dict(meta)

    def _append(self, kind, block, size, t_ns, stream, device, mode=0, offset=-1, length=-1):
        r = self._rows
        r["tick"].append(self.tick)
        r["t_ns"].append(self.tick if t_ns is None else t_ns)
        r["kind"].append(int(kind))
        r["block"].append(block)
        r["size"].append(size)
        r["stream"].append(stream)
        r["device"].append(device)
        r["mode"].append(int(mode))
        r["offset"].append(offset)
        r["length"].append(length)

    def alloc(self, size: int, *, block: int | None = None, t_ns=None, stream=0, device=0) -> int:
        """Record an allocation of ``size`` bytes; returns the block id."""
        if block is None:
            block = self._next_block
        elif block in self._live:
            raise TraceError(f"alloc of block {block} which is already live")
        self._next_block = max(self._next_block, block + 1)
        self._live[block] = size
        self._append(EventKind.ALLOC, block, size, t_ns, stream, device)
        return block

    def free(self, block: int, *, t_ns=None, stream=0, device=0) -> None:
        """Record the free of ``block`` (its size is the allocated size)."""
        size = self._live.pop(block, -1)
        if size < 0:
            raise TraceError(f"free of block {block} which is not live")
        self._append(EventKind.FREE, block, size, t_ns, stream, device)

    def access(self, block: int, mode=AccessMode.READ, *, offset=-1, length=-1, t_ns=None,
               stream=0, device=0) -> None:
        """Record an access of the live ``block`` by the current tick's kernel."""
        size = self._live.get(block, -1)
        if size < 0:
            raise TraceError(f"access to block {block} which is not live")
        self._append(EventKind.ACCESS, block, size, t_ns, stream, device, mode, offset, length)

    def mark(self, *, t_ns=None) -> None:
        """Record that an iteration starts at the current tick."""
        self._append(EventKind.MARK, -1, 0, t_ns, 0, 0)

    def next_tick(self, device_ns: float = float("nan")) -> None:
        """Close the current tick, giving its device time in ns, and start the next."""
        self._tick_ns.append(device_ns)
        self.tick += 1

    def is_live(self, block: int) -> bool:
        return block in self._live

    def build(self, validate: bool = True) -> Trace:
        """The finished trace; a tick still open is closed with unknown device time."""
        n_ticks = self.tick + (1 if self._rows["tick"] and self._rows["tick"][-1] == self.tick else 0)
        tick_ns = self._tick_ns + [float("nan")] * (n_ticks - len(self._tick_ns))
        cols = {k: np.asarray(v, dtype=COLUMNS[k]) for k, v in self._rows.items()}
        return Trace(cols, tick_ns=np.asarray(tick_ns, np.float64), meta=self.meta,
                     validate=validate)
