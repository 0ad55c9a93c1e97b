"""The ctypes face of the native core's fault sampling: CUPTI unified-memory GPU page-fault
records (``cupti.c``) and fault probes (``probe.c``); ``uvm_sched.h`` documents each call.
Kept apart from ``native.py`` (the allocator's face) as the plan-aware calls are."""
from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

from . import native

__all__ = ["FAULT_DTYPE", "PROBE_DTYPE", "cupti_start", "cupti_flush", "cupti_stop",
           "cupti_take", "cupti_clock", "cupti_stats", "probe_set", "probe_stats"]

# uvm_fault_sample (uvm_sched.h), 32 bytes
FAULT_DTYPE = np.dtype([("address", "<u8"), ("t_cupti", "<u8"), ("value", "<u8"),
                        ("flags", "<u4"), ("device", "<u4")])
# uvm_probe_row (uvm_sched.h), 32 bytes
PROBE_DTYPE = np.dtype([("tick", "<i8"), ("addr", "<u8"), ("bytes", "<u8"), ("device", "<i4"),
                        ("alloc_event", "<i4")])
assert FAULT_DTYPE.itemsize == 32 and PROBE_DTYPE.itemsize == 32

_lock = threading.Lock()
_ready = False
_PROBE_NAMES = ("rows", "issued", "skipped", "failed", "bytes")


def _lib() -> ctypes.CDLL:
    global _ready
    lib = native._load()
    if _ready:
        return lib
    with _lock:
        c = ctypes
        sig = {
            "uvm_sched_cupti_start": (c.c_int, [c.c_char_p, c.c_int]),
            "uvm_sched_cupti_flush": (c.c_int, []),
            "uvm_sched_cupti_stop": (c.c_int, []),
            "uvm_sched_cupti_take": (c.c_size_t, [c.c_void_p, c.c_size_t]),
            "uvm_sched_cupti_clock": (c.c_int, [c.POINTER(c.c_uint64), c.POINTER(c.c_uint64)]),
            "uvm_sched_cupti_stats_names": (c.c_char_p, []),
            "uvm_sched_cupti_stats": (c.c_size_t, [c.POINTER(c.c_uint64), c.c_size_t]),
            "uvm_sched_probe_set": (c.c_int, [c.c_void_p, c.c_size_t]),
            "uvm_sched_probe_stats": (c.c_size_t, [c.POINTER(c.c_uint64), c.c_size_t]),
        }
        for name, (res, args) in sig.items():
            f = getattr(lib, name)
            f.restype, f.argtypes = res, args
        _ready = True
    return lib


def cupti_start(path: str | None = None, device: int = 0) -> None:
    """Load CUPTI (``$UVM_SCHED_LIBCUPTI``, else ``path``, else libcupti.so on the loader's
    path) and collect GPU page faults of ``device``. Raises ``native.UvmSchedError`` saying
    why not (no CUPTI: what to install; CUPTI's refusal: the call and its result)."""
    s = _lib().uvm_sched_cupti_start(path.encode() if path else None, int(device))
    if s == native._ENOBACKEND:
        raise native.UvmSchedError(f"fault sampling: {native._last_error()}")
    native._raise(s, "fault sampling (CUPTI)")


def cupti_flush() -> None:
    """Have CUPTI deliver the records it holds (a forced flush)."""
    native._raise(_lib().uvm_sched_cupti_flush(), "cuptiActivityFlushAll")


def cupti_stop() -> None:
    """Flush, then stop collecting (the samples collected stay until taken)."""
    native._raise(_lib().uvm_sched_cupti_stop(), "stopping fault sampling")


def cupti_take() -> np.ndarray:
    """The fault samples collected since the last take (``FAULT_DTYPE``, oldest first)."""
    lib = _lib()
    parts = []
    while True:
        buf = np.empty(65536, FAULT_DTYPE)
        k = lib.uvm_sched_cupti_take(buf.ctypes.data, len(buf))
        parts.append(buf[:k])
        if k < len(buf):
            return np.concatenate(parts) if len(parts) > 1 else parts[0]


def cupti_clock() -> tuple[int, int]:
    """(CUPTI timestamp ns, the ring's CLOCK_MONOTONIC ns) read at the same moment."""
    a, b = ctypes.c_uint64(), ctypes.c_uint64()
    native._raise(_lib().uvm_sched_cupti_clock(ctypes.byref(a), ctypes.byref(b)),
                  "cuptiGetTimestamp")
    return int(a.value), int(b.value)


def cupti_stats() -> dict[str, int]:
    """CUPTI's counters: records, faults, other counter kinds, pending, lost (table full),
    buffers, buffer failures, bad buffers, records CUPTI dropped."""
    lib = _lib()
    names = [n for n in lib.uvm_sched_cupti_stats_names().decode().split(",") if n]
    buf = (ctypes.c_uint64 * len(names))()
    lib.uvm_sched_cupti_stats(buf, len(names))
    return dict(zip(names, (int(v) for v in buf)))


def probe_set(rows: Any) -> None:
    """Replace the fault-probe table with ``rows`` (``PROBE_DTYPE``: tick, addr, bytes,
    device, alloc_event -- with addr 0 the row probes the block allocated by that allocator
    event of the iteration, ``uvm_sched.h``; empty clears it)."""
    arr = np.ascontiguousarray(rows, dtype=PROBE_DTYPE)
    native._raise(_lib().uvm_sched_probe_set(arr.ctypes.data if len(arr) else None, len(arr)),
                  "setting the fault probes")


def probe_stats() -> dict[str, int]:
    """Probe rows set, probes issued, skipped (range no longer reserved), failed, bytes."""
    buf = (ctypes.c_uint64 * len(_PROBE_NAMES))()
    _lib().uvm_sched_probe_stats(buf, len(_PROBE_NAMES))
    return {f"probe_{n}": int(v) for n, v in zip(_PROBE_NAMES, buf)}
