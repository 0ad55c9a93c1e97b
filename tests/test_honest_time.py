"""Every figure says where its compute time came from, and an iteration time is one
iteration's (Trace.time_source, sim's measured window without markers)."""
from __future__ import annotations

import json

import pytest

from uvm_sched import cli, pattern, sim
from uvm_sched.pattern._synth import training_trace
from uvm_sched.trace import CPU_WALL_CLOCK, load

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def cpu_profile(tmp_path_factory):
    """A real torch.profiler run on CPU (profile_memory=True), one prof.step() per step."""
    from torch.profiler import ProfilerActivity, profile

    path = tmp_path_factory.mktemp("honest") / "cpu.json"
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.AdamW(model.parameters())
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for _ in range(4):
            model(torch.randn(32, 64)).mean().backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    prof.export_chrome_trace(str(path))
    return path


def test_a_cpu_profile_is_labelled_cpu_wall_clock_in_every_output(cpu_profile, tmp_path, capsys):
    tr = load(cpu_profile, device="cpu")
    assert tr.time_source == CPU_WALL_CLOCK == "CPU wall clock — not a GPU estimate"
    assert pattern.analyze(tr).summary()["time_source"] == CPU_WALL_CLOCK
    for argv in (["analyze", str(cpu_profile), "--device", "cpu"],
                 ["simulate", str(cpu_profile), "--device", "cpu", "--policy", "demand"],
                 ["compare", str(cpu_profile), "--device", "cpu", "--budget", "75%",
                  "--policies", "demand"]):
        assert cli.main(argv) == 0
        out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
        assert CPU_WALL_CLOCK in out, argv
    plan_path = tmp_path / "plan.json"
    assert cli.main(["plan", str(cpu_profile), "--device", "cpu", "--budget", "75%",
                     "-o", str(plan_path)]) == 0
    capsys.readouterr()
    from uvm_sched.planner import Plan

    assert Plan.load(plan_path).meta["time_source"] == CPU_WALL_CLOCK


def test_recorded_traces_say_their_time_is_a_roofline():
    from uvm_sched.trace import record

    tr = record(lambda: torch.nn.Linear(8, 8), lambda: torch.randn(4, 8), iters=1)
    assert tr.time_source == "roofline from recorded shapes (h200-pcie5)"


@pytest.mark.parametrize("iters", [4, 6, 9])
def test_without_markers_the_simulated_iteration_is_one_learned_iteration(iters):
    marked = training_trace(iters=iters, markers=True)
    bare = training_trace(iters=iters, markers=False)
    assert len(pattern.analyze(bare).iterations) == iters  # the period is found
    t_marked = sim.simulate(marked, "ideal", "h200-pcie5").iteration_time_s
    t_bare = sim.simulate(bare, "ideal", "h200-pcie5").iteration_time_s
    # one iteration (the learned phase may start a tick or two off the marked one), not
    # the whole trace (iters x as long)
    assert t_bare == pytest.approx(t_marked, rel=0.15)
    demand = sim.simulate(bare, "demand", "h200-pcie5", budget="50%")
    assert demand.counters["window_stop"] - demand.counters["window_start"] < bare.n_ticks / 2


def test_compare_json_names_the_time_source(cpu_profile, capsys):
    assert cli.main(["compare", str(cpu_profile), "--device", "cpu", "--budget", "75%",
                     "--policies", "demand", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["time_source"] == CPU_WALL_CLOCK
