"""The native core, from Python: loading the library, the ABI check, the allocator, the
event ring and the plan executor.

The library (``uvm_sched/_native/_uvm_sched*.so``, plain C) is loaded lazily with
ctypes on first use, and its ABI version is checked.  It picks its backend once per
process: ``UVM_SCHED_BACKEND=auto|cuda|host`` (auto: the CUDA driver when it loads and sees
a device, else the host emulation).  Other settings, read when the backend starts:
``UVM_SCHED_LIBCUDA`` (driver library to load instead of ``libcuda.so.1``),
``UVM_SCHED_ARENA_BYTES`` (size of each managed reservation, default 1 GiB; units K/M/G),
``UVM_SCHED_LIMIT_BYTES`` (cap on reserved bytes), ``UVM_SCHED_RING_EVENTS`` (ring
capacity, default 2**20 records), ``UVM_SCHED_TRACE=0`` (no event recording),
``UVM_SCHED_VERBOSE`` (0 silences errors logged from the PyTorch ABI; they go to the
``uvm_sched.native`` logger at WARNING, as do the library's load and backend at INFO). Values are read
strictly (a count: a whole number with an optional K/M/G/T unit; TRACE: 0/1, true/false,
yes/no, on/off): one that does not parse stops the library from starting, and the first
call raises ``ValueError`` naming the variable, the value and an accepted example.
Arguments are checked before ctypes sees them (ctypes would wrap an int modulo 2**64):
sizes and pointers are integers (``TypeError`` for a float, str or bool) in their range
(``ValueError``).

Event kinds in :func:`drain_events` (``EVENT_KINDS`` maps code -> name): ``alloc`` (0) and
``free`` (1) with the block's requested bytes and its global alloc ordinal in ``arg``;
``mark`` (3, :func:`step`); ``iter`` (4, the executor starts iteration ``arg``, ``addr`` =
the tick of the iteration's allocator event 0); ``arm``
(5) and ``disarm`` (6); ``16 + a`` for an issued plan action ``a`` (an index into
``uvm_sched.planner.ACTIONS``; ``arg`` = the plan row, ``stream`` = the stream it was
queued on); errors: ``oom`` (32), ``bad_free`` (33), ``double_free`` (34),
``size_mismatch`` (35, ``arg`` = the allocated size), ``driver_error`` (36),
``divergence`` (37, ``arg`` = the allocation ordinal in the iteration), ``skipped`` (38),
``action_failed`` (39), ``unsupported`` (40).  Direct calls (:func:`prefetch`,
:func:`advise`, :func:`discard`, :func:`synchronize`, :func:`release_cached`) are recorded
too: a prefetch, advice or discard as the action it equals (``16 + a``) with ``arg = -1``
(no plan row), a refusal by the driver as ``action_failed``/``unsupported`` with
``arg = -1 - a``; ``unadvise`` (41, ``arg`` = the advice's action index), ``release`` (42,
``size`` = bytes released), ``sync`` (43, ``stream``).  ``tick`` is the ordinal of the
allocator event (malloc or free) since the library started; other events carry the
ordinal of the allocator event they follow (a mark: of the next one).
"""
from __future__ import annotations

import atexit
import ctypes
import logging
import threading
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from ._codes import NativeEvent
from ._drain_slabs import DrainSlabs
from ._errors import Error

__all__ = [
    "malloc", "free", "stats", "step", "drain_events", "backend", "backend_reason",
    "library_path", "release_cached", "set_tracing", "block_info",
    "prefetch", "advise", "discard", "synchronize", "stream_handle",
    "arm", "arm_plan", "plan_table", "disarm", "action_log", "replay",
    "EVENT_DTYPE", "PLAN_ROW_DTYPE", "EVENT_KINDS", "ABI_VERSION",
    "UvmSchedError", "OutOfMemoryError", "FreeError", "UnsupportedError",
]

ABI_VERSION = 5

# status codes of the C core (uvm_sched.h)
_OK, _EINVAL, _ENOMEM, _EDRIVER, _EUNSUPPORTED = 0, -1, -2, -3, -4
_EUNKNOWN, _EDOUBLEFREE, _ESIZE, _EBUSY, _ENOBACKEND = -5, -6, -7, -8, -9
_SIZE_ANY = (1 << 64) - 1
_MAX_PERIOD_EVENTS = 1 << 24  # = planner._plan.MAX_PERIOD_EVENTS (this module needs no pandas)

EVENT_DTYPE = np.dtype([
    ("tick", "<u8"), ("t_ns", "<u8"), ("addr", "<u8"), ("size", "<u8"), ("stream", "<u8"),
    ("arg", "<i8"), ("kind", "<i4"), ("device", "<i4"),
])
assert EVENT_DTYPE.itemsize == 56

PLAN_ROW_DTYPE = np.dtype([
    ("tick", "<i8"), ("action", "<i4"), ("persistent", "<i4"), ("block", "<i8"),
    ("offset", "<u8"), ("bytes", "<u8"), ("addr", "<u8"),
])
assert PLAN_ROW_DTYPE.itemsize == 48

_ACTION_NAMES = (  # = uvm_sched.planner.ACTIONS (kept here so this module needs no pandas)
    "prefetch_to_device", "prefetch_to_host", "advise_preferred_host",
    "advise_accessed_by", "advise_read_mostly", "discard",
)
_ACTION_BASE = int(NativeEvent.ACTION)
EVENT_KINDS: dict[int, str] = dict(sorted({
    **{int(k): k.name.lower() for k in NativeEvent
       if not NativeEvent.ACTION <= k <= NativeEvent.ACTION_END},
    **{_ACTION_BASE + i: a for i, a in enumerate(_ACTION_NAMES)},
}.items()))


class UvmSchedError(Error, RuntimeError):
    """The native core refused a request (driver error, no backend, bad state)."""


# MemoryError before Error: its own __new__ must come first for unpickling to create one.
class OutOfMemoryError(MemoryError, Error):
    """An allocation cannot be served. ``size``: bytes asked for; ``reserved``: bytes the
    pool holds from the driver; ``limit``: the cap on reserved bytes (None = no cap)."""

    def __init__(self, size: int, reserved: int, limit: int | None, detail: str = "") -> None:
        self.size, self.reserved, self.limit = size, reserved, limit
        lim = "no limit" if limit is None else f"limit {limit:,} bytes (UVM_SCHED_LIMIT_BYTES)"
        msg = (f"uvm_sched: cannot allocate {size:,} bytes ({reserved:,} bytes reserved, {lim})"
               + (f": {detail}" if detail else "")
               + ". Free or release cached memory (uvm_sched.native.release_cached()), or "
                 "raise the limit.")
        super().__init__(msg)


class UnsupportedError(UvmSchedError):
    """The driver lacks the call (``discard`` needs a CUDA 13 driver)."""


class FreeError(Error, ValueError):
    """A free that the pool refused (unknown pointer, double free, wrong size); the pool
    is unchanged. ``ptr``, ``size`` and ``reason`` (``unknown``/``double_free``/``size``)."""

    def __init__(self, ptr: int, size: int | None, reason: str, detail: str) -> None:
        self.ptr, self.size, self.reason = ptr, size, reason
        super().__init__(f"uvm_sched.free(0x{ptr:x}"
                         + (f", size={size:,}" if size is not None else "") + f"): {detail}")


# ---- loading -------------------------------------------------------------------------
_log = logging.getLogger(__name__)
_lock = threading.Lock()
_LIB: ctypes.CDLL | None = None
_STATS_NAMES: list[str] = []


def library_path() -> str:
    """Absolute path of the native shared library (what PyTorch's pluggable allocator
    loads): ``_native/_uvm_sched.so``, one build for every Python (it links no Python
    symbol), never a stale ``_uvm_sched.cpython-*.so`` left by an older build."""
    here = Path(__file__).resolve().parent / "_native"
    ours = here / "_uvm_sched.so"
    if ours.is_file():
        return str(ours)
    # builds from before the library lost its Python ABI tag may linger; never load one
    stale = sorted(p.name for p in here.glob("_uvm_sched.*.so"))
    raise UvmSchedError(
        f"the native library is not built (no _uvm_sched.so in {here}"
        + (f"; found only {', '.join(stale)}, a stale build" if stale else "")
        + "); install the package with `pip install -e .` (needs a C compiler, not CUDA)")


def _load() -> ctypes.CDLL:
    global _LIB, _STATS_NAMES
    if _LIB is not None:
        return _LIB
    with _lock:
        if _LIB is not None:
            return _LIB
        path = library_path()
        lib = ctypes.CDLL(path)
        lib.uvm_sched_abi_version.restype = ctypes.c_int
        got = lib.uvm_sched_abi_version()
        if got != ABI_VERSION:
            raise UvmSchedError(
                f"{path} has native ABI version {got}, this Python code needs {ABI_VERSION}; "
                "rebuild with `pip install -e .`")
        c = ctypes
        sig = {
            "uvm_sched_init": (c.c_int, [c.c_char_p]),
            "uvm_sched_reset": (c.c_int, [c.c_char_p, c.c_int]),
            "uvm_sched_backend_name": (c.c_char_p, []),
            "uvm_sched_backend_reason": (c.c_char_p, []),
            "uvm_sched_last_error": (c.c_char_p, []),
            "uvm_sched_malloc_status": (c.c_int, [c.c_size_t, c.c_int, c.c_void_p,
                                                  c.POINTER(c.c_void_p)]),
            "uvm_sched_free_status": (c.c_int, [c.c_void_p, c.c_size_t, c.c_int, c.c_void_p,
                                                c.c_int]),
            "uvm_sched_malloc": (c.c_void_p, [c.c_size_t, c.c_int, c.c_void_p]),
            "uvm_sched_free": (None, [c.c_void_p, c.c_size_t, c.c_int, c.c_void_p]),
            "uvm_sched_block_info": (c.c_int, [c.c_void_p, c.POINTER(c.c_uint64),
                                               c.POINTER(c.c_uint64), c.POINTER(c.c_uint64)]),
            "uvm_sched_block_ordinals": (c.c_int, [c.c_void_p, c.c_size_t, c.c_void_p]),
            "uvm_sched_step": (c.c_int, []),
            "uvm_sched_release_cached": (c.c_int64, []),
            "uvm_sched_check_pool": (c.c_int, [c.c_int]),
            "uvm_sched_stats_names": (c.c_char_p, []),
            "uvm_sched_stats": (c.c_size_t, [c.POINTER(c.c_uint64), c.c_size_t]),
            "uvm_sched_set_tracing": (c.c_int, [c.c_int]),
            "uvm_sched_ring_pending": (c.c_size_t, []),
            "uvm_sched_drain": (c.c_size_t, [c.c_void_p, c.c_size_t]),
            "uvm_sched_exec_arm": (c.c_int, [c.c_void_p, c.c_size_t, c.c_void_p, c.c_size_t,
                                             c.c_uint64, c.c_int, c.c_int, c.c_int]),
            "uvm_sched_exec_arm_at": (c.c_int, [c.c_void_p, c.c_size_t, c.c_void_p, c.c_size_t,
                                                c.c_uint64, c.c_int, c.c_int, c.c_int,
                                                c.c_uint64, c.c_void_p, c.c_size_t]),
            "uvm_sched_exec_set_insertion": (c.c_int, [c.c_void_p, c.c_size_t, c.c_void_p,
                                                       c.c_size_t, c.c_uint64, c.c_uint64]),
            "uvm_sched_exec_disarm": (c.c_int, []),
            "uvm_sched_prefetch": (c.c_int, [c.c_void_p, c.c_size_t, c.c_int, c.c_int,
                                             c.c_void_p]),
            "uvm_sched_advise": (c.c_int, [c.c_void_p, c.c_size_t, c.c_int, c.c_int, c.c_int]),
            "uvm_sched_discard": (c.c_int, [c.c_void_p, c.c_size_t, c.c_int, c.c_void_p]),
            "uvm_sched_synchronize": (c.c_int, [c.c_void_p, c.c_int]),
        }
        for name, (res, args) in sig.items():
            f = getattr(lib, name)
            f.restype, f.argtypes = res, args
        _STATS_NAMES = [n for n in lib.uvm_sched_stats_names().decode().split(",") if n]
        _capture_log(lib)
        _LIB = lib
        _log.info("loaded the native library %s (ABI %d)", path, got)
        return lib


# ---- the C core's log -------------------------------------------------------------------
# Errors met on the PyTorch ABI (uvm_sched_malloc/free: no caller to return them to) are
# kept by the C core and moved to the "uvm_sched.native" logger at WARNING whenever Python
# reads the library (drain_events, stats, an error) and at exit; not written to stderr.
_LOG_CAP = 4097  # the C buffer's 4 KiB and its NUL
_backend_logged: tuple[str, str] | None = None


def _capture_log(lib: ctypes.CDLL) -> None:
    lib.uvm_sched_log_capture.restype, lib.uvm_sched_log_capture.argtypes = (
        ctypes.c_int, [ctypes.c_int])
    lib.uvm_sched_take_log.restype = ctypes.c_size_t
    lib.uvm_sched_take_log.argtypes = [ctypes.c_char_p, ctypes.c_size_t,
                                       ctypes.POINTER(ctypes.c_uint64)]
    lib.uvm_sched_log_capture(1)
    atexit.register(_flush_log)


def _flush_log() -> None:
    """Move the C core's buffered log lines to Python's logging."""
    lib = _LIB
    if lib is None:
        return
    buf = ctypes.create_string_buffer(_LOG_CAP)
    dropped = ctypes.c_uint64(0)
    n = lib.uvm_sched_take_log(buf, _LOG_CAP, ctypes.byref(dropped))
    for line in buf.raw[:n].decode(errors="replace").splitlines():
        _log.warning("native core: %s", line)
    if dropped.value:
        _log.warning("native core: %d log lines lost (more than 4 KiB between two reads)",
                     dropped.value)


def _note_backend(name: str) -> None:
    """Log the backend once, when Python first sees it (and again after a reset)."""
    global _backend_logged
    if name == "none":
        return
    reason = backend_reason()
    if _backend_logged != (name, reason):
        _backend_logged = (name, reason)
        _log.info("native backend: %s (%s)", name, reason)


def _last_error() -> str:
    return _load().uvm_sched_last_error().decode(errors="replace")


def _raise(status: int, what: str) -> None:
    if status == _OK:
        return
    detail = _last_error()
    _flush_log()
    if status == _ENOBACKEND:
        raise UvmSchedError(f"{what}: no backend: {detail or backend_reason()}")
    if status == _EINVAL:
        raise ValueError(f"{what}: {detail}")
    raise UvmSchedError(f"{what}: {detail} (status {status})")


# ---- argument checks ------------------------------------------------------------------
# ctypes converts a Python int to c_size_t / c_void_p modulo 2**64, so free(p + 2**64)
# would free p and size=-1 would read as "any size": every number is checked here first.
def _whole(v: Any, what: str) -> int:
    """``v`` as an int: a Python or numpy integer (never a bool, float or str)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{what} must be an integer, got {v!r} ({type(v).__name__})")
    return int(v)


def _ptr(v: Any, what: str = "pointer") -> int:
    """An address: an integer in 0..2**64-1."""
    p = _whole(v, what)
    if not 0 <= p < 1 << 64:
        raise ValueError(f"{what} {p:#x} is not an address (0..2**64-1)")
    return p


def _nbytes(v: Any, what: str = "size") -> int:
    """A byte count: an integer in 0..2**64-2 (2**64-1 means "any size" to the C core)."""
    n = _whole(v, what)
    if n < 0:
        raise ValueError(f"{what} must be >= 0 bytes, got {n:,}")
    if n >= _SIZE_ANY:
        raise ValueError(f"{what} of {n:,} bytes is beyond 64 bits")
    return n


def _device(v: Any) -> int:
    d = _whole(v, "device")
    if not 0 <= d < 1 << 31:
        raise ValueError(f"device must be >= 0, got {d} (a CUDA device index below 2**31)")
    return d


# ---- allocator ------------------------------------------------------------------------
def malloc(nbytes: int, stream: int = 0, device: int = 0) -> int:
    """Allocate ``nbytes`` bytes of managed memory for use on ``stream`` (a CUstream handle
    as an int; 0 = the default stream) and return its address (0 for ``nbytes == 0``).
    Raises ``OutOfMemoryError`` when it cannot be served."""
    lib = _load()
    nbytes = _whole(nbytes, "malloc size")
    if nbytes < 0:
        raise ValueError(f"cannot allocate a negative number of bytes ({nbytes:,})")
    if nbytes >= 1 << 64:
        raise OutOfMemoryError(nbytes, stats()["reserved_bytes"], None, "size beyond 64 bits")
    out = ctypes.c_void_p()
    s = lib.uvm_sched_malloc_status(nbytes, _device(device), stream_handle(stream) or None,
                                    ctypes.byref(out))
    if s == _ENOMEM:
        st = stats()
        lim = st["limit_bytes"]
        raise OutOfMemoryError(nbytes, st["reserved_bytes"], None if lim == _SIZE_ANY else lim,
                               _last_error())
    _raise(s, f"uvm_sched.malloc({nbytes:,})")
    return out.value or 0


def free(ptr: int, size: int | None = None, stream: int | None = None) -> None:
    """Free a block from :func:`malloc`. ``size`` (bytes), when given, must be the size it
    was allocated with; ``stream``, when given, is the stream the block was last used on
    (default: the stream it was allocated on, which must not have been destroyed: pass a
    live stream otherwise). ``free(0)`` does nothing. Raises
    ``FreeError`` naming the pointer for an unknown pointer, a double free or a wrong
    size, leaving the pool unchanged."""
    lib = _load()
    ptr = _ptr(ptr)
    if size is not None:
        size = _nbytes(size, "free size")
    if ptr == 0:
        return
    s = lib.uvm_sched_free_status(ptr, _SIZE_ANY if size is None else size, 0,
                                  stream_handle(stream) or None, 1 if stream is None else 0)
    if s == _OK:
        return
    reason = {_EUNKNOWN: "unknown", _EDOUBLEFREE: "double_free", _ESIZE: "size"}.get(s)
    if reason is None:
        _raise(s, f"uvm_sched.free(0x{ptr:x})")
    assert reason is not None  # s != _OK here, so _raise above raised
    raise FreeError(ptr, size, reason, _last_error())


def block_info(ptr: int) -> dict[str, int]:
    """The live block starting at ``ptr``: ``size`` (requested bytes), ``ordinal`` (global
    allocation ordinal), ``stream``. Raises ``FreeError``-like ``ValueError`` otherwise."""
    lib = _load()
    ptr = _ptr(ptr)
    size, ordn, stream = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint64()
    s = lib.uvm_sched_block_info(ptr, ctypes.byref(size), ctypes.byref(ordn),
                                 ctypes.byref(stream))
    if s != _OK:
        raise ValueError(f"0x{ptr:x} is not the start of a live uvm_sched block")
    return {"size": size.value, "ordinal": ordn.value, "stream": stream.value}


def step() -> None:
    """Mark the start of an iteration (a MARK event; re-synchronises an armed plan with
    ``sync="marker"``)."""
    _raise(_load().uvm_sched_step(), "uvm_sched.step()")


def release_cached() -> int:
    """Return the memory of empty arenas to the driver; returns the bytes released.
    Counted (``direct_releases``) and recorded as ``release`` (``size`` = bytes)."""
    n = _load().uvm_sched_release_cached()
    if n < 0:
        _raise(int(n), "uvm_sched.release_cached()")
    return int(n)


# ---- direct calls (calibration, tools) -----------------------------------------------
def stream_handle(stream: Any) -> int:
    """A CUDA stream as the integer handle the driver takes: an int (0 = the legacy default
    stream), ``None``, a ``ctypes.c_void_p``, a ``torch.cuda.Stream`` (``cuda_stream``), a
    Numba stream (``handle``), a CuPy stream (``ptr``), an object with
    ``__cuda_stream__``, or anything ``int()`` accepts (a ``cuda.bindings`` CUstream)."""
    if stream is None:
        return 0
    if isinstance(stream, (int, np.integer)) and not isinstance(stream, (bool, np.bool_)):
        return _ptr(stream, "stream handle")
    if isinstance(stream, ctypes.c_void_p):
        return int(stream.value or 0)
    proto = getattr(stream, "__cuda_stream__", None)
    if callable(proto):
        return int(proto()[1])
    for attr in ("cuda_stream", "handle", "ptr"):
        if hasattr(stream, attr):
            return stream_handle(getattr(stream, attr))
    if isinstance(stream, (bool, float, str, bytes, np.bool_, np.floating)):
        raise TypeError(f"cannot make a CUDA stream handle of {stream!r} "
                        f"({type(stream).__name__})")
    try:
        h = int(stream)
    except (TypeError, ValueError):
        raise TypeError(f"cannot make a CUDA stream handle of {stream!r} "
                        f"({type(stream).__name__})") from None
    return _ptr(h, "stream handle")


def _direct(status: int, call: str) -> None:
    """Raise for a direct call's status: ValueError for a range or argument the library
    refused before calling the driver, UnsupportedError, UvmSchedError (driver status)."""
    if status == _OK:
        return
    detail = _last_error()
    if status in (_EUNKNOWN, _EINVAL):
        raise ValueError(f"{call}: {detail}")
    if status == _EUNSUPPORTED:
        raise UnsupportedError(f"{call}: {detail}")
    _raise(status, call)


def _range(ptr: int, nbytes: int) -> tuple[int, int]:
    ptr, nbytes = _whole(ptr, "pointer"), _whole(nbytes, "range size")
    if ptr <= 0 or ptr >= 1 << 64:
        raise ValueError(f"pointer 0x{ptr:x} is not an address")
    if nbytes <= 0 or nbytes >= 1 << 64:
        raise ValueError(f"range at 0x{ptr:x} must be 1 byte or more, got {nbytes:,} bytes")
    return ptr, nbytes


def prefetch(ptr: int, nbytes: int, *, to: str = "device", stream: Any = 0,
             device: int = 0) -> None:
    """Migrate ``nbytes`` bytes at ``ptr`` (memory of this allocator) to ``device``
    (``to="device"``) or to the host (``to="host"``), asynchronously on ``stream`` (see
    :func:`stream_handle`): ``cuMemPrefetchAsync`` through the executor's driver table.
    Counted in ``stats()`` (``direct_prefetches``, ``direct_bytes_h2d``/``_d2h``) and
    recorded in the ring as ``prefetch_to_device``/``prefetch_to_host`` with ``arg = -1``;
    the host backend records it and does nothing. Raises ``ValueError`` for a range
    outside this allocator's memory, ``UvmSchedError`` (with the driver's status) when the
    driver refuses."""
    if to not in ("device", "host"):
        raise ValueError(f"prefetch: to must be 'device' or 'host', got {to!r}")
    ptr, nbytes = _range(ptr, nbytes)
    h = stream_handle(stream)
    device = _device(device)
    s = _load().uvm_sched_prefetch(ptr, nbytes, 1 if to == "host" else 0, device, h or None)
    _direct(s, f"uvm_sched.native.prefetch(0x{ptr:x}, {nbytes:,} bytes, to={to!r}, "
               f"stream=0x{h:x}, device={int(device)})")


def advise(ptr: int, nbytes: int, advice: str, *, device: int = 0,
           unset: bool = False) -> None:
    """Give the driver advice about ``nbytes`` bytes at ``ptr`` (memory of this
    allocator): ``advice`` is one of the planner's actions ``advise_preferred_host``
    (preferred location: host), ``advise_accessed_by`` (``device`` maps it, no migration on
    access) or ``advise_read_mostly``; ``unset=True`` removes that advice instead
    (``CU_MEM_ADVISE_UNSET_*``; for ``advise_preferred_host`` it clears whatever preferred
    location is set). Advice outlives a free: a range handed out again keeps it, so unset
    what you set before freeing. Counted (``direct_advises``) and recorded (the action, or
    ``unadvise``); errors as :func:`prefetch`."""
    if advice not in _ACTION_NAMES[2:5]:
        raise ValueError(f"advise: unknown advice {advice!r}; one of "
                         f"{', '.join(_ACTION_NAMES[2:5])}")
    ptr, nbytes = _range(ptr, nbytes)
    device = _device(device)
    s = _load().uvm_sched_advise(ptr, nbytes, _ACTION_NAMES.index(advice), 1 if unset else 0,
                                 device)
    _direct(s, f"uvm_sched.native.advise(0x{ptr:x}, {nbytes:,} bytes, {advice!r}"
               f"{', unset=True' if unset else ''}, device={int(device)})")


def discard(ptr: int, nbytes: int, *, stream: Any = 0, device: int = 0) -> None:
    """Tell the driver the contents of ``nbytes`` bytes at ``ptr`` are dead, so it never
    migrates them (``cuMemDiscardBatchAsync``, stream-ordered on ``stream``; the next
    access reads indeterminate values). The range must lie inside one live block of more
    than 1 MiB (smaller blocks share their 2 MiB pages with others). Counted
    (``direct_discards``, ``direct_bytes_discarded``) and recorded as ``discard``. Raises
    ``UnsupportedError`` on a driver without it (before CUDA 13), else as
    :func:`prefetch`."""
    ptr, nbytes = _range(ptr, nbytes)
    h = stream_handle(stream)
    device = _device(device)
    s = _load().uvm_sched_discard(ptr, nbytes, device, h or None)
    _direct(s, f"uvm_sched.native.discard(0x{ptr:x}, {nbytes:,} bytes, stream=0x{h:x}, "
               f"device={int(device)})")


def synchronize(stream: Any = 0, *, device: int = 0) -> None:
    """Wait until the work queued on ``stream`` so far (e.g. prefetches) is done (0 = the
    legacy default stream). Counted (``direct_syncs``) and recorded as ``sync``."""
    h = stream_handle(stream)
    device = _device(device)
    s = _load().uvm_sched_synchronize(h or None, device)
    _direct(s, f"uvm_sched.native.synchronize(stream=0x{h:x}, device={int(device)})")


def set_tracing(on: bool) -> bool:
    """Turn event recording on or off; returns the previous setting."""
    r = _load().uvm_sched_set_tracing(1 if on else 0)
    if r < 0:
        _raise(r, "uvm_sched.set_tracing()")
    return bool(r)


def backend() -> str:
    """The backend in use: ``"cuda"`` or ``"host"`` (starts the library if needed)."""
    name = _load().uvm_sched_backend_name().decode()
    if name == "none":
        raise UvmSchedError(f"no backend could be started: {backend_reason()}")
    _note_backend(name)
    return name


def backend_reason() -> str:
    """Why the backend is the one it is (driver version and devices, or why not CUDA)."""
    return _load().uvm_sched_backend_reason().decode(errors="replace")


def stats() -> dict[str, Any]:
    """Allocator, ring and executor counters (bytes, counts; ``limit_bytes`` is 2**64-1
    without a limit), plus ``backend`` and
    ``fragmentation`` (share of the bytes held for blocks that the blocks do not use:
    rounding and partly filled slabs). What users read instead of
    ``torch.cuda.memory_stats()``, which raises under a pluggable allocator."""
    lib = _load()
    buf = (ctypes.c_uint64 * len(_STATS_NAMES))()
    lib.uvm_sched_stats(buf, len(_STATS_NAMES))
    d: dict[str, Any] = dict(zip(_STATS_NAMES, (int(v) for v in buf)))
    d["backend"] = lib.uvm_sched_backend_name().decode()
    _note_backend(d["backend"])
    _flush_log()
    d["fragmentation"] = (1.0 - d["allocated_bytes"] / d["in_use_bytes"]) if d["in_use_bytes"] else 0.0
    return d


def event_clock() -> int:
    """The allocator-event clock: how many allocator events (mallocs and frees) the library
    has made so far; event ``k`` carries tick ``k`` in the ring (``drain_events()``). What an
    access sampler stamps its observations with. ~2 us (one counter read)."""
    lib = _load()
    i = _STATS_NAMES.index("ticks")
    buf = (ctypes.c_uint64 * len(_STATS_NAMES))()
    lib.uvm_sched_stats(buf, len(_STATS_NAMES))
    return int(buf[i])


# Callables given every batch of events as it leaves the ring (uvm_sched.record_memory_history
# keeps them); empty = one check per drain.
_DRAIN_TAPS: list = []
# Where drains copy to: memory whose page faults a helper thread took (_drain_slabs).
_DRAIN_MEMORY = DrainSlabs(EVENT_DTYPE)
# Events peek_events() took from the ring and the next drain_events() hands out first.
_UNREAD: list[np.ndarray] = []


def drain_events() -> np.ndarray:
    """Take the events recorded since the last drain (oldest first) as a numpy structured
    array of ``EVENT_DTYPE`` (fields tick, t_ns, addr, size, stream, arg, kind, device;
    kinds in ``EVENT_KINDS``). Events lost to a full ring are counted in
    ``stats()["events_dropped"]``."""
    ev = _drain_ring()
    if _UNREAD:
        ev = np.concatenate([*_UNREAD, ev])
        _UNREAD.clear()
    return ev


def peek_events() -> np.ndarray:
    """The events the next ``drain_events()`` will return, without taking them (they move
    from the ring into a buffer that drain hands out first: the ring has room again)."""
    ev = _drain_ring()
    if len(ev):
        _UNREAD.append(ev)
    return np.concatenate(_UNREAD) if _UNREAD else ev


def _drain_ring() -> np.ndarray:
    ev = _drain_ring_raw()
    for tap in _DRAIN_TAPS:
        tap(ev)
    return ev


def _drain_ring_raw() -> np.ndarray:
    ev = _DRAIN_MEMORY.drain(_load())
    _flush_log()
    return ev


def _reset(backend: str | None = None, force: bool = False) -> None:
    """Tear the native state down and start ``backend`` again (tests only: every pointer
    handed out before becomes invalid)."""
    lib = _load()
    s = lib.uvm_sched_reset(backend.encode() if backend else None, 1 if force else 0)
    if s == _EBUSY:
        raise UvmSchedError(f"cannot reset: {_last_error()}")
    _raise(s, f"uvm_sched reset to backend {backend!r}")
    _UNREAD.clear()  # events of the state just torn down


def _check_pool(full: bool = True) -> None:
    """Check every invariant of the native pool from scratch (tests: the conformance suite
    and its random model call it); raises ``UvmSchedError`` naming the first broken one."""
    s = _load().uvm_sched_check_pool(1 if full else 0)
    if s != _OK:
        raise UvmSchedError(_last_error())


# ---- executor -------------------------------------------------------------------------
_SYNC = {"marker": 0, "period": 1, "period_resync": 2}


def arm(table: np.ndarray, alloc_sizes: Iterable[int], period_events: int, *,
        sync: str = "marker", device: int = 0, start_now: bool = True, phase: int = 0,
        phase_allocs: Iterable[int] | None = None) -> None:
    """Arm the executor with a raw plan table (``PLAN_ROW_DTYPE`` rows: tick = allocator
    event ordinal in the iteration, action = index in ``planner.ACTIONS``, persistent,
    block = allocation ordinal in the iteration, or for persistent rows the block's global
    allocation ordinal (``block_info(addr)["ordinal"]``), offset and bytes of the range
    (bytes 0 = to the end of the block), addr = the block's address for persistent rows).
    ``alloc_sizes[j]``: bytes of allocation j of the iteration (the divergence check; 0: any);
    ``period_events``: allocator events per iteration; ``sync``: ``"marker"`` (iterations
    start at :func:`step`), ``"period"`` (every ``period_events`` events) or
    ``"period_resync"`` (the same, but after a divergence the executor waits until the
    bytes live at its clean iteration boundaries are live again, and starts the next
    iteration there instead of counting on from a shifted position: ``resyncs`` in
    :func:`stats`);
    ``start_now``: the first iteration starts with the next allocator event (else at the
    next marker). Replaces any armed plan.

    ``phase`` (allocator events, ``0 <= phase < period_events``): arm mid-iteration, the
    current iteration having already had ``phase`` events; the next one is its event
    ``phase`` (with ``sync="period"`` the next iteration starts ``period_events - phase``
    events from now). Then ``phase_allocs`` is required: the addresses of the allocations
    the iteration made in those events, in order (empty if none; 0 for one already freed,
    whose rows are then skipped); a live one whose size is not ``alloc_sizes[j]`` counts as
    a divergence. Raises ``ValueError`` for a phase out of range."""
    lib = _load()
    t = np.ascontiguousarray(table, dtype=PLAN_ROW_DTYPE)
    if isinstance(alloc_sizes, np.ndarray) and alloc_sizes.dtype.kind in "iu":
        # the runtime's path (one array per plan): checked whole, not element by element
        bad = np.flatnonzero((alloc_sizes < 0) | (alloc_sizes >= _SIZE_ANY))
        if len(bad):
            _nbytes(int(alloc_sizes[bad[0]]), f"alloc_sizes[{bad[0]}]")  # raises, naming it
        sizes = np.ascontiguousarray(alloc_sizes, dtype=np.uint64)
    else:
        listed = list(alloc_sizes)
        for j, v in enumerate(listed):
            _nbytes(v, f"alloc_sizes[{j}]")
        sizes = np.ascontiguousarray(np.asarray(listed, dtype=np.uint64))
    if sync not in _SYNC:
        raise ValueError(f"sync must be 'marker', 'period' or 'period_resync', got {sync!r}")
    period_events = _whole(period_events, "period_events")
    if not 1 <= period_events <= _MAX_PERIOD_EVENTS:
        raise ValueError(f"period_events must be in 1..{_MAX_PERIOD_EVENTS:,} allocator events, "
                         f"got {period_events:,}")
    if len(sizes) > period_events:
        raise ValueError(f"{len(sizes):,} alloc_sizes, but an iteration has only "
                         f"{period_events:,} allocator events")
    device = _device(device)
    phase = _whole(phase, "phase")
    if not 0 <= phase < max(int(period_events), 1):
        raise ValueError(f"phase must be in 0..{int(period_events) - 1} (allocator events of "
                         f"the iteration already past, below period_events={int(period_events)}), "
                         f"got {phase}")
    if phase and phase_allocs is None:
        raise ValueError(f"phase={phase}: pass phase_allocs, the addresses of the allocations "
                         "the iteration made in those events (an empty list if none), so that "
                         "allocation ordinals line up with the plan's")
    pa = np.ascontiguousarray(np.asarray(list(phase_allocs or ()), dtype=np.uint64))
    if len(pa) > phase:
        raise ValueError(f"{len(pa)} phase_allocs, but only {phase} allocator events have "
                         "passed (phase)")
    s = lib.uvm_sched_exec_arm_at(t.ctypes.data if len(t) else None, len(t),
                                  sizes.ctypes.data if len(sizes) else None, len(sizes),
                                  int(period_events), _SYNC[sync], int(device),
                                  1 if start_now else 0, phase,
                                  pa.ctypes.data if len(pa) else None, len(pa))
    _raise(s, "arming the plan")


def disarm() -> None:
    """Stop executing the armed plan (no-op when none is armed)."""
    _raise(_load().uvm_sched_exec_disarm(), "disarming the plan")


# plan arming from a Plan, the action log and replay (pandas / trace readers): _armed.py
from ._armed import action_log, arm_plan, plan_table, replay  # noqa: E402  (they use the names above)
