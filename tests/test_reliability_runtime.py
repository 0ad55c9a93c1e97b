"""The Scheduler refuses bad options when it is made, not four steps into training; and a
runtime problem that leaves the allocator unplanned is one warning with a history, or an
error with strict=True -- never only a field nobody reads (issue classes 4 and 7)."""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "native"))
import fakecuda  # noqa: E402

from uvm_sched import native  # noqa: E402
from uvm_sched.hw import ProfileError  # noqa: E402
from uvm_sched.runtime import Scheduler, SchedulerError, SchedulerWarning  # noqa: E402

MiB = 1 << 20


@pytest.mark.parametrize("kw,exc", [
    (dict(plan_opts={"bogus": 1}), TypeError),
    (dict(plan_opts={"pattern": None}), TypeError),
    (dict(plan_opts={"guard": -1}), ValueError),
    (dict(plan_opts={"guard": "wide"}), ValueError),
    (dict(plan_opts={"rounds": 0}), ValueError),
    (dict(plan_opts={"discard": "yes"}), TypeError),
    (dict(plan_opts={"remote_fallback": "maybe"}), ValueError),
    (dict(plan_opts={"sample_rate": 0}), ValueError),
    (dict(plan_opts=[("guard", 8)]), TypeError),
    (dict(budget="lots"), ValueError),
    (dict(budget="inf"), ValueError),
    (dict(budget=-5), ValueError),
    (dict(budget="1e-9%"), ValueError),
    (dict(hw="no-such-gpu"), ProfileError),
    (dict(warmup_iters=0), ValueError),
    (dict(warmup_iters=2.5), TypeError),
    (dict(relearn_after="2"), TypeError),
    (dict(min_period_events=0), ValueError),
    (dict(hook="sometimes"), ValueError),
    (dict(strict="yes"), TypeError),
    (dict(mode="psychic"), ValueError),
])
def test_a_bad_option_is_refused_at_construction(kw, exc):
    with pytest.raises(exc):
        Scheduler(**kw)


def _loop(s, iters, layers=4):
    weights = [native.malloc(4 * MiB) for _ in range(layers)]
    for _ in range(iters):
        s.step()
        s.wait_planned(300)  # (a plan is made in the background: its outcome, now)
        acts = [native.malloc(2 * MiB) for _ in range(layers)]
        for a in reversed(acts):
            native.free(a)
    for w in weights:
        native.free(w)


def test_a_plan_that_cannot_be_made_warns_once_and_keeps_the_history():
    with fakecuda.backend("host"):
        # 1 byte cannot hold one layer's working set: every learn fails
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with Scheduler(budget=1, warmup_iters=1, hook=False) as s:
                _loop(s, iters=8)
                st = s.stats()
        mine = [w for w in caught if issubclass(w.category, SchedulerWarning)]
        assert len(mine) == 1, [str(w.message) for w in mine]
        # bounded: relearn_limit (3) fresh recordings, then it watches and says why
        assert st["state"] == "watching" and st["learn_failures"] == 4
        assert "relearn_limit=3" in st["watching"]
        assert len(st["problems"]) == st["learn_failures"]
        assert all(p["kind"] == "learn_failure" for p in st["problems"])
        assert st["last_error"] == st["problems"][-1]["message"]


def test_strict_raises_where_it_would_warn():
    with fakecuda.backend("host"):
        s = Scheduler(budget=1, warmup_iters=1, hook=False, strict=True).start()
        with pytest.raises(SchedulerError, match="budget|working set"):
            _loop(s, iters=4)
        s.close()


def test_a_ring_too_small_for_an_iteration_is_reported_not_silent():
    with fakecuda.backend("host", UVM_SCHED_RING_EVENTS="1024"):
        with pytest.warns(SchedulerWarning, match="dropped .* UVM_SCHED_RING_EVENTS"):
            with Scheduler(budget="60%", warmup_iters=2, hook=False) as s:
                for _ in range(4):
                    s.step()
                    blocks = [native.malloc(4096) for _ in range(1500)]  # > 1024 records
                    for b in blocks:
                        native.free(b)
                st = s.stats()
        assert st["state"] == "recording"
        assert st["problems"] and st["problems"][0]["kind"] == "events_dropped"


def test_recording_switched_off_is_reported_not_silent():
    with fakecuda.backend("host", UVM_SCHED_TRACE="0"):
        with pytest.warns(SchedulerWarning, match="event recording is off"):
            with Scheduler(budget="60%", warmup_iters=1, hook=False) as s:
                _loop(s, iters=3)
                st = s.stats()
        assert st["state"] == "recording"
        assert [p["kind"] for p in st["problems"]] == ["tracing_off"]
    with fakecuda.backend("host", UVM_SCHED_TRACE="0"):
        with pytest.raises(SchedulerError, match="event recording is off"):
            Scheduler(budget="60%", hook=False, strict=True).start()


def test_a_good_loop_raises_no_warning():
    with fakecuda.backend("host"):
        with warnings.catch_warnings():
            warnings.simplefilter("error", SchedulerWarning)
            with Scheduler(budget="90%", warmup_iters=2, hook=False, strict=True) as s:
                _loop(s, iters=6)
                assert s.state == "armed", s.last_error
                assert s.stats()["problems"] == []

