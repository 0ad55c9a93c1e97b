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
(a new batch size, sequence length...). A plan is only a hint: a wrong one costs time,
never correctness, so every failure to learn or plan leaves the allocator running
unplanned and is reported in ``stats()["last_error"]``.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Any

import numpy as np

__all__ = ["Scheduler"]

_log = logging.getLogger(__name__)

# event kinds of the native ring (uvm_sched.native.EVENT_KINDS)
_ALLOC, _FREE, _MARK, _ITER, _DIVERGENCE = 0, 1, 3, 4, 37


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
    """

    def __init__(self, budget: Any = "100%", hw: Any = "h200-pcie5", warmup_iters: int = 3,
                 mode: str = "oblivious", *, relearn_after: int = 2, hook: Any = "auto",
                 plan_opts: dict | None = None, min_period_events: int = 64,
                 touch_device: str = "cuda", tune: Any = None, tune_iters: int = 2,
                 device: int | None = None) -> None:
        if warmup_iters < 1:
            raise ValueError(f"warmup_iters must be >= 1, got {warmup_iters}")
        if relearn_after < 1:
            raise ValueError(f"relearn_after must be >= 1, got {relearn_after}")
        if tune_iters < 1:
            raise ValueError(f"tune_iters must be >= 1, got {tune_iters}")
        if device is not None and int(device) < 0:
            raise ValueError(f"device must be a CUDA device ordinal >= 0, got {device}")
        # the device whose memory the plan moves (None: torch's current device at start());
        # one process per GPU (torchrun) runs one Scheduler per rank, each on its own device
        self.device: int | None = None if device is None else int(device)
        self.rank: int = 0
        self._learnt_trace = None  # the trace the armed plan was made from
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
                          "divergences": 0, "learn_failures": 0, "plan_time_s": 0.0}
        self.last_error: str | None = None
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
            self._install_hook()
            self._start_touches()
            _log.info("recording: %d warm-up iterations, then a %s plan for budget %r on %s "
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
                _log.info("disarmed: the scheduler was closed")
            self._remove_hook()
            self._stop_touches()
            self.state = "closed"
            _log.info("closed: %s", self._summary())

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
            if self._alloc_events == 0 and not self._live and self.state == "recording":
                import warnings

                from ._errors import Warning as UvmWarning

                warnings.warn(_silent_message(self._marks), UvmWarning, stacklevel=2)

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
                _log.debug("period %d events learned from %d iterations, fewer than the %d "
                           "warm-up iterations: recording on", pat.period_events,
                           len(pat.iterations), self.warmup_iters)
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
        except (PatternError, PlanError, ValueError, ImportError) as e:
            # ImportError: a --no-deps install without pandas; the loop runs on, unplanned
            self._counters["learn_failures"] += 1
            self.last_error = f"{type(e).__name__}: {e}" + (
                f" (planning needs it: pip install {e.name})"
                if isinstance(e, ImportError) and e.name else "")
            retry = self._marks >= self.warmup_iters + 1
            # after a full warm-up it is a failure to see; before one (no markers, the
            # period tried at each doubling of the events) it is a step of recording
            _log.log(logging.WARNING if retry else logging.INFO,
                     "learning failed (%d so far), the allocator runs unplanned; %s: %s",
                     self._counters["learn_failures"],
                     "recording fresh iterations" if retry else "recording on",
                     self.last_error)
            if retry:
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
        p.meta.update(device=self.device, rank=self.rank)
        self._learnt_trace = trace
        native.arm_plan(p, addrs, device=self.device, start_now=start_now, phase=phase,
                        phase_allocs=phase_allocs)
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
        _log.info("learned: period %d allocator events (from %s, %d iterations), mode %s; "
                  "planned %d actions for a budget of %s bytes (planning so far: %.3f s)",
                  int(p.meta["period_events"]), pat.source, len(pat.iterations), self.mode,
                  len(p), f"{int(p.meta['budget_bytes']):,}",
                  self._counters["plan_time_s"])
        _log.info("armed: plan %d, sync on %s%s", self._counters["plans"], p.meta.get("sync"),
                  f" at phase {phase} of the period" if phase else "")
        if self.tuning_skipped:
            _log.info("tuning skipped: %s", self.tuning_skipped)
        elif self._tuner is not None:
            _log.info("tuning: %d candidates, %d timed iterations each: %s",
                      len(self._tuner["cands"]), self.tune_iters,
                      ", ".join(str(label) for label, _ in self._tuner["cands"]))

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
            _log.info("tuning: armed candidate %s", tu["cands"][tu["i"]][0])
        else:
            import statistics

            self.tuning = {label: statistics.median(t)
                           for (label, _), t in zip(tu["cands"], tu["times"])}
            best = min(self.tuning, key=self.tuning.get)
            p = dict(tu["cands"])[best]
            self._tuner = None
            _log.info("tuned: keeping %s (median s per iteration: %s)", best, ", ".join(
                f"{label}: {t:.6f}" for label, t in self.tuning.items()))
            if p is self.plan:
                return
        native.disarm()
        p.meta.update(device=self.device, rank=self.rank)
        native.arm_plan(p, self._addrs, device=self.device, start_now=True)  # at a marker
        self.plan = p

    def _watch(self, ev: np.ndarray) -> None:
        if self._tuner is not None:
            self._time_iterations(ev)
        k = ev["kind"]
        for kind in k[(k == _ITER) | (k == _DIVERGENCE)].tolist():
            if kind == _DIVERGENCE:
                self._iter_div += 1
                self._counters["divergences"] += 1
                continue
            # a new iteration starts: judge the one that ended
            self._counters["iterations_armed"] += 1
            self._div_iters = self._div_iters + 1 if self._iter_div else 0
            _log.debug("armed iteration %d ended: %d divergences (%d iterations in a row "
                       "with one)", self._counters["iterations_armed"], self._iter_div,
                       self._div_iters)
            self._iter_div = 0
        if self._div_iters >= self.relearn_after:
            from . import native

            native.disarm()
            _log.info("disarmed: %d iterations in a row diverged from the learned one "
                      "(relearn_after=%d); relearning", self._div_iters, self.relearn_after)
            self._counters["relearns"] += 1
            self.plan = None
            self._tuner = None
            self._restart_recording()

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
    def trace(self):
        """The allocator events as a ``Trace`` whose meta names this process's ``device``
        and ``rank`` (save one per rank: ``sched.trace().save(f"trace{rank}.parquet")``):
        while recording, those recorded so far; once a plan is armed, the ones it was
        learnt from."""
        from .trace._native import trace_from_events

        with self._lock:
            self.poll()
            events = self._recorded()
            if self.state == "recording" or self._learnt_trace is None:
                trace = trace_from_events(events)
            else:
                trace = self._learnt_trace
            trace.meta.update(source="uvm_sched.Scheduler", device=self.device, rank=self.rank)
            return trace

    def stats(self) -> dict[str, Any]:
        """State, counters (plans, relearns, iterations armed, divergences seen, learn
        failures, planning time in s), the plan's prediction and the native counters."""
        from . import native

        with self._lock:
            self.poll()  # counters as of now
            out: dict[str, Any] = {"state": self.state, **self._counters,
                                   "last_error": self.last_error, "device": self.device,
                                   "rank": self.rank}
            if self.plan is not None:
                out["plan_actions"] = len(self.plan)
                out["budget_bytes"] = int(self.plan.meta["budget_bytes"])
                out["period_events"] = int(self.plan.meta["period_events"])
                out["sync"] = self.plan.meta.get("sync")
                out["guard"] = self.plan.meta.get("guard")
            out["tuning"] = dict(self.tuning)
            if self.tuning_skipped:
                out["tuning_skipped"] = self.tuning_skipped
            if self._tuner is not None:
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
