"""A plan synced on the learned period, found in phase again after a divergence.

Rule: without markers the executor counts allocator events and starts an iteration every
``period_events`` of them (``sync="period"``). A step with a few events fewer or more (the
framework's caching allocator served a temporary, an extra buffer) shifts that count for
good: every later iteration would diverge, and the Scheduler would relearn a loop that did
not change. So after a divergence the runtime looks, in each drained batch, for the point
where the learned iteration starts -- the bytes live there (``start_level``, the fewest of
the iteration: between the optimizer step and the next forward, ``pattern._period`` step 4)
-- and re-arms the plan at the phase the loop has reached since the last such point (the
addresses of the iteration's allocations made since then, as when a plan is first armed
mid-iteration). Until then the executor runs without actions, as after any divergence.

Why the level and not the events' string: the level is one number per event, known from the
table of live blocks, and per-batch shapes (dynamic padding) do not move it (the blocks
live between steps -- weights, optimizer state -- keep their sizes). Where the level comes
back more than once in an iteration, the last point in the batch is taken (even one before
the divergence: the executor notices a shifted count only at an allocation of another size,
often a step later); a wrong phase, or the odd step itself re-entered, diverges again and
is found again at the next start. The runtime arms period plans ``sync="period_resync"``:
the executor itself resumes an iteration after events inserted into it (``RESUME``) or
starts the next one at the start's level (``_native/exec.c``); this module then re-arms
only where a batch shows neither (no start level known to the executor yet, or a start
seen before the divergence). The iteration a resync leaves is not counted towards
relearning, for up to ``relearn_after`` resyncs without a clean iteration between them:
a loop that has changed finds no phase that holds and relearns as before.
"""
from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ._runtime_recording import ALLOC, DIVERGENCE, FREE, ITER, RESUME, live_ordinal

__all__ = ["PeriodResync"]

# the Scheduler's logger: a resync beside its other transitions
logger = logging.getLogger("uvm_sched.runtime")


class PeriodResync:
    """After a divergence of a period-synced plan, re-arm it in phase (module doc)."""

    def __init__(self, start_level: int | None = None) -> None:
        self.start_level = start_level  # bytes live where the learned iteration starts
        self.lost = False  # a divergence has put the executor out of phase
        self.resyncs = 0
        self.in_row = 0  # resyncs since the executor last ran an iteration clean
        self.forgive = False  # a resync in this batch: its diverged iterations do not count
        self._table: tuple | None = None  # (plan, its table)

    def step(self, s: Any, ev: np.ndarray) -> None:
        """After each drained batch ``ev`` while the ``Scheduler`` ``s`` is armed on the
        learned period: note a divergence, and re-arm in phase once the start is seen."""
        k = ev["kind"]
        div = np.flatnonzero(k == DIVERGENCE)
        if len(div):
            self.lost = True
        elif np.any(k == ITER):
            self.in_row = 0  # an iteration of the executor ended without a divergence
        resumed = np.flatnonzero(k == RESUME)
        if len(resumed) and (not len(div) or resumed[-1] > div[-1]):
            self.lost = False  # the executor went on in phase after an insertion by itself
        if not self.lost or self.start_level is None or s.plan is None:
            return
        is_af = (k == ALLOC) | (k == FREE)
        af = ev[is_af]
        if not len(af):
            return
        signed = np.where(af["kind"] == ALLOC, 1, -1) * af["size"].astype(np.int64)
        after = int(s._live["size"].astype(np.int64).sum())  # bytes live after the batch
        level = after - int(signed.sum()) + np.cumsum(signed)  # after each event
        hits = np.flatnonzero(level == self.start_level)
        if not len(hits):
            return
        before = np.concatenate(([0], np.cumsum(is_af)))  # allocator events before i
        d = int(before[div[-1]]) if len(div) else -1
        h = int(hits[-1])
        its = before[np.flatnonzero(k == ITER)]
        if h >= d and len(its) and int(its[-1]) == h + 1:
            self.lost = False  # the executor started there by itself (sync period_resync)
            return
        if len(div):
            # a start before the divergence is taken (the executor tells a shifted count
            # only at an allocation of another size, often a step later) unless the
            # executor's iteration began there: then that iteration of the loop is the odd
            # one, and its end is awaited
            its = before[np.flatnonzero(k[:div[-1]] == ITER)]
            if h < d and len(its) and int(its[-1]) == h + 1:
                return
        phase = len(af) - 1 - int(hits[-1])  # events of the iteration made since its start
        p = s.plan.meta
        if phase >= int(p["period_events"]):
            return
        tail = af[len(af) - phase:] if phase else af[:0]
        tail = tail[tail["kind"] == ALLOC]
        alive = live_ordinal(s._live, tail["arg"])
        allocs = np.where(alive, tail["addr"], 0).astype(np.int64).tolist()
        self._arm(s, phase, allocs[:len(p["alloc_sizes"])])

    def _arm(self, s: Any, phase: int, allocs: list[int]) -> None:
        from . import native
        from ._armed import arm_plan, plan_table

        if self._table is None or self._table[0] is not s.plan:
            self._table = (s.plan, plan_table(s.plan))
        self.in_row += 1
        # the iterations it leaves are not ones in a row towards relearning
        # (Steps.iterations); a loop that has changed finds no phase that holds, and
        # relearns after relearn_after resyncs in a row
        self.forgive = self.in_row <= s.relearn_after
        native.disarm()
        arm_plan(s.plan, s._addrs, device=s.device, start_now=True, phase=phase,
                 phase_allocs=allocs, table=self._table[1], resync=True)
        self.lost = False
        self.resyncs += 1
        logger.debug("period resync %d: re-armed at phase %d of the learned iteration",
                     self.resyncs, phase)
