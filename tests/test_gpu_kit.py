"""The GPU validation kit's logic runs on CPU in dry mode: every GPU step says
"skipped: no GPU" with its reason, CPU steps run, results.json and summary.md are written."""
import json
import subprocess
import sys

import pytest

from conftest import REPO


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
    assert steps["predict"]["status"] == "ok", steps["predict"]["log_tail"]
    rows = steps["predict"]["data"]["rows"]
    assert {r["policy"] for r in rows} >= {"ideal", "demand", "uvm-sched"}
    assert all(r["predicted_ms"] > 0 for r in rows)


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
    import os
    import shutil

    import gpu_check

    if shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("no C compiler on PATH (the installed-wheel run has none)")
    clone = tmp_path / "clone"
    (clone / "tests" / "native").mkdir(parents=True)
    shutil.copy(REPO / "tests" / "native" / "fake_cuda.c", clone / "tests" / "native")
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
