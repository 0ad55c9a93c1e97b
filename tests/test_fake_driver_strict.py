"""The fake CUDA driver refuses what the CUDA 13 driver documents as invalid (one test per
row of tests/native/PRECONDITIONS.md, named by its id), and the cuda backend keeps to those
rules: discards never on the legacy NULL stream, after the prefetches of their range, every
call in the context of its device, with two devices in one process."""
from __future__ import annotations

import ctypes
import re
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "native"))
import fakecuda  # noqa: E402

import uvm_sched  # noqa: E402
from uvm_sched import native  # noqa: E402

MiB = 1 << 20
P = ctypes.c_void_p
U64 = ctypes.c_ulonglong
INVALID_VALUE, INVALID_CONTEXT, INVALID_HANDLE = 1, 201, 400
INVALID_DEVICE, NOT_READY = 101, 600
TESTED: set[str] = set()


class Loc(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


def rule(rid):
    TESTED.add(rid)
    return rid


def _calls(fake):
    return dict(
        alloc=fake.proc("cuMemAllocManaged", ctypes.POINTER(U64), ctypes.c_size_t, ctypes.c_uint),
        free=fake.proc("cuMemFree", U64),
        discard=fake.proc("cuMemDiscardBatchAsync", ctypes.POINTER(U64),
                          ctypes.POINTER(ctypes.c_size_t), ctypes.c_size_t, U64, P),
        prefetch=fake.proc("cuMemPrefetchAsync", U64, ctypes.c_size_t, Loc, ctypes.c_uint, P,
                           version=12020),
        advise=fake.proc("cuMemAdvise", U64, ctypes.c_size_t, ctypes.c_int, Loc, version=12020),
        stream=fake.proc("cuStreamCreate", ctypes.POINTER(P), ctypes.c_uint),
        stream_destroy=fake.proc("cuStreamDestroy", P),
        event=fake.proc("cuEventCreate", ctypes.POINTER(P), ctypes.c_uint),
        record=fake.proc("cuEventRecord", P, P),
        wait=fake.proc("cuStreamWaitEvent", P, P, ctypes.c_uint),
        sync=fake.proc("cuEventSynchronize", P),
        ctx_sync=fake.proc("cuCtxSynchronize"),
        elapsed=fake.proc("cuEventElapsedTime", ctypes.POINTER(ctypes.c_float), P, P),
        memset=fake.proc("cuMemsetD8Async", U64, ctypes.c_ubyte, ctypes.c_size_t, P),
        copy=fake.proc("cuMemcpyDtoDAsync", U64, U64, ctypes.c_size_t, P),
        mem_info=fake.proc("cuMemGetInfo", ctypes.POINTER(ctypes.c_size_t),
                           ctypes.POINTER(ctypes.c_size_t)),
        name=fake.proc("cuDeviceGetName", ctypes.c_char_p, ctypes.c_int, ctypes.c_int),
    )


@pytest.fixture
def drv():
    """The fake with two devices, device 0's primary context current, one managed
    allocation of 8 MiB and a stream of each device."""
    with fakecuda.backend("fake", FAKE_CUDA_DEVICES="2") as fake:
        c = _calls(fake)
        fake.set_current(fake.primary(0))
        ptr = U64()
        assert c["alloc"](ctypes.byref(ptr), 8 * MiB, 1) == 0
        c["ptr"] = ptr.value
        c["s0"], c["s1"] = fake.app_stream(0), fake.app_stream(1)
        c["fake"] = fake
        yield c
        fake.set_current(fake.primary(0))
        c["free"](ptr.value)
        fake.set_current(None)


def _discard(c, p, n, stream, flags=0):
    return c["discard"]((U64 * 1)(p), (ctypes.c_size_t * 1)(n), 1, flags, stream)


def _event(c):
    e = P()
    assert c["event"](ctypes.byref(e), 2) == 0
    return e.value


def test_D1_discard_on_the_legacy_null_stream_is_refused(drv):
    rule("D1")
    assert _discard(drv, drv["ptr"], MiB, None) == INVALID_VALUE
    assert _discard(drv, drv["ptr"], MiB, drv["s0"]) == 0


def test_D2_discard_flags_must_be_zero(drv):
    rule("D2")
    assert _discard(drv, drv["ptr"], MiB, drv["s0"], flags=1) == INVALID_VALUE


def test_D3_discard_outside_managed_memory_is_refused(drv):
    rule("D3")
    assert _discard(drv, drv["ptr"] + 7 * MiB, 2 * MiB, drv["s0"]) == INVALID_VALUE


def test_D4_a_discard_concurrent_with_a_prefetch_of_its_range_is_refused(drv):
    rule("D4")
    fake, s0 = drv["fake"], drv["s0"]
    other = fake.app_stream(0)
    dev0 = Loc(1, 0)
    assert drv["prefetch"](drv["ptr"], 4 * MiB, dev0, 0, s0) == 0
    # another stream, no ordering: undefined behaviour, refused
    assert _discard(drv, drv["ptr"] + MiB, MiB, other) == INVALID_VALUE
    assert "race discard" in fake.lib.fake_cuda_log().decode()
    # a disjoint range is fine, as is the same stream
    assert _discard(drv, drv["ptr"] + 5 * MiB, MiB, other) == 0
    assert _discard(drv, drv["ptr"] + MiB, MiB, s0) == 0
    # ordered by an event: fine; then a kernel on a third stream races the discard
    e = _event(drv)
    assert drv["record"](e, s0) == 0 and drv["wait"](other, e, 0) == 0
    assert _discard(drv, drv["ptr"], MiB, other) == 0
    third = fake.app_stream(0)
    assert fake.touch(third, drv["ptr"], 4096) == INVALID_VALUE
    # after the host waited for it, anything goes
    assert drv["record"](e, other) == 0 and drv["sync"](e) == 0
    assert fake.touch(third, drv["ptr"], 4096) == 0


def test_P1_prefetch_flags_must_be_zero(drv):
    rule("P1")
    assert drv["prefetch"](drv["ptr"], MiB, Loc(1, 0), 1, drv["s0"]) == INVALID_VALUE


def test_P2_prefetch_to_a_device_that_does_not_exist_is_refused(drv):
    rule("P2")
    assert drv["prefetch"](drv["ptr"], MiB, Loc(1, 2), 0, drv["s0"]) == INVALID_VALUE
    assert drv["prefetch"](drv["ptr"], MiB, Loc(1, 1), 0, drv["s1"]) == 0


def test_P3_prefetch_outside_one_allocation_is_refused(drv):
    rule("P3")
    assert drv["prefetch"](drv["ptr"] + 7 * MiB, 2 * MiB, Loc(2, 0), 0, drv["s0"]) == INVALID_VALUE


def test_A1_advice_about_a_device_that_does_not_exist_is_refused(drv):
    rule("A1")
    assert drv["advise"](drv["ptr"], MiB, 5, Loc(1, 7)) == INVALID_VALUE  # SET_ACCESSED_BY
    assert drv["advise"](drv["ptr"], MiB, 5, Loc(1, 1)) == 0
    assert drv["advise"](drv["ptr"], MiB, 1, Loc(1, 7)) == 0  # READ_MOSTLY ignores it


def test_E1_an_event_recorded_on_a_stream_of_another_context_is_refused(drv):
    rule("E1")
    e = _event(drv)  # device 0's context is current
    assert drv["record"](e, drv["s1"]) == INVALID_HANDLE
    assert drv["record"](e, drv["s0"]) == 0


def test_E2_the_null_stream_needs_a_current_context(drv):
    rule("E2")
    e = _event(drv)
    drv["fake"].set_current(None)
    assert drv["record"](e, None) == INVALID_CONTEXT
    assert drv["wait"](None, e, 0) == INVALID_CONTEXT


def test_E3_a_stream_may_wait_on_an_event_of_another_device(drv):
    rule("E3")
    e = _event(drv)
    assert drv["record"](e, drv["s0"]) == 0
    assert drv["wait"](drv["s1"], e, 0) == 0


def test_C1_calls_without_a_current_context_are_refused(drv):
    rule("C1")
    drv["fake"].set_current(None)
    out = U64()
    assert drv["alloc"](ctypes.byref(out), MiB, 1) == INVALID_CONTEXT
    assert drv["free"](drv["ptr"]) == INVALID_CONTEXT
    assert drv["prefetch"](drv["ptr"], MiB, Loc(2, 0), 0, drv["s0"]) == INVALID_CONTEXT
    assert _discard(drv, drv["ptr"], MiB, drv["s0"]) == INVALID_CONTEXT
    assert drv["ctx_sync"]() == INVALID_CONTEXT
    assert drv["memset"](drv["ptr"], 0, MiB, drv["s0"]) == INVALID_CONTEXT
    assert drv["copy"](drv["ptr"], drv["ptr"] + MiB, MiB, drv["s0"]) == INVALID_CONTEXT
    f, t = ctypes.c_size_t(), ctypes.c_size_t()
    assert drv["mem_info"](ctypes.byref(f), ctypes.byref(t)) == INVALID_CONTEXT


def test_C2_streams_and_events_belong_to_the_current_context(drv):
    rule("C2")
    s = P()
    assert drv["stream"](ctypes.byref(s), 1) == 0  # device 0's, whatever it was meant for
    drv["fake"].set_current(drv["fake"].primary(1))
    e = _event(drv)
    assert drv["record"](e, s.value) == INVALID_HANDLE
    assert drv["record"](e, drv["s1"]) == 0


def test_M1_managed_allocation_of_zero_bytes_or_other_flags_is_refused(drv):
    rule("M1")
    out = U64()
    assert drv["alloc"](ctypes.byref(out), 0, 1) == INVALID_VALUE
    assert drv["alloc"](ctypes.byref(out), MiB, 4) == INVALID_VALUE


def test_S1_the_legacy_stream_cannot_be_destroyed(drv):
    rule("S1")
    assert drv["stream_destroy"](None) == INVALID_HANDLE


def test_S2_a_destroyed_stream_is_refused_by_every_call(drv):
    rule("S2")
    fake, e = drv["fake"], _event(drv)
    s = fake.app_stream(0)
    assert fake.destroy_stream(s) == 0
    assert drv["record"](e, s) == INVALID_HANDLE
    assert drv["wait"](s, e, 0) == INVALID_HANDLE
    assert drv["prefetch"](drv["ptr"], MiB, Loc(1, 0), 0, s) == INVALID_HANDLE
    assert _discard(drv, drv["ptr"], MiB, s) == INVALID_HANDLE
    assert drv["memset"](drv["ptr"], 0, MiB, s) == INVALID_HANDLE
    assert drv["copy"](drv["ptr"], drv["ptr"] + MiB, MiB, s) == INVALID_HANDLE
    capturing = fake.proc("cuStreamIsCapturing", P, ctypes.POINTER(ctypes.c_int), version=10000)
    assert capturing(s, ctypes.byref(ctypes.c_int())) == INVALID_HANDLE
    assert fake.destroy_stream(s) == INVALID_HANDLE
    assert len(fake.destroyed_stream_uses()) == 8
    assert drv["record"](e, drv["s0"]) == 0  # the live ones are not affected


def _timer(c):
    e = P()
    assert c["event"](ctypes.byref(e), 0) == 0  # CU_EVENT_DEFAULT: timed
    return e.value


def _ms(c, a, b):
    ms = ctypes.c_float()
    return c["elapsed"](ctypes.byref(ms), a, b), ms.value


def test_T1_elapsed_time_of_an_event_made_without_timing_is_refused(drv):
    rule("T1")
    a, b = _timer(drv), _event(drv)  # b: CU_EVENT_DISABLE_TIMING
    assert drv["record"](a, drv["s0"]) == 0 and drv["record"](b, drv["s0"]) == 0
    assert drv["sync"](b) == 0
    assert _ms(drv, a, b)[0] == INVALID_HANDLE
    c = _timer(drv)
    assert drv["record"](c, drv["s0"]) == 0 and drv["sync"](c) == 0
    assert _ms(drv, a, c)[0] == 0


def test_T2_elapsed_time_of_an_event_never_recorded_is_refused(drv):
    rule("T2")
    a, b = _timer(drv), _timer(drv)
    assert drv["record"](a, drv["s0"]) == 0 and drv["sync"](a) == 0
    assert _ms(drv, a, b)[0] == INVALID_HANDLE


def test_T3_elapsed_time_before_the_host_waited_for_the_work_is_not_ready(drv):
    rule("T3")
    a, b = _timer(drv), _timer(drv)
    assert drv["record"](a, drv["s0"]) == 0
    assert drv["prefetch"](drv["ptr"], 4 * MiB, Loc(1, 0), 0, drv["s0"]) == 0  # takes time
    assert drv["record"](b, drv["s0"]) == 0
    assert _ms(drv, a, b)[0] == NOT_READY
    assert drv["sync"](b) == 0
    rc, ms = _ms(drv, a, b)
    assert rc == 0 and ms > 0


def test_M2_device_memset_and_copy_outside_managed_memory_are_refused(drv):
    rule("M2")
    p, s0 = drv["ptr"], drv["s0"]
    assert drv["memset"](p + 7 * MiB, 0, 2 * MiB, s0) == INVALID_VALUE
    assert drv["copy"](p, 0x1000, MiB, s0) == INVALID_VALUE
    assert drv["copy"](p + 7 * MiB, p, 2 * MiB, s0) == INVALID_VALUE
    assert drv["memset"](p, 0, MiB, s0) == 0 and drv["copy"](p + MiB, p, MiB, s0) == 0


def test_N1_device_name_of_no_device_or_into_no_buffer_is_refused(drv):
    rule("N1")
    buf = ctypes.create_string_buffer(64)
    assert drv["name"](buf, 64, 2) == INVALID_DEVICE  # two devices: 0 and 1
    assert drv["name"](buf, 0, 0) == INVALID_VALUE
    assert drv["name"](buf, 64, 1) == 0 and buf.value


def test_every_precondition_in_the_table_has_its_test():
    table = (Path(__file__).resolve().parent / "native" / "PRECONDITIONS.md").read_text()
    ids = set(re.findall(r"^\| ([A-Z]\d) \|", table, re.M))
    assert len(ids) >= 15
    names = {n.split("_")[1] for n in globals() if n.startswith("test_") and "_" in n}
    assert ids <= names, f"rows without a test: {sorted(ids - names)}"


# ---- the cuda backend keeps to them -------------------------------------------------------

def test_a_direct_discard_on_the_null_stream_goes_on_a_stream_of_ours_in_null_stream_order():
    # cuda.h, cuMemDiscardBatchAsync, hStream: "Must not be legacy NULL stream"; this is what
    # scripts/gpu_check.py's probe asks for (native.discard(p, n), stream 0)
    with fakecuda.backend("fake") as fake:
        p = uvm_sched.malloc(4 * MiB)
        native.prefetch(p, 4 * MiB)  # on the NULL stream
        fake.clear()
        native.discard(p, 4 * MiB)
        made = ("cuCtxSetCurrent", "cuStreamCreate", "cuEventCreate")  # the first time only
        calls = [c for c in fake.calls() if c["name"] not in made]
        names = [c["name"] for c in calls]
        assert names == ["cuEventRecord", "cuStreamWaitEvent", "cuMemDiscardBatchAsync",
                         "cuEventRecord", "cuStreamWaitEvent"]
        ours = calls[2]["stream"]
        assert ours != "s0" and calls[2]["rc"] == 0
        assert calls[0]["stream"] == "s0" and calls[1]["stream"] == ours  # after NULL's work
        assert calls[3]["stream"] == ours and calls[4]["stream"] == "s0"  # before its next
        assert uvm_sched.stats()["direct_discards"] == 1
        uvm_sched.free(p)


def _plan_rows(rows):
    t = np.zeros(len(rows), native.PLAN_ROW_DTYPE)
    for i, (tick, act, block) in enumerate(rows):
        t[i]["tick"], t[i]["action"], t[i]["block"] = tick, native._ACTION_NAMES.index(act), block
    return t


def test_a_planned_discard_waits_for_the_prefetches_of_its_range():
    # cuda.h, cuMemDiscardBatchAsync: "any reads, writes or prefetches to any part of the
    # memory range that occur simultaneously with the discard operation result in undefined
    # behavior": the fake refuses the discard unless it is ordered after them
    with fakecuda.backend("fake") as fake:
        s = fake.app_stream(0)
        native.arm(_plan_rows([(0, "prefetch_to_host", 0), (0, "prefetch_to_device", 0),
                               (1, "discard", 0)]), [8 * MiB], 2, sync="period")
        for _ in range(3):
            uvm_sched.free(uvm_sched.malloc(8 * MiB, stream=s), stream=s)
        native.disarm()
        st = uvm_sched.stats()
        assert "race" not in fake.lib.fake_cuda_log().decode()
        assert st["actions_failed"] == 0 and st["bytes_discarded"] == 3 * 8 * MiB


def test_two_devices_in_one_process_each_call_runs_in_its_devices_context():
    # cuda.h, cuEventRecord: "hEvent and hStream must be from the same context otherwise
    # CUDA_ERROR_INVALID_HANDLE is returned"; the thread's current context is device 0's
    with fakecuda.backend("fake", FAKE_CUDA_DEVICES="2") as fake:
        fake.set_current(fake.primary(0))
        s1 = fake.app_stream(1)
        native.arm(_plan_rows([(0, "prefetch_to_host", 0), (0, "prefetch_to_device", 0),
                               (1, "discard", 0)]), [8 * MiB], 2, sync="period", device=1)
        for _ in range(2):
            uvm_sched.free(uvm_sched.malloc(8 * MiB, stream=s1, device=1), stream=s1)
        native.disarm()
        a = uvm_sched.malloc(MiB // 2, stream=s1, device=1)
        b = uvm_sched.malloc(MiB // 2, stream=fake.app_stream(1), device=1)
        uvm_sched.free(a, stream=fake.app_stream(1))  # cross-stream: waits on device 1
        uvm_sched.free(b)
        st = uvm_sched.stats()
        assert st["actions_failed"] == 0 and st["actions_issued"] == 6, st
        bad = [c for c in fake.calls() if c["rc"] not in (0, None)]
        assert not bad, bad
        assert st["errors_driver"] == 0
        pf = [c for c in fake.calls("cuMemPrefetchAsync") if c["loc.type"] == 1]
        assert pf and all(c["loc.id"] == 1 for c in pf)
        assert fake.current_device() == 0  # the caller's context is put back


def test_memory_is_returned_from_a_thread_without_a_context():
    # cuMemFree lists CUDA_ERROR_INVALID_CONTEXT: a fresh thread has no current context
    with fakecuda.backend("fake", UVM_SCHED_ARENA_BYTES="8M") as fake:
        uvm_sched.free(uvm_sched.malloc(4 * MiB))
        out = []
        t = threading.Thread(target=lambda: out.append(native.release_cached()))
        t.start()
        t.join()
        assert out == [8 * MiB]
        assert fake.live_allocations() == 0


# ---- streams the application destroys (CuPy, Numba) ---------------------------------------

def test_memory_cached_for_a_destroyed_stream_is_reclaimed_without_touching_its_handle():
    # cuda.h, cuStreamDestroy: the call "will return immediately and the resources
    # associated with hStream will be released automatically once the device has completed
    # all work in hStream"; the handle itself may not be used again
    with fakecuda.backend("fake", UVM_SCHED_ARENA_BYTES="8M",
                          UVM_SCHED_LIMIT_BYTES="8M") as fake:
        s, t = fake.app_stream(0), fake.app_stream(0)
        p = uvm_sched.malloc(6 * MiB, stream=s)
        uvm_sched.free(p, stream=s)  # cached for s
        assert fake.destroy_stream(s) == 0
        q = uvm_sched.malloc(6 * MiB, stream=t)  # only s's cached pages fit: a reclaim
        assert q == p
        st = uvm_sched.stats()
        assert st["reclaims"] == 1 and st["errors_driver"] == 0, st
        assert fake.destroyed_stream_uses() == []
        assert fake.calls("cuCtxSynchronize")  # waited for the device instead
        uvm_sched.free(q, stream=t)


def test_any_number_of_destroyed_streams_over_time_is_served():
    # 128 stream slots: a stream that is gone must give its slot back, or the 128th new
    # stream would get no memory
    with fakecuda.backend("fake") as fake:
        keep = uvm_sched.malloc(4096, stream=fake.app_stream(0))
        for i in range(300):
            s = fake.app_stream(0)
            n = 4096 if i % 2 else 3 * MiB
            p = uvm_sched.malloc(n, stream=s)
            uvm_sched.free(p, stream=s)
            assert fake.destroy_stream(s) == 0
        st = uvm_sched.stats()
        assert st["allocated_blocks"] == 1 and st["errors_driver"] == 0, st
        assert fake.destroyed_stream_uses() == []
        uvm_sched.free(keep)
