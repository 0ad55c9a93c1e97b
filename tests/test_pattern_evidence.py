"""Iterations need evidence (Note [Never invent an iteration] in pattern/_evidence.py): the
shapes that fooled the learned period on real single-step recordings give one iteration with
the rule that failed, and multi-step runs of the same programs give the true step count."""
from __future__ import annotations

import numpy as np
import pytest

from uvm_sched.pattern import analyze
from uvm_sched.pattern._synth import step_trace
from uvm_sched.trace import EventKind, Trace

ALLOC, FREE, MARK = EventKind.ALLOC, EventKind.FREE, EventKind.MARK


def n_allocator_events(tr: Trace) -> int:
    return int(np.count_nonzero((tr.kind == ALLOC) | (tr.kind == FREE)))


def strip_marks(tr: Trace) -> Trace:
    keep = tr.kind != MARK
    return Trace({k: v[keep] for k, v in tr.columns.items()}, tick_ns=tr.tick_ns, meta=tr.meta)


# one training step that a string repeat can fool, and the rule that catches each
SINGLE_STEP = {
    # 12 identical layers: Adam's per-parameter loop repeats 12 times, balanced
    "per-parameter optimizer loop": (dict(steps=1, opt_temps=6), "rise"),
    # 31 identical backward blocks, forward activations freed after the pass
    "repeated backward blocks": (dict(steps=1, layers=31, free_activations="after_backward"),
                                 "rise"),
    # the autotuner runs the forward graph twice before the real forward
    "autotuning pair": (dict(steps=1, autotune=8, backward=False, identical_layers=False),
                        "fewer than 3"),
    # set-up, then 2 steps of unequal length (the first allocates Adam's state, the second
    # has a longer sequence): the update loop repeats inside each
    "set-up and 2 unequal steps": (dict(steps=2, seqs=(32, 48), state_in_setup=False,
                                        opt_temps=6), "rise"),
}


@pytest.mark.parametrize("shape", sorted(SINGLE_STEP))
def test_single_step_recording_is_one_iteration_with_the_reason(shape):
    kw, why = SINGLE_STEP[shape]
    tr = step_trace(**kw)
    p = analyze(tr)
    assert len(p.iterations) == 1, (shape, p.notes)
    assert p.period_events == n_allocator_events(tr)
    assert any(n.startswith("no period") and why in n for n in p.notes), p.notes


def test_backward_blocks_freeing_the_forward_activations_are_not_steps():
    # the same backward pass, each block freeing its own layer's activations: rule 2
    tr = step_trace(steps=1, layers=31, opt_temps=1)
    p = analyze(tr)
    assert len(p.iterations) == 1, p.notes


MULTI_STEP = {
    "per-parameter optimizer": dict(opt_temps=6),
    "foreach optimizer": dict(optimizer="foreach"),
    "backward blocks": dict(layers=31, free_activations="after_backward"),
    "first step allocates Adam state": dict(state_in_setup=False),
    "autotuning before the first step": dict(autotune=8),
}


@pytest.mark.parametrize("steps", [3, 6])
@pytest.mark.parametrize("shape", sorted(MULTI_STEP))
def test_multi_step_recording_gives_the_step_count(shape, steps):
    tr = step_trace(steps=steps, **MULTI_STEP[shape])
    p = analyze(tr)
    assert p.source == "learned"
    assert len(p.iterations) == steps, p.notes
    marked = step_trace(steps=steps, markers=True, **MULTI_STEP[shape])
    truth = analyze(marked)
    assert truth.source == "markers" and len(truth.iterations) == steps
    assert p.period_events == truth.period_events
    assert p.evidence["coverage"] >= 0.8


@pytest.mark.parametrize("seqs", [(32, 48), (32, 40, 24, 48, 36, 44)])
def test_marked_steps_of_varying_size_are_all_iterations(seqs):
    # dynamic padding: per-step sizes differ, the structure does not; the markers decide
    tr = step_trace(steps=6, seqs=seqs, markers=True)
    p = analyze(tr)
    assert p.source == "markers"
    assert len(p.iterations) == 6
    same = [kd for kd in p.kinds if kd["label"] == "same structure, other sizes"]
    steady = [kd for kd in p.kinds if kd["label"] == "steady"]
    assert len(steady) == 1
    assert sum(len(kd["iterations"]) for kd in steady + same) == 6


@pytest.mark.parametrize("steps, seqs", [
    (3, (32, 48, 40)), (6, (32, 48, 40)),  # twice the same 3 shapes: 2 copies only
    (6, (32, 40, 24, 48, 36, 44)), (9, (32, 40, 24, 48, 36, 44, 28, 52, 20))])
@pytest.mark.parametrize("state_in_setup", [True, False])
def test_unmarked_steps_of_varying_size_are_found_from_structure(steps, seqs, state_in_setup):
    # dynamic padding without markers: sizes differ step to step, the lifetimes in
    # allocator events do not -- the step count, never a sub-period
    tr = step_trace(steps=steps, seqs=seqs, state_in_setup=state_in_setup)
    p = analyze(tr)
    assert len(p.iterations) == steps, p.notes
    truth = analyze(step_trace(steps=steps, seqs=seqs, state_in_setup=state_in_setup,
                               markers=True))
    assert p.period_events == truth.period_events
    if len(set(seqs[:steps])) > 1:
        assert "structure" in p.evidence["signal"]


def test_marked_partial_last_batch_and_a_short_step_keep_every_marker():
    # a partial last batch and a step with fewer events: kinds, never dropped markers
    from uvm_sched.trace import TraceBuilder

    tb = TraceBuilder()
    w = tb.alloc(1 << 20)
    for it in range(6):
        tb.mark()
        n_ops = 8 if it not in (2, 5) else (6 if it == 2 else 4)
        for i in range(n_ops):
            b = tb.alloc(4096 * (1 + i % 3) if it != 5 else 1024 * (1 + i % 3))
            tb.free(b)
            tb.next_tick(100.0)
    tb.free(w)
    p = analyze(tb.build())
    assert p.source == "markers" and len(p.iterations) == 6
    assert p.period_events == 16
    labels = {kd["label"]: kd for kd in p.kinds}
    # 4 ops (8 events) and the tear-down free of the weight, against 16
    assert labels["last (partial batch or cut short?)"]["delta_events"] == -8 + 1
    assert labels["other"]["iterations"] == [2] and labels["other"]["delta_events"] == -4


def test_evidence_names_the_signal_and_coverage():
    p = analyze(step_trace(steps=5))
    assert "repeat" in p.evidence["signal"]
    s = p.summary()
    assert s["evidence"]["coverage"] == pytest.approx(p.evidence["coverage"])
    assert "evidence:" in str(p)
    marked = analyze(step_trace(steps=5, markers=True))
    assert "marker" in marked.evidence["signal"] and "evidence:" in str(marked)


@pytest.mark.parametrize("layers", [2, 6, 12, 24])
def test_single_step_optimizer_loop_rejected_across_model_depths(layers):
    # the rule's constants are not tuned to 12 layers
    tr = step_trace(steps=1, layers=layers, opt_temps=6)
    assert len(analyze(tr).iterations) == 1
    assert len(analyze(step_trace(steps=4, layers=layers, opt_temps=6)).iterations) == 4


# -- steps from a memory snapshot's Python frames ---------------------------------------------
_FRAMES = {
    "setup": [{"filename": "/w/train.py", "line": 20, "name": "<module>"}],
    "forward": [{"filename": "/w/model.py", "line": 51, "name": "forward"},
                {"filename": "/w/train.py", "line": 40, "name": "main"}],
    # the autograd engine's device thread has no Python frames
    "backward": [],
    "optimizer": [{"filename": "/env/site-packages/torch/optim/adam.py", "line": 400,
                   "name": "_single_tensor_adam"},
                  {"filename": "/env/site-packages/torch/optim/optimizer.py", "line": 485,
                   "name": "wrapper"},
                  {"filename": "/w/train.py", "line": 44, "name": "main"}],
    "autotune": [{"filename": "/env/site-packages/triton/runtime/autotuner.py", "line": 160,
                  "name": "_bench"}],
}


def as_snapshot(tr: Trace, phases: list[str]) -> dict:
    """The trace as `torch.cuda.memory._snapshot()` entries, each with the frames of its
    phase (schema: torch/cuda/memory.py, `TraceEntry`)."""
    ev = np.flatnonzero((tr.kind == ALLOC) | (tr.kind == FREE))
    assert len(ev) == len(phases)
    out = []
    for i, r in enumerate(ev):
        k = int(tr.kind[r])
        out.append({"action": "alloc" if k == ALLOC else "free_completed",
                    "addr": 0x7000_0000 + 0x100_0000 * int(tr.block[r]), "size": int(tr.size[r]),
                    "stream": 0, "time_us": i, "frames": _FRAMES[phases[i]]})
    return {"segments": [], "device_traces": [out]}


def from_frames(with_phases=False, **kw):
    from uvm_sched.trace._snapshot import trace_from_snapshot

    phases: list[str] = []
    tr = step_trace(phases=phases, **kw)
    out = trace_from_snapshot(as_snapshot(tr, phases))
    return (out, phases) if with_phases else out


@pytest.mark.parametrize("shape", sorted(SINGLE_STEP))
def test_snapshot_frames_count_one_step(shape):
    kw, _ = SINGLE_STEP[shape]
    kw = dict(kw)
    steps = kw.pop("steps")
    tr = from_frames(steps=steps, **kw)
    p = analyze(tr)
    if not kw.get("backward", True):  # a forward pass: no step frames at all
        assert "step_ends" not in tr.meta and len(p.iterations) == 1
        return
    assert tr.meta["step_ends"]["signal"] == "torch.optim step frames"
    assert p.source == "markers" and len(p.iterations) == steps
    assert "frames" in p.evidence["signal"]


@pytest.mark.parametrize("seqs", [(32,), (32, 48, 40)])
def test_snapshot_frames_count_every_step_whatever_its_size(seqs):
    tr, phases = from_frames(True, steps=5, seqs=seqs, state_in_setup=False, opt_temps=3)
    p = analyze(tr)
    assert p.source == "markers" and len(p.iterations) == 5, p.notes
    # iteration k ends right after step k's optimizer events
    truth = [i for i in range(1, len(phases) + 1) if phases[i - 1] == "optimizer"
             and (i == len(phases) or phases[i] != "optimizer")]
    assert [b for _, b in p.iteration_events] == truth


def test_shapes_that_cycle_are_the_longer_period_not_the_structures_sub_period():
    # 9 steps cycling over 3 shapes: the sizes repeat every 3 steps, and that longer period
    # is taken; the structure alone would say every step
    p = analyze(step_trace(steps=9, seqs=(32, 48, 40)))
    assert len(p.iterations) == 3
    assert "structure" not in p.evidence["signal"]
