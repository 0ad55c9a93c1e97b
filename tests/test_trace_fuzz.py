"""Truncated and corrupted files of every format `load` reads: TraceError (or a complete,
valid trace when a corruption happens to yield another well-formed file), never another
exception and never a half-loaded trace."""
from __future__ import annotations

import functools
import gzip
import json
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from uvm_sched.trace import (AccessMode, Trace, TraceBuilder, TraceError,  # noqa: E402
                             export_torch_snapshot, load)

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def sample_trace() -> Trace:
    b = TraceBuilder(name="fuzz", source="test", model="m")
    w = b.alloc(1 << 16)
    for _ in range(3):
        b.mark()
        x = b.alloc(4096, stream=1)
        b.access(w, AccessMode.READ)
        b.next_tick(120.0)
        y = b.alloc(640)
        b.access(x, AccessMode.READ_WRITE, offset=0, length=128)
        b.free(x, stream=1)
        b.next_tick(80.0)
        b.free(y)
    return b.build()


@functools.lru_cache(maxsize=None)
def sample_bytes(fmt: str) -> bytes:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "f"
        if fmt == "parquet":
            sample_trace().save(p)
            return p.read_bytes()
        if fmt == "snapshot":
            export_torch_snapshot(sample_trace(), p)
            return p.read_bytes()
    if fmt in ("kineto", "kineto.gz"):
        def mem(ts, addr, nb):
            return {"ph": "i", "name": "[memory]", "ts": ts, "pid": 1, "tid": 1,
                    "args": {"Bytes": nb, "Addr": addr, "Device Id": 0, "Device Type": 1,
                             "Total Allocated": 0}}
        ev = [{"ph": "X", "name": "ProfilerStep#0", "ts": 1.0, "dur": 9.0, "cat": "user_annotation"},
              mem(2.0, 4096, 512), mem(3.0, 8192, 1024), mem(4.0, 4096, -512), mem(5.0, 99, -64),
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 2.5, "dur": 1,
               "args": {"correlation": 1}},
              {"ph": "X", "cat": "kernel", "name": "k", "ts": 7.0, "dur": 3.5,
               "args": {"correlation": 1}}]
        raw = json.dumps({"traceEvents": ev}).encode()
        return gzip.compress(raw, mtime=0) if fmt == "kineto.gz" else raw
    if fmt == "npy":
        import io

        import numpy as np

        dtype = pytest.importorskip("uvm_sched.native").EVENT_DTYPE
        pytest.importorskip("uvm_sched.trace._native")
        ev = np.zeros(6, dtype=dtype)
        ev["kind"] = [0, 0, 1, 3, 0, 1]
        ev["addr"] = [0x1000, 0x2000, 0x1000, 0, 0x1000, 0x2000]
        ev["size"] = [256, 512, 256, 0, 128, 512]
        ev["tick"] = [0, 1, 2, 3, 3, 4]
        ev["t_ns"] = [0, 10, 20, 30, 30, 40]
        buf = io.BytesIO()
        np.save(buf, ev)
        return buf.getvalue()
    if fmt == "kernels.csv":
        return b"kernel_id,duration_us,inputs,outputs\n0,1.5,0;1,2\n1,2.0,2;1,3;1\n2,0.5,3,\n"
    if fmt == "tensors.csv":
        return b"tensor_id,bytes,is_global\n0,4096,0\n1,8192,1\n2,4096,0\n3,12288,0\n"
    raise AssertionError(fmt)


FORMATS = ["parquet", "snapshot", "kineto", "kineto.gz", "kernels.csv", "tensors.csv", "npy"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


def place(workdir: Path, fmt: str, data: bytes) -> Path:
    """Write the (mutated) bytes where `load` will read them; return the path to load."""
    if fmt.endswith(".csv"):
        folder = workdir / "Fuzz_4"
        folder.mkdir(exist_ok=True)
        for name in ("kernels.csv", "tensors.csv"):
            (folder / name).write_bytes(data if name == fmt else sample_bytes(name))
        return folder
    p = workdir / "sample"
    p.write_bytes(data)
    return p


def load_or_error(path: Path):
    """load(path): a valid Trace, or None when it raised TraceError/FileNotFoundError.
    Any other exception propagates and fails the test."""
    try:
        t = load(path)
    except (TraceError, FileNotFoundError) as e:
        assert str(e), "an error must say what is wrong"
        return None
    assert isinstance(t, Trace)
    t.validate()  # complete and consistent, never half-loaded
    return t


@pytest.mark.parametrize("fmt", FORMATS)
def test_pristine_samples_load(fmt, workdir):
    t = load_or_error(place(workdir, fmt, sample_bytes(fmt)))
    assert t is not None and len(t) > 0


@pytest.mark.parametrize("fmt", FORMATS)
@SETTINGS
@given(cut=st.floats(0.0, 1.0, exclude_max=True))
def test_truncated_files_raise(fmt, cut, workdir):
    data = sample_bytes(fmt)
    keep = int(cut * len(data))
    t = load_or_error(place(workdir, fmt, data[:keep]))
    if fmt.endswith(".csv") and keep and data[keep - 1:keep] == b"\n":
        # a CSV cut at a line end is a shorter, well-formed workload (if every tensor is
        # still used); anything else must be refused
        return
    assert t is None, f"{fmt} truncated to {keep} of {len(data)} bytes loaded as {t!r}"


@pytest.mark.parametrize("fmt", FORMATS)
@SETTINGS
@given(data=st.data())
def test_corrupted_files_raise_or_load_whole(fmt, data, workdir):
    raw = bytearray(sample_bytes(fmt))
    edits = data.draw(st.lists(st.tuples(st.integers(0, len(raw) - 1), st.integers(0, 255)),
                               min_size=1, max_size=8))
    for pos, val in edits:
        raw[pos] = val
    load_or_error(place(workdir, fmt, bytes(raw)))


@SETTINGS
@given(blob=st.binary(max_size=300))
def test_arbitrary_bytes(blob, workdir):
    load_or_error(place(workdir, "blob", blob))


@SETTINGS
@given(prefix=st.sampled_from([b"PAR1", b"\x80\x04", b"\x80\x02", b"\x1f\x8b", b"{", b"[",
                               b"\x93NUMPY"]),
       blob=st.binary(max_size=200))
def test_magic_prefixes_with_garbage(prefix, blob, workdir):
    load_or_error(place(workdir, "magic", prefix + blob))


# -- structured fuzzing: well-formed containers holding values of the wrong kind ---------
ANY = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=5),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=4), c, max_size=3),
    max_leaves=6,
)


@SETTINGS
@given(data=st.data())
def test_snapshot_with_fields_of_any_type(data, workdir):
    import pickle

    snap = pickle.loads(sample_bytes("snapshot"))
    entries = snap["device_traces"][0]
    for _ in range(data.draw(st.integers(1, 3))):
        e = entries[data.draw(st.integers(0, len(entries) - 1))]
        e[data.draw(st.sampled_from(["action", "addr", "size", "stream", "time_us"]))] = data.draw(ANY)
    if data.draw(st.booleans()):
        blk = snap["segments"][0]["blocks"][0]
        blk[data.draw(st.sampled_from(["size", "state", "requested_size", "address"]))] = data.draw(ANY)
    load_or_error(place(workdir, "snapshot", pickle.dumps(snap)))


@SETTINGS
@given(data=st.data())
def test_chrome_trace_with_fields_of_any_type(data, workdir):
    doc = json.loads(sample_bytes("kineto"))
    ev = doc["traceEvents"]
    for _ in range(data.draw(st.integers(1, 3))):
        e = ev[data.draw(st.integers(0, len(ev) - 1))]
        key = data.draw(st.sampled_from(["name", "ph", "ts", "dur", "cat", "args"]))
        if key == "args" and isinstance(e.get("args"), dict) and data.draw(st.booleans()):
            e["args"][data.draw(st.sampled_from(["Bytes", "Addr", "Device Id", "Device Type",
                                                 "correlation"]))] = data.draw(ANY)
        else:
            e[key] = data.draw(ANY)
    try:
        raw = json.dumps(doc).encode()
    except (ValueError, TypeError):
        return
    load_or_error(place(workdir, "kineto", raw))
