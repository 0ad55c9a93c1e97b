"""Note [Discards judged against keeping them] (planner/_pricing.py): a priced plan's
discards are left out where the plan without them is no slower in every view it is judged
in, and kept where any view shows them paying."""
from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from _planner_helpers import training_trace
from uvm_sched import sim
from uvm_sched.planner import Plan
from uvm_sched.planner._lean import without_discards, without_rows
from uvm_sched.planner._pricing import _kept_reads_view, _views
from uvm_sched.trace import zoo


def _plan(discards: int) -> Plan:
    acts = ["prefetch_to_device", "prefetch_to_host"] + ["discard"] * discards
    return Plan(pd.DataFrame({"tick": range(len(acts)), "action": acts,
                              "block": range(len(acts)), "persistent": False,
                              "offset": 0, "bytes": 1 << 20}),
                {"budget_bytes": 1 << 30, "period_events": 16, "alloc_sizes": [1 << 20] * 8})


def _fake(monkeypatch, times, bare):
    """``times``: per view (0 the events alone, 1 the kept reads, 2 one unseen use, told by
    their rows), (with discards, without) iteration seconds, or None for a view the
    simulator refuses (``BudgetError``); returns the views simulated, in order."""
    rows = {len(v.kind): j for j, v in enumerate(
        (bare, _kept_reads_view(bare, bare.iteration_starts),
         _kept_reads_view(bare, bare.iteration_starts, midpoints=True)))}
    assert len(rows) == 3
    calls: list = []

    def simulate(view, p, prof, budget, _stop_above_s=float("inf"), **_):
        j = rows[len(view.kind)]
        calls.append(j)
        if times[j] is None:
            raise sim.BudgetError("refused")
        t = times[j][0 if (p.actions["action"] == "discard").any() else 1]
        return SimpleNamespace(iteration_time_s=min(t, _stop_above_s * 1.5),
                               counters={"stopped": t > _stop_above_s},
                               stall_breakdown={"host": 0.0})

    monkeypatch.setattr(sim, "simulate", simulate)
    return calls


@pytest.fixture(scope="module")
def bare():
    return zoo.allocator_only(training_trace(iters=3, layers=3))


def _judge(bare, p):
    views = _views(bare, 1 << 30, bare.iteration_starts, False)
    return without_discards(views, p, 1 << 30, None, accesses=False)


def test_discards_no_view_shows_paying_are_left_out(monkeypatch, bare):
    _fake(monkeypatch, [(2.0, 1.5), (3.0, 3.0), (3.0, 2.9)], bare)
    out, why, alone_s = _judge(bare, _plan(3))
    assert list(out.actions["action"]) == ["prefetch_to_device", "prefetch_to_host"]
    assert why.startswith("left out: 3 discards") and alone_s is None  # no view is the judge's


def test_discards_one_view_shows_paying_are_kept(monkeypatch, bare):
    calls = _fake(monkeypatch, [(2.0, 1.5), (3.0, 3.3), (3.0, 2.9)], bare)
    p = _plan(2)
    out, why, _ = _judge(bare, p)
    assert out is p and why.startswith("kept: 2 discards") and "the kept reads" in why
    assert calls == [1, 1]  # decided in the kept reads, run first: no other view is run
    calls = _fake(monkeypatch, [(2.0, 2.1), (3.0, 3.0), (3.0, 2.9)], bare)
    assert _judge(bare, p)[1].endswith("slower with the allocator events alone")
    assert calls == [1, 1, 2, 2, 0, 0]


def test_the_one_unseen_use_view_judges_the_discards_not_the_populates(monkeypatch, bare):
    # shown slower only there, the discards stay; rows judged without it (the populates
    # that move nothing, ``_lean._POPULATES_ORDER``) are left out
    calls = _fake(monkeypatch, [(2.0, 2.0), (3.0, 3.0), (3.0, 3.9)], bare)
    p = _plan(2)
    out, why, _ = _judge(bare, p)
    assert out is p and why.endswith("slower with one unseen use per freed block")
    calls.clear()
    views = _views(bare, 1 << 30, bare.iteration_starts, False)
    disc = (p.actions["action"] == "discard").to_numpy()
    out, why, _ = without_rows(views, p, disc, "rows", 1 << 30, None, accesses=False,
                               unseen_use=False)
    assert "discard" not in set(out.actions["action"]) and "any of 2 views" in why
    assert 2 not in calls


def test_a_view_the_simulator_refuses_judges_nothing(monkeypatch, bare):
    _fake(monkeypatch, [None, (3.0, 3.0), (3.0, 2.9)], bare)
    out, why, _ = _judge(bare, _plan(1))
    assert "discard" not in set(out.actions["action"]) and "any of 2 views" in why
    _fake(monkeypatch, [None, None, None], bare)
    p = _plan(1)
    assert _judge(bare, p) == (p, "kept: 1 discards, no view could judge them", None)


def test_a_plan_without_discards_is_returned_as_it_is(monkeypatch, bare):
    calls = _fake(monkeypatch, [(1.0, 1.0)] * 3, bare)
    p = _plan(0)
    assert _judge(bare, p) == (p, None, None) and not calls


def test_times_the_pricing_ran_to_their_end_are_not_simulated_again(monkeypatch, bare):
    calls = _fake(monkeypatch, [(2.0, 1.5), (3.0, 3.3), (3.0, 2.9)], bare)
    p = _plan(2)
    views = _views(bare, 1 << 30, bare.iteration_starts, False)
    out, why, _ = without_discards(views, p, 1 << 30, None, accesses=False, known={1: 3.0})
    assert out is p and calls == [1]  # only the run without the discards


def test_where_the_accesses_are_known_the_judges_figure_without_them_is_given(monkeypatch,
                                                                            bare):
    calls = _fake(monkeypatch, [(2.0, 1.5), None, None], bare)
    views = _views(bare, 1 << 30, (), True)
    out, why, alone_s = without_discards(views, _plan(2), 1 << 30, None, accesses=True)
    assert alone_s == 1.5 and why.endswith("in any of 1 view") and calls == [0, 0]


def test_any_rows_are_judged_as_the_discards_are(monkeypatch, bare):
    # Note [Populates that move nothing]: the rows marked are left out where no view shows
    # the plan slower without them, kept where one does
    p = _plan(1)
    marked = (p.actions["action"] == "prefetch_to_device").to_numpy()
    views = _views(bare, 1 << 30, bare.iteration_starts, False)
    for kept_s, left_out in ((2.9, True), (3.1, False)):
        def simulate(view, plan, prof, budget, _stop_above_s=float("inf"), **_):
            t = 3.0 if (plan.actions["action"] == "prefetch_to_device").any() else kept_s
            return SimpleNamespace(iteration_time_s=min(t, _stop_above_s * 1.5),
                                   counters={"stopped": t > _stop_above_s},
                                   stall_breakdown={"host": t / 10})

        monkeypatch.setattr(sim, "simulate", simulate)
        hosts = {0: 0.3}
        out, why, times = without_rows(views, p, marked, "populates", 1 << 30, None,
                                       accesses=False, hosts=hosts)
        assert (out is not p) is left_out and why.startswith(
            "left out: 1 populates" if left_out else "kept: 1 populates"), why
        assert "prefetch_to_device" not in set(out.actions["action"]) or not left_out
        assert times == ({1: kept_s, 2: kept_s, 0: kept_s} if left_out else {1: 3.0})
        # the host stalls follow the plan returned (calls_hidden reads them)
        assert hosts == ({j: kept_s / 10 for j in (1, 2, 0)} if left_out else
                         {0: 0.3, 1: 0.3})
