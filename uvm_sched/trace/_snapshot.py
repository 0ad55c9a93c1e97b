"""Import a PyTorch CUDA memory snapshot (``torch.cuda.memory._dump_snapshot``).

The snapshot is a pickled dict of plain data: ``segments`` (the allocator's state when the
snapshot was taken, blocks with ``state``/``size``/``requested_size``) and
``device_traces`` (one list per device of entries with ``action`` in alloc /
free_requested / free_completed / segment_alloc / segment_free / oom / snapshot, ``addr``,
``size``, ``stream``, ``time_us``, optional ``frames``).

Mapping to a Trace (one tick per allocator event):

* ``alloc`` -> ALLOC of a fresh block id (addresses are reused by the allocator; block ids
  never are). ``free_completed`` -> FREE; ``free_requested`` is the free only when the
  device's trace has no ``free_completed`` at all (the caching allocator records both; a
  hand-made trace may record one). Segment entries (``segment_alloc``/``segment_free``,
  and ``segment_map``/``segment_unmap`` of expandable segments) and ``snapshot`` entries are
  not allocator events of a tensor: they are counted in ``meta["segment_entries"]``
  (``meta["expandable_segments"]`` when maps occur). ``oom`` entries (the allocator
  failed) are kept in ``meta["oom"]``: their count and the first 100 with ``tick`` (the
  tick of the allocator event they precede), ``size``, ``device_free``, ``time_us``.
* Steps from Python frames (``frames`` of each entry, ``_record_memory_history(
  stacks="python")``): a run of events whose frames include ``torch/optim/`` (an
  optimizer's step; not ``zero_grad``, not an LR scheduler) ends a training step where the
  next event with other frames comes (events without frames -- C++ only -- do not break a
  run); without optimizer frames, runs of ``backward`` frames do. The ends are
  ``meta["step_ends"] = {"signal", "ends": [tick, ...]}``; ``pattern.analyze`` takes them as
  step markers (iteration k ends at ``ends[k]``; iteration 1 starts at the first event).
* ``device``: the CUDA device index; by default the one device with events (a TraceError
  lists each device's entries when there are several).
* Forward compatibility: an entry whose action this importer does not know, and fields
  it does not know (top level, or in an entry), are skipped with one ``uvm_sched.Warning``
  each that names them, so a snapshot from a newer PyTorch still loads.
* Blocks alive when recording started -- a free of an address the trace never allocated,
  or an ``active_*`` block of ``segments`` that no alloc of the trace explains -- are
  allocated at tick 0, before the recorded events (which then start at tick 1).
* ``t_ns`` = ``time_us`` * 1000 relative to the first event (origin in ``meta["t0_us"]``);
  a clock that steps backwards is clamped so time never decreases. Entries without
  ``time_us``: no clock -- ``t_ns`` repeats the tick and ``meta["clock"] = "none"``, so no
  time is made up downstream.

The pickle is read with an unpickler that resolves no globals except plain builtin
containers, so a hostile file cannot run code.
"""
from __future__ import annotations

import contextlib
import gc
import io
import pickle
import warnings
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from .._errors import Warning as _Warning
from ._model import COLUMNS, EventKind, Trace, TraceError

__all__ = ["is_pickle", "load_snapshot", "replay_addresses", "read_snapshot_dict", "trace_from_snapshot",
           "gc_paused"]

# Globals a memory snapshot may reference (protocol 2 spells sets/bytearrays this way).
_SAFE_GLOBALS = {
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("builtins", "bytearray"),
    ("builtins", "list"),
    ("builtins", "dict"),
    ("builtins", "tuple"),
    ("__builtin__", "set"),
    ("__builtin__", "frozenset"),
    ("__builtin__", "bytearray"),
    ("collections", "OrderedDict"),
}


def _bytearray(*args):
    """``bytearray`` for a pickle: from bytes or a string with its encoding (how protocols
    2-4 spell one), never from a count -- ``bytearray(2**30)`` in a 39-byte file would
    allocate 1 GiB before anything could refuse it."""
    if args and not isinstance(args[0], (bytes, str)):
        raise pickle.UnpicklingError(
            f"the pickle builds a bytearray from a {type(args[0]).__name__}, which a memory "
            "snapshot never does (from a number it would allocate that many bytes)")
    return bytearray(*args)


class _SafeUnpickler(pickle.Unpickler):
    """Resolves only plain containers; none of them can be made to allocate more than the
    file holds (a container is built from elements that each cost bytes of the file)."""

    def find_class(self, module: str, name: str):
        if (module, name) in _SAFE_GLOBALS:
            if name == "bytearray":
                return _bytearray
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"the pickle refers to {module}.{name}, which a memory snapshot never contains; "
            "refusing to load it (unpickling it could run code)"
        )

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("the pickle uses persistent ids (a torch.save file?)")


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while millions of small containers are made
    (unpickling, JSON, the planner's candidate gaps), then restore it as the caller had it:
    the collector's passes over the growing heap would otherwise cost several times the
    work itself, and reference counting still frees what is not in a cycle. Process-wide:
    a thread running beside goes without cyclic collection for that long too."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def is_pickle(head: bytes) -> bool:
    """True for the header of a pickle of protocol 2 or newer (what torch writes)."""
    return len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def read_snapshot_dict(data: bytes, where: str) -> dict:
    """Unpickle ``data`` safely; TraceError for anything but a complete pickle."""
    try:
        with gc_paused():
            obj = _SafeUnpickler(io.BytesIO(data)).load()
    except RecursionError:
        raise TraceError(f"{where}: pickle nests too deeply to be a memory snapshot") from None
    except MemoryError:
        raise TraceError(f"{where}: corrupt pickle (asks for more memory than exists)") from None
    except Exception as e:  # noqa: BLE001 -- a corrupt pickle can raise nearly anything
        raise TraceError(
            f"{where}: not a complete pickle ({type(e).__name__}: {e}); truncated or corrupt?"
        ) from None
    if isinstance(obj, list):
        raise TraceError(
            f"{where}: a list-of-segments snapshot (old format) without a trace; record with "
            "torch.cuda.memory._record_memory_history() before torch.cuda.memory._dump_snapshot()"
        )
    if not isinstance(obj, dict) or "segments" not in obj:
        keys = sorted(map(str, obj))[:8] if isinstance(obj, dict) else None
        raise TraceError(
            f"{where}: a pickle, but not a PyTorch memory snapshot (a {type(obj).__name__}"
            + (f" with keys {keys}" if keys is not None else "")
            + "; expected a dict with 'segments' and 'device_traces')"
        )
    if "device_traces" not in obj:
        raise TraceError(
            f"{where}: the memory snapshot has no 'device_traces' (allocator history was not "
            "recorded); call torch.cuda.memory._record_memory_history() before "
            "torch.cuda.memory._dump_snapshot()"
        )
    return obj


def _int(v: Any, what: str, where: str) -> int:
    # bool is an int subclass; an addr/size of True would be corruption, not data.
    if isinstance(v, bool) or not isinstance(v, int):
        raise TraceError(f"{where}: {what} is {v!r} ({type(v).__name__}), expected an integer")
    return v


def replay_addresses(
    ops: Sequence[int],
    addrs: Sequence[int],
    sizes: Sequence[int],
    t_ns: Sequence[int] | np.ndarray | None,
    streams: Sequence[int],
    *,
    device: int,
    where: str,
    describe=None,
    live_at_end: Sequence[tuple[int, int, int]] = (),
    marks_before_event: Sequence[int] = (),
    tick_ns=None,
    meta: dict | None = None,
) -> Trace:
    """Turn an address-level event stream into a Trace, one tick per event.

    ``ops[i]`` is +1 (alloc) or -1 (free) of ``sizes[i]`` bytes at ``addrs[i]``. A free of
    an address not live was allocated before recording: it is allocated at tick 0 (then
    the events start at tick 1), as is each ``(addr, size, stream)`` of ``live_at_end`` that
    the events leave unexplained. ``marks_before_event``: event indices an iteration starts
    at. ``tick_ns``: device time per event (ns), shifted with the events. ``describe(i)``
    names event ``i`` in errors. Raises TraceError for an alloc of a live address or a free
    whose size differs from its alloc's.
    """
    n = len(ops)
    describe = describe or (lambda i: f"event {i:,}")
    ev_size = np.asarray(sizes, np.int64) if n else np.zeros(0, np.int64)
    ev_block, live, pre = _mint_blocks(ops, addrs, ev_size, streams, where, describe)
    still = [(size, stream) for a, size, stream in live_at_end if a not in live]
    n_pre = len(pre) + len(still)
    # Renumber: tick-0 blocks 0..n_pre-1 (freed ones in order of their free, then the
    # never-freed ones), then the recorded allocations.
    ev_block = np.where(ev_block >= 0, ev_block + n_pre, -ev_block - 1)
    shift = 1 if n_pre else 0
    marks = sorted(set(int(m) for m in marks_before_event if 0 <= m < n))
    if t_ns is None or n == 0:
        # no clock: t_ns repeats the tick (the convention for "no time", see
        # pattern._analyze), and meta says so
        tn = np.arange(n, dtype=np.int64) + (1 if n_pre else 0)
    else:
        tn = np.maximum.accumulate(np.asarray(t_ns, np.int64))
    t0 = int(tn[0]) if n else 0
    out = _rows([(s, st) for _, s, st in pre] + still, t0 if t_ns is not None else 0,
                ops, ev_block, ev_size, streams, tn, marks, shift, device)
    n_ticks = n + shift
    tns = np.full(n_ticks, np.nan)
    if tick_ns is not None and n:
        tns[shift:] = np.asarray(tick_ns, np.float64)
    if shift and tick_ns is not None:
        tns[0] = 0.0  # the tick-0 allocations are bookkeeping, no kernel runs there
    m = dict(meta or {})
    m.setdefault("preexisting_blocks", n_pre)
    if t_ns is None:
        m["clock"] = "none"
    return Trace(out, tick_ns=tns, meta=m)


def _mint_blocks(ops: Sequence[int], addrs: Sequence[int], ev_size: np.ndarray,
                 streams: Sequence[int], where: str, describe
                 ) -> tuple[np.ndarray, dict[int, tuple[int, int]], list[tuple[int, int, int]]]:
    """Pass 1 of ``replay_addresses``: block ids in event order. Returns (each event's
    block: >= 0 for a recorded allocation, -1, -2... for the k-th free of a block allocated
    before recording; the addresses live at the end -> (block, size); the pre-existing
    blocks as (event, size, stream))."""
    n = len(ops)
    live: dict[int, tuple[int, int]] = {}  # addr -> (block, size)
    pre: list[tuple[int, int, int]] = []  # (block placeholder index, size, stream)
    ev_block = np.empty(n, np.int64)
    next_block = 0
    pre_marker = -1
    seen: set[int] = set()  # addresses any earlier event named
    for i in range(n):
        a = addrs[i]
        if ops[i] > 0:
            seen.add(a)
            if a in live:
                raise TraceError(
                    f"{where}: {describe(i)} allocates address {a:#x}, which is still live "
                    f"({live[a][1]:,} bytes); the recording lost a free"
                )
            live[a] = (next_block, int(ev_size[i]))
            ev_block[i] = next_block
            next_block += 1
        else:
            got = live.pop(a, None)
            if got is None:
                if a in seen:
                    raise TraceError(
                        f"{where}: {describe(i)} frees address {a:#x}, which is not live "
                        "(double free)"
                    )
                seen.add(a)
                pre.append((i, int(ev_size[i]), int(streams[i])))
                ev_block[i] = pre_marker
                pre_marker -= 1
            else:
                if got[1] != ev_size[i]:
                    raise TraceError(
                        f"{where}: {describe(i)} frees {int(ev_size[i]):,} bytes at {a:#x}, "
                        f"which was allocated with {got[1]:,} bytes"
                    )
                ev_block[i] = got[0]
    return ev_block, live, pre


def _rows(pre: list[tuple[int, int]], pre_t_ns: int, ops: Sequence[int], ev_block: np.ndarray,
          ev_size: np.ndarray, streams: Sequence[int], tn: np.ndarray, marks: list[int],
          shift: int, device: int) -> dict[str, np.ndarray]:
    """The columns: the pre-existing blocks' ALLOC rows (``pre``: (size, stream)) at tick
    0, then one row per event at tick ``i + shift``, with a MARK row before each event of
    ``marks``."""
    n, n_pre = len(ops), len(pre)
    rows = n_pre + n + len(marks)
    out = {k: np.zeros(rows, COLUMNS[k]) for k in COLUMNS}
    out["offset"][:] = -1
    out["length"][:] = -1
    out["device"][:] = device
    # tick-0 rows
    out["kind"][:n_pre] = EventKind.ALLOC
    out["block"][:n_pre] = np.arange(n_pre)
    out["size"][:n_pre] = [s for s, _ in pre]
    out["stream"][:n_pre] = [st for _, st in pre]
    out["t_ns"][:n_pre] = pre_t_ns
    # event rows, with MARK rows inserted before their event
    pos = n_pre + np.arange(n) + np.searchsorted(np.asarray(marks, np.int64), np.arange(n), side="right")
    out["tick"][pos] = np.arange(n) + shift
    out["t_ns"][pos] = tn
    out["kind"][pos] = np.where(np.asarray(ops) > 0, EventKind.ALLOC, EventKind.FREE)
    out["block"][pos] = ev_block
    out["size"][pos] = ev_size
    out["stream"][pos] = np.asarray(streams, np.int64) if n else 0
    if marks:
        mpos = n_pre + np.asarray(marks) + np.arange(len(marks))
        out["tick"][mpos] = np.asarray(marks) + shift
        out["t_ns"][mpos] = tn[marks]
        out["kind"][mpos] = EventKind.MARK
        out["block"][mpos] = -1
        out["size"][mpos] = 0
        out["stream"][mpos] = 0
        out["device"][mpos] = device
    return out


_ALLOC, _FREE_REQ, _FREE_DONE = "alloc", "free_requested", "free_completed"
_SEGMENT = {"segment_alloc", "segment_free", "segment_map", "segment_unmap"}
_SKIPPED = _SEGMENT | {"snapshot"}
_OOM_KEPT = 100  # OOM entries listed in meta (all are counted)


def _frame_class(frames: Any) -> int:
    """1: a Python frame of an optimizer's step; 2: of a backward call; 0: other frames;
    -1: no frames (C++ only, or not recorded: it says nothing)."""
    if type(frames) is not list or not frames:
        return -1
    back = False
    for f in frames:
        if type(f) is not dict:
            continue
        fn, name = f.get("filename"), f.get("name")
        if type(fn) is not str or type(name) is not str:
            continue
        fn = fn.replace("\\", "/")
        if "torch/optim/" in fn and "lr_scheduler" not in fn and name != "zero_grad":
            return 1
        if name in ("backward", "_engine_run_backward") and (
                "torch/_tensor.py" in fn or "torch/autograd/" in fn):
            back = True
    return 2 if back else 0


def _step_ends(cls: list[int]) -> tuple[list[int], str | None]:
    """Event positions where training steps end, from per-event frame classes: the end of
    each run of optimizer-step events (events without frames do not break a run); without
    any, of each run of backward events. A run ends at the next event with other frames."""
    for want, signal in ((1, "torch.optim step frames"), (2, "backward frames")):
        ends, inside = [], False
        for i, c in enumerate(cls):
            if c == want:
                inside = True
            elif c >= 0 and inside:
                ends.append(i)
                inside = False
        if inside:
            ends.append(len(cls))
        if ends:
            return ends, signal
    return [], None
# Fields this importer knows (torch 2.4-2.13). A newer torch may add more: they are reported
# in one warning and ignored, so a snapshot from a newer torch still loads (the alloc/free
# fields it maps have kept their meaning since the format appeared).
_TOP_FIELDS = {"segments", "device_traces", "allocator_settings", "external_annotations"}
_ENTRY_FIELDS = {"action", "addr", "size", "stream", "time_us", "frames", "compile_context",
                 "user_metadata", "device_free", "pool_id"}


def _warn_unknown(where: str, what: str, names: dict[str, int]) -> None:
    """One warning naming the ``names`` (name -> count) of ``what`` the import skipped."""
    listed = ", ".join(f"{k!r} ({v:,}x)" for k, v in sorted(names.items()))
    warnings.warn(f"{where}: ignored {what} this importer does not know: {listed} (a snapshot "
                  "from a newer PyTorch?); the alloc/free entries were imported",
                  _Warning, stacklevel=3)


def _segment_blocks(segments: Any, device: int, where: str) -> list[tuple[int, int, int]]:
    """(addr, requested size, stream) of every active block of ``device`` in ``segments``."""
    if not isinstance(segments, list):
        raise TraceError(f"{where}: 'segments' is a {type(segments).__name__}, expected a list")
    out = []
    for si, seg in enumerate(segments):
        w = f"{where}: segments[{si}]"
        if not isinstance(seg, dict):
            raise TraceError(f"{w} is a {type(seg).__name__}, expected a dict")
        if seg.get("device", 0) != device:
            continue
        blocks = seg.get("blocks", [])
        if not isinstance(blocks, list):
            raise TraceError(f"{w}['blocks'] is not a list")
        addr = _int(seg.get("address", 0), "address", w)
        stream = seg.get("stream", 0)
        stream = stream if isinstance(stream, int) and not isinstance(stream, bool) else 0
        for bi, b in enumerate(blocks):
            wb = f"{w}.blocks[{bi}]"
            if not isinstance(b, dict):
                raise TraceError(f"{wb} is a {type(b).__name__}, expected a dict")
            size = _int(b.get("size"), "size", wb)
            baddr = _int(b.get("address", addr), "address", wb)
            state = b.get("state")
            if isinstance(state, str) and state.startswith("active"):
                req = b.get("requested_size", size)
                req = _int(req, "requested_size", wb)
                if req < 0:
                    raise TraceError(f"{wb}: negative requested_size {req:,}")
                out.append((baddr, req, stream))
            addr = baddr + size
    return out


def _device_listing(traces: list) -> str:
    """'device 0: 1,234 alloc/free entries, 1 oom; device 2: ...' for the devices with events."""
    parts = []
    for i, d in enumerate(traces):
        if not isinstance(d, list) or not d:
            continue
        acts = [e.get("action") for e in d if isinstance(e, dict)]
        n_af = sum(a in (_ALLOC, _FREE_REQ, _FREE_DONE) for a in acts)
        n_oom = acts.count("oom")
        parts.append(f"device {i}: {n_af:,} alloc/free entries"
                     + (f", {n_oom} oom" if n_oom else ""))
    return "; ".join(parts) or "none"


def trace_from_snapshot(
    snap: dict, *, device: "int | str | None" = None, where: str = "snapshot",
    name: str | None = None
) -> Trace:
    """Convert an unpickled snapshot dict (see the module docstring) to a Trace.
    ``device``: CUDA device index (or ``"cuda:N"``); None = the one device with events (a
    TraceError lists them when there are several)."""
    traces = snap["device_traces"]
    if not isinstance(traces, list):
        raise TraceError(f"{where}: 'device_traces' is a {type(traces).__name__}, expected a list")
    dev = _choose_device(traces, device, where)
    entries = traces[dev]
    extra_top = {str(k): 1 for k in snap if k not in _TOP_FIELDS}
    if extra_top:
        _warn_unknown(where, "top-level fields", extra_top)
    ev = _Entries(entries, dev, where)
    if ev.unknown_actions:
        _warn_unknown(where, "entries with actions", ev.unknown_actions)
    if ev.unknown_fields:
        _warn_unknown(where, "entry fields (counted once per action)", ev.unknown_fields)
    if not ev.ops:
        raise TraceError(f"{where}: device {dev} has no alloc/free entries")
    have_time = ev.have_time
    t0 = ev.times[0] if have_time else 0
    t_ns = np.rint((np.asarray(ev.times, np.float64) - t0) * 1000).astype(np.int64) if have_time else None
    pre_live = _segment_blocks(snap.get("segments", []), dev, where)
    meta: dict[str, Any] = {
        "source": "torch_snapshot",
        "name": name or "snapshot",
        "device": f"cuda:{dev}",
        "units": {"t_ns": "ns", "size": "bytes", "tick": "allocator event"},
        "free_action": ev.free_action,
    }
    if have_time:
        meta["t0_us"] = t0
    if ev.seg_actions:
        meta["segment_entries"] = ev.seg_actions
        if "segment_map" in ev.seg_actions or "segment_unmap" in ev.seg_actions:
            meta["expandable_segments"] = True
    index = ev.index
    tr = replay_addresses(
        ev.ops, ev.addrs, ev.sizes, t_ns, ev.streams,
        device=dev, where=where,
        describe=lambda j: f"device_traces[{dev}][{index[j]}] ({entries[index[j]].get('action')})",
        live_at_end=pre_live, meta=meta,
    )
    # positions -> ticks: recorded events start at tick 1 when blocks predate the recording
    shift = 1 if tr.meta.get("preexisting_blocks") else 0
    if ev.n_oom:
        for o in ev.ooms:
            o["tick"] = o.pop("before_event") + shift
        tr.meta["oom"] = {"count": ev.n_oom, "entries": ev.ooms}
    ends, signal = _step_ends(ev.fcls)
    if ends:
        tr.meta["step_ends"] = {"signal": signal, "ends": [e + shift for e in ends]}
    return tr


def _choose_device(traces: list, device: "int | str | None", where: str) -> int:
    """The CUDA device index whose entries to import: ``device`` (an index, ``"cuda:N"``),
    or for None/``"cuda"`` the one device with events; errors list the devices with events."""
    if isinstance(device, str) and device.startswith("cuda:") and device[5:].isdigit():
        device = int(device[5:])
    elif device == "cuda":  # any CUDA device: the one with events
        device = None
    nonempty = [i for i, d in enumerate(traces) if isinstance(d, list) and d]
    if device is None:
        if len(nonempty) > 1:
            raise TraceError(
                f"{where}: allocator events on {len(nonempty)} devices ({_device_listing(traces)});"
                f" pass device=N (CLI: --device cuda:N) to choose one")
        device = nonempty[0] if nonempty else 0
    if isinstance(device, bool) or not isinstance(device, int) or device < 0:
        raise ValueError(f'device must be a CUDA device index (int >= 0) or "cuda:N", got {device!r}')
    if device >= len(traces) or not isinstance(traces[device], list) or not traces[device]:
        raise TraceError(
            f"{where}: no allocator events for device {device} (devices with events: "
            f"{_device_listing(traces)}); pass device=<one of those>"
        )
    return device


class _Entries:
    """One pass over a device's entries (the module docstring's mapping): the alloc/free
    events as columns (``ops`` +1/-1, ``addrs``, ``sizes``, ``times`` in us, ``streams``,
    ``index`` of the entry, ``fcls`` its ``_frame_class``), the OOM entries, the segment
    entries by action, and what the importer does not know (``unknown_actions``,
    ``unknown_fields``)."""

    def __init__(self, entries: list, device: int, where: str) -> None:
        unknown_actions: dict[str, int] = {}
        seen_actions: set[str] = set()  # actions whose first entry had its fields checked
        unknown_fields: dict[str, int] = {}
        has_completed = any(isinstance(e, dict) and e.get("action") == _FREE_DONE for e in entries)
        free_action = _FREE_DONE if has_completed else _FREE_REQ
        ops: list[int] = []
        addrs: list[int] = []
        sizes: list[int] = []
        times: list[int | float] = []  # time_us: int or float microseconds
        streams: list[int] = []
        index: list[int] = []
        fcls: list[int] = []  # _frame_class of each kept event
        ooms: list[dict] = []
        n_oom = 0
        seg_actions: dict[str, int] = {}
        have_time = True

        def bad(i: int, why: str) -> TraceError:
            return TraceError(f"{where}: device_traces[{device}][{i}] {why}")

        # One pass, no per-entry helpers or f-strings: snapshots hold up to millions of entries.
        for i, e in enumerate(entries):
            if type(e) is not dict:
                raise bad(i, f"is a {type(e).__name__}, expected a dict")
            action = e.get("action")
            if type(action) is not str:
                raise bad(i, f"has action {action!r}, expected a string")
            if action not in seen_actions:  # fields: the first entry of each action (cheap)
                seen_actions.add(action)
                for k in e.keys() - _ENTRY_FIELDS:
                    unknown_fields[str(k)] = unknown_fields.get(str(k), 0) + 1
            if action == _ALLOC:
                op = 1
            elif action == free_action:
                op = -1
            elif action == "oom":
                # the allocator failed here: kept beside the trace, before the next event
                n_oom += 1
                if len(ooms) < _OOM_KEPT:
                    ooms.append({"before_event": len(ops), "entry": i,
                                 **{k: e[k] for k in ("size", "device_free", "time_us", "stream")
                                    if type(e.get(k)) in (int, float)}})
                continue
            elif action in _SEGMENT:
                seg_actions[action] = seg_actions.get(action, 0) + 1
                continue
            elif action in _SKIPPED or action == _FREE_REQ or action == _FREE_DONE:
                continue
            else:
                unknown_actions[action] = unknown_actions.get(action, 0) + 1
                continue
            addr = e.get("addr")
            size = e.get("size")
            stream = e.get("stream", 0)
            if stream is None:
                stream = 0
            # type(...) is int: a bool or float here is corruption, not data
            if type(addr) is not int or type(size) is not int or type(stream) is not int:
                raise bad(i, f"({action}) needs integer addr/size/stream, got {addr!r}/{size!r}/{stream!r}")
            if not (0 <= size < 2**63 and -(2**63) <= stream < 2**63):
                raise bad(i, f"({action}) has size {size:,} / stream {stream} out of range")
            t = e.get("time_us")
            if t is None:
                have_time = False
                t = 0
            elif (type(t) is not int and type(t) is not float) or not abs(t) < 9e15:
                raise bad(i, f"({action}) has time_us {t!r}, expected a number of microseconds")
            ops.append(op)
            addrs.append(addr)
            sizes.append(size)
            times.append(t)
            streams.append(stream)
            index.append(i)
            fcls.append(_frame_class(e.get("frames")))
        self.ops, self.addrs, self.sizes, self.times = ops, addrs, sizes, times
        self.streams, self.index, self.fcls = streams, index, fcls
        self.ooms, self.n_oom, self.seg_actions = ooms, n_oom, seg_actions
        self.have_time, self.free_action = have_time, free_action
        self.unknown_actions, self.unknown_fields = unknown_actions, unknown_fields


def load_snapshot(path, data: bytes | None = None, *, device: "int | str | None" = None) -> Trace:
    """Read a memory snapshot pickle at ``path`` (bytes already read may be passed as
    ``data``) for CUDA device ``device`` (index or ``"cuda:N"``; None = the only one with
    events)."""
    p = Path(path)
    if data is None:
        data = p.read_bytes()
    snap = read_snapshot_dict(data, str(p))
    with gc_paused():
        try:
            return trace_from_snapshot(snap, device=device, where=str(p), name=p.stem)
        except (TypeError, AttributeError, KeyError, IndexError) as e:
            # a field of an unexpected type that the checks above did not anticipate
            raise TraceError(f"{p}: malformed memory snapshot ({type(e).__name__}: {e})") from None
