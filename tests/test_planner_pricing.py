"""``planner._pricing.price``'s choice among the plan, its advice alone and no plan, with the
simulator replaced by a table of iteration and stall times per (view, candidate): oblivious
mode prices on three views of the allocator events (the events as they are, the kept reads,
one unseen use per freed block), in that order."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from _planner_helpers import training_trace
from uvm_sched import sim
from uvm_sched.planner._pricing import price
from uvm_sched.trace import zoo

CANDS = ("plan", "advice-only", "none")


@pytest.fixture(scope="module")
def bare():
    return zoo.allocator_only(training_trace(iters=3, layers=3))


def _fake(monkeypatch, table):
    """``table``: per view, ``{label: (iteration s, stall s)}``; returns the list of the
    (view, label) pairs simulated, in order. Each view simulates its candidates in their
    order (all or some), so a label no later than the previous one starts the next view
    (the views may be one trace object: a trace with no kept block is its own view)."""
    calls: list = []

    def simulate(view, p, prof, budget, **_):
        v = 0 if not calls else calls[-1][0] + (CANDS.index(p) <= CANDS.index(calls[-1][1]))
        calls.append((v, p))
        t, stall = table[v][p]
        return SimpleNamespace(iteration_time_s=t, stall_time_s=stall)

    monkeypatch.setattr(sim, "simulate", simulate)
    return calls


def _price(bare):
    return price(bare, {c: c for c in CANDS}, 1 << 30, None, starts=[0])[0]


def test_a_tie_no_view_shows_faster_than_no_plan_emits_no_plan(monkeypatch, bare):
    same = {c: (1.0, 0.5) for c in CANDS}
    _fake(monkeypatch, [same, same, same])
    assert _price(bare) == "none"


def test_a_tie_that_a_view_shows_faster_keeps_the_plan(monkeypatch, bare):
    # the events alone cannot refute the plan (no plan does not stall there); the kept
    # reads show it faster
    _fake(monkeypatch, [{"plan": (2.0, 1.0), "advice-only": (1.0, 0.0), "none": (1.0, 0.0)},
                        {"plan": (1.0, 0.5), "advice-only": (2.0, 1.5), "none": (2.0, 1.5)},
                        {c: (1.0, 0.5) for c in CANDS}])
    assert _price(bare) == "plan"


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
    assert calls == [(v, c) for v in (0, 1) for c in CANDS] + [(2, "plan"), (2, "none")]
    # no candidate slower in the events alone: the third view is not simulated at all
    calls = _fake(monkeypatch, [{c: (1.0, 0.0) for c in CANDS}, kept, mid])
    assert _price(bare) == "plan"
    assert calls == [(v, c) for v in (0, 1) for c in CANDS]
