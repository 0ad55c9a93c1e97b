"""The LP bound's time partition (``_lp``): which window ticks share a slot.

Note [Slot partitions]
----------------------
Rationale. Coarsening time keeps the LP a relaxation (Note [The LP bound]) but loosens it,
and uniform slots of ``k`` ticks spend as many columns where nothing binds as where the
budget is tight. The coarsening argument is about *a partition of the window into
consecutive slots*: nothing in it needs the slots to be equally long. Each of its rows
reads a tick only through its slot, whether it is its slot's first tick, and the slot of
the tick before it, and each coarse row is a sum or a weakening of exact rows over the
ticks of one slot whatever their number. So any partition whose first slot starts at tick
0 gives a lower bound, and [Block classes]' exactness argument holds with the class key
taken from the partition (slot index, at-a-slot-start flag).

Refinement. A partition ``P'`` that refines ``P`` (every boundary of ``P`` is one of
``P'``) gives a bound at least ``P``'s: every slot of ``P`` is a union of consecutive
slots of ``P'``, and merging those is one more coarsening of ``P'``'s program, so ``P``'s
program is a relaxation of ``P'``'s. Both families below are nested: uniform slots of
``k'`` ticks refine those of ``k`` when ``k'`` divides ``k``; weighted slots at ``n'``
slots refine those at ``n`` when ``n`` divides ``n'`` (a boundary falls where the
cumulative weight crosses a multiple of ``total / n``, and every such multiple is one of
``total / n'``).

Approach (``weighted``). A tick's weight says how much a boundary there is worth, and
boundaries are placed at equal steps of cumulative weight, so a slot holds about the same
weight whether it is one heavy tick or several light ones. The weight of tick ``t``
(``tick_weights``) is its share of the window's compute time (a slot's link capacity is
``bw * D``: merging two short ticks loses less than merging two long ones), times ``1 +``
the fraction of the budget by which the bytes allocated at ``t`` exceed it (only there can
the budget row bind or an eviction be forced), and at least the mean weight times
``WEIGHT_FLOOR`` (short ticks still count as ticks: their accesses are what the access rows
are about). Every weight is positive, so the finest level of the family is exact (one tick
per slot); ``_lp._fit`` searches the level as it searched ``k``.

Limitations. The weights are a guess at where the coarse program loses; the partition does
not look at the coarse optimum. Neither family dominates the other at the same column cap
(``benchmarks/results/lp.md``: the weighted slots are tighter in 16 of 62 zoo cases, by up
to 26%, looser in 7, by at most 1.2%), and since both are lower bounds the larger stands.
"""
from __future__ import annotations

import numpy as np

# The least weight of a tick, as a fraction of the mean weight. Across 0.03 .. 1.0 on the
# zoo at 50% on h200-pcie5 (100,000 columns): gpt2_small 183.5 .. 185.2 ms (uniform slots
# 146.5), vit_b16 151.2 .. 159.0 (uniform 160.8), gpt2_medium 364.8 .. 405.2 (uniform
# 373.1), unet 118.6 .. 113.4 (uniform 113.4): 1.0 is the best on three of four.
WEIGHT_FLOOR = 1.0


class Slots:
    """A partition of a ``W``-tick window into consecutive slots, given by the sorted slot
    starts (window ticks, the first 0): per tick its slot (``of``) and whether it starts
    one (``first``); ``S`` slots."""

    def __init__(self, starts, W: int) -> None:
        starts = np.unique(np.asarray(starts, np.int64))
        if W <= 0:
            starts = np.zeros(1, np.int64)
        elif not len(starts) or starts[0] != 0 or starts[-1] >= W:
            raise ValueError(f"slot starts must begin at tick 0 and lie in [0, {W}); got "
                             f"{starts[:3].tolist()}..{starts[-3:].tolist()}")
        self.starts = starts
        self.W = int(W)
        self.S = len(starts)
        length = np.diff(np.concatenate([starts, [max(W, 1)]]))
        self.of = np.repeat(np.arange(self.S), length)
        self.first = np.zeros(max(W, 1), bool)
        self.first[starts] = True

    @property
    def widest(self) -> int:
        """The most ticks in one slot (1: the exact program)."""
        return int(np.diff(np.concatenate([self.starts, [max(self.W, 1)]])).max())

    def sums(self, per_tick) -> np.ndarray:
        """Per slot, the sum of ``per_tick`` (one value per window tick) over its ticks."""
        if not self.W:
            return np.zeros(1)
        return np.add.reduceat(np.asarray(per_tick, float), self.starts)


def uniform(W: int, k: int) -> Slots:
    """Slots of ``k`` ticks (the last one shorter)."""
    return Slots(np.arange(0, max(W, 1), max(1, int(k))), W)


def weighted(weights, n: int) -> Slots:
    """About ``n`` slots of equal summed weight: a slot starts at tick 0 and at every tick
    where the cumulative weight before it crosses a multiple of ``sum(weights) / n``
    (Note [Slot partitions]); ``weights`` positive, one per window tick."""
    w = np.asarray(weights, float)
    W = len(w)
    if W == 0:
        return Slots([0], 0)
    before = np.concatenate([[0.0], np.cumsum(w)[:-1]])  # weight before each tick
    step = before[-1] + w[-1]
    step = step / max(1, int(n))
    level = np.floor(before / step + 1e-9).astype(np.int64)
    starts = np.flatnonzero(np.concatenate([[True], level[1:] != level[:-1]]))
    return Slots(starts, W)


def tick_weights(dur_s, live_bytes, budget: int, floor: float = WEIGHT_FLOOR) -> np.ndarray:
    """Per window tick, the worth of a slot boundary there (Note [Slot partitions]):
    its share of compute time (``dur_s``, s), times ``1 +`` the fraction of ``budget``
    (bytes) that ``live_bytes`` (bytes whose data is live at the tick) exceed it by, with a
    floor of ``floor`` times the mean."""
    dur = np.asarray(dur_s, float)
    if not len(dur):
        return dur
    t = dur / max(float(dur.sum()), 1e-300) * len(dur)
    over = np.maximum(np.asarray(live_bytes, float) - budget, 0.0) / max(budget, 1)
    w = t * (1.0 + over)
    return np.maximum(w, floor * max(float(w.mean()), 1e-300))


def live_bytes(prep) -> np.ndarray:
    """Per tick of ``prep``'s window, the bytes of the blocks allocated then (allocated at
    or before it and not yet freed)."""
    ws, we = prep.window
    W = max(we - ws, 0)
    a = np.clip(prep.balloc_tick - ws, 0, W)
    f = np.where(prep.bfree_tick < 0, W, np.clip(prep.bfree_tick - ws, 0, W))
    delta = np.zeros(W + 1)
    size = prep.bsize.astype(float)
    np.add.at(delta, a, size)
    np.add.at(delta, f, -size)
    return np.cumsum(delta)[:W]


def family(prep, budget: int, slots):
    """The partitions ``_lp._fit`` searches, by level (1: the finest, every tick its own
    slot; coarser as the level grows) and the coarsest level (one slot): ``(level ->
    Slots, coarsest)``. ``slots``: ``"uniform"`` (level = ticks per slot), ``"weighted"``
    (``tick_weights`` under ``budget`` bytes, level ``g``: ``weighted(.., n / g)`` slots,
    ``n`` the count at which every tick is its own) or the slot starts themselves (one
    level)."""
    ws, we = prep.window
    W = we - ws
    if isinstance(slots, str) and slots == "uniform":
        return (lambda k: uniform(W, k)), max(W, 1)
    if isinstance(slots, str) and slots == "weighted":
        w = tick_weights(prep.dur_s[ws:we], live_bytes(prep), budget)
        if not len(w):
            return (lambda k: Slots([0], W)), 1
        n_fine = int(np.ceil(w.sum() / w.min() * (1 + 1e-9)))
        return (lambda g: weighted(w, -(-n_fine // max(1, int(g))))), n_fine
    if isinstance(slots, str):
        raise ValueError(f"unknown slot partition {slots!r}; known: 'uniform', 'weighted' "
                         f"or an array of slot starts")
    fixed = Slots(slots, W)
    return (lambda _k: fixed), 1
