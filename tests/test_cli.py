"""The `uvm-sched` command, driven as a user drives it: in a subprocess, checking exit codes,
one-line errors, tables, JSON and the files it writes.

Subcommands whose part of the package is not in the tree yet are skipped with a reason (the
CLI itself answers them with a clear error, which `test_missing_part_is_one_clear_line`
pins)."""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SUBCOMMANDS = ["demo", "record", "analyze", "plan", "simulate", "compare", "report", "export"]
# The small zoo record every functional test shares (seconds on 2 cores); at this size its
# largest single-kernel working set is ~20% of peak, so budgets down to 30% are feasible.
SMALL = ["unet", "--batch", "16", "--image", "128", "--iters", "3"]


def run_cli(*args, cwd=None, timeout=600, entry=None) -> subprocess.CompletedProcess:
    """Run the command as a user would; `entry` = path of the console script, else -m."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("UVM_SCHED_DEBUG", None)
    cmd = [entry] if entry else [sys.executable, "-m", "uvm_sched"]
    return subprocess.run(cmd + [str(a) for a in args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout)


ZOO = ("uvm_sched.trace.zoo", "record")
PATTERN = ("uvm_sched.pattern", "analyze")
PLANNER = ("uvm_sched.planner", "plan")
SIM = ("uvm_sched.sim", "simulate")
COMPARE = ("uvm_sched.sim", "compare")
REPORT = ("uvm_sched.viz", "report")


def missing_part(module: str, attr: str) -> str | None:
    """Why `module.attr` cannot be used yet (None when it can)."""
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        return f"{module} not in this tree yet ({e})"
    return None if hasattr(mod, attr) else f"{module}.{attr} not in this tree yet"


def missing_parts(*parts: tuple[str, str]) -> str | None:
    # the planner learns the pattern first, and the simulator's uvm-sched policy plans
    deps = {PLANNER: [PATTERN], SIM: [PLANNER, PATTERN], COMPARE: [PLANNER, PATTERN]}
    full = list(dict.fromkeys([q for p in parts for q in (p, *deps.get(p, []))]))
    reasons = [r for r in (missing_part(m, a) for m, a in full) if r]
    return "; ".join(reasons) or None


def needs(*parts: tuple[str, str]):
    reason = missing_parts(*parts)
    return pytest.mark.skipif(reason is not None, reason=reason or "")




def one_error_line(p: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one error line, got:\n{p.stderr}"
    assert "Traceback" not in p.stderr
    assert lines[0].startswith("uvm-sched"), lines[0]
    return lines[0]


@pytest.fixture(scope="session")
def cli_tmp(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cli")


@pytest.fixture(scope="session")
def tiny_trace(cli_tmp) -> Path:
    """A hand-made 3-iteration trace (no recorder needed) for the input-error paths."""
    from _planner_helpers import tiny_trace as write_tiny

    return write_tiny(cli_tmp / "tiny.parquet")


@pytest.fixture(scope="session")
def zoo_trace(cli_tmp) -> Path:
    """One small zoo model recorded through `uvm-sched record`, shared by every test."""
    reason = missing_parts(ZOO)
    if reason:
        pytest.skip(reason)
    path = cli_tmp / "small.parquet"
    p = run_cli("record", *SMALL, "-o", path, "--quiet", cwd=cli_tmp)
    assert p.returncode == 0, p.stderr
    assert path.is_file() and path.stat().st_size > 0
    return path


@pytest.fixture(scope="session")
def saved_plan(zoo_trace, cli_tmp) -> Path:
    reason = missing_parts(PLANNER)
    if reason:
        pytest.skip(reason)
    path = cli_tmp / "plan.json"
    p = run_cli("plan", zoo_trace, "--budget", "50%", "-o", path, cwd=cli_tmp)
    assert p.returncode == 0, p.stderr
    return path


# -- help and usage -----------------------------------------------------------------------
def test_main_help_lists_every_subcommand_with_examples():
    p = run_cli("--help")
    assert p.returncode == 0, p.stderr
    for sub in SUBCOMMANDS:
        assert f"\n    {sub}" in p.stdout, sub
    assert "examples:" in p.stdout and "uvm-sched demo" in p.stdout


@pytest.mark.parametrize("sub", SUBCOMMANDS)
def test_each_subcommand_has_help_with_examples(sub):
    p = run_cli(sub, "--help")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"usage: uvm-sched {sub}")
    assert "examples:" in p.stdout and f"uvm-sched {sub}" in p.stdout.split("examples:")[1]
    assert "--json" in p.stdout


def test_version():
    import uvm_sched

    p = run_cli("--version")
    assert p.returncode == 0 and uvm_sched.__version__ in p.stdout


@pytest.mark.parametrize("argv", [
    [],  # no subcommand
    ["frobnicate"],  # unknown subcommand
    ["plan"],  # missing TRACE
    ["export", "x.parquet"],  # missing --to
    ["export", "x.parquet", "--to", "pdf"],  # bad choice
    ["record", "gpt2_small", "--batch", "0"],  # not a positive int
    ["record", "gpt2_small", "--batch", "many"],
    ["plan", "x.parquet", "--mode", "psychic"],
    ["analyze", "x.parquet", "--no-such-flag"],
])
def test_usage_errors_exit_2_with_one_line(argv):
    p = run_cli(*argv)
    assert p.returncode == 2, (p.returncode, p.stderr)
    line = one_error_line(p)
    assert "error:" in line
    assert p.stdout == ""


def test_missing_trace_file_exits_2(tmp_path):
    p = run_cli("analyze", tmp_path / "nope.parquet")
    assert p.returncode == 2
    assert "nope.parquet" in one_error_line(p) and "no such" in p.stderr


@pytest.mark.parametrize("content", [b"", b"PAR1 but truncated", b"\x00\x01garbage" * 50,
                                     b'{"not": "a trace"}'])
def test_corrupt_trace_file_exits_2(tmp_path, content):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(content)
    p = run_cli("analyze", bad, cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert "bad.parquet" in one_error_line(p)


def test_every_trace_subcommand_rejects_a_corrupt_file(tmp_path):
    bad = tmp_path / "bad.pickle"
    bad.write_bytes(b"\x80\x04not really a pickle")
    for sub in (["plan"], ["simulate"], ["compare"], ["report"], ["export", "--to", "perfetto"]):
        p = run_cli(sub[0], bad, *sub[1:], cwd=tmp_path)
        assert p.returncode == 2, (sub, p.stderr)
        assert "bad.pickle" in one_error_line(p)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root reads files whatever their mode")
def test_unreadable_trace_file_exits_2(tiny_trace, tmp_path):
    locked = tmp_path / "locked.parquet"
    shutil.copy(tiny_trace, locked)
    locked.chmod(0)
    try:
        p = run_cli("analyze", locked)
    finally:
        locked.chmod(0o600)
    assert p.returncode == 2
    assert "not readable" in one_error_line(p)


def test_trace_folder_that_is_not_a_trace_exits_2(tmp_path):
    (tmp_path / "empty").mkdir()
    p = run_cli("analyze", tmp_path / "empty")
    assert p.returncode == 2
    one_error_line(p)


@pytest.mark.parametrize("budget", ["lots", "150%", "-5GiB", "0", "%"])
def test_bad_budget_exits_2_naming_it(tiny_trace, budget):
    p = run_cli("plan", tiny_trace, f"--budget={budget}")
    assert p.returncode == 2, p.stderr
    line = one_error_line(p)
    assert "budget" in line and budget in line


def test_unknown_hardware_profile_exits_2_listing_shipped(tiny_trace):
    p = run_cli("plan", tiny_trace, "--hw", "tpu-v9")
    assert p.returncode == 2
    line = one_error_line(p)
    assert "tpu-v9" in line and "h200-pcie5" in line


def test_corrupt_plan_file_exits_2(tiny_trace, tmp_path):
    bad = tmp_path / "plan.json"
    bad.write_text('{"format": "something else"}')
    p = run_cli("simulate", tiny_trace, "--plan", bad)
    assert p.returncode == 2, p.stderr
    assert "plan.json" in one_error_line(p)


def test_output_into_missing_folder_exits_2_before_work(tiny_trace, tmp_path):
    p = run_cli("report", tiny_trace, "-o", tmp_path / "no" / "such" / "r.html")
    assert p.returncode == 2
    assert "does not exist" in one_error_line(p)


def test_missing_part_is_one_clear_line():
    from uvm_sched import cli
    from uvm_sched.cli._output import part

    with pytest.raises(cli.PartMissing, match=r"the frobnicator \(uvm_sched\.frobnicator\) is not "
                                              r"available"):
        part("uvm_sched.frobnicator", "run", "the frobnicator")
    with pytest.raises(cli.PartMissing, match=r"uvm_sched\.hw\.nothing_here"):
        part("uvm_sched.hw", "nothing_here", "a thing")


def test_unexpected_failure_exits_1_and_debug_shows_traceback(tiny_trace, monkeypatch, capsys):
    """An internal bug is exit 1 with one line; --debug adds the traceback."""
    from uvm_sched import cli
    from uvm_sched.cli import _analyze

    def boom(args, out):
        raise ZeroDivisionError("deliberate")

    parser = cli.build_parser
    monkeypatch.setattr(_analyze, "run", boom)

    def patched():
        p = parser()
        # rebind the subcommand to the failing function
        for action in p._subparsers._group_actions:
            action.choices["analyze"].set_defaults(func=boom)
        return p

    monkeypatch.setattr(cli, "build_parser", patched)
    assert cli.main(["analyze", str(tiny_trace)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error: ZeroDivisionError: deliberate" in err
    assert "--debug" in err
    assert cli.main(["analyze", str(tiny_trace), "--debug"]) == 1
    assert "Traceback" in capsys.readouterr().err


# -- subcommands on a small zoo trace -------------------------------------------------------
@needs(ZOO)
def test_record_list_and_unknown_model():
    p = run_cli("record", "--list")
    assert p.returncode == 0
    names = p.stdout.split()
    assert "gpt2_small" in names and "resnet50" in names
    p = run_cli("record", "no_such_net", "-o", "x.parquet")
    assert p.returncode == 2
    assert "no_such_net" in one_error_line(p) and "gpt2_small" in p.stderr


@needs(ZOO)
def test_record_writes_a_loadable_trace(zoo_trace):
    from uvm_sched.trace import load

    t = load(zoo_trace)
    assert len(t) > 0 and t.peak_bytes > 0
    assert len(t.iteration_starts) >= 2
    assert t.meta.get("model") == "unet" and t.meta.get("batch") == 16


@needs(ZOO, PATTERN)
def test_analyze_prints_characterisation_and_json(zoo_trace):
    p = run_cli("analyze", zoo_trace)
    assert p.returncode == 0, p.stderr
    assert "events" in p.stdout and "peak" in p.stdout
    j = run_cli("analyze", zoo_trace, "--json")
    assert j.returncode == 0, j.stderr
    doc = json.loads(j.stdout)
    from uvm_sched.trace import load

    assert doc["trace"]["peak_bytes"] == load(zoo_trace).peak_bytes
    assert isinstance(doc["pattern"], dict) and doc["pattern"]


@needs(ZOO, PLANNER)
def test_plan_writes_a_plan_for_the_budget(saved_plan, zoo_trace, cli_tmp):
    from uvm_sched.planner import Plan
    from uvm_sched.trace import load

    plan = Plan.load(saved_plan)
    peak = load(zoo_trace).peak_bytes
    assert plan.meta["budget_bytes"] == round(0.5 * peak)
    j = run_cli("plan", zoo_trace, "--budget", "30%", "--json", cwd=cli_tmp)
    assert j.returncode == 0, j.stderr
    doc = json.loads(j.stdout)
    assert doc["meta"]["budget_bytes"] == round(0.3 * peak)
    assert doc["path"] is None
    assert set(doc["summary"]) >= {"prefetch_to_device", "prefetch_to_host"}


@needs(ZOO, PLANNER)
def test_plan_sampled_mode(zoo_trace, cli_tmp):
    p = run_cli("plan", zoo_trace, "--mode", "sampled", "--sample-rate", "0.5", "--json",
                cwd=cli_tmp)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["meta"]["mode"] == "sampled"


@needs(ZOO, PLANNER)
def test_plan_default_mode_is_sampled_on_a_recording_and_says_why(zoo_trace, cli_tmp):
    p = run_cli("plan", zoo_trace, "--budget", "60%", cwd=cli_tmp)
    assert p.returncode == 0, p.stderr
    assert "planner mode: auto: sampled, the trace carries accesses" in p.stdout


@needs(ZOO, PLANNER)
def test_default_mode_on_allocator_events_only_is_oblivious_and_says_why(zoo_trace, cli_tmp):
    from uvm_sched.trace import load
    from uvm_sched.trace.zoo import allocator_only

    bare = cli_tmp / "bare.parquet"
    allocator_only(load(zoo_trace)).save(bare)
    p = run_cli("plan", bare, "--budget", "60%", "--sample-rate", "0.5", cwd=cli_tmp)
    assert p.returncode == 2 and "this run's mode: auto: oblivious, no access source" in p.stderr
    p = run_cli("compare", bare, "--budget", "60%", "--policies", "demand,uvm-sched",
                cwd=cli_tmp)
    assert p.returncode == 0, p.stderr
    assert "planner mode (uvm-sched): auto: oblivious, no access source" in p.stdout


@needs(ZOO, PLANNER)
@pytest.mark.skipif(importlib.util.find_spec("highspy") is None,
                    reason="the LP-guided planner needs HiGHS: pip install highspy")
def test_plan_method_lp_says_what_the_lp_did_and_refuses_oblivious_mode(zoo_trace, cli_tmp):
    p = run_cli("plan", zoo_trace, "--budget", "50%", "--method", "lp", cwd=cli_tmp)
    assert p.returncode == 0, p.stderr
    assert "LP-guided: LP bound" in p.stdout and "kept: " in p.stdout
    j = run_cli("plan", zoo_trace, "--budget", "50%", "--method", "lp", "--json", cwd=cli_tmp)
    assert j.returncode == 0, j.stderr
    doc = json.loads(j.stdout)
    assert doc["meta"]["lp"]["bound_s"] > 0
    assert "greedy_s" in doc["meta"]["pricing"]
    o = run_cli("plan", zoo_trace, "--method", "lp", "--mode", "oblivious", cwd=cli_tmp)
    assert o.returncode == 2 and "--method lp plans from the trace's accesses" in o.stderr


@needs(ZOO, SIM)
def test_simulate_one_policy_against_ideal(zoo_trace):
    p = run_cli("simulate", zoo_trace, "--policy", "demand", "--budget", "50%", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["result"]["policy"] == "demand"
    assert doc["ideal"]["iteration_time_s"] > 0
    assert doc["result"]["iteration_time_s"] >= doc["ideal"]["iteration_time_s"] * (1 - 1e-9)
    assert doc["result"]["slowdown"] >= 1 - 1e-9
    human = run_cli("simulate", zoo_trace, "--policy", "demand", "--budget", "50%")
    assert human.returncode == 0, human.stderr
    assert "demand" in human.stdout and "ideal" in human.stdout and "vs ideal" in human.stdout


@needs(ZOO, SIM, PLANNER)
def test_simulate_tunes_the_guard_and_says_which_it_kept(zoo_trace):
    p = run_cli("simulate", zoo_trace, "--budget", "75%", "--tune", "16,8", "--json")
    assert p.returncode == 0, p.stderr
    c = json.loads(p.stdout)["result"]["counters"]
    times = {g: c[f"tuning_{g}_s"] for g in ("auto", "16", "8")}
    assert c["tuned_guard"] == min(times, key=times.get)
    p = run_cli("simulate", zoo_trace, "--budget", "75%", "--tune", "8")
    assert p.returncode == 0 and "tuned: kept" in p.stdout, p.stderr


@pytest.mark.parametrize("args,why", [
    (("--tune", "wide"), "tuning candidates are guards"),
    (("--tune", "oblivious", "--mode", "oblivious"), "'oblivious' is for mode='sampled' or 'auto'"),
    (("--tune", "8", "--policy", "demand"), "does not apply to a saved plan or another policy"),
])
def test_simulate_rejects_a_tuning_it_cannot_do(zoo_trace, args, why):
    p = run_cli("simulate", zoo_trace, *args)
    assert p.returncode == 2 and why in p.stderr, p.stderr


def test_simulate_replays_a_saved_plan(zoo_trace, saved_plan):
    p = run_cli("simulate", zoo_trace, "--plan", saved_plan, "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    from uvm_sched.planner import Plan

    assert doc["budget_bytes"] == Plan.load(saved_plan).meta["budget_bytes"]
    bad = run_cli("simulate", zoo_trace, "--policy", "teleport")
    assert bad.returncode == 2 and "teleport" in one_error_line(bad)


@needs(ZOO, COMPARE)
def test_compare_every_policy_at_each_budget(zoo_trace):
    p = run_cli("compare", zoo_trace, "--budget", "75%,50%", "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    from uvm_sched.sim import POLICIES

    rows = doc["rows"]
    assert {r["policy"] for r in rows} >= set(POLICIES) - {"ideal"}
    assert len({r["budget_bytes"] for r in rows}) == 2
    ideal = [r for r in rows if r["policy"] == "ideal"]
    assert all(abs(r["slowdown"] - 1) < 1e-9 for r in ideal)
    assert doc["frontier"] and all(f["slowdown"] >= 1 - 1e-9 for f in doc["frontier"])
    human = run_cli("compare", zoo_trace, "--budget", "50%")
    assert human.returncode == 0, human.stderr
    for pol in POLICIES:
        assert pol in human.stdout
    assert "frontier" in human.stdout


@needs(ZOO, REPORT, SIM)
def test_report_writes_html_with_plotly_traces(zoo_trace, saved_plan, cli_tmp):
    out = cli_tmp / "report.html"
    p = run_cli("report", zoo_trace, "--plan", saved_plan, "-o", out)
    assert p.returncode == 0, p.stderr
    assert str(out.name) in p.stdout
    figs = report_figures(out.read_text())
    # memory in use, block lifetimes, and copy engines + stalls for each simulated policy
    assert len(figs) >= 4
    assert all(f["data"] for f in figs)
    names = {t.get("name") for f in figs for t in f["data"]}
    assert any("plan" in str(n) for n in names), names  # planned transfers are drawn


def report_figures(html: str) -> list[dict]:
    """The plotly figures embedded in a report page (each a JSON script block)."""
    import re

    assert "<html" in html[:1000].lower() and "Plotly.newPlot" in html
    blocks = re.findall(r'<script type="application/json" class="uvm-fig"[^>]*>(.*?)</script>',
                        html, flags=re.S)
    return [json.loads(b) for b in blocks]


def test_export_torch_snapshot_round_trips_through_load(zoo_trace, cli_tmp):
    reason = missing_part("uvm_sched.trace", "export_torch_snapshot")
    if reason:
        pytest.skip(reason)
    from uvm_sched.trace import load

    dest = cli_tmp / "export.pickle"
    p = run_cli("export", zoo_trace, "--to", "torch-snapshot", "-o", dest, "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["path"] == str(dest) and dest.stat().st_size == doc["bytes"] > 0
    back, orig = load(dest), load(zoo_trace)
    # the snapshot keeps allocations and frees (not accesses or marks)
    assert back.peak_bytes == orig.peak_bytes


def test_export_perfetto_has_one_slice_per_block(zoo_trace, cli_tmp):
    reason = missing_part("uvm_sched.trace", "export_perfetto")
    if reason:
        pytest.skip(reason)
    from uvm_sched.trace import load

    dest = cli_tmp / "export.json"
    p = run_cli("export", zoo_trace, "--to", "perfetto", "-o", dest)
    assert p.returncode == 0, p.stderr
    assert "export.json" in p.stdout
    events = json.loads(dest.read_text())["traceEvents"]
    slices = [e for e in events if e.get("ph") == "X" and e.get("cat") == "block"]
    assert len(slices) == len(load(zoo_trace).block_table())


# -- demo and the console script ------------------------------------------------------------
@needs(ZOO, PLANNER, SIM, REPORT)
def test_demo_small_end_to_end_writes_html(tmp_path):
    out = tmp_path / "demo.html"
    p = run_cli("demo", "--small", "-o", out, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    from uvm_sched.sim import POLICIES

    for pol in POLICIES:
        assert pol in p.stdout
    assert "vs ideal" in p.stdout and str(out.resolve()) in p.stdout.replace("\n", "")
    figs = report_figures(out.read_text())
    assert len(figs) >= 4 and all(f["data"] for f in figs)
    # plotly.js beside the page (--plotly file, the demo's default), named in the output
    (js,) = tmp_path.glob("plotly-*.min.js")
    assert f'<script src="{js.name}"' in out.read_text()
    assert str(js.resolve()) in p.stdout.replace("\n", "")


@needs(ZOO, PLANNER, SIM)
def test_demo_json_is_the_only_stdout(tmp_path):
    p = run_cli("demo", "--small", "--no-report", "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["budget_bytes"] == round(0.5 * doc["peak_bytes"])
    by = {r["policy"]: r for r in doc["results"]}
    assert by["ideal"]["slowdown"] == pytest.approx(1.0)
    assert all(np.isfinite(r["iteration_time_s"]) for r in doc["results"])
    assert not list(tmp_path.glob("*.html")) and not list(tmp_path.glob("*.js"))
    assert doc["report"] is None and doc["plotly_js"] is None


def test_warmup_compiles_the_kernels_and_says_how_long(capsys):
    from uvm_sched import cli

    assert cli.main(["warmup", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["seconds"] > 0 and doc["numba"] is True


def test_console_script_entry_point_if_installed():
    exe = shutil.which("uvm-sched")
    if exe is None:
        pytest.skip("uvm-sched console script not installed (pip install -e .)")
    p = run_cli("--help", entry=exe)
    assert p.returncode == 0 and "uvm-sched" in p.stdout
    p = run_cli("plan", entry=exe)
    assert p.returncode == 2
