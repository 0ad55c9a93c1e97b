"""Evictions right after a seen touch (``planner._core``, Note [Evictions right after a seen
touch]): hand-made iterations with a known answer (fast)."""
from __future__ import annotations

from uvm_sched.sim import simulate

from _planner_helpers import a_and_b, block_action_ticks, plan_one_iteration, slow_link

N_TICKS = 200


def _late_pressure():
    """A (4000 B) lives ticks 0..199, is written at tick 0 and read at 199; B (4000 B)
    lives 60..70, so under a 5000-byte budget A must be off the device by tick 60 (60 us:
    ticks are 1 us). A sampled plan sees both touches, so A's gap (0, 199) is a candidate
    at the 32-tick guard, whose eviction starts at tick 33."""
    return a_and_b(N_TICKS, 60, 70, name="late-pressure", mark=True, written_first=True)


def _plan(tr, mode: str, bytes_per_s: float):
    return plan_one_iteration(tr, mode, slow_link(bytes_per_s))


def test_a_write_back_the_link_cannot_finish_in_time_leaves_right_after_the_touch():
    # 100 MB/s: A's write-back takes 40 us; from the 32-tick guard (33 us) it lands at
    # 73 us, 13 us after B needs the room; from the touch (1 us) it lands at 41 us
    tr = _late_pressure()
    p, pat = _plan(tr, "sampled", 1e8)
    out = block_action_ticks(p, pat, "prefetch_to_host")
    back = block_action_ticks(p, pat, "prefetch_to_device")
    assert len(out) == 1 and len(back) == 1
    assert out[0] < 8
    assert back[0] <= N_TICKS - 1 - 32  # the prefetch end keeps the widest guard
    assert p.meta["predicted"]["eviction_wait_s"] == 0.0
    assert p.meta["predicted"]["early_evictions"] is True  # the second build was kept
    # simulated: the compute never waits for the write-back (the 32-tick guard's plan
    # waits 13 us at tick 60)
    r = simulate(tr, p, slow_link(1e8), 5000)
    assert r.timeline["stall_evict_s"].sum() == 0.0


def test_a_write_back_that_lands_in_time_keeps_the_widest_guard():
    # 1 GB/s: 4 us from the 32-tick guard, long before B: no wait, the safest guard stays
    p, pat = _plan(_late_pressure(), "sampled", 1e9)
    assert 32 <= block_action_ticks(p, pat, "prefetch_to_host")[0] < 60
    assert p.meta["predicted"]["early_evictions"] is False


def test_guessed_uses_keep_their_guard_however_slow_the_link():
    # oblivious mode cannot see that no op reads A after its ALLOC: the guard stays
    p, pat = _plan(_late_pressure(), "oblivious", 1e8)
    assert block_action_ticks(p, pat, "prefetch_to_host")[0] >= 32
