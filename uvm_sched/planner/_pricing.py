"""Pricing a plan against not acting: a plan is a hint that must never hurt.

The schedule builder predicts its own stall from its model of one learned iteration (copy
queues, windows, guards); what it cannot see is the rest of the trace: an iteration period
learned shorter than the marked one (an LSTM's time-step loop: the plan then fires every
time step), transfers the link cannot hide at all (an iteration whose compute is shorter
than moving the excess once), the pool's dead ranges. So the plan is priced the way a user
would judge it, by running it: the simulator replays the trace with what the planner knows
of its accesses -- in oblivious mode the allocator events alone (ALLOC, FREE and markers:
the ground-truth ACCESS rows are stripped, so it still never reads them; accesses follow
the simulator's extremal model, written at the ALLOC and read at the FREE, the oblivious
use model; the allocator events do not say whether a block that is never freed -- weights,
optimizer state -- is read every iteration, so each candidate runs twice: as the extremal
model has it (written once) and with one read of every such block in each iteration
(spread over its ticks in allocation order, as a forward pass reads its weights; the
extremal accesses written out beside them, since a trace with ACCESS rows is judged by
those rows alone), and is
priced by the worse of its two ratios to no plan: the choice must be safe
under both (and a third view refutes, Note [One unseen use]). A view's accesses are fewer than the real ones, so demand paging looks
cheaper there than it is: a view refutes a candidate only where no plan's own stall in it
is at least the candidate's excess over no plan (else the view cannot see enough of what
not acting costs to tell; the trace with its own accesses sees all of it, and refutes
any candidate slower than no plan); a candidate no view can refute ties with no plan, Note [A tie
acts less]); in sampled mode with samples drawn from the trace itself, the trace as it is
(the samples are its accesses) -- under three candidates, and the fastest is emitted:

1. ``plan``: the full schedule;
2. ``advice-only``: the schedule without its eviction/prefetch pairs (populates, discards,
   remote mapping and read-mostly advice stay);
3. ``none``: no action at all (demand paging).

Note [A tie acts less]: in oblivious mode, among candidates equal up to float rounding, the
earliest one that some view shows faster than no plan is emitted; where no view shows any
of them faster, the one acting least (the views know what the planner knew, so a hint that
shows no gain in any of them has only its risk left). A sampled plan from given samples
knows touches the views do not hold: a tie keeps the earlier candidate.

Note [One unseen use] -- oblivious mode, a third view. Measured on the ground truth
(benchmarks/results/robust.md, the cases named there): the plans that lose to demand paging
lose to a use the allocator events do not show -- an activation evicted for a gap it is in
fact read in (an LSTM's recurrent state, read at every time step: lstm-s13 at 60% of peak
1.95x demand paging, 1.13x without its evictions; LLaMA-7B planned from a snapshot at 75%:
1.17x, 1.07x without its activation moves), and populates and discards at 90% of peak (finetune-s3: the populates alone 1.19x,
without them 0.97x: blocks first touched up to 10 ticks after their ALLOC, populated at it
and evicting, least recently migrated first, what those ticks read). The first two views
cannot see that: both have each freed block used at its ALLOC and FREE only, which is the
planner's own guess. So each candidate also runs in a view with one more use of every
freed block, a whole-block read at the middle tick of its life (the point that splits the
span the guess calls idle; no constant), beside the kept reads. That view is a guess too --
it can invent a use a gap does not have -- so it only refutes, never ranks: a candidate
slower than no plan in it *and* on the allocator events alone is priced at its ratio
there; otherwise the view is left out of its price. (Letting it rank cost GPT-2 from a
snapshot on gh200-c2c at 50% of peak: advice-only won the worst view by 1%, 0.35x -> 0.71x
demand paging.) The populate losses at 90% are not caught: every view writes a block at
its ALLOC, which is the populate's own assumption, and the kept reads show the populates
faster than no plan there (they change which blocks the driver evicts); a view that moves
each freed block's first write to its middle tick refuted none of them either (finetune-s0,
-s3, -s59, encdec-s0, moe-s56, unet-s37 at 90%: unchanged), so it is not here; nor does
any view show a plan without its populates faster. The planner leaves the populates out
where its schedule moves nothing and leaves ticks over budget, and keeps the freed ranges
the pool hands those blocks (``_populates``, Note [Populates that evict], Note [Discards
the pool needs]).

Note [Refuted candidates run no further views] -- oblivious mode. No plan's ratio is 1 in
every view, so its price is the extremal time ``base`` and the fastest price is at most
``base``. A candidate whose worst ratio in the views run so far, times ``base``, is above
``base * (1 + rounding)`` is priced above the fastest price times (1 + rounding) whatever
its later views show (more views only raise its worst ratio; float multiplication by
``base`` keeps the order), so it is never tied and never chosen; and since its price stays
above ``base``, it is not the fastest either: the tied set, and the ratios of every
candidate in it, are those of running every view. So such a candidate runs no further
view (the choice is the same; ``tests/test_planner_pricing.py`` checks it against every
view run, on generated traces). The one-unseen-use view runs before the kept reads, as it
refutes the most: on the LLM traces of ``benchmarks/bench_scale.py`` at 50% of h200-pcie5
the full plan is 2.2x no plan there, and its run in the kept reads (a sixth of the pricing's
simulation time) decides nothing. Its figure in ``plan.meta["pricing"]`` is then the worst
of the views that ran, a lower bound (listed under ``at_least``; the same figure where the
skipped view would not have raised it).

Note [Runs stopped once decided]. No plan runs first in each view; a later candidate's run
stops as soon as the part of the measured iteration it has simulated already decides what
its run is read for (the simulator's clock never goes back, so the whole iteration takes at
least that long: ``sim/_api.py``, Note [A run stopped once it is slower]). In the allocator
events alone and the kept reads, a run slower than no plan by more than no plan's own stall
has the ratio 1 whatever its exact time (``ratio``: the view sees too little to refute it),
and in the allocator events alone it is also ``slower`` -- so past ``max(t0 + stall0, t0 *
(1 + rounding))`` nothing read from the run changes (its figure stays exact). In the
one-unseen-use view, and in the one view of the trace with its own accesses, a run above
``t0 * (1 + rounding)`` refutes its candidate (as in Note [Refuted candidates run no further
views]), and its figure is a lower bound (listed under ``at_least``). The stop is checked on
the time returned (with the same expressions as the choice reads; a run that stopped short
of deciding is run again in full), so the choice and every other figure are those of full
runs. On the LLM traces of ``benchmarks/bench_scale.py`` at 50% of h200-pcie5, the full
plan is 12x no plan in the allocator events alone and 3.6x in the one-unseen-use view
(300k events): its two runs stop a twelfth and a quarter into the measured iteration, the
last of three.

``plan.meta["pricing"]`` holds the three predicted iteration times (s) and the choice; when
it is not the full plan, ``plan.meta["fallback"]`` says why in words. No constant is
involved: the candidates are compared as they run.

Import note: this is the one place where the planner calls the simulator (lazily, at run
time; the simulator imports the planner's ``Plan`` type at module level).
"""
from __future__ import annotations

__all__ = ["price", "CANDIDATES"]

CANDIDATES = ("plan", "advice-only", "none")
_ROUNDING = 1e-9  # relative: iteration times equal up to float rounding are equal


def _kept_reads_view(view, starts, midpoints: bool = False):
    """``view`` (no ACCESS rows) with the simulator's extremal accesses written out (every
    block written whole at its ALLOC tick, read whole at its FREE tick) plus, in each
    iteration (``starts``: its first ticks), a whole-block READ of each never-freed block
    allocated before it, the k-th such block at the iteration's k-th tick (modulo its
    length), after that tick's allocator events; with ``midpoints``, also one whole-block
    READ of every freed block at the middle tick of its life (ALLOC and FREE two or more
    ticks apart; Note [One unseen use]). The extremal rows must be explicit: a
    trace with any ACCESS row is judged by its ACCESS rows alone, so the reads alone would
    leave every other block untouched (never resident: no plan then looks free and any
    populate costly)."""
    import numpy as np

    from ..trace import AccessMode, EventKind, Trace

    c = view.columns
    bt = view.block_table()
    kept = bt[bt["free_tick"] < 0] if "free_tick" in bt else bt.iloc[:0]
    starts = np.unique(np.asarray(starts, np.int64))
    if not len(starts):
        return view
    at = kept["alloc_tick"].to_numpy(np.int64)
    blocks = kept.index.to_numpy(np.int64)
    sizes = kept["size"].to_numpy(np.int64)
    t_rows, b_rows, s_rows = [], [], []
    ends = np.append(starts[1:], view.n_ticks)
    for s, e in zip(starts.tolist(), ends.tolist()):
        m = at < s
        t_rows.append(s + np.arange(int(m.sum()), dtype=np.int64) % max(1, e - s))
        b_rows.append(blocks[m])
        s_rows.append(sizes[m])
    if midpoints and "free_tick" in bt:
        fr = bt[(bt["free_tick"] >= 0) & (bt["alloc_tick"] >= 0)]
        a0, f0 = fr["alloc_tick"].to_numpy(np.int64), fr["free_tick"].to_numpy(np.int64)
        m = f0 - a0 >= 2
        t_rows.append((a0[m] + f0[m]) // 2)
        b_rows.append(fr.index.to_numpy(np.int64)[m])
        s_rows.append(fr["size"].to_numpy(np.int64)[m])
    if not sum(len(t) for t in t_rows):
        return view
    n_read = sum(len(t) for t in t_rows)
    alloc, free = c["kind"] == EventKind.ALLOC, c["kind"] == EventKind.FREE
    tick = np.concatenate([c["tick"][alloc], c["tick"][free]] + t_rows)
    mode = np.concatenate([np.full(int(alloc.sum()), AccessMode.WRITE, np.uint8),
                           np.full(int(free.sum()) + n_read, AccessMode.READ, np.uint8)])
    pos = np.searchsorted(c["tick"], tick, side="right")
    # each extra row takes the time of the row it is placed beside (times never go back)
    t_ns = np.concatenate([c["t_ns"][alloc], c["t_ns"][free],
                           c["t_ns"][np.maximum(pos[len(pos) - n_read:] - 1, 0)]])
    extra = {"tick": tick, "t_ns": t_ns, "kind":
             np.full(len(tick), EventKind.ACCESS, np.uint8),
             "block": np.concatenate([c["block"][alloc], c["block"][free]] + b_rows),
             "size": np.concatenate([c["size"][alloc], c["size"][free]] + s_rows),
             "mode": mode}
    # a write right after its ALLOC row, a read right before its FREE row, a kept read
    # after the rows of its tick; ticks in order (an iteration with more kept blocks than
    # ticks wraps around)
    rows = np.arange(len(c["tick"]))
    key = np.concatenate([rows * 2, rows[alloc] * 2 + 1, rows[free] * 2 - 1,
                          pos[len(pos) - n_read:] * 2 - 1])
    order = np.lexsort((key, np.concatenate([c["tick"], tick])))
    cols = {}
    for k, v in c.items():
        add = extra.get(k)
        if add is None:
            add = np.full(len(tick), -1 if k in ("offset", "length") else 0, v.dtype)
        cols[k] = np.concatenate([v, np.asarray(add, v.dtype)])[order]
    # valid by construction (``view`` is a valid trace; each added row is an ACCESS inside
    # its block's life, ticks in order): not validated again, a tenth of this function's
    # time (``tests/test_planner_scale.py`` validates it on generated traces)
    return Trace(cols, tick_ns=view.tick_ns, meta=view.meta, validate=False)


def _decided_above(j: int, yardstick: tuple, accesses: bool) -> float:
    """The iteration time (s) above which a candidate's run in view ``j`` decides all it is
    read for, given no plan's ``(time, stall)`` in that view (Note [Runs stopped once
    decided]); a little above it (the check on the time returned is exact), inf where no
    time does."""
    t0, stall0 = yardstick
    if t0 <= 0:
        return float("inf")
    if accesses or j == 2:
        at = t0 * (1 + _ROUNDING)
    else:
        at = max(t0 + stall0, t0 * (1 + _ROUNDING) if j == 0 else t0)
    return at * (1 + 1e3 * _ROUNDING)


def price(trace, candidates: dict, budget: int, prof, *, accesses: bool = False,
          starts=(), oblivious: bool = True,
          _prune: bool = True) -> tuple[str, dict, tuple[str, ...]]:
    """Simulate each of ``candidates`` (``{label: Plan}``, in order of preference) on
    ``trace`` (its allocator events only, unless ``accesses``: the planner knows them) at
    ``budget`` bytes on ``prof``; returns the label chosen (the fastest; among ties, in
    oblivious mode, Note [A tie acts less], else the earliest) and ``{label: iteration
    seconds}`` (the worst of the views, as a ratio to ``none``'s time in the same view,
    times ``none``'s extremal time; the one-unseen-use view counts only where it refutes,
    Note [One unseen use]) and the labels whose figure is a lower bound (refuted before
    their last view, Note [Refuted candidates run no further views], or by a run stopped
    once it refuted them, Note [Runs stopped once decided]; ``_prune`` False runs every
    view, each run to its end, for tests). ``starts``: the iteration start ticks (for the
    reads of the never-freed blocks, see the module docstring). Raises the simulator's
    ``BudgetError`` when a tick's working set exceeds the budget (nothing can be
    judged)."""
    from ..sim import BudgetError, simulate

    from ..trace.zoo import allocator_only

    if accesses:
        views = [lambda: trace]
    else:
        bare = allocator_only(trace) if trace.has_accesses else trace
        # each view is built when its turn comes and dropped after its runs: only the two
        # figures of each run are kept, so one view's simulator arrays are live at a time
        views = [lambda: bare, lambda: _kept_reads_view(bare, starts),
                 lambda: _kept_reads_view(bare, starts, midpoints=True)]

    def slower(r, label):
        t, t0 = r[label][0], r["none"][0]
        return t0 > 0 and t > t0 * (1 + _ROUNDING)

    def ratio(r, label):
        t, (t0, stall0) = r[label][0], r["none"]
        if t0 <= 0 or (not accesses and t > t0 and stall0 < t - t0):
            # this view sees too little of what not acting costs to refute it; the trace
            # with its own accesses sees all of it (gru-s245 at 60% of peak on h200-pcie5:
            # the sampled advice-only, 1.86x no plan, was taken for a tie with it)
            return 1.0
        return t / t0

    def ratios_of(label):
        v = [ratio(runs[j], label) for j in (0, 1) if j in runs and label in runs[j]]
        # the one-unseen-use view only refutes, and only a candidate the allocator's own
        # events show slower too (Note [One unseen use])
        if 2 in runs and label in runs[2] and slower(runs[0], label) and slower(runs[2], label):
            v.append(runs[2][label][0] / runs[2]["none"][0])
        return v

    def decided(j, label, t, yardstick):
        """A run stopped at ``t`` (s) decides what a full run would (Note [Runs stopped
        once decided]), by the expressions ``slower``, ``ratio`` and ``refuted`` read."""
        t0, stall0 = yardstick
        if accesses or j == 2:
            base = t0 if not j else runs[0]["none"][0]
            return t > t0 * (1 + _ROUNDING) and base * (t / t0) > base * (1 + _ROUNDING)
        return t > t0 and stall0 < t - t0 and (j > 0 or t > t0 * (1 + _ROUNDING))

    def refuted(label):
        # Note [Refuted candidates run no further views]
        base = runs[0]["none"][0]
        return label != "none" and base * max(ratios_of(label)) > base * (1 + _ROUNDING)

    runs: dict[int, dict] = {}
    cut: set[str] = set()  # refuted before a view that would have run them
    # the one-unseen-use view before the kept reads: what it refutes needs no third view
    for j in (0, 2, 1)[:len(views)]:
        make_view = views[j]
        # the one-unseen-use view (j 2) is read only for the candidates the allocator
        # events show slower (and no plan, the yardstick): it is not run for the others,
        # nor at all where none is (the same choice, a third of the simulations fewer)
        todo = {k: p for k, p in candidates.items() if k == "none" or (
            (j < 2 or slower(runs[0], k)) and not (j and _prune and refuted(k)))}
        cut.update(k for k in candidates if k not in todo and (j < 2 or slower(runs[0], k)))
        if len(todo) == 1 and j:
            continue
        view = make_view()
        cache: dict = {}
        run: dict = {}
        try:
            # no plan first: the other runs may stop once decided (Note [Runs stopped ...])
            for label in sorted(todo, key=lambda k: k != "none"):
                stop = _decided_above(j, run["none"], accesses) \
                    if _prune and label != "none" else float("inf")
                # two figures are read: no frames built (sim/_api.py Note [Figures only])
                r = simulate(view, todo[label], prof, budget, _cache=cache, _figures_only=True,
                             _stop_above_s=stop)
                t = float(r.iteration_time_s)
                if r.counters.get("stopped") and not decided(j, label, t, run["none"]):
                    r = simulate(view, todo[label], prof, budget, _cache=cache,
                                 _figures_only=True)  # short of deciding: run in full
                    t = float(r.iteration_time_s)
                if r.counters.get("stopped") and (accesses or j == 2):
                    cut.add(label)  # refuted by a lower bound of its time
                run[label] = (t, float(r.stall_time_s))
                del r
        except BudgetError:
            if not j:
                raise
            # a kept block's read alone is above the budget: that view cannot be judged
            continue
        finally:
            del view, cache
        runs[j] = run

    base = runs[0]["none"][0]
    ratios = {label: ratios_of(label) for label in candidates}
    times = {label: base * max(v) for label, v in ratios.items()}
    fastest = min(times.values())
    # equal up to float rounding (sums of the same tick times in another order) is a tie;
    # among the tied, the earliest candidate that some view shows faster than no plan --
    # and where none does, the one acting least (Note [A tie acts less])
    tied = [k for k in candidates if times[k] <= fastest * (1 + _ROUNDING)]
    shown = [k for k in tied if min(ratios[k]) < 1 - _ROUNDING]
    at_least = tuple(k for k in candidates if k in cut)
    if not oblivious:
        return tied[0], times, at_least  # the samples are knowledge the views do not hold
    return (shown or tied[::-1])[0], times, at_least
