"""The Scheduler's two judges by the clock: the tuner (which candidate plan runs fastest)
and the watchdog (does the plan beat no plan), both timing iterations between markers.

Rule: an iteration counts when it runs between two markers, is not the first after a
switch (arming or disarming: the first iteration settles) and saw no divergence (the
executor disarmed the plan for the rest of it, so it timed neither). ``MarkerClock`` is
that rule, once, for both judges. The judges decide; the ``Scheduler`` acts (arms,
disarms, changes state), so this module touches neither the native core nor logging.

The watchdog (with iteration markers): a plan must pay by the clock. Once armed (and
tuned), the plan's iterations are timed between markers for ``watchdog_iters`` iterations,
then the same number with the plan disarmed ("no plan", the candidate every plan is
measured against), then the plan is armed again and every later iteration is timed. When
the median of the last ``watchdog_iters`` armed iterations exceeds the unplanned median by
more than ``WATCHDOG_SLACK``, the plan is disarmed for good (state ``unplanned``),
``stats()["watchdog"]`` says so with both figures, and it is a problem like the others (one
``SchedulerWarning``; strict: raised).
"""
from __future__ import annotations

import dataclasses
import statistics
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from ._runtime_recording import DIVERGENCE, MARK

if TYPE_CHECKING:  # for annotations only
    from .planner import Plan

# How much slower than no plan an armed plan may measure before the watchdog drops it (a
# share of the unplanned iteration time): the bound; below it lies timing noise of
# a median over a few iterations.
WATCHDOG_SLACK = 0.03


@dataclasses.dataclass
class MarkerClock:
    """Times iterations between the MARK events of drained batches (``t_ns``)."""

    skip: int = 1  # iterations not timed after a switch (they settle)
    last: int | None = None  # t_ns of the last marker
    bad: bool = False  # the iteration under way diverged

    def restart(self) -> None:
        """After a switch: the next marker starts an iteration, which is not timed."""
        self.skip, self.last, self.bad = 1, None, False

    def iterations(self, ev: np.ndarray) -> Iterator[float | None]:
        """Per MARK of ``ev``, in order: the seconds of the iteration it ends, or None when
        that one does not count. The consumer may ``restart()`` between two yields; the
        markers after that start afresh."""
        k = ev["kind"]
        for i in np.flatnonzero((k == MARK) | (k == DIVERGENCE)).tolist():
            if k[i] == DIVERGENCE:
                self.bad = True
                continue
            now = int(ev["t_ns"][i])
            secs = None
            if self.last is not None and not self.bad:
                if self.skip:
                    self.skip -= 1
                else:
                    secs = (now - self.last) * 1e-9
            self.last, self.bad = now, False
            yield secs


@dataclasses.dataclass
class Tuner:
    """Candidate plans (label, plan) armed in turn for ``iters`` timed iterations each;
    ``medians()`` once ``advance()`` has run out of candidates."""

    cands: list[tuple[str, Plan]]
    iters: int
    i: int = 0  # the candidate armed now
    times: list[list[float]] = dataclasses.field(init=False)  # seconds, per candidate
    clock: MarkerClock = dataclasses.field(default_factory=MarkerClock)

    def __post_init__(self) -> None:
        self.times = [[] for _ in self.cands]

    @property
    def label(self) -> str:
        """The candidate armed now."""
        return self.cands[self.i][0]

    def feed(self, ev: np.ndarray) -> bool:
        """Time the iterations ``ev`` ends for the candidate armed now; True when it has
        ``iters`` of them (its turn is over: later markers of ``ev`` ran before the switch
        and count for no one)."""
        for secs in self.clock.iterations(ev):
            if secs is not None:
                self.times[self.i].append(secs)
            if len(self.times[self.i]) >= self.iters:
                return True
        return False

    def advance(self) -> Plan | None:
        """The next candidate's plan, to arm now (at a marker); None when all are timed."""
        self.i += 1
        if self.i == len(self.cands):
            return None
        self.clock.restart()
        return self.cands[self.i][1]

    def medians(self) -> dict[str, float]:
        """Median seconds per iteration of each candidate, by label."""
        return {label: statistics.median(t) for (label, _), t in zip(self.cands, self.times)}


@dataclasses.dataclass
class Watchdog:
    """Iteration times (s) of one plan armed and of no plan, taken between markers.
    ``phase``: ``"plan"`` (timing the armed plan) -> ``"none"`` (disarmed, timing no plan)
    -> ``"watch"`` (armed again, every iteration timed) -> ``"disarmed"`` (it lost)."""

    iters: int
    plan: Any = None  # the plan being judged (a new one is judged afresh)
    phase: str = "plan"
    clock: MarkerClock = dataclasses.field(default_factory=MarkerClock)
    plan_s: list[float] = dataclasses.field(default_factory=list)
    none_s: list[float] = dataclasses.field(default_factory=list)

    def reset(self, plan: Any) -> None:
        self.plan, self.phase, self.plan_s, self.none_s = plan, "plan", [], []
        self.clock.restart()

    def _switch(self, phase: str) -> None:
        self.phase = phase
        self.clock.restart()

    def feed(self, ev: np.ndarray) -> Iterator[str]:
        """Per marker of ``ev``, what the Scheduler must do now, if anything: ``"disarm"``
        (the plan has its iterations: no plan runs next), ``"rearm"`` (no plan has its
        iterations and the plan did not lose: arm it again, timed from now on) or
        ``"lost"`` (the plan is more than ``WATCHDOG_SLACK`` slower than no plan: disarm
        it for good; the last word)."""
        n = self.iters
        for secs in self.clock.iterations(ev):
            if secs is not None:
                (self.none_s if self.phase == "none" else self.plan_s).append(secs)
            if self.phase == "plan" and len(self.plan_s) >= n:
                self._switch("none")
                yield "disarm"
            elif (self.phase == "none" and len(self.none_s) >= n) or self.phase == "watch":
                if self.loses():
                    self.phase = "disarmed"
                    yield "lost"
                    return
                if self.phase == "none":
                    self._switch("watch")
                    yield "rearm"

    def loses(self) -> bool:
        """The median of the plan's last ``iters`` iterations is more than ``WATCHDOG_SLACK``
        above no plan's median."""
        n = self.iters
        if len(self.plan_s) < n or len(self.none_s) < n:
            return False
        no_plan = statistics.median(self.none_s)
        return statistics.median(self.plan_s[-n:]) > (1 + WATCHDOG_SLACK) * no_plan

    def report(self) -> dict:
        """``stats()["watchdog"]``: the phase and the medians (s) it judges by."""
        n = self.iters
        return {"phase": self.phase,
                "plan_s": statistics.median(self.plan_s[-n:]) if self.plan_s else None,
                "no_plan_s": statistics.median(self.none_s) if self.none_s else None,
                "iterations_timed": len(self.plan_s) + len(self.none_s)}

    def verdict(self) -> str:
        """Why the plan was disarmed, with both figures (after ``"lost"``)."""
        r = self.report()
        return (f"watchdog: the plan's iterations took {r['plan_s']:.6f} s (median of the "
                f"last {self.iters}), no plan's {r['no_plan_s']:.6f} s: more than "
                f"{WATCHDOG_SLACK:.0%} slower, so it is disarmed")
