"""One plan per iteration kind: the other kinds' plans beside the planned one, and which one
is armed for each step.

Rule: a kind other than the planned one (an eval batch, a partial batch; ``_runtime_kinds``
matches each step to its kind by its string of allocs and frees) gets a plan of its own from
its first step observed whole after the first plan (from its marker to the next), priced
like any plan -- a plan is made from one step anyway, and it is armed only where the
kind's steps recur at a steady gap (below), which takes a second one; waiting for more of
them (``warmup_iters``, the planned kind's evidence) left an eval every k steps unplanned
until its fourth occurrence, for every k. Its plan is made in the
background worker like the main one (``_learn.learn``) from its latest step: the blocks
alive at the step's marker (weights, optimizer state, gradients) as the prefix, then the
step's events between its two markers; for the main plan's budget in bytes, oblivious
(access samples, where the main plan had them, were taken for the main kind's steps only).

How a step's kind is known early enough: the executor holds one table, armed at a marker,
and a step's kind shows only once its events come. So the kind is *guessed* at the marker
from the sequence of the steps' kinds (``Steps.predict``): a kind with a plan whose last
occurrences came every ``g`` steps (an eval batch every ``k`` train steps: ``g = k + 1``)
is expected ``g`` steps after its last one; any other step gets the planned kind's table.
A kind that comes at no steady gap (a one-off partial batch, a step with events missing)
is never guessed: its steps run as before, unplanned and expected.

A wrong guess: the executor checks each allocation against the armed table (its size,
where the plan checks one, and their count: ``_native/exec.c``) and fires nothing more from
the first one that differs, so the step runs on demand paging from there -- what it would
have done with no plan; what fired before is the guessed plan's actions on the events
before that allocation (a kind plan, made from one step, checks every size).
``stats()["not_armed"]`` names it ("armed for kind ..., was ..."); it is never a divergence
that counts towards relearning. A kind plan is armed only when as many blocks are alive
as at the step it was made from (its persistent blocks are named by position among them);
else the step gets the planned kind's table and ``stats()["kind_plans"]["skipped"]`` says
why.
"""
from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ._runtime_recording import ALLOC, FREE, MARK

__all__ = ["KindPlans"]

# the Scheduler's logger: kind plans beside its other transitions
logger = logging.getLogger("uvm_sched.runtime")


class KindPlans:
    """The other kinds' plans (key -> plan), the one being made, and arming at markers."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """A new main plan: the other kinds' plans (made beside the old one) go with it."""
        self.plans: dict[Any, dict[str, Any]] = {}  # key -> plan, table, n_live, label
        self.counts: dict[Any, int] = {}  # key -> its steps ended since the plan
        self.pending: tuple | None = None  # (key, label, live, events): to plan next
        self.job: Any = None  # the _learn.Job in flight
        self._job_of: tuple | None = None  # (key, label, blocks alive) of the job
        self.failed: dict[str, str] = {}  # label -> why no plan
        self.skipped: dict[str, int] = {}  # reason -> steps whose kind plan was not armed
        self.switches = 0  # tables armed at a marker for a kind
        self._main: tuple | None = None  # (the main plan, its table): re-arming it is cheap

    def label(self, key: Any) -> str:
        kp = self.plans.get(key)
        return kp["label"] if kp else str(key)

    def note(self, key: Any, label: str, live: np.ndarray | None,
             evs: list[np.ndarray]) -> None:
        """A step of kind ``key`` (not the planned one) ended after the first plan:
        ``live`` the blocks alive at its marker, ``evs`` its events from that marker to the
        next (None, []: not kept, the step began before the plan)."""
        self.counts[key] = self.counts.get(key, 0) + 1
        planned = key in self.plans or (self._job_of is not None and self._job_of[0] == key)
        if not planned and label not in self.failed and live is not None:
            self.pending = (key, label, live, evs)  # (its first step seen whole)

    def step(self, s: Any, ev: np.ndarray) -> None:
        """While the ``Scheduler`` ``s`` is armed, after each drained batch ``ev``: take a
        kind plan the worker made, hand it the next one, and when the batch ends at a marker
        (no alloc or free after it; the executor's own records may follow) arm the table of
        the step's guessed kind."""
        if self.job is not None and self.job.done.is_set():
            self._finish()
        if self.pending is not None and self.job is None:
            self._submit(s)
        k = ev["kind"]
        marks = np.flatnonzero(k == MARK)
        rest = k[marks[-1]:] if len(marks) else k[:0]
        if len(marks) and not np.any((rest == ALLOC) | (rest == FREE)):
            self._arm(s)

    def _submit(self, s: Any) -> None:
        from ._learn import shared_worker

        assert self.pending is not None  # step() submits only a pending kind
        key, label, live, evs = self.pending
        self.pending = None
        events = np.concatenate(evs)
        req = {"events": ([live] if len(live) else []) + [events], "mode": "oblivious",
               "budget": int(s.plan.meta["budget_bytes"]), "hw": s._calib.hw(s.hw, s.device),
               "warmup_iters": 1, "touches": None, "tune": (),
               "plan_opts": {k: v for k, v in s.plan_opts.items() if k != "samples"},
               "mode_reason": f"kind {label!r}: oblivious (no access samples of its steps)"}
        logger.debug("planning kind %r from its latest step (%d events) in the background",
                     label, len(events))
        self.job, self._job_of = shared_worker(s.worker).submit(req), (key, label, len(live))

    def _finish(self) -> None:
        assert self._job_of is not None  # (set with the job)
        job, (key, label, n_live) = self.job, self._job_of
        self.job = self._job_of = None
        res = job.result
        p = res.get("plan") if res["status"] == "ok" else None
        pers = res["table"]["persistent"].astype(bool) if p is not None else None
        if p is not None and np.any(res["table"]["block"][pers] >= n_live):
            res = {"status": "error", "error": "its plan names a block its step left alive "
                   "as persistent (only the blocks alive at its marker can be found again)"}
            p = None
        if p is None or p.meta.get("sync") != "marker":
            self.failed[label] = res.get("error") or "its plan does not sync on markers"
            logger.info("no plan for kind %r: %s", label, self.failed[label])
            return
        self.plans[key] = {"plan": p, "table": res["table"], "n_live": n_live, "label": label}
        logger.info("planned kind %r: %d actions (%.2f s in the background)", label, len(p),
                    job.wall_s)

    def _arm(self, s: Any) -> None:
        """At a marker: arm the guessed kind's table for the step starting there."""
        from . import native
        from ._armed import arm_plan, plan_table

        steps = s._steps
        dog = s._dog
        if dog is not None and dog.plan is s.plan and dog.phase == "none":
            steps.armed_key = steps._guess = None  # disarmed; the watchdog re-arms the main
            return
        if s._tuner is not None or not self.plans:
            return
        want = steps.predict()
        if want is not None and len(s._live) != self.plans[want]["n_live"]:
            why = (f"kind {self.label(want)!r}: {len(s._live):,} blocks alive, its plan was "
                   f"made with {self.plans[want]['n_live']:,}")
            self.skipped[why] = self.skipped.get(why, 0) + 1
            want = None
        if want == steps.armed_key:
            return
        native.disarm()
        if want is None:
            if self._main is None or self._main[0] is not s.plan:
                self._main = (s.plan, plan_table(s.plan))
            arm_plan(s.plan, s._addrs, device=s.device, start_now=True, table=self._main[1])
        else:
            kp = self.plans[want]
            kp["plan"].meta.update(device=s.device, rank=s.rank)
            arm_plan(kp["plan"], s._live["addr"].tolist(), device=s.device, start_now=True,
                     table=kp["table"])
        steps.armed_key = steps._guess = want
        self.switches += 1
        logger.debug("step %d: armed the plan of kind %r", steps.ended,
                     "planned" if want is None else self.label(want))

    def report(self) -> dict[str, Any]:
        """``stats()["kind_plans"]``: per kind with a plan its actions, the kind being
        planned, the kinds without a plan and why, the steps a kind plan was not armed for
        and why, and how many times a table was armed at a marker for a kind."""
        return {"plans": {kp["label"]: len(kp["plan"]) for kp in self.plans.values()},
                "planning": None if self._job_of is None else self._job_of[1],
                "failed": dict(self.failed), "skipped": dict(self.skipped),
                "switches": self.switches}
