"""Page-granular kernels: touch (write) or read one element per page of a buffer.

Touching one 4-byte word per page is enough to make the UVM driver fault (and migrate) the
whole page, while keeping the kernel's own work negligible, so the time measured is the
driver's: fault servicing and migration. ``stride`` is in elements (float32), so a 4 KiB page
is ``stride=1024``.
"""
from __future__ import annotations

import math

from numba import cuda

__all__ = ["touch_pages", "read_pages", "launch_shape"]

THREADS = 256


@cuda.jit
def _touch(buf, stride, value):
    i = cuda.grid(1)
    j = i * stride
    if j < buf.shape[0]:
        buf[j] = value


@cuda.jit
def _read(buf, stride, out):
    # Each thread reads its page's first word; one atomic per block keeps the result
    # observable (so the compiler cannot drop the loads) without serialising the kernel.
    i = cuda.grid(1)
    j = i * stride
    acc = 0.0
    if j < buf.shape[0]:
        acc = buf[j]
    s = cuda.shared.array(THREADS, dtype=buf.dtype)
    s[cuda.threadIdx.x] = acc
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        tot = 0.0
        for k in range(cuda.blockDim.x):
            tot += s[k]
        cuda.atomic.add(out, 0, tot)


def launch_shape(n_elements: int, stride: int) -> tuple[int, int]:
    """(blocks, threads) covering one thread per touched element."""
    if stride < 1:
        raise ValueError(f"stride must be >= 1 element, got {stride}")
    n_threads = math.ceil(n_elements / stride)
    return max(1, math.ceil(n_threads / THREADS)), THREADS


def touch_pages(buf, stride: int, value: float = 1.0, stream=0) -> None:
    """Write ``value`` to the first element of every ``stride``-element page of ``buf``
    (a numba device/managed array of float32). Asynchronous on ``stream``."""
    blocks, threads = launch_shape(buf.shape[0], stride)
    _touch[blocks, threads, stream](buf, stride, value)


def read_pages(buf, stride: int, out, stream=0) -> None:
    """Add the first element of every ``stride``-element page of ``buf`` into ``out[0]``
    (a 1-element device array). Asynchronous on ``stream``."""
    blocks, threads = launch_shape(buf.shape[0], stride)
    _read[blocks, threads, stream](buf, stride, out)
