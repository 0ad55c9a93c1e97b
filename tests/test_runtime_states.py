"""The Scheduler's states: one test per transition of its table (``Scheduler._TRANSITIONS``)
on the host backend, a transition the table does not hold refused, ``stats()["predicted"]``
in every state, and the tuner's and the watchdog's timing rules on events built here."""
from __future__ import annotations

import re
import time

import numpy as np
import pytest

native = pytest.importorskip("uvm_sched.native")
pytest.importorskip("uvm_sched.trace._native", reason="trace_from_events has not landed")

import uvm_sched  # noqa: E402
from uvm_sched._codes import NativeEvent  # noqa: E402
from uvm_sched._runtime_clock import MarkerClock, Tuner, Watchdog  # noqa: E402
from uvm_sched._runtime_states import StateError  # noqa: E402
from uvm_sched.runtime import Scheduler, SchedulerWarning, State  # noqa: E402

from _planner_helpers import host_backend  # noqa: E402

MiB = 1 << 20
IDLE, RECORDING, ARMED, UNPLANNED, CLOSED, WATCHING = (
    State.IDLE, State.RECORDING, State.ARMED, State.UNPLANNED, State.CLOSED, State.WATCHING)
host = pytest.fixture(host_backend)


@pytest.fixture
def moves(monkeypatch):
    """The transitions every Scheduler makes in the test, as (from, to) pairs."""
    seen: list[tuple[State, State]] = []
    enter = Scheduler._enter

    def spy(self, new):
        before = self.state
        enter(self, new)
        seen.append((before, self.state))

    monkeypatch.setattr(Scheduler, "_enter", spy)
    return seen


@pytest.fixture
def weights(host):
    """Persistent blocks (a model's weights), freed after the test."""
    blocks = [native.malloc(4 * MiB) for _ in range(4)]
    yield blocks
    for b in blocks:
        native.free(b)


def _iteration(batch: int, layers: int = 6) -> None:
    acts = [native.malloc(batch * MiB) for _ in range(layers)]
    for a in reversed(acts):
        native.free(a)


def _run(s: Scheduler, batch: int, iters: int, slow_while_armed_s: float = 0.0) -> None:
    for _ in range(iters):
        s.step()
        if slow_while_armed_s and native.stats()["plan_armed"]:
            time.sleep(slow_while_armed_s)  # an injected plan slower than no plan
        _iteration(batch)


def _armed(**kw) -> Scheduler:
    s = Scheduler(**{"budget": "60%", "warmup_iters": 2, "hook": False, **kw}).start()
    _run(s, batch=8, iters=3)
    assert s.wait_planned(300), s.last_error
    assert s.state is ARMED
    return s


def _unplanned() -> Scheduler:
    s = _armed(watchdog_iters=2)
    with pytest.warns(SchedulerWarning, match="watchdog: the plan's iterations took"):
        for _ in range(20):
            _run(s, batch=8, iters=1, slow_while_armed_s=0.02)
            if s.state is not ARMED:
                break
    assert s.state is UNPLANNED, s.stats()
    return s


# -- one test per transition -------------------------------------------------------------
def test_start_goes_from_idle_to_recording(host, moves):
    s = Scheduler(hook=False)
    assert s.state is IDLE and s.state == "idle" and s.stats()["state"] == "idle"
    assert s.start() is s
    assert moves == [(IDLE, RECORDING)]
    assert s.state == "recording" and s.device == 0 and s.rank == 0
    s.start()  # started already: nothing happens
    assert moves == [(IDLE, RECORDING)]
    s.close()


def test_close_before_start_goes_from_idle_to_closed_for_good(host, moves):
    s = Scheduler(hook=False)
    s.close()
    assert moves == [(IDLE, CLOSED)] and s.state is CLOSED
    s.start()  # a closed Scheduler stays closed: nothing is recorded
    native.free(native.malloc(MiB))
    s.poll()
    s.close()
    assert moves == [(IDLE, CLOSED)] and s.state is CLOSED and len(s._live) == 0


def test_a_failure_to_learn_after_the_warmup_starts_a_fresh_recording(host, moves):
    persistent = [native.malloc(64 * MiB) for _ in range(2)]  # no budget below them
    s = Scheduler(budget=MiB, warmup_iters=2, hook=False).start()
    with pytest.warns(SchedulerWarning, match="budget"):
        _run(s, batch=8, iters=3)
        assert not s.wait_planned(300)
    assert moves == [(IDLE, RECORDING), (RECORDING, RECORDING)]
    assert s.state is RECORDING and s.stats()["learn_failures"] == 1
    # the fresh recording starts from the blocks alive now, nothing drained since
    assert list(s._rec.prefix["addr"]) == persistent
    assert s._rec.chunks == [] and s._rec.marks == 0 and s._job is None
    s.close()
    for b in persistent:
        native.free(b)


def test_a_plan_made_in_the_background_goes_from_recording_to_armed(weights, moves):
    s = _armed()
    assert moves == [(IDLE, RECORDING), (RECORDING, ARMED)]
    st = s.stats()
    assert st["state"] == "armed" and st["plans"] == 1 and not st["planning"]
    assert st["native"]["plan_armed"] == 1 and s.plan is not None
    assert s._rec.chunks == [] and len(s._rec.prefix) == 0  # the plan keeps its events
    assert s._learnt_events and s._job is None
    s.close()


def test_close_while_a_plan_is_being_made_goes_to_closed_and_never_arms_it(weights, moves):
    s = Scheduler(budget="60%", warmup_iters=2, hook=False).start()
    _run(s, batch=8, iters=3)  # the third marker hands the recording to the worker
    job = s._job
    assert job is not None
    s.close()
    assert moves == [(IDLE, RECORDING), (RECORDING, CLOSED)]
    assert job.done.wait(300)  # the plan is made...
    s.poll()
    st = s.stats()
    assert st["state"] == "closed" and st["plans"] == 0  # ...and never armed
    assert not st["planning"] and s._job is None  # (closing let go of it)
    assert native.stats()["plan_armed"] == 0 and s.plan is None


def test_iterations_that_keep_diverging_go_from_armed_back_to_recording(weights, moves):
    s = _armed(relearn_after=2)
    _run(s, batch=5, iters=3)  # another batch size: every iteration diverges
    assert moves[-1] == (ARMED, RECORDING) and s.state is RECORDING
    st = s.stats()
    assert st["relearns"] == 1 and st["native"]["plan_armed"] == 0 and s.plan is None
    assert st["predicted"] == {}  # no plan held while re-learning
    assert list(s._rec.prefix["addr"]) == weights  # the fresh recording starts from them
    s.close()


def test_a_plan_slower_than_no_plan_goes_from_armed_to_unplanned(weights, moves):
    s = _unplanned()  # lost against the no-plan iterations just measured (plan disarmed)
    assert moves[-1] == (ARMED, UNPLANNED)
    st = s.stats()
    assert st["state"] == "unplanned" and st["watchdog_disarms"] == 1
    assert st["native"]["plan_armed"] == 0 and st["watchdog"]["phase"] == "disarmed"
    _run(s, batch=8, iters=3)  # it stays unplanned
    assert moves[-1] == (ARMED, UNPLANNED) and native.stats()["plan_armed"] == 0
    s.close()


def test_a_plan_that_turns_slow_while_watched_goes_from_armed_to_unplanned(weights, moves):
    s = _armed(watchdog_iters=2)
    for _ in range(20):  # the plan pays at first: no plan is the slow one
        s.step()
        if (s.stats().get("watchdog") or {}).get("phase") == "watch":
            break
        if not native.stats()["plan_armed"]:
            time.sleep(0.02)
        _iteration(8)
    assert native.stats()["plan_armed"] == 1  # armed again, and watched
    with pytest.warns(SchedulerWarning, match="watchdog"):
        for _ in range(20):  # then it turns slow
            _run(s, batch=8, iters=1, slow_while_armed_s=0.05)
            if s.state is not ARMED:
                break
    assert moves[-1] == (ARMED, UNPLANNED)
    st = s.stats()
    assert st["state"] == "unplanned" and st["native"]["plan_armed"] == 0  # disarmed now
    s.close()


def test_close_when_armed_disarms_and_goes_to_closed(weights, moves):
    s = _armed()
    s.close()
    assert moves[-1] == (ARMED, CLOSED) and s.state is CLOSED
    assert native.stats()["plan_armed"] == 0
    steps = s.stats()["steps"]
    _run(s, batch=8, iters=2)  # closed: nothing drained, nothing armed again
    assert native.stats()["plan_armed"] == 0 and s.stats()["steps"] == steps


def test_close_when_unplanned_goes_to_closed(weights, moves):
    s = _unplanned()
    s.close()
    assert moves[-1] == (UNPLANNED, CLOSED) and s.state is CLOSED
    assert native.stats()["plan_armed"] == 0


def _watching_after_relearns() -> Scheduler:
    s = _armed(relearn_after=2, relearn_limit=1)
    _run(s, batch=5, iters=3)  # another batch size: relearn (the one relearn allowed)
    assert s.state is RECORDING
    _run(s, batch=5, iters=3)
    assert s.wait_planned(300), s.last_error
    _run(s, batch=7, iters=3)  # and another: the limit is spent
    return s


def test_steps_that_keep_diverging_after_the_relearn_limit_go_from_armed_to_watching(
        weights, moves):
    s = _watching_after_relearns()
    assert moves[-1] == (ARMED, WATCHING) and s.state is WATCHING
    st = s.stats()
    assert st["relearns"] == 1 and st["native"]["plan_armed"] == 0
    assert "relearn_limit=1" in st["watching"] and "2 steps in a row diverged" in st["watching"]
    _run(s, batch=9, iters=4)  # watching: nothing is learned, the steps are counted
    st2 = s.stats()
    assert st2["state"] == "watching" and st2["plans"] == st["plans"] and not st2["planning"]
    assert st2["not_armed"][f"watching: {st['watching']}"] >= 4
    s.close()


def test_a_learn_that_keeps_failing_goes_from_recording_to_watching(host, moves):
    persistent = [native.malloc(64 * MiB) for _ in range(2)]  # no budget below them
    s = Scheduler(budget=MiB, warmup_iters=2, hook=False, relearn_limit=1).start()
    with pytest.warns(SchedulerWarning, match="budget"):
        for _ in range(2):
            _run(s, batch=8, iters=3)
            assert not s.wait_planned(300)
    assert moves == [(IDLE, RECORDING), (RECORDING, RECORDING), (RECORDING, WATCHING)]
    st = s.stats()
    assert st["learn_failures"] == 2 and st["learn_retries"] == 1
    assert st["watching"].startswith("learning failed after 0 relearns and 1 failed learns")
    _run(s, batch=8, iters=3)
    assert s.stats()["learn_failures"] == 2 and s._job is None  # nothing more is tried
    s.close()
    for b in persistent:
        native.free(b)


def test_close_when_watching_goes_to_closed(weights, moves):
    s = _watching_after_relearns()
    s.close()
    assert moves[-1] == (WATCHING, CLOSED) and s.state is CLOSED
    assert native.stats()["plan_armed"] == 0


TRANSITION_TESTS = {
    (IDLE, RECORDING): test_start_goes_from_idle_to_recording,
    (IDLE, CLOSED): test_close_before_start_goes_from_idle_to_closed_for_good,
    (RECORDING, RECORDING): test_a_failure_to_learn_after_the_warmup_starts_a_fresh_recording,
    (RECORDING, ARMED): test_a_plan_made_in_the_background_goes_from_recording_to_armed,
    (RECORDING, CLOSED): test_close_while_a_plan_is_being_made_goes_to_closed_and_never_arms_it,
    (ARMED, RECORDING): test_iterations_that_keep_diverging_go_from_armed_back_to_recording,
    (ARMED, UNPLANNED): test_a_plan_slower_than_no_plan_goes_from_armed_to_unplanned,
    (ARMED, CLOSED): test_close_when_armed_disarms_and_goes_to_closed,
    (UNPLANNED, CLOSED): test_close_when_unplanned_goes_to_closed,
    (ARMED, WATCHING):
        test_steps_that_keep_diverging_after_the_relearn_limit_go_from_armed_to_watching,
    (RECORDING, WATCHING): test_a_learn_that_keeps_failing_goes_from_recording_to_watching,
    (WATCHING, CLOSED): test_close_when_watching_goes_to_closed,
}


def test_every_transition_of_the_table_has_a_test_and_a_line_in_the_states_docstring():
    assert set(TRANSITION_TESTS) == set(Scheduler._TRANSITIONS)
    drawn = {(State(a), State(b))
             for a, b in re.findall(r"^\s*- (\w+) -> (\w+):", State.__doc__ or "", re.M)}
    assert drawn == set(Scheduler._TRANSITIONS)


def test_a_transition_the_table_does_not_hold_is_refused_and_changes_nothing(host):
    s = Scheduler(hook=False)
    with pytest.raises(StateError, match=r"state idle cannot go to armed \(from idle it "
                                         r"goes to recording, closed\)"):
        s._enter(ARMED)
    assert s.state is IDLE and native.stats()["plan_armed"] == 0
    s.close()
    with pytest.raises(StateError, match="no other state: it is final"):
        s._enter(RECORDING)
    assert s.state is CLOSED
    assert issubclass(StateError, uvm_sched.Error)


def test_stats_reports_the_prediction_in_every_state(weights):
    s = Scheduler(budget="60%", warmup_iters=2, hook=False, tune=(16,), tune_iters=1,
                  watchdog_iters=2)
    seen = {"idle": s.stats()}
    s.start()
    seen["recording"] = s.stats()
    _run(s, batch=8, iters=3)
    assert s.wait_planned(300), s.last_error
    seen["armed, tuning"] = s.stats()
    assert "tuning_now" in seen["armed, tuning"]
    predicted = dict(s.plan.meta["predicted"])
    assert predicted  # the planner's estimate of the plan
    with pytest.warns(SchedulerWarning, match="watchdog"):
        for _ in range(30):  # tuned, then watched: slower while armed, so it ends unplanned
            _run(s, batch=8, iters=1, slow_while_armed_s=0.02)
            if s._tuner is None and "armed" not in seen:
                seen["armed"] = s.stats()
            if s.state is UNPLANNED:
                break
    seen["unplanned"] = s.stats()
    s.close()
    seen["closed"] = s.stats()
    assert [st["state"] for st in seen.values()] == [
        "idle", "recording", "armed", "armed", "unplanned", "closed"]
    assert all(type(st["state"]) is str for st in seen.values())  # plain strings (JSON)
    assert seen["idle"]["predicted"] == seen["recording"]["predicted"] == {}
    for state in ("armed, tuning", "armed", "unplanned", "closed"):
        assert seen[state]["predicted"].keys() == predicted.keys(), state


# -- the timing rules of the tuner and the watchdog (no allocator) ----------------------------
def _events(*rows: tuple[str, float]) -> np.ndarray:
    """MARK / DIVERGENCE records at the given seconds."""
    from uvm_sched.native import EVENT_DTYPE

    ev = np.zeros(len(rows), EVENT_DTYPE)
    ev["kind"] = [NativeEvent[k] for k, _ in rows]
    ev["t_ns"] = [int(t * 1e9) for _, t in rows]
    return ev


def _marks(*times: float) -> np.ndarray:
    return _events(*(("MARK", t) for t in times))


def test_the_clock_skips_the_first_iteration_after_a_switch_and_any_that_diverged():
    clock = MarkerClock()
    ev = _events(("MARK", 0), ("MARK", 1), ("MARK", 3), ("DIVERGENCE", 3.5), ("MARK", 6),
                 ("MARK", 10))
    assert list(clock.iterations(ev)) == [None, None, pytest.approx(2), None,
                                          pytest.approx(4)]
    clock.restart()
    assert list(clock.iterations(_marks(20, 21, 23))) == [None, None, pytest.approx(2)]


def test_the_tuner_times_each_candidate_in_turn_and_keeps_their_medians():
    a, b = object(), object()
    tu = Tuner([("auto", a), ("8", b)], iters=2)
    assert tu.label == "auto" and not tu.feed(_marks(0, 1, 3))  # settles, then 2 s
    assert tu.feed(_marks(7, 8))  # 4 s: its two; the marker after it counts for no one
    assert tu.advance() is b and tu.label == "8"
    assert tu.feed(_marks(10, 11, 12, 13))
    assert tu.advance() is None
    assert tu.medians() == {"auto": pytest.approx(3), "8": pytest.approx(1)}


def test_the_watchdog_disarms_times_no_plan_then_rearms_a_plan_that_pays():
    dog = Watchdog(iters=2)
    dog.reset("plan")
    # plan: settle, 2 s, 2 s -> disarm; none: settle, 3 s, 3 s -> the plan pays: rearm
    assert list(dog.feed(_marks(0, 1, 3, 5))) == ["disarm"]
    assert list(dog.feed(_marks(6, 7, 10, 13))) == ["rearm"]
    assert dog.phase == "watch" and not dog.loses()
    # watching: two slow iterations of the plan (4 s > 3 s * 1.03) -> lost, the last word
    assert list(dog.feed(_marks(14, 15, 19, 23, 24))) == ["lost"]
    assert dog.phase == "disarmed" and "more than 3% slower" in dog.verdict()
