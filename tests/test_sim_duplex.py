"""The link's duplex cap (``duplex_Bps``): copies each way alone and together, worked by
hand, in the reference engine, the compiled one and the planner's copy queues. Measured on
A100 PCIe4: H2D falls from 25 to 11-13 GB/s while D2H runs (NVIDIA/nvbandwidth #11, #53)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from uvm_sched.hw import load_profile
from uvm_sched.planner import Plan
from uvm_sched.planner._queues import _stretched_end, busy_intervals, cyclic_fifo
from uvm_sched.sim import simulate
from uvm_sched.sim._mechanisms import copy_end
from uvm_sched.trace import AccessMode, TraceBuilder

MiB = 1 << 20
MS = 1e-3
GB = 1e9


@pytest.mark.parametrize("cap, end", [(50 * GB, 2.0),  # no interference: 50 B at 25 B/s
                                      (36 * GB, 3.12),  # 22 B in 2 s at 11, 28 B at 25
                                      (25 * GB, 4.0)])  # half duplex: waits out the D2H copy
def test_a_copy_issued_while_the_other_direction_runs_gets_what_the_cap_leaves(cap, end):
    # D2H: 50 GB at 25 GB/s from t=0 (ends at 2 s); then H2D: 50 GB at 25 GB/s from t=0
    assert copy_end(0.0, 50 * GB, 25 * GB, 0.0, 0.0, cap) == 2.0  # alone
    assert copy_end(0.0, 50 * GB, 25 * GB, 2.0, 25 * GB, cap) == pytest.approx(end)
    # a copy that fits inside the other's run: 11 GB at the 11 GB/s left ends at 1 s
    assert copy_end(0.0, 11 * GB, 25 * GB, 2.0, 25 * GB, 36 * GB) == pytest.approx(1.0)
    # issued after the other direction is done: its own rate
    assert copy_end(2.0, 50 * GB, 25 * GB, 2.0, 25 * GB, 25 * GB) == 4.0


def _compiled_copies(cap: float):
    """``xfer(d2h, start, bytes, rate)``: the compiled copy engines under ``cap`` (B/s)."""
    pytest.importorskip("numba")
    from uvm_sched.sim import _fast_memory as fm
    I = np.zeros(fm.NI, np.int64)
    F = np.zeros(fm.NF)
    F[fm.DUPLEX] = cap
    trf, tri = np.zeros((4, 2)), np.zeros((4, 4), np.int64)
    return lambda d2h, s, n, bw: fm._xfer(I, F, trf, tri, d2h, s, n, bw, 0, -1, 0.0)


def test_the_compiled_copy_engine_applies_the_same_cap():
    xfer = _compiled_copies(36 * GB)
    assert xfer(1, 0.0, 50 * GB, 25 * GB) == 2.0
    assert xfer(0, 0.0, 50 * GB, 25 * GB) == copy_end(0.0, 50 * GB, 25 * GB, 2.0, 25 * GB,
                                                      36 * GB)



@pytest.mark.xfail(strict=True, reason="known leniency: the engines take the other "
                   "direction's queued copies to run at the rate of its last one, so a slower "
                   "copy queued last (the fault path's 12 GB/s on h200-pcie5 behind a 50 GB/s "
                   "prefetch) lets a new copy run at its full rate while the faster one still "
                   "runs: the two directions together above duplex_Bps")
def test_the_two_directions_together_never_run_above_the_duplex_cap():
    xfer = _compiled_copies(36 * GB)
    # H2D: 50 GB at 25 GB/s (0-2 s), then 6 GB at 6 GB/s (2-3 s); then D2H: 25 GB at 25
    # GB/s from 0: 11 GB/s while the first runs (22 GB by 2 s), then the 3 GB left at 25
    assert xfer(0, 0.0, 50 * GB, 25 * GB) == 2.0
    assert xfer(0, 0.0, 6 * GB, 6 * GB) == 3.0
    assert xfer(1, 0.0, 25 * GB, 25 * GB) == pytest.approx(2.12)

def _swap_trace():
    """P and Q (2 MiB each, persistent) written in warm-up; per iteration, 1 ms ticks:
    t0 allocates S, t1 reads-writes P and frees S, t2 allocates U, t3 reads-writes Q and
    frees U."""
    b = TraceBuilder(name="swap")
    p, q = b.alloc(2 * MiB), b.alloc(2 * MiB)
    b.access(p, AccessMode.WRITE)
    b.access(q, AccessMode.WRITE)
    b.next_tick(1e6)
    for _ in range(3):
        b.mark()
        s = b.alloc(64 << 10)
        b.access(s, AccessMode.WRITE)
        b.next_tick(1e6)
        b.access(p, AccessMode.READ_WRITE)
        b.free(s)
        b.next_tick(1e6)
        u = b.alloc(64 << 10)
        b.access(u, AccessMode.WRITE)
        b.next_tick(1e6)
        b.access(q, AccessMode.READ_WRITE)
        b.free(u)
        b.next_tick(1e6)
    return b.build()


def _swap_plan():
    # at ALLOC S: evict Q, bring P back; at ALLOC U: evict P, bring Q back (both 2 MiB,
    # the eviction first on its engine)
    rows = [(0, "prefetch_to_host", 1), (0, "prefetch_to_device", 0),
            (2, "prefetch_to_host", 0), (2, "prefetch_to_device", 1)]
    return Plan({"tick": [r[0] for r in rows], "action": [r[1] for r in rows],
                 "block": [r[2] for r in rows], "persistent": [True] * 4,
                 "offset": [0] * 4, "bytes": [0] * 4},
                dict(budget_bytes=8 * MiB, period_events=4, alloc_sizes=[64 << 10] * 2))


def _hw(cap_mib_per_ms: float):
    bw = 2 * MiB / MS  # each copy takes 1 ms alone, as long as the tick it hides behind
    return dataclasses.replace(
        load_profile("h200-pcie5"), name="duplex-test", h2d_prefetch_Bps=bw,
        d2h_prefetch_Bps=bw, h2d_fault_Bps=bw, d2h_evict_Bps=bw, remote_access_Bps=bw,
        duplex_Bps=cap_mib_per_ms * MiB / MS, action_call_s=1e-15)


@pytest.mark.parametrize("kernel", ["python", "compiled"])
@pytest.mark.parametrize("cap, iteration_ms", [(4.0, 4.0),  # full duplex: both hide
                                               (3.0, 5.0),  # 1 MiB at 1, 1 MiB at 2: +0.5 ms
                                               (2.0, 6.0)])  # half duplex: +1 ms per swap
def test_a_swap_each_way_at_once_is_slowed_by_the_duplex_cap(cap, iteration_ms, kernel,
                                                            monkeypatch):
    if kernel == "python":
        monkeypatch.setenv("UVM_SCHED_SIM_KERNEL", "python")
    else:
        pytest.importorskip("numba")
    r = simulate(_swap_trace(), _swap_plan(), _hw(cap), 8 * MiB)
    assert r.iteration_time_s == pytest.approx(iteration_ms * MS)
    assert r.bytes_h2d == 4 * MiB and r.bytes_d2h == 4 * MiB and r.faults == 0
    assert r.stall_breakdown["link"] == pytest.approx((iteration_ms - 4.0) * MS)
    assert simulate(_swap_trace(), "bound", _hw(cap), 8 * MiB).iteration_time_s <= \
        r.iteration_time_s * (1 + 1e-12)  # the bound ignores the cap: still a lower bound


def test_the_planner_queue_slows_a_prefetch_while_evictions_run():
    # evictions busy [0, 2) and [5, 6) ns of a 10 ns iteration; a prefetch of 3 ns alone
    bs, be = busy_intervals(np.array([0.0, 5.0]), np.array([2.0, 1.0]), 10.0)
    assert list(zip(bs, be)) == [(-10.0, -8.0), (-5.0, -4.0), (0.0, 2.0), (5.0, 6.0),
                                 (10.0, 12.0), (15.0, 16.0)]
    assert _stretched_end(0.0, 3.0, bs, be, 1.0) == 3.0  # no cap
    assert _stretched_end(0.0, 3.0, bs, be, 0.5) == 4.0  # 1 ns of work in [0, 2), 2 after
    assert _stretched_end(0.0, 3.0, bs, be, 0.0) == 5.0  # waits out [0, 2)
    assert _stretched_end(3.0, 3.0, bs, be, 0.0) == 7.0  # 2 ns, [5, 6) waited, 1 ns
    st, en = cyclic_fifo(np.array([0.0, 0.0]), np.array([3.0, 2.0]), np.zeros(2), 10.0,
                         np.zeros(2, bool), (bs, be, 0.5))
    # the second: 1 ns to 5, 0.5 ns of work in [5, 6), 0.5 ns after
    assert st.tolist() == [0.0, 4.0] and en.tolist() == [4.0, 6.5]
