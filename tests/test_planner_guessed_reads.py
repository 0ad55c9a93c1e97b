"""Oblivious mode prices a persistent block mapped host-resident by its reads, which it
does not see; it guesses them from the gradients autograd allocates, one of the block's
size per use (``planner/_reads.py``). A weight read at every step of a loop is then kept
on the device, where the driver's LRU keeps it anyway; a weight used once is still mapped
remotely when the budget needs it."""
from __future__ import annotations

import numpy as np
import pytest

from _planner_helpers import written_before_the_loop
from uvm_sched import sim
from uvm_sched.planner import plan
from uvm_sched.planner._reads import MIN_READS, guessed_reads
from uvm_sched.trace import AccessMode, TraceBuilder

MiB = 1 << 20
STEPS = 16


def test_guessed_reads_count_same_size_allocations_per_same_size_block():
    # blocks 0-4 persistent; 5.. made in the iteration (ALLOC events 0..)
    size = np.array([100, 100, 100, 7, 50] + [100] * 12 + [50, 3, 3])
    pers = np.arange(len(size)) < 5
    alloc_event = np.where(pers, -1, np.arange(len(size)) - 5)
    reads, faults = guessed_reads(size, pers, alloc_event, budget=10**9)
    # 12 ALLOCs of 100 bytes over the three persistent blocks of that size: 4 uses each
    assert reads[:3].tolist() == [1 + 2 * 4] * 3
    assert reads[3] == MIN_READS and faults[3] == 0  # no ALLOC of its size: unknown
    assert reads[4] == 3  # one use, alone of its size: forward, backward, the step
    assert (reads[5:] == MIN_READS).all() and (faults[5:] == 0).all()  # not persistent
    assert faults[:3].tolist() == [1] * 3  # close uses: LRU keeps it, one fault-back
    none = guessed_reads(size, np.zeros(len(size), bool), alloc_event, budget=10**9)
    assert (none[0] == MIN_READS).all()


def test_uses_further_apart_than_the_budget_fault_at_every_use():
    size = np.array([100] + [100, 1000, 1000, 100])
    pers = np.array([True, False, False, False, False])
    alloc_event = np.array([-1, 0, 1, 2, 3])
    # two uses; between the first and last ALLOC of its size 2,100 bytes fresh, plus 3/4 of
    # the 100 persistent bytes: 1,087.5 per use
    reads, faults = guessed_reads(size, pers, alloc_event, budget=1_000)
    assert reads[0] == 5 and faults[0] == 5
    reads, faults = guessed_reads(size, pers, alloc_event, budget=1_100)
    assert reads[0] == 5 and faults[0] == 1


def _loop_trace(gradient_per_step: bool):
    """A 64 MiB weight read at each of STEPS steps, forward and backward, and a 32 MiB
    embedding read once each way; a 16 MiB activation per step. With
    ``gradient_per_step`` the backward allocates the weight's gradient contribution at
    each step (autograd's way for a weight used at every step), else once."""
    tb = TraceBuilder(source="synthetic", name="loop")
    w, emb = written_before_the_loop(tb, 64 * MiB, 32 * MiB, tick_ns=50_000)
    for _ in range(3):
        tb.mark()
        tb.access(emb)
        acts = []
        for _s in range(STEPS):
            a = tb.alloc(16 * MiB)
            tb.access(w)
            tb.access(a, AccessMode.WRITE)
            acts.append(a)
            tb.next_tick(200_000)
        for s in reversed(range(STEPS)):
            tb.access(w)
            tb.access(acts[s])
            if gradient_per_step or s == 0:
                g = tb.alloc(64 * MiB)
                tb.access(g, AccessMode.WRITE)
                tb.next_tick(100_000)
                tb.access(w, AccessMode.READ_WRITE)
                tb.access(g)
                tb.free(g)
            tb.free(acts[s])
            tb.next_tick(200_000)
        tb.access(emb, AccessMode.READ_WRITE)
        tb.next_tick(100_000)
    return tb.build()


def _remote_blocks(p) -> set:
    a = p.actions
    return set(a.loc[(a["action"] == "advise_preferred_host") & a["persistent"], "block"])


@pytest.mark.parametrize("hw", ["h200-pcie5", "a100-40gb-pcie4"])
def test_a_weight_read_at_every_step_is_not_mapped_host_resident(hw):
    tr, budget = _loop_trace(gradient_per_step=True), 150 * MiB
    p = plan(tr, budget, hw, mode="oblivious", price=False)
    assert 0 not in _remote_blocks(p), p.meta["predicted"]
    cache: dict = {}
    demand = sim.simulate(tr, "demand", hw, budget, _cache=cache).iteration_time_s
    full = plan(tr, budget, hw, mode="oblivious")
    assert sim.simulate(tr, full, hw, budget, _cache=cache).iteration_time_s <= 1.01 * demand


def test_the_guess_maps_the_embedding_where_two_reads_mapped_the_weight(monkeypatch):
    import uvm_sched.planner._planner as planner_mod

    tr, budget, hw = _loop_trace(gradient_per_step=True), 150 * MiB, "h200-pcie5"
    guessed = plan(tr, budget, hw, mode="oblivious", price=False)
    monkeypatch.setattr(planner_mod, "guessed_reads", lambda size, pers, ae, budget: (
        np.full(len(size), float(MIN_READS)), np.zeros(len(size), np.int64)))
    two_reads = plan(tr, budget, hw, mode="oblivious", price=False)
    assert _remote_blocks(guessed) == {1} and _remote_blocks(two_reads) == {0}
    cache: dict = {}
    t_guessed, t_two = (sim.simulate(tr, p, hw, budget, _cache=cache).iteration_time_s
                        for p in (guessed, two_reads))
    assert t_guessed < t_two


def _two_weights_trace():
    """Two 48 MiB blocks, the first read at every other tick, the second at two ticks,
    and a 100 MiB activation touched at every tick: 196 MiB live, ticks too short to move
    either block in between."""
    tb = TraceBuilder(source="synthetic", name="two-weights")
    hot, cold = written_before_the_loop(tb, 48 * MiB, 48 * MiB, tick_ns=10_000)
    for _ in range(3):
        tb.mark()
        x = tb.alloc(100 * MiB)
        for t in range(24):
            tb.access(x, AccessMode.READ_WRITE)
            if t % 2 == 0:
                tb.access(hot)
            if t in (5, 17):
                tb.access(cold)
            tb.next_tick(10_000)
        tb.free(x)
        tb.next_tick(10_000)
    return tb.build()


def test_seen_touches_map_the_fewest_reads_first_among_blocks_of_one_size():
    # 32 MiB over a 164 MiB budget: either block clears it; the one read twice costs 2
    # reads of 48 MiB remote, the one read 12 times 12 (the order of allocation took it)
    p = plan(_two_weights_trace(), 164 * MiB, "h200-pcie5", mode="sampled", price=False)
    assert _remote_blocks(p) == {1}, p.meta["predicted"]
    assert p.meta["predicted"]["max_over_budget_bytes"] == 0
