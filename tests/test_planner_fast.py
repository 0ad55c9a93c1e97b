"""The planner's compiled selection sweep and timing pass make the plans their plain-Python
references make.

``planner._fast`` and ``planner._fast_timing`` (numba) serve users; ``planner._reference``
and ``planner._queues._timing_once`` are the definitions (``UVM_SCHED_PLANNER_KERNEL=python``
switches both). Both are run on generated traces (LLM-shaped and MLP-shaped, oblivious and
sampled, budgets from tight to loose) and must give the same actions and the same
prediction.
"""
from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

pytest.importorskip("numba")

from uvm_sched.pattern import analyze  # noqa: E402
from uvm_sched.pattern._synth import training_trace  # noqa: E402
from uvm_sched.planner import PlanError, _fast, _fast_timing, plan  # noqa: E402
from uvm_sched.trace._llm import llm_trace, llm_trace_for_events  # noqa: E402


def _both(trace, budget, monkeypatch, **opts):
    """(reference plan, fast plan, compiled sweeps run for the fast one); a budget below
    what a tick needs is refused before any sweep: then both must refuse it alike."""
    pat = analyze(trace)
    with monkeypatch.context() as m:
        m.setenv("UVM_SCHED_PLANNER_KERNEL", "python")
        try:
            ref = plan(trace, budget, pattern=pat, **opts)
        except PlanError as e:
            with pytest.raises(PlanError, match=re.escape(str(e))):
                plan(trace, budget, pattern=pat, **opts)
            assume(False)
    before = _fast.calls()
    fast = plan(trace, budget, pattern=pat, **opts)
    return ref, fast, _fast.calls() - before


def _timing_passes(fn) -> int:
    """How many compiled timing passes (``_fast_timing``) ``fn()`` made."""
    before = _fast_timing.calls()
    fn()
    return _fast_timing.calls() - before


def _assert_same(ref, fast):
    assert ref.actions.equals(fast.actions)
    a = {k: v for k, v in ref.meta["predicted"].items() if k != "plan_time_s"}
    b = {k: v for k, v in fast.meta["predicted"].items() if k != "plan_time_s"}
    assert a == b


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(layers=st.integers(1, 6), mb=st.integers(1, 3), iters=st.integers(2, 3),
       hidden=st.sampled_from([64, 256, 1024]), seq=st.sampled_from([32, 256]),
       pct=st.integers(15, 95))
def test_fast_sweep_plans_as_the_reference_on_llm_traces(layers, mb, iters, hidden, seq, pct,
                                                          monkeypatch):
    trace = llm_trace(layers=layers, micro_batches=mb, iters=iters, hidden=hidden, seq=seq,
                      vocab=4 * hidden)
    ref, fast, _ = _both(trace, f"{pct}%", monkeypatch)
    _assert_same(ref, fast)


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(layers=st.integers(1, 8), iters=st.integers(3, 4), batch=st.sampled_from([4, 64, 512]),
       pct=st.integers(15, 95), mode=st.sampled_from(["oblivious", "sampled"]),
       guard=st.sampled_from(["auto", 0, 4]))
def test_fast_sweep_plans_as_the_reference_on_mlp_traces(layers, iters, batch, pct, mode, guard,
                                                          monkeypatch):
    trace = training_trace(layers=layers, iters=iters, batch=batch, markers=True)
    ref, fast, _ = _both(trace, f"{pct}%", monkeypatch, mode=mode, guard=guard)
    _assert_same(ref, fast)


def test_scale_smoke_100k_events_takes_the_fast_path_and_gives_the_reference_plan(monkeypatch):
    trace = llm_trace_for_events(100_000)
    assert len(trace.kind) >= 90_000
    out: dict = {}
    passes = _timing_passes(lambda: out.update(r=_both(trace, "50%", monkeypatch)))
    ref, fast, calls = out["r"]
    assert calls >= 1, "the compiled sweep was not used"
    assert passes >= 1, "the compiled timing pass was not used"
    assert len(fast.actions) > 0
    _assert_same(ref, fast)


def test_reference_is_used_when_the_kernel_is_switched_off(monkeypatch):
    trace = llm_trace(layers=2, micro_batches=2, iters=2)
    monkeypatch.setenv("UVM_SCHED_PLANNER_KERNEL", "python")
    before = _fast.calls()
    assert not _fast.available() and not _fast_timing.available()
    assert _timing_passes(lambda: plan(trace, "40%")) == 0
    assert _fast.calls() == before


def test_llm_trace_has_about_the_events_asked_for():
    for n in (10_000, 40_000):
        t = llm_trace_for_events(n)
        assert 0.8 * n <= len(t.kind) <= 1.2 * n


def test_llm_trace_rejects_a_zero_shape():
    with pytest.raises(ValueError, match="layers"):
        llm_trace(layers=0)


@pytest.mark.parametrize("mode", ["oblivious", "sampled"])
def test_fast_sweep_plans_as_the_reference_where_narrower_guards_replace_wider(g10_dir, mode,
                                                                              monkeypatch):
    # Inception-v3 at 30% in sampled mode swaps ~700 chosen gaps for a narrower sibling
    # (the sweep's upgrade branch), which the generated traces above never reach
    from uvm_sched.trace import load

    trace = load(g10_dir / "Inceptionv3_1536")
    ref, fast, calls = _both(trace, "30%", monkeypatch, mode=mode)
    assert calls >= 1
    _assert_same(ref, fast)


def test_gap_columns_hold_what_the_gap_objects_hold(monkeypatch):
    """The candidate gaps' unchanging fields as the builder makes them from its columns
    (``_core._Gaps.fixed``, read by every compiled sweep) are the fields of the gap objects
    themselves (``_fast.fixed_fields``), sibling groups and guard levels included."""
    import numpy as np

    from uvm_sched.planner import _core

    seen = []
    original = _core._select_and_time

    def spy(tl, gaps, *a, **kw):
        seen.append((gaps.fixed, _fast.fixed_fields(gaps)))  # before any step runs
        return original(tl, gaps, *a, **kw)

    monkeypatch.setattr(_core, "_select_and_time", spy)
    cases = ((llm_trace(layers=3, micro_batches=2, iters=3), "oblivious", "auto"),
             (training_trace(layers=4, iters=3, batch=64, markers=True), "sampled", "auto"),
             (training_trace(layers=3, iters=3, batch=512, markers=True), "oblivious", 4))
    for trace, mode, guard in cases:
        plan(trace, "50%", mode=mode, guard=guard)
    assert len(seen) >= len(cases)  # (a plan may build more than one schedule)
    assert any(len(fixed[6]) and fixed[3].max() > 0 for fixed, _ in seen), \
        "no case with sibling gaps at two guard levels: the test shows nothing"
    for fixed, from_objects in seen:
        assert len(fixed) == len(from_objects) == 7
        for a, b in zip(fixed, from_objects):
            np.testing.assert_array_equal(a, b)
