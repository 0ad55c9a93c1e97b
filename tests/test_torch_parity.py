"""PyTorch's memory tools under uvm_sched: memory_stats in torch's key names, snapshots from
the event ring that torch's own _memory_viz opens (with Python frames when asked), and a
live run saved as a trace -- all on the host backend, no GPU."""
from __future__ import annotations

import ctypes
import pickle
import re

import pytest

torch = pytest.importorskip("torch")
native = pytest.importorskip("uvm_sched.native")

import uvm_sched  # noqa: E402
from uvm_sched.runtime import Scheduler  # noqa: E402

from _planner_helpers import host_backend  # noqa: E402

MiB = 1 << 20
host = pytest.fixture(host_backend)


@pytest.fixture
def history(host):
    yield
    uvm_sched.record_memory_history(None)


def torch_stat_keys() -> set[str] | None:
    """Every key torch.cuda.memory_stats documents, expanded from its docstring."""
    doc = torch.cuda.memory_stats.__doc__ or ""
    keys = set()
    for stem, groups in re.findall(r'"([a-z_]+)((?:\.\{[a-z_,]+\})+)"', doc):
        parts = [[stem]] + [g.split(",") for g in re.findall(r"\{([a-z_,]+)\}", groups)]
        expanded = [""]
        for i, p in enumerate(parts):
            expanded = [e + ("." if i else "") + x for e in expanded for x in p]
        keys.update(expanded)
    keys.update(re.findall(r'"(num_[a-z_]+|max_split_size)"', doc))
    return keys or None


def test_memory_stats_uses_torch_key_names_and_meanings(host):
    known = torch_stat_keys()
    assert known and "allocated_bytes.all.current" in known  # the docstring was read
    before = uvm_sched.memory_stats()
    assert set(before) <= known, sorted(set(before) - known)
    a = native.malloc(3 * MiB)
    b = native.malloc(5 * MiB)
    s = uvm_sched.memory_stats()
    assert s["allocated_bytes.all.current"] - before["allocated_bytes.all.current"] >= 8 * MiB
    assert s["allocated.all.current"] - before["allocated.all.current"] == 2
    native.free(b)
    t = uvm_sched.memory_stats()
    assert t["allocated_bytes.all.peak"] >= s["allocated_bytes.all.current"]
    assert t["allocated_bytes.all.current"] < s["allocated_bytes.all.current"]
    assert t["allocated.all.freed"] - s["allocated.all.freed"] == 1
    for stem in ("allocated.all", "reserved_bytes.all", "segment.all"):
        assert t[f"{stem}.allocated"] - t[f"{stem}.freed"] == t[f"{stem}.current"], stem
    assert t["reserved_bytes.all.current"] >= t["allocated_bytes.all.current"] > 0
    assert t["active_bytes.all.current"] == t["allocated_bytes.all.current"]
    native.free(a)


def test_snapshot_opens_with_torchs_memory_viz(history, tmp_path):
    memviz = pytest.importorskip("torch.cuda._memory_viz")
    native.malloc(MiB)  # before the history: not in the snapshot
    native.drain_events()
    uvm_sched.record_memory_history()
    keep = [native.malloc(2 * MiB), native.malloc(4096)]
    for _ in range(3):
        x = native.malloc(8 * MiB)
        native.free(x)
    path = uvm_sched.dump_snapshot(tmp_path / "snap.pickle")
    snap = pickle.loads(path.read_bytes())
    assert memviz.trace(snap).count(" = a[") == 5  # the five allocations since recording
    assert "segments: 1" in memviz.segsum(snap)  # its accounting asserts add up
    assert "<html" in memviz.trace_plot(snap).lower()
    assert memviz.segment_plot(snap)
    flame = memviz.memory(snap, format_flamegraph=lambda s: s)
    assert flame.count("active_allocated") >= 1
    live = [b for b in snap["segments"][0]["blocks"] if b["state"] == "active_allocated"]
    assert sorted(b["requested_size"] for b in live) == [4096, 2 * MiB]
    # the snapshot read the ring without taking the events from whoever drains it next
    ev = native.drain_events()
    assert int((ev["kind"] == 0).sum()) == 5
    for p in keep:
        native.free(p)


def test_snapshot_without_history_says_what_to_call(host):
    uvm_sched.record_memory_history(None)
    with pytest.raises(RuntimeError, match="record_memory_history"):
        uvm_sched.memory_snapshot()


def test_snapshot_blocks_carry_the_python_frames_of_the_op_that_wrote_them(history):
    # A CPU tensor over a uvm_sched block (the host backend's memory is host memory), so a
    # real PyTorch op runs on it here as it would on a GPU tensor from uvm_sched.allocator().
    uvm_sched.record_memory_history(stacks="python", device_type="cpu")
    ptr = native.malloc(MiB)
    buf = torch.frombuffer((ctypes.c_char * MiB).from_address(ptr), dtype=torch.uint8)
    assert buf.untyped_storage().data_ptr() == ptr

    def fill_the_block():
        buf.fill_(7)

    fill_the_block()
    other = native.malloc(MiB)  # touched by no op: no Python frames
    snap = uvm_sched.memory_snapshot()
    uvm_sched.record_memory_history(None)
    allocs = [e for e in snap["device_traces"][0] if e["action"] == "alloc"]
    names = [[f["name"] for f in e["frames"]] for e in allocs]
    assert "fill_the_block" in names[0] and any("fill_" in n for n in names[0])
    assert "fill_the_block" not in names[1] and names[1][-1].startswith("block ")
    del buf
    native.free(ptr)
    native.free(other)


def test_max_entries_keeps_the_newest_events_and_says_how_many_it_dropped(history):
    uvm_sched.record_memory_history(max_entries=4)
    for _ in range(5):
        native.free(native.malloc(MiB))
    snap = uvm_sched.memory_snapshot()
    assert snap["uvm_sched"]["events_dropped_by_max_entries"] == 6
    with pytest.raises(ValueError, match="max_entries"):
        uvm_sched.record_memory_history(max_entries=0)


def _iteration(weights, n=6):
    acts = [native.malloc(2 * MiB) for _ in range(n)]
    for a in reversed(acts):
        native.free(a)


def test_scheduler_saves_its_live_run_as_a_trace(host, tmp_path):
    from uvm_sched.trace import load

    weights = [native.malloc(4 * MiB) for _ in range(4)]
    with Scheduler(budget="60%", hw="h200-pcie5", warmup_iters=2, hook=False) as s:
        for _ in range(2):
            s.step()
            _iteration(weights)
        assert s.state == "recording"
        early = s.save_trace(tmp_path / "early.parquet")
        assert len(early) > 0
        for _ in range(3):
            s.step()
            _iteration(weights)
        assert s.wait_planned(300), s.last_error  # (planned in the background)
        saved = s.save_trace(tmp_path / "run.parquet")
    back = load(tmp_path / "run.parquet")
    back.validate()
    assert len(back) == len(saved) and len(back.iteration_starts) >= 2
    assert int((back.kind == 0).sum()) >= 2 * 6  # the warm-up's activations at least
    for w in weights:
        native.free(w)
