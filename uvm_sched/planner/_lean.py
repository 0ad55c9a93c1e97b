"""What the chosen plan does without: rows of its table left out where no view shows the
plan slower without them, judged against the plan itself rather than against no plan --
its discards (Note [Discards judged against keeping them], ``_pricing``), its populates
that move nothing (Note [Populates that move nothing], ``_populates``), and the moves of
the blocks the views doubt (Note [Moves the views doubt]).

Note [Moves the views doubt] -- oblivious mode. The pricing compares whole plans: the full
plan, its advice alone, no plan. A full plan priced below its advice goes out whole, though
some of its moves (a block's evictions and the prefetches that bring it back) may lose:
unet-s243 on h200-pcie5 at 60% of peak, the full plan 0.81x and 0.85x no plan in the
allocator events alone and with the kept reads, was 1.013x demand paging on the ground
truth; its advice alone, slower with the kept reads, is faster in the events alone (3.13
against 3.24 ms) and was 0.91x. Without the moves of nine of its 42 freed blocks the plan
is no slower in any view, and 0.785x demand paging: the loss is some of the moves, not
all. So where a view that ranks (the events alone, the kept reads) shows the advice alone
faster than the full plan -- the views doubt its moves (``doubted``) -- the moves are
judged one block at a time, in the order of the blocks' first moves: a block's moves are
left out where no view (the four of the pricing) shows the plan slower without them,
against the plan as it stands after the blocks before (``without_losing_moves``). Only
freed blocks: their uses are the views' guess that the doubt is about (the kept blocks'
reads are guessed by the views themselves).

The one-unseen-use view and the kept reads in reverse order do not raise the doubt, as they
do not rank (Note [One unseen use], Note [Kept reads in either order]): the U-Net of the
zoo at 75% of peak (``quality_subset.py``), the full plan 87 ms and its advice 256 ms in the
events alone, 511 and 384 ms in the one-unseen-use view, lost the moves of one 64 MiB
activation that every view showed losing, and went from 1.78x to 2.30x ideal on h200-pcie5
(1.15x -> 1.22x on gh200-c2c); unet-s38 on a100-40gb-pcie4 at 60%, which that view alone
doubts, stays at 1.036x demand paging (0.78x with its doubt; ``benchmarks/results/robust.md``).
Where no view doubts the moves, the plan is left whole: judged all the same, the moves of
plans no view doubted lost on the ground truth as often as they won (bench_robust, 196
generated rows: 4 faster, 2 slower by over 1%, unet-s40 on gh200-c2c at 60% 0.24x -> 0.48x
demand paging). ``MAX_TRIALS`` bounds the simulations: a plan moving more blocks has them
judged in that many runs of consecutive blocks (a run's blocks are left out together or
not at all). Results across its range: ``benchmarks/results/robust.md``.

Import note: called by ``_choice.priced``; it calls the simulator lazily, as ``_pricing``.
"""
from __future__ import annotations

import numpy as np

from ._pricing import _ROUNDING, _VIEW_NAMES, host_stall_s, runs_to_end

__all__ = ["without_rows", "without_discards", "doubted", "without_losing_moves",
           "MAX_TRIALS"]

# Note [Moves the views doubt]: the most runs of blocks judged per plan
MAX_TRIALS = 64
# the kept reads first: of the views, it showed discards paying most often, so it decides
# soonest (gru-s700 1.47x, mlp-s1008 1.13x without them; the LLM traces of bench_scale)
_ORDER = (1, 2, 0)
# the views that judge a plan without its populates that move nothing (``without_rows``
# with ``unseen_use`` False): not the one-unseen-use view. Its invented reads change which
# freed ranges the driver evicts, the one thing the pool replay that marks these populates
# cannot see (Note [Populates that move nothing], ``_populates``), so there it shows them
# paying where they do not. The discards keep it: its extra pressure stands for the reads
# the allocator events do not show (a recurrent state read at every time step), and the
# room a discard frees pays under it. Measured on bench_robust's 300 cases (no constant):
# benchmarks/results/robust.md, "Before / after: the one-unseen-use view and the rows left
# out"
_POPULATES_ORDER = tuple(j for j in _ORDER if j != 2)


class _Views:
    """``views`` (``_pricing._views``: callables) built once each, with the simulator's
    prepared arrays, for a judgement that runs each view many times; ``kept`` False builds
    a view afresh at each use (one view's arrays live at a time)."""

    def __init__(self, views: list, kept: bool) -> None:
        self.views, self.kept = views, kept
        self.made: dict[int, tuple] = {}  # view -> (the view, its simulator cache)

    def __call__(self, j: int):
        if j in self.made:
            return self.made[j]
        made: tuple = (self.views[j](), {})
        if self.kept:
            self.made[j] = made
        return made


def _no_slower(views: _Views, order, current, trial, known: dict, budget: int, prof,
               hosts: dict | None = None):
    """``(times, j)``: ``trial``'s iteration times (s, ``{view: s}``) in the views of
    ``order`` where no view shows it slower than ``current`` (``known``: ``current``'s
    times, ``{view: s}``; those missing are simulated and added), else ``(None, j)``, ``j``
    the view that shows it slower. A view whose reads cannot be held judges nothing.
    ``hosts``: ``current``'s host stalls (s, ``{view: s}``, for ``calls_hidden``), which get
    those of its runs made here, and are replaced by ``trial``'s where times are returned
    (as the callers then take ``trial``'s times for ``known``)."""
    from ..sim import BudgetError, simulate

    times: dict = {}
    trial_hosts: dict = {}
    hosts = {} if hosts is None else hosts
    for j in order:
        try:
            view, cache = views(j)
            if not known.get(j):
                r = simulate(view, current, prof, budget, _cache=cache, _figures_only=True)
                known[j], hosts[j] = float(r.iteration_time_s), host_stall_s(r)
            at = known[j] * (1 + _ROUNDING)
            r = simulate(view, trial, prof, budget, _cache=cache, _figures_only=True,
                         _stop_above_s=at * (1 + 1e3 * _ROUNDING))
        except BudgetError:
            continue
        seconds = float(r.iteration_time_s)
        if r.counters.get("stopped") or seconds > at:
            return None, j
        times[j], trial_hosts[j] = seconds, host_stall_s(r)
    if times:
        hosts.clear()
        hosts.update(trial_hosts)
    return times, None


def without_rows(views: list, chosen, drop, what: str, budget: int, prof, *, accesses: bool,
                 known: dict | None = None, hosts: dict | None = None,
                 unseen_use: bool = True):
    """``(plan, why, times)``: ``chosen`` (a priced ``Plan``) without the rows of its table
    that ``drop`` (a bool per row) marks, where that is no slower in any of ``views``
    (``_views``: those ``price`` judged it in), judged against ``chosen`` itself rather
    than against no plan, else ``chosen``; why in words, naming the rows ``what`` (None
    where ``drop`` marks none); and ``{view: s}``, the returned plan's iteration times
    simulated to their end (``known``: ``chosen``'s, already simulated). ``hosts``, given:
    ``{view: s}``, ``chosen``'s host stall in those runs, updated in place to the returned
    plan's. ``unseen_use`` False: the one-unseen-use view does not judge (``_POPULATES_ORDER``).
    Note [Discards judged against keeping them], Note [Populates that move nothing]
    (``_populates``)."""
    from ._plan import Plan

    drop = np.asarray(drop, bool)
    known = dict(known or {})
    if not drop.any():
        return chosen, None, known
    kept = Plan(chosen.actions[~drop].reset_index(drop=True), dict(chosen.meta))
    names = _VIEW_NAMES[4:] if accesses else _VIEW_NAMES[:4]
    order = (0,) if accesses else _ORDER if unseen_use else _POPULATES_ORDER
    times, j = _no_slower(_Views(views, False), order, chosen, kept, known, budget, prof,
                          hosts)
    if times is None:
        return chosen, (f"kept: {int(drop.sum())} {what}, without them the plan is "
                        f"slower with {names[j]}"), known
    if not times:
        return chosen, f"kept: {int(drop.sum())} {what}, no view could judge them", known
    why = (f"left out: {int(drop.sum())} {what}, the plan is no slower without them in "
           f"any of {len(times)} view{'s' * (len(times) > 1)}")
    return kept, why, times


def without_discards(views: list, chosen, budget: int, prof, *, accesses: bool,
                     known: dict | None = None):
    """``(plan, why, seconds)``: ``chosen`` (a priced ``Plan``, advice alone) without its
    discards where that is no slower in any of ``views`` (``_views``: those ``price``
    judged it in), else ``chosen`` itself; why in words (None where it has no discard); and, where
    they are left out and the accesses known (one view: the judge's own figure), the
    iteration time without them (else None). ``known``: ``{view: s}``, ``chosen``'s
    iteration times already simulated. Note [Discards judged against keeping them]."""
    drop = (chosen.actions["action"] == "discard").to_numpy()
    out, why, times = without_rows(views, chosen, drop, "discards", budget, prof,
                                   accesses=accesses, known=known)
    return out, why, times.get(0) if accesses and out is not chosen else None


def doubted(views: list, chosen, advice, exact: dict, budget: int, prof,
            hosts: dict | None = None) -> int | None:
    """The first of the views that rank (of ``views``, the events alone and the kept reads:
    its index) in which ``advice`` (the chosen full plan's advice alone) is faster than
    ``chosen``, or None: Note [Moves the views doubt].
    ``exact``: ``{(view, label): s}`` of the runs made to their end, labels ``"plan"`` and
    ``"advice-only"``; the runs missing are made, to their end, and added (their host
    stall to ``hosts``, given: ``runs_to_end``)."""
    from ..sim import BudgetError

    for j in range(min(2, len(views))):
        try:
            runs_to_end(views, j, {"plan": chosen, "advice-only": advice}, exact, budget,
                        prof, hosts)
        except BudgetError:
            continue  # a view that cannot hold the budget judges nothing
        if exact[j, "advice-only"] < exact[j, "plan"] * (1 - _ROUNDING):
            return j
    return None


def without_losing_moves(views: list, chosen, moved, budget: int, prof, known: dict,
                         hosts: dict | None = None):
    """``(plan, kept, why, known)``: ``chosen`` (a priced full ``Plan``, oblivious mode)
    without the moves of the freed blocks whose moves no view shows paying (Note [Moves the
    views doubt]), each block judged against the plan as it stands; which of ``chosen``'s
    rows it keeps (a bool per row); why in words (None where ``chosen`` moves no freed
    block); and the returned plan's iteration times ``{view: s}``. ``moved``: a bool
    per row, the schedule's evictions and the prefetches that bring blocks back (``_actions``);
    ``known``: ``chosen``'s times; ``hosts``, given: ``{view: s}``, ``chosen``'s host stall
    in those runs, updated in place to the returned plan's."""
    from ._plan import Plan

    acts = chosen.actions
    moved = np.asarray(moved, bool) & ~acts["persistent"].to_numpy(bool)
    blocks = acts["block"].to_numpy(np.int64)
    order = np.asarray(list(dict.fromkeys(blocks[moved].tolist())), np.int64)
    keep = np.ones(len(acts), bool)
    if not len(order):
        return chosen, keep, None, known
    judge = _Views(views, True)
    current, known = chosen, dict(known)
    left, runs = [], np.array_split(order, min(len(order), MAX_TRIALS))
    for run in runs:
        trial = keep & ~(moved & np.isin(blocks, run))
        plan = Plan(acts[trial].reset_index(drop=True), dict(chosen.meta))
        times, _ = _no_slower(judge, (*_ORDER, 3)[:len(views)], current, plan, known,
                              budget, prof, hosts)
        if times:  # None: a view shows it slower; {}: no view could judge it
            keep, current, known = trial, plan, times
            left.extend(run.tolist())
    why = (f"left out: the moves of {len(left)} of {len(order)} freed blocks "
           f"({int((~keep).sum())} rows), the plan is no slower without them in any view; "
           f"{len(runs)} judged") if left else \
        f"kept: the moves of {len(order)} freed blocks, each judged ({len(runs)})"
    return current, keep, why, known
