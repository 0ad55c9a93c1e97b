"""The schedule builder: blocks with use ticks, a memory budget and two copy engines in,
evictions/prefetches with their allocator-event ticks out. Mode-agnostic (the modes only
differ in the use ticks they hand in); see ``_planner`` for the algorithm in words.

All times here are device nanoseconds of the *ideal* (never stalled) iteration: tick ``t``
runs from ``C[t]`` to ``C[t+1]``. Ticks ``T..2T-1`` are the next iteration (the timeline is
unrolled once so that gaps of persistent blocks may wrap around the iteration boundary).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from . import _fast, _reference

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
    read_only: np.ndarray  # (n,) bool (known read-only: eviction writes nothing back)
    remote_ok: np.ndarray  # (n,) bool: may be mapped host-resident (accessed remotely)
    remote_cost_ns: np.ndarray  # (n,) estimated remote-access cost per iteration
    touch_count: np.ndarray  # (n,) touches per iteration where sampled, 0 where unknown
    h2d_Bps: float
    d2h_Bps: float
    overflow_ns_per_byte: float = 0.0  # what the driver pays per byte left over budget
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


class _Gap:
    __slots__ = ("blk", "u1", "u2", "ke", "kp", "e_done", "p_start", "t_off", "t_on",
                 "t_on_late", "kp_min", "kp_sel", "chosen", "level", "sibs", "dead", "bad")

    def __init__(self, blk, u1, u2, ke, dead, level=0, sibs=None):
        self.blk, self.u1, self.u2, self.ke, self.dead = blk, u1, u2, ke, dead
        self.level = level  # 0 = widest guard (safest); siblings are the same gap narrower
        self.sibs = sibs if sibs is not None else []
        self.kp = -1
        self.e_done = self.p_start = 0.0
        self.t_off = self.t_on = self.t_on_late = 0
        self.kp_min = ke + 1
        self.kp_sel = ke + 1  # the prefetch's issue point the selection assumed
        self.chosen = False
        self.bad = False


def _segments(t_off: int, t_on: int, T: int) -> list[tuple[int, int]]:
    """The cyclic tick segments (in 0..T) of an unrolled window [t_off, t_on)."""
    if t_on <= t_off:
        return []
    if t_on - t_off >= T:
        return [(0, T)]
    if t_on <= T:
        return [(t_off, t_on)]
    if t_off >= T:
        return [(t_off - T, t_on - T)]
    return [(t_off, T), (0, t_on - T)]


def build_schedule(p: Problem, budget: int, *, guards=(4,), rounds: int = 6) -> Schedule:
    """Choose evictions/prefetches so that resident bytes stay <= ``budget`` (bytes) at
    every tick where the use model allows it, hiding transfers behind compute.
    O((E + T + G) log G) per round for G candidate gaps."""
    T, E, n = p.T, p.E, len(p.size)
    C = np.zeros(2 * T + 1)
    C[1:] = np.cumsum(np.concatenate([p.dur_ns, p.dur_ns]))
    # Control point k (after allocator event k): compute through tick q[k] is queued, so
    # a side-stream copy issued there starts at the earliest at tau[k] = C[q[k] + 1].
    q1 = p.ev_tick.astype(np.int64) - 1 + p.ev_free.astype(np.int64)
    q = np.concatenate([q1, q1 + T])
    tau = C[q + 1]
    size = p.size.astype(np.int64)
    d2h = size / p.d2h_Bps * 1e9
    d2h[p.read_only] = 0.0  # a read-duplicated copy is dropped, not written back
    h2d = size / p.h2d_Bps * 1e9

    # -- candidate gaps ------------------------------------------------------------------
    # A lifetime-ends block is used within `guard` ticks of each end. Every guard level
    # gives a candidate, widest first; the narrower ones (more saving, more risk of a use
    # the model cannot see) are siblings: at most one of them is chosen. Built vectorised
    # (the common case); blocks with explicit use ticks go through a short loop.
    ae_all, fe_all = p.alloc_event.astype(np.int64), p.free_event.astype(np.int64)
    nameable = p.persistent | (ae_all >= 0)
    fam = np.flatnonzero(nameable & (p.end_lo >= 0))
    cols: list[list] = [[], [], [], [], []]  # blk, u1, u2 (-1: dead tail), level, sibling group

    def emit(blk, u1, u2, lv, grp):
        cols[0].append(np.asarray(blk, np.int64))
        cols[1].append(np.asarray(u1, np.int64))
        cols[2].append(np.asarray(u2, np.int64))
        cols[3].append(np.broadcast_to(np.asarray(lv, np.int64), np.shape(blk)))
        cols[4].append(np.asarray(grp, np.int64))

    prev_a = prev_b = None
    for lv, g in enumerate(guards):
        a = np.minimum(p.end_lo[fam] + g, p.end_hi[fam])
        b = np.maximum(p.end_hi[fam] - g, p.end_lo[fam])
        ok = b - a >= 2
        if g > WIDE_GUARD_TICKS:
            # a wide guard is for long-lived blocks (skip inputs of a CNN); on a block
            # living fewer than WIDE_GUARD_LIFETIMES guards it only shrinks the window
            ok &= (p.end_hi[fam] - p.end_lo[fam]) >= WIDE_GUARD_LIFETIMES * g
        if prev_a is not None:
            ok &= (a != prev_a) | (b != prev_b)
        emit(fam[ok], a[ok], b[ok], lv, fam[ok])
        prev_a, prev_b = a, b
    dt = fam[p.dead_tail[fam] & (p.end_hi[fam] < p.live_to[fam])]
    emit(dt, p.end_hi[dt], np.full(len(dt), -1), 0, -1 - dt)
    # Blocks with explicit use ticks (sampled touches): a gap between two consecutive
    # uses, at every guard level that is at most 1/TOUCH_GUARD_GAPS of the gap (and 0),
    # siblings as above.
    tg0 = int(p.touch_guard_min)
    tguards = sorted({g for g in guards if g > tg0} | {tg0}, reverse=True)
    # all explicit uses in one array (owner, tick), vectorised: consecutive pairs of an
    # owner, its last use to its first in the next iteration (wrap) or its dead tail
    owners = [i for i in np.flatnonzero(nameable & (p.end_lo < 0)).tolist()
              if p.uses[i] is not None and len(p.uses[i])]
    pb_ = p1_ = p2_ = np.zeros(0, np.int64)
    if owners:
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
        emit(own[dead], last_u[dead], np.full(int(dead.sum()), -1), 0, -1 - own[dead])
        pb_ = np.concatenate([who[inner], own[wrap]])
        p1_ = np.concatenate([u[inner], last_u[wrap]])
        p2_ = np.concatenate([u[inner + 1], first_u[wrap] + T])
    if len(pb_):
        grp = n + np.arange(len(pb_))  # one sibling group per gap (>= n: not a block index)
        prev_a = prev_b = None
        for lv, g in enumerate(tguards):
            a, b = p1_ + g, p2_ - g
            ok = (b - a >= 2) & (p2_ - p1_ >= TOUCH_GUARD_GAPS * g)
            if prev_a is not None:
                ok &= (a != prev_a) | (b != prev_b)
            emit(pb_[ok], a[ok], b[ok], lv, grp[ok])
            prev_a, prev_b = a, b
    if cols[0]:
        gb, gu1, gu2, glv, ggrp = (np.concatenate(c) for c in cols)
    else:
        gb = gu1 = gu2 = glv = ggrp = np.zeros(0, np.int64)
    dead = gu2 < 0
    ke = np.searchsorted(q, gu1, side="left")
    gae, gfe = ae_all[gb], fe_all[gb]
    ke = np.where(gae >= 0, np.maximum(ke, gae), ke)
    lim = np.where(p.wrap[gb], 2 * E, E)
    ok = (ke < lim) & ((gfe < 0) | (ke < gfe))  # a control point between use and free
    kec = np.minimum(ke, len(q) - 1)
    ok &= dead | (q[kec] < gu2)  # the next use is not queued before the eviction
    # Windows if the link were idle. The budget counts an evicted block as gone from the
    # tick its eviction is issued: the runtime (and the driver) waits for a release under
    # way rather than evicting something else, so a late eviction costs a wait (predicted
    # as stall), not a fault storm; its completion time is the timing pass's business.
    e_done = tau[kec] + d2h[gb]
    t_off = q[kec] + 1
    u2c = np.where(dead, 0, gu2)
    latest = C[u2c] - h2d[gb]
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
    gaps: list[_Gap] = []
    groups: dict[int, list] = {}
    for j in np.flatnonzero(ok).tolist():
        sib_group = int(ggrp[j])
        if sib_group >= 0 and not dead[j]:
            sibs = groups.setdefault(sib_group, [])
            g = _Gap(int(gb[j]), int(gu1[j]), int(gu2[j]), int(ke[j]), False, len(sibs), sibs)
            sibs.append(g)
        else:
            g = _Gap(int(gb[j]), int(gu1[j]), int(gu2[j]), int(ke[j]), bool(dead[j]))
        g.e_done, g.t_off = float(e_done[j]), int(t_off[j])
        g.t_on, g.t_on_late = int(t_on[j]), int(t_on_late[j])
        if not dead[j]:
            g.kp = g.kp_sel = int(kp[j])
        gaps.append(g)

    base = np.zeros(T + 1, np.int64)
    np.add.at(base, p.live_from.astype(np.int64), size)
    np.add.at(base, p.live_to.astype(np.int64) + 1, -size)
    base = np.cumsum(base)[:T]

    remote: list[int] = []
    chosen: list[_Gap] = []
    saved = np.zeros(T, np.int64)
    for _ in range(rounds):
        resident = base - saved
        over: np.ndarray = resident > budget
        if not over.any():
            break
        picked = _select(gaps, resident, budget, size, T, q)
        if not picked:
            break
        # each gap once, at its first place (by identity: a gap may be picked again)
        chosen = [g for g in {id(g): g for g in chosen + picked}.values() if g.chosen]
        saved = _timing(chosen, p, C, tau, q, d2h, h2d, size, T, base, budget)
        chosen = [g for g in chosen if g.chosen]

    # Persistent blocks with unknown uses are the last resort: map them host-resident
    # (the device reads them over the link), largest first, while that is cheaper than
    # leaving the excess to the driver (write-back at d2h_evict, fault back at h2d_fault
    # per byte over budget at the worst tick).
    resident = base - saved
    if int((resident - budget).max(initial=0)) > p.remote_min_excess:
        cand = np.flatnonzero(p.remote_ok)
        cand = cand[np.lexsort((cand, -size[cand]))].tolist()  # largest first, then by index
        of_blk: dict[int, list] = {}  # block -> its chosen gaps (one pass, not one per block)
        for g in chosen:
            of_blk.setdefault(g.blk, []).append(g)
        for i in cand:
            over = resident - budget
            worst = int(over.max())
            if worst <= 0:
                break
            lf, lt = int(p.live_from[i]), int(p.live_to[i])
            if int(over[lf:lt + 1].max()) <= 0:
                continue
            # Left to the driver, the excess is evicted and faulted back; where the block's
            # touches are known, once per touch (a sweep over more than the device holds
            # misses at every touch under the driver's LRU, see the simulator's cyclic case)
            if min(int(size[i]), worst) * p.overflow_ns_per_byte * max(1, int(p.touch_count[i])) \
                    <= p.remote_cost_ns[i]:
                continue
            # its own gaps become pointless
            for g in of_blk.get(i, ()):
                g.chosen = False
            remote.append(i)
            resident[lf:lt + 1] -= size[i]
        if remote:
            chosen = [g for g in chosen if g.chosen]
            saved = _timing(chosen, p, C, tau, q, d2h, h2d, size, T, base, budget)
            resident = base - saved
            for i in remote:
                resident[int(p.live_from[i]):int(p.live_to[i]) + 1] -= size[i]

    late_ns = [max(0.0, g.p_start + h2d[g.blk] - C[g.u2]) for g in chosen if not g.dead]
    over = np.maximum(resident - budget, 0)
    wait = _eviction_wait(chosen, resident, budget, C, size, T)
    pred = {
        "ideal_s": float(C[T]) * 1e-9,
        "stall_s": (_prefetch_stall(chosen, C, tau, h2d) + wait
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
        "candidate_gaps": len(gaps),
    }
    # Control points with the same q (the FREEs after kernel t and the ALLOCs before kernel
    # t+1) order a side-stream copy after the same kernels, and the budget counts them as
    # one tick; the executor, though, meets them one after another. So an eviction is
    # issued at the first of its group (its room is there before any claim of the group)
    # and a prefetch at the last (after every release of the group), within the block's
    # own lifetime: measured on G10's ResNet-152 at 40 GiB, prefetches issued at a FREE
    # before the next tick's evictions pushed the driver into evicting 1.3 GB of weights.
    first_of = np.searchsorted(q, q, side="left")
    last_of = np.searchsorted(q, q, side="right") - 1
    ae, fe = p.alloc_event.astype(np.int64), p.free_event.astype(np.int64)

    def early(k: int, b: int) -> int:
        a = int(ae[b]) + (k >= E) * E if ae[b] >= 0 else -1  # the ALLOC, unrolled like k
        return max(int(first_of[k]), a)

    def late(k: int, b: int) -> int:
        f = int(fe[b]) + (k >= E) * E if fe[b] >= 0 else len(q)
        return min(int(last_of[k]), f - 1)

    ev = [(early(g.ke, g.blk), g.blk, int(size[g.blk])) for g in chosen]
    pf = [(late(g.kp, g.blk), g.blk, int(size[g.blk])) for g in chosen if not g.dead]
    return Schedule(ev, pf, remote, pred)


def _prefetch_stall(chosen, C, tau, h2d) -> float:
    """Device ns the compute waits for late prefetches. Late prefetches overlap: a wait
    delays the compute, and with it every later issue and deadline, so the waits are not
    added up but accumulated along the h2d queue (FIFO in issue order): each prefetch is
    issued when its control point runs (the ideal time plus the waits at deadlines before
    it), and the compute waits where one lands after its use would start. A Fenwick tree
    over deadline ticks gives the wait so far at an issue time. O(G log T)."""
    pf = sorted((g for g in chosen if not g.dead), key=lambda g: g.p_start)
    if not pf:
        return 0.0
    n = len(C)
    tree = [0.0] * (n + 1)

    def add(i: int, v: float) -> None:
        i += 1
        while i <= n:
            tree[i] += v
            i += i & -i

    def upto(i: int) -> float:  # waits at deadline ticks <= i
        i += 1
        total = 0.0
        while i > 0:
            total += tree[i]
            i -= i & -i
        return total

    total = 0.0
    free_at = 0.0
    for g in pf:
        issue_tick = int(np.searchsorted(C, tau[g.kp], side="right")) - 1
        start = max(tau[g.kp] + upto(issue_tick), free_at)
        free_at = start + h2d[g.blk]
        need_at = C[g.u2] + upto(g.u2 - 1)
        if free_at > need_at:
            add(g.u2, free_at - need_at)
            total += free_at - need_at
    return total


def _eviction_wait(chosen, resident, budget, C, size, T) -> float:
    """Device ns the compute waits for evictions still in flight when it needs their room
    (the budget counts an eviction from its issue). Walks the over-budget ticks with the
    delay so far (a wait at one tick gives later evictions time to land). The d2h engine is
    FIFO, so the evictions in flight at a tick are a contiguous run of the queue: each tick
    costs two binary searches. O(G log G + T log G)."""
    if not chosen:
        return 0.0
    order = sorted(chosen, key=lambda g: g.e_done)
    toff = np.array([g.t_off for g in order], np.int64)
    edone = np.array([g.e_done for g in order])
    sz = np.array([size[g.blk] for g in order], np.int64)
    S = np.concatenate([[0], np.cumsum(sz)])
    # t_off is monotone in queue order only up to ties; a running max keeps searches valid
    toff_run = np.maximum.accumulate(toff)
    # bytes in flight at the ideal start of each tick (an upper bound on what is pending)
    t_done = np.searchsorted(C, edone, side="left")
    pend = np.zeros(2 * T + 2, np.int64)
    np.add.at(pend, np.minimum(toff, 2 * T + 1), sz)
    np.add.at(pend, np.minimum(np.maximum(t_done, toff), 2 * T + 1), -sz)
    pend = np.cumsum(pend)
    pend = pend[:T] + pend[T:2 * T]
    risky = np.flatnonzero((pend > 0) & (resident + pend > budget))
    delay = 0.0
    for t in risky.tolist():
        now = C[t] + delay
        hi = int(np.searchsorted(toff_run, t, side="right"))
        lo = int(np.searchsorted(edone, now, side="right"))
        if hi <= lo:
            continue
        need = int(S[hi] - S[lo]) - int(budget - resident[t])
        if need > 0:
            k = min(int(np.searchsorted(S, S[lo] + need, side="left")) - 1, hi - 1)
            delay += max(0.0, float(edone[k]) - now)
    return delay


def _select(gaps, resident, budget, size, T, q) -> list:
    """One Belady-like sweep: at each over-budget tick evict, among the unchosen gaps
    whose on-time window covers it, the one whose window reaches furthest (next use
    furthest). When none is left, delay a prefetch past the tick (a predicted stall, which
    costs less than the driver evicting and faulting the block back). The sweep itself is
    ``_reference.select`` (plain Python, the definition) or ``_fast.select`` (the same
    decisions in a compiled kernel, used when numba is installed)."""
    return _fast.select(gaps, resident, budget, size, T, q) if _fast.available() \
        else _reference.select(gaps, resident, budget, size, T, q)


def _timing(chosen, p, C, tau, q, d2h, h2d, size, T, base=None, budget=0) -> np.ndarray:
    """Place the chosen gaps on the two copy engines (FIFO in issue order) and return the
    bytes each tick saves. Evictions go as early as allowed; prefetches as late as their
    deadline and the prefetches behind them allow (backward list scheduling). A gap the
    link cannot serve in time is dropped (``bad``); repeated until the choice is stable."""
    for _ in range(4):
        live = [g for g in chosen if g.chosen]
        saved, dropped = _timing_once(live, p, C, tau, q, d2h, h2d, size, T, base, budget)
        if not dropped:
            return saved
    return saved


def _earliest_with_room(resident, budget, sz, q, lo, hi, T, cap=4096) -> int:
    """The earliest control point in [lo, hi] from which the block (``sz`` bytes) can be
    back on the device until ``hi``'s tick without exceeding the budget; claims the room
    in ``resident``. Looks back at most ``cap`` ticks. O(ticks looked at), vectorised."""
    end = int(q[hi]) + 1
    start = max(int(q[lo]) + 1, end - cap)
    if start >= end:
        return hi
    ticks = np.arange(start, end)
    idx = ticks % T if end > T else ticks
    bad = np.flatnonzero(resident[idx] + sz > budget)
    first_ok = start if not len(bad) else int(ticks[bad[-1]]) + 1
    # the earliest control point whose issue tick (q + 1) is at or after first_ok
    k = int(np.searchsorted(q, first_ok - 1, side="left"))
    k = min(max(k, lo), hi)
    s0 = int(q[k]) + 1
    if s0 < end:
        sl = np.arange(s0, end)
        np.add.at(resident, sl % T, sz)
    return k


def _cyclic_fifo(issue: np.ndarray, dur: np.ndarray, after: np.ndarray, period: float,
                 second: np.ndarray) -> np.ndarray:
    """Start times of copies on one FIFO copy engine in the steady state of a periodic
    iteration. ``issue``: unrolled issue times (the second iteration's control points are
    ``period`` later), ``after``: unrolled times a copy may not start before (its block's
    own eviction), ``second``: the copy is issued in the unrolled second iteration. Every
    iteration issues all of them, so a copy of the second iteration shares the engine with
    the first iteration's copies at the same point of the iteration: the queue runs on
    in-iteration times, twice (the second pass starts with the backlog the first one left
    over the iteration's end). Returns unrolled start times. O(G log G)."""
    shift = np.where(second, period, 0.0)
    r = issue - shift
    a = after - shift
    order = np.lexsort((np.arange(len(r)), r))
    start = np.zeros(len(r))
    carry = 0.0
    for _ in range(2):
        free_at = carry
        for i in order.tolist():
            s0 = max(r[i], free_at, a[i])
            start[i] = s0
            free_at = s0 + dur[i]
        carry = max(0.0, free_at - period)
    return start + shift


def _timing_once(chosen, p, C, tau, q, d2h, h2d, size, T, base=None, budget=0):
    nq = len(q)
    E = nq // 2
    if chosen:
        ke = np.array([g.ke for g in chosen], np.int64)
        st = _cyclic_fifo(tau[ke], d2h[[g.blk for g in chosen]], np.zeros(len(chosen)), C[T],
                          ke >= E)
        for g, s0 in zip(chosen, st.tolist()):
            g.e_done = s0 + d2h[g.blk]
    dropped = 0
    pf = [g for g in chosen if not g.dead]
    # the profile if every prefetch were issued where the selection put it
    resident = None
    if base is not None:
        sv = np.zeros(T + 1, np.int64)
        for g in chosen:
            end = int(p.live_to[g.blk]) + 1 if g.dead else \
                int(q[min(max(g.ke + 1, g.kp_min, g.kp_sel), nq - 1)]) + 1
            for a, b in _segments(g.t_off, end, T):
                sv[a] += size[g.blk]
                sv[b] -= size[g.blk]
        resident = base - np.cumsum(sv)[:T]
    pf.sort(key=lambda g: (-C[g.u2], g.blk))
    cur = np.inf
    for g in pf:
        finish = min(C[g.u2], cur)
        latest = finish - h2d[g.blk]
        kp = int(np.searchsorted(tau, latest, side="right")) - 1
        fe = int(p.free_event[g.blk])
        if fe >= 0:
            kp = min(kp, fe - 1)
        # Never earlier than the selection assumed unless the budget has room for the
        # block over the extra ticks: bringing it back early claims memory (the driver
        # would evict something else where there is none); where there is no room a
        # congested link makes the prefetch late instead (predicted as stall).
        hi = max(g.ke + 1, g.kp_min, g.kp_sel)
        lo = max(kp, g.ke + 1, g.kp_min)
        if resident is not None and lo < hi < nq:
            kp = _earliest_with_room(resident, budget, int(size[g.blk]), q, lo, hi, T)
        else:
            kp = max(kp, hi)
        if kp >= nq or q[kp] >= g.u2 or (fe >= 0 and kp >= fe):
            g.chosen, g.bad = False, True
            dropped += 1
            continue
        g.kp = kp
        cur = min(cur, max(latest, tau[kp]))
    pf = [g for g in pf if g.chosen]
    if pf:
        kp = np.array([g.kp for g in pf], np.int64)
        st = _cyclic_fifo(tau[kp], h2d[[g.blk for g in pf]], np.array([g.e_done for g in pf]),
                          C[T], kp >= E)
        for g, s0 in zip(pf, st.tolist()):
            g.p_start = s0
            g.t_on = int(q[g.kp]) + 1
    saved = np.zeros(T + 1, np.int64)
    for g in chosen:
        if not g.chosen:
            continue
        if g.dead:
            g.t_on = int(p.live_to[g.blk]) + 1
        segs = _segments(g.t_off, g.t_on, T)
        if not segs:
            g.chosen, g.bad = False, True  # the link is too busy for this gap to save anything
            dropped += 1
            continue
        for s, e in segs:
            saved[s] += size[g.blk]
            saved[e] -= size[g.blk]
    return np.cumsum(saved)[:T], dropped
