"""PyTorch: put every CUDA tensor in CUDA Unified Memory through uvm_sched.

    import torch, uvm_sched
    torch.cuda.memory.change_current_allocator(uvm_sched.allocator())   # before any CUDA use
    # or: uvm_sched.integrations.torch.install()

PyTorch's own memory statistics raise under a pluggable allocator; read
``uvm_sched.stats()`` instead.  ``torch.cuda.empty_cache()`` returns uvm_sched's cached
arenas to the driver; ``Tensor.record_stream`` is honoured (the block's free waits for the
recorded streams); capturing a CUDA graph is refused with a clear error at the first
allocation in the capture, and an allocation that cannot be served raises (RuntimeError
naming the bytes, the device and why) instead of handing torch a NULL.
"""
from __future__ import annotations

import ctypes
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..native import UvmSchedError, _load, event_clock, library_path, step

_log = logging.getLogger(__name__)

if TYPE_CHECKING:
    import numpy as np

__all__ = ["allocator", "install", "mark_optimizer_steps", "TouchRecorder"]

_lock = threading.Lock()
# Process-wide singleton, on purpose: PyTorch keeps calling the functions of the
# allocator it was given for as long as any tensor allocated through it is alive, and
# it can swap allocators only once, before CUDA is initialised. A second
# CUDAPluggableAllocator could never be installed, and letting the first one be
# garbage-collected while tensors still hold its memory would leave their later frees
# calling through a dead object. Keeping one for the life of the process avoids both.
_ALLOCATOR = None
_INSTALLED = False


def _torch_with_cuda():
    try:
        import torch
    except ImportError as e:
        raise RuntimeError("uvm_sched.allocator() needs PyTorch (pip install torch)") from e
    if not getattr(torch.version, "cuda", None):
        raise RuntimeError(
            f"this PyTorch ({torch.__version__}) is built without CUDA, so it has no CUDA "
            "allocator to replace; install a CUDA build of torch to use uvm_sched.allocator()")
    return torch


def allocator() -> Any:
    """The ``torch.cuda.memory.CUDAPluggableAllocator`` over the uvm_sched library
    (``uvm_sched_malloc`` / ``uvm_sched_free``), created once per process. Raises
    ``RuntimeError`` on a CPU-only torch, or when CUDA is already initialised with
    PyTorch's own allocator (it can no longer be swapped)."""
    global _ALLOCATOR
    torch = _torch_with_cuda()
    with _lock:
        if torch.cuda.is_initialized() and not _INSTALLED:
            raise RuntimeError(
                "CUDA is already initialised in this process with PyTorch's own allocator, "
                "which cannot be swapped any more; install uvm_sched's allocator before the "
                "first CUDA tensor or call (e.g. at the top of the script)")
        if _ALLOCATOR is None:
            _ALLOCATOR = _pluggable(torch)
        return _ALLOCATOR


def _shim_path() -> str:
    """The C++ library torch loads (torch_shim.cpp), beside the core library."""
    here = Path(library_path()).parent
    if (here / "_uvm_sched_torch.so").is_file():
        return str(here / "_uvm_sched_torch.so")
    raise UvmSchedError(f"the PyTorch allocator library _uvm_sched_torch is not built in "
                        f"{here}; reinstall the package (`pip install -e .`, needs a C++ "
                        "compiler)")


def _pluggable(torch: Any) -> Any:
    """The CUDAPluggableAllocator over the shim, bound to the core, with empty_cache and
    record_stream wired where this torch lets us."""
    core = _load()
    shim = ctypes.CDLL(_shim_path())
    addr = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
    shim.uvm_sched_torch_bind.argtypes = [ctypes.c_void_p] * 3
    if shim.uvm_sched_torch_bind(addr(core.uvm_sched_torch_malloc_status),
                                 addr(core.uvm_sched_torch_free),
                                 addr(core.uvm_sched_last_error)) != 0:
        raise UvmSchedError("cannot bind the PyTorch allocator library to the core")
    alloc = torch.cuda.memory.CUDAPluggableAllocator(
        _shim_path(), "uvm_sched_torch_malloc", "uvm_sched_torch_free_shim")
    inner = alloc.allocator() if hasattr(alloc, "allocator") else getattr(alloc, "_allocator", None)
    for setter, fn, what in (("set_reset_fn", core.uvm_sched_torch_empty_cache,
                              "torch.cuda.empty_cache() will not release uvm_sched's cache"),
                             ("set_record_stream_fn", core.uvm_sched_torch_record_stream,
                              "Tensor.record_stream is ignored: free only what its "
                              "allocation stream is done with")):
        set_fn = getattr(inner, setter, None)
        if callable(set_fn):
            set_fn(addr(fn))
        else:
            _log.warning("this PyTorch (%s) has no CUDAPluggableAllocator.%s: %s",
                         torch.__version__, setter, what)
    return alloc


def install() -> Any:
    """Make uvm_sched PyTorch's CUDA allocator for this process (idempotent); returns it."""
    global _INSTALLED
    alloc = allocator()
    torch = _torch_with_cuda()
    with _lock:
        if not _INSTALLED:
            torch.cuda.memory.change_current_allocator(alloc)
            _INSTALLED = True
    return alloc


def mark_optimizer_steps() -> Any:
    """Call ``uvm_sched.step()`` after every ``torch.optim`` optimizer step (iteration
    markers for the executor and the tracer); returns the hook handle (``.remove()``)."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    return register_optimizer_step_post_hook(lambda opt, args, kwargs: step())


class TouchRecorder:
    """Access samples for ``mode="sampled"`` from a live PyTorch run: while active (a
    context manager, or ``start()``/``stop()`` in the same thread), every op dispatched
    records the storages of its tensor arguments and results on ``device_type`` as
    (allocator-event clock, storage base address) pairs -- which uvm_sched block each op
    touched, and when, on the clock the plan counts in. ``clocks``/``addresses`` hold them
    (numpy arrays); ``uvm_sched.planner.samples_from_touches`` turns them into samples.
    Costs tens of microseconds of host time per op while active, most of it PyTorch's
    Python dispatch mode itself (``benchmarks/results/tracer.md``): the Scheduler keeps it
    on during its warm-up iterations only and removes it before arming."""

    def __init__(self, device_type: str = "cuda") -> None:
        self.device_type = device_type
        self._clocks: list[int] = []
        self._addrs: list[int] = []
        self._mode: Any = None  # the dispatch mode while recording

    @property
    def active(self) -> bool:
        return self._mode is not None

    @property
    def clocks(self) -> np.ndarray:
        import numpy as np

        return np.asarray(self._clocks, np.int64)

    @property
    def addresses(self) -> np.ndarray:
        import numpy as np

        return np.asarray(self._addrs, np.uint64)

    def clear(self) -> None:
        """Forget the touches recorded so far."""
        self._clocks.clear()
        self._addrs.clear()

    def start(self) -> "TouchRecorder":
        if self._mode is None:
            self._mode = _touch_mode(self)
            self._mode.__enter__()
        return self

    def stop(self) -> None:
        if self._mode is not None:
            mode, self._mode = self._mode, None
            mode.__exit__(None, None, None)

    def __enter__(self) -> "TouchRecorder":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _touch_mode(rec: TouchRecorder):
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    dev = rec.device_type
    clocks, addrs = rec._clocks, rec._addrs
    Tensor = torch.Tensor
    on_dev = (lambda x: x.is_cuda) if dev == "cuda" else (lambda x: x.device.type == dev)

    def tensors(args, kwargs, out):
        # an aten op's schema nests tensors one level at most (Tensor[], Tensor?[]), and
        # its results are a tensor or a tuple/list of them: no general tree walk needed
        # (pytree's cost ~10 us per op, measured in benchmarks/bench_tracer.py)
        for x in (*args, *kwargs.values(), out) if kwargs else (*args, out):
            if isinstance(x, Tensor):
                yield x
            elif isinstance(x, (list, tuple)):
                for y in x:
                    if isinstance(y, Tensor):
                        yield y

    class _Touches(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            clock = event_clock()  # after the op: its output's allocation, if any, is in
            for x in tensors(args, kwargs, out):
                if on_dev(x):
                    try:
                        ptr = x.untyped_storage().data_ptr()
                    except (RuntimeError, NotImplementedError):
                        continue  # a tensor without storage (sparse, functional wrappers)
                    if ptr:
                        clocks.append(clock)
                        addrs.append(ptr)
            return out

    return _Touches()
