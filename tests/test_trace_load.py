"""`uvm_sched.trace.load` dispatch by content, its errors, and the package's public names
(lazy `record`/`zoo` that never break `import uvm_sched.trace`)."""
from __future__ import annotations

import importlib
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import uvm_sched.trace as T
from uvm_sched.trace import COLUMNS, EventKind, TraceBuilder, TraceError, load


def tiny():
    b = TraceBuilder(name="tiny")
    x = b.alloc(64)
    b.next_tick(5.0)
    b.free(x)
    return b.build()


def test_parquet_is_found_by_content_not_name(tmp_path):
    p = tmp_path / "trace.pickle"  # misleading name
    tiny().save(p)
    assert load(p) == tiny()
    with pytest.raises(TypeError, match="do not apply to a parquet"):
        load(p, device="cpu")


@pytest.mark.parametrize(
    "content, match",
    [
        (b"", "empty file"),
        (b"hello world", "not a trace format"),
        (b"\x00\x01\x02binary", "not a trace format"),
    ],
)
def test_foreign_files_raise(tmp_path, content, match):
    p = tmp_path / "f.bin"
    p.write_bytes(content)
    with pytest.raises(TraceError, match=match):
        load(p)


def test_zip_gets_a_hint(tmp_path):
    p = tmp_path / "model.pt"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("data.pkl", b"x")
    with pytest.raises(TraceError, match="torch.save"):
        load(p)


def test_missing_path():
    with pytest.raises(FileNotFoundError, match="no such trace"):
        load("/nonexistent/trace.parquet")


def test_npy_that_is_not_an_event_drain(tmp_path):
    p = tmp_path / "a.npy"
    np.save(p, np.arange(5))
    with pytest.raises(TraceError, match="not a structured array"):
        load(p)
    p.write_bytes(p.read_bytes()[:20])
    with pytest.raises(TraceError, match=r"\.npy"):
        load(p)


def test_npy_drain_goes_through_the_native_converter(tmp_path):
    native = pytest.importorskip("uvm_sched.trace._native",
                                 reason="uvm_sched.trace._native (the drain converter) is absent")
    EVENT_DTYPE = pytest.importorskip("uvm_sched.native").EVENT_DTYPE
    ev = np.zeros(5, dtype=EVENT_DTYPE)
    ev["kind"] = [EventKind.ALLOC, EventKind.ALLOC, EventKind.FREE, EventKind.MARK, EventKind.FREE]
    ev["addr"] = [0x1000, 0x2000, 0x1000, 0, 0x2000]
    ev["size"] = [256, 512, 256, 0, 512]
    ev["tick"] = [0, 1, 2, 3, 3]
    ev["t_ns"] = [0, 10, 20, 30, 30]
    p = tmp_path / "drain.npy"
    np.save(p, ev)
    t = load(p)
    want = native.trace_from_events(ev)
    assert all(np.array_equal(t.columns[c], want.columns[c]) for c in COLUMNS)
    assert t.meta["name"] == "drain"
    assert t.kind.tolist() == [EventKind.ALLOC, EventKind.ALLOC, EventKind.FREE, EventKind.MARK,
                               EventKind.FREE]


def test_public_names():
    for name in ("Trace", "TraceBuilder", "TraceError", "EventKind", "AccessMode", "COLUMNS",
                 "load", "export_torch_snapshot", "export_perfetto"):
        assert name in T.__all__ and getattr(T, name) is not None
    for name in ("record", "zoo"):
        present = importlib.util.find_spec(T._LAZY[name]) is not None
        assert (name in T.__all__) == present
    assert set(T.__all__) <= set(dir(T))


def test_lazy_name_with_missing_module_is_a_clear_attribute_error(monkeypatch):
    monkeypatch.setitem(T._LAZY, "record", "uvm_sched.trace._no_such_recorder")
    monkeypatch.delitem(T.__dict__, "record", raising=False)
    with pytest.raises(AttributeError, match="_no_such_recorder is not installed"):
        T.record
    assert not hasattr(T, "record")
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        T.nope


def test_import_does_not_load_torch_or_recorder():
    code = ("import sys, uvm_sched.trace as T; "
            "assert 'torch' not in sys.modules, 'torch imported'; "
            "assert 'uvm_sched.trace._recorder' not in sys.modules; print(T.__all__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr
