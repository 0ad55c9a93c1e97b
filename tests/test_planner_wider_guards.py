"""Evictions repeated at the wider guards (``planner._wider_guards``, Note [Evictions at the
wider guards]): hand-made iterations with a known answer (fast)."""
from __future__ import annotations

import dataclasses

from uvm_sched.sim import simulate

from _planner_helpers import a_and_b, block_action_ticks, plan_one_iteration, slow_link

N_TICKS = 200


def _early_pressure(read_at: int | None = None, b_from: int = 12, b_to: int = 20):
    """A (4000 B) lives ticks 0..199 and is read at its ends (and at ``read_at``, a read
    the oblivious model cannot see); B (4000 B) lives b_from..b_to, so under a 5000-byte
    budget A must leave before tick b_from: before its 16- and 32-tick guards have passed,
    after its 8-tick one. A 1-byte block allocated and freed at every tick gives the runtime
    a control point there."""
    return a_and_b(N_TICKS, b_from, b_to, reads=() if read_at is None else (read_at,),
                   name="early-pressure", mark=True)


def _plan(tr, mode: str, hw=None):
    return plan_one_iteration(tr, mode, hw or slow_link(4e9))


def test_a_gap_narrowed_for_the_budget_is_evicted_again_at_its_widest_guard():
    p, pat = _plan(_early_pressure(), "oblivious")
    out = block_action_ticks(p, pat, "prefetch_to_host")
    back = block_action_ticks(p, pat, "prefetch_to_device")
    assert p.meta["predicted"]["evictions"] == 1 and len(back) == 1
    # the 8-tick guard's eviction (before B claims its room at 12), then the 32-tick
    # guard's one, before A comes back for its read at 199
    assert len(out) == 2
    assert 8 <= out[0] < 12 and 32 <= out[1] < back[0] < N_TICKS - 1
    assert p.meta["predicted"]["over_budget_ticks"] == 0


def test_a_block_too_small_to_pay_for_the_repeated_call_is_evicted_once():
    # 1 ms per driver call: A's 4000 bytes overstaying cost the driver 4000 x 1.5 ns
    # (write-back at 2 GB/s, fault-back at 1 GB/s), far less than the call
    hw = dataclasses.replace(slow_link(4e9), action_call_s=1e-3)
    p, pat = _plan(_early_pressure(), "oblivious", hw)
    assert len(block_action_ticks(p, pat, "prefetch_to_host")) == 1


def test_a_gap_at_its_widest_guard_is_evicted_once():
    # B after A's 32-tick guard: no narrower guard is needed, nothing is repeated
    p, pat = _plan(_early_pressure(b_from=60, b_to=70), "oblivious")
    assert len(block_action_ticks(p, pat, "prefetch_to_host")) == 1


def test_a_gap_between_seen_touches_is_evicted_once():
    # sampled mode sees A's touches: its guard only absorbs timing slack
    p, pat = _plan(_early_pressure(), "sampled")
    assert len(block_action_ticks(p, pat, "prefetch_to_host")) == \
        len(block_action_ticks(p, pat, "prefetch_to_device"))


def test_a_block_an_unseen_read_brings_back_leaves_again_at_the_wider_guard():
    # A read at tick 24 (past the 16-tick guard, inside the 32-tick one): the driver
    # faults A back; the eviction repeated at the 32-tick guard writes it back again,
    # where without it A would stay on the device until its prefetch
    tr = _early_pressure(read_at=24)
    p, pat = _plan(tr, "oblivious")
    r = simulate(tr, p, slow_link(4e9), 5000)
    tr_a = r.transfers[(r.transfers["block"] == 0) & (r.transfers["direction"] == "d2h")]
    tick_of = r.timeline.set_index("tick")["start_s"]
    assert len(tr_a) == 2
    assert tr_a["start_s"].max() > tick_of.loc[24]
