"""The plan emitted: the fastest of the candidates the pricing judged (``_pricing``), then
what the plan chosen does not need -- the moves of the blocks the views doubt, its
discards, its populates that move nothing -- left out where no view shows it slower
without them (``_lean``), and the plan withheld where its calls cost the launching thread
more than it gains (Note [Calls the host cannot hide]).

Import note: ``_oblivious_actions`` calls ``_planner.plan`` (lazily: ``_planner`` imports
this module).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ._plan import Plan

__all__ = ["priced", "as_tables", "ROLES"]

# what a row of a plan's table is to the judgements after the pricing (``_actions``; 0:
# anything else): a populate that moves nothing (Note [Populates that move nothing]), a
# move (an eviction, or a prefetch bringing a block back: Note [Moves the views doubt])
ROLES = {"idle populate": 1, "move": 2}


_JUDGES = ("simulator on the allocator events (ALLOC/FREE/markers)",
           "simulator on the trace with its accesses",
           "simulator on the allocator events with the given samples' touches")


# Note [The oblivious plan as a candidate]
# ----------------------------------------
# Sampled mode with its samples drawn from the trace knows the accesses, and the judge
# (``_pricing``) replays the trace as it is: there both the sampled and the oblivious plan
# can be timed on the same accesses. The samples add knowledge the oblivious planner lacks,
# yet its schedule is built by the same heuristic (guards, selection, populates), so it
# can lose where the oblivious one wins (benchmarks/results/robust.md: 225 of 3,837
# generated rows, most at 90% and 75% of peak on CNNs with long concat chains and U-Nets,
# up to 1.9x). So the oblivious plan and its advice alone (either may be what oblivious
# mode emits; no plan is a candidate already), and the plan oblivious mode emits (its
# pricing may leave out some moves: Note [Moves the views doubt]), are priced beside the
# sampled one's candidates, and the fastest is emitted: sampled mode is never slower than
# oblivious mode where it can tell. Samples given by a caller (the runtime's fault
# samples) do not make the trace's accesses known, and the candidates are not added there.


def as_tables(mode: str, out: Plan, extra: dict, roles_of: dict) -> Any:
    """What ``plan(price=_AS_CANDIDATES)`` returns: the plan's table and its advice alone,
    and each without the populates that move nothing where it has any (``_actions``)."""
    tables = {mode: out.actions, f"{mode} advice-only": extra["advice-only"]}
    for label, acts in list(tables.items()):
        idle = roles_of["plan" if label == mode else "advice-only"] == ROLES["idle populate"]
        if idle.any():
            tables[f"{label} without idle populates"] = acts[~idle].reset_index(drop=True)
    return tables


def _oblivious_actions(trace, budget: int, prof, pat, opts: dict) -> dict:
    """``{"oblivious": table, "oblivious advice-only": table, ...}``: the actions oblivious
    mode plans for ``trace`` with the same options (the sampling and LP options dropped),
    its advice alone, and that without its discards -- each a choice its own pricing may
    make -- unpriced, and the plan it emits (priced in oblivious mode): the caller prices
    them (Note [The oblivious plan as a candidate])."""
    from ._planner import _AS_CANDIDATES, _SAMPLE_OPTS, plan

    drop = set(_SAMPLE_OPTS) | {"pattern", "price", "method", "lp_max_columns",
                                "lp_time_limit_s"}
    keep = {k: v for k, v in opts.items() if k not in drop}
    tables: Any = plan(trace, budget, prof, mode="oblivious", pattern=pat,
                       price=_AS_CANDIDATES, **keep)
    # oblivious mode may emit its advice alone without the discards (Note [Discards judged
    # against keeping them]), and then without its populates that move nothing (Note
    # [Populates that move nothing]): candidates too, so that sampled mode is never slower
    for label in ("oblivious advice-only", "oblivious advice-only without idle populates"):
        acts = tables.get(label)
        disc = np.zeros(0, bool) if acts is None else (acts["action"] == "discard").to_numpy()
        if disc.any():
            tables[f"{label} without discards"] = acts[~disc].reset_index(drop=True)
    # and the plan oblivious mode emits, whose pricing may leave out moves (Note [Moves the
    # views doubt], ``_lean``), which no table above holds
    emitted = plan(trace, budget, prof, mode="oblivious", pattern=pat, **keep).actions
    if not any(a.equals(emitted) for a in tables.values()):
        tables["oblivious as emitted"] = emitted
    return tables


def priced(trace, full: Plan, extra: dict, roles_of: dict, budget: int, prof, accesses: bool,
            starts, oblivious: bool, source=None) -> Plan:
    """The fastest of the full plan, the ``extra`` candidates (``{label: actions}``, in
    order: the greedy plan beside an LP-guided one, its advice alone, the oblivious plan
    and its advice alone where the accesses are known) and no plan, judged
    by the simulator on the trace's allocator events (``_pricing``); the choice is noted
    in its meta (``oblivious``: the plan was made without samples). ``source``: the
    trace (as planned on: ``trace`` is what it is priced on), pattern and options the plan
    was made from; with ``accesses``, the oblivious plan's
    tables are priced too (Note [The oblivious plan as a candidate]). ``roles_of``: per
    label, each row's role in its table (``ROLES``, ``_actions``)."""
    from ..sim import BudgetError
    from ._lean import doubted, without_losing_moves, without_rows
    from ._pricing import _views, calls_hidden, price

    if not trace.has_clock:
        # the judge compares iteration times: on a trace with no clock they would be made
        # up, so the plan stands unpriced (the runtime's watchdog still times it for real)
        full.meta["pricing"] = {"chosen": "plan", "unpriced": "the trace has no clock, so "
                                "the plan cannot be timed against no plan"}
        return full
    if accesses and source is not None:
        planned_on, pat, opts = source
        extra = {**extra, **_oblivious_actions(planned_on, budget, prof, pat, opts)}
    cands = {"plan": full, **{k: Plan(a, dict(full.meta)) for k, a in extra.items()},
             "none": Plan(extra["advice-only"].iloc[:0], dict(full.meta))}
    exact: dict = {}  # (view, label) -> iteration s, of the runs made to their end
    host_of: dict = {}  # (view, label) -> their host stall, s (for calls_hidden)
    views = _views(trace, budget, starts, accesses)  # once: the discards are judged in them too
    try:
        best, times, at_least = price(trace, cands, budget, prof, accesses=accesses,
                                      starts=starts, oblivious=oblivious, exact=exact,
                                      views=views, hosts=host_of)
    except BudgetError as e:
        full.meta["pricing"] = {"chosen": "plan", "unpriced": str(e)}
        return full
    out = cands[best]
    out.meta["pricing"] = {"chosen": best, **{f"{k}_s": v for k, v in times.items()},
                           "judge": _JUDGES[bool(accesses) + bool(trace.meta.get("samples_view"))]}
    if at_least:  # refuted early (_pricing): their figures are lower bounds
        out.meta["pricing"]["at_least"] = list(at_least)
    roles = roles_of.get(best, np.zeros(len(out.actions), np.int8))
    # Note [Moves the views doubt] (``_lean``); the runs it makes are added to ``exact``
    doubt = oblivious and not accesses and best == "plan" and \
        doubted(views, out, cands["advice-only"], exact, budget, prof, host_of) is not None
    known = {j: t for (j, k), t in exact.items() if k == best}
    # the lean judgements below keep both in step with ``out`` (the events alone is not
    # run again for its host stall where one of them ran it to its end)
    hosts = {j: s for (j, k), s in host_of.items() if k == best}
    if doubt:
        lean, kept, why, known = without_losing_moves(views, out, roles == ROLES["move"],
                                                      budget, prof, known, hosts)
        out.meta["pricing"]["moves"] = why
        out, roles = lean, roles[kept]
    idle = roles == ROLES["idle populate"]
    if best.endswith("advice-only"):  # Note [Discards judged against keeping them]
        disc = (out.actions["action"] == "discard").to_numpy()
        lean, why, known = without_rows(views, out, disc, "discards", budget, prof,
                                        accesses=accesses, known=known, hosts=hosts)
        if why:
            out.meta["pricing"]["discards"] = why
        if lean is not out:
            idle = idle[~disc]
            if accesses:  # the judge's figure for the plan emitted
                out.meta["pricing"][f"{best} without discards_s"] = known[0]
        out = lean
    # Note [Populates that move nothing] (``_populates``): judged the same way
    lean, why, known = without_rows(views, out, idle, "populates that move nothing", budget,
                                    prof, accesses=accesses, known=known, hosts=hosts,
                                    unseen_use=False)
    if why:
        out.meta["pricing"]["populates"] = why
    if lean is not out and accesses:
        out.meta["pricing"][f"{best} without idle populates_s"] = known[0]
    out = lean
    if oblivious and not accesses and best != "none":  # Note [Calls the host cannot hide]
        none_s = {j: t for (j, k), t in exact.items() if k == "none"}
        hidden, why = calls_hidden(views, out, none_s, known, budget, prof, hosts)
        if not hidden:
            why = f"{best} not emitted: {why}"
            pricing = dict(out.meta["pricing"], chosen="none", calls=why)
            best, out = "none", cands["none"]
            out.meta["pricing"] = pricing
    if "calls" in out.meta["pricing"]:
        out.meta["fallback"] = f"none: {out.meta['pricing']['calls']}"
    elif best != "plan":
        out.meta["fallback"] = (
            f"{best}: the full plan was predicted at {'at least ' * ('plan' in at_least)}"
            f"{times['plan']:.6g} s per iteration, "
            f"{best} at {times[best]:.6g} s (no plan: {times['none']:.6g} s)")
    return out
