"""Training loops that vary (issue 22), on the generated shapes of ``pattern._loops``: the
iterations found, plans from the warm-up that survive per-batch shapes, and a runtime that
matches each step to its kind and settles. A fast subset of benchmarks/bench_loops.py."""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from uvm_sched import planner
from uvm_sched.pattern import analyze
from uvm_sched.pattern._loops import SHAPES, judge, loop_trace, steps_found

from _planner_helpers import host_backend

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_loops import plan_vs_demand, twin, warmup_prefix  # noqa: E402

host = pytest.fixture(host_backend)


@pytest.mark.parametrize("shape", SHAPES)
def test_with_markers_the_iterations_are_the_true_steps(shape):
    tr, truth = loop_trace(shape, markers=True, steps=12)
    pat = analyze(tr)
    assert pat.source == "markers" and len(pat.iterations) == truth.steps
    assert judge(pat, truth) == "steps"
    if len(set(truth.kinds)) > 1 or shape == "partial_last":
        assert len(pat.kinds) > 1, pat.kinds  # the odd steps are reported as kinds


@pytest.mark.parametrize("shape", SHAPES)
def test_without_markers_a_period_is_never_shorter_than_a_step(shape):
    tr, truth = loop_trace(shape, markers=False, steps=12)
    pat = analyze(tr)
    verdict = judge(pat, truth)
    assert verdict in ("steps", "groups of steps", "no period"), (verdict, pat.notes)
    if verdict == "steps":  # a step or two at the ends may fall outside the learned phase
        assert truth.steps - 2 <= len(pat.iterations) <= truth.steps
    if verdict == "no period":
        assert any(n.startswith("no period: ") for n in pat.notes)


@pytest.mark.parametrize("k", [3, 5])
def test_without_markers_eval_batches_leave_the_train_step_as_the_iteration(k):
    # the eval cycle (k train steps and an eval batch) repeats too, but memory comes back to
    # its level after every train step: the iterations are the train steps, never the cycle
    tr, truth = loop_trace("eval_every", markers=False, steps=16, k=k)
    pat = analyze(tr)
    assert judge(pat, truth) == "steps" and len(pat.iterations) == truth.kinds.count("train")
    assert any("memory returns to the iteration's level every" in n for n in pat.notes)


def test_judge_calls_a_micro_step_period_a_sub_period():
    tr, truth = loop_trace("grad_accum", markers=False, steps=6, k=3)
    pat = analyze(tr)
    pat.period_events = (truth.bounds[2] - truth.bounds[1]) // 3  # one micro-step
    assert judge(pat, truth) == "sub-period"


def test_the_plan_names_the_allocations_per_batch_shapes_resize_by_position():
    tr, truth = loop_trace("dynamic_padding", steps=8)
    p = planner.plan(warmup_prefix(tr, truth), "50%", "h200-pcie5")
    sizes = np.asarray(p.meta["alloc_sizes"])
    assert (sizes == 0).any()  # the activations: by position
    assert {512, 1 << 20} <= set(sizes.tolist())  # the loss and the workspaces: sizes checked
    acts = p.actions
    local = acts[~acts["persistent"].to_numpy(bool)]
    resized = sizes[local["block"].to_numpy()] == 0
    assert (local["bytes"].to_numpy()[resized] == 0).all()  # the whole block, as it comes
    p.check_trace(tr)  # its iteration occurs in the whole loop, whatever the sizes
    # the summary counts the planned iteration's bytes for them
    assert all(v["bytes"] > 0 for v in p.summary().values() if v["count"]), p.summary()


def test_a_fixed_shape_loop_keeps_every_size_checked():
    tr, truth = loop_trace("fixed", steps=6)
    p = planner.plan(tr, "50%", "h200-pcie5")
    assert min(p.meta["alloc_sizes"]) > 0


@pytest.mark.parametrize("shape", ["dynamic_padding", "partial_last", "missing_events",
                                   "eval_every", "grad_accum"])
def test_a_plan_from_the_warm_up_is_never_slower_than_demand_on_the_whole_loop(shape):
    tr, truth = loop_trace(shape, steps=10)
    r = plan_vs_demand(tr, truth, "h200-pcie5", "50%")
    assert r["ratio"] <= 1.0, r
    if shape == "dynamic_padding":
        assert r["divergences"] == 0, r  # other sequence lengths, the plan runs on


def test_dynamic_padding_saves_within_10pct_of_its_fixed_shape_twin():
    tw = twin(steps=10)
    assert tw["within_10pct"], tw
    assert tw["fixed_saving"] > 0.1  # (a twin that saves nothing would prove nothing)


def test_the_executor_runs_a_dynamic_padding_plan_on_other_shapes_without_divergence(host):
    from uvm_sched import native
    from uvm_sched._armed import replay

    tr, truth = loop_trace("dynamic_padding", steps=8)
    p = planner.plan(warmup_prefix(tr, truth), "50%", "h200-pcie5")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ev = replay(tr, p)
    k = ev["kind"]
    from uvm_sched._codes import NativeEvent

    assert np.count_nonzero(k == int(NativeEvent.ITER)) >= 4
    assert np.count_nonzero(k == int(NativeEvent.DIVERGENCE)) == 0
    assert native.stats()["divergences"] == 0


def _replay(shape: str, **kw):
    from uvm_sched._runtime_replay import replay_loop

    tr, truth = loop_trace(shape, markers=kw.pop("markers", True), steps=kw.pop("steps", 14),
                           **kw)
    return replay_loop(tr, budget="50%", hw="h200-pcie5", worker="thread", watchdog_iters=0), truth


@pytest.mark.parametrize("shape", SHAPES)
def test_the_runtime_runs_armed_for_most_steps_after_its_first_plan(host, shape):
    st, truth = _replay(shape)
    assert st["state"] == "armed" and st["plans"] == 1 and st["relearns"] == 0, st["not_armed"]
    assert st["armed_share"] >= 0.8, (st["armed_share"], st["kinds"], st["not_armed"])
    assert sum(r["steps"] for r in st["kinds"].values()) == truth.steps - 1  # (the last is open)
    assert st["not_armed"]["warm-up: no plan yet"] == 3


def test_an_eval_batch_met_again_is_an_expected_kind_not_a_divergence(host):
    st, truth = _replay("eval_every", steps=16, k=3)
    evals = [r for label, r in st["kinds"].items() if label.startswith("new (")]
    assert len(evals) == 1 and evals[0]["steps"] == truth.kinds[3:].count("eval")
    assert st["not_armed"]["diverged from the plan"] == 1  # the first one only
    assert sum(v for why, v in st["not_armed"].items() if "not the planned one" in why) >= 1
    assert st["relearns"] == 0 and st["state"] == "armed"


def test_an_eval_batch_every_k_steps_gets_a_plan_of_its_own_armed_at_its_steps(host):
    st, truth = _replay("eval_every", steps=16, k=3)
    (label, n_actions), = st["kind_plans"]["plans"].items()
    assert label.startswith("new (") and n_actions > 0 and not st["kind_plans"]["failed"]
    # planned from the first eval after the plan, its gap (every 4th step) known at the
    # second: armed at every one after
    assert st["kinds"][label]["armed"] == st["kinds"][label]["steps"] - 2
    assert st["kind_plans"]["switches"] == 2 * st["kinds"][label]["armed"]
    assert st["armed_share"] >= 0.8 and st["relearns"] == 0


@pytest.mark.parametrize("k", [2, 3, 5, 10])
def test_with_markers_eval_every_k_runs_armed_for_most_steps_for_any_k(host, k):
    st, truth = _replay("eval_every", steps=16, k=k)
    assert st["armed_share"] >= 0.8 and st["relearns"] == 0, (st["kinds"], st["not_armed"])
    # the train steps are the planned kind (an eval every 2nd step is not, though it is
    # met as often in the first steps)
    assert st["kinds"]["planned"]["steps"] >= truth.kinds.count("train") - 4
    assert not any(why.startswith("armed for kind") for why in st["not_armed"])


def test_a_wrong_guess_of_the_kind_runs_the_step_unplanned_and_never_relearns(host,
                                                                               monkeypatch):
    from uvm_sched._runtime_kinds import Steps

    # guess the eval kind at every step once it has a plan: the train steps get its table
    monkeypatch.setattr(Steps, "predict", lambda self: next(iter(self.plans.plans), None))
    st, truth = _replay("eval_every", steps=16, k=3)
    wrong = {why: n for why, n in st["not_armed"].items() if why.startswith("armed for kind")}
    assert sum(wrong.values()) >= 2, st["not_armed"]
    assert all("was 'planned'" in why for why in wrong)
    assert st["relearns"] == 0 and st["state"] == "armed"


def test_a_step_with_events_missing_is_one_divergence_and_no_relearn(host):
    st, _ = _replay("missing_events")
    assert st["not_armed"].get("diverged from the plan") == 1 and st["relearns"] == 0


def test_a_loop_without_markers_runs_on_the_learned_period(host):
    st, _ = _replay("dynamic_padding", markers=False)
    assert st["state"] == "armed" and st["sync"] == "period"
    assert st["executor_clean_share"] == 1.0 and st["armed_share"] is None


def test_without_markers_a_step_with_events_missing_is_found_in_phase_again(host):
    # the odd step shifts the executor's event count; the executor waits for the level of
    # live bytes where its iterations start and begins the next one there, instead of
    # counting on shifted or relearning
    st, _ = _replay("missing_events", markers=False, steps=16)
    assert st["sync"] == "period" and st["relearns"] == 0 and st["state"] == "armed"
    assert st["native"]["resyncs"] == 1 and st["iterations_diverged"] == 1, st
    assert st["executor_clean_share"] >= 0.8 and st["period_resyncs"] == 0


@pytest.mark.parametrize("k", [2, 3, 5, 10])
def test_without_markers_an_eval_batch_is_an_insertion_the_iteration_goes_on_after(host, k):
    st, truth = _replay("eval_every", markers=False, steps=16, k=k)
    assert st["sync"] == "period" and st["relearns"] == 0 and st["state"] == "armed"
    # every eval batch after the plan was armed: the iteration it interrupted goes on in
    # phase after it (nothing diverges on, nothing is re-armed)
    evals = [i for i, kind in enumerate(truth.kinds) if kind == "eval"]
    assert 1 <= st["insertions"] <= len(evals) and st["native"]["insertions"] == st["insertions"]
    assert st["iterations_diverged"] == 0 and st["period_resyncs"] == 0, st
    # every train step after the plan armed, and the eval batches run by their own plan
    assert st["executor_clean_share"] == pytest.approx(
        (st["iterations_armed"] + st["insertions_planned"])
        / (st["iterations_armed"] + st["insertions"]))
    assert st["executor_clean_share"] >= 0.8


@pytest.mark.parametrize("k", [2, 3, 5])
def test_without_markers_an_eval_batch_met_again_runs_a_plan_of_its_own(host, k):
    st, _ = _replay("eval_every", markers=False, steps=16, k=k)
    ip = st["insertion_plans"]
    # planned once met twice (the same events at the same point), run by it from the next
    assert ip["table"] and not ip["failed"] and ip["unplanned"] == 2, ip
    assert st["insertions_planned"] == st["insertions"] - 2 >= 1
    assert st["native"]["insertions_planned"] == st["insertions_planned"]
    assert st["native"]["insertion_mismatches"] == 0


@pytest.mark.parametrize("shape", ["missing_events", "partial_last", "dynamic_padding"])
def test_without_markers_a_stretch_met_once_gets_no_plan(host, shape):
    st, _ = _replay(shape, markers=False, steps=16)
    assert not st["insertion_plans"]["table"] and st["insertions_planned"] == 0, st
    assert st["native"]["insertion_mismatches"] == 0


def test_a_planned_stretch_that_differs_fires_nothing_more_and_the_iteration_goes_on(
        host, monkeypatch):
    import uvm_sched._runtime_insertions as ins

    # every allocation of the stretch's table but its first of another size: a wrong guess
    # at every eval batch it is armed for
    real = ins._set
    monkeypatch.setattr(ins, "_set", lambda t, sizes, n, at: real(
        t, np.concatenate([sizes[:1], sizes[1:] + 1]), n, at))
    st, _ = _replay("eval_every", markers=False, steps=16, k=2)
    assert st["native"]["insertion_mismatches"] == st["insertions"] - 2 >= 1
    assert st["insertions_planned"] == 0 and st["relearns"] == 0 and st["state"] == "armed"
    assert st["iterations_diverged"] == 0, st


def _plain_period(monkeypatch):
    """Arm period plans with sync="period" (the executor counts on after a divergence): the
    runtime's own resync (_runtime_resync) is then what finds the phase again."""
    import uvm_sched._armed as armed
    from uvm_sched import native

    arm = armed.arm_plan
    monkeypatch.setattr(native, "arm_plan", lambda *a, **kw: arm(*a, **{**kw, "resync": False}))
    monkeypatch.setattr(armed, "arm_plan", lambda *a, **kw: arm(*a, **{**kw, "resync": False}))


def test_with_sync_period_the_runtime_re_arms_in_phase_after_events_missing(host, monkeypatch):
    _plain_period(monkeypatch)
    st, _ = _replay("missing_events", markers=False, steps=16)
    assert st["relearns"] == 0 and st["state"] == "armed" and st["native"]["resyncs"] == 0
    assert st["period_resyncs"] >= 1 and st["executor_clean_share"] >= 0.8, st


def test_a_period_resync_waits_for_the_end_of_the_odd_iteration_itself(host, monkeypatch):
    from uvm_sched._runtime_resync import PeriodResync

    _plain_period(monkeypatch)
    phases: list[int] = []
    arm = PeriodResync._arm
    monkeypatch.setattr(PeriodResync, "_arm", lambda self, s, phase, allocs: (
        phases.append(phase), arm(self, s, phase, allocs)))
    tr, truth = loop_trace("missing_events", markers=False, steps=16)
    from uvm_sched._runtime_replay import replay_loop

    st = replay_loop(tr, budget="50%", hw="h200-pcie5", worker="thread", watchdog_iters=0)
    # one resync, after the odd step: the odd iteration and the shifted one that began
    # before the poll that found the phase diverge, nothing after (re-entering the odd
    # step would have diverged again, and asked for a second resync)
    assert st["period_resyncs"] == len(phases) == 1 and st["divergences"] == 2, st


def _events(*steps: str) -> np.ndarray:
    """Drained events: per step a MARK, then 'a' (alloc), 'f' (free), 'd' (divergence)."""
    from uvm_sched._codes import NativeEvent
    from uvm_sched.native import EVENT_DTYPE

    code = {"a": NativeEvent.ALLOC, "f": NativeEvent.FREE, "d": NativeEvent.DIVERGENCE}
    kinds = []
    for s in steps:
        kinds += [int(NativeEvent.MARK)] + [int(code[c]) for c in s]
    ev = np.zeros(len(kinds), EVENT_DTYPE)
    ev["kind"] = kinds
    return ev


def test_steps_are_matched_to_the_kinds_the_plan_was_learned_from():
    from uvm_sched._runtime_kinds import PLANNED, Steps, step_key

    steps = Steps()
    train = "aaff"
    known = {(4, step_key(np.array([0, 0, 1, 1], bool))): PLANNED,
             (2, step_key(np.array([0, 1], bool))): "other (-2 events)"}
    assert steps.feed(_events("af"), "warm-up: no plan yet") == 0  # a step opens
    assert steps.feed(_events(train), "warm-up: no plan yet") == 0  # it ends, unplanned
    steps.new_plan(known, at_marker=True)  # armed at the marker that opened this one
    # that train step ends; an eval that diverges (a known kind: expected), a new kind that
    # diverges (counts), the planned kind diverging (counts), train (still open)
    assert steps.feed(_events("adf", "aadf", "aadff", train), None) == 2
    r = steps.report()
    assert r["kinds"] == {"before the first plan": {"steps": 1, "armed": 0},
                          PLANNED: {"steps": 2, "armed": 1},
                          "other (-2 events)": {"steps": 1, "armed": 0},
                          "new (3 events)": {"steps": 1, "armed": 0}}
    assert r["not_armed"] == {"warm-up: no plan yet": 1, "diverged from the plan": 2,
                              "kind 'other (-2 events)': not the planned one, runs unplanned": 1}
    assert r["steps_armed"] == 1 and r["armed_share"] == pytest.approx(1 / 4)
    # the new kind met again is a kind of this loop: expected, the run of divergences ends
    assert steps.feed(_events("aadf", train), None) == 0
    assert steps.report()["kinds"]["new (3 events)"] == {"steps": 2, "armed": 0}


@pytest.mark.parametrize("shape", ["fixed", "checkpointing", "compiled"])
def test_without_markers_a_last_step_cut_short_is_counted_once_it_is_half_a_step(shape):
    from uvm_sched.trace import EventKind

    tr, truth = loop_trace(shape, markers=False, steps=8)
    ticks = tr.tick[tr.kind <= EventKind.FREE]
    p = truth.bounds[-1] - truth.bounds[-2]
    for cut, found in ((p // 3, 7), (p // 2 + 8, 8), (p * 3 // 4, 8)):
        pat = analyze(tr.slice_ticks(0, int(ticks[truth.bounds[-2] + cut])))
        # the learned period stays the step; the recording's end, its first `cut` events,
        # is the last iteration when it is half a step or more (less: too little to tell)
        assert pat.period_events == p and len(pat.iterations) == found, (cut, pat.notes)


@pytest.mark.parametrize("steps", [8, 12, 16])
def test_without_markers_a_partial_last_batch_is_the_last_iteration(steps):
    # the partial batch skips an op: its kinds are R's beginning shifted, within the edits
    # KIND_AGREE_MIN allows
    tr, truth = loop_trace("partial_last", markers=False, steps=steps)
    pat = analyze(tr)
    assert len(pat.iterations) == truth.steps and judge(pat, truth) == "steps"


def test_prefix_edits_is_the_edit_distance_to_the_closest_prefix():
    from uvm_sched.pattern._period import _prefix_edits

    r = np.array([0, 0, 1, 0, 1, 1, 0, 1])
    assert _prefix_edits(np.array([0, 0, 1, 0]), r, 1) == 0  # a prefix
    assert _prefix_edits(np.array([0, 1, 0, 1, 1]), r, 1) == 1  # one skipped
    assert _prefix_edits(np.array([1, 1, 1, 1, 1]), r, 1) == 3  # not its beginning


@pytest.mark.parametrize("k", [2, 3, 5, 10])
def test_without_markers_an_eval_batch_inside_an_iteration_is_found_as_a_step_of_its_own(k):
    tr, truth = loop_trace("eval_every", markers=False, steps=16, k=k)
    pat = analyze(tr)
    first = truth.kinds.index("eval")
    eval_len = truth.bounds[first + 1] - truth.bounds[first]
    inserted = [kd for kd in pat.kinds if "inserted" in kd]
    assert len(inserted) == 1 and inserted[0]["inserted"]["events"] == eval_len
    assert steps_found(pat) == truth.steps and judge(pat, truth) == "steps"
    assert any("of another kind inserted at its event" in n for n in pat.notes)


def test_a_step_with_events_missing_is_no_insertion():
    pat = analyze(loop_trace("missing_events", markers=False, steps=16)[0])
    assert not any("inserted" in kd for kd in pat.kinds) and steps_found(pat) == 16


def test_inserted_at_finds_the_stretch_only_where_the_rest_is_the_representative():
    from uvm_sched.pattern._evidence import inserted_at

    rep = np.array([1, 2, 3, 4, 5])
    assert inserted_at(np.array([1, 2, 9, 9, 3, 4, 5]), rep) == 2
    assert inserted_at(np.array([9, 1, 2, 3, 4, 5]), rep) == 0
    assert inserted_at(np.array([1, 2, 3, 4, 5, 9]), rep) == 5
    assert inserted_at(np.array([1, 2, 9, 3, 4, 6]), rep) is None  # changed besides
    assert inserted_at(rep, rep) is None and inserted_at(rep[:4], rep) is None
