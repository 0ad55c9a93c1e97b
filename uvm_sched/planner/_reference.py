"""The planner's selection sweep in plain Python: the reference the fast kernel
(``_fast.select``) is tested against, and the path taken where numba is not installed.

The definition of the sweep: any change to what it decides is made here first, then in
the kernel (which has the same helpers: ``_upgrade_ends`` is ``upgrade_ends`` there), and
``tests/test_planner_fast.py`` checks that both give the same plans.
"""
from __future__ import annotations

import heapq

import numpy as np

from ._queues import segments as _segments

__all__ = ["select"]


def select(gaps, resident, budget, size, T, q) -> list:
    """One Belady-like sweep: at each over-budget tick evict, among the unchosen gaps
    whose on-time window covers it, the one whose window reaches furthest (next use
    furthest). When none is left, delay a prefetch past the tick (a predicted stall, which
    costs less than the driver evicting and faulting the block back)."""
    starts: dict[int, list] = {}
    late_starts: dict[int, list] = {}
    for gi, g in enumerate(gaps):
        if g.bad:
            continue
        if not g.chosen:
            for s, e in _segments(g.t_off, g.t_on, T):
                starts.setdefault(s, []).append((gi, s, e))
        for s, e in _segments(g.t_off, g.t_on_late, T):
            late_starts.setdefault(s, []).append((gi, s, e))
    diff = np.zeros(T + 1, np.int64)
    run = 0
    heap: list = []
    late: list = []
    picked = []
    for t in range(T):
        run += diff[t]
        for gi, s, e in starts.get(t, ()):
            g = gaps[gi]
            # reach: how far the saving lasts (a wrapping window continues into the next
            # iteration's start)
            reach = g.t_on if (e == T and g.t_on > T) else e
            heapq.heappush(heap, (g.level, -reach, -int(size[g.blk]), gi, s, e))
        for gi, s, e in late_starts.get(t, ()):
            heapq.heappush(late, (-e, gi, s, e))
        need = resident[t] + run - budget
        deferred = []
        while need > 0 and heap:
            item = heapq.heappop(heap)
            _, _, _, gi, s, e = item
            g = gaps[gi]
            if g.chosen or g.bad or e <= t:
                continue
            c = next((x for x in g.sibs if x.chosen), None)
            sz = int(size[g.blk])
            if c is not None:
                # upgrade the chosen sibling to this narrower guard: only the extra ticks
                # at both ends of the window are new savings
                if c.level > g.level:
                    continue
                if c.t_off <= t < c.t_on:
                    deferred.append(item)  # may help past the sibling's window
                    continue
                c.chosen = False
                g.chosen = True
                picked.append(g)
                now = _upgrade_ends(diff, t, T, sz, ((g.t_off, min(c.t_off, g.t_on)),
                                                     (max(c.t_on, g.t_off), g.t_on)))
                run -= now
                need -= now
                continue
            g.chosen = True
            picked.append(g)
            run -= sz
            diff[e] += sz
            need -= sz
            for s2, e2 in _segments(g.t_off, g.t_on, T):
                if (s2, e2) != (s, e) and s2 > t:
                    diff[s2] -= sz
                    diff[e2] += sz
        for item in deferred:
            heapq.heappush(heap, item)
        keep = []
        while need > 0 and late:
            item = heapq.heappop(late)
            _, gi, s, e = item
            g = gaps[gi]
            if e <= t:
                continue
            if g.bad or (not g.chosen and any(x.chosen for x in g.sibs)):
                continue
            keep.append(item)  # it may need extending again at a later tick
            t_unr = t if t >= g.t_off else t + T
            if g.chosen and g.t_off <= t_unr < g.t_on:
                continue  # already saving here
            k = int(np.searchsorted(q, t_unr, side="left"))
            g.kp_min = max(g.kp_min, k)
            end = min(int(q[k]) + 1 - (t_unr - t), e)
            g.t_on = max(g.t_on, int(q[k]) + 1)
            if not g.chosen:
                g.chosen = True
                picked.append(g)
            sz = int(size[g.blk])
            run -= sz
            diff[end] += sz
            need -= sz
        for item in keep:
            heapq.heappush(late, item)
    return picked


def _upgrade_ends(diff, t: int, T: int, sz: int, ends) -> int:
    """A chosen sibling upgraded to a narrower guard: its two extra end segments ``ends``
    save ``sz`` bytes; those ahead of ``t`` go into ``diff``. Returns the bytes saved at
    ``t`` itself (the caller takes them off ``run`` and ``need``)."""
    now = 0
    for s2, e2 in ends:
        if e2 <= s2:
            continue
        if s2 <= t < e2:
            now += sz
            diff[min(e2, T)] += sz
        elif s2 > t and s2 < T:
            diff[s2] -= sz
            diff[min(e2, T)] += sz
    return now
