"""The Scheduler's fault sampler: access samples without a framework, from CUPTI's
unified-memory GPU page-fault records collected during the warm-up iterations
(``Scheduler(mode="sampled", sampler="cupti")``, or ``sampler="auto"`` without PyTorch).

Rule (Note [Fault probes], ``planner/_faults.py``, which simulates the same rule): at every
warm-up marker the sampler flushes CUPTI, maps the new faults to blocks and ticks, and sets
the native probe table for the iteration starting: a rotating ``share`` of the persistent
candidates -- the persistent ones (blocks alive across the marker before, in allocation
order), then the long-lived non-persistent ones of the iteration that ended (allocated and
freed in it, alive at least ``long_life`` of its allocator events, named by their
allocation event: their address changes between iterations, the native probe learns it at
that event) -- is moved to the host right after its last observed touch (tick ``last + 1``
of the iteration; when none is seen yet: at the marker, or right after the allocation), so
its next use faults. A probed block that shows no fault after its probe point in that
iteration is closed (its touch list is complete) and probed no more; so is a
non-persistent one whose last observed touch is just before its free. The warm-up's
length follows the rule (``settled``): probing goes on while some candidate's list is open
and stops at the marker after which none is (from the second marker: the non-persistent
candidates are known from the first iteration on), or after ``max_iters`` probed
iterations (the cost cap); the probe table is then emptied, and the Scheduler, which
waits for ``warmed_up``, plans. When the warm-up ends CUPTI is stopped.

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
from .planner._faults import LONG_LIFE, MAX_WARMUP

logger = logging.getLogger("uvm_sched.runtime")

SAMPLERS = ("auto", "torch", "cupti")


class FaultSampler:
    """The TouchRecorder interface of the Scheduler (``clear``, ``start``, ``stop``,
    ``clocks``, ``addresses``, ``device_type``) over CUPTI fault records, plus ``see``
    (each drained batch while recording) and ``report`` (for ``stats()``)."""


    def __init__(self, device: int = 0, share: float = 1.0, path: str | None = None,
                 long_life: float | None = LONG_LIFE, max_iters: int = MAX_WARMUP) -> None:
        from .planner._faults import long_lived, probe_groups

        probe_groups(1, share)  # checks share now
        if long_life is not None:
            long_lived([], [], 1, long_life)  # and long_life
        if int(max_iters) < 1:
            raise ValueError(f"max_iters must be >= 1 (the warm-up's cap in probed "
                             f"iterations), got {max_iters}")
        self.device, self.share, self.path = int(device), float(share), path
        self.max_iters = int(max_iters)
        self.long_life = long_life
        self.unavailable: str | None = None  # why CUPTI could not be used
        self.on = False
        self.clear()

    # -- the TouchRecorder interface -----------------------------------------------------
    def clear(self) -> None:
        self._faults: list[np.ndarray] = []  # (ring tick, address) per fault, per flush
        self._ev_t: list[np.ndarray] = []  # t_ns of the allocator events seen
        self._ev_tick: list[np.ndarray] = []
        self._allocs: list[np.ndarray] = []  # (tick, kind, addr, size, arg) of the allocator events
        self._pairs: list[tuple[int, int]] = []  # (cupti ns, monotonic ns)
        self._marks: list[int] = []  # ring tick at which each iteration started
        self._last: dict[int, int] = {}  # ordinal -> last observed touch (iteration tick)
        self._probed: dict[int, int] = {}  # ordinal -> probe tick, in the iteration under way
        self._closed: set[int] = set()
        self._addr: dict[int, int] = {}  # ordinal -> address of the blocks seen
        # non-persistent blocks, by allocation event of the iteration: last observed touch,
        # probe tick in the iteration under way, closed, (size, free event) when last seen
        self._l_last: dict[int, int] = {}
        self._l_probed: dict[int, int] = {}
        self._l_closed: set[int] = set()
        self._l_shape: dict[int, tuple[int, int]] = {}
        self._settled = False  # the warm-up's probing is over (module doc)
        self.collected = {"faults": 0, "faults_in_iterations": 0, "probe_rounds": 0,
                          "probes_set": 0, "probe_bytes_set": 0, "local_probes_set": 0}

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
    def settled(self) -> bool:
        """Whether the warm-up's probing is over (module doc): no candidate's list is
        open, or ``max_iters`` iterations were probed; True without CUPTI (nothing to
        learn by waiting)."""
        return self.unavailable is not None or self._settled

    @property
    def clocks(self) -> tuple[np.ndarray, np.ndarray, tuple[list[int], list[int]]] | None:
        """Ring ticks of the faults collected, the addresses of the persistent blocks whose
        touch list is still open (their tails are assumed busy), and the allocation events
        of the non-persistent blocks probed and of those left open
        (``planner.samples_from_faults``'s ``local``); None: CUPTI unavailable, plan
        obliviously."""
        if self.unavailable is not None:
            return None
        if self.on:
            self._collect()
        open_ = [self._addr[o] for o in self._last if o not in self._closed]
        local = (sorted(self._l_last), sorted(set(self._l_last) - self._l_closed))
        return self._all()[0], np.asarray(open_, np.uint64), local

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
        self._allocs.append(ev[a][["tick", "kind", "addr", "size", "arg"]])
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
        local = self._local(prev, start, ticks[it], addrs[it])
        # candidates: alive across the marker before (allocated before that iteration began)
        cand = live[(live["tick"] < prev) | (len(self._marks) == 1)]
        cand = cand[~np.isin(cand["arg"], np.fromiter(self._closed, np.int64))]
        rnd = len(self._marks) - 1
        if self._settled or rnd >= self.max_iters or (rnd and not len(cand) and not local):
            # the rule stops: the cap is reached, or no list is open (module doc)
            self._settled = True
            self._probed, self._l_probed = {}, {}
            nf.probe_set(np.empty(0, nf.PROBE_DTYPE))
            return
        # one rotation over both kinds: the persistent candidates first (as in fault_samples)
        g = probe_groups(len(cand) + len(local), self.share)
        mine = g == rnd % (int(g.max(initial=0)) + 1)
        pick = cand[mine[:len(cand)]]
        lpick = [e for e, m in zip(local, mine[len(cand):]) if m]
        rows = np.zeros(len(pick) + len(lpick), nf.PROBE_DTYPE)
        rows["device"] = self.device
        rows["alloc_event"] = -1
        n = len(pick)
        rows["tick"][:n] = [self._last.get(int(o), -2) + 1 for o in pick["arg"]]
        rows["addr"][:n], rows["bytes"][:n] = pick["addr"], pick["size"]
        rows["tick"][n:] = [self._l_last.get(e, e - 1) + 1 for e in lpick]
        rows["bytes"][n:] = [self._l_shape[e][0] for e in lpick]
        rows["alloc_event"][n:] = lpick  # addr 0: the block of that allocation event (probe.c)
        self._probed = dict(zip(pick["arg"].tolist(), rows["tick"][:n].tolist()))
        self._l_probed = dict(zip(lpick, rows["tick"][n:].tolist()))
        nf.probe_set(rows)
        self.collected["probe_rounds"] += 1
        self.collected["probes_set"] += len(rows)
        self.collected["local_probes_set"] += len(lpick)
        self.collected["probe_bytes_set"] += int(rows["bytes"].sum())

    def _local(self, prev: int, start: int, f_ticks: np.ndarray, f_addrs: np.ndarray) -> list:
        """The non-persistent candidates for the iteration starting (module doc), by their
        allocation event in the iteration that ended [prev, start), after learning from that
        iteration's faults (ring ticks ``f_ticks``, addresses ``f_addrs``)."""
        if self.long_life is None or len(self._marks) < 2 or not self._allocs:
            return []
        from .planner._faults import long_lived

        every = np.concatenate(self._allocs)
        self._allocs = [every[every["tick"] >= start]]  # keep the iteration under way only
        ev = every[(every["tick"] >= prev) & (every["tick"] < start)]
        al, fr = ev[ev["kind"] == ALLOC], ev[ev["kind"] == FREE]
        f_of = dict(zip(fr["arg"].tolist(), fr["tick"].tolist()))  # pool ordinal -> free tick
        ft = np.array([f_of.get(o, -1) for o in al["arg"].tolist()], np.int64)
        at = al["tick"].astype(np.int64)
        keep = long_lived(at - prev, np.where(ft >= 0, ft - prev, -1), start - prev,
                          self.long_life)
        at, ft = at[keep], ft[keep]
        if not len(at):
            return []
        base = al["addr"][keep].astype(np.uint64)
        size = al["size"][keep].astype(np.uint64)
        # each fault's block: the nearest base below it that holds it and is alive then
        # (a range reused by a later block of the iteration: the others are scanned)
        order = np.argsort(base, kind="stable")
        j = np.searchsorted(base[order], f_addrs, side="right") - 1
        cand = order[np.maximum(j, 0)]
        ok = (j >= 0) & (f_addrs < base[cand] + size[cand]) & (f_ticks >= at[cand]) \
            & (f_ticks < ft[cand])
        owner = np.where(ok, cand, -1)
        for i in np.flatnonzero(~ok & (j >= 0)):
            m = np.flatnonzero((base <= f_addrs[i]) & (f_addrs[i] < base + size)
                               & (at <= f_ticks[i]) & (f_ticks[i] < ft))
            owner[i] = m[0] if len(m) else -1
        last = np.full(len(at), -1, np.int64)
        np.maximum.at(last, owner[owner >= 0], f_ticks[owner >= 0] - prev)
        for k, (a, f, sz) in enumerate(zip(at.tolist(), ft.tolist(), size.tolist())):
            e = a - prev
            if self._l_shape.get(e, (sz, 0))[0] != sz:  # another block there now
                for d in (self._l_last, self._l_probed):
                    d.pop(e, None)
                self._l_closed.discard(e)
            self._l_shape[e] = (int(sz), f - prev)
            if last[k] >= 0:
                self._l_last[e] = max(self._l_last.get(e, -1), int(last[k]))
            if e in self._l_probed and self._l_last.get(e, -1) < self._l_probed[e]:
                self._l_closed.add(e)  # no fault after its probe point: the list is complete
            if e in self._l_last and self._l_last[e] + 1 >= f - prev:
                self._l_closed.add(e)  # seen just before its free: nothing can follow
        cands = set((at - prev).tolist())
        return sorted(cands - self._l_closed)

    def report(self) -> dict[str, Any]:
        """What ``Scheduler.stats()["fault_sampling"]`` shows: availability, faults
        collected, blocks with observed touches, closed, the probes' count and bytes, and
        CUPTI's counters."""
        from . import _native_faults as nf

        out: dict[str, Any] = {"sampler": "cupti", "available": self.unavailable is None,
                               "why_not": self.unavailable, **self.collected,
                               "blocks_seen": len(self._last), "blocks_closed": len(self._closed),
                               "local_blocks_seen": len(self._l_last),
                               "local_blocks_closed": len(self._l_closed & set(self._l_last)),
                               "share": self.share, "long_life": self.long_life,
                               "max_iters": self.max_iters, "settled": self.settled}
        if self.unavailable is None:
            out.update(nf.probe_stats())
            out["cupti"] = nf.cupti_stats()
        return out


def warmed_up(touches: Any, marks: int, warmup_iters: int) -> bool:
    """Whether a Scheduler's warm-up is over at ``marks`` markers: ``warmup_iters``
    complete iterations (and the one starting), and, with a fault sampler (``touches``),
    its probing settled (``FaultSampler.settled``: no list open, or its cap)."""
    return marks >= warmup_iters + 1 and (not isinstance(touches, FaultSampler)
                                          or touches.settled)
