"""Fault sampling through the native core: CUPTI's unified-memory GPU page-fault records
(cupti.c) read from a fake libcupti as strict as cupti_activity.h
(tests/native/PRECONDITIONS_CUPTI.md), fault probes (probe.c), and the Scheduler's
fault sampler on the host backend."""
from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap
from contextlib import contextmanager

import numpy as np
import pytest

from _planner_helpers import host_backend
from native.fakecupti import FakeCupti, fake_cupti_path, private_copy
from uvm_sched import native
from uvm_sched import _native_faults as nf
from uvm_sched._runtime_faults import FaultSampler

host = pytest.fixture(host_backend)
MiB = 1 << 20


@pytest.fixture
def cupti(host, monkeypatch):
    """The fake CUPTI, loaded by the native core, collecting device 0's faults."""
    path = fake_cupti_path()
    monkeypatch.setenv("UVM_SCHED_LIBCUPTI", path)
    fake = FakeCupti(path)
    nf.cupti_start(None, 0)
    nf.cupti_take()  # nothing left from an earlier test
    yield fake
    nf.cupti_stop()
    nf.cupti_take()


def test_fault_records_become_samples_with_their_address_time_and_device(cupti):
    t0 = cupti.now()
    faults = [(0x7F0000200000, t0 + 10), (0x7F0000400000 + 4096, t0 + 20), (0x1000, t0 + 30)]
    for a, t in faults:
        assert cupti.fault(a, t, flags=2, device=0)
    nf.cupti_flush()
    got = nf.cupti_take()
    assert got.dtype == nf.FAULT_DTYPE
    assert [(int(a), int(t)) for a, t in zip(got["address"], got["t_cupti"])] == faults
    assert (got["flags"] == 2).all() and (got["value"] == 1).all()
    st = nf.cupti_stats()
    assert st["cupti_faults"] >= 3 and st["cupti_on"] == 1 and st["cupti_lost"] == 0
    assert len(nf.cupti_take()) == 0  # taken once
    log = "\n".join(cupti.log())
    # configured (GPU page faults, enabled) before the kind was enabled
    assert log.index("cuptiActivityConfigureUnifiedMemoryCounter count=1 kind=4 enable=1 -> 0") \
        < log.index("cuptiActivityEnable kind=25 -> 0")


def test_only_the_gpu_page_fault_counter_is_configured(cupti):
    # bytes moved host to device (counter kind 1) are not asked for: CUPTI does not collect them
    assert not cupti.lib.fake_cupti_counter(1, 0x200000, cupti.now(), 2 * MiB, 0, 0)
    assert cupti.fault(0x200000)


def test_an_incomplete_record_ends_its_buffer_and_is_counted(cupti):
    for i in range(3):
        cupti.fault(0x200000 * (i + 1))
    cupti.lib.fake_cupti_truncate_next()
    before = nf.cupti_stats()["cupti_bad_buffers"]
    nf.cupti_flush()
    assert [int(a) for a in nf.cupti_take()["address"]] == [0x200000, 0x400000]
    assert nf.cupti_stats()["cupti_bad_buffers"] == before + 1


def test_the_clock_pair_maps_cuptis_clock_to_the_rings(cupti):
    cupti.lib.fake_cupti_clock_offset(-123_456_789_000)
    try:
        c, m = nf.cupti_clock()
        assert abs((c - m) - (-123_456_789_000)) < 5_000_000  # both read within 5 ms
    finally:
        cupti.lib.fake_cupti_clock_offset(0)


def test_without_cupti_start_says_what_to_install():
    code = textwrap.dedent("""
        import os
        os.environ["UVM_SCHED_LIBCUPTI"] = "/nonexistent/libcupti.so"
        from uvm_sched import native, _native_faults as nf
        native._reset("host", force=True)
        try:
            nf.cupti_start()
        except native.UvmSchedError as e:
            print("ERR", e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert "ERR fault sampling: CUPTI is not loadable (/nonexistent/libcupti.so)" in out.stdout
    assert "nvidia-cuda-cupti" in out.stdout and "UVM_SCHED_LIBCUPTI" in out.stdout


# ---- the fake refuses what cupti_activity.h says the real one refuses -----------------
class _Fresh:
    """A private instance of the fake, untouched by the native core."""

    def __init__(self, tmp_path) -> None:
        self.lib = ctypes.CDLL(private_copy(tmp_path))
        self.lib.fake_cupti_reset()

    def configure(self, kind: int = 4, scope: int = 1, enable: int = 1, count: int = 1) -> int:
        cfg = (ctypes.c_uint32 * 4)(scope, kind, 0, enable)
        return self.lib.cuptiActivityConfigureUnifiedMemoryCounter(cfg, count)


REQ = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t),
                       ctypes.POINTER(ctypes.c_size_t))
DONE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t,
                        ctypes.c_size_t)


def test_fake_U1_register_callbacks_refuses_null(tmp_path):
    f = _Fresh(tmp_path)
    assert f.lib.cuptiActivityRegisterCallbacks(None, None) == 1  # INVALID_PARAMETER


def test_fake_U2_configure_refuses_null_and_unknown_counter_kinds(tmp_path):
    f = _Fresh(tmp_path)
    assert f.lib.cuptiActivityConfigureUnifiedMemoryCounter(None, 1) == 1
    assert f.configure(kind=0) == 1 and f.configure(kind=9) == 1 and f.configure(scope=3) == 1
    assert f.configure(kind=4) == 0


def test_fake_U3_enable_refuses_unknown_kinds(tmp_path):
    f = _Fresh(tmp_path)
    assert f.lib.cuptiActivityEnable(55) == 21 and f.lib.cuptiActivityEnable(0) == 21


def test_fake_U4_enable_before_configuring_the_counters_is_refused(tmp_path):
    f = _Fresh(tmp_path)
    assert f.lib.cuptiActivityEnable(25) == 14  # NOT_COMPATIBLE
    assert f.configure() == 0 and f.lib.cuptiActivityEnable(25) == 0


def test_fake_U5_flush_before_registering_callbacks_is_refused(tmp_path):
    f = _Fresh(tmp_path)
    assert f.lib.cuptiActivityFlushAll(1) == 7  # INVALID_OPERATION


def test_fake_U6_U7_next_record_stops_at_the_end_and_refuses_a_cut_record(tmp_path):
    f = _Fresh(tmp_path)
    rec = ctypes.c_void_p()
    assert f.lib.cuptiActivityGetNextRecord(None, 0, ctypes.byref(rec)) == 1
    size = f.lib.fake_cupti_record_size()
    assert size == 104  # CUpti_ActivityUnifiedMemoryCounter3
    buf = (ctypes.c_uint8 * (2 * size))()
    ctypes.cast(buf, ctypes.POINTER(ctypes.c_uint32))[0] = 25
    ctypes.cast(ctypes.byref(buf, size), ctypes.POINTER(ctypes.c_uint32))[0] = 25
    assert f.lib.cuptiActivityGetNextRecord(buf, 2 * size, ctypes.byref(rec)) == 0
    assert f.lib.cuptiActivityGetNextRecord(buf, 2 * size, ctypes.byref(rec)) == 0
    assert f.lib.cuptiActivityGetNextRecord(buf, 2 * size, ctypes.byref(rec)) == 12  # the end
    rec = ctypes.c_void_p()
    assert f.lib.cuptiActivityGetNextRecord(buf, size + 8, ctypes.byref(rec)) == 0
    assert f.lib.cuptiActivityGetNextRecord(buf, size + 8, ctypes.byref(rec)) == 21  # cut


def test_fake_U8_timestamp_refuses_null(tmp_path):
    assert _Fresh(tmp_path).lib.cuptiGetTimestamp(None) == 1


def test_fake_U9_a_buffer_too_small_for_one_record_drops_the_records(tmp_path):
    f = _Fresh(tmp_path)
    keep = []

    @REQ
    def request(buf, size, max_records):
        b = (ctypes.c_uint8 * 64)()
        keep.append(b)
        buf[0], size[0], max_records[0] = ctypes.addressof(b), 64, 0

    @DONE
    def complete(ctx, stream, buf, size, valid):
        keep.append(valid)

    assert f.lib.cuptiActivityRegisterCallbacks(request, complete) == 0
    assert f.configure() == 0 and f.lib.cuptiActivityEnable(25) == 0
    f.lib.fake_cupti_fault.argtypes = [ctypes.c_uint64] * 2 + [ctypes.c_uint32] * 2
    assert f.lib.fake_cupti_fault(0x200000, 1, 1, 0) == 1
    assert f.lib.cuptiActivityFlushAll(1) == 0
    dropped = ctypes.c_size_t()
    assert f.lib.cuptiActivityGetNumDroppedRecords(None, 0, ctypes.byref(dropped)) == 0
    assert dropped.value == 1 and keep[-1] == 0  # given back empty


def test_every_fake_rule_has_a_test():
    from pathlib import Path

    table = (Path(__file__).parent / "native" / "PRECONDITIONS_CUPTI.md").read_text()
    ids = {line.split("|")[1].strip() for line in table.splitlines()
           if line.startswith("| U")}
    names = {n for n in globals() if n.startswith("test_fake_")}
    tested = {i for n in names for i in n.split("_") if i.startswith("U") and i[1:].isdigit()}
    assert ids and ids == tested, (ids, tested)


# ---- fault probes -------------------------------------------------------------------------
def test_probes_move_their_range_to_the_host_after_the_given_tick(host):
    w = native.malloc(4 * MiB)
    native.drain_events()
    rows = np.zeros(2, nf.PROBE_DTYPE)
    rows[0] = (1, w, 4 * MiB, 0, 0)  # right after allocator event 1 of the iteration
    rows[1] = (-1, w, 2 * MiB, 0, 0)  # at the marker (and at once: set just after one)
    native.step()
    nf.probe_set(rows)
    for _ in range(2):
        a = native.malloc(MiB)
        native.free(a)
        native.step()
    ev = native.drain_events()
    kinds = [native.EVENT_KINDS[k] for k in ev["kind"]]
    assert kinds == ["mark", "probe", "alloc", "free", "probe", "mark", "probe", "alloc",
                     "free", "probe", "mark", "probe"]
    probes = ev[ev["kind"] == int(native.NativeEvent.PROBE)]
    assert probes["arg"].tolist() == [1, 0, 1, 0, 1] and (probes["addr"] == w).all()
    st = nf.probe_stats()
    assert st["probe_issued"] == 5 and st["probe_bytes"] == 2 * MiB * 3 + 4 * MiB * 2
    nf.probe_set(np.empty(0, nf.PROBE_DTYPE))
    native.free(w)


def test_a_probe_outside_the_pool_is_skipped_and_a_bad_row_refused(host):
    native.step()
    nf.probe_set(np.array([(0, 0x1000, 4096, 0, 0)], nf.PROBE_DTYPE))
    a = native.malloc(MiB)
    native.free(a)
    assert nf.probe_stats()["probe_skipped"] == 1
    with pytest.raises(ValueError, match="probe row 0: tick -2"):
        nf.probe_set(np.array([(-2, 0x1000, 4096, 0, 0)], nf.PROBE_DTYPE))
    nf.probe_set(np.empty(0, nf.PROBE_DTYPE))


def test_a_probe_of_an_allocation_finds_its_block_each_iteration_or_is_skipped(host):
    native.step()
    # addr 0: the block of allocator event 0 (probed right after event 1); then of event 1,
    # the scratch block, whose size is not the row's (skipped: never a range it does not own)
    nf.probe_set(np.array([(1, 0, MiB, 0, 0), (1, 0, MiB, 0, 1)], nf.PROBE_DTYPE))
    seen = []
    for _ in range(3):
        native.step()
        a = native.malloc(MiB)
        native.free(native.malloc(MiB // 2))
        seen.append(a)
        native.free(a)
    ev = native.drain_events()
    probes = ev[ev["kind"] == int(native.NativeEvent.PROBE)]
    assert probes["addr"].tolist() == seen and (probes["arg"] == 0).all()
    assert nf.probe_stats()["probe_skipped"] == 3
    with pytest.raises(ValueError, match="probe row 0: addr 0 names the block of allocator "
                                         "event alloc_event \\(2, >= 0\\), probed at tick 1"):
        nf.probe_set(np.array([(1, 0, MiB, 0, 2)], nf.PROBE_DTYPE))
    nf.probe_set(np.empty(0, nf.PROBE_DTYPE))


def test_probes_of_allocations_keep_to_the_strict_fake_drivers_rules():
    """The probe rows on the cuda backend over the strict fake driver (rules in
    tests/native/PRECONDITIONS.md, quoting cuda.h of CUDA 13.0): every probe issued is one
    cuMemPrefetchAsync the driver accepts -- of the block's own range, inside the managed
    allocation (P3: "The memory range must refer to managed memory allocated via
    cuMemAllocManaged"), to the host (CU_MEM_LOCATION_TYPE_HOST, a location P2 accepts),
    flags 0 (P1: "flags for future use, must be zero now.") -- an of-allocation row on the
    allocation's stream, a marker row on the legacy stream; a row whose event allocated
    another size, or whose block is freed by its tick, makes no driver call."""
    from native.fakecuda import backend

    with backend("fake") as fake:
        s = fake.app_stream(0)
        w = native.malloc(2 * MiB, stream=s)
        native.step()
        # W at the marker; the block of event 0 after event 1; event 1's block (another
        # size: skipped); event 0's block after event 3, its own free (gone: skipped)
        nf.probe_set(np.array([(-1, w, 2 * MiB, 0, -1), (1, 0, MiB, 0, 0), (1, 0, MiB, 0, 1),
                               (3, 0, MiB, 0, 0)], nf.PROBE_DTYPE))
        fake.clear()
        seen = []
        for _ in range(3):
            native.step()
            a = native.malloc(MiB, stream=s)  # event 0
            native.free(native.malloc(MiB // 2, stream=s))  # events 1, 2
            seen.append(a)
            native.free(a)  # event 3
        nf.probe_set(np.empty(0, nf.PROBE_DTYPE))
        calls = fake.calls()
        pre = [c for c in calls if c["name"].startswith("cuMemPrefetchAsync")]
        assert all(c["rc"] == 0 for c in calls), [c for c in calls if c["rc"]]
        assert [(c["ptr"], c["bytes"]) for c in pre] == [
            x for a in seen for x in ((w, 2 * MiB), (a, MiB))]
        assert all(c["flags"] == 0 and c["loc.type"] == 2 for c in pre)  # 2: HOST
        assert {c["stream"] for c in pre[0::2]} == {"s0"}  # the marker's: the legacy stream
        assert len({c["stream"] for c in pre[1::2]} - {"s0"}) == 1  # the allocation's
        assert nf.probe_stats()["probe_skipped"] == 2 * 3
        native.free(w)


# ---- the Scheduler's fault sampler ---------------------------------------------------------
class FaultingLoop:
    """A training loop whose kernels touch its weights, on a GPU emulated for the fake
    CUPTI: a touch of a weight that is not resident faults (recorded now, at an address
    inside it) and makes it resident; a probe (a PROBE event leaving the ring) moves it to
    the host. Weight i is read in the forward pass (tick 3i+2 of an iteration of L layers),
    in the backward pass (tick 3L+2(L-1-i)) and by the optimizer (tick 6L-1)."""

    def __init__(self, fake: FakeCupti, layers: int = 4) -> None:
        self.fake, self.layers = fake, layers
        self.weights = [native.malloc(4 * MiB) for _ in range(layers)]
        self.resident: set[int] = set()
        self.faults = 0
        native._DRAIN_TAPS.append(self._tap)

    def _tap(self, ev) -> None:
        for a in ev["addr"][ev["kind"] == int(native.NativeEvent.PROBE)]:
            self.resident.discard(int(a))

    def touch(self, w: int) -> None:
        native.peek_events()  # the probes fired so far reach _tap
        if w not in self.resident:
            assert self.fake.fault(w + 3 * 65536)
            self.faults += 1
            self.resident.add(w)

    def iteration(self) -> None:
        acts = []
        for w in self.weights:
            acts.append(native.malloc(2 * MiB))
            native.free(native.malloc(MiB // 2))
            self.touch(w)
        grads = []
        for w, a in zip(reversed(self.weights), reversed(acts)):
            grads.append(native.malloc(2 * MiB))
            self.touch(w)
            native.free(a)
        for g in grads:
            native.free(g)
        for w in self.weights:
            self.touch(w)

    def expected(self) -> set[tuple[int, ...]]:
        L = self.layers
        return {(3 * i + 2, 3 * L + 2 * (L - 1 - i), 6 * L - 1) for i in range(L)}

    def close(self) -> None:
        native._DRAIN_TAPS.remove(self._tap)
        for w in self.weights:
            native.free(w)


@contextmanager
def _warmed_up(loop, warmup_iters: int, iterations: int, *, final_step: bool = True,
               **touches):
    """A sampled Scheduler on the fake CUPTI through ``loop``'s warm-up: ``iterations``
    marked iterations (and a last marker where ``final_step``), ``touches`` set on its
    fault sampler (``share``, ``long_life``, ``max_iters``), the plan awaited; yields the
    Scheduler while it is still open and closes ``loop`` after it."""
    from uvm_sched import Scheduler

    try:
        with Scheduler(budget="50%", warmup_iters=warmup_iters, mode="sampled",
                       sampler="cupti", hook=False, worker="thread") as s:
            for k, v in touches.items():
                setattr(s._touches, k, v)
            for _ in range(iterations):
                s.step()
                loop.iteration()
            if final_step:
                s.step()
            assert s.wait_planned(300), s.last_error
            yield s
    finally:
        loop.close()


def test_the_fault_sampler_probes_learns_every_weight_touch_and_plans_sampled(cupti):
    nf.cupti_stop()  # the Scheduler starts it
    cupti.lib.fake_cupti_clock_offset(7_000_000_000)  # CUPTI's clock is not the ring's
    loop = FaultingLoop(cupti)
    try:
        # share 1: every weight probed each warm-up iteration
        with _warmed_up(loop, 4, 5, share=1.0) as s:
            fs = s.stats()["fault_sampling"]
            assert fs["available"] and fs["blocks_closed"] == loop.layers
            assert fs["probe_issued"] > 0 and fs["probe_bytes"] > 0
            assert fs["faults"] == loop.faults
            assert s.plan.meta["mode"] == "sampled"
            smp = s.samples[s.samples["persistent"] & ~s.samples["assumed"]]
            got = {tuple(sorted(g["tick"])) for _, g in smp.groupby("block")}
            assert got == loop.expected()
            assert not s.samples["assumed"].any()  # every list closed: no tail assumed
            # after the warm-up: no probes, CUPTI off, the loop's faults are not collected
            assert nf.probe_stats()["probe_rows"] == 0
            assert not cupti.fault(loop.weights[0])
    finally:
        cupti.lib.fake_cupti_clock_offset(0)


def test_the_warmup_probes_until_no_list_is_open_then_plans(cupti):
    nf.cupti_stop()
    loop = FaultingLoop(cupti)
    # warmup_iters 1 alone would plan at the second marker; each weight is touched three
    # times an iteration, so the rule probes four iterations (the fourth closes every list)
    # and plans at the fifth marker, though the loop runs on
    with _warmed_up(loop, 1, 7, share=1.0) as s:
        fs = s.stats()["fault_sampling"]
        assert fs["settled"] and fs["probe_rounds"] == 4
        assert fs["blocks_closed"] == fs["blocks_seen"] == loop.layers
        smp = s.samples[s.samples["persistent"]]
        assert {tuple(sorted(g["tick"])) for _, g in smp.groupby("block")} == loop.expected()


def test_the_warmup_stops_probing_at_its_cap_with_lists_open(cupti):
    nf.cupti_stop()
    loop = FaultingLoop(cupti)
    with _warmed_up(loop, 1, 7, share=1.0, max_iters=2) as s:
        fs = s.stats()["fault_sampling"]
        assert fs["settled"] and fs["probe_rounds"] == 2 and fs["max_iters"] == 2
        assert fs["blocks_closed"] == 0 and fs["blocks_seen"] == loop.layers
        assert s.samples["assumed"].any()  # the open lists' tails
    with pytest.raises(ValueError, match="max_iters must be >= 1"):
        FaultSampler(max_iters=0)


def test_without_cupti_the_scheduler_plans_obliviously_and_says_why():
    code = textwrap.dedent("""
        import os
        os.environ["UVM_SCHED_LIBCUPTI"] = "/nonexistent/libcupti.so"
        from uvm_sched import native, Scheduler
        native._reset("host", force=True)
        ws = [native.malloc(4 << 20) for _ in range(3)]
        with Scheduler(budget="50%", warmup_iters=2, mode="sampled", sampler="cupti",
                       hook=False, worker="thread") as s:
            for _ in range(4):
                s.step()
                a = [native.malloc(2 << 20) for _ in range(3)]
                for x in a:
                    native.free(x)
            assert s.wait_planned(300), s.last_error
            fs = s.stats()["fault_sampling"]
            print("PLAN", s.plan.meta["mode"], fs["available"], fs["why_not"])
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert "PLAN oblivious False fault sampling: CUPTI is not loadable" in out.stdout, out.stderr


def test_a_warmup_too_short_to_close_the_lists_plans_their_tails_busy(cupti):
    nf.cupti_stop()
    loop = FaultingLoop(cupti)
    with _warmed_up(loop, 2, 3, final_step=False, share=1.0, max_iters=2) as s:
        fs = s.stats()["fault_sampling"]
        assert fs["blocks_closed"] == 0 and fs["blocks_seen"] == loop.layers
        smp = s.samples[s.samples["persistent"]]
        T = s.pattern.stop_tick - s.pattern.start_tick  # the learned iteration's ticks
        for _, g in smp.groupby("block"):
            seen = sorted(g.loc[~g["assumed"], "tick"])
            assert tuple(seen) in {e[:2] for e in loop.expected()}  # forward, backward
            assert sorted(g.loc[g["assumed"], "tick"]) == list(range(seen[-1] + 1, T))


class ActivationLoop(FaultingLoop):
    """A loop whose kernels touch activations, as FaultingLoop does weights: activation i
    (2 MiB) is allocated by ring event 3i of an iteration and written at once,
    a short-lived scratch block is allocated and freed beside it, and it is read again in
    the backward pass just before its free (event 3L + L-1-i). A new allocation is resident
    (its first touch does not fault unless a probe moved it)."""

    def __init__(self, fake: FakeCupti, layers: int = 4) -> None:
        super().__init__(fake, layers)
        self.weights_ = self.weights
        self.weights = []  # no weights: the activations alone

    def iteration(self) -> None:
        acts = []
        for _ in range(self.layers):
            a = native.malloc(2 * MiB)
            self.resident.add(a)
            acts.append(a)
            self.touch(a)
            native.free(native.malloc(MiB // 2))
        for a in reversed(acts):
            self.touch(a)
            native.free(a)

    def close(self) -> None:
        self.weights = self.weights_
        super().close()


def test_the_fault_sampler_probes_long_lived_activations_from_their_allocation(cupti):
    nf.cupti_stop()
    loop = ActivationLoop(cupti)
    with _warmed_up(loop, 4, 5, share=1.0) as s:
        fs = s.stats()["fault_sampling"]
        # probed at their allocation, then after the forward write: the backward read
        # is seen, and it is just before the free, so every list closes; the scratch
        # blocks (alive one event) are never probed
        assert fs["local_blocks_seen"] == fs["local_blocks_closed"] == loop.layers
        assert fs["local_probes_set"] == 2 * loop.layers
        smp = s.samples[~s.samples["persistent"]]
        assert not smp["assumed"].any()
        b = s.pattern.blocks.set_index("ordinal")[lambda d: ~d["persistent"]]
        got = {o: sorted(g["tick"]) for o, g in smp.groupby("block")}
        long = b[b["size"] == 2 * MiB]
        assert sorted(got) == sorted(long.index)
        for o, ticks in got.items():
            assert ticks == [b.at[o, "alloc_tick"], b.at[o, "free_tick"] - 1]
        assert nf.probe_stats()["probe_skipped"] == 0


class ReuseLoop(ActivationLoop):
    """Two activations in turn on (the pool permitting) the same range: a1 (event 0, read
    again at tick 4, freed by event 5), then a2 (event 6, read again at tick 8, freed by
    event 9); the scratch blocks between live one event."""

    def iteration(self) -> None:
        self.addrs = []
        for _ in range(2):
            a = native.malloc(2 * MiB)
            self.addrs.append(a)
            self.resident.add(a)
            self.touch(a)
            for _ in range(2 if not self.addrs[1:] else 1):
                native.free(native.malloc(MiB // 2))
            self.touch(a)
            native.free(a)


def test_the_fault_sampler_tells_apart_activations_that_reuse_one_range(cupti):
    nf.cupti_stop()
    loop = ReuseLoop(cupti)
    with _warmed_up(loop, 4, 5, share=1.0, long_life=0.3) as s:  # 3 of the 10 events
        assert loop.addrs[0] == loop.addrs[1]  # the pool reused the range
        fs = s.stats()["fault_sampling"]
        assert fs["local_blocks_seen"] == fs["local_blocks_closed"] == 2
        smp = s.samples[~s.samples["persistent"]]
        b = s.pattern.blocks.set_index("ordinal")[lambda d: ~d["persistent"]]
        got = {o: sorted(g["tick"]) for o, g in smp.groupby("block")}
        assert sorted(got) == sorted(b.index[b["size"] == 2 * MiB])
        for o, ticks in got.items():  # each its own write and read, none of the other's
            assert ticks == [b.at[o, "alloc_tick"], b.at[o, "free_tick"] - 1]


# the real-device tests' child process: PyTorch on uvm_sched's allocator, and the path of
# the libcupti the CUDA wheels ship (None: the system's)
_GPU_PRELUDE = textwrap.dedent("""
    import glob, os, sys, numpy as np, torch, uvm_sched
    from uvm_sched import native, _native_faults as nf
    torch.cuda.memory.change_current_allocator(uvm_sched.allocator())
    path = None
    try:
        import nvidia.cuda_cupti as cc
        found = sorted(glob.glob(os.path.join(list(cc.__path__)[0], "lib", "libcupti.so*")))
        path = found[0] if found else None
    except ImportError:
        pass
""")


def _run_on_gpu(code: str):
    """Run ``code`` (after ``_GPU_PRELUDE``) in a child Python; skip the test where it
    printed SKIP (no CUPTI or no UM counters), fail on a non-zero exit."""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    if "SKIP" in r.stdout:
        pytest.skip(r.stdout.strip())
    return r


@pytest.mark.gpu
def test_real_cupti_reports_the_faults_of_a_block_moved_to_the_host():
    """On a GPU: a block moved to the host faults at its next GPU use, and CUPTI's records
    name addresses inside it (skips where CUPTI or its UM counters are missing)."""
    pytest.importorskip("torch")
    code = _GPU_PRELUDE + textwrap.dedent("""
        w = torch.zeros(16 << 20, dtype=torch.float32, device="cuda")  # 64 MiB
        torch.cuda.synchronize()
        try:
            nf.cupti_start(path, 0)
        except Exception as e:
            print("SKIP", e)
            sys.exit(0)
        native.prefetch(w.data_ptr(), w.numel() * 4, to="host")
        torch.cuda.synchronize()
        t0 = nf.cupti_clock()
        w.add_(1)
        torch.cuda.synchronize()
        nf.cupti_stop()
        got = nf.cupti_take()
        lo, hi = w.data_ptr(), w.data_ptr() + w.numel() * 4
        inside = (got["address"] >= lo) & (got["address"] < hi)
        print("FAULTS", len(got), int(inside.sum()), int((got["t_cupti"] >= t0[0]).sum()))
    """)
    r = _run_on_gpu(code)
    n, inside, after = map(int, r.stdout.split("FAULTS")[1].split())
    assert inside > 0 and after == n, r.stdout


@pytest.mark.gpu
def test_real_probes_make_the_next_use_of_a_weight_and_an_activation_fault():
    """On a GPU: the probe table (probe.c) moves a block alive across the marker (an
    address row, at the marker) and the block of the iteration's first allocation (an
    allocation row, right after it) to the host; each one's next GPU use faults and CUPTI
    names addresses inside it (skips where CUPTI or its UM counters are missing)."""
    pytest.importorskip("torch")
    code = _GPU_PRELUDE + textwrap.dedent("""
        n = 16 << 20  # float32: 64 MiB each
        w = torch.zeros(n, dtype=torch.float32, device="cuda")
        torch.cuda.synchronize()
        try:
            nf.cupti_start(path, 0)
        except Exception as e:
            print("SKIP", e)
            sys.exit(0)
        native.step()
        rows = np.array([(-1, w.data_ptr(), n * 4, 0, -1), (0, 0, n * 4, 0, 0)], nf.PROBE_DTYPE)
        nf.probe_set(rows)  # the marker row fires now; the allocation row in the iteration
        native.step()
        a = torch.empty(n, dtype=torch.float32, device="cuda")  # allocator event 0
        torch.cuda.synchronize()
        a.fill_(1.0)
        w.add_(1.0)
        torch.cuda.synchronize()
        nf.probe_set(np.empty(0, nf.PROBE_DTYPE))
        nf.cupti_stop()
        got = nf.cupti_take()
        st = nf.probe_stats()
        def inside(t):
            lo = t.data_ptr()
            return int(((got["address"] >= lo) & (got["address"] < lo + n * 4)).sum())
        print("PROBES", st["probe_issued"], st["probe_skipped"], st["probe_failed"],
              "FAULTS", len(got), inside(w), inside(a))
    """)
    r = _run_on_gpu(code)
    issued, skipped, failed, _, n, in_w, in_a = r.stdout.split("PROBES")[1].split()
    # the marker row twice (when set, at the second marker), the allocation row once
    assert (int(issued), int(skipped), int(failed)) == (3, 0, 0), r.stdout
    assert int(in_w) > 0 and int(in_a) > 0, r.stdout


def test_probes_on_the_fake_driver_are_prefetches_it_accepts(monkeypatch):
    """The probes on the CUDA path: a prefetch to the host of the block on the event's
    stream (at a marker: the legacy stream), each accepted by the strict fake driver."""
    from native.fakecuda import backend

    with backend("fake") as drv:
        w = native.malloc(4 * MiB)
        native.step()
        nf.probe_set(np.array([(-1, w, 4 * MiB, 0, 0), (0, w, 4 * MiB, 0, 0)], nf.PROBE_DTYPE))
        drv.clear()
        s = native.malloc(MiB)
        native.free(s)
        calls = drv.calls("cuMemPrefetchAsync")
        assert [(c["ptr"], c["bytes"], c["loc.type"], c["rc"]) for c in calls] == \
            [(w, 4 * MiB, 2, 0)]  # CU_MEM_LOCATION_TYPE_HOST, accepted
        assert nf.probe_stats()["probe_failed"] == 0
        nf.probe_set(np.empty(0, nf.PROBE_DTYPE))
        native.free(w)


def test_the_sample_table_holds_what_the_setting_says_and_counts_the_rest_lost():
    code = textwrap.dedent("""
        import os, sys
        sys.path.insert(0, "tests")
        from native.fakecupti import FakeCupti
        os.environ["UVM_SCHED_LIBCUPTI"] = sys.argv[2]
        os.environ["UVM_SCHED_CUPTI_SAMPLES"] = sys.argv[1]
        from uvm_sched import native, _native_faults as nf
        native._reset("host", force=True)
        try:
            nf.cupti_start()
        except ValueError as e:
            print("ERR", e)
            sys.exit(0)
        fake = FakeCupti(sys.argv[2])
        for i in range(3):
            fake.fault(0x200000 * (i + 1))
        nf.cupti_flush()
        print("TOOK", len(nf.cupti_take()), nf.cupti_stats()["cupti_lost"])
    """)
    from conftest import REPO

    lib = fake_cupti_path()  # built here: skips this test where there is no compiler

    def run(value: str) -> str:
        return subprocess.run([sys.executable, "-c", code, value, lib], capture_output=True,
                              text=True, timeout=120, cwd=REPO).stdout

    assert "TOOK 2 1" in run("2")
    assert "TOOK 3 0" in run("1K")
    assert 'UVM_SCHED_CUPTI_SAMPLES="12x" is not a count' in run("12x")
