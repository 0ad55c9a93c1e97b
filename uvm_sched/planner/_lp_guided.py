"""The LP-guided offline planner (``plan(..., method="lp")``): the schedule builder seeded
with the gaps the LP bound's optimum moves out.

Note [LP-guided selection]
--------------------------
Rationale. The builder's selection is Belady-like: at each tick over budget it takes the
covering gap whose window reaches furthest. It sees one tick at a time; the LP of
``sim._lp`` (Note [The LP bound]) sees the whole iteration and one link at once, and its
optimum is a fractional schedule. Its residency says which blocks the fastest schedule
keeps off the device, and when.

Steps (``schedule``):

1. The program, for the pattern's representative iteration (the window of the plan), on
   the trace's accesses, with its primal (per block and slot boundary, the fraction
   resident: clean + dirty; dead data: no row, taken as 0). The unrestricted program, not
   the lossless one (Note [Lossless schedules]), though the plan keeps its data: seeded
   from the lossless optimum the priced plan was faster in 5 and slower in 9 of 62
   cases of ``bench_lp.py`` (``results/lp.md``, "Reading").
2. Rounding: a candidate gap of the builder (``_core``, Note [Candidate gaps]; each gap at
   its widest guard, the safest) is a *candidate seed* when the optimum holds at most
   ``LP_OFF`` of the block at some slot boundary inside the gap and the gap's window covers
   a tick over budget without a plan (the LP may move data where nothing is over budget:
   moving it costs nothing there, but a plan's copy is not free). A sweep over the ticks
   then takes, at each tick still over budget, the covering candidate the optimum keeps
   least resident (then the one reaching furthest) until the tick fits: those are the
   seeds. Taking every candidate instead moved more than needed: on five zoo cases at
   h200-pcie5 (U-Net, GPT-2 small, BERT, ViT-B/16 at 50%, ResNet-50 at 75%) it was
   never faster and up to 5.5 ms slower (U-Net: 143.0 against 137.5 ms).
3. Repair: the seeded gaps go through the builder's own timing pass (the two copy-engine
   queues; a gap the link cannot serve is dropped), then its Belady sweeps for the ticks
   still over budget, the remote fallback and the issue points (``build_schedule(seed=)``).
4. Pricing (``_choice.priced``): the LP-guided plan, the greedy plan, advice only and no
   plan, simulated; the fastest is kept, so the method is never slower than no plan, nor
   than the greedy plan under the judge.

Information: the LP reads every access of the iteration (bytes, reads, writes): what the
sampled planner reads when its samples are drawn from the trace at rate 1. Oblivious mode
has no accesses, and a given sample frame lacks the births and write ranges the program
needs, so both are refused with ``PlanError``.

Size: the program is coarsened in time to ``lp_max_columns`` (``sim._lp``); past HiGHS's
``lp_time_limit_s``, or too large even coarsened, the greedy plan is returned with the
reason in ``meta["lp"]["fallback"]``.

``LP_OFF`` = 0.5: the rounding threshold (a block counts as moved out when the optimum
keeps at most half of it). The optimum's residency is nearly integral on the zoo: 0.2 and
0.8 gave the same plans on the five cases above. ``benchmarks/bench_lp.py`` measures the
plans it gives.
"""
from __future__ import annotations

import heapq
import time

import numpy as np

from ._core import build_schedule, kept_build
from ._plan import PlanError
from ._queues import segments

__all__ = ["schedule", "METHODS", "LP_OFF"]

METHODS = ("greedy", "lp")
LP_OFF = 0.5


def schedule(trace, pat, prob, budget: int, prof, guards, mode: str, opts: dict):
    """The builder's schedule for ``opts["method"]`` (``"greedy"``, the default, or
    ``"lp"``: Note [LP-guided selection]). Returns ``(schedule, greedy, lp_meta)``:
    ``greedy`` is the greedy schedule to price beside an LP-guided one (else None),
    ``lp_meta`` what the LP did (None for the greedy method)."""
    method = opts.get("method", "greedy")
    rounds = int(opts.get("rounds", 6))
    if method not in METHODS:
        raise PlanError(f"unknown planning method {method!r}; known: {', '.join(METHODS)}")
    if method == "greedy":
        return build_schedule(prob, budget, guards=guards, rounds=rounds), None, None
    if mode != "sampled" or opts.get("samples") is not None or \
            float(opts.get("sample_rate", 1.0)) < 1 or float(opts.get("noise", 0.0)) > 0:
        raise PlanError(
            f"method='lp' plans from every access of the iteration (its bytes, reads and "
            f"writes): it needs mode='sampled' with the samples drawn from a trace that "
            f"carries accesses at sample_rate=1 and no noise (got mode={mode!r}"
            f"{', given samples' if opts.get('samples') is not None else ''}); use "
            f"method='greedy' otherwise")
    seen: dict = {}

    def watch(tl, gaps):
        seen.setdefault("greedy", []).append(gaps)
        return ()

    greedy = build_schedule(prob, budget, guards=guards, rounds=rounds, seed=watch)
    t0 = time.perf_counter()
    try:
        solved = _solve(trace, pat, prof, budget, opts)
    except (RuntimeError, ValueError) as e:  # LpOverBudget, LpTooLarge, a HiGHS stop
        return greedy, None, {"fallback": f"greedy: {e}", "lp_s": time.perf_counter() - t0}
    off = _offness(solved, pat, prob)
    res = solved[0]

    def seed(tl, gaps):
        seen.setdefault("lp", []).append(gaps)
        return _seeds_needed(tl, gaps, off)

    sched = build_schedule(prob, budget, guards=guards, rounds=rounds, seed=seed)
    meta = {"lp_s": time.perf_counter() - t0, "bound_s": res.time_s, "columns": res.columns,
            "ticks_per_slot": res.coarsen, "solve_s": res.solve_s, "threshold": LP_OFF,
            "bytes_in": float(res.bytes_in.sum()), "bytes_out": float(res.bytes_out.sum()),
            # the gaps of the builds kept (build_schedule may build twice)
            "teaches": _teaches(seen["lp"][kept_build(sched)],
                                seen["greedy"][kept_build(greedy)], prob)}
    return sched, greedy, meta


def _solve(trace, pat, prof, budget: int, opts: dict):
    """The LP of the plan's window with its primal (``sim._lp``, imported lazily: the
    planner calls the simulator only at run time), and the trace block id of each of the
    program's blocks."""
    from ..sim._lp import MAX_COLUMNS, lp_bound
    from ..sim._prep import prepare

    prep = prepare(trace, prof.va_block_bytes, prof.page_bytes,
                   window=(int(pat.start_tick), int(pat.stop_tick)))
    res = lp_bound(prep, prof, budget, primal=True,
                   max_columns=int(opts.get("lp_max_columns", MAX_COLUMNS)),
                   time_limit_s=float(opts.get("lp_time_limit_s", 120.0)))
    return res, prep.block_id


def _offness(solved, pat, prob):
    """Per problem block, the optimum's resident fraction at each slot boundary of the
    window (0 where the block's data is dead or it is not alive), and the boundaries'
    ticks unrolled over two iterations: ``(residency(blk) -> (S,) array, k, S)``."""
    res, block_id = solved
    k = int(res.coarsen)
    T = prob.T
    S = max(1, -(-T // k))
    dense = {int(b): j for j, b in enumerate(block_id.tolist())}
    runs: dict = {}
    for members, slots, vals in res.primal:
        for m in members.tolist():
            runs.setdefault(int(m), []).append((slots, vals))
    ids = pat.blocks.index.to_numpy()

    def residency(blk: int) -> np.ndarray:
        out = np.zeros(S)
        for slots, vals in runs.get(dense.get(int(ids[blk]), -1), ()):
            out[slots] = np.clip(vals, 0.0, 1.0)
        return out

    return residency, k, S


def _seeds(tl, gaps, off) -> list:
    """The candidates of step 2 of Note [LP-guided selection]: the gaps (widest guard) the
    optimum keeps the block off the device in (at most ``LP_OFF`` resident at a boundary
    inside the gap) whose window covers a tick over budget without a plan."""
    residency, k, S = off
    T, p = tl.T, tl.p
    over = np.concatenate([[0], np.cumsum(tl.base > tl.budget)])
    bt = np.concatenate([np.arange(0, T, k), np.arange(0, T, k) + T])
    cache: dict = {}
    out = []
    for g in gaps:
        if g.level or g.bad or g.chosen:
            continue
        if not any(over[e] > over[s] for s, e in segments(g.t_off, g.t_on, T)):
            continue
        u2 = g.u2 if g.u2 >= 0 else int(p.live_to[g.blk]) + 1
        j0, j1 = np.searchsorted(bt, g.u1, "right"), np.searchsorted(bt, u2, "left")
        if j1 <= j0:
            continue  # no slot boundary inside: the LP does not say
        r = cache.get(g.blk)
        if r is None:
            r = cache[g.blk] = residency(g.blk)
        if r[np.arange(j0, j1) % S].min() <= LP_OFF:
            out.append(g)
    return out


def _teaches(lp_gaps, greedy_gaps, prob) -> dict:
    """What the LP-guided selection moves that the greedy one does not, and the reverse
    (gaps matched by block and centre, any guard): counts, bytes, median gap length (ticks)
    and the share of persistent blocks' bytes in each."""
    def chosen(gaps):
        return {(g.blk, (g.u1 + g.u2) // 2 if g.u2 >= 0 else -1): g for g in gaps if g.chosen}

    a, b = chosen(lp_gaps), chosen(greedy_gaps)

    def stats(keys, src):
        gs = [src[x] for x in keys]
        size = np.array([int(prob.size[g.blk]) for g in gs], np.int64)
        length = np.array([(g.u2 if g.u2 >= 0 else int(prob.live_to[g.blk]) + 1) - g.u1
                           for g in gs])
        pers = np.array([bool(prob.persistent[g.blk]) for g in gs], bool)
        return {"gaps": len(gs), "bytes": int(size.sum()),
                "median_ticks": float(np.median(length)) if len(gs) else 0.0,
                "persistent_bytes_share": float(size[pers].sum() / max(size.sum(), 1))}

    return {"both": stats(a.keys() & b.keys(), a), "lp_only": stats(a.keys() - b.keys(), a),
            "greedy_only": stats(b.keys() - a.keys(), b)}


def _seeds_needed(tl, gaps, off) -> list:
    """Step 2 of Note [LP-guided selection]: of the candidates (``_seeds``), those the
    over-budget ticks need: a sweep over the ticks taking, at each tick still over budget,
    the covering candidate the optimum keeps least resident (then the furthest reach, the
    larger block) until the tick fits."""

    cand = _seeds(tl, gaps, off)
    residency, k, S = off
    T = tl.T
    bt = np.concatenate([np.arange(0, T, k), np.arange(0, T, k) + T])
    starts: dict = {}
    for i, g in enumerate(cand):
        u2 = g.u2 if g.u2 >= 0 else int(tl.p.live_to[g.blk]) + 1
        j0, j1 = np.searchsorted(bt, g.u1, "right"), np.searchsorted(bt, u2, "left")
        rmin = float(residency(g.blk)[np.arange(j0, j1) % S].min())
        for s, e in segments(g.t_off, g.t_on, T):
            starts.setdefault(s, []).append((rmin, -e, -int(tl.size[g.blk]), i, e))
    diff = np.zeros(T + 1, np.int64)
    run = 0
    heap: list = []
    out: list = []
    taken: set = set()
    for t in range(T):
        run += diff[t]
        for item in starts.get(t, ()):
            heapq.heappush(heap, item)
        need = tl.base[t] - run - tl.budget
        while need > 0 and heap:
            _, _, _, i, e = heapq.heappop(heap)
            if i in taken or e <= t:
                continue
            taken.add(i)
            g = cand[i]
            out.append(g)
            sz = int(tl.size[g.blk])
            for s2, e2 in segments(g.t_off, g.t_on, T):
                if s2 <= t < e2:
                    run += sz
                    diff[e2] -= sz
                    need -= sz
                elif s2 > t:
                    diff[s2] += sz
                    diff[e2] -= sz
    return out
