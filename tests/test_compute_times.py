"""Measured compute times in place of the roofline (``Trace.with_compute_times``,
``simulate(compute_times=...)``, ``--compute-times``): the median measured iteration is
spread over the ticks in proportion to their own times, from each source (seconds per
iteration, a GPU profile's kernel times, the runtime's marker timings), and every figure
says which time it used."""
from __future__ import annotations

import json

import numpy as np
import pytest

from uvm_sched.sim import compare, simulate
from uvm_sched.trace import AccessMode, Trace, TraceBuilder, TraceError
from uvm_sched.trace._kineto import trace_from_chrome

MiB = 1 << 20
ROOFLINE = "roofline from recorded shapes (h200-pcie5)"


def _recorded(iters=3):
    """A recorded-like trace: a weight, then per iteration a 1 ms and a 3 ms tick."""
    b = TraceBuilder(name="rec", source="recorder", hw="h200-pcie5")
    w = b.alloc(4 * MiB)
    b.access(w, AccessMode.WRITE)
    b.next_tick(2e6)
    for _ in range(iters):
        b.mark()
        a = b.alloc(2 * MiB)
        b.access(a, AccessMode.WRITE)
        b.access(w)
        b.next_tick(1e6)
        b.access(a)
        b.free(a)
        b.next_tick(3e6)
    return b.build()


def test_the_median_measured_iteration_is_spread_in_proportion_to_the_roofline():
    t = _recorded()
    m = t.with_compute_times([0.008, 0.010, 0.030])  # median 10 ms over 4 ms estimated
    assert m.tick_ns.tolist() == pytest.approx([5e6, 2.5e6, 7.5e6] * 1 + [2.5e6, 7.5e6] * 2)
    assert m.meta["compute_times"] == {
        "measured_iteration_s": 0.010, "estimated_iteration_s": 0.004, "scale": 2.5,
        "iterations": 3, "source": "seconds given per iteration", "spread_by": ROOFLINE}
    assert m.time_source == ("measured: 10 ms per iteration (median of 3, seconds given per "
                             f"iteration), spread over the ticks in proportion to the {ROOFLINE}")
    assert t.time_source == ROOFLINE and t.tick_ns[1] == 1e6  # the original is unchanged
    assert Trace(m.columns, tick_ns=m.tick_ns, meta=m.meta) == m  # a valid trace


def _mem(ts, addr, nbytes):
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1,
            "tid": 1, "ts": ts, "args": {"Bytes": nbytes, "Device Id": 0, "Device Type": 1,
                                         "Addr": addr}}


def _gpu_profile(kernel_us):
    """A profiler trace of len(kernel_us) steps: each a ProfilerStep span with one
    allocation, one free and kernels of the given durations (us) launched inside it."""
    ev, corr, ts = [], 0, 1000.0
    for n, durs in enumerate(kernel_us):
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1,
                   "tid": 1, "ts": ts, "dur": 90.0, "args": {}})
        ev.append(_mem(ts + 1, 0xA0, 4096))
        for d in durs:
            corr += 1
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                       "tid": 1, "ts": ts + 2, "dur": 1.0, "args": {"correlation": corr}})
            ev.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7,
                       "ts": ts + 50, "dur": d, "args": {"correlation": corr, "device": 0}})
        ev.append(_mem(ts + 3, 0xA0, -4096))
        ts += 100.0
    return trace_from_chrome({"traceEvents": ev}, name="gpu")


def test_a_gpu_profile_gives_its_kernel_time_per_iteration():
    prof = _gpu_profile([[100.0, 20.0], [300.0], [50.0, 50.0], [999.0]])
    # complete iterations (marker to marker): 120, 300, 100 us -> median 120 us; the last
    # step has no marker after it and does not count
    m = _recorded().with_compute_times(prof)
    ct = m.meta["compute_times"]
    assert ct["iterations"] == 3 and ct["measured_iteration_s"] == pytest.approx(120e-6)
    assert ct["scale"] == pytest.approx(120e-6 / 4e-3)
    assert "kernel times of 'gpu' (sum per iteration)" in m.time_source


def test_the_runtimes_marker_timings_give_the_wall_time_between_markers():
    # as Scheduler.trace(): no device time per tick, the host clock on every event
    b = TraceBuilder(name="sched", source="uvm_sched.Scheduler")
    t = 0
    for dur_ms in (50, 7, 9, 8):
        b.mark(t_ns=t)
        blk = b.alloc(4096, t_ns=t + 10)
        b.free(blk, t_ns=t + 20)
        b.next_tick()
        t += dur_ms * 1_000_000
    b.mark(t_ns=t)
    run = b.build()
    m = _recorded().with_compute_times(run)
    ct = m.meta["compute_times"]
    assert ct["iterations"] == 4 and ct["measured_iteration_s"] == pytest.approx(0.0085)
    assert "wall time between the markers of 'sched'" in m.time_source


@pytest.mark.parametrize("measured, match", [
    ([0.01, -1.0], r"measured iteration 1 takes -1.0 s"),
    ([0.01, float("nan")], r"measured iteration 1 takes nan s"),
    ("0.01", r"a Trace or a non-empty sequence"),
    ([], r"a Trace or a non-empty sequence"),
])
def test_bad_measured_times_are_refused_with_the_value(measured, match):
    with pytest.raises((TraceError, TypeError), match=match):
        _recorded().with_compute_times(measured)


def test_a_trace_that_cannot_take_or_give_an_iteration_time_is_refused_saying_why():
    one = _gpu_profile([[10.0]])
    with pytest.raises(TraceError, match=r"1 iteration marker\(s\); at least two"):
        _recorded().with_compute_times(one)
    b = TraceBuilder(name="flat")
    blk = b.alloc(4096)
    b.next_tick(1e6)
    b.free(blk)
    b.next_tick(1e6)
    with pytest.raises(TraceError, match=r"'flat' has no iteration marker"):
        b.build().with_compute_times([0.01])
    t = _recorded()
    tns = t.tick_ns.copy()
    tns[2] = np.nan
    nan = Trace(t.columns, tick_ns=tns, meta=dict(t.meta, name="holes"))
    with pytest.raises(TraceError, match=r"'holes' has 1 tick\(s\) of unknown.*assume_tick_ns"):
        nan.with_compute_times([0.01])
    cpu = _gpu_profile([[10.0], [10.0]])
    cpu = Trace(cpu.columns, tick_ns=cpu.tick_ns,
                meta=dict(cpu.meta, time_source="CPU wall clock — not a GPU estimate"))
    with pytest.raises(TraceError, match="a CPU profile's"):
        _recorded().with_compute_times(cpu)


def test_simulate_and_compare_use_the_measured_times_and_say_so():
    t = _recorded()
    base = simulate(t, "ideal")
    assert base.iteration_time_s == pytest.approx(0.004) and base.time_source == ROOFLINE
    r = simulate(t, "demand", budget="100%", compute_times=[0.01])
    ideal = simulate(t, "ideal", compute_times=[0.01])
    assert ideal.iteration_time_s == pytest.approx(0.010)
    assert r.compute_time_s == pytest.approx(0.010)
    assert r.time_source.startswith("measured: 10 ms per iteration")
    assert r.to_dict()["time_source"] == r.time_source
    df = compare(t, budgets=["100%"], policies=["ideal", "demand"], compute_times=[0.01])
    assert df.loc[df.policy == "ideal", "iteration_time_s"].item() == pytest.approx(0.010)


def test_the_cli_takes_compute_times_from_a_file_and_prints_their_source(tmp_path):
    from test_cli import run_cli

    tr = tmp_path / "rec.parquet"
    _recorded().save(tr)
    secs = tmp_path / "times.json"
    secs.write_text(json.dumps({"iteration_s": [0.01, 0.012, 0.011]}))
    r = run_cli("simulate", tr, "--policy", "demand", "--budget", "100%",
                "--compute-times", secs, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["time_source"].startswith("measured: 11 ms per iteration (median of 3")
    assert doc["ideal"]["iteration_time_s"] == pytest.approx(0.011)
    assert doc["result"]["time_source"] == doc["time_source"]
    r = run_cli("compare", tr, "--budget", "100%", "--compute-times", secs)
    assert r.returncode == 0, r.stderr
    assert "compute time: measured: 11 ms per iteration" in r.stdout
    secs.write_text("[0.01, -2]")
    r = run_cli("simulate", tr, "--compute-times", secs)
    assert r.returncode == 2 and "measured iteration 1 takes -2.0 s" in r.stderr


def test_a_scheduler_trace_times_iterations_by_its_own_markers():
    # the runtime's marker timings, end to end: a Scheduler on the host backend records a
    # loop whose iterations take >= 20 ms of wall time each
    import time

    pytest.importorskip("uvm_sched.trace._native")
    from _planner_helpers import host_backend

    from uvm_sched import native
    from uvm_sched.runtime import Scheduler

    gen = host_backend()
    next(gen)
    try:
        with Scheduler(budget="60%", warmup_iters=50, hook=False) as s:
            for _ in range(4):
                s.step()
                p = native.malloc(MiB)
                time.sleep(0.02)
                native.free(p)
            s.step()
            run = s.trace()
    finally:
        gen.close()
    m = _recorded().with_compute_times(run)
    ct = m.meta["compute_times"]
    assert ct["iterations"] == 4 and 0.02 <= ct["measured_iteration_s"] < 1.0
    assert ct["source"] == "wall time between the markers of 'uvm_sched.Scheduler'"
