"""The planner's predicted prefetch stall (``planner._stall.prefetch_stall``): the compute's
delay at the iteration's end, the most any prefetch lands after its use would start, never
the sum of the prefetches' waits. Hand-worked timelines, the reference loop and the compiled
one alike."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from uvm_sched.planner import _fast_timing, _stall


def _timeline(durations_ns, control_ticks):
    """A timeline of ticks of ``durations_ns`` and one control point per entry of
    ``control_ticks`` (control point k queues the kernels through tick ``q[k]``)."""
    C = np.concatenate([[0.0], np.cumsum(np.asarray(durations_ns, float))])
    q = np.asarray(control_ticks, np.int64)
    return SimpleNamespace(C=C, q=q, tau=C[q + 1], listed=lambda name: C.tolist())


def _prefetch(kp, u2, queue_ns, order=0):
    """A prefetch issued at control point ``kp``, due at tick ``u2``, ``queue_ns`` on the
    h2d queue; ``order``: its place in issue order."""
    return SimpleNamespace(kp=kp, u2=u2, p_start=float(order), p_end=float(order + queue_ns),
                           dead=False)


@pytest.fixture(params=["reference", "compiled"])
def loop(request, monkeypatch):
    if request.param == "compiled":
        if not _fast_timing.available():
            pytest.skip("numba is not installed: no compiled timing pass")
    else:
        monkeypatch.setattr(_fast_timing, "available", lambda: False)
    return request.param


def test_prefetches_due_at_one_tick_wait_for_the_last_not_the_sum(loop):
    # ticks of 10 us; both issued at control point 0 (after tick 0, at 10 us), due at tick
    # 2 (20 us), each 15 us on the h2d queue: they land at 25 and 40 us. The kernel of tick
    # 2 waits 20 us, once; summed per prefetch it was 5 + 20 = 25 us.
    tl = _timeline([10_000] * 4, [0, 1, 2])
    chosen = [_prefetch(0, 2, 15_000), _prefetch(0, 2, 15_000)]
    assert _stall.prefetch_stall(chosen, tl) == pytest.approx(20_000)


def test_a_later_prefetch_due_earlier_does_not_count_the_wait_again(loop):
    # the first (due at tick 3, 30 us) lands at 40 us: 10 us late; the second is issued at
    # control point 1 (20 us), due at tick 2 (20 us), and queues behind it: lands at 45 us,
    # 25 us late. The compute's delay is 25 us from tick 2 on, which covers tick 3's wait.
    tl = _timeline([10_000] * 5, [0, 1, 2, 3])
    chosen = [_prefetch(0, 3, 30_000), _prefetch(1, 2, 5_000, order=1)]
    assert _stall.prefetch_stall(chosen, tl) == pytest.approx(25_000)


def test_ticks_of_no_device_time_delay_by_what_the_queue_makes_late(loop):
    # a snapshot's allocator events at one timestamp: ticks 1-6 take no time. Seven
    # prefetches due at ticks 1-7, the k-th issued at the control point before its tick
    # (all at 10 us), 5 us and then 1 us each on the queue: the last lands 11 us after
    # they were all due (10 us), and that is the delay.
    tl = _timeline([10_000, 0, 0, 0, 0, 0, 0, 10_000], list(range(8)))
    chosen = [_prefetch(0, 1, 5_000)] + [_prefetch(k - 1, k, 1_000, order=k)
                                         for k in range(2, 8)]
    assert _stall.prefetch_stall(chosen, tl) == pytest.approx(11_000)


def test_prefetches_on_time_predict_no_stall(loop):
    tl = _timeline([10_000] * 4, [0, 1, 2])
    assert _stall.prefetch_stall([_prefetch(0, 3, 5_000)], tl) == 0.0
