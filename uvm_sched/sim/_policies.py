"""Action schedules: the baselines (prefetch-on-alloc, swap-activations) and a Plan's
executor, all speaking the engine's (action, block, lo, hi) per (tick, stage)."""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from ..trace import EventKind
from ._engine import ACCESSED_BY, DISCARD, EVICT, PREF_HOST, PREFETCH, READ_MOSTLY
from ._prep import Prepared

_CODES = {
    "prefetch_to_device": PREFETCH,
    "prefetch_to_host": EVICT,
    "advise_preferred_host": PREF_HOST,
    "advise_accessed_by": ACCESSED_BY,
    "advise_read_mostly": READ_MOSTLY,
    "discard": DISCARD,
}


class Schedule:
    """No actions (plain demand paging). ``at`` gives ``(action, block, lo, hi)`` tuples;
    a Plan's schedule adds a fifth element, the allocator-event ordinal in the iteration
    the action follows (``plan_events`` says so)."""

    divergences = 0
    plan_events = False

    def at(self, t: int, stage: str) -> list[tuple[int, ...]]:
        return []


class PrefetchOnAlloc(Schedule):
    """RMM's ``prefetch_resource_adaptor``: every allocation is prefetched to the device
    as it is made (for fresh memory that populates device pages without link traffic)."""

    def __init__(self, prep: Prepared) -> None:
        self.p = prep

    def at(self, t, stage) -> list:
        if stage != "pre":
            return []
        s, e = self.p.ev_ptr[t], self.p.ev_ptr[t + 1]
        k = self.p.ev_kind[s:e]
        return [(PREFETCH, int(b), 0, -1) for b in self.p.ev_block[s:e][k == EventKind.ALLOC]]


def iterations(prep: Prepared) -> list[tuple[int, int]]:
    """(start, stop) ticks of each iteration (MARKs), or the whole trace as one."""
    m = [int(x) for x in prep.iter_starts]
    if not m:
        return [(0, prep.n_ticks)]
    bounds = m + [prep.n_ticks]
    out = [(bounds[i], bounds[i + 1]) for i in range(len(m)) if bounds[i + 1] > bounds[i]]
    if m[0] > 0:
        out.insert(0, (0, m[0]))
    return out


def live_bytes_per_tick(prep: Prepared) -> np.ndarray:
    """Bytes allocated and not freed while each tick's kernel runs."""
    d = np.zeros(prep.n_ticks + 1, np.int64)
    np.add.at(d, prep.balloc_tick, prep.bsize)
    fr = prep.bfree_tick >= 0
    np.add.at(d, prep.bfree_tick[fr] + 1, -prep.bsize[fr])
    return np.cumsum(d)[:-1]


class SwapActivations(Schedule):
    """vDNN-style: each activation (a block allocated in an iteration's forward pass and
    used again in its backward pass) is evicted after its last forward access and
    prefetched back one tick before its first backward use.

    The forward/backward turn of an iteration is the tick of the last *first use* of a
    block that outlives the iteration (weights are first read in forward order, so the last
    one is the last forward layer); when the trace has no ground-truth accesses (or no such
    blocks), the tick of peak live bytes (activations pile up until forward ends).
    """

    def __init__(self, prep: Prepared) -> None:
        self.p = prep
        self.pre: dict[int, list] = defaultdict(list)
        self.post: dict[int, list] = defaultdict(list)
        self.turns: list[int] = []
        live = live_bytes_per_tick(prep)
        at, ab = prep.ab_tick, prep.ab_block
        for s, e in iterations(prep):
            sel = (at >= s) & (at < e)
            t_i, b_i = at[sel], ab[sel]
            turn = -1
            if prep.ground_truth and len(t_i):
                outl = (prep.balloc_tick[b_i] < s) & (
                    (prep.bfree_tick[b_i] < 0) | (prep.bfree_tick[b_i] >= e))
                if outl.any():
                    fb, ft = b_i[outl], t_i[outl]
                    first = np.full(len(prep.bsize), np.iinfo(np.int64).max)
                    np.minimum.at(first, fb, ft)
                    turn = int(first[np.unique(fb)].max())
            if turn < 0:
                turn = s + int(np.argmax(live[s:e])) if e > s else s
            self.turns.append(turn)
            act = (prep.balloc_tick[b_i] >= s) & (prep.balloc_tick[b_i] <= turn)
            if not act.any():
                continue
            tb, bb = t_i[act], b_i[act]
            nb = len(prep.bsize)
            fwd_last = np.full(nb, -1, np.int64)
            bwd_first = np.full(nb, np.iinfo(np.int64).max, np.int64)
            f = tb <= turn
            np.maximum.at(fwd_last, bb[f], tb[f])
            np.minimum.at(bwd_first, bb[~f], tb[~f])
            cand = np.flatnonzero((fwd_last >= 0) & (bwd_first < np.iinfo(np.int64).max)
                                  & (bwd_first - fwd_last >= 2))
            for b in cand.tolist():
                self.post[int(fwd_last[b])].append((EVICT, b, 0, -1))
                self.pre[int(bwd_first[b]) - 1].append((PREFETCH, b, 0, -1))

    def at(self, t, stage) -> list:
        return (self.pre if stage == "pre" else self.post).get(t, [])


def _action_rows(df) -> tuple[np.ndarray, ...]:
    """A Plan's actions as int64 columns ``k, code, ordinal, persistent (bool), lo, hi``
    (bytes; ``hi`` -1: to the block's end), sorted by ``k`` keeping the plan's row order
    within one ``k``. Raises ``KeyError`` naming an unknown action."""
    import pandas as pd

    # by hashing (a few distinct names over 10^5-10^6 rows: sorting the strings, as
    # np.unique does, was most of this function's time); a missing name (-1) is named as
    # str() names it
    inv, uniq = pd.factorize(df["action"])
    names = np.asarray([str(a) for a in uniq] + ([str(None)] if (inv < 0).any() else []))
    inv = np.where(inv < 0, len(names) - 1, inv)
    bad = sorted(a for a in names.tolist() if a not in _CODES)
    if bad:
        raise KeyError(bad[0])
    code = np.asarray([_CODES[a] for a in names.tolist()], np.int64)[np.asarray(inv, np.int64)]
    k = df["tick"].to_numpy().astype(np.int64)
    off = df["offset"].to_numpy().astype(np.int64)
    nbytes = df["bytes"].to_numpy().astype(np.int64)
    lo = np.where(off >= 0, off, 0)
    hi = np.where(nbytes > 0, lo + nbytes, -1)
    o = np.argsort(k, kind="stable")
    return (k[o], code[o], df["block"].to_numpy().astype(np.int64)[o],
            df["persistent"].to_numpy().astype(bool)[o], lo[o], hi[o])


class PlanSchedule(Schedule):
    """A Plan executed per INTERFACES "Plan semantics": iterations start at MARK ticks (or
    every ``period_events`` allocator events with ``sync == "period"``); an action with tick
    ``k`` is issued right after allocator event ``k`` of the iteration; non-persistent
    ordinal ``j`` is the iteration's ``j``-th ALLOC, persistent ordinal ``j`` the trace's
    ``j``-th ALLOC; an ALLOC whose size differs from ``alloc_sizes[j]`` (0: any) disarms the plan
    for the rest of the iteration (one divergence). Actions after an ALLOC are issued
    before the tick's kernel, those after a FREE after it (the trace does not say where
    within a tick's allocs an action falls, so all of a tick's ALLOCs precede its actions).
    """

    plan_events = True  # at() tuples carry the event ordinal k as a fifth element

    def __init__(self, plan, prep: Prepared) -> None:
        self.p = prep
        meta = plan.meta
        self.period = int(meta["period_events"])
        self.sizes = np.asarray(meta["alloc_sizes"], np.int64)
        self.sync = meta.get("sync", "marker")
        # period sync: iterations start at the allocator events e >= anchor with
        # (e - anchor) % period == 0 (the planned trace's first event of an iteration, when
        # the plan says; events before the first one are outside any iteration)
        self.anchor = int(meta.get("period_start_event", 0)) % self.period
        if self.sync != "period" and len(prep.iter_starts) == 0:
            self.sync = "period"  # a trace without MARKs: the period is all there is
        self.rows = _action_rows(plan.actions)
        self._by_k: dict[int, list] | None = None
        self.marks = set(int(x) for x in prep.iter_starts)
        self.local = -1  # allocator event ordinal in the iteration; -1 = outside one
        self.allocs: list[int] = []
        self.armed = False
        self.divergences = 0
        self.global_event = 0
        self._post: list = []
        self.discard_at_free: set[int] = set()  # blocks a discard may name though freed

    @property
    def by_k(self) -> dict[int, list]:
        """``{k: [(code, ordinal, persistent, lo, hi), ...]}`` in the plan's row order (the
        reference loop's lookup; built on first use: the compiled loop reads ``rows``)."""
        if self._by_k is None:
            k, code, ordinal, pers, lo, hi = self.rows
            self._by_k = defaultdict(list)
            for r in zip(k.tolist(), code.tolist(), ordinal.tolist(), pers.tolist(),
                         lo.tolist(), hi.tolist()):
                self._by_k[r[0]].append(r[1:])
        return self._by_k

    def _new_iteration(self):
        self.local = -1
        self.allocs = []
        self.armed = True

    def at(self, t, stage) -> list:
        if stage == "post":
            out, self._post = self._post, []
            return out
        self.discard_at_free = set()
        p = self.p
        s, e = int(p.ev_ptr[t]), int(p.ev_ptr[t + 1])
        if self.sync != "period" and t in self.marks:
            self._new_iteration()
        pre: list = []
        post: list = []
        kinds = p.ev_kind[s:e]
        blocks = p.ev_block[s:e]
        for i in range(e - s):
            if self.sync == "period":
                g = self.global_event
                self.global_event += 1
                if g < self.anchor:
                    continue  # before the first iteration
                if (g - self.anchor) % self.period == 0:
                    self._new_iteration()
            if self.sync != "period" and not self.marks_seen(t):
                continue  # before the first iteration: nothing to count from
            self.local += 1
            k = self.local
            if kinds[i] == EventKind.ALLOC:
                j = len(self.allocs)
                self.allocs.append(int(blocks[i]))
                if self.armed and (j >= len(self.sizes) or (  # size 0: any (sized at run time)
                        self.sizes[j] and self.sizes[j] != p.bsize[blocks[i]])):
                    self.armed = False
                    self.divergences += 1
            if not self.armed or k >= self.period:
                continue
            acts = self.by_k.get(k)
            if not acts:
                continue
            dest = pre if kinds[i] == EventKind.ALLOC else post
            for code, ordinal, pers, lo, hi in acts:
                if pers:
                    b = ordinal if ordinal < len(p.bsize) and p.balloc_tick[ordinal] <= t else -1
                else:
                    b = self.allocs[ordinal] if ordinal < len(self.allocs) else -1
                if b < 0:
                    continue
                if code == _CODES["discard"] and kinds[i] == EventKind.FREE and b == blocks[i]:
                    # Discard at free (as the native executor): the block this very FREE
                    # released may be named; its range is dead but still resident in the pool.
                    self.discard_at_free.add(b)
                dest.append((code, b, lo, hi, k))
        self._post = post
        return pre

    def marks_seen(self, t: int) -> bool:
        return bool(self.marks) and t >= min(self.marks)
