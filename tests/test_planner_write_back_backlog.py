"""Write-backs the compute waits behind, for guessed uses (``planner._write_back_backlog``,
Note [Write-backs the compute waits behind]): hand-made iterations with a known answer
(fast)."""
from __future__ import annotations

from uvm_sched.planner import plan
from uvm_sched.sim import simulate

from _planner_helpers import a_and_b, block_action_ticks, one_iteration, slow_link

N_TICKS = 200


def _late_pressure():
    """A (4000 B) lives ticks 0..199, is written at tick 0 and read at 199; B (4000 B)
    lives 60..70, so under a 5000-byte budget A must be off the device by tick 60 (ticks
    are 1 us). Oblivious mode guesses A used within a guard of each end of its life, so
    its gap opens 32 ticks after its ALLOC at the widest guard."""
    return a_and_b(N_TICKS, 60, 70, name="late-pressure", mark=True, written_first=True)


def _plan(tr, bytes_per_s: float, guard="auto"):
    pat = one_iteration(tr)
    return plan(tr, 5000, hw=slow_link(bytes_per_s), pattern=pat, mode="oblivious",
                populate=False, guard=guard, price=False), pat


def _eviction_stall_s(tr, p, bytes_per_s: float) -> float:
    """Simulated seconds the compute waits for evictions in flight."""
    return float(simulate(tr, p, slow_link(bytes_per_s), 5000).timeline["stall_evict_s"].sum())


def test_a_write_back_the_compute_would_wait_for_leaves_one_guard_level_earlier():
    # 100 MB/s: A's write-back takes 40 us; from the 32-tick guard (issued at tick 33) it
    # lands at 73 us, 13 us after B needs the room; one level narrower (16 ticks) it is
    # issued at tick 17 and lands at 57 us, in time
    tr = _late_pressure()
    widest, pat = _plan(tr, 1e8, guard=32)  # one guard level: nothing narrower to take
    assert widest.meta["predicted"]["eviction_wait_s"] > 0
    assert block_action_ticks(widest, pat, "prefetch_to_host")[0] >= 32
    p, pat = _plan(tr, 1e8)
    out = block_action_ticks(p, pat, "prefetch_to_host")
    assert 16 <= out[0] < 32  # one level, not the narrowest (2 ticks)
    assert p.meta["predicted"]["eviction_wait_s"] == 0.0
    assert p.meta["predicted"]["build"] > 0  # a further build was kept
    # the guess may be wrong (a read between the ALLOC and the widest guard): the eviction
    # is issued again at the widest guard's point
    assert len(out) == 2 and out[1] >= 32
    assert block_action_ticks(p, pat, "prefetch_to_device")[0] <= N_TICKS - 1 - 32
    # simulated: the widest guard's plan waits for the write-back, this one does not
    assert _eviction_stall_s(tr, widest, 1e8) > 0
    assert _eviction_stall_s(tr, p, 1e8) == 0.0


def test_a_write_back_that_lands_in_time_keeps_the_widest_guard_for_guessed_uses():
    # 1 GB/s: 4 us from the 32-tick guard, long before B: no wait, no further build
    p, pat = _plan(_late_pressure(), 1e9)
    assert 32 <= block_action_ticks(p, pat, "prefetch_to_host")[0] < 60
    assert p.meta["predicted"]["build"] == 0
