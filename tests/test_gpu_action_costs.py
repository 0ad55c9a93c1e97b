"""scripts/gpu_action_costs.py (what each plan action costs on a GPU) and
benchmarks/gpu_report.py (a GPU session's figures gathered into results/) without a GPU:
the probe refuses with the reason, runs its sequence on the host backend, and the report
puts the kit's summary, the cost tables and the reading together."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO / "benchmarks"))
import gpu_action_costs  # noqa: E402
import gpu_report  # noqa: E402

MiB = 1 << 20


def test_the_probe_without_a_gpu_says_so(tmp_path):
    out = tmp_path / "costs.json"
    r = subprocess.run([sys.executable, "scripts/gpu_action_costs.py", "--out", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    assert r.returncode != 0 and "no CUDA device" in r.stderr
    assert not out.exists()


@pytest.fixture()
def host():
    from uvm_sched import native

    native._reset("host", force=True)
    yield
    native._reset(force=True)


def test_each_block_runs_the_whole_sequence_on_fresh_memory(host):
    touched = []
    rows = gpu_action_costs.per_size(4 * MiB, 2, lambda p, n: touched.append((p, n)))
    names = [r["action"] for r in rows]
    assert names[0] == "populate (prefetch to device, fresh)"
    assert "kernel touch (memset), discarded" in names
    assert names.index("populate after that discard") < names.index(
        "kernel touch (memset), discarded then populated")
    assert all(r["reps"] == (1 if r["action"] == "kernel touch (memset), fresh" else 2)
               for r in rows)
    assert all(r["bytes"] == 4 * MiB and r["done_us"] >= r["call_us"] > 0 for r in rows)
    # two blocks, two memsets each, and one fresh block: three different addresses
    assert len({p for p, _ in touched}) == 3 and {n for _, n in touched} == {4 * MiB}


def test_the_report_gathers_the_kit_the_costs_and_the_reading(tmp_path, host):
    kit = tmp_path / "kit"
    kit.mkdir()
    steps = [{"name": "library", "status": "ok", "seconds": 0.5, "reason": "backend cuda",
              "data": None, "log_tail": "x" * 100}]
    (kit / "results.json").write_text(json.dumps({"steps": steps}))
    (kit / "summary.md").write_text("# GPU validation kit — test\n")
    rows = gpu_action_costs.per_size(2 * MiB, 1, None)
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps({"device": "dev", "torch": "t", "backend": "host",
                                 "rows": rows, "while_busy": []}))
    notes = tmp_path / "notes.md"
    notes.write_text("## Reading\n\nby hand\n")
    assert gpu_report.main(["--kit", str(kit), "--costs", str(costs), "--name", "t",
                            "--notes", str(notes), "--dir", str(tmp_path)]) == 0
    md = (tmp_path / "gpu_t.md").read_text()
    assert "# GPU validation kit — test" in md and md.rstrip().endswith("by hand")
    assert "| 2 | populate (prefetch to device, fresh) |" in md
    doc = json.loads((tmp_path / "gpu_t.json").read_text())
    assert "log_tail" not in doc["kit"]["steps"][0]  # the logs stay in the kit's logs/
    assert doc["action_costs"][0]["rows"] == rows
