"""Recording one's own loop as it runs: ``uvm-sched record -- python train.py`` and
``uvm_sched.trace.recording()`` (uvm_sched/trace/_live.py), on CPU tensors."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import uvm_sched  # noqa: E402
from uvm_sched import cli, pattern  # noqa: E402
from uvm_sched.trace import load, recording  # noqa: E402
from uvm_sched.trace._live import RecordingError  # noqa: E402

SCRIPT = Path(__file__).parent / "scripts" / "train_mlp.py"
ROOT = Path(__file__).resolve().parents[1]


def _mlp():
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def test_cli_records_an_unchanged_script_and_analysis_finds_its_optimizer_steps(tmp_path):
    dest = tmp_path / "train.parquet"
    # 7 batches (200 samples, batch 32: a partial last one), accumulation over 2: 3 steps
    argv = [sys.executable, "-m", "uvm_sched", "record", "--json", "-o", str(dest), "--",
            "python", str(SCRIPT), "--samples", "200", "--batch", "32", "--accum", "2"]
    env = {"PYTHONPATH": str(ROOT), "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    ran = int(re.search(r"optimizer steps: (\d+)", done.stderr).group(1))  # the script's own count
    assert ran == 3
    doc = json.loads(done.stdout)
    assert doc["optimizer_steps"] == ran and doc["markers"] == ran
    assert doc["time_source"].startswith("roofline from recorded shapes")
    trace = load(dest)
    pat = pattern.analyze(trace)
    assert len(pat.iterations) == ran
    assert pat.summary()["iterations"] == ran


def test_cli_record_refuses_a_non_python_command_and_a_missing_script(tmp_path, capsys):
    assert cli.main(["record", "-o", str(tmp_path / "x.parquet"), "--", "bash", "t.sh"]) == 2
    assert "python" in capsys.readouterr().err
    assert cli.main(["record", "-o", str(tmp_path / "x.parquet"), "--", "python",
                     str(tmp_path / "missing.py")]) == 2
    assert "missing.py" in capsys.readouterr().err
    assert not (tmp_path / "x.parquet").exists()


def test_recording_marks_every_optimizer_step_of_an_accumulating_loop():
    model = _mlp()  # built before the recording: its parameters are allocated at first use
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with recording(device="cpu") as rec:
        for i in range(8):
            model(torch.randn(8 + i, 16)).sum().backward()  # varying batch sizes
            if i % 2 == 1:
                opt.step()
                opt.zero_grad()
    tr = rec.trace
    assert rec.steps == 4 and len(tr.iteration_starts) == 4
    assert tr.meta["late_blocks"] > 0 and tr.meta["device"] == "cpu"
    assert tr.meta["time_source"] == "roofline from recorded shapes (h200-pcie5)"
    assert len(pattern.analyze(tr).iterations) == 4


def test_uvm_sched_step_calls_are_the_markers_when_present():
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with recording(device="cpu") as rec:
        torch.randn(4, 16)  # set-up before the first explicit marker
        for _ in range(3):
            uvm_sched.step()
            for _ in range(2):  # two optimizer steps per marked iteration
                model(torch.randn(8, 16)).sum().backward()
                opt.step()
                opt.zero_grad()
    assert rec.steps == 6
    assert rec.trace.meta["steps_signal"] == "uvm_sched.step() calls"
    assert len(rec.trace.iteration_starts) == 3
    assert len(pattern.analyze(rec.trace).iterations) == 3


def test_recording_that_allocates_nothing_on_the_device_says_so():
    with pytest.raises(RecordingError, match="nothing was allocated on cuda"):
        with recording(device="cuda"):
            torch.randn(4, 4) @ torch.randn(4, 4)


def test_a_compiled_module_is_refused_with_the_routes_that_record_it():
    model = torch.compile(_mlp())
    with pytest.raises(RecordingError, match="uvm-sched record -- python"):
        with recording(device="cpu"):
            model(torch.randn(2, 16))


def test_meta_recorder_refuses_a_compiled_module_naming_the_live_route():
    from uvm_sched.trace import record

    with pytest.raises(RecordingError, match="uvm-sched record -- python"):
        record(lambda: torch.compile(_mlp()), lambda: torch.randn(2, 16), iters=1)


def test_a_module_compiled_in_place_is_refused_too():
    model = _mlp()
    model.compile()
    with pytest.raises(RecordingError, match="torch.compile'd module \\(Sequential\\)"):
        with recording(device="cpu"):
            model(torch.randn(2, 16))
