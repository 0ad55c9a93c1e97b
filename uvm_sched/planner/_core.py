"""The schedule builder: blocks with use ticks, a memory budget and two copy engines in,
evictions/prefetches with their allocator-event ticks out. Mode-agnostic: the modes only
differ in the use ticks they hand in (``_planner``, Note [Use ticks]).

``build_schedule`` runs five steps over one ``_Timeline``; each is explained by a named note
below, and the lines that carry out a note point to it.

Note [What is optimised]
------------------------
One learned iteration (``pattern.analyze``'s representative one) is a sequence of ticks
with device times ``d_t`` and blocks with sizes, lifetimes and *use ticks*. The plan must
keep the bytes resident on the device (plus prefetches in flight) <= ``budget`` at every
tick while minimising the stall: transfer time the compute cannot hide. A block not used
in ``(u1, u2)`` may leave the device after ``u1`` and come back before ``u2``; that saves
its bytes for the ticks in between and costs one transfer each way on the copy engines
(one per direction: evictions at ``d2h_prefetch_Bps``, prefetches at ``h2d_prefetch_Bps``).

Note [Timeline]
---------------
All times are device nanoseconds of the *ideal* (never stalled) iteration: tick ``t`` runs
from ``C[t]`` to ``C[t+1]``. Ticks ``T..2T-1`` are the next iteration (the timeline is
unrolled once so that gaps of persistent blocks may wrap around the iteration boundary).
The runtime acts only at allocator events, its *control points*: after event ``k`` the
compute through tick ``q[k]`` is queued, so a side-stream copy issued there starts at the
earliest at ``tau[k] = C[q[k] + 1]``.

Note [Candidate gaps]
---------------------
Every idle gap ``(u1, u2)`` of at least one tick is a candidate, with its *window*: the
ticks where its bytes are off the device if the link were idle -- from the tick the
eviction is issued (the first allocator event after ``u1`` is queued) to the tick of the
latest allocator event from which the prefetch still finishes by ``u2``. A gap whose data
is dead after ``u1`` (a dead tail) has no prefetch: its window runs to the block's end.
A lifetime-ends block is used within ``guard`` ticks of each end. Every guard level gives
a candidate, widest first; the narrower ones (more saving, more risk of a use the model
cannot see) are *siblings*: at most one of a group is chosen. Guards wider than
``WIDE_GUARD_TICKS`` apply only to blocks living ``WIDE_GUARD_LIFETIMES`` such guards.
A block with explicit use ticks (sampled touches) has a gap between two consecutive uses
at every guard level no wider than 1/``TOUCH_GUARD_GAPS`` of the gap (the touch is seen,
the guard only absorbs timing slack), siblings as above; a persistent one also from its
last use to its first in the next iteration (wrap).

Note [Evictions right after a seen touch]
-----------------------------------------
At a seen touch the guard only absorbs timing noise; at the prefetch end its width is
lead time, at the eviction end it only delays the write-back. The budget counts an
eviction from its issue (the next Note), so the selection never sees that delay, and where
the d2h engine is the bottleneck (a forward pass making activations faster than the link
writes them back) the compute waits for room: ResNet-50 at 50% on GH200 C2C, sampled,
waited 1.3 ms with the h2d engine idle, the first write-back starting 19 ticks into the
iteration. So where the schedule predicts such a wait (``eviction_wait_s`` > 0) and some
blocks have seen uses, the schedule is built again with their gaps leaving at the narrowest
guard (``touch_guard_min``) after the touch at every level, the levels varying the prefetch
end only, and the build with the lower predicted stall (Note [Prediction]) is kept, unless
it ends further over budget. Always leaving early is not kept: on a slower link an early
write-back can take the d2h engine ahead of a more urgent one (ResNet-50 at 30% on PCIe
180.8 -> 190.5 ms, predicted 346 -> 548,529 ms); that build loses the comparison.

Note [Budget counts an eviction from its issue]
-----------------------------------------------
An evicted block counts as gone from the tick its eviction is issued: the runtime (and
the driver) waits for a release under way rather than evicting something else, so a late
eviction costs a wait (predicted as ``eviction_wait_s``), not a fault storm; its
completion time is the timing pass's business.

Note [Selection]
----------------
Belady-like, a sweep over ticks: at each tick where resident bytes exceed the budget,
take, among the unchosen gaps whose window covers the tick, the safest guard level first
and within it the one whose window reaches furthest (next use furthest away; ties: larger
block) until the tick fits. Its saving is applied to its whole window (a difference
array), so later ticks see it. When no window covers an over-budget tick, a chosen
prefetch is delayed past it (a predicted stall: cheaper than the driver's eviction and
fault-back). The sweep is ``_reference.select`` (the definition) or ``_fast.select`` (the
same decisions compiled).

Note [Timing]
-------------
The chosen transfers are placed on the two copy-engine queues (FIFO in issue order, in
the steady state: copies issued for the next iteration share the engines with this one's
at the same point of the iteration, ``_queues.cyclic_fifo``): evictions as early as allowed;
prefetches by backward list scheduling from the latest deadline (each finishes by its use
and before the next prefetch on the engine starts), moved earlier than the selection's
point only where the budget has room for the block over the extra ticks
(``_queues._earliest_with_room``), then issued at the latest allocator event at or before that
start (the nearest *earlier* control point: a trace with many ops between two allocator
events gives coarse control points, which costs memory -- the prefetch lands early -- and
is measured in ``meta["predicted"]["coarse_control_*"]``). Then, in deadline order, each
prefetch of a block with seen uses moves to the earliest control point from which it fits
under the budget, counting only room that seen gaps free once their evictions have landed
(``_early``: the link works ahead instead of idling while a later prefetch waits). A
forward pass then gives the real queue times (late prefetches are predicted stall), and a
gap the link cannot serve at all is dropped (``bad``). Selection and timing repeat, at
most ``rounds`` times, until no tick is over budget.

Note [Remote fallback]
----------------------
Persistent blocks with unknown uses are the last resort: mapped host-resident (the device
reads them over the link) while that is cheaper than leaving the excess to the driver
(write-back at ``d2h_evict``, fault back at ``h2d_fault`` per byte over budget at the
worst tick; once per touch where the touches are known, once per guessed fault-back
otherwise, ``_reads``: a sweep over more than the device holds misses at every touch
under the driver's LRU, see the simulator's cyclic case). Largest first: each mapping
lowers the excess most (ranked by price per byte, the many small blocks with few reads
went first, each lowering the excess by little; benchmarks/results/robust.md, "reads
guessed from the gradients"). Among blocks of one size (a transformer's weights and their
optimizer moments), those whose touches were seen go cheapest first; a guessed price
ranks none. Only when the excess left after eviction is above
``remote_min_excess``; a remote block's own gaps become pointless and are dropped.

Note [Issue points]
-------------------
Control points with the same ``q`` (the FREEs after kernel t and the ALLOCs before kernel
t+1) order a side-stream copy after the same kernels, and the budget counts them as one
tick; the executor, though, meets them one after another. So an eviction is issued at the
first of its group (its room is there before any claim of the group) and a prefetch at
the last (after every release of the group), within the block's own lifetime: measured on
G10's ResNet-152 at 40 GiB, prefetches issued at a FREE before the next tick's evictions
pushed the driver into evicting 1.3 GB of weights.

Note [Prediction]
-----------------
The builder's own estimate, in seconds and bytes: the ideal iteration, the stall (late
prefetches accumulated along the h2d queue, ``_stall.prefetch_stall``; waits for evictions in
flight, ``_stall.eviction_wait``; the remote blocks' access cost), the transfers and what is
left over budget.

Note [Complexity and the bound]
-------------------------------
O((E + T + G) log G) per round for E allocator events, T ticks and G candidate gaps (one
per idle gap and guard level); a 100,000-event iteration plans in well under a second
(``benchmarks/bench_planner.py``). The simulator's ``bound`` lets every transfer use the
full link with perfect foresight of ground-truth accesses and no control-point
granularity; this builder makes the same eviction choice a Belady (furthest next use) rule
would, but sees only its use model, issues at allocator events and pays the queues, so
``T_plan >= T_bound``; the gap between them is what the targets measure.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from . import _fast, _reference, _stall
from ._excess import Excess as _Excess
from ._queues import timing
from ._wider_guards import evictions_at_wider_guards

__all__ = ["Problem", "Schedule", "build_schedule"]

# Guards wider than this (ticks) apply only to blocks whose lifetime spans at least
# WIDE_GUARD_LIFETIMES such guards (measured: UNet's short-lived blocks lost 1.3x on PCIe
# with a 32-tick guard; with the rule they plan as with 16, CNN skip inputs keep 32).
WIDE_GUARD_TICKS = 16
WIDE_GUARD_LIFETIMES = 6
# A guard around a sampled touch is at most this share of its gap (1/6, as the wide-guard
# rule above): the touch is seen, so the guard only absorbs timing slack. Measured with
# benchmarks/bench_quality.py on 9 zoo cases: guards up to 32 ticks under this rule are
# 2-5% faster than at most 2 ticks on BERT/ViT/GPT-2 at 75% on PCIe, 6% slower on U-Net.
TOUCH_GUARD_GAPS = 6


@dataclasses.dataclass
class Problem:
    """One learned iteration, as the schedule builder sees it (arrays indexed by block).

    ``uses[i]``: sorted use ticks of block ``i`` within ``[live_from, live_to]``, or None
    when they are unknown (the block must stay resident, or be mapped remotely).
    ``wrap[i]``: the block outlives the iteration (persistent): the gap from its last use
    to its first use in the next iteration is a candidate too.
    ``dead_tail[i]``: the data is dead after the last use (evict without prefetching back).
    How each mode fills them: ``_planner``, Note [Use ticks].
    """

    dur_ns: np.ndarray  # (T,) device ns per tick
    ev_tick: np.ndarray  # (E,) tick of each allocator event
    ev_free: np.ndarray  # (E,) bool: the event is a FREE
    size: np.ndarray  # (n,) bytes
    persistent: np.ndarray  # (n,) bool
    live_from: np.ndarray  # (n,) first tick the block holds memory in the iteration
    live_to: np.ndarray  # (n,) last tick (inclusive)
    alloc_event: np.ndarray  # (n,) allocator event of the ALLOC, -1 = before the iteration
    free_event: np.ndarray  # (n,) allocator event of the FREE, -1 = after the iteration
    uses: list  # per block: np.ndarray of ticks, or None
    wrap: np.ndarray  # (n,) bool
    busy_span: np.ndarray  # (n,) bool: busy between its first and last use (no inner gaps)
    end_lo: np.ndarray  # (n,) uses at the two ends of a lifetime: [end_lo, end_lo + guard]
    end_hi: np.ndarray  # (n,) and [end_hi - guard, end_hi] (-1: `uses` says instead)
    dead_tail: np.ndarray  # (n,) bool
    read_only: np.ndarray  # (n,) bool: known read-only (read-mostly where not evicted)
    remote_ok: np.ndarray  # (n,) bool: may be mapped host-resident (accessed remotely)
    remote_cost_ns: np.ndarray  # (n,) estimated remote-access cost per iteration
    touch_count: np.ndarray  # (n,) touches per iteration where sampled, 0 where unknown
    h2d_Bps: float
    d2h_Bps: float
    duplex_Bps: float = float("inf")  # both directions together (the link's duplex cap)
    overflow_ns_per_byte: float = 0.0  # what the driver pays per byte left over budget
    action_call_ns: float = 0.0  # host time of one planned action (a driver call)
    remote_min_excess: int = 0  # remote fallback only when the excess left is this large
    touch_guard_min: int = 0  # ticks: the narrowest guard around a sampled touch (noise)

    @property
    def T(self) -> int:
        return len(self.dur_ns)

    @property
    def E(self) -> int:
        return len(self.ev_tick)


@dataclasses.dataclass
class Schedule:
    """What the builder decided: one row per transfer/advice, plus its own prediction."""

    evictions: list  # (event_unrolled, block, size)
    prefetches: list  # (event_unrolled, block, size)
    remote: list  # blocks mapped host-resident for the whole iteration
    predicted: dict[str, Any]
    # (T,) bytes over the budget at each tick of the iteration with this schedule (None:
    # not computed; the populates' rule, ``_populates``, Note [Populates that evict])
    over_budget: np.ndarray | None = None
    # (T,) the same with no action at all: where it equals ``over_budget`` the schedule
    # freed nothing at that tick (None: not computed)
    over_budget_unplanned: np.ndarray | None = None


class _Gap:
    __slots__ = ("blk", "u1", "u2", "ke", "kp", "e_done", "p_start", "p_end", "t_off", "t_on",
                 "t_on_late", "kp_min", "kp_sel", "chosen", "level", "sibs", "dead", "bad")

    def __init__(self, blk, u1, u2, ke, dead, level=0, sibs=None):
        self.blk, self.u1, self.u2, self.ke, self.dead = blk, u1, u2, ke, dead
        self.level = level  # 0 = widest guard (safest); siblings are the same gap narrower
        self.sibs = sibs if sibs is not None else []
        self.kp = -1
        self.e_done = self.p_start = self.p_end = 0.0
        self.t_off = self.t_on = self.t_on_late = 0
        self.kp_min = ke + 1
        self.kp_sel = ke + 1  # the prefetch's issue point the selection assumed
        self.chosen = False
        self.bad = False


@dataclasses.dataclass
class _Timeline:
    """The unrolled ideal iteration every step works on (Note [Timeline]), with the budget
    and the per-block figures the steps share. Built once per ``build_schedule``."""

    p: Problem
    budget: int  # bytes
    C: np.ndarray  # (2T+1,) ns: unrolled tick t runs from C[t] to C[t+1]
    q: np.ndarray  # (2E,) control point k (unrolled): compute through tick q[k] is queued
    tau: np.ndarray  # (2E,) ns: the earliest start of a copy issued at control point k
    size: np.ndarray  # (n,) int64 bytes
    d2h: np.ndarray  # (n,) ns an eviction takes on the d2h engine (0: read-only, dropped)
    h2d: np.ndarray  # (n,) ns a prefetch takes on the h2d engine
    base: np.ndarray  # (T,) bytes resident at each tick without a plan
    duplex_slow: float = 1.0  # a prefetch's rate while evictions run, over its own rate
    # the arrays converted once per timeline (`listed`, `int64`), by name
    _converted: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    def listed(self, name: str) -> list:
        """The array ``name`` (this timeline's, else its problem's) as a Python list, built
        once per timeline: the per-gap loops read the same values as the array's elements
        without a numpy scalar each, and without converting the array at every pass (at
        1M events the per-block arrays hold half a million elements). The arrays are
        never written after the timeline is built."""
        out = self._converted.get(name)
        if out is None:
            # a timeline field by that name, else the problem's (derived from the fields
            # themselves, so a field added later is found where it lives)
            arr = getattr(self if name in self.__dataclass_fields__ else self.p, name)
            out = self._converted[name] = arr.tolist()
        return out

    def int64(self, name: str) -> np.ndarray:
        """The array ``name`` (as ``listed`` finds it) as int64, converted once per
        timeline (for the compiled timing pass, ``_fast_timing``)."""
        key = "int64:" + name
        out = self._converted.get(key)
        if out is None:
            arr = getattr(self if name in self.__dataclass_fields__ else self.p, name)
            out = self._converted[key] = np.ascontiguousarray(arr, np.int64)
        return out

    @property
    def T(self) -> int:
        return self.p.T

    @property
    def E(self) -> int:
        return self.p.E

    @classmethod
    def of(cls, p: Problem, budget: int) -> _Timeline:
        T = p.T
        C = np.zeros(2 * T + 1)
        C[1:] = np.cumsum(np.concatenate([p.dur_ns, p.dur_ns]))
        # control points (Note [Timeline]): after a FREE, the kernels of its tick are queued
        q1 = p.ev_tick.astype(np.int64) - 1 + p.ev_free.astype(np.int64)
        q = np.concatenate([q1, q1 + T])
        size = p.size.astype(np.int64)
        d2h = size / p.d2h_Bps * 1e9  # read-only too: Note [Read-mostly prefetch to the host]
        base = np.zeros(T + 1, np.int64)
        np.add.at(base, p.live_from.astype(np.int64), size)
        np.add.at(base, p.live_to.astype(np.int64) + 1, -size)
        # evictions are queued first and keep their rate (_engine.copy_end's rule)
        slow = min(1.0, max(0.0, p.duplex_Bps - p.d2h_Bps) / p.h2d_Bps)
        return cls(p, budget, C, q, C[q + 1], size, d2h, size / p.h2d_Bps * 1e9,
                   np.cumsum(base)[:T], slow)


def build_schedule(p: Problem, budget: int, *, guards=(4,), rounds: int = 6,
                   seed=None) -> Schedule:
    """Choose evictions/prefetches so that resident bytes stay <= ``budget`` (bytes) at
    every tick where the use model allows it, hiding transfers behind compute
    (Note [What is optimised]). ``guards``: ticks, widest first; ``rounds``: at most this
    many passes of step 2.

    1. Candidate gaps: every idle gap of every block, at every guard level, with its
       window on the timeline (Note [Candidate gaps]).
    2. Select and time: a Belady-like sweep picks gaps at the over-budget ticks, then the
       transfers are placed on the two copy engines; repeated until the budget holds
       (Note [Selection], Note [Timing]).
    3. Remote fallback: persistent blocks mapped host-resident where eviction left too
       much over budget (Note [Remote fallback]).
    4. Issue points: the allocator event each eviction and prefetch is issued at
       (Note [Issue points]).
    5. Prediction: the stall and bytes the schedule is expected to cost (Note [Prediction]).

    Where the compute is predicted to wait for room and some blocks have seen uses, steps
    1-5 run again with those gaps leaving right after the touch, and the schedule with the
    lower predicted stall is kept (Note [Evictions right after a seen touch]).

    Time complexity: O((E + T + G) log G) per round for G candidate gaps
    (Note [Complexity and the bound]).

    ``seed``: a function ``(timeline, gaps) -> gaps`` whose gaps are taken before step 2's
    first sweep (timed with the rest; the sweeps then repair what is still over budget):
    the LP-guided planner's rounding (``_lp_guided``)."""
    tl = _Timeline.of(p, budget)
    out = _steps(tl, guards, rounds, seed, early_evictions=False)
    if out.predicted["eviction_wait_s"] > 0 and any(u is not None for u in p.uses):
        # Note [Evictions right after a seen touch]
        alt = _steps(tl, guards, rounds, seed, early_evictions=True)
        if alt.predicted["stall_s"] < out.predicted["stall_s"] and \
                alt.predicted["max_over_budget_bytes"] <= out.predicted["max_over_budget_bytes"]:
            out = alt
    return out


def kept_build(sched: Schedule) -> int:
    """Which of ``build_schedule``'s builds ``sched`` is (0: the first; 1: the second, its
    seen-use gaps leaving right after the touch), for a ``seed`` that records each call's
    gaps (``_lp_guided``)."""
    return int(sched.predicted["early_evictions"])


def _steps(tl: _Timeline, guards, rounds: int, seed, early_evictions: bool) -> Schedule:
    """Steps 1-5 of ``build_schedule`` on ``tl``; ``early_evictions``: the gaps between
    seen uses leave at the narrowest guard (Note [Evictions right after a seen touch])."""
    gaps = _candidate_gaps(tl, guards, early_evictions)
    chosen, saved = _select_and_time(tl, gaps, rounds, seed(tl, gaps) if seed else ())
    chosen, remote, resident = _remote_fallback(tl, chosen, saved)
    evictions, prefetches = _issue_points(tl, chosen)
    out = Schedule(evictions, prefetches, remote,
                   _prediction(tl, chosen, remote, resident, len(gaps)),
                   np.maximum(resident - tl.budget, 0), np.maximum(tl.base - tl.budget, 0))
    out.predicted["early_evictions"] = early_evictions
    # siblings list each other (a reference cycle): emptied here, the gaps are freed on
    # return instead of at the collector's next full pass (~150 bytes per event held)
    for g in gaps:
        g.sibs.clear()
    return out


# -- step 1: candidate gaps ------------------------------------------------------------------

class _GapColumns:
    """Candidate gaps as columns, in the order they are found (the order breaks ties in the
    selection, and a gap's guard level is its place in its sibling group): block, u1, u2
    (-1: dead tail), sibling group (< 0: none)."""

    def __init__(self) -> None:
        self.cols: list[list[np.ndarray]] = [[], [], [], []]

    def add(self, blk, u1, u2, group) -> None:
        self.cols[0].append(np.asarray(blk, np.int64))
        self.cols[1].append(np.asarray(u1, np.int64))
        self.cols[2].append(np.asarray(u2, np.int64))
        self.cols[3].append(np.asarray(group, np.int64))

    def arrays(self) -> tuple[np.ndarray, ...]:
        if not self.cols[0]:
            return tuple(np.zeros(0, np.int64) for _ in range(4))
        return tuple(np.concatenate(c) for c in self.cols)


def _candidate_gaps(tl: _Timeline, guards, early_evictions: bool = False) -> _Gaps:
    """Step 1 (Note [Candidate gaps]): the gaps of the lifetime-ends blocks (vectorised:
    the common case), then those of blocks with explicit use ticks, each with its window
    (``early_evictions``: Note [Evictions right after a seen touch])."""
    p = tl.p
    nameable = p.persistent | (p.alloc_event >= 0)
    found = _GapColumns()
    _lifetime_end_gaps(p, nameable, guards, found)
    _use_tick_gaps(p, nameable, guards, found, early_evictions)
    return _windows(tl, *found.arrays())


def _lifetime_end_gaps(p: Problem, nameable, guards, found: _GapColumns) -> None:
    """A block used within ``guard`` ticks of each end of its lifetime: one candidate per
    guard level, the levels of a block siblings (group = the block); its dead tail last
    (Note [Candidate gaps])."""
    fam = np.flatnonzero(nameable & (p.end_lo >= 0))
    prev_a = prev_b = None
    for g in guards:
        a = np.minimum(p.end_lo[fam] + g, p.end_hi[fam])
        b = np.maximum(p.end_hi[fam] - g, p.end_lo[fam])
        ok = b - a >= 2
        if g > WIDE_GUARD_TICKS:
            # a wide guard is for long-lived blocks (skip inputs of a CNN); on a block
            # living fewer than WIDE_GUARD_LIFETIMES guards it only shrinks the window
            ok &= (p.end_hi[fam] - p.end_lo[fam]) >= WIDE_GUARD_LIFETIMES * g
        if prev_a is not None:
            ok &= (a != prev_a) | (b != prev_b)
        found.add(fam[ok], a[ok], b[ok], fam[ok])
        prev_a, prev_b = a, b
    dt = fam[p.dead_tail[fam] & (p.end_hi[fam] < p.live_to[fam])]
    found.add(dt, p.end_hi[dt], np.full(len(dt), -1), -1 - dt)


def _use_tick_gaps(p: Problem, nameable, guards, found: _GapColumns,
                   early_evictions: bool = False) -> None:
    """Blocks with explicit use ticks (sampled touches): all their uses in one array
    (owner, tick), vectorised. Their dead tails first, then the gaps between consecutive
    uses and from the last use to the first in the next iteration (wrap), at every guard
    level no wider than 1/TOUCH_GUARD_GAPS of the gap (and the narrowest, ``touch_guard_min``),
    the levels of one gap siblings (one group per gap); ``early_evictions``: every level
    leaves at the narrowest guard after ``u1`` (Note [Evictions right after a seen touch])."""
    T, n = p.T, len(p.size)
    owners = [i for i in np.flatnonzero(nameable & (p.end_lo < 0)).tolist()
              if p.uses[i] is not None and len(p.uses[i])]
    if not owners:
        return
    own = np.asarray(owners, np.int64)
    lens = np.fromiter((len(p.uses[i]) for i in owners), np.int64, len(owners))
    u = np.concatenate([p.uses[i] for i in owners]).astype(np.int64)
    who = np.repeat(own, lens)
    ends = np.cumsum(lens)
    first_u, last_u = u[ends - lens], u[ends - 1]
    inner = np.flatnonzero((who[1:] == who[:-1]) & (np.diff(u) >= 2))
    inner = inner[~p.busy_span[who[inner]]]
    wrap = p.wrap[own] & (first_u + T - last_u >= 2)
    dead = ~p.wrap[own] & p.dead_tail[own] & (last_u < p.live_to[own])
    found.add(own[dead], last_u[dead], np.full(int(dead.sum()), -1), -1 - own[dead])
    blk = np.concatenate([who[inner], own[wrap]])
    u1 = np.concatenate([u[inner], last_u[wrap]])
    u2 = np.concatenate([u[inner + 1], first_u[wrap] + T])
    if not len(blk):
        return
    tg0 = int(p.touch_guard_min)
    touch_guards = sorted({g for g in guards if g > tg0} | {tg0}, reverse=True)
    grp = n + np.arange(len(blk))  # one sibling group per gap (>= n: not a block index)
    prev_a = prev_b = None
    for g in touch_guards:
        a, b = u1 + (tg0 if early_evictions else g), u2 - g
        ok = (b - a >= 2) & (u2 - u1 >= TOUCH_GUARD_GAPS * g)
        if prev_a is not None:
            ok &= (a != prev_a) | (b != prev_b)
        found.add(blk[ok], a[ok], b[ok], grp[ok])
        prev_a, prev_b = a, b


def _windows(tl: _Timeline, gb, gu1, gu2, ggrp) -> _Gaps:
    """Each candidate's window if the link were idle: the control points of its eviction
    (the first after ``u1`` is queued) and prefetch (the latest from which it still lands
    by ``u2``), the ticks it saves, and whether it has a window at all. Vectorised."""
    p, q, tau, C, E = tl.p, tl.q, tl.tau, tl.C, tl.E
    dead = gu2 < 0
    ke = np.searchsorted(q, gu1, side="left")
    gae, gfe = p.alloc_event.astype(np.int64)[gb], p.free_event.astype(np.int64)[gb]
    ke = np.where(gae >= 0, np.maximum(ke, gae), ke)
    lim = np.where(p.wrap[gb], 2 * E, E)
    ok = (ke < lim) & ((gfe < 0) | (ke < gfe))  # a control point between use and free
    kec = np.minimum(ke, len(q) - 1)
    ok &= dead | (q[kec] < gu2)  # the next use is not queued before the eviction
    # the window opens at the eviction's issue: Note [Budget counts an eviction from its issue]
    e_done = tau[kec] + tl.d2h[gb]
    t_off = q[kec] + 1
    u2c = np.where(dead, 0, gu2)
    latest = C[u2c] - tl.h2d[gb]
    kp = np.searchsorted(tau, latest, side="right") - 1
    # the last control point before the use is queued: a prefetch issued there is late
    # (a stall) but may still beat overflowing the budget
    kl = np.searchsorted(q, u2c, side="left") - 1
    kp = np.where(gfe >= 0, np.minimum(kp, gfe - 1), kp)
    kl = np.where(gfe >= 0, np.minimum(kl, gfe - 1), kl)
    t_on_late = np.where(kl > ke, q[np.clip(kl, 0, len(q) - 1)] + 1, 0)
    kp = np.where(kp <= ke, ke + 1, kp)  # right after the eviction: partly hidden at best
    kpc = np.minimum(kp, len(q) - 1)
    ok &= dead | ((kp < len(q)) & (q[kpc] < gu2) & ((gfe < 0) | (kp < gfe)))
    t_on = np.where(dead, p.live_to[gb] + 1, q[kpc] + 1)
    t_on_late = np.where(dead, t_on, t_on_late)
    ok &= np.maximum(t_on, t_on_late) > t_off
    gaps = _Gaps()
    groups: dict[int, list] = {}
    # the kept windows as Python lists (the same ints and floats as int()/float() of each
    # element, without a numpy scalar per field: tens of thousands of gaps)
    j = np.flatnonzero(ok)
    rows = zip(*(a[j].tolist() for a in (ggrp, gb, gu1, gu2, ke, dead, e_done, t_off, t_on,
                                         t_on_late, kp)))
    for sib_group, b, u1, u2, k_e, is_dead, e_d, off, on, on_late, k_p in rows:
        if sib_group >= 0 and not is_dead:
            sibs = groups.setdefault(sib_group, [])
            g = _Gap(b, u1, u2, k_e, False, len(sibs), sibs)
            sibs.append(g)
        else:
            g = _Gap(b, u1, u2, k_e, is_dead)
        g.e_done, g.t_off = e_d, off
        g.t_on, g.t_on_late = on, on_late
        if not is_dead:
            g.kp = g.kp_sel = k_p
        gaps.append(g)
    gaps.fixed = _fixed_columns(gb[j], t_off[j], t_on_late[j], ggrp[j], dead[j])
    return gaps


class _Gaps(list):
    """The candidate gaps (``_Gap`` objects, in the order they were found) and ``fixed``:
    the fields no step changes, as arrays (``_fast.fixed_fields``'s tuple), made from the
    columns the gaps were made from (gathering them from the objects cost more than the
    compiled sweep that reads them)."""

    fixed: tuple = ()


def _fixed_columns(blk, t_off, t_on_late, group, dead) -> tuple:
    """``_fast.fixed_fields`` of the gaps ``_windows`` makes from these columns (one row per
    gap, in list order; ``group``: the sibling group, < 0 none; a dead tail has no
    siblings): the groups numbered in order of first appearance, each gap's level its
    place in its group. Vectorised."""
    n = len(blk)
    rows = np.flatnonzero((group >= 0) & ~dead)
    keys, first, inv = np.unique(group[rows], return_index=True, return_inverse=True)
    rank = np.empty(len(keys), np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(keys))
    of_row = rank[inv.ravel()]
    order = np.argsort(of_row, kind="stable")
    members = rows[order].astype(np.int64)
    ptr = np.zeros(len(keys) + 1, np.int64)
    ptr[1:] = np.cumsum(np.bincount(of_row, minlength=len(keys)))
    grp = np.full(n, -1, np.int64)
    grp[rows] = of_row
    level = np.zeros(n, np.int64)
    level[members] = np.arange(len(members)) - ptr[of_row[order]]
    return tuple(np.ascontiguousarray(a, np.int64) for a in
                 (blk, t_off, t_on_late, level, grp, ptr, members))


# -- step 2: select and time -----------------------------------------------------------------

def _select_and_time(tl: _Timeline, gaps: _Gaps, rounds: int, seeded=()):
    """Step 2 (Note [Selection], Note [Timing]): rounds of selection at the ticks still
    over budget, each followed by the timing pass over everything chosen so far (the
    ``seeded`` gaps first). Returns the chosen gaps and the bytes they save per tick."""
    chosen: list[_Gap] = list(seeded)
    saved = np.zeros(tl.T, np.int64)
    if chosen:
        for g in chosen:
            g.chosen = True
        saved = timing(chosen, tl)
        chosen = [g for g in chosen if g.chosen]
    for _ in range(rounds):
        resident = tl.base - saved
        if not (resident > tl.budget).any():
            break
        picked = _select(gaps, resident, tl.budget, tl.size, tl.T, tl.q, gaps.fixed)
        if not picked:
            break
        # each gap once, at its first place (by identity: a gap may be picked again)
        chosen = [g for g in {id(g): g for g in chosen + picked}.values() if g.chosen]
        saved = timing(chosen, tl)
        chosen = [g for g in chosen if g.chosen]
    return chosen, saved


def _select(gaps, resident, budget, size, T, q, fixed=None) -> list:
    """One Belady-like sweep: at each over-budget tick evict, among the unchosen gaps
    whose on-time window covers it, the one whose window reaches furthest (next use
    furthest). When none is left, delay a prefetch past the tick (a predicted stall, which
    costs less than the driver evicting and faulting the block back). The sweep itself is
    ``_reference.select`` (plain Python, the definition) or ``_fast.select`` (the same
    decisions in a compiled kernel, used when numba is installed; ``fixed``: its
    ``_fast.fixed_fields(gaps)``). Note [Selection]."""
    return _fast.select(gaps, resident, budget, size, T, q, fixed) if _fast.available() \
        else _reference.select(gaps, resident, budget, size, T, q)


# -- step 3: remote fallback ------------------------------------------------------------------

def _remote_fallback(tl: _Timeline, chosen: list[_Gap], saved: np.ndarray):
    """Step 3 (Note [Remote fallback]): the blocks mapped host-resident, the chosen gaps
    left (a remote block's own are dropped, then the rest re-timed) and the resident bytes
    per tick that result."""
    p, size, budget = tl.p, tl.size, tl.budget
    remote: list[int] = []
    resident = tl.base - saved
    if int((resident - budget).max(initial=0)) <= p.remote_min_excess:
        return chosen, remote, resident
    cand = np.flatnonzero(p.remote_ok)
    # largest first (each lowers the excess most); among blocks of one size, where the
    # touches were seen, the cheapest first (a guessed price ranks none), then by index
    seen = np.fromiter((p.uses[i] is not None for i in cand.tolist()), bool, len(cand))
    cost = np.where(seen, p.remote_cost_ns[cand], 0.0)
    cand = cand[np.lexsort((cand, cost, -size[cand]))].tolist()
    of_blk: dict[int, list] = {}  # block -> its chosen gaps (one pass, not one per block)
    for g in chosen:
        of_blk.setdefault(g.blk, []).append(g)
    excess = _Excess(resident, budget)
    for i in cand:
        worst = excess.worst()
        if worst <= 0:
            break
        lf, lt = int(p.live_from[i]), int(p.live_to[i])
        if excess.worst_in(lf, lt) <= 0:
            continue
        # left to the driver, the excess is evicted and faulted back, once per known touch
        if min(int(size[i]), worst) * p.overflow_ns_per_byte * max(1, int(p.touch_count[i])) \
                <= p.remote_cost_ns[i]:
            continue
        for g in of_blk.get(i, ()):
            g.chosen = False  # its own gaps become pointless
        remote.append(i)
        excess.lower(lf, lt, int(size[i]))
    if remote:  # (resident is recomputed: the loop's own copy is not needed)
        chosen = [g for g in chosen if g.chosen]
        resident = tl.base - timing(chosen, tl)
        resident -= _Excess.lowered(len(resident), p.live_from[remote], p.live_to[remote],
                                    size[remote])
    return chosen, remote, resident


# -- step 4: issue points ---------------------------------------------------------------------

def _issue_points(tl: _Timeline, chosen: list[_Gap]):
    """Step 4 (Note [Issue points]): ``(event_unrolled, block, size)`` rows, evictions at
    the first control point of their group, prefetches at the last, each within its
    block's lifetime (after its ALLOC, before its FREE, unrolled like the point); a gap of
    guessed uses at a narrowed guard is evicted again at its widest guard's point
    (``_wider_guards``)."""
    q, E, size = tl.q, tl.E, tl.size
    first_of = np.searchsorted(q, q, side="left")
    last_of = np.searchsorted(q, q, side="right") - 1
    ae, fe = tl.p.alloc_event.astype(np.int64), tl.p.free_event.astype(np.int64)

    def evict_at(k: int, b: int) -> int:
        a = int(ae[b]) + (k >= E) * E if ae[b] >= 0 else -1  # the ALLOC, unrolled like k
        return max(int(first_of[k]), a)

    def prefetch_at(k: int, b: int) -> int:
        f = int(fe[b]) + (k >= E) * E if fe[b] >= 0 else len(q)
        return min(int(last_of[k]), f - 1)

    evictions = [(evict_at(g.ke, g.blk), g.blk, int(size[g.blk])) for g in chosen]
    prefetches = [(prefetch_at(g.kp, g.blk), g.blk, int(size[g.blk]))
                  for g in chosen if not g.dead]
    # Note [Evictions at the wider guards]
    evictions += evictions_at_wider_guards(tl, chosen, evict_at, prefetch_at)
    return evictions, prefetches


# -- step 5: prediction -----------------------------------------------------------------------

def _prediction(tl: _Timeline, chosen: list[_Gap], remote: list[int], resident: np.ndarray,
                candidates: int) -> dict[str, Any]:
    """Step 5 (Note [Prediction]): seconds and bytes, as ``meta["predicted"]`` holds them."""
    p, C, T, size, budget = tl.p, tl.C, tl.T, tl.size, tl.budget
    late_ns = [max(0.0, g.p_end - C[g.u2]) for g in chosen if not g.dead]
    over = np.maximum(resident - budget, 0)
    wait = _stall.eviction_wait(chosen, resident, tl)
    return {
        "ideal_s": float(C[T]) * 1e-9,
        "stall_s": (_stall.prefetch_stall(chosen, tl) + wait
                    + float(sum(p.remote_cost_ns[i] for i in remote))) * 1e-9,
        "eviction_wait_s": wait * 1e-9,
        "late_prefetches": int(sum(1 for x in late_ns if x > 0)),
        "evictions": len(chosen),
        "prefetches": sum(1 for g in chosen if not g.dead),
        "bytes_d2h": int(sum(size[g.blk] for g in chosen)),
        "bytes_h2d": int(sum(size[g.blk] for g in chosen if not g.dead)),
        "remote_blocks": len(remote),
        "remote_bytes": int(sum(size[i] for i in remote)),
        "peak_resident_bytes": int(resident.max()) if T else 0,
        "over_budget_ticks": int((over > 0).sum()),
        "max_over_budget_bytes": int(over.max()) if T else 0,
        "candidate_gaps": candidates,
    }
