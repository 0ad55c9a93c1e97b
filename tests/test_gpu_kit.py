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
