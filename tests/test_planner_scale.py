"""The planner's speed-ups give today's answers: the pricing's figures-only runs (sim/_api.py
Note [Figures only]) give ``simulate``'s figures and the same choice, on generated traces,
with the compiled loop and the plain-Python reference."""
from __future__ import annotations

import dataclasses
import re

import pytest

from uvm_sched import sim
from uvm_sched.pattern._synth import training_trace
from uvm_sched.planner import plan
from uvm_sched.planner._pricing import _kept_reads_view
from uvm_sched.sim import _fast, simulate
from uvm_sched.trace import zoo
from uvm_sched.trace._llm import llm_trace

HW = "h200-pcie5"
_SCALARS = [f.name for f in dataclasses.fields(sim.SimResult)
            if f.name not in ("timeline", "transfers", "actions")]


def _traces(zoo_models: bool = True):
    yield "llm", llm_trace(layers=3, micro_batches=2, iters=3)
    yield "llm-accesses", llm_trace(layers=2, micro_batches=3, iters=3, accesses=True)
    yield "synth", training_trace(iters=3, layers=5, markers=True)
    yield "synth-eval", training_trace(iters=4, layers=3, eval_after={1}, warmup_adam=True)
    try:
        import torch  # noqa: F401
    except ImportError:
        return
    if not zoo_models:
        return
    for seed in (5, 11):  # random families and sizes, recorded on meta tensors
        yield f"zoo-{seed}", zoo.record_random(seed, iters=3)


@pytest.fixture(params=["compiled", "reference"])
def kernel(request, monkeypatch):
    if request.param == "reference":
        monkeypatch.setenv("UVM_SCHED_SIM_KERNEL", "python")
    elif not _fast.available():
        pytest.skip("numba is not installed: no compiled loop")
    return request.param


@pytest.mark.parametrize("pct", ["30%", "60%"])
def test_figures_only_runs_give_simulates_figures_in_every_view(kernel, pct):
    for name, trace in _traces(zoo_models=kernel == "compiled"):  # (the reference is slow)
        bare = zoo.allocator_only(trace) if trace.has_accesses else trace
        p = plan(bare, pct, HW, price=False)
        starts = bare.iteration_starts
        for view in (bare, _kept_reads_view(bare, starts),
                     _kept_reads_view(bare, starts, midpoints=True)):
            view.validate()  # the views are built unvalidated: valid by construction
            try:
                full = simulate(view, p, HW, pct)
            except sim.BudgetError as e:  # a view's reads above the budget: refused alike
                with pytest.raises(sim.BudgetError, match=str(e)[:40]):
                    simulate(view, p, HW, pct, _figures_only=True)
                continue
            fig = simulate(view, p, HW, pct, _figures_only=True)
            for f in _SCALARS:
                assert getattr(fig, f) == getattr(full, f), (name, pct, f)
            assert fig.timeline is None and fig.actions is None


@pytest.mark.parametrize("pct", ["30%", "50%", "90%"])
def test_pricing_chooses_and_times_as_with_full_simulations(pct, monkeypatch):
    """The plan (actions and meta) with the figures-only runs equals the plan priced by
    full ``simulate`` calls, the path before them (each with the loop ``simulate`` takes:
    the figures-only runs under the reference are checked above)."""
    def full(view, p, prof, budget, _figures_only=False, **kw):
        return real(view, p, prof, budget, **kw)

    real = sim.simulate
    for name, trace in _traces():
        fast = plan(trace, pct, HW, mode="oblivious")
        with monkeypatch.context() as m:
            m.setattr(sim, "simulate", full)
            slow = plan(trace, pct, HW, mode="oblivious")
        assert fast.actions.equals(slow.actions), (name, pct)
        fp, sp = dict(fast.meta["pricing"]), dict(slow.meta["pricing"])
        assert fp.get("at_least") == sp.get("at_least"), (name, pct)
        # a refuted candidate's figure is a lower bound from a run stopped once it was
        # decided (Note [Runs stopped once decided]): where each path stopped may differ,
        # but both bounds lie above the chosen candidate's exact figure
        chosen = fp["chosen"] + "_s"
        for k in fp.get("at_least") or ():
            lo_fast, lo_slow = fp.pop(k + "_s"), sp.pop(k + "_s")
            assert min(lo_fast, lo_slow) > fp[chosen], (name, pct, k)
        assert fp == sp, (name, pct)
        # (the words say the same; a lower bound quoted in them may differ, as above)
        def words(m):
            return re.sub(r"\d[\d.e+-]*", "#", m.get("fallback") or "")

        assert words(fast.meta) == words(slow.meta), (name, pct)


def _cyclic_fifo_numpy(issue, dur, after, period, second, busy=None):
    """``_queues.cyclic_fifo`` as it read numpy elements one by one (the oracle)."""
    import numpy as np

    from uvm_sched.planner._queues import _stretched_end

    shift = np.where(second, period, 0.0)
    r, a = issue - shift, after - shift
    order = np.lexsort((np.arange(len(r)), r))
    start, end = np.zeros(len(r)), np.zeros(len(r))
    carry = 0.0
    for _ in range(2):
        free_at = carry
        for i in order.tolist():
            s0 = max(r[i], free_at, a[i])
            start[i] = s0
            free_at = s0 + dur[i] if busy is None else _stretched_end(s0, dur[i], *busy)
            end[i] = free_at
        carry = max(0.0, free_at - period)
    return start + shift, end + shift


@pytest.mark.parametrize("seed", range(6))
def test_copy_queue_on_python_floats_gives_the_numpy_loops_times_bit_for_bit(seed):
    import numpy as np

    from uvm_sched.planner._queues import busy_intervals, cyclic_fifo

    rng = np.random.default_rng(seed)
    n, period = int(rng.integers(1, 400)), float(rng.uniform(1e3, 1e6))
    issue = rng.uniform(0, 2 * period, n)
    dur = rng.exponential(period / n * rng.uniform(0.2, 3.0), n)
    after = np.where(rng.random(n) < 0.3, issue + rng.uniform(0, period / 4, n), 0.0)
    second = issue >= period
    bs, be = busy_intervals(rng.uniform(0, period, 50), rng.uniform(0, period / 20, 50), period)
    for busy in (None, (bs, be, 0.0), (bs, be, float(rng.uniform(0.1, 0.9)))):
        got = cyclic_fifo(issue, dur, after, period, second, busy)
        want = _cyclic_fifo_numpy(issue, dur, after, period, second, busy)
        assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


@pytest.mark.parametrize("seed", range(6))
def test_excess_tracks_the_maxima_of_updating_resident_in_place(seed):
    import numpy as np

    from uvm_sched.planner._excess import Excess

    rng = np.random.default_rng(seed)
    T = int(rng.integers(1, 300))
    resident = rng.integers(0, 1 << 40, T).astype(np.int64)
    budget = int(rng.integers(0, 1 << 40))
    naive, ex = resident.copy(), Excess(resident.copy(), budget)
    for _ in range(200):
        whole = rng.random() < 0.5
        lf = 0 if whole else int(rng.integers(0, T))
        lt = T - 1 if whole else int(rng.integers(lf, T))
        over = naive - budget
        assert ex.worst() == int(over.max())
        assert ex.worst_in(lf, lt) == int(over[lf:lt + 1].max())
        n = int(rng.integers(0, 1 << 36))
        naive[lf:lt + 1] -= n
        ex.lower(lf, lt, n)


def test_lowered_takes_off_what_the_slices_would():
    import numpy as np

    from uvm_sched.planner._excess import Excess

    rng = np.random.default_rng(1)
    for T in (1, 7, 300):
        lf = rng.integers(0, T + 3, 50)
        lt = lf + rng.integers(-1, T, 50)  # some past the end, some empty
        n = rng.integers(0, 1 << 40, 50)
        want = np.zeros(T, np.int64)
        for a, b, k in zip(lf.tolist(), lt.tolist(), n.tolist()):
            want[a:b + 1] -= k
        assert np.array_equal(-Excess.lowered(T, lf, lt, n), want)


def _pricing_cases():
    from uvm_sched.trace._llm import llm_trace_for_events

    yield "llm-20k", llm_trace_for_events(20_000), "oblivious"  # bench_scale's shape
    yield "llm-accesses", llm_trace(layers=2, micro_batches=3, iters=3, accesses=True), \
        "sampled"
    for name, trace in _traces():
        yield name, trace, "oblivious"
        if trace.has_accesses:
            yield name, trace, "sampled"


@pytest.mark.parametrize("pct", ["30%", "50%", "70%", "90%"])
def test_pricing_refuting_early_chooses_as_running_every_view(pct, monkeypatch):
    """Note [Refuted candidates run no further views] and Note [Runs stopped once decided]:
    the same plan (actions, choice, every unrefuted figure) as pricing with every view run,
    each run to its end; a refuted candidate's figure is a lower bound of its full one."""
    from uvm_sched import sim
    from uvm_sched.planner import _pricing

    full = _pricing.price
    simulate = sim.simulate
    stopped = []

    def counting(*a, **k):
        r = simulate(*a, **k)
        stopped.append(bool(getattr(r, "counters", {}).get("stopped")))
        return r

    monkeypatch.setattr(sim, "simulate", counting)
    pruned = 0
    for name, trace, mode in _pricing_cases():
        try:
            fast = plan(trace, pct, HW, mode=mode)
        except Exception as e:  # an infeasible budget is refused alike
            with pytest.raises(type(e)), monkeypatch.context() as m:
                m.setattr(_pricing, "price", lambda *a, **k: full(*a, **k, _prune=False))
                plan(trace, pct, HW, mode=mode)
            continue
        with monkeypatch.context() as m:
            m.setattr(_pricing, "price", lambda *a, **k: full(*a, **k, _prune=False))
            slow = plan(trace, pct, HW, mode=mode)
        a, b = fast.meta["pricing"], slow.meta["pricing"]
        assert a["chosen"] == b["chosen"], (name, pct, mode, a, b)
        assert fast.actions.equals(slow.actions), (name, pct, mode)
        assert "at_least" not in b, (name, pct, mode)
        low = set(a.get("at_least", ()))
        pruned += bool(low)
        for k, v in b.items():
            if k.endswith("_s") and k[:-2] in low:
                assert a[k] <= v * (1 + 1e-12), (name, pct, mode, k, a, b)
            elif k != "at_least":
                assert a[k] == v, (name, pct, mode, k, a, b)
    if pct == "50%":  # bench_scale's budget: the full plan is refuted by the third view
        assert pruned, "no candidate was refuted early: the test checks nothing"
        assert any(stopped), "no run was stopped once decided: the test checks nothing"


@pytest.mark.parametrize("enabled", [True, False])
def test_the_builder_runs_with_cyclic_gc_off_and_the_callers_setting_comes_back(enabled,
                                                                                monkeypatch):
    import gc

    from uvm_sched.planner import _planner

    seen = []
    real = _planner.schedule

    def spy(*a, **kw):
        seen.append(gc.isenabled())
        return real(*a, **kw)

    monkeypatch.setattr(_planner, "schedule", spy)
    (gc.enable if enabled else gc.disable)()
    try:
        plan(training_trace(iters=3, layers=3, markers=True), "50%", HW, price=False)
        assert seen == [False] and gc.isenabled() is enabled
    finally:
        gc.enable()
