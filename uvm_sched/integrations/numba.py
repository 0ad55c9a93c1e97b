"""Numba: an External Memory Management plugin (``interface_version`` 1) that allocates
device arrays in CUDA Unified Memory through uvm_sched. Select it with
``NUMBA_CUDA_MEMORY_MANAGER=uvm_sched.numba`` or
``numba.cuda.set_memory_manager(UvmSchedMemoryManager)``. Pinned host allocations stay
with Numba (``HostOnlyCUDAMemoryManager``)."""
from __future__ import annotations

import contextlib
import ctypes
from typing import Any

from numba.cuda.cudadrv import driver

from .. import native

__all__ = ["UvmSchedMemoryManager"]


class UvmSchedMemoryManager(driver.GetIpcHandleMixin, driver.HostOnlyCUDAMemoryManager):
    """Numba EMM plugin over uvm_sched (device memory = managed memory from the pool)."""

    def initialize(self) -> None:
        native.backend()  # start the library (and pick its backend) now, not mid-kernel

    def memalloc(self, size: int) -> Any:
        """``size`` bytes for the current context's device; freed when Numba drops it."""
        device = self.context.device.id
        ptr = native.malloc(size, device=device)
        if driver.USE_NV_BINDING:
            dptr = driver.binding.CUdeviceptr(ptr)
        else:
            dptr = ctypes.c_uint64(ptr)

        def finalizer(ptr=ptr):
            native.free(ptr)

        return driver.MemoryPointer(self.context, dptr, size, finalizer=finalizer)

    def get_memory_info(self) -> Any:
        """The pool's view (bytes): ``total`` reserved, ``free`` reserved but unused."""
        s = native.stats()
        return driver.MemoryInfo(free=max(0, s["reserved_bytes"] - s["allocated_bytes"]),
                                 total=s["reserved_bytes"])

    def reset(self) -> None:
        super().reset()
        native.release_cached()

    def defer_cleanup(self) -> Any:
        return contextlib.nullcontext()

    @property
    def interface_version(self) -> int:
        return 1
