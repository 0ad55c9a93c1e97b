"""Plan files are not trusted: every number is bounded, every field typed, every failure a
``PlanError`` naming the file; and a plan for another trace is an error (a warning with
``--force``), never a silent 1000x (issue classes 5 and 8)."""
from __future__ import annotations

import copy
import json
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _reliability import run_cli, small_trace
from uvm_sched.planner import Plan, PlanError, plan, trace_fingerprint

SETTINGS = settings(max_examples=80, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def trace():
    return small_trace()


@pytest.fixture(scope="module")
def doc(trace, tmp_path_factory):
    p = tmp_path_factory.mktemp("plan") / "p.json"
    plan(trace, "50%").save(p)
    return json.loads(p.read_text())


def _write(tmp_path, doc) -> str:
    p = tmp_path / "q.json"
    p.write_text(json.dumps(doc))
    return p


META_BAD = [
    ("period_events", 2**29), ("period_events", 0), ("period_events", "26"),
    ("period_events", 2.5), ("budget_bytes", -5), ("budget_bytes", "abc"),
    ("budget_bytes", 1e30), ("budget_bytes", True), ("version", -5), ("version", 99),
    ("sync", "bogus"), ("mode", "clairvoyant"), ("alloc_sizes", "many"),
    ("alloc_sizes", [-1]), ("alloc_sizes", [2**60]), ("alloc_sizes", [True]),
    ("alloc_sizes", [4096, 2.5]), ("alloc_sizes", [4096, -1]), ("period_start_event", -1),
    ("trace_fingerprint", 12),
]


@pytest.mark.parametrize("key,value", META_BAD)
def test_an_out_of_bounds_meta_value_is_a_plan_error_naming_it(tmp_path, doc, key, value):
    d = copy.deepcopy(doc)
    d["meta"][key] = value
    tracemalloc.start()
    with pytest.raises(PlanError, match=key):
        Plan.load(_write(tmp_path, d))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 64 << 20, f"{peak:,} bytes to refuse {key}={value!r}"


@pytest.mark.parametrize("col,value", [("offset", -7), ("bytes", -1), ("block", -3),
                                       ("bytes", 2**62), ("tick", "x"), ("persistent", "yes"),
                                       ("offset", 1.5), ("action", "explode")])
def test_an_out_of_bounds_action_is_a_plan_error_naming_the_row(tmp_path, doc, col, value):
    d = copy.deepcopy(doc)
    d["actions"][0][d["columns"].index(col)] = value
    with pytest.raises(PlanError, match="row 0"):
        Plan.load(_write(tmp_path, d))


@pytest.mark.parametrize("mutate", [
    lambda d: d.pop("actions"), lambda d: d.pop("meta"), lambda d: d.pop("columns"),
    lambda d: d.__setitem__("actions", {"a": 1}), lambda d: d.__setitem__("meta", []),
    lambda d: d["columns"].pop(), lambda d: d["actions"].append([1, 2]),
    lambda d: d["actions"].append("row"), lambda d: d["meta"].pop("alloc_sizes"),
])
def test_a_malformed_plan_json_is_a_plan_error(tmp_path, doc, mutate):
    d = copy.deepcopy(doc)
    mutate(d)
    with pytest.raises(PlanError):
        Plan.load(_write(tmp_path, d))


@pytest.mark.parametrize("data", [b"", b"{", b"[]", b"null", b"\xff\xfe", b"PAR1garbage",
                                  b'{"format": "uvm_sched.plan"}', b"1e999"])
def test_a_file_that_is_not_a_plan_is_a_plan_error(tmp_path, data):
    p = tmp_path / "x.plan"
    p.write_bytes(data)
    with pytest.raises(PlanError):
        Plan.load(p)


def test_a_corrupt_parquet_plan_is_a_plan_error(tmp_path, trace):
    p = tmp_path / "p.parquet"
    plan(trace, "50%").save(p)
    raw = bytearray(p.read_bytes())
    for at in (len(raw) // 3, len(raw) // 2, len(raw) - 12):
        bad = bytearray(raw)
        bad[at:at + 8] = b"\xff" * 8
        p.write_bytes(bytes(bad))
        try:
            Plan.load(p)
        except PlanError:
            pass
    p.write_bytes(bytes(raw[: len(raw) // 2]))
    with pytest.raises(PlanError):
        Plan.load(p)


def test_a_plan_fifo_is_refused(tmp_path):
    import os

    f = tmp_path / "p.json"
    os.mkfifo(f)
    with pytest.raises(PlanError, match="FIFO"):
        Plan.load(f)


@SETTINGS
@given(path=st.lists(st.sampled_from(["meta", "actions", 0, 1, 2, 3, 4, 5, "budget_bytes",
                                      "period_events", "alloc_sizes", "sync", "columns"]),
                     min_size=1, max_size=3),
       value=st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
       | st.floats(allow_nan=False) | st.text(max_size=6) | st.lists(st.integers(), max_size=3))
def test_any_single_edit_of_a_plan_file_is_a_plan_or_a_plan_error(tmp_path, doc, path, value):
    d = copy.deepcopy(doc)
    node = d
    for k in path[:-1]:
        try:
            node = node[k]
        except (KeyError, IndexError, TypeError):
            return
    try:
        node[path[-1]] = value
    except (IndexError, TypeError):
        return
    try:
        p = Plan.load(_write(tmp_path, d))
    except PlanError:
        return
    # what loads is within bounds
    assert 1 <= p.meta["period_events"] <= 1 << 24
    assert p.meta["budget_bytes"] > 0
    a = p.actions
    assert (a["offset"] >= 0).all() and (a["bytes"] >= 0).all() and (a["block"] >= 0).all()


def test_a_plan_remembers_the_trace_it_was_made_for(trace):
    p = plan(trace, "50%")
    assert p.meta["trace_fingerprint"] == trace_fingerprint(trace)
    p.check_trace(trace)


def test_a_plan_for_another_trace_is_an_error_in_the_api(trace):
    other = small_trace(layers=3, batch=3)
    with pytest.raises(PlanError, match="made for"):
        plan(trace, "50%").check_trace(other)


def test_a_plan_for_a_longer_recording_of_the_same_loop_still_fits(trace):
    longer = small_trace(iters=5)
    plan(trace, "50%").check_trace(longer)  # same iteration, more of them


def test_a_plan_for_another_trace_is_exit_2_or_a_warning_with_force(tmp_path, trace):
    t, o, pl = tmp_path / "t.parquet", tmp_path / "o.parquet", tmp_path / "p.json"
    trace.save(t)
    small_trace(layers=3, batch=3).save(o)
    assert run_cli("plan", t, "-q", "--budget", "90%", "-o", pl)[0] == 0
    for cmd in (["simulate", o, "--plan", pl], ["report", o, "--plan", pl, "--no-sim", "-o",
                                                 tmp_path / "r.html"]):
        code, _, err = run_cli(*cmd, "-q")
        assert code == 2 and "made for" in err and "--force" in err, err
        code, _, err = run_cli(*cmd, "-q", "--force")
        assert code == 0 and "warning" in err and "made for" in err, err
    assert run_cli("simulate", t, "--plan", pl, "-q")[0] == 0


def test_a_plan_save_is_atomic(tmp_path, trace):
    from unittest import mock

    p = plan(trace, "50%")
    dest = tmp_path / "p.json"
    dest.write_text("old")
    with mock.patch("uvm_sched._files._fsync_file", side_effect=OSError(28, "No space left")):
        with pytest.raises(OSError):
            p.save(dest)
    assert dest.read_text() == "old" and sorted(x.name for x in tmp_path.iterdir()) == ["p.json"]


def test_plans_made_by_the_planner_pass_their_own_checks(trace):
    p = plan(trace, "30%", mode="sampled", sample_rate=0.5)
    Plan(p.actions, p.meta)
    assert np.all(p.actions["tick"] < p.meta["period_events"])


def test_simulating_a_plan_for_another_trace_warns_in_the_api(trace):
    from uvm_sched.planner import PlanMismatchWarning
    from uvm_sched.sim import simulate

    other = small_trace(layers=3, batch=3)
    p = plan(trace, "90%")
    with pytest.warns(PlanMismatchWarning, match="made for"):
        simulate(other, p, budget=p.meta["budget_bytes"])
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", PlanMismatchWarning)
        simulate(trace, p, budget=p.meta["budget_bytes"])  # its own trace: no warning
