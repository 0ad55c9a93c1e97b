"""``planner._pricing.price``'s choice among the plan, its advice alone and no plan, with the
simulator replaced by a table of iteration and stall times per (view, candidate): oblivious
mode prices on four views of the allocator events (the events as they are, the kept reads,
one unseen use per freed block, the kept reads in reverse order)."""
from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import pytest

from _planner_helpers import training_trace
from uvm_sched import sim
from uvm_sched.planner import _pricing
from uvm_sched.planner._pricing import _REVERSE_SLACK, price
from uvm_sched.trace import zoo

CANDS = ("plan", "advice-only", "none")


@pytest.fixture(scope="module")
def bare():
    return zoo.allocator_only(training_trace(iters=3, layers=3))


ORDER = ("none", "plan", "advice-only")  # each view runs no plan first
SAME = {c: (1.0, 0.5) for c in CANDS}  # a view where every candidate equals no plan


def _fake(monkeypatch, table):
    """``table``: per view, ``{label: (iteration s, stall s)}``, in ``_views``'s order (the
    events alone, the kept reads, one unseen use, the kept reads in reverse order; a table
    of three leaves the last out); returns the list of the (view, label) pairs simulated, in
    order. A run asked to stop above a time it would pass returns a time between the two,
    as stopped (the simulator's ``counters["stopped"]``)."""
    calls: list = []

    def simulate(view, p, prof, budget, _stop_above_s=float("inf"), **_):
        v = view.index
        calls.append((v, p))
        t, stall = table[v][p]
        stopped = t > _stop_above_s
        if stopped:
            t, stall = (t + _stop_above_s) / 2, stall / 2
        return SimpleNamespace(iteration_time_s=t, stall_time_s=stall,
                               counters={"stopped": stopped})

    views = [partial(SimpleNamespace, index=j) for j in range(len(table))]
    monkeypatch.setattr(_pricing, "_views", lambda *a: views)
    monkeypatch.setattr(sim, "simulate", simulate)
    return calls


def _price(bare):
    return price(bare, {c: c for c in CANDS}, 1 << 30, None, starts=[0])[0]


def test_a_tie_no_view_shows_faster_than_no_plan_emits_no_plan(monkeypatch, bare):
    _fake(monkeypatch, [SAME, SAME, SAME])
    assert _price(bare) == "none"


def test_a_tie_that_a_view_shows_faster_keeps_the_plan(monkeypatch, bare):
    # the events alone cannot refute the plan (no plan does not stall there); the kept
    # reads show it faster
    _fake(monkeypatch, [{"plan": (2.0, 1.0), "advice-only": (1.0, 0.0), "none": (1.0, 0.0)},
                        {"plan": (1.0, 0.5), "advice-only": (2.0, 1.5), "none": (2.0, 1.5)}, SAME])
    assert _price(bare) == "plan"


def test_a_tie_at_the_worst_view_is_broken_by_the_other_views(monkeypatch, bare):
    # the events alone cannot refute either candidate (no plan does not stall there), so
    # both are priced at no plan's time, and they cost the same there; the kept reads
    # show advice-only faster than the plan, so it goes out although the plan comes first
    # (Note [Ties broken by the other views]; gru-s61 on gh200-c2c at 60% of peak)
    events = {"plan": (1.8, 0.8), "advice-only": (1.8, 0.8), "none": (1.0, 0.0)}
    kept = {"plan": (1.2, 1.0), "advice-only": (0.6, 0.4), "none": (2.0, 1.8)}
    _fake(monkeypatch, [events, kept, SAME])
    label, times, _ = price(bare, {c: c for c in CANDS}, 1 << 30, None, starts=[0])
    assert label == "advice-only"
    assert times["plan"] == times["advice-only"] == times["none"]  # the prices stay as they were
    # the other way round, the plan goes out
    _fake(monkeypatch, [events, {**kept, "plan": (0.5, 0.3)}, SAME])
    assert _price(bare) == "plan"


def test_a_tie_goes_to_the_least_worst_regret_over_the_views_that_rank(monkeypatch, bare):
    # both tie at no plan's time (the events alone cannot refute them) and the kept reads
    # show the plan faster; in the events alone, where none of the guessed reads come, the
    # plan's moves cost 3.7x the fastest (no plan) and the advice's 1.8x, and with the
    # kept reads the advice is 1.8x the plan: worst regrets 3.7 and 1.8, the advice goes
    # out (Note [The hint that costs least when wrong]; mlp-s167 on h200-pcie5 at 75%)
    events = {"plan": (3.7, 2.7), "advice-only": (1.8, 0.8), "none": (1.0, 0.0)}
    kept = {"plan": (0.5, 0.3), "advice-only": (0.9, 0.7), "none": (2.0, 1.8)}
    _fake(monkeypatch, [events, kept, SAME])
    label, times, _ = price(bare, {c: c for c in CANDS}, 1 << 30, None, starts=[0])
    assert label == "advice-only"
    assert times["plan"] == times["advice-only"] == times["none"]  # the prices stay as they were
    # the other way round, the plan goes out
    _fake(monkeypatch, [{**events, "plan": (1.5, 0.5)}, kept, SAME])
    assert _price(bare) == "plan"
    # no plan is not among them: it is shown faster nowhere (Note [A tie acts less])
    _fake(monkeypatch, [events, {**kept, "advice-only": (2.0, 1.8)}, SAME])
    assert _price(bare) == "plan"


def test_a_plan_far_ahead_on_the_kept_reads_keeps_the_tie(monkeypatch, bare):
    # the plan costs more than its advice in the events alone (2.0x against 1.5x the
    # fastest), but with the kept reads the advice is 4.5x the plan: worst regrets 2.0 and
    # 4.5, the plan goes out (encdec-s168 on a100-40gb-pcie4 at 75% of peak: 0.12x demand
    # paging, its advice 0.55x)
    events = {"plan": (2.0, 1.0), "advice-only": (1.5, 0.5), "none": (1.0, 0.0)}
    kept = {"plan": (0.2, 0.1), "advice-only": (0.9, 0.7), "none": (2.0, 1.8)}
    _fake(monkeypatch, [events, kept, SAME])
    assert _price(bare) == "plan"


def test_the_events_alone_rank_on_runs_made_to_their_end(monkeypatch, bare):
    # the events alone stop a run once it is slower than no plan there (Note [Runs stopped
    # once decided]): its time is then only a lower bound, which cannot rank; so the runs
    # stopped there are made again, to their end, for the candidates tied and shown
    events = {"plan": (3.7, 2.7), "advice-only": (1.8, 0.8), "none": (1.0, 0.0)}
    kept = {"plan": (0.5, 0.3), "advice-only": (0.9, 0.7), "none": (2.0, 1.8)}
    calls = _fake(monkeypatch, [events, kept, SAME])
    assert _price(bare) == "advice-only"
    assert calls.count((0, "plan")) == 2 and calls.count((0, "advice-only")) == 2
    # where a single candidate is shown faster, nothing is run again
    calls = _fake(monkeypatch, [events, {**kept, "advice-only": (2.0, 1.8)}, SAME])
    assert _price(bare) == "plan" and calls.count((0, "plan")) == 1


def test_worst_first_compares_the_ratios_worst_first_in_turn():
    from uvm_sched.planner._pricing import _worst_first

    ratios = {"plan": [1.0, 0.59], "advice-only": [0.29, 1.0], "none": [1.0, 1.0]}
    assert _worst_first(["plan", "advice-only", "none"], ratios) == ["advice-only"]
    # equal up to float rounding at every place: all stay, in their order
    ratios = {"plan": [1.0, 0.5], "advice-only": [0.5 * (1 + 1e-12), 1.0]}
    assert _worst_first(["plan", "advice-only"], ratios) == ["plan", "advice-only"]
    # a shorter list reads as no plan's ratio (1) where it has no figure
    assert _worst_first(["a", "b"], {"a": [1.0], "b": [1.0, 0.9]}) == ["b"]


def test_the_unseen_use_view_refutes_a_plan_the_events_show_slower_too(monkeypatch, bare):
    kept = {"plan": (1.0, 0.5), "advice-only": (1.5, 1.0), "none": (2.0, 1.5)}
    mid = {"plan": (3.0, 2.5), "advice-only": (1.0, 0.5), "none": (1.0, 0.5)}
    _fake(monkeypatch, [{"plan": (2.0, 1.0), "advice-only": (1.0, 0.0), "none": (1.0, 0.0)},
                        kept, mid])
    assert _price(bare) == "advice-only"
    # the same unseen-use view, but the events alone show the plan no slower: it stands
    _fake(monkeypatch, [{c: (1.0, 0.0) for c in CANDS}, kept, mid])
    assert _price(bare) == "plan"


def test_the_unseen_use_view_does_not_rank_candidates_it_shows_faster(monkeypatch, bare):
    # there advice-only is faster than the plan, but both beat no plan: the first two views
    # rank them (the plan)
    both = {"plan": (1.0, 0.5), "advice-only": (1.5, 1.0), "none": (2.0, 1.5)}
    _fake(monkeypatch, [both, both,
                        {"plan": (1.9, 1.4), "advice-only": (1.2, 0.7), "none": (2.0, 1.5)}])
    assert _price(bare) == "plan"


def test_the_unseen_use_view_runs_only_the_candidates_the_events_show_slower(monkeypatch,
                                                                           bare):
    kept = {"plan": (1.0, 0.5), "advice-only": (1.5, 1.0), "none": (2.0, 1.5)}
    mid = {"plan": (3.0, 2.5), "advice-only": (1.0, 0.5), "none": (1.0, 0.5)}
    events = {"plan": (2.0, 1.0), "advice-only": (1.0, 0.0), "none": (1.0, 0.0)}
    calls = _fake(monkeypatch, [events, kept, mid])
    assert _price(bare) == "advice-only"
    # the third view refutes the plan: the kept reads do not run it (Note [Refuted
    # candidates run no further views])
    assert calls == [(0, c) for c in ORDER] + [(2, "none"), (2, "plan"),
                                               (1, "none"), (1, "advice-only")]
    # no candidate slower in the events alone: the third view is not simulated at all
    calls = _fake(monkeypatch, [{c: (1.0, 0.0) for c in CANDS}, kept, mid])
    assert _price(bare) == "plan"
    assert calls == [(v, c) for v in (0, 1) for c in ORDER]


def test_a_candidate_the_events_alone_refute_runs_no_further_view(monkeypatch, bare):
    # the plan is 1.5x no plan in the events alone, where no plan stalls enough to see it
    calls = _fake(monkeypatch, [{"plan": (1.5, 1.0), "advice-only": (1.0, 0.8),
                                 "none": (1.0, 0.8)}, SAME, SAME])
    best, times, at_least = price(bare, {c: c for c in CANDS}, 1 << 30, None, starts=[0])
    assert best == "none" and at_least == ("plan",)
    # no third view at all (only no plan would run there), the kept reads without the plan
    assert calls == [(0, c) for c in ORDER] + [(1, "none"), (1, "advice-only")]
    assert times["plan"] == pytest.approx(1.5)


def test_runs_stopped_once_decided_choose_and_price_as_full_runs(monkeypatch, bare):
    # Note [Runs stopped once decided]: in the events alone the plan and the advice pass no
    # plan's time and stall (their ratio there is 1 whatever their time: stopped), and the
    # one-unseen-use view refutes the plan (stopped: its figure a lower bound)
    table = [{"plan": (5.0, 4.0), "advice-only": (1.2, 0.2), "none": (1.0, 0.0)},
             {"plan": (1.0, 0.5), "advice-only": (0.8, 0.3), "none": (2.0, 1.5)},
             {"plan": (3.0, 2.5), "advice-only": (1.0, 0.5), "none": (1.0, 0.5)}]
    _fake(monkeypatch, table)
    best, times, at_least = price(bare, {c: c for c in CANDS}, 1 << 30, None, starts=[0])
    _fake(monkeypatch, table)
    best_full, times_full, low_full = price(bare, {c: c for c in CANDS}, 1 << 30, None,
                                            starts=[0], _prune=False)
    assert best == best_full == "advice-only"
    assert at_least == ("plan",) and low_full == ()
    assert times["advice-only"] == times_full["advice-only"] == 1.0
    assert times["none"] == times_full["none"] == 1.0
    assert 1.0 < times["plan"] < times_full["plan"] == 3.0


def test_a_run_stopped_short_of_deciding_is_run_in_full(monkeypatch, bare):
    # a stopped run whose time does not decide (here: no more than no plan's) is run again
    # to its end, and priced as it
    calls = _fake(monkeypatch, [{"plan": (0.5, 0.0), "advice-only": (1.0, 0.0),
                                 "none": (1.0, 0.0)}] * 2 + [{c: (1.0, 0.0) for c in CANDS}])
    simulate = sim.simulate

    def stopping_short(view, p, prof, budget, _stop_above_s=float("inf"), **k):
        r = simulate(view, p, prof, budget, **k)  # run in full by the fake
        if _stop_above_s < float("inf"):  # as if stopped at half its time
            r.iteration_time_s, r.counters = r.iteration_time_s / 2, {"stopped": True}
        return r

    monkeypatch.setattr(sim, "simulate", stopping_short)
    best, times, at_least = price(bare, {c: c for c in CANDS}, 1 << 30, None, starts=[0])
    assert best == "plan" and at_least == ()
    assert times["plan"] == 0.5
    # each candidate but no plan simulated twice in each of the two views run
    assert [c for _, c in calls].count("plan") == 4


# Note [Kept reads in either order]: the kept reads in reverse order only refute
EVENTS_FIT = {c: (1.0, 0.0) for c in CANDS}  # no plan stalls 0 s: this view refutes nothing
KEPT = {"plan": (1.0, 0.5), "advice-only": (1.5, 1.0), "none": (2.0, 1.5)}


def test_the_kept_reads_in_reverse_order_refute_a_plan_slower_than_no_plan_there(
        monkeypatch, bare):
    reverse = {"plan": (1.4, 0.9), "advice-only": (0.9, 0.4), "none": (1.0, 0.5)}
    _fake(monkeypatch, [EVENTS_FIT, KEPT, KEPT, reverse])
    best, times, _ = price(bare, {c: c for c in CANDS}, 1 << 30, None, starts=[0])
    assert best == "advice-only"
    assert times["plan"] == pytest.approx(1.4)  # priced at its ratio there


def test_the_kept_reads_in_reverse_order_do_not_rank_candidates_faster_there(monkeypatch,
                                                                            bare):
    # advice-only is the faster there, but both beat no plan: the kept reads rank them
    reverse = {"plan": (0.9, 0.4), "advice-only": (0.5, 0.0), "none": (1.0, 0.5)}
    _fake(monkeypatch, [EVENTS_FIT, KEPT, KEPT, reverse])
    assert _price(bare) == "plan"


def test_the_kept_reads_in_reverse_order_refute_only_beyond_their_slack(monkeypatch, bare):
    # the plan slower than no plan there by less than the slack (a hair: the LLM trace's
    # advice was 1.00001x) stands; by more, it is refuted
    hair = 1 + _REVERSE_SLACK / 2
    reverse = {"plan": (hair, 0.5), "advice-only": (1.0, 0.5), "none": (1.0, 0.5)}
    _fake(monkeypatch, [EVENTS_FIT, KEPT, KEPT, reverse])
    assert _price(bare) == "plan"
    beyond = 1 + 2 * _REVERSE_SLACK
    _fake(monkeypatch, [EVENTS_FIT, KEPT, KEPT, {**reverse, "plan": (beyond, 0.5)}])
    assert _price(bare) == "advice-only"


def test_the_kept_reads_in_reverse_order_refute_only_what_no_plans_stall_shows(monkeypatch,
                                                                              bare):
    # the plan's excess over no plan there (0.6 s) is more than no plan stalls (0.5 s):
    # the view sees too little of what not acting costs to refute it
    reverse = {"plan": (1.6, 1.1), "advice-only": (1.0, 0.5), "none": (1.0, 0.5)}
    _fake(monkeypatch, [EVENTS_FIT, KEPT, KEPT, reverse])
    assert _price(bare) == "plan"
