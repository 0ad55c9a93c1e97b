"""The native core misused from Python and through its C ABI, with a failing driver, and
from many threads: every misuse is a clear error, never a wrapped pointer, a skipped check,
a segfault, or a report of memory released that the driver still holds (issue classes 10
and 11)."""
from __future__ import annotations

import ctypes
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "native"))
import fakecuda  # noqa: E402

from uvm_sched import _armed, native  # noqa: E402

MiB = 1 << 20


@pytest.fixture
def host():
    with fakecuda.backend("host"):
        yield


# ---- Python arguments ---------------------------------------------------------------
@pytest.mark.parametrize("call,exc", [
    (lambda p: native.free(p + 2**64), ValueError),
    (lambda p: native.free(p - 2**64), ValueError),
    (lambda p: native.free(-p), ValueError),
    (lambda p: native.free(p, size=-1), ValueError),
    (lambda p: native.free(p, size=2**64 - 1), ValueError),
    (lambda p: native.free(p, size=64.0), TypeError),
    (lambda p: native.free(float(p)), TypeError),
    (lambda p: native.free(str(p)), TypeError),
    (lambda p: native.free(True), TypeError),
    (lambda p: native.malloc(1.5), TypeError),
    (lambda p: native.malloc("10"), TypeError),
    (lambda p: native.malloc(True), TypeError),
    (lambda p: native.malloc(None), TypeError),
    (lambda p: native.malloc(-1), ValueError),
    (lambda p: native.malloc(64, device=-1), ValueError),
    (lambda p: native.malloc(64, device=1.0), TypeError),
    (lambda p: native.malloc(64, stream=1.5), TypeError),
    (lambda p: native.malloc(64, stream=-1), ValueError),
    (lambda p: native.malloc(64, stream=2**64), ValueError),
    (lambda p: native.block_info(p + 2**64), ValueError),
    (lambda p: native.prefetch(p + 2**64, 64), ValueError),
    (lambda p: native.prefetch(p, 64.0), TypeError),
    (lambda p: native.arm(np.zeros(0, native.PLAN_ROW_DTYPE), [64], 2**29), ValueError),
    (lambda p: native.arm(np.zeros(0, native.PLAN_ROW_DTYPE), [-64], 4), ValueError),
    (lambda p: native.arm(np.zeros(0, native.PLAN_ROW_DTYPE), [64] * 5, 4), ValueError),
    (lambda p: native.arm(np.zeros(0, native.PLAN_ROW_DTYPE), [64], 4.5), TypeError),
])
def test_a_bad_argument_is_refused_and_the_block_stays_live(host, call, exc):
    p = native.malloc(64)
    with pytest.raises(exc):
        call(p)
    assert native.block_info(p)["size"] == 64  # nothing freed by a wrapped pointer
    native.free(p)


def test_numpy_integers_are_accepted(host):
    p = native.malloc(np.int64(128))
    native.free(np.uint64(p), size=np.int32(128))


# ---- the C ABI, called as C callers would ---------------------------------------------
def _lib():
    native._load()
    return ctypes.CDLL(native.library_path())


def test_null_out_pointers_are_einval_not_a_segfault(host):
    lib = _lib()
    lib.uvm_sched_malloc_status.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p,
                                            ctypes.c_void_p]
    assert lib.uvm_sched_malloc_status(64, 0, None, None) == -1
    assert "out is NULL" in native._last_error()
    p = native.malloc(64)
    lib.uvm_sched_block_info.argtypes = [ctypes.c_void_p] * 4
    assert lib.uvm_sched_block_info(p, None, None, None) == -1
    lib.uvm_sched_block_ordinals.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                             ctypes.c_void_p]
    assert lib.uvm_sched_block_ordinals(None, 2, None) == -1
    assert "ptrs is NULL" in native._last_error()
    assert lib.uvm_sched_block_ordinals(None, 0, None) == 0  # nothing asked: nothing read
    lib.uvm_sched_stats.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.uvm_sched_stats.restype = ctypes.c_size_t
    assert lib.uvm_sched_stats(None, 1000) == len(native._STATS_NAMES)
    lib.uvm_sched_drain.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.uvm_sched_drain.restype = ctypes.c_size_t
    pending = native._load().uvm_sched_ring_pending()
    assert lib.uvm_sched_drain(None, 1000) == 0
    assert native._load().uvm_sched_ring_pending() == pending  # nothing taken
    lib.uvm_sched_exec_arm.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                       ctypes.c_size_t, ctypes.c_uint64, ctypes.c_int,
                                       ctypes.c_int, ctypes.c_int]
    assert lib.uvm_sched_exec_arm(None, 3, None, 0, 4, 0, 0, 1) == -1
    assert lib.uvm_sched_exec_arm(None, 0, None, 2, 4, 0, 0, 1) == -1
    assert lib.uvm_sched_exec_arm(None, 0, None, 0, 1 << 29, 0, 0, 1) == -1
    assert "period_events" in native._last_error()
    native.free(p)


# ---- driver faults (the fake driver's injection) ---------------------------------------
def test_a_failed_cumemfree_is_reported_and_the_arena_kept():
    with fakecuda.backend("fake", UVM_SCHED_ARENA_BYTES="8M", FAKE_CUDA_FAIL="cuMemFree:1") as fake:
        p = native.malloc(6 * MiB)
        native.free(p)
        held = native.stats()["reserved_bytes"]
        with pytest.raises(native.UvmSchedError, match="released 0 of .* still holds"):
            native.release_cached()
        assert native.stats()["reserved_bytes"] == held  # not counted as released
        assert fake.live_allocations() == 1  # and indeed still held by the driver
        q = native.malloc(6 * MiB)  # the kept arena still serves
        native.free(q)
        assert native.release_cached() == held  # the next try (no fault) releases it
        assert fake.live_allocations() == 0 and native.stats()["reserved_bytes"] == 0


def test_a_failed_event_record_in_a_cross_stream_free_keeps_the_block():
    with fakecuda.backend("fake", UVM_SCHED_ARENA_BYTES="8M",
                          FAKE_CUDA_FAIL="cuEventRecord:1") as fake:
        fake.lib.fake_cuda_stream_create.restype = ctypes.c_void_p
        s1, s2 = fake.lib.fake_cuda_stream_create(), fake.lib.fake_cuda_stream_create()
        p = native.malloc(1024, stream=s1)  # a slab slot owned by s1
        with pytest.raises(native.UvmSchedError, match="cuEventRecord"):
            native.free(p, stream=s2)  # last used on s2: the free must wait for s2
        assert native.block_info(p)["size"] == 1024  # not released without the wait
        q = native.malloc(1024, stream=s1)
        assert q != p  # and not handed out again
        native.free(p, stream=s2)  # the driver works again: the wait, then the free
        native.free(q)
        kinds = [native.EVENT_KINDS[int(k)] for k in native.drain_events()["kind"]]
        assert "driver_error" in kinds


# ---- threads ---------------------------------------------------------------------------
def test_eight_threads_of_malloc_and_free_keep_every_byte(host):
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        live = []
        try:
            for i in range(1500):
                if live and (len(live) > 40 or rng.random() < 0.45):
                    p, n, tag = live.pop(int(rng.integers(len(live))))
                    got = ctypes.string_at(p, min(n, 16))
                    if got != tag[: len(got)]:
                        errors.append(f"block 0x{p:x} corrupted")
                    native.free(p, size=n)
                else:
                    n = int(rng.choice([8, 100, 4096, 70_000, 3 * MiB]))
                    p = native.malloc(n)
                    tag = (seed.to_bytes(4, "little") + i.to_bytes(4, "little")) * 2
                    ctypes.memmove(p, tag, min(n, 16))
                    live.append((p, n, tag))
            for p, n, _ in live:
                native.free(p, size=n)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:3]
    st = native.stats()
    assert st["allocated_blocks"] == 0 and st["allocated_bytes"] == 0


def test_block_ordinals_name_each_live_block_and_mark_every_other_address(host):
    a, b, c = (native.malloc(n) for n in (64, 4096, 1 << 20))
    native.free(b)
    asked = np.array([c, a, b, a + 16, 0], np.uint64)  # live, live, freed, inside, null
    got = _armed._block_ordinals(asked)
    assert got[0] == native.block_info(c)["ordinal"]
    assert got[1] == native.block_info(a)["ordinal"]
    assert (got[2:] == _armed._NO_BLOCK).all()
    native.free(a)
    native.free(c)
