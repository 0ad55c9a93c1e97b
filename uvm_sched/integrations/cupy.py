"""CuPy: ``cupy.cuda.set_allocator(uvm_sched.cupy_allocator())`` puts CuPy arrays in
CUDA Unified Memory through uvm_sched."""
from __future__ import annotations

from typing import Any

from .. import native

__all__ = ["cupy_allocator"]


class _Owner:
    """Frees the block when CuPy drops the last reference to its memory. Holds the
    ``cupy.cuda.Stream`` it was allocated on until then: CuPy destroys a stream when its
    object goes, while arrays made on it may live on, and the free (with the executor
    armed, its prefetches and discards) is ordered after that stream's work, so the
    stream must still exist when the block is freed (cuStreamDestroy leaves no handle to
    wait on)."""

    __slots__ = ("ptr", "stream", "__weakref__")

    def __init__(self, ptr: int, stream: Any) -> None:
        self.ptr = ptr
        self.stream = stream

    def __del__(self) -> None:
        try:
            native.free(self.ptr)
        except Exception:  # interpreter shutdown: the library may be gone already
            pass


def cupy_allocator() -> Any:
    """An allocator function for ``cupy.cuda.set_allocator``: bytes -> ``MemoryPointer``
    on the current device and stream. Raises ``RuntimeError`` without CuPy."""
    try:
        import cupy
    except ImportError as e:
        raise RuntimeError("uvm_sched.cupy_allocator() needs CuPy "
                           "(pip install cupy-cuda13x for a CUDA 13 driver, cupy-cuda12x for 12.x)") from e

    def malloc(nbytes: int):
        device = cupy.cuda.Device().id
        stream = cupy.cuda.get_current_stream()
        ptr = native.malloc(nbytes, stream=stream.ptr, device=device)
        mem = cupy.cuda.UnownedMemory(ptr, nbytes, _Owner(ptr, stream), device_id=device)
        return cupy.cuda.MemoryPointer(mem, 0)

    return malloc
