"""The LP-guided offline planner (``plan(..., method="lp")``): priced beside the greedy plan,
never slower than it or than no plan, sampled mode only, the greedy plan with the reason
past the LP's budget; the LP's primal residency it reads."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from uvm_sched.planner import PlanError, plan
from uvm_sched.sim import simulate

from test_sim import _random_trace  # noqa: E402  (tests/ is on the path)

needs_highspy = pytest.mark.skipif(importlib.util.find_spec("highspy") is None,
                                   reason="the LP-guided planner needs HiGHS: pip install highspy")


def _cases():
    from uvm_sched.pattern._synth import training_trace

    return [("mlp-l5", training_trace(layers=5, iters=3, batch=512, markers=True)),
            ("random-0", _random_trace(0)), ("random-1", _random_trace(1))]


@needs_highspy
@pytest.mark.parametrize("case", range(3))
@pytest.mark.parametrize("pct", ["50%", "70%"])
def test_the_lp_guided_plan_is_never_slower_than_the_greedy_plan_nor_no_plan(case, pct):
    name, t = _cases()[case]
    hw = "h200-pcie5"
    lp = plan(t, pct, hw, mode="sampled", method="lp")
    greedy = plan(t, pct, hw, mode="sampled")
    t_lp = simulate(t, lp, hw, pct).iteration_time_s
    pr = lp.meta["pricing"]
    assert set(pr) >= {"plan_s", "greedy_s", "advice-only_s", "none_s"}, (name, pr)
    # the greedy candidate is the greedy method's full plan (before its own pricing)
    assert pr["greedy_s"] == pytest.approx(greedy.meta["pricing"]["plan_s"])
    assert t_lp <= simulate(t, greedy, hw, pct).iteration_time_s * (1 + 1e-9), (name, pr)
    assert t_lp <= simulate(t, "demand", hw, pct).iteration_time_s * (1 + 1e-9)
    assert t_lp == pytest.approx(min(v for k, v in pr.items() if k.endswith("_s")))
    info = lp.meta["lp"]
    assert info["bound_s"] <= t_lp * (1 + 1e-9), (name, info)
    assert set(info["teaches"]) == {"both", "lp_only", "greedy_only"}


@needs_highspy
def test_with_room_for_everything_the_lp_method_seeds_nothing_and_moves_nothing():
    name, t = _cases()[0]
    lp = plan(t, "100%", "h200-pcie5", mode="sampled", method="lp", price=False)
    moves = lp.actions["action"].isin(["prefetch_to_host"]).sum()
    assert moves == 0, lp.actions
    assert lp.meta["lp"]["teaches"]["lp_only"]["gaps"] == 0


@needs_highspy
def test_the_lp_method_refuses_oblivious_mode_and_sparse_samples_and_says_what_it_needs():
    _, t = _cases()[1]
    with pytest.raises(PlanError, match="needs mode='sampled'.*got mode='oblivious'"):
        plan(t, "50%", "h200-pcie5", mode="oblivious", method="lp")
    with pytest.raises(PlanError, match="sample_rate=1 and no noise"):
        plan(t, "50%", "h200-pcie5", mode="sampled", method="lp", sample_rate=0.5)
    with pytest.raises(PlanError, match="unknown planning method 'belady'; known: greedy, lp"):
        plan(t, "50%", "h200-pcie5", mode="sampled", method="belady")


@needs_highspy
def test_past_the_lp_time_budget_the_lp_method_returns_the_greedy_plan_with_the_reason():
    _, t = _cases()[1]
    lp = plan(t, "50%", "h200-pcie5", mode="sampled", method="lp", lp_time_limit_s=1e-6,
              price=False)
    greedy = plan(t, "50%", "h200-pcie5", mode="sampled", price=False)
    assert lp.meta["lp"]["fallback"].startswith("greedy: HiGHS did not solve")
    assert lp.actions.equals(greedy.actions)


@needs_highspy
def test_the_primal_is_a_resident_fraction_per_block_and_slot_boundary():
    from uvm_sched.hw import load_profile
    from uvm_sched.sim._lp import lp_bound
    from uvm_sched.sim._prep import prepare

    _, t = _cases()[0]
    hw = load_profile("h200-pcie5")
    prep = prepare(t, hw.va_block_bytes, hw.page_bytes)
    B = int(0.6 * t.peak_bytes)
    for k in (1, 3):
        r = lp_bound(prep, hw, B, coarsen=k, primal=True)
        S = len(r.slot_s)
        owners = np.concatenate([m for m, _, _ in r.primal])
        assert len(set(owners.tolist())) <= len(prep.bsize)
        for members, slots, vals in r.primal:
            assert ((slots >= 0) & (slots < S)).all()
            # clean and dirty are each a fraction (their sum is bounded by the budget only)
            assert (vals >= -1e-7).all() and (vals <= 2 + 1e-7).all()
        # the budget row: resident bytes at each boundary within the budget
        res = np.zeros(S)
        for members, slots, vals in r.primal:
            np.add.at(res, slots, vals * prep.bsize[members].sum())
        assert (res <= B * (1 + 1e-6)).all()
    assert lp_bound(prep, hw, B, coarsen=3).primal is None
