"""simulate() and compare(): the simulator's public face."""
from __future__ import annotations

import logging
import warnings
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from .. import _errors
from .._budget import resolve_budget
from ..hw import load_profile
from ..planner import Plan
from . import _fast
from ._bound import lower_bound
from ._engine import DISCARD, Engine
from ._policies import PlanSchedule, PrefetchOnAlloc, Schedule, SwapActivations
from ._prep import prepare
from ._result import BudgetError, SimResult

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["simulate", "compare", "POLICIES", "LP_BOUND"]

logger = logging.getLogger(__name__)

POLICIES = ("ideal", "demand", "prefetch-on-alloc", "swap-activations", "bound", "uvm-sched")
# also known to simulate(), left out of POLICIES (what compare() runs by default): it needs
# the optional HiGHS solver and takes seconds to minutes
LP_BOUND = "lp-bound"

_TIMELINE_COLS = ("tick", "start_s", "compute_s", "stall_s", "stall_fault_s", "stall_evict_s",
                  "stall_link_s", "stall_host_s", "resident_bytes", "h2d_bytes", "d2h_bytes")


_ACTION_COLS = ("tick", "stage", "action", "block", "event")


def _breakdown(fault: float = 0.0, eviction: float = 0.0, link: float = 0.0,
               host: float = 0.0) -> dict:
    """SimResult.stall_breakdown (s per cause): every result lists every cause."""
    return {"fault": float(fault), "eviction": float(eviction), "link": float(link),
            "host": float(host)}


def _frames(rows, transfers):
    """The timeline and transfers frames, from lists of row tuples or (the compiled loop)
    dicts of columns; ``None`` is no rows."""
    import pandas as pd

    tl = pd.DataFrame(rows if rows is not None else [], columns=list(_TIMELINE_COLS))
    tr = pd.DataFrame(transfers if transfers is not None else [],
                      columns=["start_s", "end_s", "direction", "bytes", "block", "cause"])
    return tl, tr


def _actions_frame(log, prep=None):
    """SimResult.actions from (tick, stage, engine code, dense block, event) tuples, or
    from those five columns as arrays."""
    import pandas as pd

    from ..planner import ACTIONS

    if not len(log) or (isinstance(log, tuple) and not len(log[0])):
        return pd.DataFrame({"tick": pd.Series(dtype=np.int64), "stage": pd.Series(dtype=object),
                             "action": pd.Series(dtype=object),
                             "block": pd.Series(dtype=np.int64),
                             "event": pd.Series(dtype=np.int64)})
    cols = log if isinstance(log, tuple) else zip(*log)
    t, st, code, b, k = (np.asarray(c) for c in cols)
    return pd.DataFrame({"tick": t.astype(np.int64), "stage": st.astype(object),
                         "action": np.asarray(ACTIONS, dtype=object)[code.astype(np.int64)],
                         "block": prep.block_id[b.astype(np.int64)].astype(np.int64),
                         "event": k.astype(np.int64)})


def _check_budget(prep, budget: int) -> None:
    ws = prep.ws_bytes
    if len(ws) and budget < int(ws.max()):
        t = int(np.argmax(ws))
        raise BudgetError(
            f"budget {budget:,} bytes is below the working set of tick {t}: its kernel "
            f"touches {int(ws[t]):,} bytes, which must all be on the device at once; give a "
            f"budget of at least {int(ws[t]):,} bytes")


def _prepared(trace, hw, cache):
    key = (id(trace), hw.va_block_bytes, hw.page_bytes)
    if cache is not None and key in cache:
        return cache[key]
    prep = prepare(trace, hw.va_block_bytes, hw.page_bytes)
    if cache is not None:
        cache[key] = prep
    return prep


def simulate(trace, policy: "str | Plan", hw: Any = "h200-pcie5", budget: Any = None,
             **opts) -> SimResult:
    """Simulate ``trace`` under ``policy`` on ``hw`` with ``budget`` bytes of device memory
    for managed data (bytes, ``"50%"`` of the trace's peak, ``"40GiB"``; default: the
    device's capacity).

    ``policy``: ``"ideal"`` (infinite device memory: compute only), ``"demand"`` (plain
    UVM: faults and driver eviction, as ``torch.cuda._use_uvm()``), ``"prefetch-on-alloc"``
    (RMM's prefetch adaptor), ``"swap-activations"`` (vDNN-style), ``"bound"`` (a lower
    bound on any schedule, see ``_bound``: fast), ``"lp-bound"`` (a tighter lower bound on
    a steady-state iteration from a linear program, see ``_lp``: needs ``highspy``, seconds
    to minutes; options ``lp_max_columns`` (int: larger programs are coarsened in time),
    ``lp_coarsen`` (int: ticks per slot, 1 = exact), ``lp_slots`` (``"uniform"``,
    ``"weighted"``: finer slots where the budget binds, see ``_lp_slots``, or the slot
    starts), ``lp_refine_s`` (a time budget, s: from ``lp_max_columns`` up, finer programs
    while they are predicted to fit it; the largest bound found, see ``_lp_refine``),
    ``lp_lossless`` (bool: over the schedules that keep each block's data to its FREE, as
    every uvm_sched plan does; Note [Lossless schedules]), ``lp_time_limit_s`` (HiGHS's time
    budget, default 600 s: past it the LP proves nothing and the result holds the fast
    ``bound``'s figures, with ``counters["lp_fallback"] == "bound"`` and the reason in
    ``counters["lp_status"]``); the better bound
    is the larger of the two), ``"uvm-sched"`` (plans with
    ``uvm_sched.planner.plan(trace, budget, hw, mode=opts.get("mode", "auto"))``: auto is
    sampled on a trace that carries accesses, as ``plan`` decides), or
    a ``Plan``. Options: ``pool`` (bool, default True: frees keep memory resident for
    reuse, see ``_engine``), ``zero_fill_faults`` (bool, default True: the first touch of
    fresh managed memory is a fault (latency, no bytes) as on real drivers; False treats it
    as free, as the G10 artifact's model does), ``mode`` (for ``uvm-sched``), ``plan_opts`` (dict, extra
    keyword arguments for the planner), ``tune`` (for ``uvm-sched``: plans to try beside
    the configured one, ``planner.tuning_candidates``: guards, or ``"oblivious"`` in sampled
    mode -- as ``Scheduler(tune=...)`` does on a GPU, with this simulation standing in for
    its clock: the fastest candidate's result, ``counters["tuned_guard"]`` naming it and
    ``counters["tuning_<label>_s"]`` each one's time), ``actions_to_end`` (bool, default False: the run
    stops at the end of the measured window; True goes on through an incomplete last
    iteration after it, so that ``SimResult.actions`` covers every tick of the trace; the
    figures stay those of the window).

    ``SimResult.actions`` lists the plan actions carried out (a Plan or ``uvm-sched``; empty
    for the other policies) from the trace's first tick, warm-up iterations included.

    A ``Plan`` made for another trace (``Plan.check_trace``) is simulated with a
    ``planner.PlanMismatchWarning``. Raises ``BudgetError`` when the budget is below one
    tick's working set. Times in s,
    sizes in bytes; the measured window is the last complete iteration.

    ``compute_times``: measured compute times in place of the trace's own
    (``Trace.with_compute_times``: a GPU profile's kernel times, the runtime's marker
    timings, or seconds per iteration); ``SimResult.time_source`` says which a figure used.
    """
    ct = opts.pop("compute_times", None)
    if ct is not None:
        trace = trace.with_compute_times(ct)
    result = _simulate(trace, policy, hw, budget, **opts)
    result.time_source = trace.time_source
    return result


def _simulate(trace, policy, hw, budget, **opts) -> SimResult:
    hw = load_profile(hw)
    cache = opts.pop("_cache", None)
    # private, for the planner's pricing (Note [Figures only])
    figures_only = bool(opts.pop("_figures_only", False))
    stop_above_s = float(opts.pop("_stop_above_s", float("inf")))  # Note [A run stopped ...]
    pool = bool(opts.pop("pool", True))
    zero_fill = bool(opts.pop("zero_fill_faults", True))
    prep = _prepared(trace, hw, cache)
    B = resolve_budget(budget, trace.peak_bytes, default_bytes=hw.device_capacity_bytes)
    ws, we = prep.window
    compute = float(prep.dur_s[ws:we].sum())
    name = policy if isinstance(policy, str) else "plan"
    if isinstance(policy, str) and policy not in POLICIES + (LP_BOUND,):
        raise ValueError(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}, "
                         f"{LP_BOUND} or a Plan")

    if name == "ideal":
        return _ideal(prep, hw, B, compute)
    _check_budget(prep, B)
    if name == "bound":
        T, tick, excess, out = lower_bound(prep, hw, B)
        return _bound_result(prep, hw, B, compute, T, tick, excess, out)
    if name == LP_BOUND:
        from ._lp import MAX_COLUMNS, LpOverBudget, lp_bound
        from ._lp_refine import lp_bound_within

        cap = int(opts.pop("lp_max_columns", MAX_COLUMNS))
        slots = opts.pop("lp_slots", "uniform")
        refine_s = opts.pop("lp_refine_s", None)
        lossless = bool(opts.pop("lp_lossless", False))
        try:
            if refine_s is not None:
                lp = lp_bound_within(prep, hw, B, float(refine_s), start_columns=cap,
                                     slots=slots, lossless=lossless)
            else:
                lp = lp_bound(prep, hw, B, max_columns=cap, slots=slots,
                              coarsen=opts.pop("lp_coarsen", None), lossless=lossless,
                              time_limit_s=float(opts.pop("lp_time_limit_s", 600.0)))
        except LpOverBudget as e:
            # past the time budget the LP proves nothing: the fast bound is what stands
            logger.info("lp-bound: %s; the fast bound is reported", e)
            r = _bound_result(prep, hw, B, compute, *lower_bound(prep, hw, B))
            r.policy = LP_BOUND
            r.counters.update(lp_status=str(e), lp_fallback="bound")
            return r
        return _lp_result(prep, hw, B, compute, lp)
    if name == "uvm-sched":
        from .. import planner

        if not hasattr(planner, "plan"):
            raise RuntimeError("policy 'uvm-sched' needs uvm_sched.planner.plan, which this "
                               "installation lacks; pass a Plan instead")
        plan_opts = dict(opts.pop("plan_opts", {}) or {})
        mode = opts.pop("mode", "auto")  # plan()'s default
        tune = tuple(opts.pop("tune", None) or ())
        if tune:
            return _tuned(trace, B, hw, mode, plan_opts, tune, cache,
                          dict(opts, pool=pool, zero_fill_faults=zero_fill))
        policy = planner.plan(trace, B, hw, mode=mode, **plan_opts)
    to_end = bool(opts.pop("actions_to_end", False))
    opts.pop("mode", None)
    opts.pop("plan_opts", None)
    opts.pop("tune", None)  # uvm-sched's (compare passes it to every policy)
    for k in ("lp_max_columns", "lp_coarsen", "lp_time_limit_s", "lp_slots", "lp_refine_s",
              "lp_lossless"):
        opts.pop(k, None)  # lp-bound's
    if opts:
        raise TypeError(f"simulate() got unknown option(s) {sorted(opts)}")
    if isinstance(policy, Plan):
        try:
            policy.check_trace(trace)
        except ValueError as e:  # PlanError: simulated anyway, but never silently
            from ..planner import PlanMismatchWarning

            warnings.warn(str(e).split(" Plan for this trace")[0], PlanMismatchWarning,
                          stacklevel=3)  # the caller of simulate
        if figures_only and not to_end:
            return _run_figures(prep, hw, B, policy, pool, zero_fill, stop_above_s)
        sched: Schedule = PlanSchedule(policy, prep)
    elif name == "demand":
        sched = Schedule()
    elif name == "prefetch-on-alloc":
        sched = PrefetchOnAlloc(prep)
    elif name == "swap-activations":
        sched = SwapActivations(prep)
    else:  # pragma: no cover - guarded above
        raise ValueError(policy)
    return _run(prep, hw, B, sched, name, pool, zero_fill, to_end)


def _tuned(trace, B, hw, mode, plan_opts, tune, cache, opts) -> SimResult:
    from ..planner import plan, tuning_candidates

    runs = {label: simulate(trace, plan(trace, B, hw, mode=m, **o), hw, B, _cache=cache, **opts)
            for label, m, o in tuning_candidates(tune, mode, plan_opts)}
    best = min(runs, key=lambda g: runs[g].iteration_time_s)
    r = runs[best]
    r.policy = "uvm-sched"
    r.counters["tuned_guard"] = best
    for g, x in runs.items():
        r.counters[f"tuning_{g}_s"] = x.iteration_time_s
    return r


def _ideal(prep, hw, B, compute) -> SimResult:
    ws, we = prep.window
    dur = prep.dur_s[ws:we]
    z = np.zeros(we - ws)
    start = np.concatenate([[0.0], np.cumsum(dur)[:-1]]) if len(dur) else z
    from ._policies import live_bytes_per_tick

    live = live_bytes_per_tick(prep)[ws:we]
    rows = list(zip(range(ws, we), start, dur, z, z, z, z, z, live, z.astype(int),
                    z.astype(int)))
    tl, tr = _frames(rows, [])
    return SimResult("ideal", hw.name, B, compute, compute, 0.0,
                     _breakdown(), 0, 0, 0,
                     int(live.max()) if len(live) else 0, 0, tl, tr,
                     {"window_start": ws, "window_stop": we}, _actions_frame([]))


def _bound_result(prep, hw, B, compute, T, tick, excess, out) -> SimResult:
    ws, we = prep.window
    dur = prep.dur_s[ws:we]
    z = np.zeros(we - ws)
    start = np.concatenate([[0.0], np.cumsum(dur)[:-1]]) if len(dur) else z
    link = z.copy()
    if len(link):
        link[-1] = T - compute  # the bound says how much, not where: charged at the end
    rows = list(zip(range(ws, we), start, dur, link, z, z, link, z, z.astype(int),
                    z.astype(int), z.astype(int)))
    tl, tr = _frames(rows, [])
    return SimResult("bound", hw.name, B, T, compute, T - compute,
                     _breakdown(link=T - compute),
                     int(excess), int(out), 0,
                     min(B, int(prep.ws_bytes.max()) if len(prep.ws_bytes) else 0), 0, tl, tr,
                     {"window_start": ws, "window_stop": we, "binding_tick": tick,
                      "must_cross_bytes": int(excess), "must_write_back_bytes": int(out)},
                     _actions_frame([]))


def _lp_result(prep, hw, B, compute, lp) -> SimResult:
    """The LP optimum as a SimResult: each slot's time beyond its compute is its stall
    (charged to the slot's last tick), its link bytes the optimum's transfers."""
    ws, we = prep.window
    dur = prep.dur_s[ws:we]
    W = we - ws
    z = np.zeros(W)
    start = np.concatenate([[0.0], np.cumsum(dur)[:-1]]) if W else z
    stall, h2d, d2h = z.copy(), np.zeros(W, np.int64), np.zeros(W, np.int64)
    k = lp.coarsen
    ends = np.append(lp.slot_start[1:], W)
    for g in range(len(lp.slot_s)):
        first, last = int(lp.slot_start[g]), int(ends[g]) - 1
        stall[last] = max(0.0, lp.slot_s[g] - float(dur[first:last + 1].sum()))
        h2d[last] = int(round(lp.bytes_in[g]))
        d2h[last] = int(round(lp.bytes_out[g]))
    rows = list(zip(range(ws, we), start, dur, stall, z, z, stall, z, z.astype(int), h2d, d2h))
    tl, tr = _frames(rows, [])
    T = max(lp.time_s, compute)
    counters = {"window_start": ws, "window_stop": we, "lp_columns": lp.columns,
                "lp_rows": lp.rows, "lp_nonzeros": lp.nonzeros, "lp_ticks_per_slot": k,
                "lp_slots": len(lp.slot_s),
                "lp_build_s": lp.build_s, "lp_solve_s": lp.solve_s, "lp_classes": lp.classes,
                "lp_blocks": len(prep.bsize)}
    return SimResult(LP_BOUND, hw.name, B, T, compute, T - compute,
                     _breakdown(link=T - compute),
                     int(h2d.sum()), int(d2h.sum()), 0,
                     min(B, int(prep.ws_bytes.max()) if len(prep.ws_bytes) else 0), 0, tl, tr,
                     counters, _actions_frame([]))


# The native executor skips a discard of a block of at most 1 MiB: such blocks share 2 MiB
# slab pages with others in the pool, so discarding the page would destroy live data.
DISCARD_MIN_BYTES = (1 << 20) + 1


def _executes(code: int, b: int, alive: int, sched, prep) -> bool:
    """Whether the executor acts on planned action ``code`` for block ``b`` now: the block
    is live, or (discard only) it was freed by the very allocator event the action follows."""
    if code == DISCARD:
        if prep.bsize[b] < DISCARD_MIN_BYTES:
            return False
        return alive == 1 or b in getattr(sched, "discard_at_free", ())
    return alive == 1


def _run(prep, hw, B, sched: Schedule, name: str, pool: bool, zero_fill: bool,
         to_end: bool = False) -> SimResult:
    """The event loop: compiled (``_fast``) when numba is there, else the reference."""
    if _fast.available():
        books = _fast.run(prep, hw, B, sched, pool, zero_fill, to_end, DISCARD_MIN_BYTES)
    else:
        books = _run_reference(prep, hw, B, sched, pool, zero_fill, to_end)
    result = _window_result(prep, hw, B, name, pool, books)
    result.actions = _actions_frame(books["actions"], prep)
    return result


# Note [Figures only] -- the planner's pricing reads two figures of each run (the iteration
# time and its stall) over up to twelve runs of one trace (three candidate plans in up to
# four views). ``simulate(..., _figures_only=True)`` runs the same loop, so its figures are
# those of ``simulate``, but builds no timeline, copy or action frames (pandas frames with
# string columns: about a tenth of a priced plan's time at 100k events). Keeping each plan's
# action table for the next view (the views differ in their ACCESS rows only) saved
# another 0.1 s per 100k events but held ~150 bytes per event more at the peak (1M events:
# 1,008 -> 1,163 bytes per event over the start, past the 1 KiB target), so it is not done.
#
# Note [A run stopped once it is slower] -- the pricing decides some runs from a lower
# bound of their iteration time alone (``planner/_pricing.py``, Note [Runs stopped once
# decided]): ``simulate(..., _figures_only=True, _stop_above_s=x)`` stops the compiled loop
# after the first tick of the measured window at which the window's time so far is above
# ``x`` seconds. The clock never goes back (each tick adds its compute and its stalls), so
# the whole window's time is at least the figure returned; the result's
# ``counters["stopped"]`` (True; absent after a full run) says so, and its other figures
# (stall, bytes, faults) are those of the part that ran. The reference loop runs to the
# end (a full run is a valid answer).


def _run_figures(prep, hw, B, plan: Plan, pool: bool, zero_fill: bool,
                 stop_above_s: float = float("inf")) -> SimResult:
    """A Plan's run with its window's figures only (Note [Figures only]): timeline,
    transfers and actions are None; stopped early once above ``stop_above_s`` where the
    compiled loop runs (Note [A run stopped once it is slower])."""
    sched = PlanSchedule(plan, prep)
    if _fast.available():
        books = _fast.run(prep, hw, B, sched, pool, zero_fill, False, DISCARD_MIN_BYTES,
                          figures_only=True, stop_above_s=stop_above_s)
    else:
        books = _run_reference(prep, hw, B, sched, pool, zero_fill)
        books.update(timeline=None, transfers=None)
    result = _window_result(prep, hw, B, "plan", pool, books, frames=False)
    if books.get("stopped"):  # (only then: a full run's figures are simulate's own)
        result.counters["stopped"] = True
    return result


def _run_reference(prep, hw, B, sched: Schedule, pool: bool, zero_fill: bool,
                   to_end: bool = False) -> dict:
    """The plain-Python loop over ``Engine`` (the definition the compiled one follows):
    the window's books (``_window_result``) and the actions carried out."""
    eng = Engine(prep, hw, B, pool=pool, zero_fill_faults=zero_fill)
    ws, we = prep.window
    rows: list = []
    t_start = 0.0
    div0 = 0
    ev_ptr, ev_kind, ev_block, dur = prep.ev_ptr, prep.ev_kind, prep.ev_block, prep.dur_s
    bchunk0 = prep.bchunk0
    starts = set(int(x) for x in prep.iter_starts)
    sf = se = sl = sh = 0.0
    # the plan actions carried out (what reached eng.act), over the whole run
    log: list | None = [] if sched.plan_events else None
    books = None

    def issue(t: int, stage: str) -> None:
        """Act on the schedule's actions due at this stage of tick ``t`` (and log them).
        Note [Host calls]: the host makes them one after another, ``hw.action_call_s``
        each, on its own clock ``eng.host``; an action takes effect when both the GPU has
        reached it and the host has made its call."""
        for a in sched.at(t, stage):
            code, b, lo, hi = a[:4]
            if _executes(code, b, eng.alive[bchunk0[b]], sched, prep):
                eng.host += hw.action_call_s
                eng.act(code, b, lo, hi, max(eng.now, eng.host), eng.pinned)
                if log is not None:
                    log.append((t, stage, code, b, a[4]))

    def window_books() -> dict:
        return {"T": eng.now - t_start, "sf": sf, "se": se, "sl": sl, "sh": sh,
                "claimed_end": eng.claimed, "pending_end": sum(b for _, b in eng.pending),
                "resident_end": int(eng.rb.sum()), "bytes_h2d": eng.bytes_h2d,
                "bytes_d2h": eng.bytes_d2h, "faults": eng.faults, "peak": eng.peak,
                "led": dict(eng.led), "divergences": sched.divergences - div0,
                "timeline": rows or None,
                "transfers": [(s0 - t_start, e0 - t_start, d, b, blk, c)
                              for s0, e0, d, b, blk, c in eng.transfers] or None}

    for t in range(prep.n_ticks if to_end else we):
        if t == we:
            # the window is over: its figures are final; the ticks after it (an incomplete
            # last iteration) run only so that ``actions`` covers the whole trace
            books = window_books()
            eng.recording = False
        if t == ws:
            eng.recording = True
            t_start = eng.now
            div0 = sched.divergences
            eng._retire(eng.now)
            eng.peak = eng.claimed
        if t == 0 or t in starts:
            eng.host = max(eng.host, eng.now)  # Note [Host calls]: the loop's sync
        tick_start = eng.now
        eng.tick_h2d = eng.tick_d2h = 0
        s, e = ev_ptr[t], ev_ptr[t + 1]
        if e > s:
            k = ev_kind[s:e]
            eng.alloc(ev_block[s:e][k == 0])
        issue(t, "pre")
        h = max(0.0, eng.host - eng.now)  # Note [Host calls]: launched after the calls
        eng.now += h
        f, v, l = eng.kernel(t)
        eng.now += dur[t]
        if e > s:
            eng.free(ev_block[s:e][k == 1])
        issue(t, "post")
        eng._retire(eng.now)
        if eng.recording:
            sf += f
            se += v
            sl += l
            sh += h
            rows.append((t, tick_start - t_start, float(dur[t]), f + v + l + h, f, v, l, h,
                         eng.claimed, eng.tick_h2d, eng.tick_d2h))
    if books is None:
        books = window_books()
    books["actions"] = log or []
    return books


def _window_result(prep, hw, B, name, pool, books: dict, frames: bool = True) -> SimResult:
    """The SimResult of the measured window, from the books kept at its end (``frames``
    False: timeline and transfers are None, Note [Figures only])."""
    ws, we = prep.window
    compute = float(prep.dur_s[ws:we].sum())
    T = books["T"]
    tl, tr = _frames(books["timeline"], books["transfers"]) if frames else (None, None)
    counters = {"window_start": ws, "window_stop": we, "claimed_end": books["claimed_end"],
                "pending_end": books["pending_end"], "resident_end": books["resident_end"],
                "pool": pool, **{f"ledger_{k}": v for k, v in books["led"].items()}}
    return SimResult(name, hw.name, B, float(T), compute, float(T - compute),
                     _breakdown(books["sf"], books["se"], books["sl"], books["sh"]),
                     int(books["bytes_h2d"]), int(books["bytes_d2h"]),
                     books["faults"], books["peak"], books["divergences"], tl, tr, counters)


def compare(trace, hw: Any = "h200-pcie5", budgets: Iterable[Any] = ("100%", "75%", "50%", "30%"),
            policies: Iterable[Any] | None = None, **opts) -> pd.DataFrame:
    """One row per (budget, policy): ``budget_bytes, budget_pct`` (of the trace's peak),
    ``policy, iteration_time_s, slowdown`` (over ``ideal``), ``stall_time_s, bytes_h2d,
    bytes_d2h, faults``; ``compute_times`` as for ``simulate``. ``policies`` default to
    ``POLICIES`` (``uvm-sched`` left out with a warning when the planner is not installed). A budget below a tick's working set gives
    a row with NaN figures and the BudgetError text in ``error``."""
    import pandas as pd

    hw = load_profile(hw)
    ct = opts.pop("compute_times", None)
    if ct is not None:  # once: simulate's cache is keyed by the trace
        trace = trace.with_compute_times(ct)
    if policies is None:
        from .. import planner

        policies = [p for p in POLICIES if p != "uvm-sched" or hasattr(planner, "plan")]
        if "uvm-sched" not in policies:
            warnings.warn("uvm_sched.planner.plan is not available: compare() leaves out "
                          "'uvm-sched'", _errors.Warning, stacklevel=2)
    policies = list(policies)
    cache: dict = {}
    peak = trace.peak_bytes
    ideal = simulate(trace, "ideal", hw, None, _cache=cache, **opts)
    rows = []
    for bud in budgets:
        B = resolve_budget(bud, peak, default_bytes=hw.device_capacity_bytes)
        for pol in policies:
            label = pol if isinstance(pol, str) else "plan"
            row = {"budget_bytes": B, "budget_pct": 100.0 * B / peak if peak else float("nan"),
                   "policy": label}
            try:
                r = ideal if pol == "ideal" else simulate(trace, pol, hw, B, _cache=cache, **opts)
            except (BudgetError, ImportError) as e:
                # ImportError: the planner's own dependencies are missing; say so in the row
                row.update(iteration_time_s=float("nan"), slowdown=float("nan"),
                           stall_time_s=float("nan"), bytes_h2d=0, bytes_d2h=0, faults=0,
                           error=str(e))
                rows.append(row)
                continue
            row.update(iteration_time_s=r.iteration_time_s, slowdown=r.slowdown(ideal),
                       stall_time_s=r.stall_time_s, bytes_h2d=r.bytes_h2d,
                       bytes_d2h=r.bytes_d2h, faults=r.faults, error="")
            rows.append(row)
    return pd.DataFrame(rows)
