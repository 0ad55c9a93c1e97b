"""Page-granular kernels: touch (write) or read one element per page of a buffer.

Touching one 4-byte word per page is enough to make the UVM driver fault (and migrate) the
whole page, while keeping the kernel's own work negligible, so the time measured is the
driver's: fault servicing and migration. ``stride`` is in elements (float32), so a 4 KiB page
is ``stride=1024``. Buffers are float32 (the types are spelled out: a kernel compiled for
another dtype would measure the same thing at another stride).
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda

__all__ = ["touch_pages", "read_pages", "chase_pages", "launch_shape"]

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
    acc = np.float32(0.0)
    if j < buf.shape[0]:
        acc = buf[j]
    s = cuda.shared.array(THREADS, dtype=np.float32)
    s[cuda.threadIdx.x] = acc
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        tot = np.float32(0.0)
        for k in range(cuda.blockDim.x):
            tot += s[k]
        cuda.atomic.add(out, 0, tot)


@cuda.jit
def _chase(buf, stride, out):
    # One thread walks the pages in order. Whether the next index moves by one more
    # element depends on the value just loaded, so the next load cannot be issued before
    # this one has completed: each page faults on its own, one fault batch at a time
    # (a parallel kernel would batch many faults together and hide their latency).
    if cuda.grid(1) == 0:
        n = buf.shape[0]
        j = 0
        acc = np.float32(0.0)
        while j < n:
            v = buf[j]
            acc += v
            j += stride
            if v == np.float32(-3.0e38):  # never written by the kit: no index moves
                j += 1
        out[0] = acc


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
    _touch[blocks, threads, stream](buf, stride, np.float32(value))


def read_pages(buf, stride: int, out, stream=0) -> None:
    """Add the first element of every ``stride``-element page of ``buf`` into ``out[0]``
    (a 1-element float32 device array). Asynchronous on ``stream``."""
    blocks, threads = launch_shape(buf.shape[0], stride)
    _read[blocks, threads, stream](buf, stride, out)


def chase_pages(buf, stride: int, out, stream=0) -> None:
    """Read the first element of every ``stride``-element page of ``buf`` one after the
    other from a single thread (each load waits for the one before: isolated faults) and
    store their sum in ``out[0]``. Asynchronous on ``stream``."""
    launch_shape(buf.shape[0], stride)  # validates stride
    _chase[1, 1, stream](buf, stride, out)
