"""Calibration microbenchmarks: measure what the simulator's hardware profile assumes.

    python -m kernels.measure calibration.json [--gib 1] [--repeats 5] [--oversubscribe]

Memory comes from uvm_sched's own managed pool (cuda backend); prefetch, advice, discard
and release go through its driver table (``uvm_sched.native.prefetch/advise/discard/
release_cached``, on the benchmark's stream); kernels are numba.cuda (``kernels.calib``);
timing is by CUDA events recorded on that same stream around each operation. Every figure
is the median of ``--repeats`` runs, each after an untimed setup.

Writes ``{"fields": {profile field: value}, "source": ..., "date": ..., "extra": {...}}``,
which ``HardwareProfile.recalibrated`` reads. Fields measured: h2d_prefetch_Bps,
d2h_prefetch_Bps, h2d_fault_Bps, remote_access_Bps, fault_batch_latency_s (isolated
faults: one thread reads one word per 2 MiB VA block, each load waiting for the one
before, so every fault is a batch of its own; the time includes migrating one small page)
and, with ``--oversubscribe`` only, d2h_evict_Bps (it needs more managed memory than the
device has free, which some shared machines forbid). ``extra`` holds first-touch cost,
the parallel sparse-fault time per VA block (faults batched together), the effect of
discard, both copies at once (``bidir_prefetch_Bps``: a prefetch each way on two streams,
bytes of both over the wall time), remote reads and writes of every word under each advice
(``remote_Bps``: ``read_both``, ``read_preferred_host``, ``read_accessed_by``, the same for
``write``; ``read_both`` is ``remote_access_Bps``) and, with ``--oversubscribe``, a kernel
reading host-resident data twice the free device memory (``oversubscribed_fault_Bps``).
``uvm-sched sidebyside --measured calibration.json`` puts each beside its simulator twin.

Importing this module needs no GPU; running it needs the cuda backend and a device.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime as _dt
import json
import statistics
import sys
from pathlib import Path

import numpy as np

GIB = 1 << 30
PAGE_ELEMS = 1024  # float32 elements per 4 KiB page
VA_BLOCK_ELEMS = (2 << 20) // 4


class Bench:
    """The benchmark's stream, buffers from uvm_sched's pool, and event timing."""

    def __init__(self, repeats: int) -> None:
        import uvm_sched
        from uvm_sched import native

        if uvm_sched.backend() != "cuda":
            raise SystemExit(f"uvm_sched backend is {uvm_sched.backend()!r} "
                             f"({native.backend_reason()}): calibration needs the cuda "
                             "backend and a GPU")
        from numba import cuda

        self.u = uvm_sched
        self.native = native
        self.cuda = cuda
        # numba makes the primary context current on this thread: the one uvm_sched's
        # driver calls and PyTorch use, so pointers and streams are valid in all three
        self.stream = cuda.stream()
        # numba's handle is a ctypes c_void_p or a cuda.bindings CUstream, depending on
        # its binding: stream_handle turns either into the integer our library takes
        self.handle = native.stream_handle(self.stream)
        if not self.handle:
            raise RuntimeError("numba gave the legacy default stream; the benchmark needs "
                               "a stream of its own")
        # a second stream: the copy each way at once (bidirectional) needs two
        self.stream2 = cuda.stream()
        self.handle2 = native.stream_handle(self.stream2)
        self.repeats = repeats

    # -- buffers ---------------------------------------------------------------------------
    def buffer(self, nbytes: int):
        """A managed buffer from uvm_sched: (pointer, numba device array, numpy host view).
        Free it with ``self.u.free(pointer)``; the arrays do not own the memory."""
        ptr = self.u.malloc(nbytes, stream=self.handle)
        n = nbytes // 4
        # "stream": None = no stream to synchronise with on import (version 3 protocol)
        iface = {"shape": (n,), "typestr": "<f4", "data": (ptr, False), "version": 3,
                 "strides": None, "stream": None}
        dev = self.cuda.from_cuda_array_interface(iface, owner=None, sync=False)
        host = np.ctypeslib.as_array((ctypes.c_float * n).from_address(ptr))
        return ptr, dev, host

    def elapsed(self, a, b) -> float:
        """Seconds between two recorded events (CUDA reports ms)."""
        return self.cuda.event_elapsed_time(a, b) / 1e3

    def touch_fresh(self, nbytes: int) -> float:
        """Seconds for one kernel to touch every page of a fresh managed buffer of
        ``nbytes`` on the device (pages created there; evictions too where it does not
        fit); the buffer is freed and its reservation released after."""
        from kernels.calib import touch_pages

        p, d, _h = self.buffer(nbytes)
        a, e = self.cuda.event(), self.cuda.event()
        a.record(self.stream)
        touch_pages(d, PAGE_ELEMS, 1.0, self.stream)
        e.record(self.stream)
        e.synchronize()
        self.u.free(p)
        self.native.release_cached()
        return self.elapsed(a, e)

    def timed(self, fn, what: str) -> float:
        """Seconds fn(setup=False) takes on the stream (CUDA events), median of the
        repeats; fn(setup=True) runs untimed before each, then the stream is drained."""
        times = []
        for _ in range(self.repeats):
            fn(setup=True)
            self.stream.synchronize()
            a, b = self.cuda.event(), self.cuda.event()
            a.record(self.stream)
            fn(setup=False)
            b.record(self.stream)
            b.synchronize()
            times.append(self.elapsed(a, b))
        t = statistics.median(times)
        if not t > 0:
            raise RuntimeError(f"{what}: measured {t} s (times {times}); events are not timing "
                               "the work")
        return t

    def to_host(self, ptr, nbytes):
        self.native.prefetch(ptr, nbytes, to="host", stream=self.handle)

    def to_device(self, ptr, nbytes):
        self.native.prefetch(ptr, nbytes, to="device", stream=self.handle)

    def host_resident(self, ptr, nbytes, host):
        """Every page of the buffer populated and resident on the host: migrated there in
        bulk first (a CPU write to a device-resident page is a CPU fault, ~10 us each),
        then written by the CPU, one word per 4 KiB page."""
        self.to_host(ptr, nbytes)
        self.stream.synchronize()
        host[::PAGE_ELEMS] = 1.0

    def device_name(self) -> str:
        name = self.cuda.get_current_device().name
        return name.decode() if isinstance(name, bytes) else str(name)


def measure(gib: float, repeats: int, oversubscribe: bool) -> dict:
    from kernels.calib import chase_pages, read_pages, touch_pages

    b = Bench(repeats)
    nbytes = int(gib * GIB) // (2 << 20) * (2 << 20)  # whole VA blocks
    if nbytes < (2 << 20):
        raise ValueError(f"--gib {gib} is below one 2 MiB VA block")
    ptr, dev, host = b.buffer(nbytes)
    out = b.cuda.to_device(np.zeros(1, np.float32), stream=b.stream)
    fields, extra = {}, {}

    # Prefetch host -> device, and back.
    def pf_h2d(setup):
        if setup:
            b.host_resident(ptr, nbytes, host)
        else:
            b.to_device(ptr, nbytes)
    fields["h2d_prefetch_Bps"] = nbytes / b.timed(pf_h2d, "prefetch to device")

    def pf_d2h(setup):
        if setup:
            b.to_device(ptr, nbytes)
            touch_pages(dev, PAGE_ELEMS, 1.0, b.stream)  # dirty on the device
        else:
            b.to_host(ptr, nbytes)
    fields["d2h_prefetch_Bps"] = nbytes / b.timed(pf_d2h, "prefetch to host")
    extra["bidir_prefetch_Bps"] = _bidirectional(b, ptr, host, nbytes)

    # Demand faults: a kernel reading one word per page of host-resident data (the
    # driver migrates the pages, growing 4 KiB faults to bigger chunks).
    def fault_read(setup):
        if setup:
            b.host_resident(ptr, nbytes, host)
        else:
            read_pages(dev, PAGE_ELEMS, out, b.stream)
    fields["h2d_fault_Bps"] = nbytes / b.timed(fault_read, "demand-fault read")

    # Fault latency: one word per 2 MiB VA block. Serialised (one thread, each load
    # waiting for the last) each fault is its own batch; in parallel they are batched.
    n_blocks = nbytes // (2 << 20)

    def isolated_faults(setup):
        if setup:
            b.host_resident(ptr, nbytes, host)
        else:
            chase_pages(dev, VA_BLOCK_ELEMS, out, b.stream)
    fields["fault_batch_latency_s"] = b.timed(isolated_faults, "isolated faults") / n_blocks

    def sparse_faults(setup):
        if setup:
            b.host_resident(ptr, nbytes, host)
        else:
            read_pages(dev, VA_BLOCK_ELEMS, out, b.stream)
    extra["parallel_sparse_fault_s_per_va_block"] = (
        b.timed(sparse_faults, "parallel sparse faults") / n_blocks)

    # Remote access: every word read (or written) of host-resident data under each advice.
    remote = {}
    for label, pref, acc in (("both", True, True), ("preferred_host", True, False),
                             ("accessed_by", False, True)):
        with _advice(b, ptr, nbytes, pref, acc):
            for op in ("read", "write"):
                def fn(setup, op=op):
                    if setup:
                        b.to_host(ptr, nbytes)
                    elif op == "read":
                        read_pages(dev, 1, out, b.stream)
                    else:
                        touch_pages(dev, 1, 2.0, b.stream)
                remote[f"{op}_{label}"] = nbytes / b.timed(fn, f"remote {op} ({label})")
    fields["remote_access_Bps"] = remote["read_both"]
    extra["remote_Bps"] = remote
    b.u.free(ptr)
    b.native.release_cached()  # the next buffers are fresh reservations

    # First touch of fresh managed memory on the device (no migration: pages are created).
    extra["first_touch_s_per_GiB"] = statistics.median(
        b.touch_fresh(nbytes) for _ in range(repeats)) / (nbytes / GIB)

    # Discard: device-dirty data prefetched to host with and without a discard first.
    p2, d2, _ = b.buffer(nbytes)

    def dirty_then(discard):
        def fn(setup):
            if setup:
                b.to_device(p2, nbytes)
                touch_pages(d2, PAGE_ELEMS, 1.0, b.stream)
                if discard:
                    b.native.discard(p2, nbytes, stream=b.handle)
            else:
                b.to_host(p2, nbytes)
        return fn
    try:
        with_d = b.timed(dirty_then(True), "prefetch to host after discard")
        without_d = b.timed(dirty_then(False), "prefetch to host of dirty data")
        extra["discard"] = {"to_host_s_after_discard": with_d, "to_host_s_dirty": without_d}
    except b.native.UnsupportedError as e:  # the driver lacks the call (before CUDA 13)
        extra["discard"] = {"error": str(e)}
    b.u.free(p2)
    b.native.release_cached()

    if oversubscribe:
        fields["d2h_evict_Bps"], extra["oversubscribed_fault_Bps"] = _oversubscribed(b, nbytes)
    extra["buffer_bytes"] = nbytes
    extra["repeats"] = repeats
    extra["direct_calls"] = {k: v for k, v in b.u.stats().items() if k.startswith("direct_")}
    return {"fields": fields, "extra": extra,
            "source": f"kernels.measure on {b.device_name()}",
            "date": _dt.date.today().isoformat()}


@contextlib.contextmanager
def _advice(b: Bench, ptr: int, nbytes: int, preferred_host: bool, accessed_by: bool):
    """The range advised for the block's duration, unset after (advice outlives a free:
    the pool would hand the range out again still advised)."""
    if preferred_host:
        b.native.advise(ptr, nbytes, "advise_preferred_host")
    if accessed_by:
        b.native.advise(ptr, nbytes, "advise_accessed_by")
    try:
        yield
    finally:
        if accessed_by:
            b.native.advise(ptr, nbytes, "advise_accessed_by", unset=True)
        if preferred_host:
            b.native.advise(ptr, nbytes, "advise_preferred_host", unset=True)


def _bidirectional(b: Bench, ptr: int, host, nbytes: int) -> float:
    """Bytes per second both ways together: ``ptr`` (host-resident) prefetched to the
    device on the benchmark's stream while a second buffer (dirty on the device) is
    prefetched to the host on another, both released by one event; 2 x ``nbytes`` over the
    time until both are done (median of the repeats)."""
    from kernels.calib import touch_pages

    p2, d2, _ = b.buffer(nbytes)
    times = []
    try:
        for _ in range(b.repeats):
            b.host_resident(ptr, nbytes, host)
            b.to_device(p2, nbytes)
            touch_pages(d2, PAGE_ELEMS, 1.0, b.stream)
            b.stream.synchronize()
            go, other_done, done = b.cuda.event(), b.cuda.event(), b.cuda.event()
            go.record(b.stream)
            go.wait(b.stream2)
            b.to_device(ptr, nbytes)
            b.native.prefetch(p2, nbytes, to="host", stream=b.handle2)
            other_done.record(b.stream2)
            other_done.wait(b.stream)
            done.record(b.stream)
            done.synchronize()
            times.append(b.elapsed(go, done))
    finally:
        b.u.free(p2)
    t = statistics.median(times)
    if not t > 0:
        raise RuntimeError(f"copy both ways: measured {t} s (times {times})")
    return 2 * nbytes / t


def _oversubscribed(b: Bench, nbytes: int) -> tuple[float, float]:
    """With only ``nbytes`` of the device free (the rest held by a plain cuMemAlloc block,
    never evicted): (eviction bandwidth, fault-path rate of a kernel reading 2 x ``nbytes``
    of host-resident data). Eviction: touch 2x ``nbytes`` fresh, the second half evicting
    the first; bytes evicted / (time beyond two eviction-free halves)."""
    from kernels.calib import read_pages

    free, _total = b.cuda.current_context().get_memory_info()
    cu = ctypes.CDLL("libcuda.so.1")
    cu.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    cu.cuMemFree_v2.argtypes = [ctypes.c_uint64]
    hold = ctypes.c_uint64()
    reserve = int(free - nbytes - (256 << 20))
    # numba made the primary context current on this thread: the block lands there
    if reserve > 0 and (rc := cu.cuMemAlloc_v2(ctypes.byref(hold), reserve)) != 0:
        raise RuntimeError(f"could not occupy {reserve:,} bytes of device memory "
                           f"(cuMemAlloc_v2: CUDA error {rc})")
    try:
        both = b.touch_fresh(2 * nbytes)
        half = b.touch_fresh(nbytes)
        big, dev, host = b.buffer(2 * nbytes)
        out = b.cuda.to_device(np.zeros(1, np.float32), stream=b.stream)

        def fault_read(setup):
            if setup:
                b.host_resident(big, 2 * nbytes, host)
            else:
                read_pages(dev, PAGE_ELEMS, out, b.stream)
        try:
            fault_Bps = 2 * nbytes / b.timed(fault_read, "demand-fault read, oversubscribed")
        finally:
            b.u.free(big)
            b.native.release_cached()
    finally:
        if reserve > 0:
            cu.cuMemFree_v2(hold.value)
    extra_time = both - 2 * half
    if extra_time <= 0:
        raise RuntimeError(f"no eviction cost measured (both halves {both:.4f} s, one {half:.4f} s)")
    return nbytes / extra_time, fault_Bps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--gib", type=float, default=1.0, help="buffer size per measurement (GiB)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--oversubscribe", action="store_true")
    args = ap.parse_args(argv)
    res = measure(args.gib, args.repeats, args.oversubscribe)
    args.out.write_text(json.dumps(res, indent=1))
    print(json.dumps(res["fields"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
