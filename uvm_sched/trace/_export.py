"""Exporters: a PyTorch memory snapshot (for ``torch.cuda._memory_viz`` and
pytorch.org/memory_viz) and a Chrome/Perfetto trace JSON of block lifetimes.

Neither needs torch. Both write atomically (``uvm_sched._files``: beside, fsync, rename).
"""
from __future__ import annotations

import gzip
import json
import pickle
from typing import Any

import numpy as np

from .._fmt import fmt_bytes
from .._files import write_atomic
from ._model import EventKind, Trace, TraceError
from ._snapshot import gc_paused

__all__ = ["export_torch_snapshot", "export_perfetto", "trace_to_snapshot", "trace_to_perfetto"]

# Where exported addresses start: any plausible device VA works, the viewer only needs
# blocks to lie inside their segment.
_BASE_ADDR = 0x7F00_0000_0000
_DEVICE_STRIDE = 1 << 46  # 64 TiB apart: segments of two devices never meet
_ALIGN = 512  # the caching allocator's rounding of small blocks
_SEGMENT_ALIGN = 2 << 20


def _round_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


def trace_to_snapshot(trace: Trace, *, frames: dict[int, list[dict]] | None = None) -> dict:
    """The trace's allocations and frees as a memory snapshot dict (plain data).

    Each block gets an address: a freed address is reused by the next block of the same
    rounded size (512 B granules), else the segment grows, so the layout is what a caching
    allocator without splitting would produce. One segment per device holds all blocks;
    blocks still live at the end of the trace are its ``active_allocated`` blocks. Each
    entry's frame names the block id and tick, so the viewer can point back to the trace;
    ``frames`` (block id -> torch-style frame dicts, innermost first) go before it.
    ACCESS and MARK rows have no snapshot equivalent and are left out.
    """
    c = trace.columns
    kind, block, size, tick = c["kind"], c["block"], c["size"], c["tick"]
    t_ns, stream, device = c["t_ns"], c["stream"], c["device"]
    rows = np.flatnonzero((kind == EventKind.ALLOC) | (kind == EventKind.FREE))
    if len(rows) and int(device[rows].min()) < 0:
        r = int(rows[np.argmin(device[rows])])
        raise TraceError(
            f"row {r:,} is on device {int(device[r])}; a memory snapshot indexes devices from 0"
        )
    n_dev = int(device[rows].max()) + 1 if len(rows) else 1
    label = str(trace.meta.get("name") or trace.meta.get("source") or "uvm_sched trace")
    frames_of = frames

    traces: list[list[dict]] = [[] for _ in range(n_dev)]
    top = [_BASE_ADDR + d * _DEVICE_STRIDE for d in range(n_dev)]
    free_by_size: list[dict[int, list[int]]] = [{} for _ in range(n_dev)]
    where: dict[int, tuple[int, int, dict, int]] = {}  # block -> (addr, rounded, alloc entry, device)
    # Python ints once, not numpy scalars per field: the pickle then holds plain data.
    k_l, b_l, s_l, t_l = kind[rows].tolist(), block[rows].tolist(), size[rows].tolist(), tick[rows].tolist()
    ns_l, st_l, d_l = t_ns[rows].tolist(), stream[rows].tolist(), device[rows].tolist()
    for k, b, s, t, ns, st, d in zip(k_l, b_l, s_l, t_l, ns_l, st_l, d_l):
        time_us = ns // 1000
        if k == EventKind.ALLOC:
            rounded = max(_ALIGN, _round_up(s, _ALIGN))
            reuse = free_by_size[d].get(rounded)
            if reuse:
                addr = reuse.pop()
            else:
                addr = top[d]
                top[d] += rounded
            stack: list[dict] = [{"filename": label, "line": t, "name": f"block {b} (tick {t})"}]
            if frames_of is not None and b in frames_of:
                stack = list(frames_of[b]) + stack
            e = {"action": "alloc", "addr": addr, "size": s, "stream": st, "time_us": time_us,
                 "frames": stack}
            where[b] = (addr, rounded, e, d)
            traces[d].append(e)
        else:
            addr, rounded, ae, _ = where.pop(b)
            free_by_size[d].setdefault(rounded, []).append(addr)
            for action in ("free_requested", "free_completed"):
                traces[d].append({"action": action, "addr": addr, "size": s, "stream": st,
                                  "time_us": time_us, "frames": ae["frames"]})

    segments = []
    for d in range(n_dev):
        base = _BASE_ADDR + d * _DEVICE_STRIDE
        total = max(_SEGMENT_ALIGN, _round_up(top[d] - base, _SEGMENT_ALIGN))
        live = sorted((a, r, e) for a, r, e, dd in where.values() if dd == d)
        blocks: list[dict[str, Any]] = []
        cursor = base
        allocated = requested = 0
        for addr, rounded, e in live:
            if addr > cursor:
                blocks.append({"address": cursor, "size": addr - cursor, "requested_size": 0,
                               "state": "inactive", "frames": []})
            blocks.append({"address": addr, "size": rounded, "requested_size": e["size"],
                           "state": "active_allocated", "frames": e["frames"]})
            allocated += rounded
            requested += e["size"]
            cursor = addr + rounded
        if cursor < base + total:
            blocks.append({"address": cursor, "size": base + total - cursor, "requested_size": 0,
                           "state": "inactive", "frames": []})
        segments.append({
            "device": d, "address": base, "total_size": total, "allocated_size": allocated,
            "active_size": allocated, "requested_size": requested, "stream": 0,
            "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
            "frames": [], "blocks": blocks,
        })
        t0 = traces[d][0]["time_us"] if traces[d] else 0
        # The segment exists from the start: the viewer's segment view needs every block
        # inside a segment at every step.
        traces[d].insert(0, {"action": "segment_alloc", "addr": base, "size": total, "stream": 0,
                             "time_us": t0, "frames": []})
    return {"segments": segments, "device_traces": traces}


def export_torch_snapshot(trace: Trace, path) -> None:
    """Write ``trace`` as a PyTorch memory snapshot pickle to ``path``: open it with
    ``python -m torch.cuda._memory_viz trace_plot`` or drop it on pytorch.org/memory_viz.
    ``uvm_sched.trace.load`` reads it back to the same alloc/free sequence (one tick per
    event; sizes in bytes, times in whole microseconds)."""
    with gc_paused():
        write_atomic(path, pickle.dumps(trace_to_snapshot(trace), protocol=4))


def _lanes(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Greedy interval partitioning: a lane per block so that blocks on one lane never
    overlap (the Chrome trace format requires slices on one thread to nest). Uses the
    fewest lanes possible (= the most blocks live at once). O(n log n)."""
    import heapq

    order = np.lexsort((end, start))
    lane = np.empty(len(start), np.int64)
    busy: list[tuple[float, int]] = []  # (end, lane)
    free: list[int] = []
    n_lanes = 0
    for i in order.tolist():
        s = start[i]
        while busy and busy[0][0] <= s:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            ln = heapq.heappop(free)
        else:
            ln = n_lanes
            n_lanes += 1
        lane[i] = ln
        heapq.heappush(busy, (end[i], ln))
    return lane


def trace_to_perfetto(trace: Trace) -> dict:
    """A Chrome trace-event dict: one slice per block lifetime (pid = device, lanes as
    threads), a counter of allocated bytes, iteration marks as instant events, and one slice
    per tick on a "device compute" track when ``tick_ns`` is known. Time base: the device
    timeline (cumulative ``tick_ns``, unknown ticks count 0) when any tick time is known,
    else the events' ``t_ns``. Times in the file are microseconds (the format's unit)."""
    with gc_paused():
        return json.loads(_perfetto_json(trace))


def _perfetto_json(trace: Trace) -> str:
    """The JSON text of ``trace_to_perfetto``. The million-row parts are rendered with
    string templates rather than dicts + json.dumps (several times faster); every value
    in them is an int, a finite float (``repr`` is JSON) or a fixed ASCII name."""
    c = trace.columns
    kind, tick, t_ns = c["kind"], c["tick"], c["t_ns"]
    tns = np.asarray(trace.tick_ns, np.float64)
    known = np.isfinite(tns)
    device_time = bool(known.any())
    if device_time:
        tick_start = np.concatenate([[0.0], np.cumsum(np.where(known, tns, 0.0))])  # ns
        row_start = tick_start[tick]
        row_end = tick_start[tick + 1]  # frees happen after the tick's kernel
        end_of_trace = float(tick_start[-1])
    else:
        row_start = row_end = t_ns.astype(np.float64)
        end_of_trace = float(t_ns.max()) if len(t_ns) else 0.0

    bt = trace.block_table()
    a_row = bt["alloc_row"].to_numpy()
    f_row = bt["free_row"].to_numpy()
    start = row_start[a_row]
    end = np.where(f_row >= 0, row_end[np.maximum(f_row, 0)] if len(f_row) else 0.0, end_of_trace)
    end = np.maximum(end, start)
    dev = c["device"][a_row]
    lane = np.zeros(len(bt), np.int64)
    for d in np.unique(dev).tolist():
        sel = np.flatnonzero(dev == d)
        lane[sel] = _lanes(start[sel], end[sel])
    name = str(trace.meta.get("name") or trace.meta.get("source") or "trace")
    head: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": d, "tid": 0,
         "args": {"name": f"{name}: blocks on device {d}"}}
        for d in (np.unique(dev).tolist() or [0])
    ]
    for it, t in enumerate(trace.iteration_starts.tolist()):
        ts = tick_start[t] if device_time else float(t_ns[np.searchsorted(tick, t)])
        head.append({"ph": "i", "s": "g", "name": f"iteration {it} (tick {t})", "pid": 0,
                     "tid": 0, "ts": ts / 1e3})
    if device_time:
        head.append({"ph": "M", "name": "process_name", "pid": -1, "tid": 0,
                     "args": {"name": f"{name}: device compute (one slice per tick)"}})
    parts = [json.dumps(e, separators=(",", ":")) for e in head]

    sizes = bt["size"].to_numpy()
    fmt = {v: fmt_bytes(v, digits=1) for v in np.unique(sizes).tolist()}
    parts.extend(
        f'{{"ph":"X","cat":"block","name":"block {b} ({fmt[sz]})","pid":{d},"tid":{ln},'
        f'"ts":{s_ / 1e3!r},"dur":{(e_ - s_) / 1e3!r},"args":{{"block":{b},"bytes":{sz},'
        f'"alloc_tick":{at},"free_tick":{ft},"stream":{st}}}}}'
        for b, sz, d, ln, s_, e_, at, ft, st in zip(
            bt.index.tolist(), sizes.tolist(), dev.tolist(), lane.tolist(), start.tolist(),
            end.tolist(), bt["alloc_tick"].tolist(), bt["free_tick"].tolist(),
            bt["stream"].tolist(),
        )
    )
    # allocated-bytes counter at each allocator event
    ab = np.flatnonzero((kind == EventKind.ALLOC) | (kind == EventKind.FREE))
    live = trace.live_bytes()[ab]
    ts = np.where(kind[ab] == EventKind.ALLOC, row_start[ab], row_end[ab]) / 1e3
    parts.extend(f'{{"ph":"C","name":"allocated bytes","pid":0,"ts":{t!r},"args":{{"bytes":{v}}}}}'
                 for t, v in zip(ts.tolist(), live.tolist()))
    if device_time:
        k = np.flatnonzero(known)
        parts.extend(
            f'{{"ph":"X","cat":"kernel","name":"tick {t}","pid":-1,"tid":0,"ts":{ts_!r},'
            f'"dur":{ns / 1e3!r},"args":{{"tick":{t},"device_ns":{ns!r}}}}}'
            for t, ts_, ns in zip(k.tolist(), (tick_start[k] / 1e3).tolist(), tns[k].tolist())
        )
    other = {"uvm_sched": json.dumps(trace.meta),
             "time_base": "device (tick_ns)" if device_time else "t_ns"}
    return ('{"traceEvents":[' + ",".join(parts) + '],"displayTimeUnit":"ns","otherData":'
            + json.dumps(other) + "}")


def export_perfetto(trace: Trace, path) -> None:
    """Write block lifetimes (and per-tick device compute when ``tick_ns`` is known) as a
    Chrome/Perfetto trace JSON to ``path`` (gzip-compressed when it ends in ``.gz``); open
    it in ui.perfetto.dev or chrome://tracing."""
    with gc_paused():
        data = _perfetto_json(trace).encode()
    if str(path).endswith(".gz"):
        data = gzip.compress(data, compresslevel=6, mtime=0)
    write_atomic(path, data)

