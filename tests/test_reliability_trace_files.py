"""Trace files a careful adversary would hand ``trace.load``: no format read before its
size and kind are known (a FIFO never blocks, a device or a sparse giant is refused by
``stat``), no pickle that builds large objects, no number out of its bounds, and every
failure a ``TraceError`` (issue classes 3, 8, 9)."""
from __future__ import annotations

import gzip
import json
import os
import pickle
import threading
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from uvm_sched.trace import Trace, TraceBuilder, TraceError, load

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _load_within(path, seconds=10.0, **kw):
    """load(path) in a thread: (result or exception); a hang fails the test, not the run."""
    box = {}

    def run():
        try:
            box["value"] = load(path, **kw)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            box["value"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"load({path}) still running after {seconds} s (a hang)"
    return box["value"]


def test_a_fifo_with_no_writer_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = _load_within(fifo)
    assert isinstance(got, TraceError) and "FIFO" in str(got)


@pytest.mark.parametrize("dev", ["/dev/zero", "/dev/null", "/dev/urandom"])
def test_a_device_is_refused_without_reading_it(dev):
    if not os.path.exists(dev):
        pytest.skip(f"{dev} does not exist here")
    got = _load_within(dev)
    assert isinstance(got, TraceError) and "character device" in str(got)


def test_a_sparse_giant_is_refused_by_its_size_before_a_byte_is_read(tmp_path):
    p = tmp_path / "huge.parquet"
    with open(p, "wb") as f:
        f.write(b"PAR1")
        f.truncate(20 << 30)  # 20 GiB, no blocks on disk
    tracemalloc.start()
    got = _load_within(p)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert isinstance(got, TraceError) and "21,474,836,480 bytes" in str(got)
    assert peak < 1 << 20


def test_max_bytes_lowers_the_limit(tmp_path):
    p = tmp_path / "t.parquet"
    _tiny().save(p)
    assert isinstance(load(p), Trace)
    with pytest.raises(TraceError, match="larger than any trace file"):
        load(p, max_bytes=16)


def _tiny() -> Trace:
    b = TraceBuilder(name="tiny")
    for _ in range(2):
        b.mark()
        x = b.alloc(4096)
        b.next_tick(10.0)
        b.free(x)
    return b.build()


def test_a_39_byte_pickle_cannot_allocate_a_gibibyte(tmp_path):
    # GLOBAL __builtin__.bytearray, (2**30,), REDUCE: 1 GiB from 39 bytes if run
    bomb = b"\x80\x02c__builtin__\nbytearray\nq\x00J\x00\x00\x00@\x85q\x01Rq\x02."
    assert len(bomb) == 39
    p = tmp_path / "bomb.pickle"
    p.write_bytes(bomb)
    tracemalloc.start()
    got = _load_within(p)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert isinstance(got, TraceError) and "bytearray" in str(got)
    assert peak < 16 << 20, f"{peak:,} bytes allocated"


def test_a_pickle_that_would_run_code_is_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned > /dev/null",))

    p = tmp_path / "evil.pickle"
    p.write_bytes(pickle.dumps({"segments": [], "device_traces": [Evil()]}, protocol=4))
    with pytest.raises(TraceError, match="posix.system|os.system|refusing"):
        load(p)


def test_a_gzip_bomb_stops_at_max_bytes(tmp_path):
    p = tmp_path / "bomb.json.gz"
    p.write_bytes(gzip.compress(b"{" + b" " * (8 << 20) + b"}"))
    assert p.stat().st_size < 1 << 20
    with pytest.raises(TraceError, match="gzip content is larger than 1,048,576 bytes"):
        load(p, max_bytes=1 << 20)


def _kineto(tmp_path, step_name="ProfilerStep#1", nbytes=512):
    ev = [{"ph": "X", "name": step_name, "ts": 1.0, "dur": 9.0, "cat": "user_annotation"},
          {"ph": "i", "name": "[memory]", "ts": 2.0, "pid": 1, "tid": 1,
           "args": {"Bytes": nbytes, "Addr": 4096, "Device Id": 0, "Device Type": 1,
                    "Total Allocated": 0}}]
    p = tmp_path / "k.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    return p


def test_a_5000_digit_profiler_step_is_a_trace_error(tmp_path):
    with pytest.raises(TraceError):
        load(_kineto(tmp_path, step_name="ProfilerStep#" + "9" * 5000))


def test_a_huge_csv_number_is_a_trace_error(tmp_path):
    (tmp_path / "kernels.csv").write_text("kernel_id,duration_us,inputs,outputs\n0,1.0,0,1\n")
    (tmp_path / "tensors.csv").write_text("tensor_id,bytes,is_global\n0," + "9" * 30
                                          + ",0\n1,64,0\n")
    with pytest.raises(TraceError):
        load(tmp_path)


@pytest.mark.parametrize("nbytes", [2**62, 10**30, -(2**62)])
def test_an_impossible_size_in_a_file_is_a_trace_error(tmp_path, nbytes):
    with pytest.raises(TraceError):
        load(_kineto(tmp_path, nbytes=nbytes))


def test_sizes_of_2_62_are_refused_not_overflowed():
    b = TraceBuilder()
    for _ in range(4):
        b.mark()
        x = b.alloc(2**62)
        b.next_tick(1.0)
        b.free(x)
    with pytest.raises(TraceError, match="over 1,125,899,906,842,624"):
        b.build()


def test_allocations_adding_up_past_2_62_are_refused():
    n = 4097
    size = 2**50  # the largest allowed block; 4,097 of them overflow no int64 one by one
    cols = {"tick": np.arange(n), "kind": np.zeros(n, np.uint8), "block": np.arange(n),
            "size": np.full(n, size)}
    with pytest.raises(TraceError, match="add up to"):
        Trace(cols)


@pytest.mark.parametrize("value", [float("inf"), float("-inf")])
def test_an_infinite_device_time_is_refused(value):
    cols = {"tick": [0], "kind": [0], "block": [0], "size": [64]}
    with pytest.raises(TraceError, match="tick_ns"):
        Trace(cols, tick_ns=[value])


@pytest.mark.parametrize("version", [b"-5", b"0", b"99", b"x"])
def test_a_parquet_schema_version_outside_1_to_current_is_refused(tmp_path, version):
    import pyarrow.parquet as pq

    p = tmp_path / "t.parquet"
    _tiny().save(p)
    t = pq.read_table(p)
    md = dict(t.schema.metadata)
    md[b"uvm_sched.schema_version"] = version
    pq.write_table(t.replace_schema_metadata(md), p)
    with pytest.raises(TraceError, match="schema version"):
        load(p)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6)


@SETTINGS
@given(field=st.sampled_from(["Bytes", "Addr", "Device Id", "Device Type", "Total Allocated"]),
       value=JSON_VALUES, ts=JSON_VALUES)
def test_any_value_in_a_kineto_memory_event_is_a_trace_or_a_trace_error(tmp_path, field, value,
                                                                       ts):
    ev = [{"ph": "X", "name": "ProfilerStep#1", "ts": 1.0, "dur": 9.0, "cat": "user_annotation"},
          {"ph": "i", "name": "[memory]", "ts": ts, "pid": 1, "tid": 1,
           "args": {"Bytes": 512, "Addr": 4096, "Device Id": 0, "Device Type": 1,
                    "Total Allocated": 0, field: value}}]
    p = tmp_path / "k.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    try:
        t = load(p)
    except TraceError:
        return
    assert isinstance(t, Trace)
    t.validate()


SNAP_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats() | st.text(max_size=8) | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8)


@SETTINGS
@given(entry=st.dictionaries(st.sampled_from(["action", "addr", "size", "stream", "time_us",
                                              "frames"]), SNAP_VALUES, max_size=6),
       segments=SNAP_VALUES)
def test_any_plain_data_in_a_snapshot_is_a_trace_or_a_trace_error(tmp_path, entry, segments):
    p = tmp_path / "s.pickle"
    p.write_bytes(pickle.dumps({"segments": segments, "device_traces": [[entry]]}, protocol=4))
    try:
        t = load(p)
    except TraceError:
        return
    assert isinstance(t, Trace)
    t.validate()
