"""A plan of its own for a stretch of events inserted into the learned iteration again and
again (an eval batch every k train steps, without markers).

Rule: synced on the learned period (``sync="period_resync"``), the executor goes through
events inserted into an iteration without actions and resumes the iteration after them
(``_native/exec.c``, a RESUME record: how many events, at which event of the iteration).
Such a stretch ran on demand paging, so an eval batch every k steps capped the steps run
armed near k/(k+1). Once a stretch recurs -- the same events (allocs, frees, their sizes)
inserted at the same event of the iteration, twice -- it is planned in the background
worker like another kind's step (``_runtime_kindplans``): the blocks alive where it was
inserted as the prefix, then its events between two markers; oblivious, for the main
plan's budget. Waiting for a recurrence, not planning the first stretch seen, keeps a
one-off (a partial batch, a step with events missing) from being planned; no count of
steps is tuned to the loop.

The executor is given the stretch's table (``uvm_sched_exec_set_insertion``), which it runs
when a divergence comes at that event of the iteration with an allocation of the size of
the stretch's first one; it checks every later allocation's size and count against the
stretch's and fires nothing from the first that differs (a wrong guess runs unplanned, as
without the table, counted in ``insertion_mismatches``). The blocks alive where it was
inserted are named by address and allocation ordinal, so one freed since (or its address
reused) is skipped, as any persistent block of a plan. A new main plan drops the table.
"""
from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ._runtime_recording import ALLOC, FREE, MARK, RESUME, track_live

__all__ = ["Insertions"]

# the Scheduler's logger: beside its other transitions
logger = logging.getLogger("uvm_sched.runtime")


class Insertions:
    """Stretches inserted into the learned iteration: seen, planned, given to the executor."""

    def __init__(self) -> None:
        self.planned = 0  # stretches the executor ran whole by their table
        self.unplanned = 0  # stretches run without (no table yet, or one that differed)
        self.key: tuple | None = None  # the stretch whose table the executor holds
        self._clear()

    def _clear(self) -> None:
        self.seen: dict[tuple, int] = {}  # (event of the iteration, events, string) -> times
        self.job: Any = None  # the _learn.Job in flight
        self._job_of: tuple | None = None  # (key, stretch, blocks alive at it)
        self.failed: dict[tuple, str] = {}  # key -> why no plan
        # the allocator events of the last batches, at least two periods in all (seeking
        # gives up after two periods): joined only for a batch that holds a RESUME, so an
        # armed step without one copies nothing but its own batch's selection
        self._recent: list[np.ndarray] = []

    def reset(self) -> None:
        """A new main plan: the stretch's table (made beside the old one) goes with it."""
        if self.key is not None:
            _set(None, np.zeros(0, np.uint64), 0, 0)
            self.key = None
        self._clear()

    def step(self, s: Any, ev: np.ndarray, live0: np.ndarray | None) -> None:
        """After each drained batch ``ev`` while ``s`` is armed on the learned period:
        ``live0`` the blocks alive before it (None: not kept). Takes a stretch plan the
        worker made, and notes the stretches the executor resumed after."""
        if self.job is not None and self.job.done.is_set():
            self._finish(s)
        k = ev["kind"]
        af = (k == ALLOC) | (k == FREE)
        sel = ev[af | (k == RESUME)]
        resumes = np.flatnonzero(sel["kind"] == RESUME)
        if len(resumes):
            self._resumed(s, ev, af, sel, resumes, live0)
        self._recent.append(sel[sel["kind"] != RESUME])
        keep = 2 * int(s.plan.meta["period_events"])
        while sum(len(a) for a in self._recent[1:]) >= keep:
            self._recent.pop(0)

    def _resumed(self, s: Any, ev: np.ndarray, af: np.ndarray, sel: np.ndarray,
                 resumes: np.ndarray, live0: np.ndarray | None) -> None:
        """The RESUME records of this batch (``sel``: its allocator events and RESUMEs,
        ``resumes`` their indices): counted, and a recurring stretch planned."""
        before = sum(len(a) for a in self._recent)  # (earlier batches' allocator events)
        evs = np.concatenate([*self._recent, sel])
        is_af = (evs["kind"] == ALLOC) | (evs["kind"] == FREE)
        for r in (before + resumes).tolist():
            if int(evs["addr"][r]) == 1:
                self.planned += 1
                continue
            self.unplanned += 1
            n, at = int(evs["size"][r]), int(evs["arg"][r])
            idx = np.flatnonzero(is_af[:r])[-n:] if n else np.zeros(0, np.int64)
            if not n or len(idx) < n or int(evs["kind"][idx[0]]) != ALLOC:
                continue  # (its start is in a batch no longer kept)
            stretch = evs[idx]
            key = (at, n, hash((stretch["kind"].tobytes(), stretch["size"].tobytes())))
            self.seen[key] = self.seen.get(key, 0) + 1
            if (self.seen[key] >= 2 and key != self.key and key not in self.failed
                    and self.job is None and live0 is not None):
                # the blocks alive where it was inserted: alive again when it ended (RESUME)
                at_resume = int(np.count_nonzero(evs["kind"][before:r] != RESUME))
                live = track_live(live0, ev[af][:at_resume])
                self._submit(s, key, stretch, live)

    def _submit(self, s: Any, key: tuple, stretch: np.ndarray, live: np.ndarray) -> None:
        from ._learn import shared_worker

        # its markers as the ring writes them (a marker's tick: the next allocator event's)
        marks = np.zeros(2, stretch.dtype)
        marks["kind"], marks["device"] = MARK, stretch["device"][0]
        marks["tick"] = (int(stretch["tick"][0]), int(stretch["tick"][-1]) + 1)
        marks["t_ns"] = (int(stretch["t_ns"][0]), int(stretch["t_ns"][-1]))
        events = np.concatenate([marks[:1], stretch, marks[1:]])
        req = {"events": ([live] if len(live) else []) + [events], "mode": "oblivious",
               "budget": int(s.plan.meta["budget_bytes"]), "hw": s._calib.hw(s.hw, s.device),
               "warmup_iters": 1, "touches": None, "tune": (),
               "plan_opts": {k: v for k, v in s.plan_opts.items() if k != "samples"},
               "mode_reason": "a stretch inserted into the iteration: oblivious (no access "
                              "samples of it)"}
        logger.debug("planning the stretch of %d events inserted at event %d in the "
                     "background", key[1], key[0])
        self.job, self._job_of = shared_worker(s.worker).submit(req), (key, stretch, live)

    def _finish(self, s: Any) -> None:
        assert self._job_of is not None  # (set with the job)
        job, (key, stretch, live) = self.job, self._job_of
        self.job = self._job_of = None
        res = job.result
        p = res.get("plan") if res["status"] == "ok" else None
        why = res.get("error") or "its plan does not sync on markers"
        if p is not None and p.meta.get("sync") == "marker":
            table = np.array(res["table"])
            pers = table["persistent"].astype(bool)
            b = table["block"][pers]
            if np.all(b < len(live)):
                table["addr"][pers] = live["addr"][b]
                table["block"][pers] = live["arg"][b]  # (the executor tells a reuse by it)
                sizes = stretch["size"][stretch["kind"] == ALLOC].astype(np.uint64)
                try:
                    _set(table, sizes, len(stretch), key[0])
                except ValueError as e:
                    why = str(e)
                else:
                    self.key = key
                    logger.info("planned the stretch inserted at event %d: %d actions",
                                key[0], len(table))
                    return
            else:
                why = "its plan names a block not alive where the stretch was inserted"
        self.failed[key] = why
        logger.info("no plan for the stretch inserted at event %d: %s", key[0], why)

    def report(self) -> dict[str, Any]:
        """``stats()["insertion_plans"]``: stretches run by their plan and without, whether
        the executor holds a stretch's table, and why any stretch got none."""
        return {"planned": self.planned, "unplanned": self.unplanned,
                "table": self.key is not None,
                "failed": {f"{n} events at event {at}": why
                           for (at, n, _), why in self.failed.items()}}


def _set(table: np.ndarray | None, sizes: np.ndarray, events: int, at: int) -> None:
    """The executor's table for the stretch of ``events`` allocator events inserted at event
    ``at`` of the iteration (events 0: none); raises ``ValueError`` with the library's
    reason when it refuses."""
    from . import native
    from .native import PLAN_ROW_DTYPE

    t = np.ascontiguousarray(table if table is not None else np.zeros(0, PLAN_ROW_DTYPE),
                             dtype=PLAN_ROW_DTYPE)
    sz = np.ascontiguousarray(sizes, dtype=np.uint64)
    st = native._load().uvm_sched_exec_set_insertion(
        t.ctypes.data if len(t) else None, len(t), sz.ctypes.data if len(sz) else None,
        len(sz), int(events), int(at))
    native._raise(st, "giving the executor an inserted stretch's table")
