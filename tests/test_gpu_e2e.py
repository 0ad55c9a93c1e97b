"""scripts/gpu_e2e.py against the real APIs: the zoo's (model_fn, batch_fn, loss_fn), the
training loop (one marker per step, reproducible losses) and the Scheduler it makes run on
CPU; the end-to-end run itself on a GPU."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import gpu_e2e  # noqa: E402

# model -> (sizes, runs, steps): GPT-2 small has 124M parameters, so on CPU it runs once
# (the zoo's text-model signatures); ResNet-50 runs twice (the losses must repeat)
TINY = {"gpt": ({"batch": 1, "seq": 8}, 1, 1), "resnet": ({"batch": 2, "image": 32}, 2, 2)}

LOOP = r"""
import json, sys
sys.path.insert(0, "scripts")
import gpu_e2e
out = {}
for model, (sizes, runs, steps) in json.loads(sys.argv[1]).items():
    out[model] = []
    for _ in range(runs):
        gpu_e2e.deterministic()
        module, batch, loss_fn, opt = gpu_e2e.build(model, "cpu", sizes)
        marks = []
        losses, times = gpu_e2e.train(module, batch, loss_fn, opt, steps,
                                      marker=lambda: marks.append(1))
        out[model].append((losses, len(marks), len(times)))
print(json.dumps(out))
"""


def test_the_training_loop_runs_the_zoo_models_and_repeats_its_losses():
    # a subprocess: deterministic() switches PyTorch to deterministic algorithms globally
    r = subprocess.run([sys.executable, "-c", LOOP, json.dumps(TINY)], cwd=REPO,
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    for model, runs in out.items():
        steps = TINY[model][2]
        for losses, marks, times in runs:
            assert len(losses) == steps and all(math.isfinite(x) for x in losses), model
            assert marks == times == steps  # one marker per step
        # same seeds, same numbers: what the kit's loss comparison relies on
        assert all(r[0] == runs[0][0] for r in runs), model
    assert len(out["resnet"]) == 2


def test_the_scheduler_is_made_without_the_optimizer_hook():
    # the loop marks iterations itself; the hook would mark each one a second time
    for mode, planning in (("uvm-oblivious", "oblivious"), ("uvm-sampled", "sampled")):
        s = gpu_e2e.make_scheduler(mode, None)
        assert s.mode == planning and s._hook_pref is False and s.budget == "100%"
        assert gpu_e2e.make_scheduler(mode, 123 << 20).budget == 123 << 20


def test_a_scheduler_run_trains_on_until_its_plan_ran_armed_or_a_limit():
    class Sched:  # the plan is armed at the 7th marker
        def __init__(self):
            self.steps = 0

        def stats(self):
            return {"steps_before_plan": 7 if self.steps >= 7 else None}

    for max_steps, time_limit, want in ((300, 0.0, 7 + 4), (9, 0.0, 9), (300, 1e-9, 3)):
        sched = Sched()
        more = gpu_e2e.until_armed(sched, 4, max_steps, time_limit)
        done = 3  # the --steps ran; then one step per yes
        while more(done, 0.0 if not time_limit else 1.0):
            done += 1
            sched.steps = done
        assert done == want, (max_steps, time_limit)


def test_sizes_name_the_zoo_keywords():
    from uvm_sched.trace import zoo

    for name, sizes in gpu_e2e.MODELS.values():
        zoo.build(name, **sizes)  # raises on a keyword the model does not take


def test_a_run_without_a_gpu_says_so(tmp_path):
    out = tmp_path / "run.json"
    r = subprocess.run([sys.executable, "scripts/gpu_e2e.py", "--model", "gpt", "--mode", "uvm",
                        "--steps", "3", "--out", str(out)], cwd=REPO, capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert r.returncode != 0 and "no CUDA device" in r.stderr
    assert not out.exists()


def test_no_shrink_without_a_budget_is_refused(tmp_path):
    r = subprocess.run([sys.executable, "scripts/gpu_e2e.py", "--model", "gpt", "--mode",
                        "uvm-oblivious", "--no-shrink", "--out", str(tmp_path / "run.json")],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--no-shrink needs --budget" in r.stderr


@pytest.mark.gpu
def test_a_gpt_run_under_uvm_sched_on_the_gpu(tmp_path):
    out = tmp_path / "run.json"
    r = subprocess.run([sys.executable, "scripts/gpu_e2e.py", "--model", "gpt", "--mode", "uvm",
                        "--steps", "3", "--out", str(out)], cwd=REPO, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(out.read_text())
    assert len(res["losses"]) == 3 and all(math.isfinite(x) for x in res["losses"])
    assert res["stats"]["backend"] == "cuda" and res["stats"]["marks"] == 3
    assert res["stats"]["n_malloc"] > 0 and res["peak_device_bytes"] > 0
    assert res["stats"]["errors_double_free"] == res["stats"]["errors_unknown_pointer"] == 0


def test_predict_uses_the_default_runs_measured_iterations_as_compute(tmp_path, monkeypatch):
    # a tiny workload in place of the kit's two: the default run measured 40 ms per step
    # after warm-up; the prediction with measured compute puts the ideal at exactly that
    import argparse

    from uvm_sched.trace import AccessMode, TraceBuilder, zoo

    def record(name, iters, hw, **sizes):  # iterations of four 1 ms ticks, 2 blocks
        b = TraceBuilder(name=name, source="recorder", hw=hw)
        for _ in range(iters):
            b.mark()
            x = b.alloc(2 << 20)
            b.access(x, AccessMode.WRITE)
            b.next_tick(1e6)
            y = b.alloc(2 << 20)
            b.access(y, AccessMode.WRITE)
            b.next_tick(1e6)
            for blk in (x, y):
                b.access(blk)
                b.free(blk)
                b.next_tick(1e6)
        return b.build()

    sizes = {"batch": 2, "image": 16}
    monkeypatch.setattr(gpu_e2e, "MODELS", {"tiny": ("tiny", sizes)})
    monkeypatch.setattr(zoo, "record", record)
    steps = [500.0] * gpu_e2e.WARMUP_STEPS + [40.0, 42.0, 38.0]
    (tmp_path / "e2e_tiny_default.json").write_text(
        json.dumps({"sizes": sizes, "iter_ms": steps, "iter_ms_median": 40.0}))
    out = gpu_e2e.predict(argparse.Namespace(calibration=None, results=str(tmp_path)))
    rows = {r["run"]: r for r in out["rows"]}
    ideal = rows["tiny:default"]
    assert ideal["predicted_ms_measured_compute"] == pytest.approx(40.0)
    assert ideal["measured_ms"] == 40.0 and ideal["predicted_ms"] == pytest.approx(4.0)
    assert all(r["predicted_ms_measured_compute"] >= 40.0 - 1e-9 for r in rows.values())
    src = out["compute_times"]["tiny"]
    assert src["roofline"].startswith("roofline") and src["measured"].startswith(
        "measured: 40 ms per iteration (median of 3, seconds given per iteration)")
    # without a default run of the same workload: the roofline alone, and why
    (tmp_path / "e2e_tiny_default.json").write_text(json.dumps({"sizes": {"batch": 4}}))
    assert gpu_e2e._run_doc(tmp_path, "tiny", "default", sizes) is None
    timed, why = gpu_e2e.measured_compute(None, None)
    assert timed is None and why.startswith("no default run")
