"""The native plan executor: which driver calls it makes (fake driver), in which order on
which streams, divergence, re-synchronisation by marker and by period, persistent blocks,
and a host-backend replay whose actions land on the plan's ticks."""
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
from uvm_sched.trace import EventKind, TraceBuilder  # noqa: E402
from uvm_sched.trace._native import trace_from_events  # noqa: E402

MiB = 1 << 20
# the learned iteration: A = alloc 4 MiB, B = alloc 1 KiB, free B, free A  (4 events)
SIZES = [4 * MiB, 1024]


def _iteration(size_a=4 * MiB, stream=0):
    a = uvm_sched.malloc(size_a, stream=stream)
    b = uvm_sched.malloc(1024, stream=stream)
    uvm_sched.free(b)
    uvm_sched.free(a)
    return a, b


def _plan(rows, sync="marker", sizes=SIZES, period=4):
    df = pd.DataFrame(rows, columns=["tick", "action", "block", "persistent", "offset", "bytes"])
    return Plan(df, {"budget_bytes": 1 << 30, "period_events": period, "alloc_sizes": sizes,
                     "sync": sync})


def test_action_codes_are_the_planner_order():
    assert native._ACTION_NAMES == ACTIONS
    assert [native.EVENT_KINDS[16 + i] for i in range(len(ACTIONS))] == list(ACTIONS)


def test_each_action_makes_the_right_driver_call():
    with fakecuda.backend("fake") as fake:
        compute = fake.lib.fake_cuda_stream_create
        compute.restype = ctypes.c_void_p
        s = compute()
        plan = _plan([(0, "prefetch_to_host", 0, False, 0, 0),
                      (0, "advise_preferred_host", 0, False, 0, 0),
                      (1, "prefetch_to_device", 0, False, MiB, MiB),
                      (1, "advise_accessed_by", 0, False, 0, 0),
                      (1, "advise_read_mostly", 1, False, 0, 0),
                      (2, "discard", 1, False, 0, 0),  # B: small (shares a slab): skipped
                      (3, "discard", 0, False, 0, 0)])  # A, at its free: discarded
        native.arm_plan(plan)
        fake.clear()
        a, b = _iteration(stream=s)
        native.disarm()
        calls = [c for c in fake.calls() if c["name"] not in ("cuCtxSetCurrent",)]
        by = {c["name"]: c for c in calls}
        sid = next(c for c in calls if c["name"] == "cuEventRecord")["stream"]
        assert sid != "s0"  # recorded on the allocating (compute) stream, not the default
        d2h = by["cuMemPrefetchAsync_v2"]
        pf = [c for c in calls if c["name"] == "cuMemPrefetchAsync_v2"]
        assert [(c["loc.type"], c["loc.id"]) for c in pf] == [(2, 0), (1, 0)]  # HOST, DEVICE 0
        assert (pf[0]["ptr"], pf[0]["bytes"]) == (a, 4 * MiB)
        assert (pf[1]["ptr"], pf[1]["bytes"]) == (a + MiB, MiB)
        assert pf[0]["stream"] != pf[1]["stream"]  # one side stream per direction
        assert sid not in (pf[0]["stream"], pf[1]["stream"])
        adv = [c for c in calls if c["name"] == "cuMemAdvise_v2"]
        assert [(c["advice"], c["loc.type"]) for c in adv] == [(3, 2), (5, 1), (1, 1)]
        assert adv[2]["ptr"] == b and adv[2]["bytes"] == 1024
        # the discard: on a third side stream after the queued compute, and the compute
        # stream waits for it (a reuse of the address must not race it)
        names = [c["name"] for c in calls]
        i = names.index("cuMemDiscardBatchAsync")
        disc = calls[i]
        assert (disc["ptr"], disc["bytes"]) == (a, 4 * MiB)
        assert disc["stream"] not in (sid, "s0", pf[0]["stream"], pf[1]["stream"])
        # before it, the discard stream waits for the compute stream and for both copy
        # streams (cuda.h, cuMemDiscardBatchAsync: a prefetch of the range running at the
        # same time as the discard is undefined behaviour)
        waited_for, last_record = set(), {}
        for c in calls[:i]:
            if c["name"] == "cuEventRecord":
                last_record[c["event"]] = c["stream"]
            elif c["name"] == "cuStreamWaitEvent" and c["stream"] == disc["stream"]:
                waited_for.add(last_record[c["event"]])
        assert waited_for == {sid, pf[0]["stream"], pf[1]["stream"]}
        assert calls[i + 1]["name"] == "cuEventRecord" and calls[i + 1]["stream"] == disc["stream"]
        assert calls[i + 2]["name"] == "cuStreamWaitEvent" and calls[i + 2]["stream"] == sid
        assert calls[i + 2]["event"] == calls[i + 1]["event"]
        assert all(c["rc"] in (0, None) for c in calls)
        assert d2h["rc"] == 0
        st = uvm_sched.stats()
        assert st["actions_issued"] == 6 and st["actions_failed"] == 0
        assert st["actions_skipped"] == 1
        assert st["bytes_prefetched_d2h"] == 4 * MiB and st["bytes_prefetched_h2d"] == MiB
        assert st["bytes_discarded"] == 4 * MiB


def test_side_streams_wait_on_an_event_recorded_on_the_compute_stream():
    with fakecuda.backend("fake") as fake:
        fake.lib.fake_cuda_stream_create.restype = ctypes.c_void_p
        s = fake.lib.fake_cuda_stream_create()
        native.arm_plan(_plan([(0, "prefetch_to_host", 0, False, 0, 0),
                               (3, "prefetch_to_device", 0, False, 0, 0)]))
        fake.clear()
        a = uvm_sched.malloc(4 * MiB, stream=s)  # event 0: evict A after it
        calls = fake.calls()
        names = [c["name"] for c in calls]
        i_rec = names.index("cuEventRecord")
        i_wait = names.index("cuStreamWaitEvent")
        i_pf = names.index("cuMemPrefetchAsync_v2")
        assert i_rec < i_wait < i_pf
        rec, wait, pf = calls[i_rec], calls[i_wait], calls[i_pf]
        assert wait["event"] == rec["event"]
        assert wait["stream"] == pf["stream"]  # the side stream waits, then migrates
        assert rec["stream"] != pf["stream"]
        uvm_sched.free(uvm_sched.malloc(1024, stream=s))
        uvm_sched.free(a)  # event 3: A is freed, so the prefetch is skipped
        native.disarm()
        assert uvm_sched.stats()["actions_skipped"] == 1


@pytest.mark.parametrize("legacy", [False, True], ids=["created-stream", "legacy-stream"])
def test_a_populate_goes_on_the_allocating_stream_ahead_of_its_kernels(legacy):
    # the block an ALLOC hands out may hold discarded pages: a kernel touching them faults
    # at ~0.5 GB/s on an H200 (results/gpu_h200.md), so the populate must precede the
    # kernels queued after the allocation, on their stream; an eviction of the same block
    # at the same event follows it through an event recorded after it. On the legacy NULL
    # stream too: cuda.h's cuMemPrefetchAsync takes any "hStream - Stream to enqueue
    # prefetch operation" (only cuMemDiscardBatchAsync refuses the legacy stream: D1)
    with fakecuda.backend("fake") as fake:
        fake.lib.fake_cuda_stream_create.restype = ctypes.c_void_p
        s = 0 if legacy else fake.lib.fake_cuda_stream_create()
        native.arm_plan(_plan([(0, "prefetch_to_device", 0, False, 0, 0),
                               (0, "prefetch_to_host", 0, False, 0, 0),
                               (1, "prefetch_to_device", 0, False, 0, 0)]))
        fake.clear()
        a, b = _iteration(stream=s)
        native.disarm()
        calls = [c for c in fake.calls() if c["name"] != "cuCtxSetCurrent"]
        names = [c["name"] for c in calls]
        pf = [i for i, n in enumerate(names) if n == "cuMemPrefetchAsync_v2"]
        populate, evict, later = (calls[i] for i in pf)
        compute = populate["stream"]
        assert (populate["ptr"], populate["loc.type"]) == (a, 1)  # A to DEVICE 0
        assert (compute == "s0") == legacy and compute not in (evict["stream"], later["stream"])
        assert all(c["rc"] == 0 for c in (populate, evict, later))
        # the eviction's side stream waits on an event recorded on the compute stream
        # after the populate was queued there
        rec = next(c for c in calls[pf[0]:pf[1]] if c["name"] == "cuEventRecord")
        assert rec["stream"] == compute
        wait = next(c for c in calls[pf[0]:pf[1]] if c["name"] == "cuStreamWaitEvent")
        assert wait["event"] == rec["event"] and wait["stream"] == evict["stream"]
        # at B's allocation, A is not the block just handed out: a copy-stream prefetch
        assert later["stream"] != compute
        st = uvm_sched.stats()
        assert st["actions_issued"] == 3 and st["bytes_prefetched_h2d"] == 8 * MiB


@pytest.mark.parametrize("legacy", [False, True], ids=["created-stream", "legacy-stream"])
def test_the_pool_populates_discarded_pages_before_it_hands_them_out_again(legacy):
    # after a disarm (or a divergence, or a plan that leaves an allocation unpopulated) the
    # pool reuses pages a plan discarded: it populates them on the allocating stream, once.
    # The legacy NULL stream is fine there: cuda.h's cuMemPrefetchAsync takes "hStream -
    # Stream to enqueue prefetch operation" with no exception, unlike
    # cuMemDiscardBatchAsync's "Must not be legacy NULL stream" (PRECONDITIONS.md D1)
    with fakecuda.backend("fake") as fake:
        fake.lib.fake_cuda_stream_create.restype = ctypes.c_void_p
        s = 0 if legacy else fake.lib.fake_cuda_stream_create()
        native.arm_plan(_plan([(3, "discard", 0, False, 0, 0)]))  # A, at its free
        fake.clear()
        a, _ = _iteration(stream=s)
        native.disarm()
        # the allocating stream, as the fake names it: where the discard's event was recorded
        sid = next(c for c in fake.calls() if c["name"] == "cuEventRecord")["stream"]
        assert (sid == "s0") == legacy
        fake.clear()
        again = uvm_sched.malloc(4 * MiB, stream=s)  # unplanned, on A's pages
        pf = [c for c in fake.calls() if c["name"] == "cuMemPrefetchAsync_v2"]
        assert again == a
        assert [(c["ptr"], c["bytes"], c["loc.type"], c["stream"], c["rc"]) for c in pf] == \
            [(a, 4 * MiB, 1, sid, 0)]
        rec = [c for c in fake.calls() if c["name"] == "cuMemAllocManaged"]
        assert not rec  # the same arena: nothing new was reserved
        uvm_sched.free(again)
        fake.clear()
        uvm_sched.free(uvm_sched.malloc(4 * MiB, stream=s))  # populated since: no prefetch
        assert not [c for c in fake.calls() if c["name"] == "cuMemPrefetchAsync_v2"]


def test_a_legacy_driver_gets_device_ordinals_and_no_discard():
    with fakecuda.backend("fake", FAKE_CUDA_VERSION="12000") as fake:
        assert "no discard" in native.backend_reason()
        native.arm_plan(_plan([(0, "prefetch_to_host", 0, False, 0, 0),
                               (0, "advise_preferred_host", 0, False, 0, 0),
                               (1, "prefetch_to_device", 0, False, 0, 0),
                               (3, "discard", 0, False, 0, 0),
                               (2, "discard", 1, False, 0, 0)]))
        fake.clear()
        _iteration()
        native.disarm()
        pf = fake.calls("cuMemPrefetchAsync")
        assert [c["name"] for c in pf] == ["cuMemPrefetchAsync_v1"] * 2
        assert [c["device"] for c in pf] == [-1, 0]  # CU_DEVICE_CPU, then device 0
        adv = fake.calls("cuMemAdvise")
        assert adv[0]["name"] == "cuMemAdvise_v1" and adv[0]["device"] == -1
        assert not fake.calls("cuMemDiscard")
        st = uvm_sched.stats()
        assert st["actions_unsupported"] == 1 and st["actions_skipped"] == 1
        kinds = [native.EVENT_KINDS[k] for k in uvm_sched.drain_events()["kind"]]
        assert "unsupported" in kinds


def test_a_failing_driver_call_is_counted_and_the_pool_keeps_working():
    with fakecuda.backend("fake", FAKE_CUDA_FAIL="cuMemPrefetchAsync:1:1"):
        native.arm_plan(_plan([(0, "prefetch_to_host", 0, False, 0, 0),
                               (1, "prefetch_to_device", 0, False, 0, 0)]))
        _iteration()
        native.disarm()
        st = uvm_sched.stats()
        assert st["actions_failed"] == 1 and st["actions_issued"] == 1
        assert st["allocated_blocks"] == 0


@pytest.mark.parametrize("backend", ["host", "fake"])
def test_divergence_disarms_for_the_rest_of_the_iteration(backend):
    with fakecuda.backend(backend):
        native.arm_plan(_plan([(0, "prefetch_to_host", 0, False, 0, 0),
                               (2, "prefetch_to_device", 1, False, 0, 0)]))
        _iteration()
        uvm_sched.step()
        _iteration(size_a=5 * MiB)  # allocation 0 has another size: no actions at all
        uvm_sched.step()
        _iteration()
        native.disarm()
        st = uvm_sched.stats()
        assert st["divergences"] == 1
        assert st["actions_issued"] == 2  # iteration 0: evict A; iteration 2: evict A
        assert st["actions_skipped"] == 2  # B is freed at event 2 in iterations 0 and 2
        log = native.action_log(uvm_sched.drain_events())
        assert list(log["iteration"]) == [0, 0, 2, 2]
        assert list(log["tick"]) == [0, 2, 0, 2]


@pytest.mark.parametrize("backend", ["host", "fake"])
def test_a_size_0_position_takes_any_size_and_a_whole_block_row_its_run_time_bytes(backend):
    """alloc_sizes 0: a position per-batch shapes resize (dynamic padding); bytes 0: the
    whole block, whatever its size now."""
    with fakecuda.backend(backend):
        native.arm_plan(_plan([(0, "prefetch_to_host", 0, False, 0, 0)], sizes=[0, 1024]))
        for size_a in (4 * MiB, 6 * MiB, 2 * MiB):
            _iteration(size_a=size_a)
            uvm_sched.step()
        a = uvm_sched.malloc(3 * MiB)
        b = uvm_sched.malloc(2048)  # position 1 is still checked: diverged
        uvm_sched.free(b)
        uvm_sched.free(a)
        native.disarm()
        st = uvm_sched.stats()
        assert st["divergences"] == 1 and st["actions_issued"] == 4
        assert st["bytes_prefetched_d2h"] == (4 + 6 + 2 + 3) * MiB


def test_more_allocations_than_the_plan_knows_is_a_divergence():
    with fakecuda.backend("host"):
        native.arm_plan(_plan([(3, "prefetch_to_host", 0, False, 0, 0)], period=4))
        a = uvm_sched.malloc(4 * MiB)
        b = uvm_sched.malloc(1024)
        c = uvm_sched.malloc(64)  # a third allocation: diverged
        for p in (c, b, a):
            uvm_sched.free(p)
        native.disarm()
        st = uvm_sched.stats()
        assert st["divergences"] == 1 and st["actions_issued"] == 0


def test_markers_resynchronise_and_start_now_false_waits_for_one():
    with fakecuda.backend("host"):
        native.arm_plan(_plan([(1, "prefetch_to_host", 0, False, 0, 0)]), start_now=False)
        # out of step: the first event would be "tick 0" if the plan had started
        uvm_sched.free(uvm_sched.malloc(64))
        assert uvm_sched.stats()["actions_issued"] == 0
        uvm_sched.step()
        a, _ = _iteration()
        uvm_sched.step()
        _iteration()
        native.disarm()
        log = native.action_log(uvm_sched.drain_events())
        assert list(log["status"]) == ["issued", "issued"]
        assert list(log["tick"]) == [1, 1] and list(log["iteration"]) == [0, 1]
        assert log["addr"][0] == a


def test_period_sync_needs_no_markers_and_ignores_them():
    with fakecuda.backend("host"):
        native.arm_plan(_plan([(1, "prefetch_to_host", 0, False, 0, 0)], sync="period"))
        for i in range(3):
            _iteration()
            if i == 1:
                uvm_sched.step()  # ignored under sync="period"
        native.disarm()
        st = uvm_sched.stats()
        assert st["iterations"] == 4  # the 4th starts after the last event
        assert st["actions_issued"] == 3 and st["divergences"] == 0


def test_persistent_blocks_are_resolved_by_address():
    with fakecuda.backend("host"):
        w = uvm_sched.malloc(8 * MiB)  # persistent block, ordinal 0 of the recording
        plan = _plan([(0, "advise_preferred_host", 0, True, 0, 0),
                      (2, "prefetch_to_device", 0, True, 0, 2 * MiB)])
        with pytest.raises(ValueError, match="persistent"):
            native.arm_plan(plan)
        with pytest.raises(ValueError, match="no address for persistent block 0"):
            native.arm_plan(plan, persistent_addrs={5: w})
        native.arm_plan(plan, persistent_addrs=[w])
        _iteration()
        uvm_sched.free(w)
        uvm_sched.step()
        _iteration()  # the persistent block is gone: skipped, never touched
        native.disarm()
        log = native.action_log(uvm_sched.drain_events())
        assert list(log["status"]) == ["issued", "issued", "skipped", "skipped"]
        assert log["addr"][0] == w and log["bytes"][1] == 2 * MiB


def test_a_table_made_beforehand_arms_the_same_and_is_left_as_it_was():
    # (the Scheduler converts the plan in its background worker, then arms with table=)
    with fakecuda.backend("host"):
        w = uvm_sched.malloc(8 * MiB)
        plan = _plan([(0, "advise_preferred_host", 0, True, 0, 0),
                      (2, "prefetch_to_device", 0, True, 0, 2 * MiB)])
        table = native.plan_table(plan)
        before = table.copy()
        assert list(table["addr"]) == [0, 0] and list(table["action"]) == [2, 0]
        native.arm_plan(plan, persistent_addrs=[w], table=table)
        assert (table == before).all()
        _iteration()
        native.disarm()
        log = native.action_log(uvm_sched.drain_events())
        assert list(log["status"]) == ["issued", "issued"] and log["addr"][0] == w
        uvm_sched.free(w)


def test_a_reused_address_is_not_the_planned_block():
    with fakecuda.backend("host"):
        # plan: at event 2 act on allocation 0; here allocation 0 is freed at event 1
        # and its address reused by allocation 1 of the same size
        native.arm_plan(_plan([(2, "prefetch_to_host", 0, False, 0, 0)],
                              sizes=[1024, 1024], period=4))
        a = uvm_sched.malloc(1024)
        uvm_sched.free(a)
        b = uvm_sched.malloc(1024)
        assert a == b
        uvm_sched.free(b)
        native.disarm()
        st = uvm_sched.stats()
        assert st["actions_skipped"] == 1 and st["actions_issued"] == 0


def test_bad_tables_are_refused():
    with fakecuda.backend("host"):
        t = np.zeros(1, native.PLAN_ROW_DTYPE)
        t["tick"] = 4
        with pytest.raises(ValueError, match="tick 4 is outside"):
            native.arm(t, SIZES, 4)
        t["tick"], t["block"] = 0, 2
        with pytest.raises(ValueError, match="block 2"):
            native.arm(t, SIZES, 4)
        with pytest.raises(ValueError, match="sync"):
            native.arm(t[:0], SIZES, 4, sync="sometimes")
        assert uvm_sched.stats()["plan_armed"] == 0


def _training_trace(iters=4, layers=5):
    """A small iterative trace: persistent weights, then per iteration activations
    allocated forward and freed backward, plus a workspace."""
    tb = TraceBuilder(name="toy")
    weights = [tb.alloc((i + 1) * 3 * MiB) for i in range(layers)]
    tb.next_tick()
    for _ in range(iters):
        tb.mark()
        acts = []
        for i in range(layers):
            acts.append(tb.alloc((layers - i) * 2 * MiB + 512 * i))
            tb.access(weights[i])
            tb.next_tick()
        ws = tb.alloc(700)
        tb.free(ws)
        tb.next_tick()
        for a in reversed(acts):
            tb.free(a)
            tb.next_tick()
    return tb.build(), weights


def test_replay_issues_the_plans_actions_at_the_plans_ticks():
    trace, _ = _training_trace()
    per_iter = 5 + 2 + 5
    sizes = [(5 - i) * 2 * MiB + 512 * i for i in range(5)] + [700]
    rows = [(i, "prefetch_to_host", 0, False, 0, 0) for i in (1, 3)]
    rows += [(7, "prefetch_to_device", 0, False, 0, 0), (8, "discard", 5, False, 0, 0),
             (0, "advise_preferred_host", 4, True, 0, 0), (6, "advise_read_mostly", 1, False, 0, 0)]
    plan = _plan(rows, sizes=sizes, period=per_iter)
    with fakecuda.backend("host"):
        ev = native.replay(trace, plan)
        log = native.action_log(ev)
        assert uvm_sched.stats()["allocated_blocks"] == 0  # replay frees what is left
    assert sorted(log["iteration"].unique()) == [0, 1, 2, 3]
    issued = log[log["status"] == "issued"]
    want = plan.actions.reset_index()
    for it in range(4):
        got = issued[issued["iteration"] == it].sort_values(["tick", "row"])
        # discard of the workspace (row at tick 8) names a block freed at tick 6: skipped
        exp = want[want["action"] != "discard"]
        assert list(got["tick"]) == list(exp["tick"]), f"iteration {it}"
        assert list(got["action"]) == list(exp["action"])


def test_trace_from_events_round_trip():
    trace, _ = _training_trace(iters=3)
    with fakecuda.backend("host"):
        ev = native.replay(trace)
    back, addrs = trace_from_events(ev, return_addresses=True)
    assert back.meta["source"] == "uvm_sched.native"
    orig = trace.columns
    sel = orig["kind"] != EventKind.ACCESS
    n = int(sel.sum())  # then the frees replay adds for the blocks left live (weights)
    assert list(back.kind[:n]) == list(orig["kind"][sel])
    assert list(back.kind[n:]) == [EventKind.FREE] * 5
    assert list(back.size[back.kind == EventKind.ALLOC]) == list(orig["size"][orig["kind"] == EventKind.ALLOC])
    assert back.peak_bytes == trace.peak_bytes
    assert len(back.iteration_starts) == 3
    # one tick per allocator event
    alloc_free = (back.kind == EventKind.ALLOC) | (back.kind == EventKind.FREE)
    assert np.array_equal(back.tick[alloc_free], np.arange(alloc_free.sum()))
    assert len(addrs) == back.block_table().shape[0]
    assert np.all(addrs % 512 == 0)


def test_trace_from_events_synthesises_blocks_allocated_before_the_window():
    with fakecuda.backend("host"):
        a = uvm_sched.malloc(3000)
        uvm_sched.drain_events()
        b = uvm_sched.malloc(10)
        uvm_sched.free(a)
        uvm_sched.free(b)
        t = trace_from_events(uvm_sched.drain_events())
    assert t.meta["blocks_before_window"] == 1
    assert list(t.kind) == [EventKind.ALLOC, EventKind.ALLOC, EventKind.FREE, EventKind.FREE]
    assert list(t.size) == [3000, 10, 3000, 10]
    assert list(t.block) == [0, 1, 0, 1]  # block id = allocation ordinal in the trace


def test_a_plan_from_a_recorded_trace_resolves_persistent_blocks_from_its_addresses():
    trace, _ = _training_trace(iters=2)
    with fakecuda.backend("host"):
        # record: the weights stay allocated (persistent), then arm a plan naming one
        weights = [uvm_sched.malloc(int(s)) for s in trace.size[:5]]
        uvm_sched.step()
        _iteration()
        rec, addrs = trace_from_events(uvm_sched.drain_events(), return_addresses=True)
        assert list(addrs[:5]) == weights
        plan = _plan([(0, "prefetch_to_host", 3, True, 0, 0)])
        native.arm_plan(plan, persistent_addrs=addrs)
        uvm_sched.step()
        _iteration()
        native.disarm()
        log = native.action_log(uvm_sched.drain_events())
        assert list(log["status"]) == ["issued"] and log["addr"][0] == weights[3]
        for w in weights:
            uvm_sched.free(w)


def test_a_persistent_block_freed_before_arming_is_skipped_not_an_error():
    with fakecuda.backend("host"):
        w = uvm_sched.malloc(8 * MiB)
        uvm_sched.free(w)
        native.arm_plan(_plan([(0, "prefetch_to_host", 0, True, 0, 0)]), persistent_addrs=[w])
        _iteration()
        native.disarm()
        st = uvm_sched.stats()
        assert st["actions_skipped"] == 1 and st["actions_issued"] == 0


def test_arming_mid_iteration_at_a_phase_counts_on_from_it():
    rows = [(2, "prefetch_to_host", 0, False, 0, 0),   # A: allocated before arming
            (2, "advise_read_mostly", 1, False, 0, 0)]  # B: freed by event 2 itself: skipped
    with fakecuda.backend("host"):
        a = uvm_sched.malloc(4 * MiB)
        b = uvm_sched.malloc(1024)
        native.arm_plan(_plan(rows, sync="period"), phase=2, phase_allocs=[a, b])
        uvm_sched.free(b)
        uvm_sched.free(a)  # event 3: the iteration ends here, 2 events after arming
        a2, _ = _iteration()
        native.disarm()
        st = uvm_sched.stats()
        log = native.action_log(uvm_sched.drain_events())
    assert st["iterations"] == 3 and st["divergences"] == 0
    assert list(log["iteration"]) == [0, 0, 1, 1]
    assert list(log["tick"]) == [2, 2, 2, 2]
    assert list(log["status"]) == ["issued", "skipped", "issued", "skipped"]
    assert list(log.loc[log["status"] == "issued", "addr"]) == [a, a2]


def test_a_phase_allocation_freed_before_arming_is_skipped_and_a_wrong_size_diverges():
    rows = [(2, "prefetch_to_host", 0, False, 0, 0)]
    with fakecuda.backend("host"):
        a = uvm_sched.malloc(4 * MiB)
        native.arm_plan(_plan(rows, sync="period"), phase=1, phase_allocs=[0])
        b = uvm_sched.malloc(1024)
        uvm_sched.free(b)  # event 2: A's row, but A is unknown (0): skipped
        uvm_sched.free(a)
        native.disarm()
        assert uvm_sched.stats()["divergences"] == 0
        c = uvm_sched.malloc(2 * MiB)  # allocation 0 of the plan is 4 MiB: a divergence
        native.arm_plan(_plan(rows, sync="period"), phase=1, phase_allocs=[c])
        b = uvm_sched.malloc(1024)
        uvm_sched.free(b)
        uvm_sched.free(c)
        native.disarm()
        st = uvm_sched.stats()
    assert st["divergences"] == 1
    assert st["actions_skipped"] == 1 and st["actions_issued"] == 0


def test_a_phase_out_of_range_is_refused_with_the_range():
    with fakecuda.backend("host"):
        plan = _plan([(1, "prefetch_to_host", 0, False, 0, 0)], sync="period")
        for bad in (4, -1):
            with pytest.raises(ValueError, match=r"phase must be in 0\.\.3"):
                native.arm_plan(plan, phase=bad, phase_allocs=[])
        with pytest.raises(ValueError, match="phase_allocs"):
            native.arm_plan(plan, phase=2)
        with pytest.raises(ValueError, match="only 1 allocator events"):
            native.arm_plan(plan, phase=1, phase_allocs=[0, 0])
        with pytest.raises(ValueError, match="start_now"):
            native.arm_plan(_plan([(1, "prefetch_to_host", 0, False, 0, 0)]), phase=1,
                            phase_allocs=[], start_now=False)
        # the C core checks on its own (a caller of the ABI without this module)
        t = np.zeros(0, native.PLAN_ROW_DTYPE)
        sizes = np.asarray(SIZES, np.uint64)
        s = native._load().uvm_sched_exec_arm_at(None, 0, sizes.ctypes.data, 2, 4, 1, 0, 1, 4,
                                                 None, 0)
        assert s == -1 and "below period_events 4" in native._last_error()
        assert uvm_sched.stats()["plan_armed"] == 0 and len(t) == 0


def _replay_arming_at(trace, plan, arm_ev, first_ev):
    """Replay ``trace`` through the allocator, arming ``plan`` (sync=period, its iterations
    counted from allocator event ``first_ev``) just before allocator event ``arm_ev`` at
    the phase that event has. Returns {(event, plan row): status} of the plan rows handled."""
    period = int(plan.meta["period_events"])
    addr_of, order, iter_allocs = {}, [], []
    n_ev = 0
    native.drain_events()
    base = None
    for k, blk, size in zip(trace.kind, trace.block, trace.size):
        if k not in (EventKind.ALLOC, EventKind.FREE):
            continue
        if n_ev >= first_ev and (n_ev - first_ev) % period == 0:
            iter_allocs = []  # allocations of the iteration so far: (block id, address)
        if n_ev == arm_ev:
            phase = (n_ev - first_ev) % period
            native.arm_plan(plan, order, phase=phase,
                            phase_allocs=[a if b in addr_of else 0 for b, a in iter_allocs])
        if k == EventKind.ALLOC:
            a = uvm_sched.malloc(int(size))
            addr_of[int(blk)] = a
            order.append(a)
            iter_allocs.append((int(blk), a))
        else:
            uvm_sched.free(addr_of.pop(int(blk)))
        n_ev += 1
    native.disarm()
    ev = uvm_sched.drain_events()
    base = int(ev["tick"][ev["kind"] <= 1].min())
    out = {}
    for e in ev:
        k = int(e["kind"])
        if (16 <= k < 16 + len(ACTIONS) or k == 38) and int(e["arg"]) >= 0:
            out[(int(e["tick"]) - base, int(e["arg"]))] = "skipped" if k == 38 else "issued"
    return out


def test_arming_at_any_phase_issues_what_arming_at_the_boundary_does_from_then_on():
    trace, _ = _training_trace(iters=4)
    sizes = [(5 - i) * 2 * MiB + 512 * i for i in range(5)] + [700]
    rows = [(i, "prefetch_to_host", 0, False, 0, 0) for i in (1, 3)]
    rows += [(7, "prefetch_to_device", 0, False, 0, 0), (8, "discard", 0, False, 0, 0),
             (5, "advise_accessed_by", 2, False, 0, 0), (11, "prefetch_to_host", 4, False, 0, 0),
             (0, "advise_preferred_host", 4, True, 0, 0), (6, "advise_read_mostly", 1, False, 0, 0)]
    plan = _plan(rows, sync="period", sizes=sizes, period=12)
    first = 5  # the weights' allocations come before the first iteration
    with fakecuda.backend("host"):
        ref = _replay_arming_at(trace, plan, first, first)
        assert sum(s == "issued" for s in ref.values()) >= 4 * 6
        for arm_ev in range(first + 1, first + 12 * 2):
            got = _replay_arming_at(trace, plan, arm_ev, first)
            want = {key: s for key, s in ref.items() if key[0] >= arm_ev}
            assert got == want, f"armed at event {arm_ev} (phase {(arm_ev - first) % 12})"
