"""Kineto / Chrome trace JSON import: a real CPU `profile_memory=True` run, and synthetic
CUDA traces with kernels (device time per tick), ProfilerStep marks and several devices."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from uvm_sched.trace import COLUMNS, EventKind, TraceError, load

A, F, M = EventKind.ALLOC, EventKind.FREE, EventKind.MARK


@pytest.fixture(scope="module")
def cpu_profile(tmp_path_factory):
    """A real torch.profiler run (CPU, profile_memory=True) of 3 training steps, exported
    with export_chrome_trace."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, schedule

    path = tmp_path_factory.mktemp("kineto") / "cpu_trace.json"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    opt = torch.optim.AdamW(model.parameters())
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                 schedule=schedule(wait=0, warmup=1, active=3, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(5):
            loss = model(torch.randn(32, 64)).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    assert path.exists()
    return path


def memory_events(path, device_type):
    doc = json.loads(path.read_text())
    ev = [e for e in doc["traceEvents"] if e.get("name") == "[memory]"
          and e["args"]["Device Type"] == device_type and e["args"]["Bytes"] != 0]
    return sorted(ev, key=lambda e: e["ts"])


def test_real_cpu_profile_imports_with_device_cpu(cpu_profile):
    with pytest.raises(TraceError, match='pass device="cpu"'):
        load(cpu_profile)  # default device="cuda", the file has CPU events only
    t = load(cpu_profile, device="cpu")  # validates: every free matches a live alloc
    raw = memory_events(cpu_profile, 0)
    assert t.meta["source"] == "kineto" and t.meta["device"] == "cpu"
    n_pre = t.meta["preexisting_blocks"]
    allocs = [e for e in raw if e["args"]["Bytes"] > 0]
    frees = [e for e in raw if e["args"]["Bytes"] < 0]
    assert int((t.kind == A).sum()) == len(allocs) + n_pre
    assert int((t.kind == F).sum()) == len(frees)
    assert t.size[t.kind == F].sum() == -sum(e["args"]["Bytes"] for e in frees)
    # alloc/free pairs agree with the profiler's own running total: "Total Allocated" minus
    # our live bytes after each event is a constant (bytes allocated before profiling)
    ev_rows = np.flatnonzero(np.isin(t.kind, [A, F]) & (t.tick > (1 if n_pre else -1)))
    if n_pre == 0:
        ev_rows = np.flatnonzero(np.isin(t.kind, [A, F]))
    live = t.live_bytes()[ev_rows]
    total = np.array([e["args"]["Total Allocated"] for e in raw])
    assert len(live) == len(total)
    offset = total - live
    assert (offset == offset[0]).all(), np.unique(offset)[:5]
    # the three active ProfilerStep spans became iteration marks
    assert len(t.iteration_starts) == 3 and t.meta["profiler_steps"] == 3
    assert np.isnan(t.tick_ns).all()  # no GPU kernels on a CPU run
    assert (np.diff(t.t_ns) >= 0).all() and t.t_ns[0] == 0


def test_gzip_is_recognised_by_content(cpu_profile, tmp_path):
    p = tmp_path / "no_suffix"  # names are not trusted: content decides
    p.write_bytes(gzip.compress(cpu_profile.read_bytes()))
    a, b = load(p, device="cpu"), load(cpu_profile, device="cpu")
    assert a.meta["name"] == "no_suffix" and b.meta["name"] == "cpu_trace"
    assert all(np.array_equal(a.columns[k], b.columns[k]) for k in COLUMNS)


# -- synthetic CUDA traces -----------------------------------------------------------------
def mem(ts, addr, nbytes, dev=0, dtype=1):
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1,
            "tid": 1, "ts": ts, "args": {"Total Reserved": 0, "Total Allocated": 0,
                                         "Bytes": nbytes, "Device Id": dev, "Device Type": dtype,
                                         "Addr": addr}}


def kernel(ts, dur, corr):
    return {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": ts,
            "dur": dur, "args": {"correlation": corr, "device": 0, "stream": 7}}


def launch(ts, corr):
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
            "ts": ts, "dur": 1.0, "args": {"correlation": corr}}


def step(ts, n, dur=100.0):
    return {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1,
            "ts": ts, "dur": dur, "args": {}}


def cuda_doc():
    ev = [
        step(999.0, 0),
        mem(1000.0, 0xA0, 4096),  # tick 0
        launch(1001.0, 1), kernel(1500.0, 40.0, 1),  # launched in tick 0, runs later
        mem(1002.0, 0xB0, 512),  # tick 1
        launch(1003.0, 2), kernel(1600.0, 10.0, 2),  # tick 1
        launch(1003.5, 3), kernel(1620.0, 5.0, 3),  # tick 1
        mem(1004.0, 0xA0, -4096),  # tick 2
        mem(1004.0, 0xC0, -64),  # tick 3: allocated before profiling
        step(1010.0, 1),
        {**step(1003.9, 0), "cat": "gpu_user_annotation"},  # GPU copies of the step spans
        {**step(1600.0, 1), "cat": "gpu_user_annotation"},
        mem(1011.0, 0xA0, 8192),  # tick 4 (address reused -> new block)
        kernel(1700.0, 7.0, None),  # no launch event: attributed by its own start (tick 5)
        mem(1012.0, 0xD0, 100, dev=1),  # another device
        mem(1013.0, 0xE0, 32, dtype=0),  # a CPU event
    ]
    return {"schemaVersion": 1, "traceEvents": ev}


def test_cuda_trace_ticks_marks_and_kernel_time(tmp_path):
    p = tmp_path / "cuda.json"
    p.write_text(json.dumps(cuda_doc()))
    with pytest.raises(TraceError, match=r'several CUDA devices \[0, 1\].*cuda:N'):
        load(p)
    t = load(p, device="cuda:0")
    assert t.meta["device"] == "cuda:0" and t.meta["kernels"] == 4
    # pre-existing 0xC0 allocated at tick 0, recorded events from tick 1 (one per tick)
    ab = np.isin(t.kind, [A, F])
    assert list(zip(t.tick[ab].tolist(), t.kind[ab].tolist(), t.size[ab].tolist())) == [
        (0, A, 64), (1, A, 4096), (2, A, 512), (3, F, 4096), (4, F, 64), (5, A, 8192)]
    assert t.iteration_starts.tolist() == [1, 5]
    # device time: kernels land in the tick of their launch (shifted by the tick-0 row)
    assert t.tick_ns.tolist() == [0.0, 40_000.0, 15_000.0, 0.0, 0.0, 7_000.0]
    assert t.t_ns[t.kind == A].tolist()[1:] == [0, 2000, 11_000]
    t1 = load(p, device="cuda:1")
    # ProfilerStep#1 starts before device 1's only event: a MARK there too
    assert t1.kind.tolist() == [M, A] and t1.device.tolist() == [1, 1]
    tc = load(p, device="cpu")
    assert tc.kind.tolist() == [M, A] and tc.size.tolist() == [0, 32]
    # all kernels were launched before the CPU allocator's only event: clipped into tick 0
    assert tc.tick_ns.tolist() == [62_000.0]


def test_chrome_trace_as_bare_list(tmp_path):
    p = tmp_path / "list.json"
    p.write_text(json.dumps([mem(1.0, 0x10, 8), mem(2.0, 0x10, -8)]))
    t = load(p)
    assert t.kind.tolist() == [A, F]


@pytest.mark.parametrize(
    "events, match",
    [
        ([], "no \\[memory\\] events"),
        ([mem(1.0, 0x10, 8, dtype=1)], None),
        ([mem(1.0, 0x10, 8), mem(2.0, 0x10, 8)], "still live"),
        ([mem(1.0, 0x10, 8), mem(2.0, 0x10, -4)], "allocated with 8 bytes"),
        ([mem(1.0, 0x10, -8), mem(2.0, 0x10, -8)], "double free"),
        ([{"name": "[memory]", "ph": "i", "ts": 1.0, "args": {"Bytes": "8"}}], "lacks an integer"),
        ([{"name": "[memory]", "ph": "i", "ts": 1.0}], "no args"),
        ([7], "expected an object"),
        ([step(None, 1)], "no numeric ts"),
        ([kernel(1.0, None, 1)], "no numeric ts/dur"),
    ],
)
def test_bad_chrome_traces_raise(tmp_path, events, match):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps({"traceEvents": events}))
    if match is None:
        assert len(load(p)) == 1
        with pytest.raises(TraceError, match='no CPU memory events, but 1 CUDA ones; pass device="cuda"'):
            load(p, device="cpu")
        with pytest.raises(TraceError, match=r"no memory events on 'cuda:3'.*\[0\]"):
            load(p, device="cuda:3")
        return
    with pytest.raises(TraceError, match=match):
        load(p)


def test_foreign_json_and_bad_device_option(tmp_path):
    p = tmp_path / "f.json"
    p.write_text(json.dumps({"hello": "world"}))
    with pytest.raises(TraceError, match="not a Chrome/Kineto trace"):
        load(p)
    p.write_text(json.dumps({"traceEvents": [mem(1.0, 0x10, 8)]}))
    with pytest.raises(ValueError, match='"cuda", "cuda:N" or "cpu"'):
        load(p, device="tpu")
    with pytest.raises(ValueError, match='"cuda", "cuda:N" or "cpu"'):
        load(p, device=0)
    p.write_text('{"traceEvents": [')
    with pytest.raises(TraceError, match="not valid JSON"):
        load(p)
    p.write_bytes(gzip.compress(b'{"traceEvents": []}')[:-6])
    with pytest.raises(TraceError, match="gzip"):
        load(p)
