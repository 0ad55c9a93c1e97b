"""Chrome/Perfetto export of block lifetimes (and kernels when tick_ns is known)."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from uvm_sched.trace import AccessMode, TraceBuilder, TraceError, export_perfetto, load


def trace(with_times=True):
    b = TraceBuilder(name="perf", source="test")
    w = b.alloc(1 << 20)
    for it in range(2):
        b.mark(t_ns=b.tick * 1000)
        x = b.alloc(4096, t_ns=b.tick * 1000)
        y = b.alloc(8192, t_ns=b.tick * 1000, stream=2)
        b.access(w, AccessMode.READ, t_ns=b.tick * 1000)
        b.next_tick(300.0 if with_times else float("nan"))
        b.free(x, t_ns=b.tick * 1000)
        b.next_tick(700.0 if with_times else float("nan"))
        b.free(y, t_ns=b.tick * 1000 + 10)
        b.next_tick(float("nan"))
    return b.build()


def slices(doc, cat):
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == cat]


def test_perfetto_block_lifetimes_on_device_timeline(tmp_path):
    t = trace()
    p = tmp_path / "p.json"
    export_perfetto(t, p)
    doc = json.loads(p.read_text())
    assert doc["otherData"]["time_base"].startswith("device")
    blocks = slices(doc, "block")
    assert len(blocks) == len(t.block_table())
    by_id = {e["args"]["block"]: e for e in blocks}
    # block 1: allocated at the start of tick 0, freed after tick 1's kernel (300 + 700 ns)
    assert by_id[1]["ts"] == 0 and by_id[1]["dur"] == pytest.approx(1.0)
    # block 2 freed at the end of tick 2 (unknown time counts 0)
    assert by_id[2]["dur"] == pytest.approx(1.0) and by_id[2]["args"]["stream"] == 2
    # the persistent block spans the whole trace
    assert by_id[0]["dur"] == pytest.approx(2.0) and by_id[0]["args"]["free_tick"] == -1
    # lanes: slices on one thread never overlap (the format requires nesting)
    lanes: dict = {}
    for e in blocks:
        lanes.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for iv in lanes.values():
        iv.sort()
        assert all(a_end <= b_start + 1e-9 for (_, a_end), (b_start, _) in zip(iv, iv[1:]))
    assert len(lanes) == 3  # three blocks live at once at most
    kernels = slices(doc, "kernel")
    assert [k["args"]["tick"] for k in kernels] == [0, 1, 3, 4]
    assert [k["dur"] for k in kernels] == [0.3, 0.7, 0.3, 0.7]
    marks = [e for e in doc["traceEvents"] if e.get("ph") == "i"]
    assert [m["ts"] for m in marks] == [0.0, 1.0]
    counters = [e["args"]["bytes"] for e in doc["traceEvents"] if e.get("ph") == "C"]
    assert max(counters) == t.peak_bytes and counters[-1] == 1 << 20


def test_perfetto_uses_t_ns_without_device_times(tmp_path):
    t = trace(with_times=False)
    p = tmp_path / "p.json.gz"
    export_perfetto(t, p)
    doc = json.loads(gzip.decompress(p.read_bytes()))
    assert doc["otherData"]["time_base"] == "t_ns"
    assert not slices(doc, "kernel")
    by_id = {e["args"]["block"]: e for e in slices(doc, "block")}
    assert by_id[2]["ts"] == 0 and by_id[2]["dur"] == pytest.approx(2.010)
    # our own perfetto file is not an allocator trace: load says so instead of guessing
    with pytest.raises(TraceError, match="no \\[memory\\] events"):
        load(p)


def test_perfetto_of_g10_workload(g10_dir, tmp_path):
    folder = sorted(p for p in g10_dir.iterdir() if (p / "kernels.csv").is_file())[0]
    t = load(folder, iterations=1)
    p = tmp_path / "g.json"
    export_perfetto(t, p)
    doc = json.loads(p.read_text())
    kernels = slices(doc, "kernel")
    assert len(kernels) == t.n_ticks
    np.testing.assert_allclose(sum(k["dur"] for k in kernels), np.nansum(t.tick_ns) / 1e3)
    assert len(slices(doc, "block")) == len(t.block_table())


def test_export_is_atomic(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("old")
    with pytest.raises(Exception):
        export_perfetto("not a trace", p)
    assert p.read_text() == "old" and not (tmp_path / "x.json.tmp").exists()


def test_empty_trace_exports(tmp_path):
    from uvm_sched.trace import Trace

    t = Trace({k: [] for k in ("tick", "kind", "block", "size")})
    export_perfetto(t, tmp_path / "e.json")
    doc = json.loads((tmp_path / "e.json").read_text())
    assert not slices(doc, "block")
    assert not [e for e in doc["traceEvents"] if e.get("ph") == "C"]
