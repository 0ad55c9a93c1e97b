"""Pattern analysis on real workloads: the G10 artifact's folders (imported with several
iterations) and recorded zoo models. The learned period must equal the markers' spacing,
and the marker-free analysis must find the same iterations."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from uvm_sched.pattern import CLASSES, analyze
from uvm_sched.trace import EventKind, Trace

G10 = ["BERT_Base_128", "BERT_Base_256", "VIT_1280", "Inceptionv3_1536", "ResNet152_256",
       "ResNet152_1280", "SENet154_1024"]


def strip_marks(tr: Trace) -> Trace:
    keep = tr.kind != EventKind.MARK
    return Trace({k: v[keep] for k, v in tr.columns.items()}, tick_ns=tr.tick_ns, meta=tr.meta)


def marker_counts(tr: Trace) -> np.ndarray:
    ev = (tr.kind == EventKind.ALLOC) | (tr.kind == EventKind.FREE)
    starts = np.searchsorted(tr.tick[ev], tr.iteration_starts)
    return np.diff(np.append(starts, int(ev.sum())))


def check_consistent(p) -> None:
    s = p.summary()
    assert abs(sum(s["share_by_class"].values()) - 1) < 1e-9
    assert set(p.blocks["cls"].astype(str)) <= set(CLASSES)
    allocs = p.events[p.events["kind"] == "alloc"]
    local = allocs[~allocs["persistent"]]
    assert (local["ordinal"].to_numpy() == np.arange(len(local))).all()
    assert len(p.events) == p.period_events
    assert len(p.tick_ns) == p.stop_tick - p.start_tick
    assert str(p)


@pytest.fixture(scope="module")
def load():
    from uvm_sched import trace

    if not hasattr(trace, "load"):
        pytest.skip("uvm_sched.trace.load has not landed")
    return trace.load


@pytest.mark.parametrize("name", G10)
def test_g10_workload_period_matches_markers_and_learned(g10_dir, load, name):
    folder = g10_dir / name
    if not (folder / "kernels.csv").is_file():
        pytest.skip(f"{folder} has no kernels.csv")
    tr = load(folder, iterations=3)
    p = analyze(tr)
    counts = marker_counts(tr)
    assert p.source == "markers", p.notes
    assert p.period_events == counts[-1]
    assert len(p.iterations) == 3 and p.identical[-1]
    check_consistent(p)
    # tensors marked global in tensors.csv are the persistent blocks
    pers = int(p.blocks["persistent"].sum())
    import csv

    with open(folder / "tensors.csv") as f:
        n_global = sum(1 for r in csv.DictReader(f) if r["is_global"] == "1")
    assert pers <= n_global
    # without markers, the same period and iteration starts are learned
    q = analyze(strip_marks(tr))
    assert q.source == "learned"
    assert q.period_events == p.period_events
    assert len(q.iterations) == 3


def _zoo():
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed (the recorder needs it)")
    try:
        from uvm_sched.trace import zoo
    except (ImportError, AttributeError) as e:
        pytest.skip(f"uvm_sched.trace.zoo has not landed: {e}")
    return zoo


@pytest.mark.parametrize("name", ["gpt2_small", "unet"])
def test_zoo_learned_period_equals_marker_period(name):
    zoo = _zoo()
    if name not in zoo.names():
        pytest.skip(f"{name} is not in the zoo")
    tr = zoo.record(name, iters=4)
    p = analyze(tr)
    assert p.source == "markers", p.notes
    assert p.period_events == marker_counts(tr)[-1]
    assert p.identical[-1] and p.regularity >= 0.75
    check_consistent(p)
    q = analyze(strip_marks(tr))
    assert q.period_events == p.period_events
    assert q.iterations[-2:] == p.iterations[-2:]
    # weights and AdamW state (2 per weight) outlive the iterations
    assert p.summary()["count_by_class"]["persistent"] >= 3 * 10
