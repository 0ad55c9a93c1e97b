"""bench_reliability cases, classes 10-11: native arguments and the C ABI, driver
failures and threads."""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from _rel_common import MiB, api_outcome, case, host


# ---- 10. native arguments -----------------------------------------------------------------------
NATIVE_BAD = [
    ("free(p + 2**64)", lambda n, p: n.free(p + 2**64)),
    ("free(p - 2**64)", lambda n, p: n.free(p - 2**64)),
    ("free(p, size=-1)", lambda n, p: n.free(p, size=-1)),
    ("free(float(p))", lambda n, p: n.free(float(p))),
    ("malloc(1.5)", lambda n, p: n.malloc(1.5)),
    ("malloc('10')", lambda n, p: n.malloc("10")),
    ("malloc(True)", lambda n, p: n.malloc(True)),
    ("malloc(64, stream=-1)", lambda n, p: n.malloc(64, stream=-1)),
    ("block_info(p + 2**64)", lambda n, p: n.block_info(p + 2**64)),
    ("prefetch(p, 64.0)", lambda n, p: n.prefetch(p, 64.0)),
    ("arm(period_events=2**29)", lambda n, p: n.arm(np.zeros(0, n.PLAN_ROW_DTYPE), [64], 2**29)),
]


def _native_bad(fn):
    def run():
        from uvm_sched import native

        with host():
            p = native.malloc(64)
            out = api_outcome(lambda: fn(native, p), (TypeError, ValueError))
            try:
                alive = native.block_info(p)["size"] == 64
            except ValueError:
                alive = False
            return out if alive else "wrong"
    return run


for _what, _fn in NATIVE_BAD:
    case("10 native arguments", _what)(_native_bad(_fn))


def _c_abi(call):
    def run():
        from uvm_sched import native

        with host():
            native._load()
            lib = ctypes.CDLL(native.library_path())
            p = native.malloc(64)
            r = call(lib, p)
            return "clear error" if r else "wrong"
    return run


def _c_malloc(lib, p):
    lib.uvm_sched_malloc_status.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p,
                                            ctypes.c_void_p]
    return lib.uvm_sched_malloc_status(64, 0, None, None) == -1


def _c_block_info(lib, p):
    lib.uvm_sched_block_info.argtypes = [ctypes.c_void_p] * 4
    return lib.uvm_sched_block_info(p, None, None, None) == -1


def _c_stats(lib, p):
    lib.uvm_sched_stats.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.uvm_sched_stats.restype = ctypes.c_size_t
    return lib.uvm_sched_stats(None, 1000) > 0


def _c_drain(lib, p):
    lib.uvm_sched_drain.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.uvm_sched_drain.restype = ctypes.c_size_t
    return lib.uvm_sched_drain(None, 1000) == 0


def _c_arm(lib, p):
    lib.uvm_sched_exec_arm.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                       ctypes.c_size_t, ctypes.c_uint64, ctypes.c_int,
                                       ctypes.c_int, ctypes.c_int]
    return lib.uvm_sched_exec_arm(None, 3, None, 2, 4, 0, 0, 1) == -1


for _what, _call in [("uvm_sched_malloc_status(64, 0, NULL, NULL)", _c_malloc),
                     ("uvm_sched_block_info(p, NULL, NULL, NULL)", _c_block_info),
                     ("uvm_sched_stats(NULL, 1000)", _c_stats),
                     ("uvm_sched_drain(NULL, 1000)", _c_drain),
                     ("uvm_sched_exec_arm(NULL, 3, NULL, 2, ...)", _c_arm)]:
    case("10 native arguments", _what)(_c_abi(_call))


# ---- 11. driver failures ------------------------------------------------------------------
def _release_fault():
    import fakecuda

    from uvm_sched import native

    with fakecuda.backend("fake", UVM_SCHED_ARENA_BYTES="8M", FAKE_CUDA_FAIL="cuMemFree:1") as fake:
        p = native.malloc(6 * MiB)
        native.free(p)
        held = native.stats()["reserved_bytes"]
        try:
            n = native.release_cached()
        except native.UvmSchedError:
            ok = native.stats()["reserved_bytes"] == held and fake.live_allocations() == 1
            return "clear error" if ok else "wrong"
        return "wrong" if n > 0 and fake.live_allocations() else "clear error"


def _cross_stream_fault():
    import fakecuda

    from uvm_sched import native

    with fakecuda.backend("fake", UVM_SCHED_ARENA_BYTES="8M",
                          FAKE_CUDA_FAIL="cuEventRecord:1") as fake:
        fake.lib.fake_cuda_stream_create.restype = ctypes.c_void_p
        s1, s2 = fake.lib.fake_cuda_stream_create(), fake.lib.fake_cuda_stream_create()
        p = native.malloc(1024, stream=s1)
        try:
            native.free(p, stream=s2)
        except native.UvmSchedError:
            return "clear error" if native.block_info(p)["size"] == 1024 else "wrong"
        return "wrong"  # released without the wait


def _threads():
    from uvm_sched import native

    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        live = []
        for i in range(25_000):
            if live and (len(live) > 64 or rng.random() < 0.45):
                p, n, tag = live.pop(int(rng.integers(len(live))))
                if ctypes.string_at(p, min(n, 8)) != tag[: min(n, 8)]:
                    errors.append(p)
                native.free(p, size=n)
            else:
                n = int(rng.choice([8, 100, 4096, 70_000, 3 * MiB]))
                p = native.malloc(n)
                tag = seed.to_bytes(4, "little") + (i & 0xFFFFFFFF).to_bytes(4, "little")
                ctypes.memmove(p, tag, min(n, 8))
                live.append((p, n, tag))
        for p, n, _ in live:
            native.free(p, size=n)

    with host():
        ts = [threading.Thread(target=work, args=(s,)) for s in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        st = native.stats()
        ok = not errors and st["allocated_blocks"] == 0
        return "accepted" if ok else "wrong"


case("11 driver failures", "cuMemFree fails in release_cached()")(_release_fault)
case("11 driver failures", "cuEventRecord fails in a cross-stream free")(_cross_stream_fault)
case("11 driver failures", "8 threads x 25,000 malloc/free, contents checked (valid)")(_threads)
