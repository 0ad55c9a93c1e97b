"""Numba: an External Memory Management plugin (``interface_version`` 1) that allocates
device arrays in CUDA Unified Memory through uvm_sched. Select it with
``NUMBA_CUDA_MEMORY_MANAGER=uvm_sched.numba`` or
``numba.cuda.set_memory_manager(UvmSchedMemoryManager)``. Pinned host allocations stay
with Numba (``HostOnlyCUDAMemoryManager``).

Works with Numba's built-in ``numba.cuda`` and with numba-cuda: numba-cuda 0.21 (the
release that supports CUDA 13) removed ``driver.USE_NV_BINDING`` and always uses the
NVIDIA binding (``cuda.bindings``), so its absence means that binding.
"""
from __future__ import annotations

import contextlib
import ctypes
from typing import Any, Iterator

from numba.cuda.cudadrv import driver

from .. import native

__all__ = ["UvmSchedMemoryManager"]


def _nv_binding():
    """The NVIDIA binding's driver module when Numba uses it, else None (ctypes)."""
    if not getattr(driver, "USE_NV_BINDING", True):
        return None
    binding = getattr(driver, "binding", None)
    if binding is None:
        from cuda.bindings import driver as binding
    return binding


class UvmSchedMemoryManager(driver.HostOnlyCUDAMemoryManager):
    """Numba EMM plugin over uvm_sched (device memory = managed memory from the pool)."""

    def initialize(self) -> None:
        native.backend()  # start the library (and pick its backend) now, not mid-kernel

    def memalloc(self, size: int) -> Any:
        """``size`` bytes for the current context's device; freed when Numba drops it.

        The EMM interface names no stream, so the block is made on (and freed to) the
        legacy NULL stream: never destroyed, unlike the streams Numba makes per task, and
        ordered with them (Numba makes its streams blocking)."""
        device = self.context.device.id
        ptr = native.malloc(size, device=device)
        binding = _nv_binding()
        dptr = binding.CUdeviceptr(ptr) if binding is not None else ctypes.c_uint64(ptr)

        def finalizer(ptr=ptr):
            native.free(ptr)

        return driver.MemoryPointer(self.context, dptr, size, finalizer=finalizer)

    def get_memory_info(self) -> Any:
        """The device's free and total memory in bytes (``cuMemGetInfo``), what Numba's
        own manager reports: managed memory comes out of the same device memory (and may
        exceed it; the pool's own figures are in ``uvm_sched.stats()``)."""
        binding = _nv_binding()
        if binding is not None:
            free, total = driver.driver.cuMemGetInfo()
            return driver.MemoryInfo(free=int(free), total=int(total))
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        driver.driver.cuMemGetInfo(ctypes.byref(free), ctypes.byref(total))
        return driver.MemoryInfo(free=free.value, total=total.value)

    def get_ipc_handle(self, memory: Any) -> Any:
        """Refused: CUDA IPC (``cuIpcGetMemHandle``) does not share managed memory."""
        raise NotImplementedError(
            f"uvm_sched: cannot export {memory.size:,} bytes at "
            f"0x{int(memory.device_pointer_value or 0):x} over CUDA IPC: the memory is CUDA managed memory (cudaMallocManaged), which "
            "cuIpcGetMemHandle does not share. Allocate arrays meant for IPC with Numba's "
            "own memory manager (unset NUMBA_CUDA_MEMORY_MANAGER) or share them another way.")

    def reset(self) -> None:
        super().reset()
        native.release_cached()

    @contextlib.contextmanager
    def defer_cleanup(self) -> Iterator[None]:
        """Numba's deferral of pinned host frees (the parent's, which the EMM interface
        says a plugin must enter); our device frees return memory to the pool at once."""
        with super().defer_cleanup():
            yield

    @property
    def interface_version(self) -> int:
        return 1
