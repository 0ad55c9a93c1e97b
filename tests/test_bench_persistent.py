"""benchmarks/bench_persistent.py: its ``--quick`` subset runs (one small generated workload,
one budget, every planner mode), its figures are what its definitions say, and the
generated workloads hold the persistent state they name."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import _persistent_workloads as wl  # noqa: E402
import bench_persistent  # noqa: E402

from uvm_sched.trace import EventKind  # noqa: E402

SMALL = dict(layers=2, micro_batches=2, hidden=256, seq=128, vocab=4096, iters=2)


@pytest.fixture(scope="module")
def quick() -> dict:
    return bench_persistent.main(["--quick"])


def test_quick_run_has_every_runnable_mode_in_one_row(quick):
    modes, missing = bench_persistent.runnable_modes()
    assert quick["modes"] == [m[0] for m in modes]
    assert set(quick["modes"]) | set(missing) == {m[0] for m in bench_persistent.MODES}
    (row,) = quick["rows"]
    assert (row["workload"], row["hw"], row["budget_pct"]) == ("adamw-mb4", "h200-pcie5", 50)
    assert row["demand_s"] > row["ideal_s"] and row["bound_s"] <= row["demand_s"]


def test_quick_run_figures_follow_their_definitions(quick):
    (row,) = quick["rows"]
    d, i = row["demand_s"], row["ideal_s"]
    for label, v in row["modes"].items():
        assert v["plan_over_demand"] == pytest.approx(v["time_s"] / d), label
        assert v["saving"] == pytest.approx((d - v["time_s"]) / (d - i)), label
        assert v["time_s"] >= row["bound_s"] * (1 - 1e-9), label  # no plan beats the bound
    m = row["modes"]
    # auto on a trace with accesses is sampled at rate 1: the same plan, simulated once
    assert m["auto"]["mode_ran"] == "sampled" and m["auto"]["time_s"] == m["sampled 1.0"]["time_s"]
    assert m["sampled 1.0"]["reused"] and m["oblivious"]["mode_ran"] == "oblivious"
    s = quick["summary"]
    for label, x in s.items():
        slower = row["modes"][label]["plan_over_demand"] > 1 + 1e-9
        assert len(x["slower_than_demand"]) == int(slower)


def test_quick_run_reports_the_warmup_rules_cost_per_setting(quick):
    from _persistent_report import warmup_md

    (row,) = quick["rows"]
    m = row["modes"]
    got = {k: v["probe"] for k, v in m.items() if "probe" in v}
    assert {"fault-sampled", "fault, cap 2", "fault, cap 32", "fault, share 0.5"} <= set(got)
    assert got["fault, cap 2"]["iterations"] <= 2 and got["fault, cap 32"]["iterations"] <= 32
    # the cap only bounds the rule: a warm-up that closes every list under a cap stops there
    for small, big in (("fault, cap 2", "fault, cap 4"), ("fault, cap 4", "fault, cap 8"),
                       ("fault, cap 8", "fault, cap 32")):
        if got[small]["open"] == 0:
            assert got[big]["iterations"] == got[small]["iterations"]
        else:
            assert got[small]["iterations"] == int(small.split()[-1])
    assert row["probe"] == got["fault-sampled"]
    table = "\n".join(warmup_md(quick))
    assert all(f"| {k} |" in table for k in got)


def test_a_mode_whose_function_is_missing_is_listed_as_not_run(monkeypatch):
    from uvm_sched import planner

    monkeypatch.delattr(planner, "fault_samples", raising=False)
    modes, missing = bench_persistent.runnable_modes()
    assert "fault-sampled" not in [m[0] for m in modes]
    assert "planner.fault_samples is not in this build" in missing["fault-sampled"]


def _allocs(trace) -> int:
    return int((trace.kind == EventKind.ALLOC).sum())


def test_frozen_layers_hold_no_optimizer_state_and_get_no_weight_update():
    base = wl.persistent_trace(name="b", **SMALL)
    frozen = wl.persistent_trace(name="f", frozen=1, **SMALL)
    # the embedding and layer 0's six weights lose master, m, v and accumulator: 4 blocks each
    assert _allocs(base) - _allocs(frozen) == 4 * 7
    with pytest.raises(ValueError, match="frozen must be 0..2 layers"):
        wl.persistent_trace(name="x", frozen=3, **SMALL)


def test_ema_and_teacher_copies_are_persistent_and_the_teacher_is_only_read():
    from uvm_sched.pattern import analyze
    from uvm_sched.trace import AccessMode

    base = wl.persistent_trace(name="b", **SMALL)
    n_params = 2 + 6 * SMALL["layers"]
    for kw in ({"ema": True}, {"teacher": True}):
        t = wl.persistent_trace(name="v", **kw, **SMALL)
        b = analyze(t).blocks
        assert int(b["persistent"].sum()) - int(analyze(base).blocks["persistent"].sum()) \
            == n_params
    t = wl.persistent_trace(name="t", teacher=True, **SMALL)
    acc = (t.kind == EventKind.ACCESS) & (t.tick > 0)
    first = int(t.iteration_starts[0])
    teacher_blocks = set()
    # the teacher's blocks: allocated after each parameter's working copy, read-only later
    for blk in set(t.block[(t.kind == EventKind.ALLOC) & (t.tick < first)].tolist()):
        later = acc & (t.block == blk) & (t.tick >= first)
        if later.any() and not (t.mode[later] & AccessMode.WRITE).any():
            teacher_blocks.add(blk)
    assert len(teacher_blocks) >= n_params
