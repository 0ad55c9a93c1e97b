"""The planner judged by the simulator, and kept honest about what it may read."""
from __future__ import annotations

import numpy as np
import pytest

from uvm_sched.planner import plan
from uvm_sched.sim import simulate
from uvm_sched.trace import EventKind, Trace

from _planner_helpers import training_trace


@pytest.fixture(scope="module")
def trace():
    return training_trace(iters=4, layers=8)


@pytest.mark.parametrize("budget,mode", [("90%", "oblivious"), ("75%", "sampled"),
                                         ("60%", "sampled")])
def test_a_plan_that_fits_its_budget_never_makes_the_driver_evict(trace, budget, mode):
    # pool=False: frees release memory at once, which is what the plan's discards at FREE
    # events give (the simulator's pooled model does not execute them yet)
    p = plan(trace, budget, mode=mode)
    assert p.meta["predicted"]["over_budget_ticks"] == 0
    r = simulate(trace, p, budget=budget, pool=False)
    assert (r.transfers["cause"] == "evict").sum() == 0
    assert r.faults == 0
    assert r.peak_resident_bytes <= r.budget_bytes
    demand = simulate(trace, "demand", budget=budget, pool=False)
    assert r.iteration_time_s <= demand.iteration_time_s


def test_uvm_sched_policy_plans_and_simulates_in_one_call(trace):
    r = simulate(trace, "uvm-sched", budget="75%", mode="sampled")
    demand = simulate(trace, "demand", budget="75%")
    assert r.iteration_time_s < demand.iteration_time_s
    assert r.divergences == 0


def test_sampled_mode_finds_the_optimizer_state_windows_oblivious_cannot_see(trace):
    obl = plan(trace, "75%", mode="oblivious", remote_fallback=False)  # evictions only
    smp = plan(trace, "75%", mode="sampled")
    moved = lambda p: p.actions[p.actions["persistent"] & (p.actions["action"] == "prefetch_to_host")]  # noqa: E731
    assert len(moved(obl)) == 0
    assert len(moved(smp)) > 0
    ideal = simulate(trace, "ideal").iteration_time_s
    t_obl = simulate(trace, obl, budget="75%", pool=False).iteration_time_s
    t_smp = simulate(trace, smp, budget="75%", pool=False).iteration_time_s
    assert t_smp < t_obl
    assert t_smp / ideal < 1.2


def _strip_accesses(t: Trace) -> Trace:
    c = t.columns
    keep = c["kind"] != EventKind.ACCESS
    return Trace({k: v[keep] for k, v in c.items()}, tick_ns=t.tick_ns, meta=t.meta)


@pytest.mark.parametrize("budget", ["75%", "50%"])
def test_oblivious_plan_is_identical_without_ground_truth_accesses(trace, budget):
    stripped = _strip_accesses(trace)
    assert not stripped.has_accesses
    a, b = plan(trace, budget, mode="oblivious"), plan(stripped, budget, mode="oblivious")
    assert a.actions.equals(b.actions)
    drop = lambda m: {k: v for k, v in m.items() if k != "predicted"}  # noqa: E731
    assert drop(a.meta) == drop(b.meta)
    pa = {k: v for k, v in a.meta["predicted"].items() if not k.endswith("time_s")}
    pb = {k: v for k, v in b.meta["predicted"].items() if not k.endswith("time_s")}
    assert pa == pb


def test_sampled_mode_needs_samples_from_somewhere(trace):
    with pytest.raises(ValueError, match="ACCESS rows"):
        plan(_strip_accesses(trace), "75%", mode="sampled")


def test_sparse_noisy_samples_are_reproducible_and_still_plan(trace):
    a = plan(trace, "75%", mode="sampled", sample_rate=0.3, noise=2, seed=7)
    b = plan(trace, "75%", mode="sampled", sample_rate=0.3, noise=2, seed=7)
    assert a.actions.equals(b.actions)
    assert a.meta["samples"]["sample_rate"] == 0.3
    r = simulate(trace, a, budget="75%", pool=False)
    assert r.iteration_time_s <= simulate(trace, "demand", budget="75%", pool=False).iteration_time_s


def test_every_action_names_a_block_of_the_learned_iteration(trace):
    from uvm_sched.pattern import analyze

    pat = analyze(trace)
    p = plan(trace, "50%", pattern=pat)
    local = p.actions[~p.actions["persistent"]]
    n_alloc = int((pat.events["kind"] == "alloc").sum())
    assert local["block"].between(0, n_alloc - 1).all()
    assert p.meta["alloc_sizes"] == pat.events.loc[pat.events["kind"] == "alloc", "size"].tolist()
    assert p.meta["period_events"] == pat.period_events
    assert p.meta["sync"] == "marker"


def test_remote_fallback_maps_persistent_blocks_only_for_a_large_excess(trace):
    # 75%: eviction of activations nearly meets the budget -> nothing remote;
    # 40%: the persistent blocks must go: mapped host-resident (advice + push out)
    small = plan(trace, "75%", mode="oblivious")
    assert small.meta["predicted"]["remote_blocks"] == 0
    big = plan(trace, "40%", mode="oblivious")
    assert big.meta["predicted"]["remote_blocks"] > 0
    adv = big.actions[big.actions["action"] == "advise_preferred_host"]
    assert adv["persistent"].all()
    assert set(adv["block"]) == set(big.actions.loc[big.actions["action"] == "advise_accessed_by", "block"])
    off = plan(trace, "40%", mode="oblivious", remote_fallback=False)
    assert off.meta["predicted"]["remote_blocks"] == 0
    ideal = simulate(trace, "ideal").iteration_time_s
    t_big = simulate(trace, big, budget="40%").iteration_time_s / ideal
    t_off = simulate(trace, off, budget="40%").iteration_time_s / ideal
    assert t_big < t_off


def test_tuning_in_the_simulator_keeps_the_fastest_guard(trace):
    """simulate(..., tune=...) is Scheduler(tune=...) with the simulator for a clock: each
    candidate guard's plan is run and the fastest one's result returned."""
    from uvm_sched.planner import plan as make_plan

    times = {str(g): simulate(trace, make_plan(trace, "60%", guard=g), budget="60%")
             .iteration_time_s for g in ("auto", 4, 1)}
    r = simulate(trace, "uvm-sched", budget="60%", tune=(4, 1))
    best = min(times, key=times.get)
    assert r.counters["tuned_guard"] == best
    assert r.iteration_time_s == pytest.approx(times[best])
    assert {g: r.counters[f"tuning_{g}_s"] for g in times} == pytest.approx(times)


def test_sampled_mode_tuned_against_its_oblivious_plan_is_never_slower_than_either(trace):
    """tune=("oblivious",) in sampled mode measures the plan without the samples too and
    keeps the faster: by the clock, sampled mode cannot lose to the oblivious one."""
    s = simulate(trace, "uvm-sched", budget="60%", mode="sampled").iteration_time_s
    o = simulate(trace, "uvm-sched", budget="60%", mode="oblivious").iteration_time_s
    r = simulate(trace, "uvm-sched", budget="60%", mode="sampled", tune=("oblivious",))
    assert r.iteration_time_s == pytest.approx(min(s, o))
    assert r.counters["tuned_guard"] == ("oblivious" if o < s else "auto")
    assert r.counters["tuning_oblivious_s"] == pytest.approx(o)
