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
unplanned and is reported in ``stats()["last_error"]``.

The watchdog (with iteration markers): a plan must pay by the clock. Once armed (and tuned),
the plan's iterations are timed between markers for ``watchdog_iters`` iterations, then the
same number with the plan disarmed ("no plan", the candidate every plan is measured
against), then the plan is armed again and every later iteration is timed. When the median
of the last ``watchdog_iters`` armed iterations exceeds the unplanned median by more than
``WATCHDOG_SLACK``, the plan is disarmed for good (state ``unplanned``), ``stats()
["watchdog"]`` says so with both figures, and one ``RuntimeWarning`` is issued.
"""
from __future__ import annotations

import dataclasses
import statistics
import sys
import threading
import time
import warnings
from typing import Any

import numpy as np

__all__ = ["Scheduler"]

# event kinds of the native ring (uvm_sched.native.EVENT_KINDS)
_ALLOC, _FREE, _MARK, _ITER, _DIVERGENCE = 0, 1, 3, 4, 37

# How much slower than no plan an armed plan may measure before the watchdog drops it (a
# share of the unplanned iteration time): the bound; below it lies timing noise of
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
    warned: bool = False

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
    there are no markers.

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

    ``watchdog_iters``: iterations per measurement of the watchdog (see the module
    docstring; 0 turns it off): with markers, the plan is timed against no plan and
    disarmed when it is more than ``WATCHDOG_SLACK`` slower.
    """

    def __init__(self, budget: Any = "100%", hw: Any = "h200-pcie5", warmup_iters: int = 3,
                 mode: str = "oblivious", *, relearn_after: int = 2, hook: Any = "auto",
                 plan_opts: dict | None = None, min_period_events: int = 64,
                 touch_device: str = "cuda", tune: Any = None, tune_iters: int = 2,
                 watchdog_iters: int = 3) -> None:
        if warmup_iters < 1:
            raise ValueError(f"warmup_iters must be >= 1, got {warmup_iters}")
        if relearn_after < 1:
            raise ValueError(f"relearn_after must be >= 1, got {relearn_after}")
        if tune_iters < 1:
            raise ValueError(f"tune_iters must be >= 1, got {tune_iters}")
        if watchdog_iters < 0:
            raise ValueError(f"watchdog_iters must be >= 0 (0: no watchdog), got {watchdog_iters}")
        self._dog = _Watchdog(int(watchdog_iters)) if watchdog_iters else None
        self.tune = tuple(tune) if tune else ()
        if self.tune:
            from .planner import tuning_candidates

            tuning_candidates(self.tune, mode, dict(plan_opts or {}))  # checks them now
        self.tune_iters = int(tune_iters)
        self.tuning: dict[str, float] = {}  # guard -> median measured iteration seconds
        self.tuning_skipped: str | None = None  # why a requested tuning did not run
        self._tuner: dict | None = None  # candidates and timings while tuning
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
        self._hook_handle = None
        self._lock = threading.RLock()
        self.state = "idle"
        self.plan = None
        self.pattern = None
        # recording buffer (EVENT_DTYPE arrays) and blocks alive when it started
        self._chunks: list[np.ndarray] = []
        self._live: dict[int, np.void] = {}  # addr -> its ALLOC event (all blocks alive)
        self._prefix: list = []  # ALLOC events of blocks alive when recording (re)started
        self._marks = 0
        self._alloc_events = 0
        self._next_try = self.min_period_events
        # watching
        self._div_iters = 0  # iterations in a row with a divergence
        self._iter_div = 0  # divergences in the current iteration
        self._counters = {"plans": 0, "relearns": 0, "iterations_armed": 0,
                          "divergences": 0, "learn_failures": 0, "plan_time_s": 0.0,
                          "watchdog_disarms": 0}
        self.last_error: str | None = None

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> "Scheduler":
        """Begin recording (events already in the ring are kept: they hold the
        allocations of weights made before the scheduler started)."""
        with self._lock:
            if self.state != "idle":
                return self
            self.state = "recording"
            self._install_hook()
            self._start_touches()
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
            self._remove_hook()
            self._stop_touches()
            self.state = "closed"

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
            if self.state == "recording":
                self._record(ev)
            elif self.state == "armed":
                self._watch(ev)

    def _track_live(self, ev: np.ndarray) -> None:
        k = ev["kind"]
        for i in np.flatnonzero((k == _ALLOC) | (k == _FREE)).tolist():
            e = ev[i]
            if int(e["kind"]) == _ALLOC:
                self._live[int(e["addr"])] = e.copy()
            else:
                self._live.pop(int(e["addr"]), None)

    def _record(self, ev: np.ndarray) -> None:
        if len(ev):
            self._chunks.append(ev)
            k = ev["kind"]
            self._marks += int(np.count_nonzero(k == _MARK))
            self._alloc_events += int(np.count_nonzero((k == _ALLOC) | (k == _FREE)))
        # with markers: learn after warmup_iters complete iterations (+ the one starting)
        if self._marks >= self.warmup_iters + 1:
            self._learn(at_marker=bool(len(ev)) and int(ev["kind"][-1]) == _MARK)
        elif self._marks == 0 and self._alloc_events >= self._next_try:
            self._next_try = 2 * self._alloc_events
            self._learn(at_marker=False)

    def _recorded(self) -> np.ndarray:
        from .native import EVENT_DTYPE

        parts = ([np.array(self._prefix, EVENT_DTYPE)] if self._prefix else []) + self._chunks
        return np.concatenate(parts) if parts else np.empty(0, EVENT_DTYPE)

    def _learn(self, *, at_marker: bool) -> None:
        from . import native
        from .pattern import PatternError, analyze
        from .planner import PlanError, plan
        from .trace._native import trace_from_events

        events = self._recorded()
        t0 = time.perf_counter()
        try:
            trace, addresses = trace_from_events(events, return_addresses=True)
            pat = analyze(trace)
            if pat.source != "markers" and len(pat.iterations) < self.warmup_iters:
                return  # not enough repetitions yet to trust a learned period
            opts = dict(self.plan_opts)
            if self._touches is not None:
                from .planner import samples_from_touches

                opts["samples"] = samples_from_touches(
                    trace, addresses, pat, self._touches.clocks, self._touches.addresses,
                    k0=int(events["tick"][0]))
                if not len(opts["samples"]):
                    # planning on would quietly be the oblivious mode
                    raise ValueError(
                        f"sampled mode: the dispatch tracer saw no PyTorch op touch a "
                        f"uvm_sched block on device type {self._touches.device_type!r} during "
                        f"the warm-up ({len(self._touches.clocks):,} touches recorded); are "
                        "the model's tensors there, allocated through uvm_sched.allocator()?")
            p = plan(trace, self.budget, self.hw, mode=self.mode, pattern=pat, **opts)
        except (PatternError, PlanError, ValueError) as e:
            self._counters["learn_failures"] += 1
            self.last_error = f"{type(e).__name__}: {e}"
            if self._marks >= self.warmup_iters + 1:
                self._restart_recording()  # try again on fresh iterations
            return
        self._counters["plan_time_s"] += time.perf_counter() - t0
        # persistent blocks: the plan names them by ALLOC ordinal in the trace
        from .trace import EventKind

        k = events["kind"]
        alloc_blocks = trace.block[trace.kind == EventKind.ALLOC]
        addrs = [int(addresses[b]) for b in alloc_blocks]
        phase, phase_allocs = 0, None
        if p.meta.get("sync") == "period":
            # arm now, mid-iteration if need be: the phase is how far the current iteration
            # (counted in whole periods from the representative one's start) has got
            ev_rows = np.flatnonzero((k == _ALLOC) | (k == _FREE))
            start_ev = int(np.searchsorted(trace.tick[(trace.kind <= 1)], pat.start_tick))
            phase = (len(ev_rows) - start_ev) % int(p.meta["period_events"])
            # its allocations so far, in order; 0 for one already freed (its rows are skipped)
            tail = events[ev_rows[len(ev_rows) - phase:]] if phase else events[:0]
            phase_allocs = []
            for e in tail[tail["kind"] == _ALLOC]:
                live = self._live.get(int(e["addr"]))
                same = live is not None and int(live["arg"]) == int(e["arg"])
                phase_allocs.append(int(e["addr"]) if same else 0)
            # more than the plan knows: diverged already (the next allocation says so)
            phase_allocs = phase_allocs[:len(p.meta["alloc_sizes"])]
            start_now = True
        else:
            start_now = at_marker
        native.arm_plan(p, addrs, start_now=start_now, phase=phase, phase_allocs=phase_allocs)
        self.plan, self.pattern, self._addrs = p, pat, addrs
        self._start_tuning(trace, pat, opts)
        self.samples = opts.get("samples") if self.mode == "sampled" else None
        self._stop_touches()  # sampling costs per op: only while learning
        self.state = "armed"
        self._counters["plans"] += 1
        self._div_iters = self._iter_div = 0
        self._chunks = []
        self._prefix = []
        self.last_error = None

    # -- tuning the guard by the clock -------------------------------------------------------
    def _start_tuning(self, trace, pat, opts: dict) -> None:
        self._tuner = None
        self.tuning_skipped = None
        if not self.tune:
            return
        if self.plan.meta.get("sync") != "marker":
            # the clock is read at markers: without them there is nothing to time
            self.tuning_skipped = ("the plan syncs on the learned period, not on iteration "
                                   "markers, and tuning times iterations between markers: "
                                   "call Scheduler.step() each iteration (or let the optimizer "
                                   "hook do it)")
            return
        from .planner import plan, tuning_candidates

        (first, _, _), *rest = tuning_candidates(self.tune, self.mode, opts)
        cands = [(first, self.plan)] + [
            (label, plan(trace, self.budget, self.hw, mode=m, pattern=pat, **o))
            for label, m, o in rest]
        self._tuner = {"cands": cands, "i": 0, "times": [[] for _ in cands], "last": None,
                       "skip": 1, "bad": False}

    def _time_iterations(self, ev: np.ndarray) -> None:
        """Per marker: the iteration that ended counts for the armed candidate unless it
        diverged or came right after arming; enough of them, and the next one is armed."""
        tu = self._tuner
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
        tu["i"] += 1
        if tu["i"] < len(tu["cands"]):
            p = tu["cands"][tu["i"]][1]
            tu.update(last=None, skip=1, bad=False)
        else:
            import statistics

            self.tuning = {label: statistics.median(t)
                           for (label, _), t in zip(tu["cands"], tu["times"])}
            p = dict(tu["cands"])[min(self.tuning, key=self.tuning.get)]
            self._tuner = None
            if p is self.plan:
                return
        native.disarm()
        native.arm_plan(p, self._addrs, start_now=True)  # at a marker: an iteration starts
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
            self._iter_div = 0
        if self._div_iters >= self.relearn_after:
            from . import native

            native.disarm()
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
                native.arm_plan(self.plan, self._addrs, start_now=True)
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
        self.last_error = (f"watchdog: the plan's iterations took {r['plan_s']:.6f} s "
                           f"(median of the last {dog.iters}), no plan's {r['no_plan_s']:.6f} s: "
                           f"more than {WATCHDOG_SLACK:.0%} slower, so it is disarmed")
        if not dog.warned:
            dog.warned = True
            warnings.warn(self.last_error, RuntimeWarning, stacklevel=2)

    def _restart_recording(self) -> None:
        self.state = "recording"
        self._start_touches()
        # the blocks alive now (weights, optimizer state) start the new recording, in
        # their allocation order, so persistent ordinals and addresses stay right
        self._prefix = sorted(self._live.values(), key=lambda e: (int(e["arg"]), int(e["tick"])))
        self._chunks = []
        self._marks = 0
        self._alloc_events = 0
        self._next_try = self.min_period_events
        self._div_iters = self._iter_div = 0

    # -- reporting ----------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """State, counters (plans, relearns, iterations armed, divergences seen, learn
        failures, planning time in s), the plan's prediction and the native counters."""
        from . import native

        with self._lock:
            self.poll()  # counters as of now
            out: dict[str, Any] = {"state": self.state, **self._counters,
                                   "last_error": self.last_error}
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
                out["tuning_now"] = self._tuner["cands"][self._tuner["i"]][0]
                out["predicted"] = dict(self.plan.meta.get("predicted", {}))
            out["native"] = native.stats()
            return out

    def __repr__(self) -> str:
        return (f"<Scheduler {self.state} mode={self.mode} budget={self.budget!r} "
                f"plans={self._counters['plans']} relearns={self._counters['relearns']}>")
