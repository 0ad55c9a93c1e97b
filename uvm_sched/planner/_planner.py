"""``plan(trace, budget, hw, mode)``: a budgeted eviction/prefetch/advice schedule.

The pattern's representative iteration becomes a ``Problem`` (``_problem``: sizes, lifetimes
and use ticks, Note [Use ticks] -- the only place the modes differ); ``_core.build_schedule``
chooses the evictions and prefetches (the algorithm as its steps, each explained by a named
note in ``_core``); ``_actions`` writes them as the executor's table with discards,
populates and advice (Note [Action table]); ``_choice.priced`` keeps the fastest of the plan,
its advice alone and no plan (``_pricing``).

A budget below the bytes the iteration certainly needs at one tick (the blocks allocated
then, plus in ``sampled`` mode the blocks touched then) raises ``PlanError`` naming the tick.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from .._budget import resolve_budget
from ._choice import ROLES, as_tables, priced
from ._core import Problem, Schedule
from ._instants import judged_on, planned_merged
from ._known_view import judged_view
from ._lp_guided import schedule
from ..trace._model import EventKind
from ..trace._snapshot import gc_paused
from ._plan import PLAN_VERSION, Plan, PlanError, trace_fingerprint
from ._populates import (discards_the_pool_needs, populates_of_resident_ranges,
                          populates_that_evict)
from ._reads import guessed_reads

__all__ = ["plan", "MODES", "resolve_mode", "tuning_candidates"]

# "auto" (the default) is one of the other two, chosen by resolve_mode
MODES = ("auto", "oblivious", "sampled")
# the options plan() takes (checked by plan() and, at construction, by the Scheduler)
PLAN_OPTIONS = frozenset({"pattern", "guard", "samples", "sample_rate", "noise", "seed",
                          "complete_touches", "discard", "discard_min_bytes", "rounds",
                          "populate", "remote_fallback", "price", "method", "lp_max_columns",
                          "lp_time_limit_s"})
AUTO_GUARDS = (32, 16, 8, 4, 2)  # ticks; see plan() and Note [Use ticks]
# The pool gives requests above 1 MiB whole 2 MiB pages of their own; smaller ones share
# slab pages with other blocks, so the executor cannot discard them (it skips such rows).
DISCARD_MIN_BYTES = (1 << 20) + 1
REMOTE_AUTO_EXCESS = 0.15  # share of the budget left over after eviction (remote_fallback="auto")


def plan(trace, budget, hw="h200-pcie5", mode: str = "auto", **opts: Any) -> Plan:
    """Plan evictions, prefetches and advice for ``trace`` under ``budget``.

    ``budget``: bytes, ``"50%"`` of the trace's peak, ``"40GiB"``... (``resolve_budget``).
    ``hw``: a profile name, path or ``HardwareProfile``. ``mode``: ``"auto"`` (default:
    sampled when ``samples`` are given or the trace carries accesses, else oblivious;
    ``resolve_mode``), ``"oblivious"`` or ``"sampled"``; ``meta["mode"]`` is the mode that
    ran, ``meta["mode_reason"]`` why. Options: ``pattern`` (precomputed ``pattern.analyze(trace)``),
    ``guard`` (ticks, or ``"auto"``: 32, 16, 8, 4 and 2 ticks, the widest preferred per gap),
    ``samples`` (a sample frame, sampled mode; rows with ``assumed`` True -- a fault-sampled
    block's unknown tail -- are planned for but not counted as certain uses by the budget
    check), ``sample_rate`` (default 1.0), ``noise`` (ticks, default 0), ``seed``,
    ``complete_touches`` (bool: trust idle stretches between observed touches; default True
    for given samples and for a draw at ``sample_rate=1``), ``discard``
    (default True), ``discard_min_bytes`` (default just above 1 MiB: smaller blocks share
    pages), ``populate`` (default True: prefetch each allocation of the iteration as it is
    made, ``_populates``), ``remote_fallback`` (True/False/``"auto"``,
    default ``"auto"``: when eviction leaves more than 15% of the budget over it, map
    persistent blocks with unknown uses host-resident where that is cheaper than the
    excess), ``rounds`` (6), ``price`` (default True: the fastest of the plan, its advice
    alone and no plan is returned, ``_pricing``; Note [The oblivious plan as a candidate]),
    ``method`` (``"greedy"``, default, or ``"lp"``: offline, sampled mode only, the LP
    bound's optimum seeds the selection and the greedy plan is priced beside it; options
    ``lp_max_columns``, ``lp_time_limit_s`` (s); ``meta["lp"]``; ``_lp_guided``).
    Ticks of no device time (a snapshot's) are merged into the tick after them unless
    ``samples`` are given: ``meta["ticks_merged"]``, ``_instants.planned_merged``.
    Returns a ``Plan`` whose ``meta["predicted"]`` holds the planner's own estimate
    (seconds, bytes), ``meta["pricing"]`` the candidates' iteration times (s; ``at_least``:
    lower bounds) and the choice, and, when the full plan lost, ``meta["fallback"]`` why.
    """
    from ..hw import load_profile

    t0 = time.perf_counter()
    requested, judge = mode, opts.pop("_judged_on", None)  # Note [Ticks of no device time]
    mode, mode_reason = resolve_mode(trace, mode, opts.get("samples"))
    if unknown := sorted(set(opts) - PLAN_OPTIONS):
        raise TypeError(f"plan() got unknown option(s) {unknown}; known: {sorted(PLAN_OPTIONS)}")
    prof = load_profile(hw)
    if (out := planned_merged(trace, budget, prof, requested, opts)) is not None:
        return out  # Note [Ticks of no device time]
    pat = opts["pattern"] if opts.get("pattern") is not None else _analyzed(trace)
    budget_bytes = resolve_budget(budget, trace.peak_bytes, default_bytes=prof.device_capacity_bytes)
    guards = _guards(opts.get("guard", "auto"))
    samples, complete, touch_guard = _samples(trace, pat, mode, opts)
    rf = _remote_fallback_option(opts)
    from ._sampling import assumed_ticks

    assumed = assumed_ticks(opts.get("samples")) if mode == "sampled" else {}
    prob, info = _problem(pat, prof, samples, rf is not False, complete, assumed, budget=budget_bytes)
    prob.touch_guard_min = touch_guard
    discard, discard_min = bool(opts.get("discard", True)), int(opts.get("discard_min_bytes",
                                                                          DISCARD_MIN_BYTES))
    # a dead range is evicted only where the plan discards it at its FREE: else its dead
    # bytes are written back, and migrated back in when the pool hands the range out again
    # (a populate, or the next block's first touch)
    prob.dead_tail &= discard & (prob.size >= discard_min)
    # auto, oblivious: only when eviction leaves a large excess (the persistent state
    # dominates, as in fine-tuning with Adam): there remote reads beat the driver's eviction
    # and fault-back; a remote block's price is a guess (``_reads``), so a small excess is
    # left alone. Sampled: the touches are counted, the price is known, any excess counts.
    prob.remote_min_excess = int(REMOTE_AUTO_EXCESS * budget_bytes) \
        if rf == "auto" and mode == "oblivious" else 0
    _check_feasible(prob, info, budget_bytes)
    # an object per candidate gap, hundreds of thousands on an LLM: no GC pass walks them
    with gc_paused():
        sched, greedy, lp_meta = schedule(trace, pat, prob, budget_bytes, prof, guards, mode, opts)
    act_opts = (prof, discard, discard_min, bool(opts.get("populate", True)))
    actions, roles = _actions(prob, info, sched, *act_opts)
    _sizes_at_run_time(pat, info, actions)
    pred = dict(sched.predicted)
    pred.update(_coarse_cost(prob))
    pred["plan_time_s"] = time.perf_counter() - t0
    meta = {
        "version": PLAN_VERSION,
        "budget_bytes": int(budget_bytes),
        "hw": prof.name,
        "mode": mode,
        "mode_requested": requested,
        "mode_reason": mode_reason,
        "period_events": int(prob.E),
        "alloc_sizes": [int(s) for s in info["alloc_sizes"]],
        # the planned iteration's sizes where alloc_sizes says 0 (what summary() counts)
        **({"planned_alloc_sizes": [int(s) for s in info["planned_alloc_sizes"]]}
           if "planned_alloc_sizes" in info else {}),
        "sync": "marker" if getattr(pat, "source", "learned") == "markers" else "period",
        # period sync counts iterations on this grid: the allocator event (from the trace's
        # start) where the learned iteration begins, so a warm-up that does not fill whole
        # periods does not shift every iteration
        "period_start_event": int(np.searchsorted(
            trace.tick[trace.kind <= EventKind.FREE], pat.start_tick)),
        "peak_bytes": int(trace.peak_bytes),
        "iteration_peak_bytes": int(info["iteration_peak"]),
        "guard": list(guards),
        "source": trace.meta.get("name") or trace.meta.get("source"),
        # "unknown": the trace has no clock, every tick was taken as 1 us (order only)
        "tick_time_source": getattr(pat, "tick_ns_source", "unknown"),
        "trace_fingerprint": trace_fingerprint(trace),
        # what that time is: a GPU trace, a roofline, or a CPU's wall clock (not a GPU's)
        "time_source": trace.time_source,
        "predicted": pred,
        **({"lp": lp_meta} if lp_meta is not None else {}),
    }
    if mode == "sampled":
        meta["samples"] = _samples_meta(samples, opts)
    out = Plan(actions, meta)
    if opts.get("price", True):
        extra, roles_of = _candidates(pat, prob, info, sched, greedy, act_opts, roles)
        if opts.get("price") is _AS_CANDIDATES:  # _oblivious_actions: the tables, unpriced
            return as_tables(mode, out, extra, roles_of)
        del prob, info, sched, greedy, samples  # not needed to price it (peak memory)
        judged, starts = judged_on(trace, pat, judge)
        view, accesses = judged_view(judged, pat, mode, opts.get("samples"))
        # given samples do not make the trace's accesses known: no oblivious candidate; the
        # oblivious plans are made on the ticks this one was (Note [Ticks of no device time])
        source = None if opts.get("samples") is not None else (
            trace, pat, opts if judge is None else {**opts, "_judged_on": judge})
        out = priced(view, out, extra, roles_of, budget_bytes, prof, accesses, starts,
                     mode == "oblivious", source)
    pred["plan_time_s"] = time.perf_counter() - t0
    return out


def _analyzed(trace):
    """``pattern.analyze(trace)``, imported where it is first needed."""
    from ..pattern import analyze

    return analyze(trace)


def _remote_fallback_option(opts: dict):
    """The ``remote_fallback`` option (True, False or ``"auto"``, the default), checked."""
    rf = opts.get("remote_fallback", "auto")
    if rf not in (True, False, "auto"):
        raise ValueError(f"remote_fallback must be True, False or 'auto', got {rf!r}")
    return rf


def _samples_meta(samples, opts: dict) -> dict:
    """``meta["samples"]``: how many blocks were sampled (``samples``: the merged samples
    of sampled mode), and the draw's rate and noise (None where the samples were given)."""
    assert samples is not None  # sampled mode merged them
    drawn = opts.get("samples") is None
    return {"blocks": len(samples), "sample_rate": opts.get("sample_rate", 1.0) if drawn else None,
            "noise": opts.get("noise", 0.0) if drawn else None}


def resolve_mode(trace, mode: str = "auto", samples=None) -> tuple[str, str]:
    """The mode ``plan`` runs for ``mode`` on ``trace``, and why: ``(mode, reason)``.
    ``"auto"`` is sampled where touches can be had -- ``samples`` given, or a trace that
    carries accesses (a recorder or Execution Trace, a kernel workload) -- and oblivious
    otherwise, since sampled mode has nothing to read there. Raises ``PlanError`` for an
    unknown mode."""
    if mode not in MODES:
        raise PlanError(f"unknown planning mode {mode!r}; known: {', '.join(MODES)}")
    if mode != "auto":
        return mode, f"{mode}, as requested"
    if samples is not None:
        return "sampled", "auto: sampled, access samples were given"
    if trace.has_accesses:
        return "sampled", "auto: sampled, the trace carries accesses"
    return "oblivious", ("auto: oblivious, no access source: the trace holds allocator "
                         "events only and no samples were given")


def _candidates(pat, prob: Problem, info: dict, sched, greedy, act_opts,
                roles: np.ndarray) -> tuple[dict, dict]:
    """The actions priced beside the plan, in order of preference: the greedy plan (beside
    an LP-guided one), the plan's advice alone; on the run-time sizes as the plan. And,
    per label, each row's role (``_actions``; ``roles``: the plan's own)."""
    # the advice alone is the plan without its moves: the same populates left out
    # (_populates), not those its own excess would leave out
    advice = Schedule([], [], sched.remote, {})
    made = {k: _actions(prob, info, s, *act_opts, left_out=lo) for k, s, lo in
            (("greedy", greedy, None), ("advice-only", advice, populates_that_evict(prob, sched)))
            if s is not None}
    for a, _ in made.values():
        _sizes_at_run_time(pat, info, a)
    roles_of = {"plan": roles, **{k: r for k, (_, r) in made.items()}}
    return {k: a for k, (a, _) in made.items()}, roles_of


_AS_CANDIDATES = object()  # plan(price=...) from _choice._oblivious_actions: the tables


def _guards(guard) -> tuple[int, ...]:
    """The guard levels (ticks, widest first) for the ``guard`` option."""
    if guard == "auto":
        return AUTO_GUARDS
    if int(guard) < 0:
        raise ValueError(f"guard must be >= 0 ticks or 'auto', got {guard!r}")
    return (int(guard),)


def _samples(trace, pat, mode: str, opts: dict) -> tuple[dict | None, bool, int]:
    """The merged access samples (None in oblivious mode), whether their touches are
    complete (idle stretches between them trusted) and the narrowest guard around a
    touch (ticks), from the sampling options."""
    complete = bool(opts.get("complete_touches", True))
    if mode != "sampled":
        if opts.get("samples") is not None:
            raise PlanError("samples= is for mode='sampled'; oblivious mode uses allocations "
                            "only")
        return None, complete, 0
    from ._sampling import draw_samples, merge_samples

    touch_guard = 0
    raw = opts.get("samples")
    if raw is None:
        rate, noise = float(opts.get("sample_rate", 1.0)), float(opts.get("noise", 0.0))
        raw = draw_samples(trace, pat, sample_rate=rate, noise=noise,
                           seed=int(opts.get("seed", 0)))
        # a sparse draw misses touches: an idle stretch between two observed touches
        # of a weight may hide a read (measured: 30% samples made plans slower than
        # demand paging); noisy ticks need a guard of two standard deviations
        complete = bool(opts.get("complete_touches", rate >= 1.0))
        touch_guard = int(np.ceil(2 * noise))
    return merge_samples(raw), complete, touch_guard


_SAMPLE_OPTS = ("samples", "sample_rate", "noise", "seed", "complete_touches")


def tuning_candidates(tune, mode: str, opts: dict) -> list[tuple[str, str, dict]]:
    """The plans a tuning run compares, as ``(label, mode, plan options)``: the configured
    one first (labelled by its guard), then one per entry of ``tune`` -- a guard (ticks
    >= 0 or ``"auto"``), or ``"oblivious"`` (in sampled or auto mode: the same plan without
    the samples, so that measuring keeps sampled mode from ever losing to it). Duplicates are
    dropped. Raises ``ValueError`` naming a bad candidate."""
    out = {str(opts.get("guard", "auto")): (mode, dict(opts))}
    for c in tune:
        if c == "oblivious":
            if mode not in ("sampled", "auto"):
                raise ValueError("tuning candidate 'oblivious' is for mode='sampled' or 'auto' "
                                 "(it is the same plan without the samples)")
            out.setdefault("oblivious", ("oblivious", {k: v for k, v in opts.items()
                                                       if k not in _SAMPLE_OPTS}))
        elif c == "auto" or (isinstance(c, int) and not isinstance(c, bool) and c >= 0):
            out.setdefault(str(c), (mode, {**opts, "guard": c}))
        else:
            raise ValueError(f"tuning candidates are guards (ticks >= 0 or 'auto') or "
                             f"'oblivious', got {c!r}")
    return [(label, m, o) for label, (m, o) in out.items()]


# -- pattern -> problem -----------------------------------------------------------------

# Note [Use ticks]
# ----------------
# What each mode takes as a block's uses (``Problem.uses``, ``end_lo``/``end_hi``, ``wrap``,
# ``busy_span``, ``dead_tail``), the only difference between the modes.
#
# * ``oblivious`` (allocations and frees only; ground-truth ACCESS rows are never read): a
#   block of the iteration is used at its ALLOC tick and at its FREE tick, each widened by a
#   *guard* of ticks inwards (the ops after an allocation read it -- a residual connection a
#   dozen ops later --, the ops before a free are its last readers). With ``guard="auto"``
#   each gap is a candidate at guards of 32, 16, 8, 4 and 2 ticks: the widest (safest) is
#   preferred, a narrower one replaces it only at ticks the budget cannot meet otherwise.
#   (32: in CNNs with long skip/concat chains -- Inception, SENet -- an activation is read
#   20-30 ops after its allocation; a 16-tick guard evicts it before that read and the
#   driver faults it back. Only blocks living at least 6 such guards get it: on shorter
#   ones it merely shrinks the window. Measured with ``benchmarks/bench_planner.py``
#   against 16, 8, 4, 2: Inception and SENet 1.3-2x faster, the geometric mean over 54
#   rows ~9% faster, BERT and GPT-2 at 75% on PCIe ~1.2x slower.)
#   Persistent blocks (weights, optimizer state) have unknown uses: they stay resident
#   (``remote_fallback``: when the budget cannot be met otherwise, the largest are mapped
#   host-resident with ``advise_preferred_host`` + ``advise_accessed_by``, where that is
#   cheaper than the excess; ``"auto"``, the default, does so only when eviction leaves
#   more than 15% of the budget over it -- weights are read several times per iteration
#   and remote reads share the link with the prefetches, so a small excess is better left
#   alone). A block crossing the iteration boundary counts as used at the iteration's last
#   tick (the plan cannot name the previous iteration's blocks).
# * ``sampled``: access samples per block (drawn from ground truth with
#   ``sample_rate``/``noise``, or given as ``samples=``; see ``_sampling`` for the two frame
#   forms). With *complete* touches (one row per touch, drawn at ``sample_rate=1`` or
#   given; ``complete_touches=``) every touch tick is a use: a block is idle between two
#   consecutive touches -- an activation between its forward write, a mid-lifetime read (a
#   U-Net skip connection read by the decoder) and its backward read; a weight between its
#   forward and backward reads; the optimizer state from one step to the next -- and each
#   such gap is a candidate at the guard levels no wider than a sixth of it (the touch is
#   seen, the guard only absorbs timing slack; ``noise`` sets the narrowest, two standard
#   deviations). With sparse samples or the summary form only the first and last touch
#   are trusted: a block of the iteration is used at both (widened by ``guard``) and a
#   persistent block is busy in between (a sparse draw misses reads: measured, 30% samples
#   with idle stretches between observed touches gave plans slower than demand paging).
#   Either way a block's data is dead after its last touch (evicted without coming back
#   where the FREE discards it -- a block of its own pages; a smaller one stays: its dead
#   bytes would be written back and migrated in again when the pool recycles the range),
#   blocks only read and not evicted by the plan get ``advise_read_mostly`` (a driver
#   eviction drops their duplicate; a planned one would free nothing: Note [Read-mostly
#   prefetch to the host], ``sim._mechanisms``), and large blocks touched lightly (partial touches,
#   cheaper read remotely than migrated) are mapped host-resident. Persistent blocks stay
#   candidates for the remote fallback, priced by their touches
#   (``touches x bytes / remote_access_Bps``) and, the price being known, at any excess
#   (``"auto"`` waits for 15% only in oblivious mode). Blocks without samples fall back to
#   the oblivious rule.

def _tick_durations(pat) -> np.ndarray:
    d = np.asarray(pat.tick_ns, np.float64).copy()
    bad = ~np.isfinite(d) | (d < 0)
    if bad.all():
        d[:] = 1000.0  # nothing known: every tick alike (1 us); only the order then matters
    elif bad.any():
        d[bad] = float(np.median(d[~bad]))
    return d


def _sizes_at_run_time(pat, info: dict, actions) -> None:
    """Name the allocations per-batch shapes resize by position alone (issue 22): their
    ``alloc_sizes`` entry becomes 0 (the executor checks no size there) and a whole-block
    action on one covers ``bytes`` 0 (the whole block at its run-time size), so a plan
    learned from some sequence lengths runs on others. Why this and not a plan per shape:
    the shapes are unbounded (every batch pads to its own length), the structure is one."""
    varies = np.asarray(getattr(pat, "alloc_varies", ()), bool)
    sizes = info.get("planned_alloc_sizes", info["alloc_sizes"])  # (once per candidate)
    if not varies.any() or len(varies) != len(sizes):
        return
    info["planned_alloc_sizes"] = sizes
    info["alloc_sizes"] = np.where(varies, 0, sizes)
    if len(actions):
        blk = actions["block"].to_numpy(np.int64)
        local = ~actions["persistent"].to_numpy(bool) & (blk < len(varies))
        whole = local & (actions["offset"].to_numpy(np.int64) == 0)
        whole[whole] &= varies[blk[whole]] & (actions["bytes"].to_numpy(np.int64)[whole]
                                              == np.asarray(sizes)[blk[whole]])
        actions.loc[whole, "bytes"] = 0


def _problem(pat, prof, samples: dict | None, remote_fallback: bool = False,
             complete: bool = True, assumed: dict | None = None, *, budget: int):
    """The builder's ``Problem`` for the representative iteration of ``pat`` (use ticks per
    Note [Use ticks]) and what ``plan`` needs beside it (ordinals, ALLOC sizes, the
    (tick, block) pairs the budget must hold); ``budget`` (bytes) prices the guessed reads
    of persistent blocks (``_reads``)."""
    ev = pat.events
    T = int(pat.stop_tick - pat.start_tick)
    dur = _tick_durations(pat)
    if len(dur) < T:
        dur = np.concatenate([dur, np.full(T - len(dur), np.median(dur) if len(dur) else 1000.0)])
    dur = dur[:T]
    ev_tick = ev["tick"].to_numpy(np.int64)
    ev_free = (ev["kind"].astype(str) == "free").to_numpy()
    alloc_sizes = ev.loc[~ev_free, "size"].to_numpy(np.int64)
    if len(ev_tick) == 0:
        raise PlanError("the learned iteration has no allocator events: nothing to plan")
    # Only the oblivious columns are read here; ground truth enters through `samples` only.
    b = pat.blocks[["ordinal", "persistent", "size", "alloc_tick", "free_tick",
                    "alloc_event", "free_event"]]
    n = len(b)
    size = b["size"].to_numpy(np.int64)
    pers = b["persistent"].to_numpy(bool)
    at = b["alloc_tick"].to_numpy(np.int64)
    ft = b["free_tick"].to_numpy(np.int64)
    ae = b["alloc_event"].to_numpy(np.int64)
    fe = b["free_event"].to_numpy(np.int64)
    ordinal = b["ordinal"].to_numpy(np.int64)
    live_from = np.where(at >= 0, at, 0)
    live_to = np.where(ft >= 0, ft, T - 1)
    wrap = pers & (ft < 0)
    uses: list = [None] * n
    dead_tail = np.zeros(n, bool)
    read_only = np.zeros(n, bool)
    remote_ok = np.zeros(n, bool)
    remote_cost = np.zeros(n)
    touch_count = np.zeros(n, np.int64)  # 0: unknown
    busy = np.zeros(n, bool)
    end_lo = np.full(n, -1, np.int64)  # used at [end_lo, end_lo+guard] and [end_hi-guard, end_hi]
    end_hi = np.full(n, -1, np.int64)
    # (tick, block) pairs the block certainly needs (feasibility check)
    certain: list[tuple[int, int]] = []
    # the loop reads Python lists (the same values as int()/bool() of each element, without
    # a numpy scalar per field: one pass over every block)
    lf_l, lt_l, pers_l, ord_l, ae_l = (a.tolist() for a in (live_from, live_to, pers,
                                                             ordinal, ae))
    guessed, faults = guessed_reads(size, pers, ae, budget)
    for i in range(n):
        lf, lt = lf_l[i], lt_l[i]
        s = samples.get((pers_l[i], ord_l[i])) if samples is not None else None
        if s is not None:
            first = min(max(s[0], lf), lt)
            last = min(max(s[1], first), lt)
            read_only[i] = s[2]
            # touch-form samples: every observed touch is a use (reads in mid-lifetime)
            touched = s[4]  # sorted, unique (merge_samples)
            if touched is not None and (touched[0] < lf or touched[-1] > lt):
                touched = np.unique(np.clip(touched, lf, lt))
            if touched is not None and not complete:
                touched = None  # only the two ends are trusted (summary semantics)
            # where the block must be resident (a persistent one that may be read in place,
            # mapped host-resident by the fallback, need not be)
            if not (pers[i] and remote_fallback):  # (ticks only assumed are not certain)
                sure = touched if touched is not None else {first, last}
                guess = (assumed or {}).get((bool(pers[i]), int(ordinal[i])))
                if guess is not None and touched is not None:
                    sure = np.setdiff1d(touched, np.clip(guess, lf, lt))
                certain.extend((int(x), i) for x in sure)
            tb = s[3] if s[3] >= 0 else int(size[i])
            touches = len(touched) if touched is not None else (1 if first == last else 2)
            if size[i] >= prof.va_block_bytes and tb < size[i]:
                rc = touches * tb / prof.remote_access_Bps * 1e9
                if rc < size[i] / prof.h2d_prefetch_Bps * 1e9:
                    remote_ok[i], remote_cost[i] = True, rc
            if pers[i] and remote_fallback and not remote_ok[i]:
                # the last resort of the oblivious mode, priced with the touches seen
                remote_ok[i] = True
                remote_cost[i] = touches * min(tb, int(size[i])) / prof.remote_access_Bps * 1e9
                touch_count[i] = touches
            dead_tail[i] = (not pers[i]) and ft[i] >= 0 and last < lt
            if touched is not None:
                uses[i] = touched  # idle between consecutive touches
                continue
            if pers[i]:
                # busy from first to last touch (weights are read many times in between)
                uses[i] = np.array(sorted({first, last}), np.int64)
                busy[i] = True
                continue
            end_lo[i], end_hi[i] = first, last
            continue
        if pers_l[i]:
            remote_ok[i] = remote_fallback
            # priced by its guessed reads (_reads: autograd allocates a gradient per use)
            remote_cost[i] = guessed[i] * size[i] / prof.remote_access_Bps * 1e9
            touch_count[i] = faults[i]
            continue
        if ae_l[i] < 0:
            continue  # allocated in an earlier iteration: not nameable, stays resident
        certain.append((lf, i))
        end_lo[i], end_hi[i] = lf, lt
    prob = Problem(
        dur_ns=dur, ev_tick=ev_tick, ev_free=ev_free, size=size, persistent=pers,
        live_from=live_from, live_to=live_to, alloc_event=ae, free_event=fe, uses=uses,
        wrap=wrap, busy_span=busy, end_lo=end_lo, end_hi=end_hi, dead_tail=dead_tail, read_only=read_only, remote_ok=remote_ok,
        remote_cost_ns=remote_cost, touch_count=touch_count, h2d_Bps=prof.h2d_prefetch_Bps, d2h_Bps=prof.d2h_prefetch_Bps,
        duplex_Bps=prof.duplex_Bps,
        overflow_ns_per_byte=1e9 / prof.d2h_evict_Bps + 1e9 / prof.h2d_fault_Bps,
        action_call_ns=prof.action_call_s * 1e9,
    )
    live = np.zeros(T + 1, np.int64)
    np.add.at(live, live_from, size)
    np.add.at(live, live_to + 1, -size)
    info = {"ordinal": ordinal, "alloc_sizes": alloc_sizes, "certain": certain,
            "iteration_peak": int(np.cumsum(live)[:T].max()) if T else 0,
            "sizes_vary": bool(np.asarray(getattr(pat, "alloc_varies", ()), bool).any())}
    return prob, info


def _check_feasible(prob: Problem, info: dict, budget: int) -> None:
    if not info["certain"]:
        return
    t = np.fromiter((c[0] for c in info["certain"]), np.int64, len(info["certain"]))
    i = np.fromiter((c[1] for c in info["certain"]), np.int64, len(info["certain"]))
    need = np.bincount(t, weights=prob.size[i], minlength=prob.T)
    worst = int(np.argmax(need))
    if need[worst] > budget:
        raise PlanError(
            f"budget {budget:,} bytes cannot be met: tick {worst} of the iteration needs "
            f"{int(need[worst]):,} bytes resident at once (blocks allocated or touched there); "
            f"give a budget of at least {int(need[worst]):,} bytes"
        )


# Note [Action table]
# -------------------
# The schedule's evictions and prefetches (``_core``, Note [Issue points]) plus: a
# ``discard`` at the FREE event of every freed block of the iteration of at least
# ``discard_min_bytes`` (dead data is never written back, and the pool's freed ranges stop
# counting against the budget); a populating ``prefetch_to_device`` at every ALLOC event of
# the iteration (fresh pages are populated without faults); the remote blocks' advice and
# ``advise_read_mostly`` for blocks only read. The table's order is the executor's: at one
# allocator event what releases memory goes before what claims it (``_RANK`` below).
#
# Order of the actions issued at one allocator event (the table is sorted by event, stably
# by this rank): whatever releases device memory first -- discards of freed blocks, then
# evictions -- so that the populates and prefetches claiming memory at the same event find
# the room the plan counted on (the budget counts an eviction as gone from its issue; a
# claim made before it would push the driver into evicting something else). A block
# populated and evicted at the same event is populated first.
_RANK = {"discard": 0, "prefetch_to_host": 1, "advise_preferred_host": 1,
         "advise_accessed_by": 1, "populate": 2, "evict_after_populate": 3,
         "prefetch_to_device": 4, "advise_read_mostly": 5}


def _actions(prob: Problem, info: dict, sched, prof, discard: bool, discard_min: int,
             populate: bool, *, left_out: np.ndarray | None = None):
    """``(table, roles)``: the plan's action table (Note [Action table]) and, per row, its
    role (``_choice.ROLES``): a populate the pool serves from resident freed ranges (Note
    [Populates that move nothing]), a move (an eviction, or a prefetch bringing a block
    back: Note [Moves the views doubt]), else 0; ``_choice.priced`` judges those rows."""
    import pandas as pd

    E = prob.E
    ordinal, pers, size = info["ordinal"], prob.persistent, prob.size
    # (ticks, action, blocks, rank, role: ROLES)
    parts: list[tuple[np.ndarray, str, np.ndarray, int, np.ndarray]] = []

    def put(ticks, action, idx, rank=None, role=None):
        idx = np.asarray(idx, np.int64)
        if len(idx):
            parts.append((np.asarray(ticks, np.int64) % E, action, idx,
                          _RANK[action] if rank is None else rank,
                          np.broadcast_to(np.asarray(0 if role is None else role, np.int8),
                                          len(idx))))

    remote = np.asarray(sched.remote, np.int64)
    own_tick = np.where(pers | (prob.alloc_event < 0), 0, prob.alloc_event)
    populated_at = np.full(len(size), -1, np.int64)
    # Note [Populates that evict], Note [Discards the pool needs] (``_populates``)
    # ``left_out``: given for the plan's advice alone (``_candidates``), else the schedule's
    if not populate:
        left_out = np.zeros(len(size), bool)
    elif left_out is None:
        left_out = populates_that_evict(prob, sched)
    evicted = np.zeros(len(size), bool)
    evicted[[i for _, i, _ in sched.evictions]] = True
    disc = np.zeros(len(size), bool)
    if discard:
        disc = (~pers) & (prob.alloc_event >= 0) & (prob.free_event >= 0) & (size >= discard_min)
        disc &= ~discards_the_pool_needs(prob, left_out, disc, evicted)
    if populate:
        # Fresh memory is populated on the device by a prefetch (no fault, no link
        # traffic); without it the first touch faults once per VA block.
        m = (~pers) & (prob.alloc_event >= 0)
        m[remote] = False
        m &= ~left_out
        idx = np.flatnonzero(m)
        populated_at[idx] = prob.alloc_event[idx] % E
        # Note [Populates that move nothing]: flagged, left out where pricing says so
        idle = np.zeros(len(idx), bool) if info["sizes_vary"] else \
            populates_of_resident_ranges(prob, disc, evicted)[idx]
        put(prob.alloc_event[idx], "prefetch_to_device", idx, _RANK["populate"],
            idle * ROLES["idle populate"])
    if sched.evictions:
        ev = np.array([(k, i) for k, i, _ in sched.evictions], np.int64)
        same = populated_at[ev[:, 1]] == ev[:, 0] % E
        put(ev[~same, 0], "prefetch_to_host", ev[~same, 1], role=ROLES["move"])
        put(ev[same, 0], "prefetch_to_host", ev[same, 1], _RANK["evict_after_populate"],
            ROLES["move"])
    if sched.prefetches:
        pf = np.array([(k, i) for k, i, _ in sched.prefetches], np.int64)
        put(pf[:, 0], "prefetch_to_device", pf[:, 1], role=ROLES["move"])
    for a in ("advise_preferred_host", "advise_accessed_by", "prefetch_to_host"):
        put(own_tick[remote], a, remote, _RANK["advise_preferred_host"])
    ro = prob.read_only.copy()
    ro[remote] = False
    # a planned eviction of a read-mostly block frees nothing (Note [Read-mostly prefetch
    # to the host], sim._mechanisms): a block the plan evicts is left migratable
    ro &= ~evicted
    # a block of the iteration allocated before it (a carried activation) has no ordinal
    # the executor can resolve: naming it would point at a block of another iteration
    ro &= pers | (prob.alloc_event >= 0)
    idx = np.flatnonzero(ro)
    put(own_tick[idx], "advise_read_mostly", idx)
    if discard:
        idx = np.flatnonzero(disc)
        put(prob.free_event[idx], "discard", idx)
    if not parts:
        return pd.DataFrame(columns=["tick", "action", "block", "persistent", "offset",
                                     "bytes"]), np.zeros(0, np.int8)
    ticks = np.concatenate([p[0] for p in parts])
    idx = np.concatenate([p[2] for p in parts])
    names = np.concatenate([np.full(len(p[2]), p[1], dtype=object) for p in parts])
    rank = np.concatenate([np.full(len(p[2]), p[3], np.int64) for p in parts])
    roles = np.concatenate([p[4] for p in parts])
    order = np.lexsort((rank, ticks))  # by event, then rank; stable within a rank
    ticks, idx, names = ticks[order], idx[order], names[order]
    return pd.DataFrame({"tick": ticks, "action": names, "block": ordinal[idx],
                         "persistent": pers[idx], "offset": np.zeros(len(idx), np.int64),
                         "bytes": size[idx]}), roles[order]


def _coarse_cost(prob: Problem) -> dict:
    """How coarse the runtime's control points are: ticks without an allocator event, and
    the device time by which a control point precedes the tick it stands for (mean, max)."""
    T = prob.T
    has = np.zeros(T, bool)
    has[prob.ev_tick] = True
    C = np.concatenate([[0.0], np.cumsum(prob.dur_ns)])
    q = prob.ev_tick - 1 + prob.ev_free.astype(np.int64)
    tau = C[q + 1]
    # for each tick t: the latest control point issued no later than C[t]
    k = np.searchsorted(tau, C[:T], side="right") - 1
    lag = np.where(k >= 0, C[:T] - tau[np.maximum(k, 0)], C[:T])
    return {"coarse_control_ticks_without_event": int((~has).sum()),
            "coarse_control_mean_lead_s": float(lag.mean()) * 1e-9 if T else 0.0,
            "coarse_control_max_lead_s": float(lag.max()) * 1e-9 if T else 0.0}
