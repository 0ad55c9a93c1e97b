"""The GPU validation kit's logic runs on CPU in dry mode: every GPU step says
"skipped: no GPU" with its reason, CPU steps run, results.json and summary.md are written."""
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, skip_without_compiler


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_kit")
    r = subprocess.run(["bash", "scripts/gpu_check.sh", str(out), "--dry-run", "--quick"],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    return r, out


def test_dry_run_exits_zero_and_writes_results(dry_run):
    r, out = dry_run
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((out / "results.json").read_text())
    assert doc["dry_run"] is True and doc["gpu"] is False
    assert (out / "summary.md").read_text().startswith("# GPU validation kit")


def test_dry_run_skips_every_gpu_step_with_a_reason(dry_run):
    _, out = dry_run
    steps = {s["name"]: s for s in json.loads((out / "results.json").read_text())["steps"]}
    gpu_steps = [n for n in steps if n in ("gpu-tests", "calibrate") or n.startswith("e2e:")]
    assert len(gpu_steps) >= 2 + 2 * 4
    for n in gpu_steps:
        assert steps[n]["status"] == "skipped", steps[n]
        assert steps[n]["reason"].startswith("skipped: no GPU"), steps[n]


def test_dry_run_loads_the_library_and_predicts(dry_run):
    _, out = dry_run
    steps = {s["name"]: s for s in json.loads((out / "results.json").read_text())["steps"]}
    assert steps["library"]["status"] == "ok", steps["library"]
    # the compile step runs on CPU too: it fills numba's cache, its seconds the cost
    assert steps["compile"]["status"] == "ok", steps["compile"]["log_tail"]
    assert steps["compile"]["data"]["seconds"] > 0
    assert steps["predict"]["status"] == "ok", steps["predict"]["log_tail"]
    rows = steps["predict"]["data"]["rows"]
    assert {r["policy"] for r in rows} >= {"ideal", "demand", "uvm-sched"}
    assert all(r["predicted_ms"] > 0 for r in rows)


def test_dry_run_puts_each_microbenchmark_beside_its_simulated_twin(dry_run):
    from uvm_sched.sim import TWINS

    _, out = dry_run
    steps = {s["name"]: s for s in json.loads((out / "results.json").read_text())["steps"]}
    sbs = steps["sidebyside"]
    assert sbs["status"] == "ok", sbs["log_tail"]
    assert sbs["data"] == json.loads((out / "sidebyside.json").read_text())
    rows = sbs["data"]["rows"]
    assert [r["scenario"] for r in rows] == [t.name for t in TWINS]
    assert all(r["measured"] is None and r["simulated"] > 0 for r in rows)
    assert "| copy h2d alone | B/s | no GPU | 5e+10 |  |" in (out / "summary.md").read_text()


def test_usage_error_without_outdir():
    r = subprocess.run(["bash", "scripts/gpu_check.sh"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 2 and "usage" in r.stderr


def test_summary_lists_failed_steps_with_reasons():
    sys.path.insert(0, str(REPO / "scripts"))
    import gpu_check

    doc = {"started": "2026-01-01T00:00:00", "commit": "abc", "gpu": True, "gpu_reason": None,
           "dry_run": False,
           "steps": [{"name": "calibrate", "status": "failed", "seconds": 3.0,
                      "reason": "exit 1: boom", "data": None}]}
    md = gpu_check.summary_markdown(doc)
    assert "| calibrate | failed | 3.0 | exit 1: boom |" in md


def _steps(out):
    return {s["name"]: s for s in json.loads((out / "results.json").read_text())["steps"]}


def test_dry_run_library_step_makes_each_direct_call_on_the_fake_driver(dry_run):
    _, out = dry_run
    lib = _steps(out)["library"]
    assert lib["data"]["backend"] == "cuda", lib  # the cuda backend, over the fake driver
    assert lib["reason"].startswith("backend cuda: CUDA driver") and "fake driver" in lib["reason"]
    st = lib["data"]["stats"]
    assert (st["direct_prefetches"], st["direct_advises"], st["direct_discards"],
            st["direct_syncs"], st["direct_releases"]) == (2, 2, 1, 1, 1)
    assert st["direct_failed"] == 0 and lib["data"]["discard"] == "ok"
    assert st["allocated_blocks"] == 0


def _kit(out, *args):
    return subprocess.run(["bash", "scripts/gpu_check.sh", str(out), "--dry-run", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=300)


def test_without_a_fake_driver_the_library_step_runs_on_the_host_backend_and_says_so(tmp_path):
    r = _kit(tmp_path, "--only", "library", "--fake-libcuda", str(tmp_path / "none.so"))
    assert r.returncode == 0, r.stderr[-3000:]
    steps = _steps(tmp_path)
    assert list(steps) == ["library"]
    lib = steps["library"]
    assert lib["status"] == "ok" and lib["data"]["backend"] == "host"
    assert lib["reason"].startswith("backend host: host emulation requested")
    assert "none.so does not exist" in lib["reason"]
    assert lib["data"]["stats"]["direct_prefetches"] == 2  # recorded, not executed


def test_a_fresh_clone_compiles_the_fake_driver_into_the_output(tmp_path, monkeypatch):
    sys.path.insert(0, str(REPO / "scripts"))
    import shutil

    import gpu_check

    skip_without_compiler("CC", "cc")
    clone = tmp_path / "clone"
    (clone / "tests" / "native").mkdir(parents=True)
    for name in ("fake_cuda.c", "fake_clock.h"):
        shutil.copy(REPO / "tests" / "native" / name, clone / "tests" / "native")
    monkeypatch.setattr(gpu_check, "REPO", clone)
    fake, how = gpu_check.fake_driver(tmp_path / "out", None)
    assert fake == tmp_path / "out" / "fake_cuda" / "libcuda.so.1" and fake.exists()
    assert "compiled now" in how
    monkeypatch.setenv("CC", "/nonexistent/cc")
    shutil.rmtree(tmp_path / "out")
    fake, how = gpu_check.fake_driver(tmp_path / "out", None)
    assert fake is None and "could not build it" in how


def test_only_and_deadline(tmp_path):
    r = _kit(tmp_path, "--only", "library,predict", "--deadline", "5")
    assert r.returncode == 0, r.stderr[-3000:]
    steps = _steps(tmp_path)
    assert list(steps) == ["library", "predict"]
    assert all(s["status"] == "skipped" and "kit deadline" in s["reason"] for s in steps.values())
    r = _kit(tmp_path, "--only", "librar")
    assert r.returncode == 2 and "unknown step(s) librar" in r.stderr


# ---- a GPU image is not this machine: what the kit must survive ---------------------------

def _gpu_check():
    sys.path.insert(0, str(REPO / "scripts"))
    import gpu_check

    return gpu_check


@pytest.fixture
def pretend_gpu(monkeypatch, tmp_path):
    """The kit with a GPU 'present' and every command recorded and answered by ``answer``
    (cmd -> (returncode, output)); nothing is run."""
    gpu_check = _gpu_check()
    ran = []
    answer = {"fn": lambda cmd: (0, "")}

    def fake_run(cmd, timeout, env=None):
        ran.append((cmd, timeout))
        rc, out = answer["fn"](cmd)
        return rc, out, 0.01

    monkeypatch.setattr(gpu_check, "gpu_reason", lambda dry_run: None)
    monkeypatch.setattr(gpu_check, "_run", fake_run)
    return gpu_check, ran, answer, tmp_path


def test_the_proving_steps_run_first_and_fit_the_deadline(pretend_gpu):
    gpu_check, ran, _, out = pretend_gpu
    assert sum(gpu_check.LIMITS[s] for s in gpu_check.PROVING) <= 480
    assert gpu_check.main([str(out), "--oversubscribe"]) == 0
    names = list(_steps(out))
    assert names[:6] == ["build", "library", "compile", "e2e:gpt:default",
                         "e2e:gpt:uvm-oblivious:budget50", "predict"]
    assert names.index("gpu-tests") > 5 and names.index("calibrate") > 5
    assert names[-1] == "predict:all"
    budget_cmd = next(c for c, _ in ran if "--budget" in c)
    assert budget_cmd[budget_cmd.index("--mode") + 1] == "uvm-oblivious"


def test_without_oversubscription_the_plan_runs_at_its_budget_on_an_unshrunk_device(pretend_gpu):
    gpu_check, ran, _, out = pretend_gpu
    assert gpu_check.main([str(out)]) == 0
    steps = _steps(out)
    for model in gpu_check.E2E_MODELS:
        shrunk = steps[f"e2e:{model}:uvm-oblivious:budget50"]
        assert shrunk["status"] == "skipped" and "--oversubscribe" in shrunk["reason"]
        assert f"e2e:{model}:uvm-oblivious:plan50" in steps
        assert f"e2e:{model}:uvm:plan50" not in steps  # demand paging has no plan to run
    budgeted = [c for c, _ in ran if "--budget" in c]
    assert budgeted and all("--no-shrink" in c for c in budgeted)
    names = list(steps)
    assert names.index("e2e:gpt:uvm-oblivious:plan50") < names.index("predict")


def test_gpu_tests_collect_only_the_gpu_modules_and_survive_collection_errors(pretend_gpu):
    gpu_check, ran, _, out = pretend_gpu
    gpu_check.main([str(out), "--only", "gpu-tests"])
    (cmd, _), = ran
    assert "--continue-on-collection-errors" in cmd and cmd[cmd.index("-m", 3) + 1] == "gpu"
    listed = {c for c in cmd if c.startswith("tests/")}
    gpu_mark = re.compile(r"^@pytest\.mark\.gpu|marks=pytest\.mark\.gpu", re.M)
    marked = {f"tests/{p.name}" for p in (REPO / "tests").glob("test_*.py")
              if gpu_mark.search(p.read_text())}
    assert len(marked) >= 4
    assert marked <= listed and listed <= set(gpu_check.GPU_TEST_FILES)


def test_a_step_whose_package_is_missing_is_skipped_naming_it(pretend_gpu, monkeypatch):
    gpu_check, ran, answer, out = pretend_gpu
    real = gpu_check.missing
    monkeypatch.setattr(gpu_check, "missing",
                        lambda pkgs: [p for p in pkgs if p in ("pytest", "numba")] + real(pkgs))
    answer["fn"] = lambda cmd: ((1, "Traceback...\nModuleNotFoundError: No module named "
                                    "'pandas'\n") if "--predict" in cmd else (0, ""))
    gpu_check.main([str(out), "--only", "gpu-tests,calibrate,predict"])
    steps = _steps(out)
    assert steps["gpu-tests"]["status"] == "skipped"
    assert "missing package(s) pytest" in steps["gpu-tests"]["reason"]
    assert "missing package(s) numba" in steps["calibrate"]["reason"]
    assert steps["predict"]["status"] == "skipped"
    assert "missing package pandas" in steps["predict"]["reason"]
    assert not any("pytest" in c for c, _ in ran)


def test_calibration_without_libnvvm_is_skipped_with_the_reason(pretend_gpu, monkeypatch):
    gpu_check, ran, answer, out = pretend_gpu
    monkeypatch.setattr(gpu_check, "missing", lambda pkgs: [])
    answer["fn"] = lambda cmd: ((1, "NvvmSupportError: libNVVM cannot be found.")
                                if gpu_check.NVVM_PROBE in cmd else (0, ""))
    gpu_check.main([str(out), "--only", "calibrate"])
    cal = _steps(out)["calibrate"]
    assert cal["status"] == "skipped" and "libNVVM" in cal["reason"]
    assert not any("kernels.measure" in c for c, _ in ran)


def test_sidebyside_reads_the_calibration_when_the_kit_made_one(pretend_gpu):
    gpu_check, ran, _, out = pretend_gpu
    gpu_check.main([str(out), "--only", "sidebyside"])
    (cmd, _), = ran
    assert cmd[1:4] == ["-m", "uvm_sched", "sidebyside"] and "--measured" not in cmd
    (out / "calibration.json").write_text("{}")
    ran.clear()
    gpu_check.main([str(out), "--only", "sidebyside"])
    (cmd, _), = ran
    assert cmd[cmd.index("--measured") + 1] == str(out / "calibration.json")


def test_a_timed_out_step_is_killed_with_its_children(tmp_path):
    gpu_check = _gpu_check()
    pid_file = tmp_path / "child.pid"
    code = ("import subprocess, sys, time; "
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            f"open({str(pid_file)!r}, 'w').write(str(c.pid)); time.sleep(60)")
    rc, out, secs = gpu_check._run([sys.executable, "-c", code], 3)
    assert rc == 124 and "killed at the time limit" in out
    pid = int(pid_file.read_text())
    status = Path(f"/proc/{pid}/status")
    for _ in range(100):  # SIGKILL is delivered asynchronously
        if not status.exists() or "State:\tZ" in status.read_text():
            break  # gone (or a zombie waiting for init)
        time.sleep(0.05)
    else:
        raise AssertionError(f"the step's child {pid} outlived it: {status.read_text()[:80]}")


def test_the_library_step_ignores_what_the_probe_prints(tmp_path, monkeypatch):
    gpu_check = _gpu_check()
    monkeypatch.setattr(gpu_check, "LIBRARY_PROBE", gpu_check.LIBRARY_PROBE
                        + "\nprint('a warning on stderr', file=sys.stderr)\n")
    kit = gpu_check.Kit(tmp_path, True, "dry run requested")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    gpu_check.library_step(kit, env, tmp_path / "no-fake.so")
    lib = _steps(tmp_path)["library"]
    assert lib["status"] == "ok", lib
    assert lib["data"]["backend"] == "host"


def test_a_kit_error_in_one_step_is_recorded_and_the_kit_goes_on(pretend_gpu, monkeypatch):
    gpu_check, _, _, out = pretend_gpu

    def boom(*a):
        raise RuntimeError("the disk is full")

    monkeypatch.setattr(gpu_check, "library_step", boom)
    assert gpu_check.main([str(out), "--only", "library,predict"]) == 0
    steps = _steps(out)
    assert steps["library"]["status"] == "failed"
    assert steps["library"]["reason"] == "kit error: RuntimeError: the disk is full"
    assert "predict" in steps


def test_the_runtime_probe_runs_beside_the_kernels_and_the_summary_compares_them(pretend_gpu,
                                                                                 monkeypatch):
    gpu_check, ran, answer, out = pretend_gpu
    monkeypatch.setattr(gpu_check, "missing", lambda pkgs: [])

    def fn(cmd):
        if "kernels.measure" in cmd:
            Path(cmd[cmd.index("kernels.measure") + 1]).write_text(json.dumps(
                {"fields": {"h2d_prefetch_Bps": 50e9, "fault_batch_latency_s": 40e-6}}))
        if gpu_check.SELF_CALIBRATION_PROBE in cmd:
            Path(cmd[-1]).write_text(json.dumps({"h2d_Bps": 45e9, "fault_batch_s": 50e-6,
                                                 "d2h_Bps": 40e9, "duplex_Bps": 60e9}))
        return 0, ""
    answer["fn"] = fn
    gpu_check.main([str(out), "--only", "calibrate"])
    steps = _steps(out)
    assert steps["calibrate:self"]["status"] == "ok", steps["calibrate:self"]
    table = {r["figure"]: r for r in json.loads((out / "calibration_compare.json").read_text())}
    assert table["h2d_prefetch_Bps"]["ratio"] == pytest.approx(0.9)
    assert table["fault_batch_latency_s"]["ratio"] == pytest.approx(1.25)
    assert table["d2h_prefetch_Bps"]["kernels"] is None  # kernels.measure did not give it
    md = (out / "summary.md").read_text()
    assert "## kernels.measure beside uvm_sched.calibrate" in md
    assert "| h2d_prefetch_Bps | 5e+10 | 4.5e+10 | 0.90 |" in md


def test_the_runtime_probe_is_skipped_in_a_dry_run_with_the_reason(dry_run):
    _, out = dry_run
    steps = {s["name"]: s for s in json.loads((out / "results.json").read_text())["steps"]}
    assert steps["calibrate:self"]["status"] == "skipped"
    assert steps["calibrate:self"]["reason"].startswith("skipped: no GPU")
