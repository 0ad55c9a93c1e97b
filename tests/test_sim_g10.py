"""Cross-check on the G10 artifact's workloads (a100-40gb-g10 profile, 40 GiB).

The artifact's own figures (one iteration, seconds): ideal and base UVM (LRU). Our ideal
must be theirs (the same kernel times); our ``demand`` slowdown is reported beside theirs
by ``benchmarks/bench_sim.py``. For the transformer workloads it lands within 25%; for the
CNNs our default (pool) model is ~40-50% below theirs, see the benchmark's notes.
"""
from __future__ import annotations

import pytest

from uvm_sched.sim import simulate

ARTIFACT = {  # name: (base UVM s, ideal s)
    "BERT_Base_256": (19.65, 7.29),
    "VIT_1280": (24.60, 3.72),
    "Inceptionv3_1536": (281.0, 59.7),
    "ResNet152_1280": (468.9, 112.6),
    "SENet154_1024": (730.8, 132.9),
}


def _load(shared_dir, name):
    from uvm_sched.trace import load

    folder = shared_dir / "workloads" / "g10" / name
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent")
    return load(folder)


def _check(shared_dir, name, within=None):
    t = _load(shared_dir, name)
    uvm, ideal_s = ARTIFACT[name]
    ideal = simulate(t, "ideal", "a100-40gb-g10", "40GiB")
    demand = simulate(t, "demand", "a100-40gb-g10", "40GiB")
    bound = simulate(t, "bound", "a100-40gb-g10", "40GiB")
    assert ideal.iteration_time_s == pytest.approx(ideal_s, rel=0.01)
    assert ideal.iteration_time_s <= bound.iteration_time_s <= demand.iteration_time_s
    assert demand.peak_resident_bytes <= 40 * 2**30
    if within is not None:
        assert demand.slowdown(ideal) == pytest.approx(uvm / ideal_s, rel=within)


def test_bert_base_256_demand_slowdown_is_near_the_artifacts_base_uvm(shared_dir):
    _check(shared_dir, "BERT_Base_256", within=0.25)


@pytest.mark.slow
def test_vit_1280_demand_slowdown_is_near_the_artifacts_base_uvm(shared_dir):
    _check(shared_dir, "VIT_1280", within=0.25)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["Inceptionv3_1536", "ResNet152_1280", "SENet154_1024"])
def test_cnn_workloads_run_with_the_artifacts_ideal(shared_dir, name):
    _check(shared_dir, name)
