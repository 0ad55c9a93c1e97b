"""The driver's mechanisms in the simulator, one micro-scenario each, with hand-worked times
and bytes, run on both engines (the reference and the compiled loop must agree): single
advices (``sim._engine`` Note [Advice], which quotes the CUDA documentation), remote reads
and writes on their own link direction, access-counter migration where the profile has it,
and the host cost of each prefetch/advise call."""
from __future__ import annotations

import dataclasses
import importlib.util

import pytest

from uvm_sched.hw import ProfileError, load_profile
from uvm_sched.planner import Plan
from uvm_sched.sim import _fast, simulate
from uvm_sched.trace import AccessMode, TraceBuilder

MiB = 1 << 20
KiB = 1 << 10
MS = 1e-3
W, R = AccessMode.WRITE, AccessMode.READ
_NUMBA = importlib.util.find_spec("numba") is not None


def _hw(**kw):
    """Every path at 8 MiB/ms (2 MiB in 0.25 ms), a 0.25 ms fault batch of up to 2 MiB,
    5 us per call (made long before the GPU needs them here), no access counters; ``kw``
    overrides."""
    bw = 8 * MiB / MS
    base = dict(h2d_prefetch_Bps=bw, d2h_prefetch_Bps=bw, h2d_fault_Bps=bw, d2h_evict_Bps=bw,
                remote_access_Bps=bw, fault_batch_latency_s=0.25 * MS, fault_batch_bytes=2 * MiB,
                page_bytes=64 * KiB, va_block_bytes=2 * MiB, action_call_s=0.005 * MS,
                access_counter_migration=False)
    base.update(kw)
    return dataclasses.replace(load_profile("h200-pcie5"), name="test", **base)


def _plan(rows, period, sizes, budget):
    """A Plan of (event, action, block ordinal) rows on whole per-iteration blocks."""
    return Plan({"tick": [r[0] for r in rows], "action": [r[1] for r in rows],
                 "block": [r[2] for r in rows], "persistent": [False] * len(rows),
                 "offset": [0] * len(rows), "bytes": [0] * len(rows)},
                dict(budget_bytes=budget, period_events=period, alloc_sizes=list(sizes)))


def _run(trace, plan, hw, budget, monkeypatch):
    """The reference's result, after checking the compiled loop (when numba is there) gives
    the same times, faults, bytes and copies."""
    with monkeypatch.context() as m:
        m.setenv("UVM_SCHED_SIM_KERNEL", "python")
        ref = simulate(trace, plan, hw, budget, pool=False)
    if _NUMBA:
        before = _fast.calls()
        fast = simulate(trace, plan, hw, budget, pool=False)
        assert _fast.calls() == before + 1
        assert (fast.iteration_time_s, fast.faults, fast.bytes_h2d, fast.bytes_d2h) == (
            ref.iteration_time_s, ref.faults, ref.bytes_h2d, ref.bytes_d2h)
        assert fast.transfers.equals(ref.transfers)
        assert fast.timeline.equals(ref.timeline)
    return ref


def _copies(r, cause=None):
    """(direction, cause, bytes, duration ms) of the window's copies."""
    tr = r.transfers
    out = [(d, c, int(b), round((e - s) / MS, 6))
           for d, c, b, s, e in zip(tr.direction, tr.cause, tr.bytes, tr.start_s, tr.end_s)]
    return [x for x in out if cause is None or x[1] == cause]


def _thrash_trace():
    """Per iteration (2 MiB blocks): t0 writes A; t1 writes B (a 2 MiB budget evicts A);
    t2 reads A and frees it; t3 reads B and frees it. 0.01 ms of compute per tick."""
    b = TraceBuilder(name="thrash")
    for _ in range(3):
        b.mark()
        a = b.alloc(2 * MiB)  # event 0
        b.access(a, W)
        b.next_tick(0.01e6)
        z = b.alloc(2 * MiB)  # event 1
        b.access(z, W)
        b.next_tick(0.01e6)
        b.access(a, R)
        b.free(a)
        b.next_tick(0.01e6)
        b.access(z, R)
        b.free(z)
        b.next_tick(0.01e6)
    return b.build()


def test_accessed_by_alone_reads_host_resident_data_over_the_link_without_migrating_it(
        monkeypatch):
    t = _thrash_trace()
    demand = _run(t, _plan([], 4, [2 * MiB] * 2, 2 * MiB), _hw(), 2 * MiB, monkeypatch)
    # no advice: t0 and t1 populate by fault (0.25 ms each; t1 first writes A back, 0.25 ms);
    # t2 faults A back (evict B 0.25 + latency 0.25 + copy 0.25), t3 B (A is freed: no
    # eviction, latency 0.25 + copy 0.25)
    assert demand.iteration_time_s == pytest.approx((0.26 + 0.51 + 0.76 + 0.51) * MS)
    p = _plan([(0, "advise_accessed_by", 0)], 4, [2 * MiB] * 2, 2 * MiB)
    r = _run(t, p, _hw(), 2 * MiB, monkeypatch)
    # AccessedBy alone: A's first touch (fresh pages, nothing to map) still faults; once
    # evicted, t2 reads it in place (0.25 ms host->device) and B stays: t3 is free. The
    # advise call (5 us) just after the iteration's start delays t0's launch (Note [Host calls])
    assert r.iteration_time_s == pytest.approx((0.005 + 0.26 + 0.51 + 0.26 + 0.01) * MS)
    assert r.stall_breakdown["host"] == pytest.approx(0.005 * MS)
    assert r.faults == 2
    assert _copies(r) == [("d2h", "evict", 2 * MiB, 0.25), ("h2d", "remote", 2 * MiB, 0.25)]


def test_preferred_location_host_alone_faults_once_then_maps_the_pages_remotely(monkeypatch):
    t = _thrash_trace()
    p = _plan([(0, "advise_preferred_host", 0)], 4, [2 * MiB] * 2, 2 * MiB)
    r = _run(t, p, _hw(), 2 * MiB, monkeypatch)
    # t0: A's first touch faults (0.25 ms), the pages are placed on the host (their
    # preferred location) and mapped: the write crosses device->host (0.25 ms); t1: B is
    # populated by fault (0.25 ms, room is free); t2: A is read through the mapping, no
    # fault (0.25 ms); t3: B is resident; t0 launched after the advise call (5 us)
    assert r.iteration_time_s == pytest.approx((0.005 + 0.51 + 0.26 + 0.26 + 0.01) * MS)
    assert r.faults == 2  # A's mapping fault and B's population; A is never migrated
    assert _copies(r) == [("d2h", "remote", 2 * MiB, 0.25), ("h2d", "remote", 2 * MiB, 0.25)]
    both = _plan([(0, "advise_preferred_host", 0), (0, "advise_accessed_by", 0)], 4,
                 [2 * MiB] * 2, 2 * MiB)
    # with AccessedBy too the mapping is there from the start: no fault for A (one more
    # call before t0's launch: 5 us)
    rb = _run(t, both, _hw(), 2 * MiB, monkeypatch)
    assert rb.iteration_time_s == pytest.approx(r.iteration_time_s - 0.25 * MS + 0.005 * MS)
    assert rb.faults == 1


def _host_trace():
    """Per iteration: t0 writes A (2 MiB) and frees a 64 KiB scratch S (event 2, after the
    kernel: a plan's eviction of A can follow it); t1 reads A (1 ms of compute); t2 writes
    A and frees it."""
    b = TraceBuilder(name="host-resident")
    for _ in range(3):
        b.mark()
        a = b.alloc(2 * MiB)  # event 0
        s = b.alloc(64 * KiB)  # event 1
        b.access(a, W)
        b.free(s)  # event 2
        b.next_tick(0.01e6)
        b.access(a, R)
        b.next_tick(1e6)
        b.access(a, W)
        b.free(a)  # event 3
        b.next_tick(0.01e6)
    return b.build()


@pytest.mark.parametrize("advice", [("advise_preferred_host",), ("advise_accessed_by",),
                                    ("advise_preferred_host", "advise_accessed_by")])
def test_remote_reads_stream_at_the_link_rate_and_writes_load_device_to_host(advice,
                                                                               monkeypatch):
    # the remote rate (32 MiB/ms) is above both link directions: reads are capped by
    # host->device (8 MiB/ms: 2 MiB in 0.25 ms), writes by device->host (4 MiB/ms: 0.5 ms)
    hw = _hw(remote_access_Bps=32 * MiB / MS, d2h_prefetch_Bps=4 * MiB / MS)
    assert (hw.remote_read_Bps, hw.remote_write_Bps) == (8 * MiB / MS, 4 * MiB / MS)
    rows = [(0, a, 0) for a in advice] + [(2, "prefetch_to_host", 0)]
    r = _run(_host_trace(), _plan(rows, 4, [2 * MiB, 64 * KiB], 8 * MiB), hw, 8 * MiB,
             monkeypatch)
    remote = _copies(r, "remote")
    # t1 reads A in place, t2 writes it in place: never migrated back
    assert ("h2d", "remote", 2 * MiB, 0.25) in remote
    assert remote[-1] == ("d2h", "remote", 2 * MiB, 0.5)
    assert not [c for c in _copies(r) if c[0] == "h2d" and c[1] != "remote"]
    assert r.counters["ledger_remote_in"] >= 2 * MiB


def test_access_counters_migrate_data_read_through_an_accessed_by_mapping(monkeypatch):
    t = _host_trace()
    rows = [(0, "advise_accessed_by", 0), (2, "prefetch_to_host", 0)]
    p = _plan(rows, 4, [2 * MiB, 64 * KiB], 8 * MiB)
    off = _run(t, p, _hw(), 8 * MiB, monkeypatch)
    # t0: A is populated by fault (0.25 ms); the plan evicts it after the kernel (0.25 ms);
    # t1 waits for that (0.25 ms) and reads A in place (0.25 ms); t2 writes A in place
    # (0.25 ms) -- without access counters; t0 launched after the advise call (5 us)
    assert off.iteration_time_s == pytest.approx((0.005 + 0.26 + 0.5 + 1.0 + 0.26) * MS)
    on = _run(t, p, _hw(access_counter_migration=True), 8 * MiB, monkeypatch)
    # with them, t1's read fires A's counters: the driver migrates A as the fault path
    # does (0.25 ms) while t1 computes (1 ms), so t2 writes a resident A
    assert on.iteration_time_s == pytest.approx((0.005 + 0.26 + 0.5 + 1.0 + 0.01) * MS)
    assert ("h2d", "counter", 2 * MiB, 0.25) in _copies(on)
    # under a CPU preferred location the data stays where it is preferred
    pref = [(0, "advise_preferred_host", 0), (0, "advise_accessed_by", 0)] + rows[1:]
    stay = _run(t, _plan(pref, 4, [2 * MiB, 64 * KiB], 8 * MiB),
                _hw(access_counter_migration=True), 8 * MiB, monkeypatch)
    assert not _copies(stay, "counter")


def _calls_trace(first_tick_ms: float):
    """Per iteration: t0 writes three 2 MiB blocks (three population faults, 0.75 ms) and
    computes ``first_tick_ms``, then frees a scratch block (event 4); t1 frees the three."""
    b = TraceBuilder(name="calls")
    for _ in range(2):
        b.mark()
        blocks = [b.alloc(2 * MiB) for _ in range(3)]  # events 0-2
        s = b.alloc(64 * KiB)  # event 3
        for x in blocks:
            b.access(x, W)
        b.free(s)  # event 4
        b.next_tick(first_tick_ms * 1e6)
        for x in blocks:
            b.free(x)  # events 5-7
        b.next_tick(10e6)
    return b.build()


@pytest.mark.parametrize("first_tick_ms, starts_ms", [
    # the GPU is at 0.76 ms when it reaches the calls; the host made them at 1, 2, 3 and
    # 4 ms of the iteration (1 ms each): the evictions start at 2, 3 and 4 ms
    (0.01, [2.0, 3.0, 4.0]),
    # the GPU reaches them at 10.75 ms, long after the host made them: no delay, the copies
    # queue one after another on the device->host engine (0.25 ms each)
    (10.0, [10.75, 11.0, 11.25])])
def test_prefetch_and_advise_calls_cost_host_time_that_delays_them_only_past_the_gpu(
        first_tick_ms, starts_ms, monkeypatch):
    rows = [(4, "advise_read_mostly", 0)] + [(4, "prefetch_to_host", j) for j in range(3)]
    p = _plan(rows, 8, [2 * MiB] * 3 + [64 * KiB], 8 * MiB)
    r = _run(_calls_trace(first_tick_ms), p, _hw(action_call_s=1 * MS), 8 * MiB, monkeypatch)
    tr = r.transfers[r.transfers.cause == "plan"]
    assert list(tr.start_s / MS) == pytest.approx(starts_ms)


@pytest.mark.parametrize("first_tick_ms, host_stall_ms", [
    # the GPU is at 0.76 ms when t1's kernel is due; the host makes the three calls (1 ms
    # each, at t0's last event) until 3 ms, and launches t1's kernel then: 2.24 ms of waiting
    (0.01, 2.24),
    # the GPU reaches t1 at 10.75 ms, long after the host made the calls: no wait
    (10.0, 0.0)])
def test_a_kernel_waits_for_the_host_that_launches_it_after_the_calls_even_calls_that_move_nothing(
        first_tick_ms, host_stall_ms, monkeypatch):
    # three populates of blocks already resident (written at t0, 8 MiB budget): no copy, but
    # each call costs the launching thread its time (Note [Host calls])
    rows = [(4, "prefetch_to_device", j) for j in range(3)]
    p = _plan(rows, 8, [2 * MiB] * 3 + [64 * KiB], 8 * MiB)
    r = _run(_calls_trace(first_tick_ms), p, _hw(action_call_s=1 * MS), 8 * MiB, monkeypatch)
    assert _copies(r, "plan") == []
    assert r.stall_breakdown["host"] == pytest.approx(host_stall_ms * MS)
    assert r.timeline.stall_host_s.sum() == pytest.approx(host_stall_ms * MS)
    assert r.iteration_time_s == pytest.approx((0.76 + host_stall_ms + 10.0 + first_tick_ms
                                                - 0.01) * MS)


def test_shipped_profiles_enable_access_counter_migration_only_on_grace_hopper():
    flags = {n: load_profile(n).access_counter_migration
             for n in ("gh200-c2c", "h100-pcie5", "h200-pcie5", "a100-40gb-pcie4")}
    assert flags == {"gh200-c2c": True, "h100-pcie5": False, "h200-pcie5": False,
                     "a100-40gb-pcie4": False}
    assert "ATS" in load_profile("gh200-c2c").sources["access_counter_migration"]
    assert load_profile("h100-pcie5").sources["action_call_s"].startswith("assumed")


def test_a_profile_flag_must_be_true_or_false(tmp_path):
    from uvm_sched.hw import _DIR

    text = (_DIR / "h100-pcie5.toml").read_text()
    bad = tmp_path / "flag.toml"
    bad.write_text(text.replace("[access_counter_migration]\nvalue = false",
                                "[access_counter_migration]\nvalue = 1"))
    with pytest.raises(ProfileError, match=r"access_counter_migration.*true\|false"):
        load_profile(bad)


def test_read_mostly_overrides_the_remote_advice(monkeypatch):
    # "If cudaMemAdviseSetReadMostly is also set ..., the policies associated with that
    # advice will override the policies of this advice": A is faulted in, not read in place
    # (read-mostly is advised after the eviction: evicted under it, A would stay resident;
    # before it, t0's write is made in place, device->host)
    rows = [(0, "advise_preferred_host", 0), (0, "advise_accessed_by", 0),
            (2, "prefetch_to_host", 0), (2, "advise_read_mostly", 0)]
    r = _run(_host_trace(), _plan(rows, 4, [2 * MiB, 64 * KiB], 8 * MiB), _hw(), 8 * MiB,
             monkeypatch)
    assert [c[0] for c in _copies(r, "remote")] == ["d2h"]
    assert ("h2d", "fault", 2 * MiB, 0.5) in _copies(r)  # 0.25 ms copy + 0.25 ms latency


def test_a_planned_eviction_of_a_read_mostly_block_copies_it_to_the_host_and_frees_nothing(
        monkeypatch):
    # cudaMemPrefetchAsync: "If cudaMemAdviseSetReadMostly was set on any subset of this
    # memory range, then that subset will create a read-only copy of the pages on
    # dstDevice": A (written at t0) is copied to the host and stays resident; t1 reads it
    # with no fault; the second eviction finds a valid host copy and moves nothing
    rows = [(0, "advise_read_mostly", 0), (2, "prefetch_to_host", 0),
            (2, "prefetch_to_host", 0)]
    r = _run(_host_trace(), _plan(rows, 4, [2 * MiB, 64 * KiB], 8 * MiB), _hw(), 8 * MiB,
             monkeypatch)
    assert _copies(r) == [("d2h", "plan", 2 * MiB, 0.25)]  # 8 MiB/ms
    assert r.stall_breakdown["link"] == 0  # t1 waits for nothing (t0's first touch faults)
    assert r.timeline.resident_bytes[1] >= 2 * MiB
    assert r.counters["ledger_dropped_dup"] == 0 and r.counters["ledger_evicted_out"] == 0
