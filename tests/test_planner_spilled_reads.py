"""Note [Reads no tick can hold] (planner/_pricing.py): where the extremal reads at a FREE
tick exceed the budget, the pricing views read what does not fit at the ticks before, and
the plan is priced instead of emitted unpriced."""
from __future__ import annotations

import numpy as np
import pytest

from uvm_sched import sim
from uvm_sched.planner._pricing import _kept_reads_view, _spilled_reads
from uvm_sched.sim._prep import prepare
from uvm_sched.trace import EventKind, TraceBuilder, zoo


def _freed_together(alloc_ticks, free_tick: int, size: int = 4000):
    """Blocks of ``size`` bytes allocated at ``alloc_ticks``, all freed at ``free_tick``."""
    tb = TraceBuilder(name="freed-together")
    blocks = []
    for t in range(free_tick + 1):
        blocks += [tb.alloc(size) for a in alloc_ticks if a == t]
        if t == free_tick:
            for b in blocks:
                tb.free(b)
        tb.next_tick(1000.0)
    return tb.build()


def _freed(bt):
    """The extremal model's reads: each freed block at its FREE, in FREE order."""
    fr = bt[bt["free_tick"] >= 0].sort_values("free_row")
    return fr.index.to_numpy(np.int64), fr["free_tick"].to_numpy(np.int64)


def _reads(tr, budget):
    bt = tr.block_table()
    blocks, ticks = _freed(bt)
    return {b: t for b, t in zip(blocks.tolist(), _spilled_reads(bt, budget, blocks, ticks))
            if t >= 0}


def test_reads_that_fit_stay_at_their_free_tick():
    assert _reads(_freed_together([0, 1, 2], 5), 12000) == {0: 5, 1: 5, 2: 5}


def test_the_reads_past_the_budget_move_to_the_tick_before():
    assert _reads(_freed_together([0, 1, 2], 5), 8000) == {0: 5, 1: 5, 2: 4}
    assert _reads(_freed_together([0, 1, 2], 5), 4000) == {0: 5, 1: 4, 2: 3}


def test_a_read_that_reaches_its_blocks_alloc_is_dropped_and_writes_hold_their_tick():
    # block 2 is allocated (written) at tick 4: its read would land on its write, and the
    # write fills tick 4, so block 1's read goes on to tick 3
    assert _reads(_freed_together([0, 1, 4], 5), 4000) == {0: 5, 1: 3}


def test_writes_alone_over_the_budget_cannot_be_judged():
    with pytest.raises(sim.BudgetError, match="budget 7,999 bytes is below the 8,000 bytes"):
        _reads(_freed_together([0, 5, 5], 5), 7999)  # two blocks live for tick 5 alone


@pytest.mark.parametrize("family,seed", [("lstm", 1009), ("gru", 3), ("unet", 4),
                                         ("moe", 5)])
def test_the_spilled_views_fit_the_budget_and_read_each_block_in_its_life(family, seed):
    tr = zoo.record_random(seed, family, iters=2)
    bare = zoo.allocator_only(tr)
    ws = prepare(bare, 2 << 20, 4096).ws_bytes
    budget = int(ws.max()) * 3 // 4  # below the events alone: at least one tick spills
    alloc = bare.kind == EventKind.ALLOC
    writes = np.bincount(bare.tick[alloc], weights=bare.size[alloc], minlength=bare.n_ticks)
    if writes.max() > budget:
        pytest.skip(f"a tick's writes alone ({writes.max():,.0f} B) exceed {budget:,} B")
    for mid in (False, True):  # the kept reads, and one unseen use, spilled with the rest
        view = _kept_reads_view(bare, tr.iteration_starts, mid, budget)
        assert prepare(view, 2 << 20, 4096).ws_bytes.max() <= budget
    bt = bare.block_table()
    blocks, ticks = _freed(bt)
    moved = _spilled_reads(bt, budget, blocks, ticks)
    kept = moved >= 0
    assert np.all(moved[kept] > bt.loc[blocks[kept], "alloc_tick"].to_numpy())
    assert np.all(moved[kept] <= ticks[kept]) and np.any(moved != ticks)


def test_a_view_whose_reads_fit_is_the_events_own_extremal_model():
    bare = zoo.allocator_only(zoo.record_random(3, "gru", iters=2))
    budget = int(prepare(bare, 2 << 20, 4096).ws_bytes.max())
    view = _kept_reads_view(bare, (), budget=budget)
    for policy in ("demand", "prefetch-on-alloc"):
        a = sim.simulate(bare, policy, "h200-pcie5", budget).iteration_time_s
        b = sim.simulate(view, policy, "h200-pcie5", budget).iteration_time_s
        assert a == pytest.approx(b, rel=1e-12)
