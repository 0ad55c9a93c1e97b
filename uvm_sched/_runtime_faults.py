"""The Scheduler's fault sampler: access samples without a framework, from CUPTI's
unified-memory GPU page-fault records collected during the warm-up iterations
(``Scheduler(mode="sampled", sampler="cupti")``, or ``sampler="auto"`` without PyTorch).

Rule (Note [Fault probes], ``planner/_faults.py``, which simulates the same rule): at every
warm-up marker the sampler flushes CUPTI, maps the new faults to blocks and ticks, and sets
the native probe table for the iteration starting: a rotating ``share`` of the persistent
candidates (blocks alive across the marker before, in allocation order) is moved to the
host right after its last observed touch (tick ``last + 1`` of the iteration; at the marker
when none is seen yet), so its next use faults. A probed block that shows no fault after
its probe point in that iteration is closed (its touch list is complete) and probed no
more. When the warm-up ends the probes are cleared and CUPTI is stopped.

Clocks (the rule written down): a fault's time is CUPTI's ``start`` ("when CUDA driver
started processing the fault"). Clock pairs (CUPTI ns, CLOCK_MONOTONIC ns) read at start and
at every flush map it to the ring's clock by linear interpolation between pairs (the offset
of the nearest pair outside them); its tick is the ring tick of the last allocator event
whose ``t_ns`` is at or before that time -- the allocator event after which the faulting
kernel was queued if the GPU keeps up with the host. A GPU running behind the host makes
the tick late by the launch queue's depth in allocator events (the planner's guards absorb
a few ticks; the warm-up does not synchronise to keep its cost low). Addresses map to the
block alive then whose bytes hold them (``planner.samples_from_faults``, in the worker).
"""
from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ._runtime_recording import ALLOC, FREE, MARK

logger = logging.getLogger("uvm_sched.runtime")

SAMPLERS = ("auto", "torch", "cupti")


class FaultSampler:
    """The TouchRecorder interface of the Scheduler (``clear``, ``start``, ``stop``,
    ``clocks``, ``addresses``, ``device_type``) over CUPTI fault records, plus ``see``
    (each drained batch while recording) and ``report`` (for ``stats()``)."""


    def __init__(self, device: int = 0, share: float = 0.5, path: str | None = None) -> None:
        from .planner._faults import probe_groups

        probe_groups(1, share)  # checks share now
        self.device, self.share, self.path = int(device), float(share), path
        self.unavailable: str | None = None  # why CUPTI could not be used
        self.on = False
        self.clear()

    # -- the TouchRecorder interface -----------------------------------------------------
    def clear(self) -> None:
        self._faults: list[np.ndarray] = []  # (ring tick, address) per fault, per flush
        self._ev_t: list[np.ndarray] = []  # t_ns of the allocator events seen
        self._ev_tick: list[np.ndarray] = []
        self._pairs: list[tuple[int, int]] = []  # (cupti ns, monotonic ns)
        self._marks: list[int] = []  # ring tick at which each iteration started
        self._last: dict[int, int] = {}  # ordinal -> last observed touch (iteration tick)
        self._probed: dict[int, int] = {}  # ordinal -> probe tick, in the iteration under way
        self._closed: set[int] = set()
        self._addr: dict[int, int] = {}  # ordinal -> address of the blocks seen
        self.collected = {"faults": 0, "faults_in_iterations": 0, "probe_rounds": 0}

    def start(self) -> None:
        from . import _native_faults as nf
        from .native import UvmSchedError

        if self.on:
            return
        try:
            nf.cupti_start(self.path, self.device)
        except (UvmSchedError, ValueError) as e:
            self.unavailable = str(e)
            logger.warning("no fault sampling, planning obliviously: %s", e)
            return
        self.unavailable = None
        self.on = True
        self._pairs.append(nf.cupti_clock())

    def stop(self) -> None:
        from . import _native_faults as nf

        if not self.on:
            return
        self._collect()
        nf.probe_set(np.empty(0, nf.PROBE_DTYPE))
        nf.cupti_stop()
        self.on = False

    device_type = "cupti"  # what the worker reads to take the fault path

    @property
    def clocks(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Ring ticks of the faults collected and the addresses of the blocks whose touch
        list is still open (their tails are assumed busy); None: CUPTI unavailable, plan
        obliviously."""
        if self.unavailable is not None:
            return None
        if self.on:
            self._collect()
        open_ = [self._addr[o] for o in self._last if o not in self._closed]
        return self._all()[0], np.asarray(open_, np.uint64)

    @property
    def addresses(self) -> np.ndarray | None:
        return None if self.unavailable is not None else self._all()[1]

    # -- recording -----------------------------------------------------------------------
    def see(self, ev: np.ndarray, live: np.ndarray) -> None:
        """A drained batch: keep the allocator events' clock; at a marker, collect the
        faults and set the probes for the iteration starting."""
        if not self.on or not len(ev):
            return
        k = ev["kind"]
        a = (k == ALLOC) | (k == FREE)
        self._ev_t.append(ev["t_ns"][a].astype(np.int64))
        self._ev_tick.append(ev["tick"][a].astype(np.int64))
        marks = ev["tick"][k == MARK]
        if not len(marks):
            return
        self._collect()
        self._marks.extend(int(t) for t in marks)
        self._update(live)

    def _all(self) -> tuple[np.ndarray, np.ndarray]:
        f = np.concatenate(self._faults) if self._faults else np.empty((0, 2), np.int64)
        return f[:, 0].astype(np.int64), f[:, 1].astype(np.uint64)

    def _collect(self) -> None:
        """Flush CUPTI; map the new faults' times to ring ticks (module doc)."""
        from . import _native_faults as nf

        nf.cupti_flush()
        self._pairs.append(nf.cupti_clock())
        got = nf.cupti_take()
        self.collected["faults"] += len(got)
        if not len(got) or not self._ev_t:
            return
        pc, pm = (np.asarray(x, np.float64) for x in zip(*sorted(self._pairs)))
        tc = got["t_cupti"].astype(np.float64)
        if len(pc) > 1 and pc[-1] > pc[0]:
            mono = np.interp(tc, pc, pm) + np.where(tc < pc[0], tc - pc[0], 0) \
                + np.where(tc > pc[-1], tc - pc[-1], 0)
        else:
            mono = tc - pc[0] + pm[0]
        et = np.concatenate(self._ev_t)
        etick = np.concatenate(self._ev_tick)
        i = np.searchsorted(et, mono, side="right") - 1
        ok = i >= 0
        ticks = etick[np.maximum(i, 0)]
        self._faults.append(np.stack([ticks[ok], got["address"][ok].astype(np.int64)], 1))

    def _update(self, live: np.ndarray) -> None:
        """The probes of the iteration starting now (module doc)."""
        from . import _native_faults as nf
        from .planner._faults import probe_groups

        start = self._marks[-1]
        prev = self._marks[-2] if len(self._marks) > 1 else start
        ticks, addrs = self._all()
        # the iteration that just ended (none before the first marker): its faults on the
        # blocks alive now
        it = (ticks >= prev) & (ticks < start) & (len(self._marks) > 1)
        base, size = live["addr"].astype(np.uint64), live["size"].astype(np.uint64)
        order = np.argsort(base)
        j = np.searchsorted(base[order], addrs[it], side="right") - 1
        inb = j >= 0
        owner = order[np.maximum(j, 0)]
        inb &= addrs[it] < base[owner] + size[owner]
        self.collected["faults_in_iterations"] += int(np.count_nonzero(inb))
        seen: dict[int, int] = {}
        for o, t in zip(live["arg"][owner[inb]].tolist(), (ticks[it][inb] - prev).tolist()):
            seen[o] = max(seen.get(o, -1), t)
        for o, at in self._probed.items():
            if seen.get(o, -1) < max(at, 0):
                self._closed.add(o)  # no fault after its probe point: the list is complete
        for o, t in seen.items():
            self._last[o] = max(self._last.get(o, -1), t)
        self._addr.update(zip(live["arg"].tolist(), live["addr"].tolist()))
        # candidates: alive across the marker before (allocated before that iteration began)
        cand = live[(live["tick"] < prev) | (len(self._marks) == 1)]
        cand = cand[~np.isin(cand["arg"], np.fromiter(self._closed, np.int64))]
        rnd = len(self._marks) - 1
        g = probe_groups(len(cand), self.share)
        pick = cand[g == rnd % (int(g.max(initial=0)) + 1)] if len(cand) else cand
        rows = np.zeros(len(pick), nf.PROBE_DTYPE)
        rows["tick"] = [self._last.get(int(o), -2) + 1 for o in pick["arg"]]
        rows["addr"], rows["bytes"] = pick["addr"], pick["size"]
        rows["device"] = self.device
        self._probed = dict(zip(pick["arg"].tolist(), rows["tick"].tolist()))
        nf.probe_set(rows)
        self.collected["probe_rounds"] += 1

    def report(self) -> dict[str, Any]:
        """What ``Scheduler.stats()["fault_sampling"]`` shows: availability, faults
        collected, blocks with observed touches, closed, the probes' count and bytes, and
        CUPTI's counters."""
        from . import _native_faults as nf

        out: dict[str, Any] = {"sampler": "cupti", "available": self.unavailable is None,
                               "why_not": self.unavailable, **self.collected,
                               "blocks_seen": len(self._last), "blocks_closed": len(self._closed),
                               "share": self.share}
        if self.unavailable is None:
            out.update(nf.probe_stats())
            out["cupti"] = nf.cupti_stats()
        return out
