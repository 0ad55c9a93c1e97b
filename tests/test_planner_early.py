"""Prefetches pulled forward where the budget has room (``planner._early``): hand-made
iterations with a known answer (fast)."""
from __future__ import annotations

import pytest

from uvm_sched.planner import plan
from uvm_sched.sim import simulate

from _planner_helpers import a_and_b, one_iteration, slow_link


def _room_back_at(b_from: int = 6, b_to: int = 8, n_ticks: int = 20):
    """A (4000 B) is read at ticks 0 and n-1; B (4000 B) lives and is used at
    b_from..b_to, so under a 5000-byte budget A must be away over B's life and there is
    room for it again from tick b_to + 1. A 1-byte block allocated and freed at every tick
    gives the runtime a control point there."""
    return a_and_b(n_ticks, b_from, b_to, name="room-back")


def _prefetch_ticks(p, pat) -> list[int]:
    """The trace ticks of the allocator events A's prefetches are issued at."""
    ev_tick = pat.events.set_index("event")["tick"]
    a = p.actions[(p.actions["action"] == "prefetch_to_device") & (p.actions["block"] == 0)]
    return [int(ev_tick.loc[k]) for k in a["tick"]]


@pytest.mark.parametrize("b_to", [8, 12])
def test_a_seen_block_comes_back_as_soon_as_the_budget_has_room(b_to):
    # 4 GB/s: 4000 B take one tick. As late as possible the prefetch would be issued at
    # tick 17 (one tick before the read at 19, at the allocation of tick 17's
    # control point); with the touches seen it goes at the first control point after B's
    # free, where the room is back.
    tr = _room_back_at(b_to=b_to)
    pat = one_iteration(tr)
    p = plan(tr, 5000, hw=slow_link(4e9), pattern=pat, mode="sampled", populate=False,
             guard=1, price=False)
    assert _prefetch_ticks(p, pat) == [b_to + 1]
    pred = p.meta["predicted"]
    assert pred["over_budget_ticks"] == 0 and pred["stall_s"] == 0
    hw = slow_link(4e9)
    demand = simulate(tr, "demand", hw, 5000).iteration_time_s
    assert simulate(tr, p, hw, 5000).iteration_time_s < demand


def test_a_guessed_gap_keeps_its_prefetch_at_the_deadline():
    # oblivious mode guesses A's uses from its lifetime ends: the room B leaves may be
    # needed by a block touched inside its guessed gap, so A's prefetch stays just in time
    tr = _room_back_at()
    pat = one_iteration(tr)
    p = plan(tr, 5000, hw=slow_link(4e9), pattern=pat, mode="oblivious", populate=False,
             guard=1, price=False)
    assert _prefetch_ticks(p, pat) == [17]

