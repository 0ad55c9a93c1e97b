"""One scenario, two engines: each ``kernels/`` microbenchmark beside its simulator twin.

The rule: every scenario ``kernels.measure`` times on a GPU (a copy each way alone and
both ways at once, fault-driven migration with and without oversubscription, isolated and
parallel faults, first touch, eviction, remote reads and writes under each advice) is
rebuilt here as a tiny Trace and Plan made with the public API and run through
``simulate`` on a hardware profile; the simulated figure is computed by the same formula
as the measured one (bytes over the time of the operation, or seconds per VA block), so
``simulated / measured`` is the simulator's error on that mechanism. Why: until a GPU is
lent every figure we quote is the simulator's; the first time one is lent this table is
its acceptance test, and a row far from 1 names the mechanism to fix.

``TWINS`` is the one table (append a row to add a scenario): name, the key of the
measured figure in ``calibration.json`` (``fields.<profile field>`` or ``extra.<...>``,
as ``kernels.measure`` writes it), the unit, and the function that simulates the twin.
``side_by_side(measured, hw)`` gives one row per scenario.

How a twin is staged (``_Stage``): tick 0 allocates the buffers and the kernel writes them
(fresh pages, populated on the device), its compute time (``SETTLE_S``) long enough for
every copy issued before the timed tick to land, so that the timed tick starts on an idle
link as a benchmark's does after its untimed setup and ``synchronize``. Plan actions are
issued after a 4 KiB "cue" allocation (before the tick's kernel) or after its free (after
the kernel): a Plan acts only after allocator events. The timed tick has no compute, so
its time is the kernel's stall: the fault, eviction or remote-access path alone.

Single advices (``preferred_host`` alone, ``accessed_by`` alone) run through whatever the
engine does with them: where the engine models only the advice pair, those rows show the
gap to the driver, which is what they are for.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from ..hw import HardwareProfile, load_profile
from ..planner import Plan
from ..trace import AccessMode, TraceBuilder
from ._api import simulate

__all__ = ["Twin", "TWINS", "side_by_side", "simulate_twin", "DEFAULT_BYTES"]

DEFAULT_BYTES = 1 << 30  # kernels.measure's default buffer (--gib 1)
CUE_BYTES = 4096
SETTLE_S = 1000.0  # the setup tick's compute: every setup copy lands before the timed tick
PAGE = 4096  # the kit's kernels touch one 4-byte word per 4 KiB page (kernels.calib)


class _Stage:
    """A tiny one-iteration trace and its plan, tick by tick (see the module doc)."""

    def __init__(self, name: str) -> None:
        self.b = TraceBuilder(name=f"twin: {name}", source="uvm_sched.sim twin",
                              time_source="scenario (compute times set by the twin)")
        self.b.mark()
        self.events = 0  # allocator events so far (a plan's tick)
        self.sizes: list[int] = []
        self.acts: list[tuple] = []
        self.cue = -1

    def alloc(self, nbytes: int) -> int:
        """A new block of ``nbytes``; returns its ordinal (= its trace block id)."""
        blk = self.b.alloc(int(nbytes))
        self.sizes.append(int(nbytes))
        self.events += 1
        return blk

    def before_kernel(self, *acts: tuple) -> None:
        """Issue ``acts`` ((action, block) or (action, block, offset, bytes)) after a cue
        allocation: before this tick's kernel."""
        self.cue = self.alloc(CUE_BYTES)
        self.acts += [(self.events - 1, *a) for a in acts]

    def access(self, blk: int, mode: AccessMode, offset: int = -1, length: int = -1) -> None:
        self.b.access(blk, mode, offset=offset, length=length)

    def end_tick(self, seconds: float, *after: tuple) -> None:
        """Close the tick with ``seconds`` of compute; ``after`` acts follow the cue's free
        (after the kernel)."""
        if after:
            if self.cue < 0 or not self.b.is_live(self.cue):
                self.cue = self.alloc(CUE_BYTES)
            self.b.free(self.cue)
            self.events += 1
            self.acts += [(self.events - 1, *a) for a in after]
        self.cue = -1
        self.b.next_tick(seconds * 1e9)

    def run(self, hw: HardwareProfile, budget: int | None = None):
        """The trace simulated under the plan; ``budget`` default: every byte fits."""
        trace = self.b.build()
        rows = [a + (0, 0) if len(a) == 3 else a for a in self.acts]
        plan = Plan({"tick": [r[0] for r in rows], "action": [r[1] for r in rows],
                     "block": [r[2] for r in rows], "persistent": [False] * len(rows),
                     "offset": [r[3] for r in rows], "bytes": [r[4] for r in rows]},
                    dict(budget_bytes=budget or trace.peak_bytes, period_events=self.events,
                         alloc_sizes=self.sizes, hw=hw.name))
        return simulate(trace, plan, hw, budget or trace.peak_bytes)


def _host_resident(st: _Stage, n: int, pieces: int = 1) -> int:
    """A buffer of ``n`` bytes written on the device (in ``pieces`` kernels, each piece
    moved to the host after its kernel so that a buffer larger than the budget can be
    staged) and then resident on the host, as the benchmarks' ``host_resident`` setup
    leaves it; a settle tick closes the setup. Returns the block."""
    x = st.alloc(n)
    step = n // pieces
    for i in range(pieces):
        part = (i * step, step) if pieces > 1 else ()
        st.access(x, AccessMode.WRITE, *part)
        st.end_tick(0.0, ("prefetch_to_host", x, *part))
    st.end_tick(SETTLE_S)
    return x


def _tick_stall(r, tick: int) -> float:
    tl = r.timeline
    return float(tl.loc[tl["tick"] == tick, "stall_s"].sum())


def _copy_span(r, tick: int, directions: tuple[str, ...]) -> tuple[int, float]:
    """(bytes, seconds from the first start to the last end) of the plan's copies in
    ``directions`` issued from ``tick`` on."""
    tl, tr = r.timeline, r.transfers
    after = float(tl.loc[tl["tick"] == tick, "start_s"].iloc[0])
    sel = tr[(tr["cause"] == "plan") & tr["direction"].isin(directions)
             & (tr["start_s"] >= after - 1e-12)]
    if not len(sel):
        return 0, 0.0
    return int(sel["bytes"].sum()), float(sel["end_s"].max() - sel["start_s"].min())


def _rate(nbytes: int, seconds: float) -> float:
    return nbytes / seconds if seconds > 0 else math.inf


def copy_h2d(hw: HardwareProfile, n: int) -> float:
    st = _Stage("copy h2d")
    x = _host_resident(st, n)
    timed = st.b.tick
    st.before_kernel(("prefetch_to_device", x))
    st.end_tick(SETTLE_S)
    return _rate(*_copy_span(st.run(hw), timed, ("h2d",)))


def copy_d2h(hw: HardwareProfile, n: int) -> float:
    st = _Stage("copy d2h")
    x = st.alloc(n)
    st.access(x, AccessMode.WRITE)  # dirty on the device
    st.end_tick(SETTLE_S)
    st.before_kernel(("prefetch_to_host", x))
    st.end_tick(SETTLE_S)
    return _rate(*_copy_span(st.run(hw), 1, ("d2h",)))


def copy_both(hw: HardwareProfile, n: int) -> float:
    """``n`` bytes each way at once (two buffers): total bytes over the span of both."""
    st = _Stage("copy both ways")
    x = _host_resident(st, n)
    y = st.alloc(n)
    st.access(y, AccessMode.WRITE)
    st.end_tick(SETTLE_S)
    timed = st.b.tick
    st.before_kernel(("prefetch_to_device", x), ("prefetch_to_host", y))
    st.end_tick(SETTLE_S)
    return _rate(*_copy_span(st.run(hw), timed, ("h2d", "d2h")))


def _timed_kernel(hw, n, name, mode, budget=None, pieces=1, advise=()) -> float:
    """Seconds of the kernel that accesses a host-resident ``n``-byte buffer whole with
    ``mode`` (in ``pieces`` consecutive kernels when it exceeds the budget), under the
    advice ``advise`` given before."""
    st = _Stage(name)
    x = _host_resident(st, n, pieces)
    if advise:
        st.before_kernel(*[(a, x) for a in advise])
        st.end_tick(SETTLE_S)
    first = st.b.tick
    step = n // pieces
    for i in range(pieces):
        st.access(x, mode, *((i * step, step) if pieces > 1 else ()))
        st.end_tick(0.0)
    r = st.run(hw, budget)
    return sum(_tick_stall(r, first + i) for i in range(pieces))


def fault_migration(hw: HardwareProfile, n: int) -> float:
    return _rate(n, _timed_kernel(hw, n, "fault-driven migration", AccessMode.READ))


# kernels reading 2x the free memory run in this many consecutive pieces in the twin (a
# simulated kernel must fit the budget; the GPU's one kernel evicts its own early pages)
PIECES = 16


def fault_oversubscribed(hw: HardwareProfile, n: int) -> float:
    """A host-resident buffer of ``n`` bytes read with ``n / 2`` of device memory."""
    return _rate(n, _timed_kernel(hw, n, "fault-driven migration, oversubscribed",
                                  AccessMode.READ, budget=n // 2 + 2 * CUE_BYTES, pieces=PIECES))


def _sparse(hw: HardwareProfile, n: int, name: str) -> float:
    """Seconds per VA block of a kernel reading one word per VA block of host-resident
    data (the fault path migrates one page of each)."""
    st = _Stage(name)
    x = _host_resident(st, n)
    timed = st.b.tick
    V = hw.va_block_bytes
    k = n // V
    for i in range(k):
        st.access(x, AccessMode.READ, i * V, PAGE)
    st.end_tick(0.0)
    return _tick_stall(st.run(hw), timed) / k


def isolated_faults(hw: HardwareProfile, n: int) -> float:
    # the twin cannot serialise loads: the engine charges one batch per VA block either way
    return _sparse(hw, n, "isolated faults")


def parallel_sparse_faults(hw: HardwareProfile, n: int) -> float:
    return _sparse(hw, n, "parallel sparse faults")


def _touch_fresh(hw: HardwareProfile, n: int, budget: int, pieces: int) -> float:
    """Seconds to write every page of a fresh ``n``-byte buffer in ``pieces`` kernels."""
    st = _Stage("first touch")
    x = st.alloc(n)
    step = n // pieces
    for i in range(pieces):
        st.access(x, AccessMode.WRITE, *((i * step, step) if pieces > 1 else ()))
        st.end_tick(0.0)
    r = st.run(hw, budget)
    return sum(_tick_stall(r, i) for i in range(pieces))


def first_touch(hw: HardwareProfile, n: int) -> float:
    """Seconds per GiB of a kernel populating fresh managed memory."""
    return _touch_fresh(hw, n, n + CUE_BYTES, 1) / (n / (1 << 30))


def eviction(hw: HardwareProfile, n: int) -> float:
    """As ``kernels.measure._evict_bandwidth``: touch ``2n`` fresh bytes with ``n`` free,
    and ``n``; bytes evicted (``n``) over the time beyond two eviction-free halves."""
    both = _touch_fresh(hw, 2 * n, n + CUE_BYTES, 2 * PIECES)
    half = _touch_fresh(hw, n, n + CUE_BYTES, PIECES)
    return _rate(n, both - 2 * half)


def _remote(mode: AccessMode, advise: tuple[str, ...], what: str):
    def twin(hw: HardwareProfile, n: int) -> float:
        return _rate(n, _timed_kernel(hw, n, what, mode, advise=advise))
    return twin


_BOTH = ("advise_preferred_host", "advise_accessed_by")


@dataclasses.dataclass(frozen=True)
class Twin:
    """One scenario: ``measured`` is its key in calibration.json (``fields.X`` or
    ``extra.X[.Y]``); ``unit`` ``"B/s"`` or ``"s"`` (per VA block) or ``"s/GiB"``."""

    name: str
    measured: str
    unit: str
    simulate: Callable[[HardwareProfile, int], float]


TWINS: tuple[Twin, ...] = (
    Twin("copy h2d alone", "fields.h2d_prefetch_Bps", "B/s", copy_h2d),
    Twin("copy d2h alone", "fields.d2h_prefetch_Bps", "B/s", copy_d2h),
    Twin("copy both ways at once", "extra.bidir_prefetch_Bps", "B/s", copy_both),
    Twin("fault-driven migration", "fields.h2d_fault_Bps", "B/s", fault_migration),
    Twin("fault-driven migration, 2x oversubscribed", "extra.oversubscribed_fault_Bps", "B/s",
         fault_oversubscribed),
    Twin("isolated fault (per VA block)", "fields.fault_batch_latency_s", "s", isolated_faults),
    Twin("parallel sparse faults (per VA block)", "extra.parallel_sparse_fault_s_per_va_block",
         "s", parallel_sparse_faults),
    Twin("first touch of fresh memory", "extra.first_touch_s_per_GiB", "s/GiB", first_touch),
    Twin("eviction", "fields.d2h_evict_Bps", "B/s", eviction),
    Twin("remote read, preferred_host + accessed_by", "fields.remote_access_Bps", "B/s",
         _remote(AccessMode.READ, _BOTH, "remote read")),
    Twin("remote read, preferred_host alone", "extra.remote_Bps.read_preferred_host", "B/s",
         _remote(AccessMode.READ, _BOTH[:1], "remote read, preferred_host")),
    Twin("remote read, accessed_by alone", "extra.remote_Bps.read_accessed_by", "B/s",
         _remote(AccessMode.READ, _BOTH[1:], "remote read, accessed_by")),
    Twin("remote write, preferred_host + accessed_by", "extra.remote_Bps.write_both", "B/s",
         _remote(AccessMode.WRITE, _BOTH, "remote write")),
    Twin("remote write, preferred_host alone", "extra.remote_Bps.write_preferred_host", "B/s",
         _remote(AccessMode.WRITE, _BOTH[:1], "remote write, preferred_host")),
    Twin("remote write, accessed_by alone", "extra.remote_Bps.write_accessed_by", "B/s",
         _remote(AccessMode.WRITE, _BOTH[1:], "remote write, accessed_by")),
)


def simulate_twin(twin: "Twin | str", hw: Any = "h200-pcie5", nbytes: int = DEFAULT_BYTES) -> float:
    """The simulated figure of one scenario (by ``Twin`` or name) on ``hw`` with a buffer
    of ``nbytes`` (rounded down to whole VA blocks), in the twin's unit."""
    hw = load_profile(hw)
    if isinstance(twin, str):
        found = [t for t in TWINS if t.name == twin]
        if not found:
            raise ValueError(f"unknown scenario {twin!r}; known: {', '.join(t.name for t in TWINS)}")
        twin = found[0]
    V = hw.va_block_bytes
    n = int(nbytes) // (V * 2 * PIECES) * (V * 2 * PIECES)
    if n <= 0:
        raise ValueError(f"a twin needs at least {V * 2 * PIECES:,} bytes (whole VA blocks "
                         f"in {2 * PIECES} pieces), got {nbytes:,}")
    return float(twin.simulate(hw, n))


def _lookup(doc: Mapping[str, Any], key: str) -> float | None:
    cur: Any = doc
    for part in key.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    if isinstance(cur, bool) or not isinstance(cur, (int, float)) or not np.isfinite(cur):
        return None
    return float(cur)


def read_measurements(path: "str | Path") -> dict:
    """A ``kernels.measure`` result file (calibration.json) as a dict; ValueError naming
    the file when it is not one."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{p}: cannot read the measurements ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("fields"), dict):
        raise ValueError(f"{p}: not a kernels.measure result (no 'fields' object)")
    return doc


def side_by_side(measured: "Mapping[str, Any] | str | Path | None" = None,
                 hw: Any = "h200-pcie5", nbytes: int | None = None) -> list[dict]:
    """One row per scenario of ``TWINS``: ``scenario, unit, key, measured`` (None when the
    measurement file lacks it, or no file: no GPU), ``simulated`` and ``ratio``
    (simulated / measured, None without a measurement). ``measured``: a calibration.json
    (path or its dict); ``nbytes``: the buffer size, default the measurement's
    (``extra.buffer_bytes``) else ``DEFAULT_BYTES``."""
    hw = load_profile(hw)
    doc = read_measurements(measured) if isinstance(measured, (str, Path)) else measured
    if nbytes is None:
        nbytes = int(_lookup(doc, "extra.buffer_bytes") or DEFAULT_BYTES) if doc else DEFAULT_BYTES
    rows = []
    for t in TWINS:
        sim = simulate_twin(t, hw, nbytes)
        m = _lookup(doc, t.measured) if doc else None
        rows.append({"scenario": t.name, "unit": t.unit, "key": t.measured, "measured": m,
                     "simulated": sim,
                     "ratio": (sim / m) if m not in (None, 0.0) else None})
    return rows
