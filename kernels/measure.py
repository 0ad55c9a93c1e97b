"""Calibration microbenchmarks: measure what the simulator's hardware profile assumes.

    python -m kernels.measure calibration.json [--gib 1] [--oversubscribe]

Memory comes from uvm_sched's own managed pool (cuda backend), prefetch/advise go through
its driver table (``uvm_sched.native``), kernels are numba.cuda (``kernels.calib``), timing
is by CUDA events around each operation. Every figure is the median of ``--repeats`` runs.

Writes ``{"fields": {profile field: value}, "source": ..., "date": ..., "extra": {...}}``,
which ``HardwareProfile.recalibrated`` reads. Fields measured: h2d_prefetch_Bps,
d2h_prefetch_Bps, h2d_fault_Bps, remote_access_Bps, fault_batch_latency_s (an upper bound:
isolated faults, one per 2 MiB VA block) and, with ``--oversubscribe`` only,
d2h_evict_Bps (it needs more managed memory than the device has free, which some shared
machines forbid). ``extra`` holds first-touch cost and the effect of discard.
"""
from __future__ import annotations

import argparse
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
    def __init__(self, repeats: int) -> None:
        import uvm_sched
        from numba import cuda

        if uvm_sched.backend() != "cuda":
            raise SystemExit(f"uvm_sched backend is {uvm_sched.backend()!r}: calibration needs "
                             "the cuda backend and a GPU")
        self.u = uvm_sched
        self.native = uvm_sched.native
        self.cuda = cuda
        self.stream = cuda.stream()
        self.handle = int(self.stream.handle.value if hasattr(self.stream.handle, "value")
                          else self.stream.handle)
        self.repeats = repeats

    # -- buffers ---------------------------------------------------------------------------
    def buffer(self, nbytes: int):
        """A managed buffer from uvm_sched: (pointer, numba device array, numpy host view)."""
        ptr = self.u.malloc(nbytes, stream=self.handle)
        n = nbytes // 4
        iface = {"shape": (n,), "typestr": "<f4", "data": (ptr, False), "version": 3,
                 "strides": None, "stream": None}
        dev = self.cuda.from_cuda_array_interface(iface, owner=None, sync=False)
        host = np.ctypeslib.as_array((ctypes.c_float * n).from_address(ptr))
        return ptr, dev, host

    def timed(self, fn) -> float:
        """Seconds fn() takes on the stream (CUDA events), median of the repeats."""
        times = []
        for _ in range(self.repeats):
            fn(setup=True)
            self.stream.synchronize()
            a, b = self.cuda.event(), self.cuda.event()
            a.record(self.stream)
            fn(setup=False)
            b.record(self.stream)
            b.synchronize()
            times.append(self.cuda.event_elapsed_time(a, b) / 1e3)
        return statistics.median(times)

    def to_host(self, ptr, nbytes):
        self.native.prefetch(ptr, nbytes, to="host", stream=self.handle)

    def to_device(self, ptr, nbytes):
        self.native.prefetch(ptr, nbytes, to="device", stream=self.handle)


def measure(gib: float, repeats: int, oversubscribe: bool) -> dict:
    from kernels.calib import read_pages, touch_pages

    b = Bench(repeats)
    nbytes = int(gib * GIB)
    ptr, dev, host = b.buffer(nbytes)
    out = b.cuda.to_device(np.zeros(1, np.float32), stream=b.stream)
    fields, extra = {}, {}

    def host_resident(setup):
        if setup:
            host[::PAGE_ELEMS] = 1.0  # dirty every page on the host
            b.to_host(ptr, nbytes)

    # Prefetch host -> device, and back.
    def pf_h2d(setup):
        host_resident(setup)
        if not setup:
            b.to_device(ptr, nbytes)
    fields["h2d_prefetch_Bps"] = nbytes / b.timed(pf_h2d)

    def pf_d2h(setup):
        if setup:
            touch_pages(dev, PAGE_ELEMS, 1.0, b.stream)  # dirty on the device
        else:
            b.to_host(ptr, nbytes)
    fields["d2h_prefetch_Bps"] = nbytes / b.timed(pf_d2h)

    # Demand faults: a kernel reading one word per page of host-resident data.
    def fault_read(setup):
        host_resident(setup)
        if not setup:
            read_pages(dev, PAGE_ELEMS, out, b.stream)
    fields["h2d_fault_Bps"] = nbytes / b.timed(fault_read)

    # Isolated faults: one word per 2 MiB VA block, so each fault migrates little.
    n_blocks = nbytes // (2 << 20)

    def sparse_faults(setup):
        host_resident(setup)
        if not setup:
            read_pages(dev, VA_BLOCK_ELEMS, out, b.stream)
    fields["fault_batch_latency_s"] = b.timed(sparse_faults) / max(1, n_blocks)

    # Remote access: preferred location host + accessed by the device, every word read.
    b.native.advise(ptr, nbytes, "advise_preferred_host")
    b.native.advise(ptr, nbytes, "advise_accessed_by")

    def remote(setup):
        if setup:
            b.to_host(ptr, nbytes)
        else:
            read_pages(dev, 1, out, b.stream)
    fields["remote_access_Bps"] = nbytes / b.timed(remote)
    b.u.free(ptr)

    # First touch of fresh managed memory on the device (no migration: pages are created).
    def first_touch_once() -> float:
        p, d, _h = b.buffer(nbytes)
        a, e = b.cuda.event(), b.cuda.event()
        a.record(b.stream)
        touch_pages(d, PAGE_ELEMS, 1.0, b.stream)
        e.record(b.stream)
        e.synchronize()
        b.u.free(p)
        b.native.release_cached()
        return b.cuda.event_elapsed_time(a, e) / 1e3
    extra["first_touch_s_per_GiB"] = statistics.median(
        first_touch_once() for _ in range(repeats)) / gib

    # Discard: device-dirty data prefetched to host with and without a discard first.
    p2, d2, _ = b.buffer(nbytes)

    def dirty_then(discard):
        def fn(setup):
            if setup:
                touch_pages(d2, PAGE_ELEMS, 1.0, b.stream)
                if discard:
                    b.native.discard(p2, nbytes, stream=b.handle)
            else:
                b.to_host(p2, nbytes)
        return fn
    try:
        with_d, without_d = b.timed(dirty_then(True)), b.timed(dirty_then(False))
        extra["discard"] = {"to_host_s_after_discard": with_d, "to_host_s_dirty": without_d}
    except Exception as e:  # the driver may lack the discard call (CUDA < 12.8)
        extra["discard"] = {"error": str(e)}
    b.u.free(p2)

    if oversubscribe:
        fields["d2h_evict_Bps"] = _evict_bandwidth(b, nbytes)
    import torch  # only for the device name

    return {"fields": fields, "extra": extra,
            "source": f"kernels.measure on {torch.cuda.get_device_name(0)}",
            "date": _dt.date.today().isoformat()}


def _evict_bandwidth(b: Bench, nbytes: int) -> float:
    """Touch 2x ``nbytes`` on the device with only ``nbytes`` free: the second half evicts
    the first. Eviction bandwidth = bytes evicted / (time beyond two eviction-free halves)."""
    from kernels.calib import touch_pages

    free, _total = b.cuda.current_context().get_memory_info()
    cu = ctypes.CDLL("libcuda.so.1")
    hold = ctypes.c_uint64()
    reserve = int(free - nbytes - (256 << 20))
    if reserve > 0 and cu.cuMemAlloc_v2(ctypes.byref(hold), ctypes.c_size_t(reserve)) != 0:
        raise RuntimeError(f"could not occupy {reserve:,} bytes of device memory")
    try:
        p, d, _ = b.buffer(2 * nbytes)
        a, e = b.cuda.event(), b.cuda.event()
        a.record(b.stream)
        touch_pages(d, PAGE_ELEMS, 1.0, b.stream)
        e.record(b.stream)
        e.synchronize()
        both = b.cuda.event_elapsed_time(a, e) / 1e3
        b.u.free(p)
        b.native.release_cached()
        p, d, _ = b.buffer(nbytes)
        a.record(b.stream)
        touch_pages(d, PAGE_ELEMS, 1.0, b.stream)
        e.record(b.stream)
        e.synchronize()
        half = b.cuda.event_elapsed_time(a, e) / 1e3
        b.u.free(p)
    finally:
        if reserve > 0:
            cu.cuMemFree_v2(hold)
    extra_time = both - 2 * half
    if extra_time <= 0:
        raise RuntimeError(f"no eviction cost measured (both halves {both:.4f} s, one {half:.4f} s)")
    return nbytes / extra_time


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
