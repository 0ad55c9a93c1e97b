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
those rows alone), and is priced by the worse of its two ratios to no plan: the choice
must be safe under both (and two more views refute, Note [One unseen use], Note [Kept reads
in either order]). A view's
accesses are fewer than the real ones, so demand paging looks cheaper there than it is: a
view refutes a candidate only where no plan's own stall in it is at least the candidate's
excess over no plan (else the view cannot see enough of what not acting costs to tell; the
trace with its own accesses sees all of it, and refutes any candidate slower than no plan);
a candidate no view can refute ties with no plan (Note [A tie acts less], Note [Ties broken
by the other views]); in sampled mode with samples drawn from the trace itself, the trace as it is
(the samples are its accesses) -- under three candidates, and the fastest is emitted:

1. ``plan``: the full schedule;
2. ``advice-only``: the schedule without its eviction/prefetch pairs (populates, discards,
   remote mapping and read-mostly advice stay);
3. ``none``: no action at all (demand paging).

Note [A tie acts less]: in oblivious mode, among candidates equal up to float rounding, one
that some view shows faster than no plan is emitted (the earliest of those Note [The hint
that costs least when wrong] and Note [Ties broken by the other views] leave); where no view
shows any of them faster, the one acting least (the views know what the planner knew, so a
hint that shows no gain in any of them has only its risk left). A sampled plan from given
samples knows touches the views do not hold: a tie keeps the earlier candidate.

Note [Ties broken by the other views]. A view that cannot refute a candidate prices it at
no plan's time (ratio 1), and the price is the worst view: so where the allocator events
alone fit the budget (no plan stalls 0 s there, every candidate that moves anything is
slower there), every candidate ties at 1 and the kept reads' figures, the only ones left
that rank, were not read. The earliest candidate shown faster went out, the full plan,
where its advice alone is faster in every view and on the ground truth (gru-s61 on
gh200-c2c at 60% of peak: the plan 0.59x no plan with the kept reads, its advice 0.29x;
on the ground truth 1.07x and 0.58x demand paging). So the tied are ranked by their
ratios worst first, compared in turn (``_worst_first``): the second worst decides where
the worst ties, and so on; Note [A tie acts less] decides among those equal in all. The
prices are unchanged: this orders only candidates whose worst views are equal, so a
candidate priced above another is still never chosen. No constant. Measured:
``benchmarks/results/robust.md``.

Note [The hint that costs least when wrong] -- oblivious mode. Where the allocator events
alone fit the budget, no plan stalls nothing there: that view refutes no candidate, and
every candidate that acts ties at no plan's price. The kept reads then ranked them (Note
[Ties broken by the other views]) and sent out the full plan wherever its moves won on the
guessed reads. Where those guesses are wrong, the moves cost. mlp-s167 on h200-pcie5 at
75% of peak: the plan was 0.42x no plan with the kept reads and 2.70x in the events alone,
and 1.01x demand paging on the ground truth; its advice alone was 0.91x, 1.55x and 0.90x.
The two views that rank are two guesses of the reads: in the events alone none of the
guessed reads comes, with the kept reads all of them do. So, among the tied candidates
that some view shows faster than no plan, the one whose worst regret over those two views
is least goes first. A candidate's regret in a view is its time over the fastest
candidate's there: how far it is from the best choice, were that view the truth. The
other views break the ties left. mlp-s167: the plan's worst regret is 2.70 (events
alone), its advice's 2.18 (kept reads), so the advice goes out. Ranking by the events
alone first fixed the same rows, but it gave up the plans whose moves win by far
(encdec-s168 on a100-40gb-pcie4 at 75%: 0.12x -> 0.55x demand paging). The prices are
unchanged. A run that stopped once decided gives only a bound, so it is run again to its
end for this. No constant. Measured: ``benchmarks/results/robust.md``.

Note [One unseen use] -- oblivious mode, a third view. Measured on the ground truth
(benchmarks/results/robust.md, the cases named there): the plans that lose to demand paging
lose to a use the allocator events do not show -- an activation evicted for a gap it is in
fact read in (an LSTM's recurrent state, read at every time step: lstm-s13 at 60% of peak
1.95x demand paging, 1.13x without its evictions; LLaMA-7B planned from a snapshot at 75%:
1.17x, 1.07x without its activation moves, a loss that came of the snapshot's ticks of no
time: ``_instants``), and populates and discards at 90% of peak
(finetune-s3: the populates alone 1.19x, without them 0.97x: blocks first touched up to
10 ticks after their ALLOC, populated at it and evicting, least recently migrated first,
what those ticks read). The first two views
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

Note [Kept reads in either order] -- oblivious mode, a fourth view. The kept reads read
the never-freed blocks in allocation order, the k-th at the iteration's k-th tick, and what
not acting costs hangs on that order (the driver keeps a block read again soon, and loses
every block of a cycle a little larger than the budget); the allocator events do not say
it, and a backward pass reads its weights in reverse. A plan whose gain there is only the
driver's loss in that one order loses on the program's own: encdec-s71 on gh200-c2c at
90% of peak, its full plan 0.49x no plan with the kept reads, 1.21x demand paging on the
ground truth; judged with the kept blocks' own reads and the freed blocks as the views
guess them 1.16x no plan, with the guessed kept reads and the freed blocks' own reads
0.54x: the kept reads' order made the loss, not a freed block's unseen use. So each
candidate also runs with the kept reads in reverse order. That order is a guess too, so
the view only refutes: a candidate slower than no plan there by more than
``_REVERSE_SLACK``, where no plan's stall shows it (``ratio``), is priced at its ratio
there; otherwise the view is left out of its price. The slack, 1%, is what the
robustness benchmark and its CI sample grant a plan against demand paging; it is there
because the reverse order often changes nothing but the cost of the advice's own calls:
the advice of the LLM trace of ``benchmarks/bench_scale.py`` at 75% of peak on h200-pcie5
is 1.00001x no plan there (0.34x demand paging on the ground truth), gru-s92's at 90%
1.0008x (0.34x); refuted at any excess, both went out as no plan. moe-s0's advice at 90%,
whose populates evict what the next ticks read, is 1.14x there (1.17x demand paging on the
ground truth), and is refuted. Results across the slack's range (0 to 5%):
``benchmarks/results/robust.md``. (Letting the view rank too gave mlp-s1008 at 75% of peak
on h200-pcie5 the full plan, 1.02x demand paging, where its advice alone is 0.89x.)

Note [Reads no tick can hold] -- oblivious mode. The extremal model reads every freed block
at its FREE tick; where a program frees many blocks at once (the end of a backward pass,
an LSTM's saved states), those reads together can exceed the budget although the program's
own accesses fit it (lstm-s1009 at 40% of peak: 956,669,952 bytes freed at one tick,
4,915 bytes over the budget; on the ground truth that tick touches 604,372,992). The simulator
refuses a tick like that (``BudgetError``), and every candidate was emitted unpriced: the
plan stood, 1.17x demand paging on a100-40gb-pcie4. A guess the device cannot run is the
wrong guess, so the views then move the reads that do not fit to the tick before, the
nearest one where the block still lives (``_spilled_reads``): the same reads, as late as
the budget lets them be; the kept reads and the one-unseen-use reads are spilled with
them. Traces whose reads fit are judged as before (the spill is made only where the
events alone do not fit).

Note [Discards judged against keeping them]. A discard drops a freed range from the device,
so the pool's next ALLOC of it is populated afresh instead of reusing resident bytes; it
pays only where the driver would otherwise write the dead range back before its reuse. A
schedule that moves blocks needs its discards: it counts a freed block's bytes as room from
the FREE on, and the discard is what makes that so (encdec-s505 on h200-pcie5 at 90% of
peak: 0.70x demand paging, 1.11x without its discards). The plan's advice alone moves
nothing, and there the comparison with no plan cannot tell whether its discards pay: a
view where no plan stalls less than a candidate's excess cannot refute the candidate
(``ratio``), whatever the excess is made of (gru-s716 on gh200-c2c at 90%: the advice
alone, 1.55x no plan in the events alone and 0.96x with the kept reads, went out at 1.08x
demand paging; without its discards it is 1.00x and 0.95x there, 0.95x on the ground
truth). So advice alone, once chosen, is run again without its discards, against itself
rather than against no plan, in the same views: the discards are left out where no view
shows it slower without them (``_lean.without_discards``), and kept where any view shows them
paying. The words go in ``plan.meta["pricing"]["discards"]``; sampled mode prices the
oblivious advice without its discards beside the rest. No constant.

Note [Calls the host cannot hide] -- oblivious mode. Every prefetch and advise call holds
the thread that launches the kernels (``sim/_mechanisms.py``, Note [Host calls]). In the
allocator events alone nothing faults, so a kernel waits for the calls before it wherever
they outlast the compute; with the kept reads the guessed faults slow the kernels down and
the host catches up behind them. Where the program's own faults come elsewhere in the
iteration, the calls' wait is paid beside them: unet-s193 on gh200-c2c at 90% of peak, its
advice alone (248 populates) 3.0x no plan in the events alone (0.87 ms of host stall
against 0.44 ms of compute) and 0.993x with the kept reads (5 us of host stall there), was
1.34x demand paging on the ground truth (0.87 ms of host stall beside the same fault
stall). Neither view can refute it (the events alone show too little of what not acting
costs, Note [Ties broken by the other views]), and the kept reads show it faster, so it
went out (Note [A tie acts less]). So the plan chosen, once its discards and populates
are judged, is run to its end in the events alone, and where its calls make a host stall
there that is not less than what it gains in the kept reads (its time there plus that
stall, against no plan's) and it is not faster than no plan in the events alone, it is
not emitted: no plan goes out, and ``plan.meta["pricing"]["calls"]`` says why. The
assumption is the worst place for the faults: none of them overlaps the calls' wait. A plan
faster than no plan in the events alone, whose price is below no plan's, is never
withheld. The LLM trace of ``benchmarks/bench_scale.py`` at 75% of h200-pcie5 keeps its
advice (10.9 ms of host stall in the events alone, 2.69 s against no plan's 2.77 s with the
kept reads: 0.341x demand paging on the ground truth). No constant. Measured in
``benchmarks/results/robust.md`` ("Before / after: populates that move nothing, judged;
calls the host cannot hide").

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

from functools import partial

__all__ = ["price", "calls_hidden", "host_stall_s", "runs_to_end", "CANDIDATES"]

CANDIDATES = ("plan", "advice-only", "none")
_ROUNDING = 1e-9  # relative: iteration times equal up to float rounding are equal
# Note [Kept reads in either order]: what the reverse order may show against no plan
# without refuting a candidate (relative)
_REVERSE_SLACK = 0.01


def _over_budget(bt, budget: int, blocks=None, ticks=None):
    """The ticks (ascending) whose blocks exceed ``budget`` bytes together, each written
    whole at its ALLOC (``bt``: the block table) and read whole at ``ticks`` (``blocks``:
    their ids; default: each freed block at its FREE, the extremal model): the ticks the
    simulator refuses."""
    import numpy as np

    if not len(bt):
        return np.zeros(0, np.int64)
    if blocks is None:
        fr = bt[bt["free_tick"] >= 0]
        blocks, ticks = fr.index.to_numpy(np.int64), fr["free_tick"].to_numpy(np.int64)
    at = bt["alloc_tick"].to_numpy(np.int64)
    pos = bt.index.get_indexer(blocks)
    # a block read at its ALLOC tick, or twice at one tick, is counted there once
    read = np.unique(np.stack([ticks, pos]), axis=1) if len(pos) else np.zeros((2, 0), np.int64)
    read = read[:, at[read[1]] != read[0]]
    size = bt["size"].to_numpy(np.int64)
    n = int(max(at.max(), read[0].max(initial=0))) + 1
    ws = np.bincount(at, size, n) + np.bincount(read[0], size[read[1]], n)
    return np.flatnonzero(ws > budget)


def _spilled_reads(bt, budget: int, blocks, ticks):
    """The ticks of whole-block reads of ``blocks`` at ``ticks`` (in order of preference
    within a tick), where a tick whose blocks (each written at its ALLOC, ``bt``: the block
    table) exceed ``budget`` bytes keeps the longest prefix of its reads that fits -- its
    own, then those moved to it -- and moves the rest to the tick before, down to the
    block's ALLOC tick, where its write touches it (-1: the read is dropped). Note [Reads
    no tick can hold]. Raises ``BudgetError`` when a tick's writes alone exceed the
    budget."""
    import numpy as np

    from ..sim import BudgetError

    ticks = np.asarray(ticks, np.int64)
    over = _over_budget(bt, budget, blocks, ticks)[::-1].tolist()  # latest first
    if not over:
        return ticks
    alloc_at = bt["alloc_tick"].to_numpy(np.int64)
    size = bt["size"].to_numpy(np.int64)
    pos = bt.index.get_indexer(blocks).tolist()
    written: dict = {}
    for i, t in enumerate(alloc_at.tolist()):
        written.setdefault(t, set()).add(i)
    own: dict = {}
    for r, t in enumerate(ticks.tolist()):
        own.setdefault(t, []).append(r)
    out = ticks.copy()
    carry: list = []
    t = -1
    while over or carry:
        if not carry:
            t = over[0]
        if over and over[0] == t:
            over.pop(0)
        new = written.get(t, set())
        fixed = int(size[list(new)].sum())
        if fixed > budget:
            raise BudgetError(f"budget {budget:,} bytes is below the {fixed:,} bytes "
                              f"written by the blocks allocated at tick {t}")
        room, held, rest = budget - fixed, set(new), list[int]()
        for r in own.get(t, []) + carry:
            if pos[r] in held or (not rest and size[pos[r]] <= room):
                room -= int(size[pos[r]]) * (pos[r] not in held)
                held.add(pos[r])
                out[r] = t
            else:
                rest.append(r)
        out[[r for r in rest if alloc_at[pos[r]] >= t - 1]] = -1
        carry = [r for r in rest if alloc_at[pos[r]] < t - 1]
        t -= 1
    return out


def _kept_reads_view(view, starts, midpoints: bool = False, budget: int | None = None,
                     reversed_: bool = False):
    """``view`` (no ACCESS rows) with the simulator's extremal accesses written out (every
    block written whole at its ALLOC tick, read whole at its FREE tick) plus, in each
    iteration (``starts``: its first ticks), a whole-block READ of each never-freed block
    allocated before it, the k-th such block at the iteration's k-th tick (modulo its
    length; with ``reversed_``, the last such block first: Note [Kept reads in either
    order]), after that tick's allocator events; with ``midpoints``, also one whole-block
    READ of every freed block at the middle tick of its life (ALLOC and FREE two or more
    ticks apart; Note [One unseen use]). The extremal rows must be explicit: a
    trace with any ACCESS row is judged by its ACCESS rows alone, so the reads alone would
    leave every other block untouched (never resident: no plan then looks free and any
    populate costly). With ``budget`` (bytes), every read -- at a FREE, kept, or at a
    midpoint -- that a tick cannot hold beside the rest is spilled to the ticks before
    (``_spilled_reads``)."""
    import numpy as np

    from ..trace import AccessMode, EventKind, Trace

    c = view.columns
    bt = view.block_table()
    kept = bt[bt["free_tick"] < 0] if "free_tick" in bt else bt.iloc[:0]
    starts = np.unique(np.asarray(starts, np.int64))
    if not len(starts) and budget is None:
        return view
    at = kept["alloc_tick"].to_numpy(np.int64)
    blocks = kept.index.to_numpy(np.int64)
    sizes = kept["size"].to_numpy(np.int64)
    t_rows, b_rows, s_rows = [], [], []
    ends = np.append(starts[1:], view.n_ticks)
    for s, e in zip(starts.tolist(), ends.tolist()):
        m = at < s
        k = np.arange(int(m.sum()), dtype=np.int64)
        t_rows.append(s + (k[::-1] if reversed_ else k) % max(1, e - s))
        b_rows.append(blocks[m])
        s_rows.append(sizes[m])
    if midpoints and "free_tick" in bt:
        fr = bt[(bt["free_tick"] >= 0) & (bt["alloc_tick"] >= 0)]
        a0, f0 = fr["alloc_tick"].to_numpy(np.int64), fr["free_tick"].to_numpy(np.int64)
        m = f0 - a0 >= 2
        t_rows.append((a0[m] + f0[m]) // 2)
        b_rows.append(fr.index.to_numpy(np.int64)[m])
        s_rows.append(fr["size"].to_numpy(np.int64)[m])
    free = c["kind"] == EventKind.FREE
    if budget is not None:  # Note [Reads no tick can hold]: every read spilled
        fb = c["block"][free].astype(np.int64)
        rb = np.concatenate([fb] + b_rows)
        rt = _spilled_reads(bt, budget, rb, np.concatenate([c["tick"][free]] + t_rows))
        own = rt[:len(fb)] == c["tick"][free]
        free[np.flatnonzero(free)[~own]] = False  # the rest moved or dropped
        m = np.concatenate([~own, np.ones(len(rt) - len(fb), bool)]) & (rt >= 0)
        t_rows, b_rows = [rt[m]], [rb[m]]
        s_rows = [bt["size"].to_numpy(np.int64)[bt.index.get_indexer(rb[m])]]
    if not sum(len(t) for t in t_rows) and budget is None:
        return view
    n_read = sum(len(t) for t in t_rows)
    alloc = c["kind"] == EventKind.ALLOC
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


def _worst_first(tied: list, ratios: dict) -> list:
    """Of ``tied`` (labels, in order), those whose ratios to no plan (``{label: [ratio per
    view]}``), sorted worst first, are lowest compared in turn, equal up to float rounding
    (Note [Ties broken by the other views]); in their order."""
    keys = {k: sorted(ratios[k], reverse=True) for k in tied}
    for i in range(max(map(len, keys.values()))):
        at = {k: v[i] if i < len(v) else 1.0 for k, v in keys.items()}
        low = min(at[k] for k in tied)
        tied = [k for k in tied if at[k] <= low * (1 + _ROUNDING)]
    return tied


def _views(trace, budget: int, starts, accesses: bool) -> list:
    """The views a plan is judged in, each a callable building it when its turn comes (only
    the figures of each run are kept, so one view's simulator arrays are live at a time):
    the trace itself where the planner knows its accesses, else the allocator events alone,
    with the kept reads, with one unseen use, and with the kept reads in reverse order
    (module docstring), their reads spilled where a tick cannot hold them (Note [Reads no
    tick can hold])."""
    from ..trace.zoo import allocator_only

    if accesses:
        return [lambda: trace]
    bare = allocator_only(trace) if trace.has_accesses else trace
    spill = budget if len(_over_budget(bare.block_table(), budget)) else None
    return [lambda: bare if spill is None else _kept_reads_view(bare, (), budget=spill),
            *(partial(_kept_reads_view, bare, starts, m, spill) for m in (False, True)),
            partial(_kept_reads_view, bare, starts, False, spill, True)]


_VIEW_NAMES = ("the allocator events alone", "the kept reads", "one unseen use per freed block",
               "the kept reads in reverse order",
               "the trace as the planner knows it")


def host_stall_s(result) -> float:
    """The host stall (s) of a simulation's measured iteration: what the launching thread's
    calls held the kernels back (Note [Calls the host cannot hide])."""
    return float(result.stall_breakdown["host"])


def calls_hidden(views: list, chosen, none_s: dict, known: dict, budget: int, prof,
                 hosts: dict | None = None):
    """``(hidden, why)``: whether ``chosen`` (a priced ``Plan``, oblivious mode, not no plan)
    is still faster than no plan in a view that ranks (``_views``: 0 the allocator events
    alone, 1 the kept reads) once its calls are taken to overlap no stall: its time in the
    kept reads plus the host stall (s) its calls make in the events alone, Note [Calls the
    host cannot hide]. ``none_s``: ``{view: s}``, no plan's iteration times; ``known``:
    ``{view: s}``, ``chosen``'s, already simulated; ``hosts``: ``{view: s}``, the host
    stall in those of them that recorded it (the events alone is not run again where it
    did). ``why``: None where hidden."""
    from ..sim import BudgetError, simulate

    hosts = hosts or {}
    if 0 in hosts and known.get(0):
        host, t0 = hosts[0], known[0]
    else:
        try:
            r = simulate(views[0](), chosen, prof, budget, _figures_only=True)
        except BudgetError:
            return True, None  # a view that cannot hold the budget judges nothing
        host, t0 = host_stall_s(r), float(r.iteration_time_s)
    if host <= 0 or 0 not in none_s or t0 < none_s[0] * (1 - _ROUNDING):
        return True, None
    if 1 not in none_s:
        return True, None
    t1 = known.get(1)
    if t1 is None:
        t1 = float(simulate(views[1](), chosen, prof, budget,
                            _figures_only=True).iteration_time_s)
    if t1 + host < none_s[1] * (1 - _ROUNDING):
        return True, None
    return False, (f"its calls hold the launching thread {host:.3g} s per iteration with "
                   f"{_VIEW_NAMES[0]}, more than its gain with {_VIEW_NAMES[1]} "
                   f"({t1:.6g} s against no plan's {none_s[1]:.6g} s)")


def price(trace, candidates: dict, budget: int, prof, *, accesses: bool = False,
          starts=(), oblivious: bool = True, exact: dict | None = None,
          views: list | None = None, hosts: dict | None = None,
          _prune: bool = True) -> tuple[str, dict, tuple[str, ...]]:
    """Simulate each of ``candidates`` (``{label: Plan}``, in order of preference) on ``trace`` (its
    allocator events only, unless ``accesses``: the planner knows them) at ``budget`` bytes on
    ``prof``; returns the label chosen (the fastest; among ties, in oblivious mode,
    ``_oblivious_choice``, else the earliest) and ``{label: iteration seconds}`` (the worst of the
    views, as a ratio to ``none``'s time in the same view, times ``none``'s extremal time; the
    one-unseen-use view and the kept reads in reverse order count only where they refute, Note [One
    unseen use], Note [Kept reads in either order]) and the labels whose figure is a lower bound
    (refuted before their last view, Note [Refuted candidates run no further views], or by a run
    stopped once it refuted them, Note [Runs stopped once decided]; ``_prune`` False runs every
    view, each run to its end, for tests; ``exact``, given, gets ``{(view, label): s}`` for the
    runs made to their end, and ``hosts``, given, their host stall (s); ``views``: ``_views``'s,
    where the caller made them). ``starts``: the iteration start ticks (for the reads of the
    never-freed blocks, see the module docstring). Raises ``BudgetError`` where a tick's reads,
    spilled (Note [Reads no tick can hold]), exceed the budget."""
    from ..sim import BudgetError, simulate

    views = _views(trace, budget, starts, accesses) if views is None else views
    exact = {} if exact is None else exact

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
        # the kept reads in reverse order only refute (Note [Kept reads in either order])
        if 3 in runs and label in runs[3] and (r3 := ratio(runs[3], label)) > 1 + _REVERSE_SLACK:
            v.append(r3)
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
    for j in (0, 2, 1, 3)[:len(views)]:
        make_view = views[j]
        # the one-unseen-use view (j 2) is read only for the candidates the allocator
        # events show slower (and no plan, the yardstick): it is not run for the others,
        # nor at all where none is (the same choice, a third of the simulations fewer)
        todo = {k: p for k, p in candidates.items() if k == "none" or (
            (j != 2 or slower(runs[0], k)) and not (j and _prune and refuted(k)))}
        cut.update(k for k in candidates if k not in todo and (j != 2 or slower(runs[0], k)))
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
                if not r.counters.get("stopped"):
                    exact[j, label] = t
                    if hosts is not None:
                        hosts[j, label] = host_stall_s(r)
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
    # among the tied, in oblivious mode, one that some view shows faster than no plan --
    # and where none does, the one acting least (_oblivious_choice)
    tied = [k for k in candidates if times[k] <= fastest * (1 + _ROUNDING)]
    at_least = tuple(k for k in candidates if k in cut)
    if not oblivious:
        return tied[0], times, at_least  # the samples are knowledge the views do not hold
    return _oblivious_choice(tied, ratios, views, candidates, prof, budget, exact, hosts), \
        times, at_least


def runs_to_end(views: list, j: int, plans: dict, exact: dict, budget: int, prof,
                hosts: dict | None = None) -> None:
    """Simulate each of ``plans`` (``{label: Plan}``) whose run in view ``j`` of ``views``
    is not in ``exact`` (``{(view, label): s}``) to its end, and add its iteration time (s)
    (and to ``hosts``, given, its host stall, s). Raises ``BudgetError`` where the view
    cannot hold the budget."""
    from ..sim import simulate

    todo = [k for k in plans if (j, k) not in exact]
    if todo:
        view = views[j]()
        cache: dict = {}
        for k in todo:
            r = simulate(view, plans[k], prof, budget, _cache=cache, _figures_only=True)
            exact[j, k] = float(r.iteration_time_s)
            if hosts is not None:
                hosts[j, k] = host_stall_s(r)


def _oblivious_choice(tied: list, ratios: dict, views: list, candidates: dict, prof,
                      budget: int, exact: dict, hosts: dict | None = None) -> str:
    """The label oblivious mode emits of ``tied`` (labels priced equal, in order; their
    ratios to no plan ``{label: [ratio per view]}``): of those some view shows faster than
    no plan, the ones whose worst regret over the views that rank (the events alone and
    the kept reads, of ``views``: a candidate's time over the fastest candidate's there) is
    least, equal up to float rounding (Note [The hint that costs least when wrong]), then
    Note [Ties broken by the other views]; where no view shows any faster, the one acting
    least (Note [A tie acts less]). ``exact``: ``{(view, label): s}`` of the runs made to
    their end; a run stopped once decided is made again, to its end, and added (and its
    host stall to ``hosts``)."""
    shown = [k for k in tied if min(ratios[k]) < 1 - _ROUNDING]
    if len(shown) > 1:
        regret = dict.fromkeys(shown, 1.0)
        for j in (0, 1)[:len(views)]:
            if (j, "none") not in exact:
                continue  # a view that could not hold the budget judges nothing
            runs_to_end(views, j, {k: candidates[k] for k in shown}, exact, budget, prof,
                        hosts)
            # no plan's run is made to its end: the fastest is among the runs made there
            fastest = min(t for (v, _), t in exact.items() if v == j)
            for k in shown:
                regret[k] = max(regret[k], exact[j, k] / fastest)
        low = min(regret.values())
        shown = [k for k in shown if regret[k] <= low * (1 + _ROUNDING)]
    return (_worst_first(shown, ratios) if shown else _worst_first(tied, ratios)[::-1])[0]
