"""The runtime loop: record warm-up iterations, learn the pattern, plan, arm the native
executor, keep watching, and re-learn when the workload changes.

``Scheduler(budget=..., hw=..., warmup_iters=3, mode="oblivious")`` drives the allocator
of ``uvm_sched`` (the native core). Iteration markers, in order of preference:

* ``scheduler.step()`` (or ``uvm_sched.step()`` followed by ``scheduler.poll()``);
* for PyTorch, a global optimizer step hook (``torch.optim.optimizer.
  register_optimizer_step_post_hook``), installed when torch is already imported;
* neither: the period learned from the allocator events (``sync="period"``), checked at
  every ``poll()``.

States: ``recording`` (draining events, counting iterations) -> ``armed`` (a plan is
executed by the native core; events are drained and only the divergences counted) ->
back to ``recording`` when divergences persist for ``relearn_after`` iterations in a row
(a new batch size, sequence length...); ``armed`` -> ``unplanned`` when the watchdog
(below) finds the plan slower than none (it stays disarmed). A plan is only a hint: a wrong one costs time,
never correctness, so every failure to learn or plan leaves the allocator running
unplanned. Such a problem is never silent: the first of each kind (a failure to learn or
plan, events dropped by a ring too small for an iteration, event recording switched off)
emits one ``SchedulerWarning``, ``stats()["problems"]`` keeps their history and
``stats()["last_error"]`` the latest; ``Scheduler(strict=True)`` raises
``SchedulerError`` instead. Options are checked when the Scheduler is made (a bad one is a
``ValueError``/``TypeError`` there, not an error inside the optimizer hook later).

Learning and planning (seconds on an LLM-sized iteration) never run on the training
thread: once enough is recorded, the events go to a background worker (``_learn``: a
helper process by default) and the loop keeps running unplanned, still ``recording``;
the plan is armed at the first ``poll()`` (a ``step()``, the hook) after it is ready --
at a marker it starts with the iteration that begins there, elsewhere with the next one
(or, synced on the learned period, at the phase the loop has reached).
``wait_planned(timeout)`` blocks until the plan being made is armed (tests, scripts).
The training thread's own work per drained event is vectorised (numpy over the batch).

The watchdog (with iteration markers): a plan must pay by the clock. Once armed (and tuned),
the plan's iterations are timed between markers for ``watchdog_iters`` iterations, then the
same number with the plan disarmed ("no plan", the candidate every plan is measured
against), then the plan is armed again and every later iteration is timed. When the median
of the last ``watchdog_iters`` armed iterations exceeds the unplanned median by more than
``WATCHDOG_SLACK``, the plan is disarmed for good (state ``unplanned``), ``stats()
["watchdog"]`` says so with both figures, and it is a problem like the others (one ``SchedulerWarning``; strict: raised).
"""
from __future__ import annotations

import dataclasses
import logging
import os
import statistics
import sys
import threading
import time
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from ._errors import Error, Warning as _Warning

if TYPE_CHECKING:  # for annotations only: importing them costs the Scheduler's start-up
    from ._learn import Job
    from .planner import Plan

__all__ = ["Scheduler", "SchedulerWarning", "SchedulerError"]

_MAX_PROBLEMS = 100  # history kept in stats()["problems"] (oldest dropped first)


class SchedulerWarning(_Warning, RuntimeWarning):
    """The Scheduler could not learn or plan, and the allocator runs unplanned."""


class SchedulerError(Error, RuntimeError):
    """With ``Scheduler(strict=True)``: what would have been a ``SchedulerWarning``."""


logger = logging.getLogger(__name__)

# event kinds of the native ring (uvm_sched.native.EVENT_KINDS)
_ALLOC, _FREE, _MARK, _ITER, _DIVERGENCE = 0, 1, 3, 4, 37

# How much slower than no plan an armed plan may measure before the watchdog drops it (a
# share of the unplanned iteration time): the issue's bound; below it lies timing noise of
# a median over a few iterations.
WATCHDOG_SLACK = 0.03


@dataclasses.dataclass
class _Watchdog:
    """Iteration times (s) of one plan armed and of no plan, taken between markers.
    ``phase``: ``"plan"`` (timing the armed plan) -> ``"none"`` (disarmed, timing no plan)
    -> ``"watch"`` (armed again, every iteration timed) -> ``"disarmed"`` (it lost)."""

    iters: int
    plan: Any = None
    phase: str = "plan"
    skip: int = 1  # iterations not timed after a switch (they settle)
    last: int | None = None  # t_ns of the last marker
    bad: bool = False  # the iteration under way diverged
    plan_s: list = dataclasses.field(default_factory=list)
    none_s: list = dataclasses.field(default_factory=list)

    def reset(self, plan) -> None:
        self.plan, self.phase, self.skip, self.last, self.bad = plan, "plan", 1, None, False
        self.plan_s, self.none_s = [], []

    def switch(self, phase: str) -> None:
        self.phase, self.skip, self.last, self.bad = phase, 1, None, False

    def report(self) -> dict:
        n = self.iters
        return {"phase": self.phase,
                "plan_s": statistics.median(self.plan_s[-n:]) if self.plan_s else None,
                "no_plan_s": statistics.median(self.none_s) if self.none_s else None,
                "iterations_timed": len(self.plan_s) + len(self.none_s)}


class Scheduler:
    """Learn and execute a memory plan for the running training loop.

    ``budget``: bytes, ``"50%"`` (of the recorded peak) or ``"40GiB"``; ``hw``: profile
    name/path; ``warmup_iters``: iterations recorded before planning; ``mode``:
    ``"oblivious"``/``"sampled"``; ``relearn_after``: iterations in a row with a divergence
    before re-learning; ``hook``: install the PyTorch optimizer hook (``"auto"``: when torch
    is imported); ``plan_opts``: extra options for ``uvm_sched.plan``;
    ``min_period_events``: allocator events recorded before the period is looked for when
    there are no markers; ``strict``: raise ``SchedulerError`` where a runtime problem would
    otherwise be a ``SchedulerWarning``. Every option is checked here (``TypeError`` /
    ``ValueError``, ``ProfileError`` for ``hw``).

    ``mode="sampled"`` without ``plan_opts["samples"]`` records the samples itself: from
    ``start()`` until the plan is armed (the warm-up iterations, again while re-learning) a
    dispatch-mode tracer (``integrations.torch.TouchRecorder``) notes which blocks each
    PyTorch op on ``touch_device`` touches; ``samples`` holds what the plan was made with.
    Start, step and close the scheduler in the thread that runs the training loop (the
    tracer is a PyTorch mode of that thread).

    ``tune``: plans to try beside the configured one (``planner.tuning_candidates``):
    guards (ticks, or ``"auto"``), e.g. ``(16, 8)`` -- how far from an allocation or a free
    a block may still be read is what the guard bets on, and it differs between workloads
    -- and, in sampled mode, ``"oblivious"`` (the plan without the samples). With iteration
    markers the Scheduler arms each candidate in turn for ``tune_iters`` iterations (after
    one to settle), times them between markers, and keeps the fastest; ``tuning`` holds the
    median seconds per candidate. ``sim.simulate(..., "uvm-sched", tune=...)`` does the same
    with the simulator standing in for the clock.

    ``worker``: where learning and planning run, ``"process"`` (a helper process shared by
    every Scheduler of this process) or ``"thread"`` (a thread of this process: no second
    process, but it competes with the loop for the GIL).
    ``watchdog_iters``: iterations per measurement of the watchdog (see the module
    docstring; 0 turns it off): with markers, the plan is timed against no plan and
    disarmed when it is more than ``WATCHDOG_SLACK`` slower.
    """

    def __init__(self, budget: Any = "100%", hw: Any = "h200-pcie5", warmup_iters: int = 3,
                 mode: str = "oblivious", *, relearn_after: int = 2, hook: Any = "auto",
                 plan_opts: dict | None = None, min_period_events: int = 64,
                 touch_device: str = "cuda", tune: Any = None, tune_iters: int = 2,
                 device: int | None = None, worker: str = "process",
                 strict: bool = False, watchdog_iters: int = 3) -> None:
        for name, v in (("warmup_iters", warmup_iters), ("relearn_after", relearn_after),
                        ("tune_iters", tune_iters), ("min_period_events", min_period_events),
                        ("watchdog_iters", watchdog_iters)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{name} must be an integer, got {v!r}")
            if v < (0 if name == "watchdog_iters" else 1):
                raise ValueError(f"{name} must be >= {0 if name == 'watchdog_iters' else 1}"
                                 f"{' (0: no watchdog)' if name == 'watchdog_iters' else ''}, "
                                 f"got {v}")
        if not isinstance(strict, bool):
            raise TypeError(f"strict must be True or False, got {strict!r}")
        if hook not in ("auto", True, False, None):
            raise ValueError(f"hook must be 'auto', True or False, got {hook!r}")
        _check_budget(budget)
        from .hw import load_profile

        load_profile(hw)  # ProfileError (a ValueError) now, not at the first plan
        plan_opts = _check_plan_opts(plan_opts)
        self.strict = strict
        self.problems: list[dict[str, Any]] = []  # history of runtime problems (oldest first)
        self._warned: set[str] = set()  # problem kinds already warned about
        if device is not None and (isinstance(device, bool) or
                                   not isinstance(device, (int, np.integer)) or device < 0):
            raise ValueError(f"device must be a CUDA device ordinal >= 0, got {device!r}")
        # the device whose memory the plan moves (None: torch's current device at start());
        # one process per GPU (torchrun) runs one Scheduler per rank, each on its own device
        self.device: int | None = None if device is None else int(device)
        self.rank: int = 0
        self._learnt_events: list[np.ndarray] = []  # what the armed plan was learned from
        if worker not in ("process", "thread"):
            raise ValueError(f"worker must be 'process' or 'thread', got {worker!r}")
        self.worker = worker
        self._job: Job | None = None  # the learn request in flight (a _learn.Job), None when idle
        self._dog = _Watchdog(int(watchdog_iters)) if watchdog_iters else None
        self.tune = tuple(tune) if tune else ()
        if self.tune:
            from .planner import tuning_candidates

            tuning_candidates(self.tune, mode, dict(plan_opts or {}))  # checks them now
        self.tune_iters = int(tune_iters)
        self.tuning: dict[str, float] = {}  # guard -> median measured iteration seconds
        self.tuning_skipped: str | None = None  # why a requested tuning did not run
        self._tuner: dict[str, Any] | None = None  # candidates and timings while tuning
        self._addrs: list[int] = []  # the armed plan's persistent ordinal -> address
        from .planner import MODES

        if mode not in MODES:
            raise ValueError(f"unknown planning mode {mode!r}; known: {', '.join(MODES)}")
        self._touches = None  # the dispatch-mode TouchRecorder of sampled mode
        self.samples = None  # the access samples the current plan was made with
        if mode == "sampled" and (plan_opts or {}).get("samples") is None:
            # the allocator's ring records allocations, not accesses: the samples come from
            # PyTorch's dispatcher during the warm-up iterations
            import importlib.util

            if importlib.util.find_spec("torch") is None:
                raise ValueError(
                    "Scheduler(mode='sampled') needs access samples, which the allocator does "
                    "not record: with PyTorch installed it records them itself during warm-up "
                    "(a dispatch-mode tracer); without it pass plan_opts={'samples': frame} "
                    "(one row per touch: block, persistent, tick; see "
                    "uvm_sched.planner.draw_samples for the format), or use mode='oblivious'")
            from .integrations.torch import TouchRecorder  # torch itself loads at start()

            self._touches = TouchRecorder(touch_device)
        self.budget = budget
        self.hw = hw
        self.warmup_iters = int(warmup_iters)
        self.mode = mode
        self.relearn_after = int(relearn_after)
        self.plan_opts = dict(plan_opts or {})
        self.min_period_events = int(min_period_events)
        self._hook_pref = hook
        self._hook_handle: Any = None  # torch's RemovableHandle (torch is optional)
        self._lock = threading.RLock()
        self.state = "idle"
        self.plan: Plan | None = None
        self.pattern = None
        # recording buffer (EVENT_DTYPE arrays) and blocks alive when it started
        from .native import EVENT_DTYPE

        self._chunks: list[np.ndarray] = []
        # every block alive: its ALLOC event, in allocation order (see _track_live)
        self._live = np.empty(0, EVENT_DTYPE)
        self._prefix = self._live  # ALLOC events of blocks alive when recording (re)started
        self._at_marker = False  # the last event drained was a MARK (an iteration starts)
        self._marks = 0
        self._alloc_events = 0
        self._next_try = self.min_period_events
        # watching
        self._div_iters = 0  # iterations in a row with a divergence
        self._iter_div = 0  # divergences in the current iteration
        # values: counts, seconds, and steps_before_plan (None until the first plan)
        self._counters: dict[str, Any] = {"plans": 0, "relearns": 0, "iterations_armed": 0,
                                          "divergences": 0, "learn_failures": 0,
                                          "plan_time_s": 0.0, "steps": 0,
                                          "steps_before_plan": None, "steps_while_planning": 0,
                                          "arm_time_s": 0.0, "watchdog_disarms": 0}
        self.last_error: str | None = None
        self._dropped_at: int | None = None  # the ring's drop count when recording started
        self._silence_checked = False  # the "no allocation passed through" warning, once

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> "Scheduler":
        """Begin recording (events already in the ring are kept: they hold the
        allocations of weights made before the scheduler started)."""
        with self._lock:
            if self.state != "idle":
                return self
            self.state = "recording"
            if self.device is None:
                self.device = _current_device()
            self.rank = _rank()
            from ._learn import shared_worker

            shared_worker(self.worker).warm()  # the planner loads while the loop warms up
            self._install_hook()
            self._start_touches()
            logger.info("recording: %d warm-up iterations, then a %s plan for budget %r on %s "
                        "(markers: %s)", self.warmup_iters, self.mode, self.budget,
                        getattr(self.hw, "name", self.hw),
                        "optimizer hook" if self._hook_handle is not None
                        else "step() or the learned period")
            self.poll()
        return self

    def _start_touches(self) -> None:
        if self._touches is not None:
            self._touches.clear()  # a fresh recording: fresh samples
            self._touches.start()

    def _stop_touches(self) -> None:
        if self._touches is not None:
            self._touches.stop()

    def close(self) -> None:
        """Disarm the plan and remove the hook (the allocator keeps running unplanned)."""
        with self._lock:
            if self.state == "armed":
                from . import native

                native.disarm()
                logger.info("disarmed: the scheduler was closed")
            self._remove_hook()
            self._stop_touches()
            self._job = None  # a plan still being made is not armed any more
            self.state = "closed"
            logger.info("closed: %s", self._summary())

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
        if not self._silence_checked and self._marks >= 2:
            self._silence_checked = True
            if self._alloc_events == 0 and len(self._live) == 0 and self.state == "recording":
                self._problem("nothing_allocated", _silent_message(self._marks))

    def _install_hook(self) -> None:
        if self._hook_pref is False or self._hook_pref is None:
            return
        if self._hook_pref == "auto" and "torch" not in sys.modules:
            return
        try:
            from torch.optim.optimizer import register_optimizer_step_post_hook
        except Exception as e:  # torch absent or too old: markers must come from step()
            if self._hook_pref is True:
                raise RuntimeError(f"cannot install the optimizer step hook: {e}") from None
            return
        self._hook_handle = register_optimizer_step_post_hook(lambda *a, **k: self.step())

    def _remove_hook(self) -> None:
        if self._hook_handle is not None:
            self._hook_handle.remove()
            self._hook_handle = None

    # -- the loop -----------------------------------------------------------------------
    def poll(self) -> None:
        """Drain the allocator's events and advance the state machine (cheap; called by
        ``step()`` and the hook, or by the user where there are no markers)."""
        from . import native

        with self._lock:
            if self.state in ("idle", "closed"):
                return
            ev = native.drain_events()
            if len(ev):
                self._track_live(ev)
                k = ev["kind"]
                self._at_marker = int(k[-1]) == _MARK
                marks = int(np.count_nonzero(k == _MARK))
                self._counters["steps"] += marks
                if self._job is not None:
                    self._counters["steps_while_planning"] += marks
            if self.state == "recording":
                self._record(ev)
            elif self.state == "armed":
                self._watch(ev)

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
        return self.state == "armed"

    def _track_live(self, ev: np.ndarray) -> None:
        """Update the table of live blocks with a drained batch, vectorised. An ALLOC's
        ``arg`` is the global allocation ordinal (rising) and a FREE's names the ordinal it
        frees, so the table stays sorted by ordinal by appending, and a free is a binary
        search: O(b + f log(L + b)) for b events, f frees and L live blocks, no sort."""
        k = ev["kind"]
        arg = ev["arg"]
        ia = np.flatnonzero(k == _ALLOC)
        freed = arg[k == _FREE]
        keep_new = None
        if len(freed) and len(ia):
            # most blocks born in a batch die in it (activations): drop those first, so
            # only survivors are copied
            a_ord = arg[ia]
            a0 = int(a_ord[0])
            keep_new = np.ones(len(ia), bool)
            if int(a_ord[-1]) - a0 == len(ia) - 1:
                # consecutive ordinals (every one of them in this batch): a free's index is
                # arithmetic
                inb = (freed >= a0) & (freed <= int(a_ord[-1]))
                keep_new[freed[inb] - a0] = False
            else:
                j = np.searchsorted(a_ord, freed)
                inb = j < len(ia)
                jj = j[inb]
                hit = a_ord[jj] == freed[inb]
                keep_new[jj[hit]] = False
                inb[inb] = hit
            freed = freed[~inb]  # frees of blocks born before this batch
        # rows move as raw records: numpy copies a structured dtype field by field
        # (measured 20x slower than the same gather as void records)
        raw_t = np.dtype(f"V{ev.dtype.itemsize}")
        live = self._live.view(raw_t)
        if len(freed) and len(live):
            ords = self._live["arg"]
            i = np.searchsorted(ords, freed)
            ok = i < len(ords)  # (a block allocated before the scheduler started)
            i = i[ok]
            keep = np.ones(len(live), bool)
            keep[i[ords[i] == freed[ok]]] = False
            live = live[keep]
        if len(ia):
            born = ev.view(raw_t)[ia if keep_new is None else ia[keep_new]]
            live = np.concatenate([live, born]) if len(born) else live
        self._live = live.view(ev.dtype)

    def _live_ordinal(self, ordinals: np.ndarray) -> np.ndarray:
        """Whether each allocation ordinal is still alive (bool per ordinal)."""
        ords = self._live["arg"]
        i = np.minimum(np.searchsorted(ords, ordinals), max(len(ords) - 1, 0))
        return (ords[i] == ordinals) if len(ords) else np.zeros(len(ordinals), bool)

    def _record(self, ev: np.ndarray) -> None:
        if self._check_recording():
            return
        if len(ev):
            self._chunks.append(ev)
            k = ev["kind"]
            self._marks += int(np.count_nonzero(k == _MARK))
            self._alloc_events += int(np.count_nonzero((k == _ALLOC) | (k == _FREE)))
        if self._job is not None:
            if self._job.done.is_set():
                self._finish_learning()
            return  # (the loop runs on unplanned while the plan is made)
        # with markers: learn after warmup_iters complete iterations (+ the one starting)
        if self._marks >= self.warmup_iters + 1:
            self._submit()
        elif self._marks == 0 and self._alloc_events >= self._next_try:
            self._next_try = 2 * self._alloc_events
            self._submit()

    def _recorded_parts(self) -> list[np.ndarray]:
        """What this recording holds, in order: the prefix (blocks alive when it started),
        then the drained chunks (arrays, never copied)."""
        return ([self._prefix] if len(self._prefix) else []) + list(self._chunks)

    def _submit(self) -> None:
        """Hand what is recorded to the background worker (no copy of the events here:
        the chunks are never written again)."""
        from ._learn import shared_worker

        if self._alloc_events == 0 and len(self._prefix) == 0:
            return  # nothing allocated through uvm_sched: nothing to learn (step() says why)
        touches = None
        if self._touches is not None:
            touches = (self._touches.clocks, self._touches.addresses,
                       self._touches.device_type)
        req = {"events": self._recorded_parts(),
               "budget": self.budget, "hw": self.hw, "mode": self.mode,
               "warmup_iters": self.warmup_iters, "plan_opts": self.plan_opts,
               "touches": touches, "tune": self.tune}
        if not req["events"]:
            return
        logger.debug("uvm_sched: learning from %d recorded iterations in the background",
                     self._marks)
        self._job = shared_worker(self.worker).submit(req)
        self._job.request_events = req["events"]  # what trace() shows once it is armed

    def _finish_learning(self) -> None:
        """Arm the plan the worker made (on the training thread: cheap), or note why
        there is none."""
        job, self._job = self._job, None
        # poll() calls this only for a job in flight whose result is there (done is set)
        assert job is not None and job.result is not None
        res = job.result
        if res["status"] == "wait":
            logger.debug("a learned period with fewer repetitions than the %d warm-up "
                         "iterations: recording on", self.warmup_iters)
            return
        if res["status"] == "error":
            self._counters["learn_failures"] += 1
            self.last_error = res["error"]
            retry = self._marks >= self.warmup_iters + 1
            # after a full warm-up it is a failure to see; before one (no markers, the
            # period tried at each doubling of the events) it is a step of recording
            logger.log(logging.WARNING if retry else logging.INFO,
                       "learning failed (%d so far), the allocator runs unplanned; %s: %s",
                       self._counters["learn_failures"],
                       "recording fresh iterations" if retry else "recording on",
                       self.last_error)
            if retry:
                self._restart_recording()  # try again on fresh iterations
            self._problem("learn_failure", self.last_error)
            return
        from . import native

        self._counters["plan_time_s"] += job.wall_s
        p, pat, addrs = res["plan"], res["pattern"], res["addrs"]
        phase, phase_allocs = 0, None
        if p.meta.get("sync") == "period":
            # arm now, mid-iteration if need be: the phase is how far the current iteration
            # (counted in whole periods from the representative one's start) has got --
            # counted over everything recorded, including what ran while it was planned
            n_ev = len(self._prefix) + self._alloc_events
            phase = (n_ev - res["start_ev"]) % int(p.meta["period_events"])
            # its allocations so far, in order; 0 for one already freed (its rows are skipped)
            tail = self._last_allocator_events(phase)
            tail = tail[tail["kind"] == _ALLOC]
            same = self._live_ordinal(tail["arg"])  # allocated then and still alive
            phase_allocs = np.where(same, tail["addr"], 0).astype(np.int64).tolist()
            # more than the plan knows: diverged already (the next allocation says so)
            phase_allocs = phase_allocs[:len(p.meta["alloc_sizes"])]
            start_now = True
        else:
            start_now = self._at_marker
        p.meta.update(device=self.device, rank=self.rank)
        self._learnt_events = job.request_events
        assert self.device is not None  # start() set it, before any plan is armed
        t0 = time.perf_counter()
        native.arm_plan(p, addrs, device=self.device, start_now=start_now, phase=phase,
                        phase_allocs=phase_allocs, table=res["table"])
        self._counters["arm_time_s"] += time.perf_counter() - t0
        self.plan, self.pattern, self._addrs = p, pat, addrs
        self._start_tuning(res)
        self.samples = res["samples"]
        self._stop_touches()  # sampling costs per op: only while learning
        self.state = "armed"
        self._counters["plans"] += 1
        if self._counters["steps_before_plan"] is None:
            self._counters["steps_before_plan"] = self._counters["steps"]
        self._div_iters = self._iter_div = 0
        self._chunks = []
        self._prefix = self._live[:0]
        self.last_error = None
        logger.info("learned: period %d allocator events (from %s, %d iterations), mode %s; "
                    "planned %d actions for a budget of %s bytes in the background (%.2f s)",
                    int(p.meta["period_events"]), pat.source, len(pat.iterations), self.mode,
                    len(p), f"{int(p.meta['budget_bytes']):,}", job.wall_s)
        logger.info("armed: plan %d, sync on %s%s", self._counters["plans"], p.meta.get("sync"),
                    f" at phase {phase} of the period" if phase else "")
        if self.tuning_skipped:
            logger.info("tuning skipped: %s", self.tuning_skipped)
        elif self._tuner is not None:
            logger.info("tuning: %d candidates, %d timed iterations each: %s",
                        len(self._tuner["cands"]), self.tune_iters,
                        ", ".join(str(label) for label, _ in self._tuner["cands"]))

    def _last_allocator_events(self, n: int) -> np.ndarray:
        """The last ``n`` ALLOC/FREE events recorded (prefix included), oldest first."""
        parts: list[np.ndarray] = []
        for c in reversed([self._prefix] + self._chunks):
            if n <= 0:
                break
            k = c["kind"]
            rows = c[(k == _ALLOC) | (k == _FREE)]
            parts.append(rows[max(0, len(rows) - n):])
            n -= len(parts[-1])
        return np.concatenate(parts[::-1]) if parts else self._prefix[:0]

    # -- problems -------------------------------------------------------------------------
    def _problem(self, kind: str, message: str) -> None:
        """A runtime problem that leaves the allocator unplanned: kept in ``problems``, the
        first of its kind warned about (strict: raised)."""
        self.last_error = message
        self.problems.append({"kind": kind, "message": message, "state": self.state,
                              "time_s": time.time()})
        del self.problems[:-_MAX_PROBLEMS]
        if self.strict:
            raise SchedulerError(f"uvm_sched Scheduler: {message}")
        if kind not in self._warned:
            self._warned.add(kind)
            warnings.warn(f"uvm_sched Scheduler runs unplanned: {message} (further problems of "
                          "this kind: Scheduler.stats()['problems'])", SchedulerWarning,
                          stacklevel=3)

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
        if self._dropped_at is None:
            self._dropped_at = dropped
        elif dropped > self._dropped_at:
            lost = dropped - self._dropped_at
            self._dropped_at = dropped
            self._restart_recording()  # a recording with a hole in it is not an iteration
            self._problem("events_dropped",
                          f"the event ring dropped {lost:,} events while recording (it holds "
                          f"{st.get('ring_capacity', '?')} records): an iteration does not fit "
                          "between two polls; raise UVM_SCHED_RING_EVENTS (e.g. "
                          "UVM_SCHED_RING_EVENTS=4M) or call step()/poll() more often")
            return True
        return False

    # -- tuning the guard by the clock -------------------------------------------------------
    def _start_tuning(self, res: dict) -> None:
        """The candidates' plans were made with the plan (``_learn.learn``)."""
        self._tuner = None
        self.tuning_skipped = res["tuning_skipped"]
        if not res["cands"]:
            return
        cands = [(label, self.plan if p is None else p) for label, p in res["cands"]]
        self._tuner = {"cands": cands, "i": 0, "times": [[] for _ in cands], "last": None,
                       "skip": 1, "bad": False}

    def _time_iterations(self, ev: np.ndarray) -> None:
        """Per marker: the iteration that ended counts for the armed candidate unless it
        diverged or came right after arming; enough of them, and the next one is armed."""
        tu = self._tuner
        assert tu is not None  # _watch calls this only while tuning
        k = ev["kind"]
        for i in np.flatnonzero((k == _MARK) | (k == _DIVERGENCE)).tolist():
            if k[i] == _DIVERGENCE:
                tu["bad"] = True
                continue
            now = int(ev["t_ns"][i])
            if tu["last"] is not None and not tu["bad"]:
                if tu["skip"]:
                    tu["skip"] -= 1
                else:
                    tu["times"][tu["i"]].append((now - tu["last"]) * 1e-9)
            tu["last"], tu["bad"] = now, False
            if len(tu["times"][tu["i"]]) >= self.tune_iters:
                self._next_candidate()
                return  # later markers of this batch ran before the switch

    def _next_candidate(self) -> None:
        from . import native

        tu = self._tuner
        assert tu is not None  # _time_iterations calls this only while tuning
        tu["i"] += 1
        if tu["i"] < len(tu["cands"]):
            p = tu["cands"][tu["i"]][1]
            tu.update(last=None, skip=1, bad=False)
            logger.info("tuning: armed candidate %s", tu["cands"][tu["i"]][0])
        else:
            import statistics

            self.tuning = {label: statistics.median(t)
                           for (label, _), t in zip(tu["cands"], tu["times"])}
            best = min(self.tuning, key=self.tuning.__getitem__)
            p = dict(tu["cands"])[best]
            self._tuner = None
            logger.info("tuned: keeping %s (median s per iteration: %s)", best, ", ".join(
                f"{label}: {t:.6f}" for label, t in self.tuning.items()))
            if p is self.plan:
                return
        native.disarm()
        p.meta.update(device=self.device, rank=self.rank)
        assert self.device is not None  # start() set it, before any plan is armed
        native.arm_plan(p, self._addrs, device=self.device, start_now=True)  # at a marker
        self.plan = p

    def _watch(self, ev: np.ndarray) -> None:
        if self._tuner is not None:
            self._time_iterations(ev)
        elif self._dog is not None and self.plan is not None \
                and self.plan.meta.get("sync") == "marker":
            self._watchdog(ev)
            if self.state != "armed":
                return
        k = ev["kind"]
        for kind in k[(k == _ITER) | (k == _DIVERGENCE)].tolist():
            if kind == _DIVERGENCE:
                self._iter_div += 1
                self._counters["divergences"] += 1
                continue
            # a new iteration starts: judge the one that ended
            self._counters["iterations_armed"] += 1
            self._div_iters = self._div_iters + 1 if self._iter_div else 0
            logger.debug("armed iteration %d ended: %d divergences (%d iterations in a row "
                         "with one)", self._counters["iterations_armed"], self._iter_div,
                         self._div_iters)
            self._iter_div = 0
        if self._div_iters >= self.relearn_after:
            from . import native

            native.disarm()
            logger.info("disarmed: %d iterations in a row diverged from the learned one "
                        "(relearn_after=%d); relearning", self._div_iters, self.relearn_after)
            self._counters["relearns"] += 1
            self.plan = None
            self._tuner = None
            self._restart_recording()

    # -- the watchdog: the plan against no plan, by the clock ---------------------------------
    def _watchdog(self, ev: np.ndarray) -> None:
        """Per marker: time the iteration that ended for the phase it ran in (see
        ``_Watchdog``); move on when a phase has its iterations; disarm a plan that loses."""
        from . import native

        dog = self._dog
        assert dog is not None  # _watch calls this only with a watchdog
        if dog.plan is not self.plan:
            dog.reset(self.plan)  # a new plan (learned, re-learned or tuned): judge it afresh
        k = ev["kind"]
        n = dog.iters
        for i in np.flatnonzero((k == _MARK) | (k == _DIVERGENCE)).tolist():
            if k[i] == _DIVERGENCE:
                dog.bad = True
                continue
            now = int(ev["t_ns"][i])
            if dog.last is not None and not dog.bad:
                if dog.skip:
                    dog.skip -= 1
                else:
                    (dog.none_s if dog.phase == "none" else dog.plan_s).append((now - dog.last) * 1e-9)
            dog.last, dog.bad = now, False
            if dog.phase == "plan" and len(dog.plan_s) >= n:
                native.disarm()  # at a marker: the next iteration runs with no plan
                dog.switch("none")
            elif dog.phase == "none" and len(dog.none_s) >= n:
                if self._plan_loses(dog):
                    return self._disarm_by_watchdog(dog)
                assert self.device is not None  # start() set it
                native.arm_plan(self.plan, self._addrs, device=self.device, start_now=True)
                dog.switch("watch")
            elif dog.phase == "watch" and self._plan_loses(dog):
                native.disarm()
                return self._disarm_by_watchdog(dog)

    @staticmethod
    def _plan_loses(dog: _Watchdog) -> bool:
        n = dog.iters
        if len(dog.plan_s) < n or len(dog.none_s) < n:
            return False
        return statistics.median(dog.plan_s[-n:]) > (1 + WATCHDOG_SLACK) * statistics.median(dog.none_s)

    def _disarm_by_watchdog(self, dog: _Watchdog) -> None:
        r = dog.report()
        dog.phase = "disarmed"
        self.state = "unplanned"
        self._counters["watchdog_disarms"] += 1
        logger.info("disarmed by the watchdog: the plan's iterations %.6f s, no plan's %.6f s",
                    r["plan_s"], r["no_plan_s"])
        self._problem("watchdog",
                      f"watchdog: the plan's iterations took {r['plan_s']:.6f} s (median of the "
                      f"last {dog.iters}), no plan's {r['no_plan_s']:.6f} s: more than "
                      f"{WATCHDOG_SLACK:.0%} slower, so it is disarmed")

    def _restart_recording(self) -> None:
        self.state = "recording"
        self._start_touches()
        # the blocks alive now (weights, optimizer state) start the new recording, in
        # their allocation order, so persistent ordinals and addresses stay right
        self._prefix = self._live  # (in allocation order)
        self._chunks = []
        self._marks = 0
        self._alloc_events = 0
        self._next_try = self.min_period_events
        self._div_iters = self._iter_div = 0
        self._dropped_at = None  # the ring's drop count when recording (re)started

    # -- reporting ----------------------------------------------------------------------
    def trace(self):
        """The allocator events as a ``Trace`` whose meta names this process's ``device``
        and ``rank`` (save one per rank: ``sched.trace().save(f"trace{rank}.parquet")``):
        while recording, those recorded so far; once a plan is armed, the ones it was
        learnt from."""
        from .trace._native import trace_from_events

        with self._lock:
            self.poll()
            if self.state == "recording" or not self._learnt_events:
                parts = self._recorded_parts()
            else:
                parts = self._learnt_events
            events = np.concatenate(parts) if parts else self._prefix[:0]
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
        spent arming plans), ``problems`` (the history of runtime problems: kind,
        message, state, time), the plan's prediction and the native counters."""
        from . import native

        with self._lock:
            self.poll()  # counters as of now
            out: dict[str, Any] = {"state": self.state, **self._counters,
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
            out["tuning"] = dict(self.tuning)
            if self._dog is not None and self._dog.plan is not None:
                out["watchdog"] = self._dog.report()
            if self.tuning_skipped:
                out["tuning_skipped"] = self.tuning_skipped
            if self._tuner is not None:
                assert self.plan is not None  # tuning starts once a plan is armed, ends with it
                out["tuning_now"] = self._tuner["cands"][self._tuner["i"]][0]
                out["predicted"] = dict(self.plan.meta.get("predicted", {}))
            out["native"] = native.stats()
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


def _silent_message(steps: int) -> str:
    """Why a Scheduler that sees steps sees no allocation, and what to do about it."""
    torch = sys.modules.get("torch")
    if torch is None:
        cause = "no allocation was made through uvm_sched (uvm_sched.malloc, its PyTorch/CuPy/Numba allocators)"
    elif not getattr(torch.version, "cuda", None) or not torch.cuda.is_available():
        cause = ("there is no CUDA here: this PyTorch's tensors live in CPU memory, which "
                 "uvm_sched's allocator never serves")
    else:
        from .integrations import torch as tint

        cause = ("uvm_sched's allocator is not PyTorch's CUDA allocator" if tint._ALLOCATOR is None
                 else "no CUDA allocation went through uvm_sched's allocator")
    return (f"uvm_sched.Scheduler saw {steps} steps but no allocation: {cause}, so it has "
            "nothing to learn or plan. Fix: on a GPU, call torch.cuda.memory."
            "change_current_allocator(uvm_sched.allocator()) before the first CUDA tensor; "
            "to study a CPU loop, record it (`uvm-sched record -- python train.py`, or "
            "`with uvm_sched.trace.recording() as rec:`) and plan offline")


def _current_device() -> int:
    """torch's current CUDA device when torch is loaded and sees CUDA, else 0."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return int(torch.cuda.current_device())
    return 0


def _rank() -> int:
    """This process's rank: torch.distributed's when initialised, else $RANK (torchrun
    sets it), else 0."""
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    return int(os.environ.get("RANK", "0") or 0)


def _check_budget(budget: Any) -> None:
    """A budget ``resolve_budget`` reads (checked against a stand-in peak of 1 GiB)."""
    if budget is None:
        return
    from ._budget import resolve_budget

    try:
        resolve_budget(budget, 1 << 30)
    except (TypeError, ValueError) as e:
        raise type(e)(f"Scheduler budget {budget!r}: {e}") from None


def _check_plan_opts(plan_opts: Any) -> dict:
    """``plan_opts`` as a dict of options ``planner.plan`` takes (``pattern`` is the
    Scheduler's own); TypeError/ValueError naming the first bad one."""
    if plan_opts is None:
        return {}
    if not isinstance(plan_opts, dict):
        raise TypeError(f"plan_opts must be a dict of planner options, got {type(plan_opts).__name__}")
    from .planner import PLAN_OPTIONS

    allowed = PLAN_OPTIONS - {"pattern"}
    bad = sorted(map(str, set(plan_opts) - allowed))
    if bad:
        raise TypeError(f"plan_opts has unknown option(s) {bad}; known: {sorted(allowed)}")
    g = plan_opts.get("guard", "auto")
    if g != "auto" and (isinstance(g, bool) or not isinstance(g, (int, np.integer)) or g < 0):
        raise ValueError(f"plan_opts guard must be ticks >= 0 or 'auto', got {g!r}")
    for k in ("discard", "populate", "complete_touches"):
        if k in plan_opts and not isinstance(plan_opts[k], (bool, np.bool_)):
            raise TypeError(f"plan_opts {k} must be True or False, got {plan_opts[k]!r}")
    if plan_opts.get("remote_fallback", "auto") not in (True, False, "auto"):
        raise ValueError(f"plan_opts remote_fallback must be True, False or 'auto', got "
                         f"{plan_opts['remote_fallback']!r}")
    lo: float  # ints here, floats in the range checks below
    for k, lo in (("rounds", 1), ("discard_min_bytes", 0), ("seed", 0)):
        v = plan_opts.get(k, lo)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"plan_opts {k} must be an integer >= {lo}, got {v!r}")
    for k, lo, hi in (("sample_rate", 0.0, 1.0), ("noise", 0.0, float("inf"))):
        v = plan_opts.get(k, hi if k == "sample_rate" else lo)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (
                (lo < v <= hi) if k == "sample_rate" else (lo <= v < hi)):
            raise ValueError(f"plan_opts {k} out of range, got {v!r}")
    return dict(plan_opts)
