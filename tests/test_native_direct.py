"""Direct calls (prefetch, advise, discard, synchronize, release_cached): the driver calls
they make on the fake driver (CUmemLocation values, advice codes, the caller's stream),
what they count and record on the host backend, and the errors naming pointer, size and
driver status."""
from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "native"))
import fakecuda  # noqa: E402

import uvm_sched  # noqa: E402
from uvm_sched import native  # noqa: E402
from uvm_sched.planner import ACTIONS, Plan  # noqa: E402

MiB = 1 << 20


def _app_stream(fake) -> tuple[int, str]:
    """A stream the fake driver knows, as the application would have made it: its handle
    and the driver's name for it (s<id>)."""
    fake.lib.fake_cuda_stream_create.restype = ctypes.c_void_p
    h = fake.lib.fake_cuda_stream_create()
    line = [ln for ln in fake.lib.fake_cuda_log().decode().splitlines() if "app stream" in ln]
    return h, line[-1].split()[-1]


def _kinds(ev):
    return [native.EVENT_KINDS[int(k)] for k in ev["kind"]]


# ---- host backend: recorded and counted, not executed ---------------------------------
def test_host_records_each_direct_call_like_an_action_with_no_plan_row():
    with fakecuda.backend("host"):
        p = uvm_sched.malloc(4 * MiB, stream=0x50)
        native.drain_events()
        native.prefetch(p, 4 * MiB, to="device", stream=0x50)
        native.prefetch(p + MiB, MiB, to="host", stream=0x60, device=1)
        native.advise(p, 2 * MiB, "advise_preferred_host")
        native.advise(p, 2 * MiB, "advise_preferred_host", unset=True)
        native.advise(p, 4 * MiB, "advise_read_mostly", device=1)
        native.discard(p, 4 * MiB, stream=0x50)
        native.synchronize(0x50)
        ev = native.drain_events()
        assert _kinds(ev) == ["prefetch_to_device", "prefetch_to_host", "advise_preferred_host",
                              "unadvise", "advise_read_mostly", "discard", "sync"]
        assert ev["addr"].tolist()[:6] == [p, p + MiB, p, p, p, p]
        assert ev["size"].tolist()[:6] == [4 * MiB, MiB, 2 * MiB, 2 * MiB, 4 * MiB, 4 * MiB]
        assert ev["stream"].tolist() == [0x50, 0x60, 0, 0, 0, 0x50, 0x50]
        assert ev["device"].tolist()[:6] == [0, 1, 0, 0, 1, 0]
        # arg -1: not a plan row; unadvise names the advice it undid
        assert ev["arg"].tolist() == [-1, -1, -1, ACTIONS.index("advise_preferred_host"), -1, -1, 0]
        st = uvm_sched.stats()
        assert (st["direct_prefetches"], st["direct_advises"], st["direct_discards"],
                st["direct_syncs"]) == (2, 3, 1, 1)
        assert st["direct_bytes_h2d"] == 4 * MiB and st["direct_bytes_d2h"] == MiB
        assert st["direct_bytes_advised"] == 8 * MiB and st["direct_bytes_discarded"] == 4 * MiB
        assert st["direct_failed"] == st["direct_unsupported"] == 0
        # the executor's counters are the plan's alone
        assert st["actions_issued"] == 0 and st["bytes_prefetched_h2d"] == 0
        uvm_sched.free(p)


def test_release_cached_is_counted_and_recorded_with_its_bytes():
    with fakecuda.backend("host", UVM_SCHED_ARENA_BYTES="8M"):
        uvm_sched.free(uvm_sched.malloc(6 * MiB))
        native.drain_events()
        assert native.release_cached() == 8 * MiB
        assert native.release_cached() == 0
        ev = native.drain_events()
        assert _kinds(ev) == ["release", "release"]
        assert ev["size"].tolist() == [8 * MiB, 0]
        assert uvm_sched.stats()["direct_releases"] == 2


def test_a_range_outside_our_memory_is_refused_before_the_driver_naming_the_pointer():
    with fakecuda.backend("fake", UVM_SCHED_ARENA_BYTES="8M") as fake:
        p = uvm_sched.malloc(6 * MiB)
        native.drain_events()
        fake.clear()
        buf = ctypes.create_string_buffer(4096)
        foreign = ctypes.addressof(buf)
        with pytest.raises(ValueError, match=f"0x{foreign:x}.*4,096 bytes.*not in memory reserved"):
            native.prefetch(foreign, 4096)
        with pytest.raises(ValueError, match="runs 2097152 bytes past the end of its reservation"):
            native.advise(p, 10 * MiB, "advise_accessed_by")
        with pytest.raises(ValueError, match="1 byte or more, got 0 bytes"):
            native.prefetch(p, 0)
        with pytest.raises(ValueError, match="not an address"):
            native.discard(0, MiB)
        with pytest.raises(ValueError, match="device must be >= 0, got -1"):
            native.prefetch(p, MiB, device=-1)
        with pytest.raises(ValueError, match="unknown advice 'prefetch_to_host'"):
            native.advise(p, MiB, "prefetch_to_host")
        with pytest.raises(ValueError, match="to must be 'device' or 'host'"):
            native.prefetch(p, MiB, to="cpu")
        assert not [c for c in fake.calls() if c["name"].startswith("cuMem")]
        assert len(native.drain_events()) == 0  # nothing reached the driver: nothing recorded
        st = uvm_sched.stats()
        assert st["direct_failed"] == 0 and st["direct_prefetches"] == 0
        uvm_sched.free(p)


def test_discard_only_inside_a_live_block_that_owns_its_pages():
    with fakecuda.backend("host"):
        small = uvm_sched.malloc(64 * 1024)
        big = uvm_sched.malloc(3 * MiB)  # owns two 2 MiB pages
        with pytest.raises(ValueError, match=r"\(65536 bytes\) shares its 2 MiB page"):
            native.discard(small, 64 * 1024)
        native.discard(big + MiB, 3 * MiB)  # up to the end of its last page: its own
        native.discard(big + 2 * MiB + 512, MiB)  # inside its second page
        with pytest.raises(ValueError, match="runs past the end of its block"):
            native.discard(big + MiB, 3 * MiB + 1)
        uvm_sched.free(big)
        with pytest.raises(ValueError, match="in no live block"):
            native.discard(big, MiB)
        assert uvm_sched.stats()["direct_discards"] == 2
        uvm_sched.free(small)


# ---- fake driver: the calls the driver sees ---------------------------------------------
def test_prefetch_goes_to_the_driver_on_the_callers_stream_with_the_right_location():
    with fakecuda.backend("fake", FAKE_CUDA_DEVICES="2") as fake:
        s, sid = _app_stream(fake)
        p = uvm_sched.malloc(4 * MiB, stream=s)
        fake.clear()
        native.prefetch(p, 4 * MiB, to="device", stream=s)
        native.prefetch(p, MiB, to="host", stream=s)
        native.prefetch(p + MiB, 2 * MiB, to="device", device=1)  # default stream
        pf = fake.calls("cuMemPrefetchAsync")
        assert [c["name"] for c in pf] == ["cuMemPrefetchAsync_v2"] * 3
        assert [(c["ptr"], c["bytes"]) for c in pf] == [(p, 4 * MiB), (p, MiB), (p + MiB, 2 * MiB)]
        # CU_MEM_LOCATION_TYPE_DEVICE = 1 with the ordinal, _HOST = 2 with id 0
        assert [(c["loc.type"], c["loc.id"]) for c in pf] == [(1, 0), (2, 0), (1, 1)]
        assert [c["stream"] for c in pf] == [sid, sid, "s0"]
        assert all(c["flags"] == 0 and c["rc"] == 0 for c in pf)
        uvm_sched.free(p)


def test_advice_set_and_unset_codes_and_locations():
    with fakecuda.backend("fake") as fake:
        p = uvm_sched.malloc(4 * MiB)
        fake.clear()
        for a in ("advise_preferred_host", "advise_accessed_by", "advise_read_mostly"):
            native.advise(p, 4 * MiB, a)
            native.advise(p, 4 * MiB, a, unset=True)
        adv = fake.calls("cuMemAdvise")
        assert {c["name"] for c in adv} == {"cuMemAdvise_v2"}
        # CU_MEM_ADVISE_SET/UNSET_PREFERRED_LOCATION 3/4 (host), _ACCESSED_BY 5/6 (device 0),
        # _READ_MOSTLY 1/2
        assert [(c["advice"], c["loc.type"]) for c in adv] == [(3, 2), (4, 1), (5, 1), (6, 1),
                                                               (1, 1), (2, 1)]
        assert all((c["ptr"], c["bytes"]) == (p, 4 * MiB) for c in adv)
        assert [native.EVENT_KINDS[k] for k in native.drain_events()["kind"]][-6:] == [
            "advise_preferred_host", "unadvise", "advise_accessed_by", "unadvise",
            "advise_read_mostly", "unadvise"]
        uvm_sched.free(p)


def test_a_legacy_driver_gets_device_ordinals():
    with fakecuda.backend("fake", FAKE_CUDA_VERSION="12000") as fake:
        p = uvm_sched.malloc(4 * MiB)
        fake.clear()
        native.prefetch(p, MiB, to="host")
        native.prefetch(p, MiB, to="device")
        native.advise(p, MiB, "advise_preferred_host")
        native.advise(p, MiB, "advise_accessed_by", unset=True)
        pf = fake.calls("cuMemPrefetchAsync")
        assert [(c["name"], c["device"]) for c in pf] == [("cuMemPrefetchAsync_v1", -1),
                                                          ("cuMemPrefetchAsync_v1", 0)]
        adv = fake.calls("cuMemAdvise")
        assert [(c["name"], c["advice"], c["device"]) for c in adv] == [
            ("cuMemAdvise_v1", 3, -1), ("cuMemAdvise_v1", 6, 0)]
        with pytest.raises(native.UnsupportedError, match="no cuMemDiscardBatchAsync"):
            native.discard(p, 4 * MiB)
        ev = native.drain_events()
        assert native.EVENT_KINDS[int(ev["kind"][-1])] == "unsupported"
        assert int(ev["arg"][-1]) == -1 - ACTIONS.index("discard")
        assert uvm_sched.stats()["direct_unsupported"] == 1
        uvm_sched.free(p)


def test_discard_is_one_batch_entry_on_the_callers_stream():
    with fakecuda.backend("fake") as fake:
        s, sid = _app_stream(fake)
        p = uvm_sched.malloc(8 * MiB, stream=s)
        fake.clear()
        native.discard(p + 2 * MiB, 4 * MiB, stream=s)
        (d,) = fake.calls("cuMemDiscardBatchAsync")
        assert (d["count"], d["ptr"], d["bytes"], d["flags"]) == (1, p + 2 * MiB, 4 * MiB, 0)
        assert d["stream"] == sid and d["rc"] == 0
        uvm_sched.free(p)


def test_a_driver_refusal_raises_with_pointer_size_and_status_and_is_recorded():
    with fakecuda.backend("fake", FAKE_CUDA_FAIL="cuMemPrefetchAsync:2:1") as fake:
        p = uvm_sched.malloc(4 * MiB)
        native.prefetch(p, MiB)  # the first call succeeds
        native.drain_events()
        with pytest.raises(native.UvmSchedError) as e:
            native.prefetch(p, 2 * MiB, to="host")
        msg = str(e.value)
        assert f"0x{p:x}" in msg and "2,097,152 bytes" in msg and "to='host'" in msg
        assert "cuMemPrefetchAsync failed: CUDA_ERROR_INVALID_VALUE (1)" in msg
        ev = native.drain_events()
        assert _kinds(ev) == ["action_failed"]
        assert int(ev["arg"][0]) == -1 - ACTIONS.index("prefetch_to_host")
        st = uvm_sched.stats()
        assert st["direct_failed"] == 1 and st["direct_prefetches"] == 1
        assert st["direct_bytes_d2h"] == 0
        assert fake.calls("cuMemPrefetchAsync")[-1]["rc"] == 1
        uvm_sched.free(p)


def test_synchronize_records_an_event_on_the_stream_and_waits_for_it():
    with fakecuda.backend("fake") as fake:
        s, sid = _app_stream(fake)
        fake.clear()
        native.synchronize(s)
        calls = [c for c in fake.calls() if c["name"] != "cuCtxSetCurrent"]
        names = [c["name"] for c in calls]
        assert names == ["cuEventCreate", "cuEventRecord", "cuEventSynchronize", "cuEventDestroy"]
        assert calls[1]["stream"] == sid
        assert calls[1]["event"] == calls[2]["event"] == calls[3]["event"] == calls[0]["event"]
        assert uvm_sched.stats()["direct_syncs"] == 1


def test_a_failed_synchronize_raises_and_is_counted():
    with fakecuda.backend("fake", FAKE_CUDA_FAIL="cuEventSynchronize:1:700"):
        with pytest.raises(native.UvmSchedError, match=r"cuEventSynchronize failed.*\(700\)"):
            native.synchronize(0)
        assert uvm_sched.stats()["direct_failed"] == 1
        assert _kinds(native.drain_events()) == ["driver_error"]


def test_action_log_leaves_direct_calls_out():
    with fakecuda.backend("host"):
        df = pd.DataFrame([(0, "prefetch_to_host", 0, False, 0, 0)],
                          columns=["tick", "action", "block", "persistent", "offset", "bytes"])
        native.arm_plan(Plan(df, {"budget_bytes": 1 << 30, "period_events": 2,
                                  "alloc_sizes": [4 * MiB], "sync": "period"}))
        a = uvm_sched.malloc(4 * MiB)
        native.prefetch(a, 4 * MiB)  # a direct call between the plan's events
        uvm_sched.free(a)
        native.disarm()
        log = native.action_log(native.drain_events())
        assert log["row"].tolist() == [0] and log["action"].tolist() == ["prefetch_to_host"]


# ---- stream handles --------------------------------------------------------------------
class _Obj:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class _Protocol:
    def __cuda_stream__(self):
        return (0, 0x77)


class _IntLike:
    def __int__(self):
        return 0x88


@pytest.mark.parametrize("stream, want", [
    (None, 0), (0, 0), (0x10, 0x10), (np.uint64(0x11), 0x11),
    (ctypes.c_void_p(0x12), 0x12), (ctypes.c_void_p(None), 0),
    (_Obj(cuda_stream=0x13), 0x13),                      # torch.cuda.Stream
    (_Obj(handle=ctypes.c_void_p(0x14)), 0x14),          # numba (ctypes binding)
    (_Obj(handle=_IntLike()), 0x88),                     # numba (cuda.bindings CUstream)
    (_Obj(ptr=0x15), 0x15),                              # cupy
    (_Protocol(), 0x77), (_IntLike(), 0x88),
])
def test_stream_handle_accepts_the_frameworks_streams(stream, want):
    assert native.stream_handle(stream) == want


def test_stream_handle_refuses_what_is_no_stream():
    with pytest.raises(TypeError, match="cannot make a CUDA stream handle of 'fast'"):
        native.stream_handle("fast")
