"""The runtime loop: record warm-up iterations, learn the pattern, plan, arm the native
executor, keep watching, and re-learn when the workload changes.

``Scheduler(budget=..., hw=..., warmup_iters=3, mode="auto")`` drives the allocator
of ``uvm_sched`` (the native core). Iteration markers, in order of preference:

* ``scheduler.step()`` (or ``uvm_sched.step()`` followed by ``scheduler.poll()``);
* for PyTorch, a global optimizer step hook (``torch.optim.optimizer.
  register_optimizer_step_post_hook``), installed when torch is already imported;
* neither: the period learned from the allocator events (``sync="period"``), checked at
  every ``poll()``.

States (``State``, whose docstring draws the transitions): ``recording`` (draining events,
counting iterations) -> ``armed`` (a plan is executed by the native core; events are drained
and only the divergences counted) -> back to ``recording`` when divergences persist for
``relearn_after`` steps in a row (an eval step, a partial batch: expected kinds, no
divergence; steps and their kinds: ``_runtime_kinds``); ``watching`` once ``relearn_limit``
is spent; ``armed`` -> ``unplanned`` when the watchdog (``_runtime_clock``, beside the
tuner) finds the plan slower than none (it stays disarmed). Each transition's work is one
row of ``Scheduler._TRANSITIONS``, run by ``Scheduler._enter``. A plan is only a hint: a
wrong one costs time, never correctness, so every failure to learn or plan leaves the
allocator running unplanned. Such a problem is never silent: the first of each kind (a
failure to learn or plan, events dropped by a ring too small for an iteration, event
recording switched off) emits one ``SchedulerWarning``, ``stats()["problems"]`` keeps their
history and ``stats()["last_error"]`` the latest; ``Scheduler(strict=True)`` raises
``SchedulerError`` instead. Options are checked when the Scheduler is made, not later.

Learning and planning (seconds on an LLM-sized iteration) never run on the training
thread: once enough is recorded, the events go to a background worker (``_learn``: a
helper process by default) and the loop keeps running unplanned, still ``recording``;
the plan is armed at the first ``poll()`` (a ``step()``, the hook) after it is ready --
at a marker it starts with the iteration that begins there, elsewhere with the next one
(or, synced on the learned period, at the phase the loop has reached).
``wait_planned(timeout)`` blocks until the plan being made is armed (tests, scripts).
The training thread's own work per drained event is vectorised (numpy over the batch).
"""
from __future__ import annotations

import logging
import threading
import time
import warnings
from typing import TYPE_CHECKING, Any, Callable, ClassVar

import numpy as np

from ._errors import Error, Warning as _Warning
from ._runtime_clock import WATCHDOG_SLACK, Tuner, Watchdog  # noqa: F401 (SLACK: re-exported)
from ._runtime_calib import Calibrator
from ._runtime_faults import FaultSampler, warmed_up
from ._runtime_kinds import Steps, spend_relearn, why_not
from ._runtime_recording import MARK, Recording, track_live
from ._runtime_setup import (check_options, current_device, install_hook, rank,
                             silent_message, start_tracer, touch_source)
from ._runtime_states import State, StateError

if TYPE_CHECKING:  # for annotations only: importing them costs the Scheduler's start-up
    from ._learn import Job
    from .planner import Plan

__all__ = ["Scheduler", "SchedulerWarning", "SchedulerError", "State"]

_MAX_PROBLEMS = 100  # history kept in stats()["problems"] (oldest dropped first)

_Action = Callable[["Scheduler"], None]


class SchedulerWarning(_Warning, RuntimeWarning):
    """The Scheduler could not learn or plan, and the allocator runs unplanned."""


class SchedulerError(Error, RuntimeError):
    """With ``Scheduler(strict=True)``: what would have been a ``SchedulerWarning``."""


logger = logging.getLogger(__name__)


class Scheduler:
    """Learn and execute a memory plan for the running training loop.

    ``budget``: bytes, ``"50%"`` (of the recorded peak) or ``"40GiB"``; ``hw``: profile
    name/path; ``warmup_iters``: iterations recorded before planning; ``mode``:
    ``"auto"`` (default)/``"oblivious"``/``"sampled"``; ``relearn_after``: steps in a row
    that diverged (a step of a known other kind does not) before re-learning;
    ``relearn_limit``: relearns (and failed learns after a full warm-up) before the
    Scheduler stops learning and watches; ``hook``: install the PyTorch optimizer hook
    (``"auto"``: when torch is imported); ``plan_opts``: extra options for
    ``uvm_sched.plan``; ``min_period_events``: allocator events recorded before the period
    is looked for when there are no markers; ``strict``: raise ``SchedulerError`` where a
    runtime problem would otherwise be a ``SchedulerWarning``. Every option is checked here
    (``TypeError`` / ``ValueError``, ``ProfileError`` for ``hw``).

    Access samples (``mode="sampled"``, or ``"auto"`` where they can be had: the rule and
    its reasons are ``_runtime_setup.touch_source``'s): ``plan_opts["samples"]`` as given,
    else, from ``start()`` until the plan is armed, PyTorch's dispatch tracer
    (``integrations.torch.TouchRecorder``, ops on ``touch_device``; start, step and close
    the scheduler in the loop's thread: the tracer is a mode of that thread) or, with
    ``sampler="cupti"``, CUPTI's GPU page faults (``_runtime_faults``: the warm-up then
    lasts until its probes settle; ``stats()["fault_sampling"]``); ``samples`` holds what
    the plan was made with; ``stats()["mode"]``/``["mode_reason"]`` say which ran and why.

    ``tune``: plans to try beside the configured one (``planner.tuning_candidates``): guards
    (ticks, or ``"auto"``; e.g. ``(16, 8)``: how far from an allocation or a free a block is
    still read differs between workloads) and, in sampled mode, ``"oblivious"``. With
    markers each is armed for ``tune_iters`` iterations (after one to settle), timed between
    markers, and the fastest kept (``tuning``: median seconds per candidate);
    ``sim.simulate(..., "uvm-sched", tune=...)`` does the same with the simulator's clock.

    ``worker``: where learning and planning run, ``"process"`` (a helper process shared by
    every Scheduler of this process) or ``"thread"`` (competes with the loop for the GIL).
    ``watchdog_iters``: iterations per measurement of the watchdog (0: off): with markers,
    the plan is timed against no plan and disarmed when more than ``WATCHDOG_SLACK``
    slower. ``calibrate``: measure the device at ``start()`` and plan with it
    (``_runtime_calib``: "auto" = on CUDA).
    """

    def __init__(self, budget: Any = "100%", hw: Any = "h200-pcie5", warmup_iters: int = 3,
                 mode: str = "auto", *, relearn_after: int = 2, relearn_limit: int = 3,
                 hook: Any = "auto", plan_opts: dict | None = None, min_period_events: int = 64,
                 touch_device: str = "cuda", sampler: str = "auto", tune: Any = None,
                 tune_iters: int = 2, device: int | None = None, worker: str = "process",
                 strict: bool = False, watchdog_iters: int = 3, calibrate: Any = "auto") -> None:
        self.tune = tuple(tune) if tune else ()
        self._calib = Calibrator(calibrate)
        plan_opts = check_options(
            budget=budget, hw=hw, mode=mode, hook=hook, strict=strict, plan_opts=plan_opts,
            device=device, worker=worker, tune=self.tune, sampler=sampler,
            counts={"warmup_iters": warmup_iters, "relearn_after": relearn_after,
                    "relearn_limit": relearn_limit, "tune_iters": tune_iters,
                    "min_period_events": min_period_events, "watchdog_iters": watchdog_iters})
        self.budget = budget
        self.hw = hw
        self.warmup_iters = int(warmup_iters)
        self.mode = mode
        self.relearn_after = int(relearn_after)
        self.relearn_limit = int(relearn_limit)
        self.plan_opts = plan_opts
        self.min_period_events = int(min_period_events)
        self.strict = strict
        self.worker = worker
        self.tune_iters = int(tune_iters)
        self._hook_pref = hook
        # the device whose memory the plan moves (None: torch's current device at start());
        # one process per GPU (torchrun) runs one Scheduler per rank, each on its own device
        self.device: int | None = None if device is None else int(device)
        self.rank: int = 0
        self._lock = threading.RLock()
        self.state = State.IDLE  # changed by _enter() alone
        self.problems: list[dict[str, Any]] = []  # history of runtime problems (oldest first)
        self._warned: set[str] = set()  # problem kinds already warned about
        self.last_error: str | None = None
        self._hook_handle: Any = None  # torch's RemovableHandle (torch is optional)
        # the access sampler (dispatch tracer or CUPTI's faults; none) and why
        self._touches, self._mode_reason = touch_source(mode, plan_opts, touch_device,
                                                        sampler, device)
        # what was learned: the plan armed (or last armed), what it was learned from
        self.plan: Plan | None = None
        self.pattern = None
        self.samples = None  # the access samples the current plan was made with
        self._addrs: list[int] = []  # the armed plan's persistent ordinal -> address
        self._learnt_events: list[np.ndarray] = []  # what the armed plan was learned from
        self._job: Job | None = None  # the learn request in flight (a _learn.Job), None when idle
        # the judges by the clock (_runtime_clock)
        self._tuner: Tuner | None = None  # candidates and their timings while tuning
        self.tuning: dict[str, float] = {}  # candidate -> median measured iteration seconds
        self.tuning_skipped: str | None = None  # why a requested tuning did not run
        self._dog = Watchdog(int(watchdog_iters)) if watchdog_iters else None
        # every block alive: its ALLOC event, in allocation order; what is being recorded
        # (_runtime_recording)
        from .native import EVENT_DTYPE

        self._live = np.empty(0, EVENT_DTYPE)
        self._rec = Recording(self._live, self.min_period_events)
        self._at_marker = False  # the last event drained was a MARK (an iteration starts)
        self._silence_checked = False  # the "no allocation passed through" warning, once
        self._steps = Steps()  # every marked step: its kind, armed or why not; kind plans
        self.watching: str | None = None  # why the Scheduler stopped learning
        # values: counts, seconds, and steps_before_plan (None until the first plan)
        self._counters: dict[str, Any] = {
            "plans": 0, "relearns": 0, "iterations_armed": 0, "divergences": 0,
            "learn_failures": 0, "plan_time_s": 0.0, "steps": 0, "steps_before_plan": None,
            "steps_while_planning": 0, "arm_time_s": 0.0, "watchdog_disarms": 0,
            "learn_retries": 0, "plan_kernels": None}

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> "Scheduler":
        """Begin recording (events already in the ring are kept: they hold the
        allocations of weights made before the scheduler started)."""
        with self._lock:
            if self.state is State.IDLE:
                self._enter(State.RECORDING)
                try:
                    self.poll()
                except BaseException:  # strict: a start that raises leaves nothing installed
                    self.close()
                    raise
        return self

    def close(self) -> None:
        """Disarm the plan and remove the hook (the allocator keeps running unplanned)."""
        with self._lock:
            if self.state is not State.CLOSED:
                self._enter(State.CLOSED)

    def __enter__(self) -> "Scheduler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- markers ------------------------------------------------------------------------
    def step(self) -> None:
        """Mark the start of an iteration (calls ``uvm_sched.step()``) and advance."""
        from . import native

        native.step()
        self.poll()
        rec = self._rec
        if not self._silence_checked and rec.marks >= 2:
            self._silence_checked = True
            if rec.alloc_events == 0 and len(self._live) == 0 and self.state is State.RECORDING:
                self._problem("nothing_allocated", silent_message(rec.marks))

    # -- the loop -----------------------------------------------------------------------
    def poll(self) -> None:
        """Drain the allocator's events and advance the state machine (cheap; called by
        ``step()`` and the hook, or by the user where there are no markers)."""
        from . import native

        with self._lock:
            if self.state is State.IDLE or self.state is State.CLOSED:
                return
            ev, live0 = native.drain_events(), self._live
            if len(ev):
                self._track_live(ev)
                k = ev["kind"]
                self._at_marker = int(k[-1]) == MARK
                marks = int(np.count_nonzero(k == MARK))
                self._counters["steps"] += marks
                if self._job is not None:
                    self._counters["steps_while_planning"] += marks
            bad = self._steps.feed(ev, why_not(self), live0, self._live) if len(ev) else 0
            if self.state is State.RECORDING:
                self._record(ev)
            elif self.state is State.ARMED:
                self._watch(ev, bad)

    def wait_planned(self, timeout: float | None = None) -> bool:
        """``poll()``, then block until the plan being made in the background (if any) is
        ready and arm it (as the next ``poll()`` would). ``timeout``: seconds, None = no
        limit. Returns True when a plan is armed; False on timeout or when learning failed
        (``last_error`` says why) or needs more iterations."""
        self.poll()  # (which may hand a recording to the worker now)
        job = self._job
        if job is not None:
            if not job.done.wait(timeout):
                return False
            self.poll()
        return self.state is State.ARMED

    def _track_live(self, ev: np.ndarray) -> None:
        """Update the table of live blocks with a drained batch (``_runtime_recording``)."""
        self._live = track_live(self._live, ev)

    # -- recording ----------------------------------------------------------------------
    def _record(self, ev: np.ndarray) -> None:
        if self._check_recording():
            return
        rec = self._rec
        if len(ev):
            rec.add(ev)
            if isinstance(self._touches, FaultSampler):
                self._touches.see(ev, self._live)
        if self._job is not None:
            if self._job.done.is_set():
                self._finish_learning()
            return  # (the loop runs on unplanned while the plan is made)
        # with markers: learn once warmed up (warmup_iters iterations; fault probes settled)
        if warmed_up(self._touches, rec.marks, self.warmup_iters):
            self._submit()
        elif rec.marks == 0 and rec.alloc_events >= rec.next_try:
            rec.next_try = 2 * rec.alloc_events
            self._submit()

    def _submit(self) -> None:
        """Hand what is recorded to the background worker (no copy of the events here:
        the chunks are never written again)."""
        from ._learn import shared_worker

        if self._rec.alloc_events == 0 and len(self._rec.prefix) == 0:
            return  # nothing allocated through uvm_sched: nothing to learn (step() says why)
        t = self._touches
        touches = None if t is None else (t.clocks, t.addresses, t.device_type)
        req = {"events": self._rec.parts(), "mode": self.mode,
               "budget": self.budget, "hw": self._calib.hw(self.hw, self.device),
               "warmup_iters": self.warmup_iters, "plan_opts": self.plan_opts,
               "mode_reason": self._mode_reason,
               "touches": touches, "tune": self.tune}
        if not req["events"]:
            return
        logger.debug("uvm_sched: learning from %d recorded iterations in the background",
                     self._rec.marks)
        self._job = shared_worker(self.worker).submit(req)
        self._job.request_events = req["events"]  # what trace() shows once it is armed

    def _finish_learning(self) -> None:
        """The worker's answer: a plan is armed (entering ``armed``, which takes the job),
        or why there is none is noted."""
        # poll() calls this only for a job in flight whose result is there (done is set)
        assert self._job is not None and self._job.result is not None
        res = self._job.result
        if res["status"] == "ok":
            return self._enter(State.ARMED)
        self._job = None
        if res["status"] == "wait":
            logger.debug("a learned period with fewer repetitions than the %d warm-up "
                         "iterations: recording on", self.warmup_iters)
            return
        self._counters["learn_failures"] += 1
        self.last_error = res["error"]
        retry = self._rec.marks >= self.warmup_iters + 1
        # after a full warm-up it is a failure to see; before one (no markers, the
        # period tried at each doubling of the events) it is a step of recording
        logger.log(logging.WARNING if retry else logging.INFO,
                   "learning failed (%d so far), the allocator runs unplanned; %s: %s",
                   self._counters["learn_failures"],
                   "recording fresh iterations" if retry else "recording on",
                   self.last_error)
        if retry:
            self._relearn("learning failed")  # try again on fresh iterations
        self._problem("learn_failure", res["error"])

    def _check_recording(self) -> bool:
        """True (and a problem reported) when what is being recorded cannot be learned
        from: recording off, or events lost to a full ring since the recording started."""
        from . import native

        st = native.stats()
        if not st.get("tracing", 1):
            if "tracing_off" not in {p["kind"] for p in self.problems[-1:]}:
                self._problem("tracing_off", "event recording is off (UVM_SCHED_TRACE=0 or "
                              "native.set_tracing(False)), so no iteration can be learned; "
                              "unset UVM_SCHED_TRACE or call native.set_tracing(True)")
            return True
        dropped = int(st.get("events_dropped", 0))
        if self._rec.dropped_at is None:
            self._rec.dropped_at = dropped
        elif dropped > self._rec.dropped_at:
            lost = dropped - self._rec.dropped_at
            self._enter(State.RECORDING)  # a recording with a hole in it is not an iteration
            self._problem("events_dropped",
                          f"the event ring dropped {lost:,} events while recording (it holds "
                          f"{st.get('ring_capacity', '?')} records): an iteration does not fit "
                          "between two polls; raise UVM_SCHED_RING_EVENTS (e.g. "
                          "UVM_SCHED_RING_EVENTS=4M) or call step()/poll() more often")
            return True
        return False

    # -- problems -------------------------------------------------------------------------
    def _problem(self, kind: str, message: str) -> None:
        """A runtime problem that leaves the allocator unplanned: kept in ``problems``, the
        first of its kind warned about (strict: raised)."""
        self.last_error = message
        self.problems.append({"kind": kind, "message": message, "state": self.state.value,
                              "time_s": time.time()})
        del self.problems[:-_MAX_PROBLEMS]
        if self.strict:
            raise SchedulerError(f"uvm_sched Scheduler: {message}")
        if kind not in self._warned:
            self._warned.add(kind)
            warnings.warn(f"uvm_sched Scheduler runs unplanned: {message} (further problems of "
                          "this kind: Scheduler.stats()['problems'])", SchedulerWarning,
                          stacklevel=3)

    # -- watching an armed plan -----------------------------------------------------------
    def _watch(self, ev: np.ndarray, bad: int) -> None:
        if self._tuner is not None:
            if self._tuner.feed(ev):
                self._next_candidate()
        elif self._dog is not None and self.plan is not None \
                and self.plan.meta.get("sync") == "marker":
            self._watchdog(ev)
            if self.state is not State.ARMED:
                return
        self._steps.after(self, ev)  # other kinds' plans at markers; a period plan in phase
        run = self._steps.iterations(ev["kind"], self._counters)  # (the executor's)
        assert self.plan is not None  # armed: a plan is held
        if (bad if self.plan.meta.get("sync") == "marker" else run) >= self.relearn_after:
            self._relearn(f"{self.relearn_after} steps in a row diverged from the plan")

    def _relearn(self, why: str) -> None:
        """Record afresh to learn again, unless ``relearn_limit`` is spent: then watch."""
        self.watching = spend_relearn(self._counters, self.relearn_limit, why)
        self._enter(State.WATCHING if self.watching else State.RECORDING)

    def _next_candidate(self) -> None:
        """The tuner's candidate had its iterations: arm the next one, or keep the fastest."""
        tu = self._tuner
        assert tu is not None  # _watch calls this only while tuning
        p = tu.advance()
        if p is not None:
            logger.info("tuning: armed candidate %s", tu.label)
        else:
            self.tuning = tu.medians()
            best = min(self.tuning, key=self.tuning.__getitem__)
            p = dict(tu.cands)[best]
            self._tuner = None
            logger.info("tuned: keeping %s (median s per iteration: %s)", best, ", ".join(
                f"{label}: {t:.6f}" for label, t in self.tuning.items()))
            if p is self.plan:
                return
        self._rearm(p)

    def _watchdog(self, ev: np.ndarray) -> None:
        """Per marker: what the watchdog (``_runtime_clock.Watchdog``) says to do: disarm
        to time no plan, arm the plan again, or disarm it for good."""
        from . import native

        dog = self._dog
        assert dog is not None  # _watch calls this only with a watchdog
        if dog.plan is not self.plan:
            dog.reset(self.plan)  # a new plan (learned, re-learned or tuned): judge it afresh
        for step in dog.feed(ev):
            if step == "disarm":
                native.disarm()  # at a marker: the next iteration runs with no plan
            elif step == "rearm":
                assert self.plan is not None  # _watch runs the watchdog only with a plan
                self._rearm(self.plan)
            else:  # "lost"
                self._enter(State.UNPLANNED)
                self._problem("watchdog", dog.verdict())

    def _rearm(self, p: Plan) -> None:
        """Arm ``p`` from this marker on, in place of what is armed (same persistent blocks)."""
        from . import native

        native.disarm()
        p.meta.update(device=self.device, rank=self.rank)
        assert self.device is not None  # start() set it, before any plan is armed
        native.arm_plan(p, self._addrs, device=self.device, start_now=True)  # at a marker
        self.plan = p

    # -- transitions: _enter() runs one row of _TRANSITIONS (the table after the actions) --
    def _enter(self, new: State) -> None:
        """Go from ``state`` to ``new``: run the actions ``_TRANSITIONS`` lists for this
        pair, in order, then change ``state`` (when an action raises, the state stays: the
        one that may, arming, comes first). ``StateError`` for a pair the table lacks."""
        actions = self._TRANSITIONS.get((self.state, new))
        if actions is None:
            nexts = [str(b) for a, b in self._TRANSITIONS if a is self.state]
            raise StateError(
                f"uvm_sched internal error: a Scheduler in state {self.state!s} cannot go to "
                f"{new!s} (from {self.state!s} it goes to "
                f"{', '.join(nexts) if nexts else 'no other state: it is final'}); "
                "please report it with the log of the 'uvm_sched.runtime' logger")
        for act in actions:
            act(self)
        self.state = new

    def _find_device(self) -> None:
        if self.device is None:
            self.device = current_device()
        self.rank = rank()
        self._calib.hw(self.hw, self.device)  # its profile, measured once (_runtime_calib)

    def _warm_worker(self) -> None:
        from . import native
        from ._learn import shared_worker

        shared_worker(self.worker).warm()  # the planner loads while the loop warms up
        native._DRAIN_MEMORY.start()  # (its helper thread: not started from a step())

    def _install_hook(self) -> None:
        self._hook_handle = install_hook(self._hook_pref, lambda *a, **k: self.step())

    def _start_touches(self) -> None:
        if self._touches is not None:
            self._touches.clear()  # a fresh recording: fresh samples
            self._touches, self._mode_reason = start_tracer(self._touches, self.mode,
                                                            self._mode_reason)

    def _stop_touches(self) -> None:
        if self._touches is not None:
            self._touches.stop()  # sampling costs per op: only while learning

    def _log_recording(self) -> None:
        logger.info("recording: %d warm-up iterations, then a plan (mode %s) for budget %r on "
                    "%s (markers: %s)", self.warmup_iters, self._mode_reason, self.budget,
                    getattr(self.hw, "name", self.hw),
                    "optimizer hook" if self._hook_handle is not None
                    else "step() or the learned period")

    def _fresh_recording(self) -> None:
        self._start_touches()
        # the blocks alive now (weights, optimizer state) start the new recording, in
        # their allocation order, so persistent ordinals and addresses stay right
        self._rec = Recording(self._live, self.min_period_events)
        self._steps.reset_run()

    def _arm_learned(self) -> None:
        """Arm the plan the worker made (``_job``, taken here), on the training thread:
        cheap. At a marker it starts there; synced on the learned period, at the phase the
        loop has reached."""
        from . import native

        job, self._job = self._job, None
        assert job is not None and job.result is not None  # _finish_learning enters with it
        res = job.result
        self._counters["plan_time_s"] += job.wall_s
        self._counters["plan_kernels"] = res.get("kernels")
        p, pat, addrs = res["plan"], res["pattern"], res["addrs"]
        phase_allocs: list[int] | None = None
        if p.meta.get("sync") == "period":  # arm now, mid-iteration if need be
            phase, phase_allocs = self._rec.period_phase(
                res["start_ev"], int(p.meta["period_events"]), self._live,
                len(p.meta["alloc_sizes"]), res.get("start_level"))
            start_now = True
        else:
            phase, start_now = 0, self._at_marker
        p.meta.update(device=self.device, rank=self.rank)
        assert self.device is not None  # start() set it, before any plan is armed
        t0 = time.perf_counter()
        native.arm_plan(p, addrs, device=self.device, start_now=start_now, phase=phase,
                        phase_allocs=phase_allocs, table=res["table"], resync=True)
        self._counters["arm_time_s"] += time.perf_counter() - t0
        self.plan, self.pattern, self._addrs = p, pat, addrs
        self._learnt_events = job.request_events
        self._steps.new_plan(res["kinds"], start_now, res.get("start_level"))
        self.samples = res["samples"]
        self.tuning_skipped = res["tuning_skipped"]
        # the tuning candidates' plans were made with the plan (_learn.learn)
        cands = [(label, p if c is None else c) for label, c in res["cands"]]
        self._tuner = Tuner(cands, self.tune_iters) if cands else None
        self._counters["plans"] += 1
        if self._counters["steps_before_plan"] is None:
            self._counters["steps_before_plan"] = self._counters["steps"]
        self.last_error = None
        logger.info("learned: period %d allocator events (from %s, %d iterations), mode %s "
                    "(%s); planned %d actions for a budget of %s bytes in the background "
                    "(%.2f s)", int(p.meta["period_events"]), pat.source, len(pat.iterations),
                    p.meta["mode"], p.meta.get("mode_reason"), len(p),
                    f"{int(p.meta['budget_bytes']):,}", job.wall_s)
        logger.info("armed: plan %d, sync on %s%s", self._counters["plans"], p.meta.get("sync"),
                    f" at phase {phase} of the period" if phase else "")

    def _log_tuning(self) -> None:
        if self.tuning_skipped:
            logger.info("tuning skipped: %s", self.tuning_skipped)
        elif self._tuner is not None:
            logger.info("tuning: %d candidates, %d timed iterations each: %s",
                        len(self._tuner.cands), self.tune_iters,
                        ", ".join(str(label) for label, _ in self._tuner.cands))

    def _drop_recording(self) -> None:
        self._rec.release(self._live[:0])
        self._steps.reset_run()

    def _disarm(self) -> None:
        from . import native

        native.disarm()  # (a no-op when the watchdog has it disarmed already)

    def _log_relearn(self) -> None:
        logger.info("disarmed: %d steps in a row diverged from the plan; relearning",
                    self.relearn_after)

    def _drop_plan(self) -> None:
        self._counters["relearns"] += 1
        self.plan = None
        self._tuner = None

    def _count_watchdog_disarm(self) -> None:
        assert self._dog is not None  # only the watchdog leads to unplanned
        r = self._dog.report()
        self._counters["watchdog_disarms"] += 1
        logger.info("disarmed by the watchdog: the plan's iterations %.6f s, no plan's %.6f s",
                    r["plan_s"], r["no_plan_s"])

    def _log_watching(self) -> None:
        logger.info("watching: %s", self.watching)

    def _log_closing(self) -> None:
        logger.info("disarmed: the scheduler was closed")

    def _release(self) -> None:
        self._remove_hook()
        self._stop_touches()
        self._job = None  # a plan still being made is not armed any more

    def _remove_hook(self) -> None:
        if self._hook_handle is not None:
            self._hook_handle.remove()
            self._hook_handle = None

    def _log_closed(self) -> None:
        logger.info("closed: %s", self._summary())

    # (prev, new) -> what happens, in order; the only place a state changes (_enter)
    _TRANSITIONS: ClassVar[dict[tuple[State, State], tuple[_Action, ...]]] = {
        (State.IDLE, State.RECORDING):
            (_find_device, _warm_worker, _install_hook, _start_touches, _log_recording),
        (State.IDLE, State.CLOSED): (_release, _log_closed),
        (State.RECORDING, State.RECORDING): (_fresh_recording,),
        (State.RECORDING, State.ARMED):
            (_arm_learned, _log_tuning, _stop_touches, _drop_recording),
        (State.RECORDING, State.CLOSED): (_release, _log_closed),
        (State.ARMED, State.RECORDING): (_disarm, _log_relearn, _drop_plan, _fresh_recording),
        (State.ARMED, State.UNPLANNED): (_disarm, _count_watchdog_disarm),
        (State.ARMED, State.CLOSED): (_disarm, _log_closing, _release, _log_closed),
        (State.UNPLANNED, State.CLOSED): (_release, _log_closed),
        (State.ARMED, State.WATCHING): (_disarm, _log_watching),
        (State.RECORDING, State.WATCHING): (_stop_touches, _drop_recording, _log_watching),
        (State.WATCHING, State.CLOSED): (_release, _log_closed),
    }

    # -- reporting ----------------------------------------------------------------------
    def trace(self):
        """The allocator events as a ``Trace`` whose meta names this process's ``device``
        and ``rank`` (save one per rank: ``sched.trace().save(f"trace{rank}.parquet")``):
        while recording, those recorded so far; once a plan is armed, the ones it was
        learnt from."""
        from .trace._native import trace_from_events

        with self._lock:
            self.poll()
            if self.state is State.RECORDING or not self._learnt_events:
                parts = self._rec.parts()
            else:
                parts = self._learnt_events
            events = np.concatenate(parts) if parts else self._live[:0]
            trace = trace_from_events(events)
            trace.meta.update(source="uvm_sched.Scheduler", device=self.device, rank=self.rank)
            return trace

    def stats(self) -> dict[str, Any]:
        """State, counters (plans, relearns, iterations armed, divergences seen, learn
        failures, ``plan_time_s``: seconds from handing the recording to the background
        worker to its plan, summed over plans; ``steps``: markers seen,
        ``steps_before_plan``: markers seen when the first plan was armed (None before),
        ``steps_while_planning``: markers the loop ran through while a plan was being made;
        ``planning``: one is being made now; ``arm_time_s``: seconds the training thread
        spent arming plans; ``plan_kernels``: the last plan's, "compiled", "python" (numba
        was compiling them) or None (a thread worker)), ``problems`` (the history of runtime
        problems: kind, message, state, time), ``predicted`` (in every state: the planner's
        prediction for the plan held, ``{}`` before the first plan and while re-learning),
        the steps (``_runtime_kinds.Steps.report``), ``watching`` (why learning stopped, or
        None), the native counters (``native``) and what calibration measured
        (``calibration``). ``state`` is a plain string, like the rest (JSON)."""
        from . import native

        with self._lock:
            self.poll()  # counters as of now
            out: dict[str, Any] = {"state": self.state.value, **self._counters,
                                   "planning": self._job is not None,
                                   "last_error": self.last_error, "device": self.device,
                                   "rank": self.rank,
                                   "problems": [dict(p) for p in self.problems]}
            if self.plan is not None:
                out["plan_actions"] = len(self.plan)
                out["budget_bytes"] = int(self.plan.meta["budget_bytes"])
                out["period_events"] = int(self.plan.meta["period_events"])
                out["sync"] = self.plan.meta.get("sync")
                out["guard"] = self.plan.meta.get("guard")
            # the mode the plan held ran in and why (before one: what is planned)
            out["mode"] = self.plan.meta["mode"] if self.plan is not None else self.mode
            out["mode_reason"] = self.plan.meta.get("mode_reason") if self.plan is not None \
                else self._mode_reason
            out["predicted"] = dict(self.plan.meta.get("predicted") or {}) \
                if self.plan is not None else {}
            out["tuning"] = dict(self.tuning)
            out.update(self._steps.report(), watching=self.watching)
            if self._dog is not None and self._dog.plan is not None:
                out["watchdog"] = self._dog.report()
            if self.tuning_skipped:
                out["tuning_skipped"] = self.tuning_skipped
            if self._tuner is not None:
                out["tuning_now"] = self._tuner.label
            out["native"], out["calibration"] = native.stats(), self._calib.report()
            if isinstance(self._touches, FaultSampler):
                out["fault_sampling"] = self._touches.report()
            return out

    def _summary(self) -> str:
        c = self._counters
        return (f"{c['plans']} plans, {c['relearns']} relearns, {c['iterations_armed']} "
                f"iterations armed, {c['divergences']} divergences, "
                f"{c['learn_failures']} learn failures")

    def save_trace(self, path: Any) -> Any:
        """Write this run's allocator trace (``trace()``) to ``path`` as Parquet, what
        ``uvm-sched`` and ``uvm_sched.trace.load`` read, and return it."""
        trace = self.trace()
        trace.save(path)
        return trace

    def __repr__(self) -> str:
        return (f"<Scheduler {self.state} mode={self.mode} budget={self.budget!r} "
                f"plans={self._counters['plans']} relearns={self._counters['relearns']}>")
