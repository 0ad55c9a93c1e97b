"""PyTorch's memory tools, back under the pluggable allocator.

``torch.cuda.memory_stats()``, ``torch.cuda.memory._snapshot()`` and
``torch.cuda.memory._record_memory_history()`` read PyTorch's own caching allocator, so they
say nothing (or raise) once ``uvm_sched.allocator()`` serves the tensors. These functions give
the same answers from uvm_sched's counters and event ring, in torch's key names and snapshot
schema, so the tools practitioners already use (``torch.cuda._memory_viz``,
pytorch.org/memory_viz) keep working:

- ``memory_stats()``: torch's ``memory_stats`` keys that the native counters can answer
  exactly (pool ``all`` only: uvm_sched has one pool, not a large and a small one).
- ``record_memory_history()``: keep every allocator event from now on (and, with
  ``stacks="python"``, the Python frames of the PyTorch op that first wrote each block).
- ``memory_snapshot()`` / ``dump_snapshot(path)``: the kept events as a snapshot dict /
  pickle in torch's schema (``segments`` + ``device_traces``).

Why a tap on the drain rather than a second ring: the Scheduler drains the ring for its own
learning; a snapshot must neither steal those events from it nor be blind to them. Every
drained batch passes the history first (one list check when no history is kept), and a
snapshot takes pending events through ``native.peek_events`` -- which leaves them for the
next ``drain_events`` -- so both see every event once.
"""
from __future__ import annotations

import functools
import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["memory_stats", "record_memory_history", "memory_snapshot", "dump_snapshot"]


def memory_stats(device: Any = None) -> dict[str, int]:
    """The allocator's counters under ``torch.cuda.memory_stats()``'s key names and meanings
    (bytes and counts; ``.current`` now, ``.peak`` the highest so far, ``.allocated`` /
    ``.freed`` the historical increase / decrease, so ``allocated - freed == current``).

    Present: ``allocated.all.*`` and ``active.all.*`` (blocks handed out; a freed block is
    reusable at once, so active = allocated), ``allocated_bytes.all.{current,peak}`` and the
    ``active_bytes`` twins, ``reserved_bytes.all.*`` (managed memory reserved from the
    driver), ``segment.all.*`` (managed reservations, "arenas"), ``num_ooms``,
    ``num_device_alloc`` / ``num_device_free`` (``cudaMallocManaged`` / ``cudaFree``
    calls), ``num_sync_all_streams`` (other streams' caches synchronised to be reused).
    Absent (no counter says them exactly, and a made-up zero would mislead):
    ``large_pool`` / ``small_pool`` breakdowns, ``allocated_bytes.all.{allocated,freed}``,
    ``allocated.all.peak``, ``inactive_split*``, ``num_alloc_retries``,
    ``requested_bytes.*``, ``oversize_*``. ``device``: accepted for torch's signature; the
    counters are the process's (one device). uvm_sched's own view: ``uvm_sched.stats()``."""
    from .native import stats

    s = stats()
    blocks, frees = s["allocated_blocks"], s["n_free"]
    out = {
        "allocated.all.current": blocks,
        "allocated.all.allocated": blocks + frees,
        "allocated.all.freed": frees,
        "allocated_bytes.all.current": s["allocated_bytes"],
        "allocated_bytes.all.peak": s["peak_allocated_bytes"],
        "reserved_bytes.all.current": s["reserved_bytes"],
        "reserved_bytes.all.peak": s["peak_reserved_bytes"],
        "reserved_bytes.all.allocated": s["reserved_bytes"] + s["bytes_released"],
        "reserved_bytes.all.freed": s["bytes_released"],
        "segment.all.current": s["arenas"],
        "segment.all.allocated": s["arenas"] + s["arenas_released"],
        "segment.all.freed": s["arenas_released"],
        "num_ooms": s["n_oom"],
        "num_device_alloc": s["arenas"] + s["arenas_released"],
        "num_device_free": s["arenas_released"],
        "num_sync_all_streams": s["reclaims"],
    }
    for k in [k for k in out if k.startswith("allocated")]:
        out["active" + k[len("allocated"):]] = out[k]
    return {k: int(v) for k, v in sorted(out.items())}


# -- history ------------------------------------------------------------------------------
class _History:
    """Events kept since ``record_memory_history`` (at most ``max_entries``, oldest dropped)
    and, with stacks, the Python frames of ops as (allocator-event clock, address, frames)."""

    def __init__(self, max_entries: int, stacks: bool, device_type: str) -> None:
        self.max_entries = max_entries
        self.parts: list[np.ndarray] = []
        self.n = 0
        self.dropped = 0
        self.frames: list[tuple[int, int, list[dict]]] | None = [] if stacks else None
        self.device_type = device_type
        self.mode: Any = None  # the _Frames dispatch mode while stacks are recorded

    def tap(self, ev: np.ndarray) -> None:
        if not len(ev):
            return
        self.parts.append(ev.copy())
        self.n += len(ev)
        while self.n > self.max_entries and self.parts:
            extra = self.n - self.max_entries
            head = self.parts[0]
            if len(head) <= extra:
                self.parts.pop(0)
                self.n -= len(head)
                self.dropped += len(head)
            else:
                self.parts[0] = head[extra:]
                self.n -= extra
                self.dropped += extra

    def events(self) -> np.ndarray:
        from .native import EVENT_DTYPE

        return np.concatenate(self.parts) if self.parts else np.empty(0, EVENT_DTYPE)


_HISTORY: _History | None = None


def record_memory_history(enabled: str | None = "all", *, stacks: str | None = None,
                          max_entries: int = 1_000_000, device_type: str = "cuda") -> None:
    """Keep allocator events for ``memory_snapshot`` from now on, as
    ``torch.cuda.memory._record_memory_history`` does for torch's allocator.

    ``enabled``: ``"all"`` (or True) starts, ``None`` (or False) stops and forgets.
    ``stacks="python"``: also note, for every PyTorch op dispatched in the calling thread (a
    ``TorchDispatchMode``: ~90 us per op measured on a small CPU op here, against ~5 us
    without; the first op imports ``torch._dynamo`` once), the Python frames that ran it
    and the storages of its ``device_type`` tensors; the snapshot then shows each block
    with the frames of the first op that touched it after its allocation (the allocation
    itself is made in C++, beneath Python). ``max_entries``: events kept (oldest dropped
    first; ``memory_snapshot`` says how many). Events drained before this call are not kept.
    """
    global _HISTORY
    from . import native

    on = enabled not in (None, False)
    if _HISTORY is not None:
        _stop_frames(_HISTORY)
        native._DRAIN_TAPS.remove(_HISTORY.tap)
        _HISTORY = None
    if not on:
        return
    if enabled not in ("all", True, "state"):
        raise ValueError(f"enabled={enabled!r}: give 'all' to record, None to stop")
    if stacks not in (None, "python", "all"):
        raise ValueError(f"stacks={stacks!r}: give None or 'python'")
    if int(max_entries) < 1:
        raise ValueError(f"max_entries must be >= 1, got {max_entries}")
    h = _History(int(max_entries), stacks is not None, device_type)
    native.peek_events()  # what is pending now predates the history: leave it unkept
    native._DRAIN_TAPS.append(h.tap)
    _HISTORY = h
    if h.frames is not None:
        _start_frames(h)


@functools.lru_cache(maxsize=65536)
def _frame(code, line: int) -> dict:
    """One torch-style frame dict per (code, line), shared by every op that passes there: a
    stack walk that reads no source lines and builds no dict twice."""
    return {"filename": code.co_filename, "line": line or 0, "name": code.co_name}


@functools.lru_cache(maxsize=4096)
def _op_frame(func) -> dict:
    return {"filename": "aten", "line": 0, "name": str(func)}


def _start_frames(h: _History) -> None:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    from .native import event_clock

    frames_log, dev = h.frames, h.device_type

    class _Frames(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            ptrs = []
            for x in tree_leaves((args, kwargs, out)):
                if isinstance(x, torch.Tensor) and x.device.type == dev:
                    try:
                        ptr = x.untyped_storage().data_ptr()
                    except (RuntimeError, NotImplementedError):
                        continue  # no storage (sparse, functional wrappers)
                    if ptr:
                        ptrs.append(ptr)
            if ptrs:
                clock = event_clock()  # after the op: its outputs' allocations are in
                stack = [_op_frame(func)]
                f = sys._getframe(1)
                while f is not None:
                    stack.append(_frame(f.f_code, f.f_lineno))
                    f = f.f_back
                for p in ptrs:
                    frames_log.append((clock, p, stack))
            return out

    h.mode = _Frames()
    h.mode.__enter__()


def _stop_frames(h: _History) -> None:
    if h.mode is not None:
        mode, h.mode = h.mode, None
        mode.__exit__(None, None, None)


# -- snapshots ----------------------------------------------------------------------------
def memory_snapshot() -> dict:
    """The events kept since ``record_memory_history()`` as a snapshot dict in torch's
    schema (what ``torch.cuda.memory._snapshot()`` returns: ``segments`` with their blocks,
    ``device_traces`` with alloc / free_requested / free_completed entries, sizes in bytes,
    ``time_us`` from the allocator's host clock), for ``torch.cuda._memory_viz``.

    Blocks are laid out in one segment per device as ``uvm_sched.trace.export_torch_snapshot``
    does (addresses are not the allocator's: a managed arena is not a cudaMalloc segment).
    Each block's frames are the Python frames of the first op that touched it (with
    ``stacks="python"``), then ``block N (tick T)`` pointing back to the trace. Pending
    events are read without taking them from the Scheduler. Raises RuntimeError when no
    history is being kept."""
    from . import native
    from .trace._export import trace_to_snapshot
    from .trace._native import trace_from_events

    h = _HISTORY
    if h is None:
        raise RuntimeError("no memory history is kept: call uvm_sched.record_memory_history() "
                           "before the allocations to show (events before it are not kept)")
    native.peek_events()  # pending events pass the history's tap, and stay for the next drain
    ev = h.events()
    trace, addrs = trace_from_events(ev, meta={"name": "uvm_sched", "source": "uvm_sched ring"},
                                     return_addresses=True)
    frames = _block_frames(trace, addrs, ev, h.frames) if h.frames else None
    snap = trace_to_snapshot(trace, frames=frames)
    if h.dropped:
        snap["uvm_sched"] = {"events_dropped_by_max_entries": h.dropped}
    return snap


def _block_frames(trace, addrs, ev: np.ndarray, log) -> dict[int, list[dict]]:
    """Block id -> frames of the first op that touched the block's address while it lived
    (ring tick k of the ALLOC < op clock <= ring tick of its FREE)."""
    from ._codes import NativeEvent

    keep = np.isin(ev["kind"], [NativeEvent.ALLOC, NativeEvent.FREE, NativeEvent.MARK])
    k0 = int(ev["tick"][keep][0]) if keep.any() else 0
    by_addr: dict[int, list[tuple[int, list[dict]]]] = {}
    for clock, addr, stack in log:
        by_addr.setdefault(int(addr), []).append((int(clock), stack))
    bt = trace.block_table()
    out: dict[int, list[dict]] = {}
    for b, a, f in zip(bt.index.tolist(), bt["alloc_tick"].tolist(), bt["free_tick"].tolist()):
        hits = by_addr.get(int(addrs[b])) if b < len(addrs) else None
        if not hits:
            continue
        lo = a + k0
        hi = f + k0 if f >= 0 else None
        for clock, stack in hits:
            if clock > lo and (hi is None or clock <= hi):
                out[int(b)] = stack
                break
    return out


def dump_snapshot(path) -> Path:
    """Write ``memory_snapshot()`` as a pickle to ``path`` (as
    ``torch.cuda.memory._dump_snapshot`` does); open it with ``python -m
    torch.cuda._memory_viz trace_plot PATH -o out.html``, on pytorch.org/memory_viz, or
    ``uvm-sched analyze PATH``. Returns the path."""
    from ._files import write_atomic

    path = Path(path)
    write_atomic(path, pickle.dumps(memory_snapshot(), protocol=4))
    return path
