"""Each step's kind, whether it ran armed and why not; when a run of bad steps means relearn.

Rule: a step (the events from one marker to the next) is matched to a kind by its string
of allocs and frees -- its key is (allocator events, CRC-32 of that string), sizes left out
-- against the kinds of the iterations the plan was learned from (``kind_keys``: the
pattern's ``steady`` kind and its per-batch shapes are the planned one; warm-up, eval, a
partial batch are other kinds). The plan names the allocations that per-batch shapes resize
by position (``planner``: sizes at run time), so a step of the planned kind runs armed
whatever its shapes. A step whose plan stopped at a divergence is then:

* of a known other kind (eval, a partial batch, seen while learning) -- expected: it ran
  unplanned, and is never a reason to relearn;
* of a kind met for the second time since the plan -- a kind as well (an eval every k
  steps that the warm-up did not reach): expected from then on;
* else (a new kind, or the planned kind with sizes the plan checks) -- a divergence; only
  ``relearn_after`` of those in a row make the Scheduler relearn.

Why not relearn on every divergence, as before: a loop with eval batches or a partial last
batch then relearned forever and never settled. Relearning is bounded as well: after
``relearn_limit`` relearns the Scheduler stops learning and watches (``State.WATCHING``),
and says why. ``stats()`` reports the steps per kind, how many ran armed, and for every
other step the reason (``Steps.report``).

Why the planned kind's plan is keyed by structural position with sizes resolved at run
time: the kind that varies most -- per-batch shapes, every batch padded to its own length
-- is one structure, so a plan named by position covers all of it. The other kinds (eval,
a partial batch) get plans of their own once enough of their steps are seen, armed at the
markers where their steps are expected (``_runtime_kindplans``: how a step's kind is
guessed before its events come, and why a wrong guess costs that step its plan, nothing
more: it is never a divergence). Without markers, a stretch the executor finds inserted
into the learned iteration again and again (an eval batch) gets one the same way
(``_runtime_insertions``).
"""
from __future__ import annotations

import logging
import zlib
from typing import Any

import numpy as np

from ._runtime_recording import ALLOC, DIVERGENCE, FREE, ITER, MARK, RESUME, track_live
from ._runtime_insertions import Insertions
from ._runtime_kindplans import KindPlans
from ._runtime_resync import PeriodResync
from ._runtime_states import State

__all__ = ["Steps", "kind_keys", "spend_relearn", "why_not", "PLANNED"]

# the Scheduler's logger: its per-step lines beside its transitions, where a user turns it up
logger = logging.getLogger("uvm_sched.runtime")

PLANNED = "planned"  # the label of the kind the plan was made for
_LABELS = {"steady": PLANNED, "same structure, other sizes": PLANNED,
           "first (warm-up?)": "warm-up", "last (partial batch or cut short?)": "last"}

Key = tuple  # (allocator events, crc32 of the alloc/free string)


def step_key(is_free: np.ndarray, crc: int = 0) -> int:
    """CRC-32 of a string of allocator events (True: a free), continued from ``crc``."""
    return zlib.crc32(np.ascontiguousarray(is_free, np.uint8).tobytes(), crc)


def kind_keys(pat, ev_kind: np.ndarray) -> dict[Key, str]:
    """Per kind of ``pat`` (``Pattern.kinds``): the key of each of its iterations -> its
    label (``PLANNED`` for the representative's structure). ``ev_kind``: the trace's
    allocator events (0 alloc, 1 free), as ``pat.iteration_events`` counts them."""
    out: dict[Key, str] = {}
    for kd in pat.kinds:
        label = _LABELS.get(kd["label"]) or f"other ({kd['delta_events']:+,} events)"
        for i in kd["iterations"]:
            a, b = pat.iteration_events[i]
            key = (int(b - a), step_key(ev_kind[a:b] == 1))
            if out.get(key) != PLANNED:  # a twin of the planned structure stays planned
                out[key] = label
    return out


class Steps:
    """The steps seen, by kind, and the run of divergences that asks for a relearn.

    ``feed(ev, why_not)`` per drained batch: ``why_not`` is None while a plan is armed,
    else why none is (the steps that end in the batch are counted with it). It returns
    how many steps in a row have diverged unexpectedly (``relearn_after`` of them:
    relearn)."""

    def __init__(self) -> None:
        self.known: dict[Key, str] = {}
        self.new_kinds: dict[Key, int] = {}  # kinds met since the plan: times seen
        self.kinds: dict[str, dict[str, int]] = {}  # label -> steps, armed
        self.not_armed: dict[str, int] = {}  # reason -> steps
        self.after_plan = 0  # steps since the first plan was armed
        self.armed_after_plan = 0
        self.bad_in_row = 0
        self.iter_run = 0  # executor iterations in a row with a divergence (period sync)
        self._iter_div = 0  # divergences in the executor's current iteration
        self.iters_diverged = 0  # executor iterations ended with a divergence
        self.insertions = 0  # events inserted into an iteration, which then went on
        self._open = False  # a marker has started a step
        self._n = 0  # its allocator events so far
        self._crc = 0
        self._div = False  # a divergence in it
        self._why: str | None = None  # why it did not run armed, known before its end
        self.ended = 0  # steps ended (the index of the step now open)
        self.seen: dict[Key, list[int]] = {}  # key -> indices of its last steps
        self.armed_key: Any = None  # the kind whose plan is armed (None: the planned one)
        self._guess: Any = None  # the kind armed for the open step
        self._evs: list[np.ndarray] = []  # its events from its MARK (after the first plan)
        self._live_open: np.ndarray | None = None  # the blocks alive at its MARK
        self.plans = KindPlans()  # the other kinds' plans (_runtime_kindplans)
        self.resync = PeriodResync()  # a period-synced plan back in phase (_runtime_resync)
        self.inserts = Insertions()  # stretches inserted into its iteration, planned
        self._live0: np.ndarray | None = None  # the blocks alive before the batch fed

    def new_plan(self, known: dict[Key, str], at_marker: bool,
                 start_level: int | None = None) -> None:
        """A plan was armed, learned from iterations of these kinds; ``at_marker``: with
        the step that has just started (else from the next one); ``start_level``: the
        bytes live where its iteration starts (``_learn.learn``)."""
        self.known = dict(known)
        self.resync = PeriodResync(start_level)
        self.new_kinds = {}
        self.bad_in_row = 0
        self.plans.reset()  # the other kinds' plans were made beside the plan it replaces
        self.inserts.reset()
        self.armed_key = self._guess = None
        if not at_marker and self._open:
            self._why = "the plan was armed during it"
        if not self.after_plan:
            self.after_plan = -1  # (the step now starting is the first one after it)

    def feed(self, ev: np.ndarray, why_not: str | None, live0: np.ndarray | None = None,
             live1: np.ndarray | None = None) -> int:
        """``live0``/``live1``: the blocks alive before and after the batch (for the other
        kinds' plans: what was alive at a step's MARK; None: not kept)."""
        k = ev["kind"]
        self._live0 = live0
        marks = np.flatnonzero(k == MARK)
        start = 0
        keep = bool(self.known) and live0 is not None
        for m in marks.tolist() + [len(k)]:
            part = k[start:m]
            if self._open:
                alloc_free = part[(part == ALLOC) | (part == FREE)]
                self._n += len(alloc_free)
                self._crc = step_key(alloc_free == FREE, self._crc)
                self._div = self._div or bool(np.any(part == DIVERGENCE))
                if keep and self._live_open is not None:
                    self._evs.append(ev[start:m])
            if m == len(k):
                break
            if self._open:
                if keep and self._live_open is not None:
                    self._evs.append(ev[m:m + 1])  # (its closing MARK)
                self._end(self._why or why_not)
            self._open, self._n, self._crc, self._div, self._why = True, 0, 0, False, None
            self._guess, self._evs, self._live_open = self.armed_key, [], None
            if keep and live0 is not None:  # (keep says so: for the type checker)
                rest = k[m:]
                self._live_open = live1 if not np.any((rest == ALLOC) | (rest == FREE)) \
                    else track_live(live0, ev[:m])
                self._evs = [ev[m:m + 1]]
            start = m + 1
        return self.bad_in_row

    def after(self, s: Any, ev: np.ndarray) -> None:
        """After each drained batch ``ev`` while the ``Scheduler`` ``s`` is armed (and not
        relearning): the other kinds' plans at markers, or, synced on the learned period,
        the plan back in phase after a divergence."""
        if s.plan.meta.get("sync") == "marker":
            self.plans.step(s, ev)
        else:
            self.resync.step(s, ev)
            self.inserts.step(s, ev, self._live0)

    def reset_run(self) -> None:
        """A fresh recording: no divergences in a row."""
        self.bad_in_row = self.iter_run = self._iter_div = 0

    def iterations(self, k: np.ndarray, counters: dict[str, Any]) -> int:
        """The executor's iterations (ITER) and divergences in drained kinds ``k``,
        counted in ``counters``; returns its iterations in a row with a divergence (what
        a plan synced on the learned period, without markers, relearns by)."""
        for kind in k[(k == ITER) | (k == DIVERGENCE) | (k == RESUME)].tolist():
            if kind == DIVERGENCE:
                self._iter_div += 1
                counters["divergences"] += 1
                continue
            if kind == RESUME:  # the divergence was events inserted (an eval batch):
                self._iter_div = max(self._iter_div - 1, 0)  # it went on in phase after them
                self.insertions += 1
                continue
            counters["iterations_armed"] += 1  # a new iteration: judge the one that ended
            self.iters_diverged += self._iter_div > 0
            self.iter_run = self.iter_run + 1 if self._iter_div else 0
            logger.debug("armed iteration %d ended: %d divergences (%d iterations in a row "
                         "with one)", counters["iterations_armed"], self._iter_div,
                         self.iter_run)
            self._iter_div = 0
        if self.resync.forgive:  # re-armed in phase: a fresh start (_runtime_resync)
            self.resync.forgive = False
            self.iter_run = self._iter_div = 0
        return self.iter_run

    def _end(self, why_not: str | None) -> None:
        key = (self._n, self._crc)
        label = self.known.get(key)
        expected = label is not None and label != PLANNED
        if label is None and self.known:
            seen = self.new_kinds[key] = self.new_kinds.get(key, 0) + 1
            label = f"new ({self._n:,} events)"
            expected = seen >= 2  # a kind met again is a kind of this loop
        label = label or "before the first plan"
        self.seen.setdefault(key, []).append(self.ended)
        del self.seen[key][:-3]  # (a period of kinds is judged by its last gaps)
        self.ended += 1
        wrong = self._guess is not None and self._guess != key
        armed = why_not is None and not self._div and not wrong
        if why_not is not None:
            reason = why_not
        elif wrong:  # the executor stopped at the first event the guessed kind lacks
            reason = (f"armed for kind {self.plans.label(self._guess)!r}, was {label!r}: ran "
                      "unplanned from its first differing event")
            expected = True
        elif self._div:
            reason = (f"kind {label!r}: not the planned one, runs unplanned" if expected
                      else "diverged from the plan")
        else:
            reason = None
        bad = why_not is None and self._div and not expected
        if label != PLANNED and self.known:  # (enough steps of a kind: a plan of its own)
            self.plans.note(key, label, self._live_open, self._evs)
        self.bad_in_row = self.bad_in_row + 1 if bad else 0
        row = self.kinds.setdefault(label, {"steps": 0, "armed": 0})
        row["steps"] += 1
        row["armed"] += armed
        if reason is not None:
            self.not_armed[reason] = self.not_armed.get(reason, 0) + 1
        logger.debug("step ended: kind %r, %s", label, "armed" if armed else reason)
        if self.after_plan:
            self.after_plan = max(self.after_plan, 0) + 1
            self.armed_after_plan += armed

    def report(self) -> dict[str, Any]:
        """``stats()``'s part: ``steps_armed``, ``armed_share`` (of the steps since the
        first plan was armed; None before), ``kinds`` (label -> steps, armed) and
        ``not_armed`` (reason -> steps); synced on the learned period, the executor's
        ``iterations_diverged`` (with a divergence it did not resume after, the one under
        way included) and
        ``insertions`` (stretches of events inserted into an iteration, after which it
        went on: native ``sync="period_resync"``), of them ``insertions_planned`` (run
        whole by a plan of their own: ``_runtime_insertions``), and ``insertion_plans``."""
        n = max(self.after_plan, 0)
        return {"steps_armed": sum(r["armed"] for r in self.kinds.values()),
                "armed_share": self.armed_after_plan / n if n else None,
                "kinds": {k: dict(v) for k, v in self.kinds.items()},
                "not_armed": dict(self.not_armed), "kind_plans": self.plans.report(),
                "period_resyncs": self.resync.resyncs,
                "iterations_diverged": self.iters_diverged + (self._iter_div > 0),
                "insertions": self.insertions, "insertions_planned": self.inserts.planned,
                "insertion_plans": self.inserts.report()}

    def predict(self) -> Any:
        """The kind of the step now open, guessed from the steps' sequence of kinds: a kind
        with a plan of its own whose last occurrences came every ``g`` steps (at least two
        of them, every gap the same) is expected ``g`` steps after its last one; else the
        planned kind (None)."""
        for key in self.plans.plans:
            at = self.seen.get(key, [])
            gaps = set(np.diff(at).tolist())
            if len(at) >= 2 and len(gaps) == 1 and at[-1] + gaps.pop() == self.ended:
                return key
        return None


def why_not(s: Any) -> str | None:
    """Why the steps that end now ran without a plan under the ``Scheduler`` ``s`` (None:
    one was armed)."""
    if s.state is State.ARMED:
        dog = s._dog  # timing no plan: the plan is disarmed for a few steps
        return "the watchdog timed no plan" if dog is not None and dog.plan is s.plan \
            and dog.phase == "none" else None
    if s.state is State.RECORDING:
        return "relearning" if s._counters["plans"] else "warm-up: no plan yet"
    if s.state is State.UNPLANNED:
        return "the watchdog found the plan slower than none"
    return f"watching: {s.watching}" if s.state is State.WATCHING else str(s.state)


def spend_relearn(counters: dict[str, Any], limit: int, why: str) -> str | None:
    """A relearn is asked for (``why``): None while ``limit`` allows one (a failed learn
    is counted in ``counters["learn_retries"]``; a relearn by the plan it drops), else why
    the Scheduler stops learning and watches."""
    done = counters["relearns"] + counters["learn_retries"]
    if done >= limit:
        return (f"{why} after {counters['relearns']} relearns and {counters['learn_retries']} "
                f"failed learns (relearn_limit={limit}); the allocator runs unplanned and "
                "nothing more is learned")
    counters["learn_retries"] += why == "learning failed"
    return None
