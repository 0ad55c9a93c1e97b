"""Import a Kineto / Chrome trace JSON (``torch.profiler`` ``export_chrome_trace``, plain or
gzip) recorded with ``profile_memory=True``.

Mapping to a Trace (one tick per allocator event of the chosen device):

* ``[memory]`` instant events (``ph`` "i"; fields as the TensorBoard profiler plugin reads
  them, ``tb_plugin/torch_tb_profiler/profiler/trace.py`` ``MemoryEvent``):
  ``args["Bytes"] > 0`` allocates ``args["Addr"]``, ``< 0`` frees it (``0`` is skipped);
  ``Device Type`` 1 = CUDA, 0 = CPU; ``Device Id``; optional ``Total Allocated`` /
  ``Total Reserved`` (bytes after the event). Events are taken in time order (stable). A
  free of an address the profile never allocated was allocated before profiling began: it
  is allocated at tick 0 (see ``_snapshot.replay_addresses``).
* Without ``Addr`` (PyTorch <= 1.9 wrote only Device Type/Device Id/Bytes): a free of ``b``
  bytes pairs with the most recent live allocation of ``b`` bytes (``meta["free_pairing"]``
  says so). Counts and live bytes are exact; which of several equal-sized blocks a free
  ends is a guess (last in, first out: activations are freed in reverse order in the
  backward pass). When ``Total Allocated`` is present, the bytes live before profiling
  (first event's total minus its bytes) go to ``meta["bytes_before_profiling"]``.
* ``ProfilerStep#N`` spans: a MARK at the first allocator event at or after the span's
  start (the profiler names one span per ``prof.step()``; the GPU timeline's copy of the
  span, ``gpu_user_annotation``, is not a second mark).
* GPU kernels (``cat`` "kernel"): each kernel's duration is added to the tick in which it
  was *launched* (the CPU-side launch event with the same ``correlation``; the kernel's own
  start when no launch event is found), since allocator events and launches share the CPU
  clock; kernels launched before the first allocator event count in the first tick. With
  kernels present, a tick without one has device time 0; without kernels,
  device time is unknown (NaN).
* ``t_ns`` relative to the first allocator event (origin in ``meta["t0_us"]``).

The CPU allocator's events carry device column 0 (the snapshot convention); ``meta["device"]``
says "cpu" or "cuda:N".
"""
from __future__ import annotations

import gzip
import json
import re
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from ._model import CPU_WALL_CLOCK, Trace, TraceError
from ._snapshot import gc_paused, replay_addresses

__all__ = ["is_gzip", "looks_like_json", "load_kineto", "trace_from_chrome"]

_CUDA, _CPU = 1, 0
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def is_gzip(head: bytes | bytearray) -> bool:
    return head.startswith(b"\x1f\x8b")


def looks_like_json(head: bytes) -> bool:
    s = head.lstrip(b" \t\r\n\xef\xbb\xbf")
    return s[:1] in (b"{", b"[")


def _parse_device(device: Any) -> tuple[int, int | None, str]:
    """(Kineto device type, device id or None = any, canonical name)."""
    if not isinstance(device, str):
        raise ValueError(f'device must be "cuda", "cuda:N" or "cpu", got {device!r}')
    d = device.strip().lower()
    if d == "cpu":
        return _CPU, None, "cpu"
    if d == "cuda":
        return _CUDA, None, "cuda"
    m = re.fullmatch(r"cuda:(\d+)", d)
    if m:
        return _CUDA, int(m.group(1)), d
    raise ValueError(f'device must be "cuda", "cuda:N" or "cpu", got {device!r}')


def decode_json(data: bytes | bytearray, where: str) -> Any:
    """Parse (gunzipping first when gzip) JSON bytes; TraceError when truncated/corrupt."""
    if is_gzip(data):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise TraceError(f"{where}: corrupt or truncated gzip ({e})") from None
    try:
        return json.loads(data)
    except RecursionError:
        raise TraceError(f"{where}: JSON nests too deeply to be a trace") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise TraceError(f"{where}: not valid JSON, truncated or corrupt? ({e})") from None


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) < 9e15


def trace_from_chrome(doc: Any, *, device: str = "cuda", where: str = "trace",
                      name: str | None = None) -> Any:
    """Convert a parsed Chrome trace (dict with ``traceEvents`` or a list of events)."""
    dtype, dev_id, dev_name = _parse_device(device)
    if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        events = doc["traceEvents"]
    elif isinstance(doc, list):
        events = doc
    else:
        raise TraceError(
            f"{where}: JSON, but not a Chrome/Kineto trace (expected a 'traceEvents' list or a "
            "list of events)"
        )
    sc = _Scan(dtype, dev_id, where)
    sc.read(events)
    if not sc.mem:
        raise sc.why_no_memory_events(device)
    ids = sorted({m[4] for m in sc.mem})
    if dtype == _CUDA and dev_id is None and len(ids) > 1:
        raise TraceError(
            f"{where}: memory events of several CUDA devices {ids}; pass device=\"cuda:N\" "
            "(CLI: --device cuda:N)"
        )
    # allocator events in time order (stable): one tick each
    order = sorted(range(len(sc.mem)), key=lambda j: (sc.mem[j][0], sc.mem[j][1]))
    mem = [sc.mem[j] for j in order]
    totals = [sc.totals[j] for j in order]
    ts_arr = np.array([m[0] for m in mem])
    t0 = ts_arr[0]
    t_ns = np.rint((ts_arr - t0) * 1000).astype(np.int64)
    ops = [1 if m[3] > 0 else -1 for m in mem]
    sizes = [abs(m[3]) for m in mem]
    addrs, pairing = _addresses(mem, ops, sizes, where)
    n = len(mem)
    # MARK at the first allocator event at or after each step's start.
    marks: np.ndarray | list[int] = (
        np.searchsorted(ts_arr, np.array(sorted(sc.steps.values())), side="left")
        if sc.steps else [])
    tick_ns = _kernel_time_per_tick(sc.kernels, sc.launches, ts_arr) if sc.kernels else None
    meta = {
        "source": "kineto",
        "name": name or "kineto",
        "device": "cpu" if dtype == _CPU else f"cuda:{ids[0]}",
        "units": {"t_ns": "ns", "size": "bytes", "tick": "allocator event"},
        "t0_us": float(t0),
        "profiler_steps": len(sc.steps),
        "kernels": len(sc.kernels),
        # what the device time per tick is, in words (Trace.time_source): a CPU profile's
        # clock is the CPU's, which says nothing of what a GPU would take
        "time_source": (CPU_WALL_CLOCK if dtype == _CPU
                        else "GPU trace (kernel durations)" if sc.kernels
                        else "host clock of the allocator events (no kernels in the trace)"),
    }
    if pairing:
        meta["free_pairing"] = pairing
    if totals and totals[0] is not None:
        meta["bytes_before_profiling"] = int(totals[0] - (sizes[0] if ops[0] > 0 else -sizes[0]))
    return replay_addresses(
        ops, addrs, sizes, t_ns, [0] * n,
        device=0 if dtype == _CPU else ids[0], where=where,
        describe=lambda j: f"traceEvents[{mem[j][1]}] ([memory] at ts {mem[j][0]})",
        marks_before_event=list(np.asarray(marks).tolist()), tick_ns=tick_ns, meta=meta,
    )


class _Scan:
    """One pass over the trace events: what the module docstring maps, in file order."""

    def __init__(self, dtype: int, dev_id: int | None, where: str) -> None:
        self.dtype, self.dev_id, self.where = dtype, dev_id, where
        # (ts, seq, addr or None, bytes, device id) of the chosen device's allocator events
        self.mem: list[tuple[float, int, Any, int, int]] = []
        self.totals: list[Any] = []  # Total Allocated after each kept event (None: absent)
        self.other_types: dict[int, int] = {}  # device type -> events
        self.other_ids: set[int] = set()  # CUDA device ids other than the one asked for
        self.steps: dict[int, float] = {}  # ProfilerStep number -> start (us)
        self.kernels: list[tuple[float, float, Any]] = []  # (ts, dur, correlation)
        self.launches: dict[Any, float] = {}  # correlation -> CPU launch ts (us)

    def read(self, events: list) -> None:
        """Sort each event to its kind: ``[memory]``, ``ProfilerStep#N`` span, kernel or
        launch (other events are not used)."""
        where = self.where
        for i, e in enumerate(events):
            if not isinstance(e, dict):
                raise TraceError(
                    f"{where}: traceEvents[{i}] is a {type(e).__name__}, expected an object")
            nm = e.get("name")
            if nm == "[memory]":
                self.memory_event(i, e)
                continue
            if e.get("ph") != "X":
                continue
            m = _STEP.match(nm) if isinstance(nm, str) else None
            if m:
                self.profiler_step(i, e, nm, int(m.group(1)))
            else:
                self.kernel_or_launch(i, e, nm)

    def memory_event(self, i: int, e: dict) -> None:
        """A ``[memory]`` instant event: kept when on the chosen device and not 0 bytes,
        else counted by the device it is on."""
        where = self.where
        a = e.get("args")
        if not isinstance(a, dict):
            raise TraceError(f"{where}: traceEvents[{i}] ([memory]) has no args")
        # JSON values: each is checked (isinstance, _num) before use, checks mypy cannot follow
        ty: Any
        did: Any
        addr: Any
        nb: Any
        ts: Any
        ty, did, addr, nb, ts = (a.get("Device Type"), a.get("Device Id"), a.get("Addr"),
                                 a.get("Bytes"), e.get("ts"))
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (ty, did, nb)) \
                or not (addr is None or (isinstance(addr, int) and not isinstance(addr, bool))) \
                or not _num(ts):
            raise TraceError(
                f"{where}: traceEvents[{i}] ([memory]) lacks an integer Device Type/Device "
                f"Id/Bytes (and Addr, when present) or a numeric ts: {json.dumps(e)[:200]}"
            )
        if not (abs(nb) < 2**62 and (addr is None or 0 <= addr < 2**64)):
            raise TraceError(f"{where}: traceEvents[{i}] ([memory]) Bytes/Addr out of range")
        if ty != self.dtype:
            self.other_types[ty] = self.other_types.get(ty, 0) + 1
        elif self.dev_id is not None and did != self.dev_id:
            self.other_ids.add(did)
        elif nb != 0:
            self.mem.append((float(ts), i, addr, nb, did))
            tot = a.get("Total Allocated")
            self.totals.append(tot if _num(tot) else None)

    def profiler_step(self, i: int, e: dict, nm: Any, n_step: int) -> None:
        """A ``ProfilerStep#N`` span: its start, once per step number."""
        ts: Any = e.get("ts")
        if not _num(ts):
            raise TraceError(f"{self.where}: traceEvents[{i}] ({nm}) has no numeric ts")
        # the GPU timeline repeats each step as a gpu_user_annotation, later than the
        # CPU span: one mark per step number, at the CPU span's start
        if e.get("cat") != "gpu_user_annotation":
            self.steps[n_step] = min(float(ts), self.steps.get(n_step, float("inf")))

    def kernel_or_launch(self, i: int, e: dict, nm: Any) -> None:
        """A GPU kernel (its duration) or a CPU-side runtime call (a launch's ts, by its
        correlation id)."""
        ts: Any
        dur: Any
        args: Any
        ts, dur = e.get("ts"), e.get("dur")
        cat = e.get("cat")
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        corr = args.get("correlation")
        if not isinstance(corr, (int, str)):  # ids are ints; anything else cannot be matched
            corr = None
        if isinstance(cat, str) and cat.lower() == "kernel":
            if not (_num(ts) and _num(dur) and dur >= 0):
                raise TraceError(
                    f"{self.where}: traceEvents[{i}] (kernel {nm!r}) has no numeric ts/dur")
            self.kernels.append((float(ts), float(dur), corr))
        elif isinstance(cat, str) and cat.lower() in ("cuda_runtime", "cuda_driver", "runtime") \
                and corr is not None and _num(ts):
            self.launches.setdefault(corr, float(ts))

    def why_no_memory_events(self, device: str) -> TraceError:
        """The error for a trace with no allocator event of the chosen device: what it has
        instead, and the option that imports it."""
        where, dtype, other_types = self.where, self.dtype, self.other_types
        wanted = "CUDA" if dtype == _CUDA else "CPU"
        if dtype == _CUDA and other_types.get(_CPU):
            return TraceError(
                f"{where}: no CUDA memory events, but {other_types[_CPU]:,} CPU ones; pass "
                'device="cpu" (CLI: --device cpu) to import the CPU allocator\'s events'
            )
        if dtype == _CPU and other_types.get(_CUDA):
            return TraceError(
                f"{where}: no CPU memory events, but {other_types[_CUDA]:,} CUDA ones; pass "
                'device="cuda" (CLI: --device cuda)'
            )
        if self.other_ids:
            return TraceError(
                f"{where}: no memory events on {device!r}; the trace has CUDA devices "
                f"{sorted(self.other_ids)}"
            )
        if other_types:
            return TraceError(
                f"{where}: no {wanted} memory events for device {device!r} (other memory events "
                f"by device type: {other_types})"
            )
        return TraceError(
            f"{where}: no [memory] events; record with torch.profiler.profile(profile_memory=True)"
        )


def _addresses(mem: list, ops: list[int], sizes: list[int], where: str
               ) -> tuple[list[int], str | None]:
    """Each event's address, and how frees were paired when the events carry none (None:
    by the recorded ``Addr``)."""
    has_addr = [m[2] is not None for m in mem]
    if all(has_addr):
        return [m[2] for m in mem], None
    if not any(has_addr):
        return (_pair_by_size(ops, sizes),
                "by size, last in first out (the [memory] events carry no Addr)")
    j = has_addr.index(False)
    raise TraceError(f"{where}: traceEvents[{mem[j][1]}] ([memory]) has no Addr while "
                     f"{sum(has_addr):,} others have one: a mixed or corrupt trace")


def _kernel_time_per_tick(kernels: list[tuple[float, float, Any]], launches: dict[Any, float],
                          ts_arr: np.ndarray) -> np.ndarray:
    """Device ns per tick: each kernel's duration added to the tick it was launched in
    (by its launch's ts, else its own), the first tick for kernels launched before it."""
    n = len(ts_arr)
    tick_ns = np.zeros(n)
    key = np.array([launches.get(c, ts) if c is not None else ts for ts, _, c in kernels])
    idx = np.clip(np.searchsorted(ts_arr, key, side="right") - 1, 0, n - 1)
    np.add.at(tick_ns, idx, np.array([d for _, d, _ in kernels]) * 1000.0)
    return tick_ns


def _pair_by_size(ops: list[int], sizes: list[int]) -> list[int]:
    """Synthetic addresses that pair each free with the most recent live allocation of the
    same size (a free with none gets a fresh address: allocated before profiling)."""
    live: dict[int, list[int]] = {}  # size -> stack of addresses
    out, nxt = [], 1
    for op, sz in zip(ops, sizes):
        if op > 0:
            live.setdefault(sz, []).append(nxt)
            out.append(nxt)
            nxt += 1
        else:
            stack = live.get(sz)
            if stack:
                out.append(stack.pop())
            else:
                out.append(nxt)
                nxt += 1
    return out


def load_kineto(path, data: bytes | bytearray | None = None, *,
                device: str | None = None) -> Trace:
    """Read a JSON export of torch.profiler (optionally gzip) at ``path``: a Chrome/Kineto
    trace (see module docstring), a memory timeline (``_timeline``) or an Execution Trace
    (``_et``), told apart by content. ``device``: None = "cuda" where it applies."""
    p = Path(path)
    if data is None:
        data = p.read_bytes()
    with gc_paused():
        doc = decode_json(data, str(p))
        stem = p.name.split(".")[0] or p.name
        try:
            # other JSON exports of torch.profiler, told apart by content
            from ._et import is_execution_trace, trace_from_execution_trace
            from ._timeline import is_memory_timeline, is_timeline_plot, trace_from_timeline

            if is_memory_timeline(doc):
                if device is not None:
                    raise TraceError(
                        f"{p}: a torch.profiler memory timeline holds one device's events "
                        f"(chosen when it was exported); device={device!r} does not apply")
                return trace_from_timeline(doc, where=str(p), name=stem)
            device = "cuda" if device is None else device
            if is_timeline_plot(doc):
                raise TraceError(
                    f"{p}: a torch.profiler memory timeline plot ([times, sizes by category]) "
                    "holds no allocations; export the raw timeline instead: "
                    'prof.export_memory_timeline("x.raw.json.gz")')
            if is_execution_trace(doc):
                return trace_from_execution_trace(doc, device=device, where=str(p), name=stem)
            return trace_from_chrome(doc, device=device, where=str(p), name=stem)
        except (TypeError, AttributeError, KeyError, IndexError) as e:
            # a field of an unexpected type that the checks above did not anticipate
            raise TraceError(f"{p}: malformed Chrome trace ({type(e).__name__}: {e})") from None
