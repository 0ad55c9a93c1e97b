"""Which fresh blocks a plan populates at their ALLOC, and which freed blocks it discards at
their FREE, at the ticks where the schedule's moves free nothing, and which ALLOCs need no
populate at all (``_planner._actions``, Note [Action table]).

Note [Populates that evict]
---------------------------
A populate claims a fresh block's memory at its ALLOC; the allocator events do not say
when the block is first touched (in generated workloads up to ~10 ticks later). Where the
schedule leaves a tick over budget, a populate there makes the driver evict, at once and
least recently migrated first, what the next ticks read; demand paging claims the memory
at the first touch, after the FREEs in between made room, and at 90% of peak evicts
little. At a tick where the schedule's evictions free room, they make it for its
populates, and the driver's eviction of the rest is what the plan counted on (GPT-2 at
50% of peak: skipping the populates at its 3 over-budget ticks cost 2.73x -> 3.12x
ideal). At a tick where the schedule frees nothing -- no gap the link can serve covers
it and no remote mapping spans it: ``Schedule.over_budget`` equals
``over_budget_unplanned``, the excess with no action, there -- the excess is the driver's
alone, and the populates at those ticks are left out: the block faults in at its first
touch as without a plan. The rule is per tick: a schedule may clear one stretch of the
iteration and leave another as it was (moe-s417 at 90% of peak: moves of 14 MiB, the
worst tick's 74 MiB over budget untouched; with its populates there 1.46x demand paging
on h200-pcie5, without them no plan is emitted). But only where the schedule leaves the
worst tick's excess as it was: where it lowers that, the driver's eviction at the ticks
it leaves alone is part of what the plan counted on too (moe-s0 at 90% of peak on
h200-pcie5, 10 ticks over budget that its moves leave as they were, its worst tick
17.2 -> 13.4 MiB over: leaving out the populates at those 10 ticks cost 0.97x -> 1.24x
demand paging). A remote mapping frees room as an eviction does: comparing with the
excess of the advice alone instead (remote mappings kept) left out populates at the
ticks the mappings clear, and cost 32 of 120 rows at 40-60% of peak on seeds 400-419,
none faster (mlp-s414 gh200-c2c 60%: 0.65x -> 0.76x demand paging). The advice-only
candidate is the plan without its moves, so it leaves out the same populates (giving it
those its own excess would leave out, every populate at a tick over budget, turned
bench_robust's unet-s216 at 60% of peak on h200-pcie5 from 0.86x demand paging into no
plan). Measured in benchmarks/results/robust.md ("Before /
after: populates where the schedule frees nothing"): on seeds 400-429 at 90% and 75% of
peak, 13 -> 6 oblivious plans slower than demand paging, 13 rows faster, 3 slower
(unet-s420 at 90%, slower than demand paging before too); and, when the rule applied
only to schedules that move no block, on bench_robust's repro set (75 rows, 25 of them
slower than demand): 25 -> 15 oblivious rows slower than demand;
3 rows got slower (mlp-s28 gh200-c2c 90%: 1.00x -> 1.24x demand, a first touch at the
ALLOC's own tick). No constant.

Note [Discards the pool needs]
------------------------------
"As without a plan" above holds only if the pool hands the left-out block what it would
hand it without a plan: a freed range that is still resident, reused with no fault and no
claim. A discard at a FREE drops that range from the device, and the pool hands freed
ranges out first in, first out, to every ALLOC after it; so where the plan discards the
ranges an ALLOC left unpopulated would reuse, the block's first touch faults on fresh
memory instead (a fault batch per VA block), which demand paging does not pay. Measured
on the ground truth (seeds 300-311 and 401-418 at 90% of peak, schedules that move nothing):
without their discards these plans are exactly no plan (the populates of resident ranges
do nothing), and the discards are what made mlp-s411 on gh200-c2c 1.47x demand paging
(faults 14 -> 28, the same bytes over the link) and encdec-s308 1.25-1.72x on all three
profiles. So where populates are left out, the plan keeps (does not discard) the ranges
freed before each left-out ALLOC that the pool needs to hand it resident bytes (not
those of blocks the schedule evicts: their ranges hold no resident bytes at the FREE, or
dead ones the driver would write back and migrate in again): walking
back from the ALLOC, the latest freed first, counting that a populated ALLOC in between
that came up short takes them before it does (a replay of the pool's byte queue over the
iteration's allocator events, twice round for the queue the previous iteration leaves).
The allocator events cannot say whether the driver would have written a kept dead range
back before its reuse (the gain of a discard): the replay takes it as resident, as the
pool does. What this costs: in every row it changed on bench_robust's sets, the replay
kept every discard, so such a plan is no plan; where the driver would have written the dead
ranges back (on the PCIe profiles a write-back costs more than a fault) the discards had
won (mlp-s306 h200-pcie5 0.46x demand paging, finetune-s300 0.84x). No view of the pricing
tells those from the losers (benchmarks/results/robust.md, "Before / after: discards the
pool needs", with the counts). No constant.
On a GPU a discarded range the pool hands out again is populated by the pool itself
(pool_pages.c: populate_discarded), because a kernel faults discarded pages in at ~0.5 GB/s
on an H200 (benchmarks/results/gpu_h200.md): there the left-out block claims its memory at
the ALLOC, as a populate would, which the kept ranges avoid too.

Note [Populates that move nothing]
----------------------------------
A populate is a call the executor makes in the allocator hook, on the thread that launches
the kernels, and costs that thread ``hw.action_call_s`` (``sim/_mechanisms.py``, Note [Host
calls]). It gives a fresh block resident pages before its first touch; where the pool
hands the ALLOC freed ranges that are still resident, there are no fresh pages and it
moves nothing, yet where such calls outlast the iteration's compute the advice that makes
them is slower than demand paging. Which ALLOCs the pool serves whole from resident
ranges: the byte queue of Note [Discards the pool needs] (``_pool_replay``), replayed with
the plan's own discards and evictions (the FREE of a block the plan discards or evicts
adds nothing: its range holds no resident bytes at the FREE). What the replay cannot see:
a freed range the driver evicted under pressure, whose block's first touch then faults the
dead bytes back where the populate would have brought them before it. So the replay only
marks these populates (``_planner._actions``); the plan the pricing chose is judged
without them against itself, in the views it was priced in but the one-unseen-use view
(``_lean._POPULATES_ORDER``: its invented reads change what the driver evicts, which is
what the replay cannot see), as its discards are (``_lean.without_rows``, Note [Discards
judged against keeping them]), and they are left out where no view shows it slower without
them (the words go in ``plan.meta["pricing"]["populates"]``). Where per-batch shapes resize
allocations (``pattern.alloc_varies``, issue 22), the run-time queue is not the one replayed
on the planned sizes, and no populate is marked. No constant. Measured (gru-s174, unet-s246,
bench_loops' dynamic padding and the rest): benchmarks/results/robust.md, "Before / after:
populates that move nothing, judged".
"""
from __future__ import annotations

import numpy as np

from ._core import Problem

__all__ = ["populates_that_evict", "discards_the_pool_needs", "populates_of_resident_ranges"]


def populates_that_evict(prob: Problem, sched) -> np.ndarray:
    """(n,) bool: the blocks whose populate is left out (Note [Populates that evict]):
    allocated at a tick the schedule leaves over budget (bytes) and frees nothing at, where
    it leaves the worst tick's excess as it was (every tick over budget, where it acts on
    no block); none where the schedule holds no per-tick excess (not computed)."""
    out = np.zeros(len(prob.size), bool)
    over, unplanned = sched.over_budget, sched.over_budget_unplanned
    if over is None or not len(over):
        return out
    if (sched.evictions or sched.remote) and (unplanned is None or
                                              over.max() < unplanned.max()):
        # not known where the schedule frees room; or it lowers the worst tick's excess,
        # and its populates claim the room it makes (Note [Populates that evict])
        return out
    # moves and remote mappings only ever take bytes off a tick: equal means they freed
    # nothing there
    alone = over > 0 if unplanned is None else (over > 0) & (over >= unplanned)
    lf = prob.live_from.astype(np.int64)
    ok = (prob.alloc_event >= 0) & (lf >= 0) & (lf < len(over))
    out[ok] = alone[lf[ok]]
    return out


def _event_blocks(prob: Problem) -> np.ndarray:
    """(E,) the block of each allocator event of the iteration (-1: none)."""
    ev_block = np.full(prob.E, -1, np.int64)
    for events in (prob.alloc_event, prob.free_event):
        i = np.flatnonzero(events >= 0)
        ev_block[events[i]] = i
    return ev_block


def discards_the_pool_needs(prob: Problem, left_out: np.ndarray, discarded: np.ndarray,
                            fixed: np.ndarray | None = None) -> np.ndarray:
    """(n,) bool: the blocks of ``discarded`` (the plan's discards, by block) that are kept
    instead, so that the pool hands each ALLOC of ``left_out`` (blocks not populated)
    resident bytes (Note [Discards the pool needs]); ``fixed``: blocks whose discard stays
    (the schedule evicts them: a kept range of theirs would hold no resident bytes, or dead
    ones written back). ``_pool_replay``, with the walks back from left-out ALLOCs that
    came up short (each discard is taken back at most once)."""
    movable = discarded if fixed is None else discarded & ~fixed
    if not left_out.any() or not movable.any():
        return np.zeros(len(prob.size), bool)
    return _pool_replay(prob, discarded, left_out, movable)[0]


def populates_of_resident_ranges(prob: Problem, discarded: np.ndarray,
                                 evicted: np.ndarray) -> np.ndarray:
    """(n,) bool: the blocks whose ALLOC the pool serves whole from freed ranges still
    resident (Note [Populates that move nothing]): ``_pool_replay`` with no discard taken
    back, a FREE adding nothing where the plan discards or evicts the block
    (``discarded``, ``evicted``: (n,) bool); O(events)."""
    none = np.zeros(len(prob.size), bool)
    short = _pool_replay(prob, discarded | evicted, none, none)[1]
    out = none.copy()
    alloc = np.flatnonzero(prob.alloc_event >= 0)
    out[alloc] = short[prob.alloc_event[alloc]] == 0
    return out


def _pool_replay(prob: Problem, discarded: np.ndarray, left_out: np.ndarray,
                 movable: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(keep, short)``: the pool's byte queue replayed over the iteration's allocator
    events, twice round (the second pass starts from the queue the first one leaves): a
    FREE adds its block's size unless ``discarded`` names it, an ALLOC takes up to its
    size; where an ALLOC of ``left_out`` comes up short, the latest discards of ``movable``
    before it are taken back (``keep``, (n,) bool) until it is served. ``short``: (E,)
    bytes each ALLOC event came up short in the second pass (populated fresh)."""
    E = prob.E
    keep = np.zeros(len(prob.size), bool)
    evb, is_free = _event_blocks(prob).tolist(), prob.ev_free.tolist()
    size, lo, disc = prob.size.tolist(), left_out.tolist(), discarded.tolist()
    can_keep = movable.tolist()
    n_disc = int(movable.sum())
    short = [0] * E  # bytes each ALLOC came up short in the latest pass (populated fresh)
    queued = 0  # bytes of freed, resident ranges the pool holds
    for _ in range(2):
        for e in range(E):
            b = evb[e]
            if b < 0:
                continue
            if is_free[e]:
                queued += 0 if disc[b] else size[b]
                continue
            take = min(size[b], queued)
            queued -= take
            short[e] = size[b] - take
            if not (short[e] and lo[b] and n_disc):
                continue
            debt = short[e]
            for back in range(1, E):
                k = (e - back) % E
                bk = evb[k]
                if bk < 0:
                    continue
                if not is_free[k]:
                    # the pool serves that ALLOC first: it takes a kept range before e does
                    debt += short[k]
                    short[k] = 0
                elif disc[bk] and can_keep[bk]:
                    disc[bk] = False
                    keep[bk] = True
                    n_disc -= 1
                    debt -= size[bk]
                    if debt <= 0 or not n_disc:
                        break
            short[e] = max(debt, 0)
            queued += max(-debt, 0)  # what the kept ranges hold beyond e's bytes
    return keep, np.asarray(short, np.int64)
