"""The trace data model: validation names the first bad row, derived views, to_pandas,
TraceBuilder, slicing, and Parquet files (round trip, corrupt/foreign files)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from uvm_sched.trace import COLUMNS, AccessMode, EventKind, Trace, TraceBuilder, TraceError, load

A, F, X, M = EventKind.ALLOC, EventKind.FREE, EventKind.ACCESS, EventKind.MARK


def make(rows, **kw):
    """Trace from rows (tick, kind, block, size[, t_ns])."""
    cols = {"tick": [r[0] for r in rows], "kind": [int(r[1]) for r in rows],
            "block": [r[2] for r in rows], "size": [r[3] for r in rows]}
    if rows and len(rows[0]) > 4:
        cols["t_ns"] = [r[4] for r in rows]
    return Trace(cols, **kw)


def small_trace() -> Trace:
    b = TraceBuilder(source="test", name="small", model="m", batch=4)
    w = b.alloc(4096)  # a persistent block
    for it in range(3):
        b.mark()
        x = b.alloc(1024, stream=7)
        b.access(w, AccessMode.READ)
        b.access(x, AccessMode.WRITE, offset=0, length=512)
        b.next_tick(1500.0)
        y = b.alloc(2048)
        b.access(x, AccessMode.READ)
        b.access(y, AccessMode.READ_WRITE)
        b.free(x)
        b.next_tick(2500.0)
        b.access(y, AccessMode.READ)
        b.free(y)
        b.next_tick(float("nan"))
    return b.build()


# -- validation ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "rows, bad_row, why",
    [
        ([(0, A, 0, 8), (1, F, 0, 8), (2, F, 0, 8)], 2, "double free"),
        ([(0, A, 0, 8), (1, F, 1, 8)], 1, "free of a block never allocated"),
        ([(0, A, 0, 8), (1, X, 1, 8)], 1, "access to a block never allocated"),
        ([(0, A, 0, 8), (1, F, 0, 8), (2, X, 0, 8)], 2, "access to a freed block"),
        ([(0, A, 0, 8), (1, A, 0, 8)], 1, "block id allocated twice"),
        ([(0, A, 0, 8), (1, A, 1, -8)], 1, "negative size"),
        ([(0, A, 0, 8), (2, A, 1, 8), (1, F, 0, 8)], 2, "tick goes backwards"),
        ([(0, A, 0, 8, 100), (1, A, 1, 8, 50)], 1, "time (t_ns) goes backwards"),
        ([(0, A, 0, 8), (1, F, 0, 4)], 1, "free size differs"),
        ([(0, A, 0, 8), (0, 9, 0, 8)], 1, "unknown event kind"),
        ([(0, A, 0, 8), (0, A, -3, 8)], 1, "negative block id"),
        ([(-1, A, 0, 8)], 0, "negative tick"),
    ],
)
def test_validation_names_first_bad_row(rows, bad_row, why):
    with pytest.raises(TraceError) as ei:
        make(rows)
    msg = str(ei.value)
    assert f"row {bad_row:,}" in msg and why in msg, msg


def test_validation_reports_earliest_of_several_problems():
    rows = [(0, A, 0, 8), (1, A, 1, 8), (2, F, 5, 8), (3, F, 0, 8), (4, F, 0, 8)]
    with pytest.raises(TraceError, match=r"row 2: free of a block never allocated"):
        make(rows)


def test_access_beyond_block_end_and_bad_mode():
    cols = dict(tick=[0, 0], kind=[A, X], block=[0, 0], size=[100, 100], offset=[-1, 90],
                length=[-1, 20], mode=[0, 1])
    with pytest.raises(TraceError, match="row 1: access beyond the end"):
        Trace(cols)
    cols.update(offset=[-1, 0], length=[-1, 10], mode=[0, 7])
    with pytest.raises(TraceError, match="row 1: unknown access mode"):
        Trace(cols)


def test_validate_false_skips_checks_but_validate_still_raises():
    t = make([(0, A, 0, 8), (1, F, 0, 8), (2, F, 0, 8)], validate=False)
    assert len(t) == 3
    with pytest.raises(TraceError, match="double free"):
        t.validate()


@pytest.mark.parametrize(
    "cols, match",
    [
        (dict(tick=["a"], kind=[0], block=[0], size=[1]), "holds"),
        (dict(tick=[0.5], kind=[0], block=[0], size=[1]), "fractional"),
        (dict(tick=[np.nan], kind=[0], block=[0], size=[1]), "non-finite"),
        (dict(tick=[0], kind=[300], block=[0], size=[1]), "outside uint8"),
        (dict(tick=[0, 1], kind=[0], block=[0], size=[1]), "shape"),
        (dict(tick=[0], kind=[0], block=[0]), "required column"),
    ],
)
def test_unreadable_columns_raise_trace_error(cols, match):
    with pytest.raises(TraceError, match=match):
        Trace(cols)


def test_tick_ns_checks():
    with pytest.raises(TraceError, match="tick_ns has"):
        make([(0, A, 0, 8), (3, F, 0, 8)], tick_ns=[1.0, 2.0])
    with pytest.raises(TraceError, match=r"tick_ns\[1\] = -5.0 ns is negative"):
        make([(0, A, 0, 8), (1, F, 0, 8)], tick_ns=[1.0, -5.0])
    t = make([(0, A, 0, 8), (1, F, 0, 8)], tick_ns=[1.0, np.nan, 3.0])  # longer is fine
    assert t.n_ticks == 3


def test_meta_must_be_json():
    with pytest.raises(TraceError, match="JSON"):
        make([(0, A, 0, 8)], meta={"x": object()})


def test_integral_floats_are_accepted():
    t = Trace(dict(tick=[0.0, 1.0], kind=[0, 1], block=[0, 0], size=[8.0, 8.0]))
    assert t.tick.dtype == np.int64 and t.size.tolist() == [8, 8]


def test_empty_trace():
    t = Trace({k: [] for k in ("tick", "kind", "block", "size")})
    assert len(t) == 0 and t.n_ticks == 0 and t.peak_bytes == 0
    assert len(t.to_pandas()) == 0


# -- derived views ----------------------------------------------------------------------
def test_columns_are_read_only_and_defaults():
    t = make([(0, A, 0, 8), (1, F, 0, 8)])
    assert set(t.columns) == set(COLUMNS)
    assert t.t_ns.tolist() == t.tick.tolist()  # t_ns defaults to tick
    assert t.offset.tolist() == [-1, -1] and t.mode.tolist() == [0, 0]
    with pytest.raises(ValueError):
        t.tick[0] = 5


def test_live_bytes_peak_block_table_iterations():
    t = small_trace()
    assert t.peak_bytes == 4096 + 1024 + 2048
    assert t.iteration_starts.tolist() == [0, 3, 6]
    bt = t.block_table()
    assert bt.loc[0, "free_tick"] == -1 and bt.loc[0, "size"] == 4096
    x = bt[bt["size"] == 1024]
    assert x["alloc_tick"].tolist() == [0, 3, 6] and x["free_tick"].tolist() == [1, 4, 7]
    assert x["stream"].tolist() == [7, 7, 7]
    assert t.has_accesses
    lb = t.live_bytes()
    assert lb[-1] == 4096 and len(lb) == len(t)


def test_to_pandas_names_kinds_and_modes():
    t = small_trace()
    df = t.to_pandas()
    assert list(df.columns) == list(COLUMNS)
    assert len(df) == len(t)
    assert set(df["kind"].cat.categories) == {"alloc", "free", "access", "mark"}
    assert (df["kind"] == "mark").sum() == 3
    acc = df[df["kind"] == "access"]
    assert set(acc["mode"]) == {"read", "write", "read_write"}
    assert (acc["length"] == 512).sum() == 3
    for c in ("tick", "t_ns", "block", "size"):
        assert df[c].to_numpy().tolist() == t.columns[c].tolist()


def test_builder_rejects_misuse():
    b = TraceBuilder()
    x = b.alloc(8)
    with pytest.raises(TraceError, match="already live"):
        b.alloc(8, block=x)
    with pytest.raises(TraceError, match="not live"):
        b.free(99)
    with pytest.raises(TraceError, match="not live"):
        b.access(99)
    b.free(x)
    with pytest.raises(TraceError, match="not live"):
        b.access(x)


def test_builder_closes_open_tick_with_unknown_time():
    b = TraceBuilder()
    x = b.alloc(8)
    b.next_tick(10.0)
    b.free(x)
    t = b.build()
    assert t.n_ticks == 2 and t.tick_ns[0] == 10.0 and np.isnan(t.tick_ns[1])


def test_slice_ticks_carries_live_blocks_and_validates():
    t = small_trace()
    s = t.slice_ticks(4, 6)
    assert s.tick.min() == 0 and s.n_ticks == 2
    # live when tick 4 starts: the persistent block 0 and the 1024-byte block of tick 3
    bt = t.block_table()
    x3 = int(bt.index[(bt["alloc_tick"] == 3) & (bt["size"] == 1024)][0])
    pre = (s.tick == 0) & (s.kind == A)
    assert set(s.block[pre][: 2].tolist()) == {0, x3}
    assert s.size[pre][:2].tolist() == [4096, 1024] and s.stream[pre][:2].tolist() == [0, 7]
    assert np.array_equal(s.tick_ns, t.tick_ns[4:6], equal_nan=True)
    s.validate()


# -- Parquet files ----------------------------------------------------------------------
def test_parquet_round_trip(tmp_path):
    t = small_trace()
    p = tmp_path / "t.parquet"
    t.save(p)
    u = load(p)
    assert u == t
    assert u.meta == t.meta and np.array_equal(u.tick_ns, t.tick_ns, equal_nan=True)
    for c in COLUMNS:
        assert u.columns[c].dtype == COLUMNS[c]
    assert not (tmp_path / "t.parquet.tmp").exists()


def test_parquet_round_trip_random(tmp_path):
    rng = np.random.default_rng(3)
    b = TraceBuilder(name="rand")
    live = []
    for i in range(2000):
        if live and rng.random() < 0.45:
            b.free(live.pop(rng.integers(len(live))))
        else:
            live.append(b.alloc(int(rng.integers(0, 1 << 30)), stream=int(rng.integers(0, 3))))
        if rng.random() < 0.3:
            b.next_tick(float(rng.random() * 1e4))
    t = b.build()
    t.save(tmp_path / "r.parquet")
    assert load(tmp_path / "r.parquet") == t


def test_parquet_foreign_and_newer_schema(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / "foreign.parquet"
    pq.write_table(pa.table({"a": [1, 2]}), p)
    with pytest.raises(TraceError, match="not a uvm_sched trace"):
        load(p)
    t = small_trace()
    table = pa.table({k: t.columns[k] for k in COLUMNS})
    table = table.replace_schema_metadata({b"uvm_sched.schema_version": b"99"})
    pq.write_table(table, p)
    with pytest.raises(TraceError, match="newer"):
        load(p)
    table = table.replace_schema_metadata({b"uvm_sched.schema_version": b"1",
                                           b"uvm_sched.meta": b"{not json",
                                           b"uvm_sched.tick_ns": b""})
    pq.write_table(table, p)
    with pytest.raises(TraceError, match="metadata"):
        load(p)
    table = table.replace_schema_metadata({b"uvm_sched.schema_version": b"1",
                                           b"uvm_sched.meta": json.dumps({}).encode(),
                                           b"uvm_sched.tick_ns": b"!!!"})
    pq.write_table(table, p)
    with pytest.raises(TraceError, match="tick_ns"):
        load(p)


def test_parquet_with_nulls_or_missing_columns(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = small_trace()
    cols = {k: pa.array(t.columns[k]) for k in COLUMNS}
    md = {b"uvm_sched.schema_version": b"1", b"uvm_sched.meta": b"{}", b"uvm_sched.tick_ns": b""}
    p = tmp_path / "n.parquet"
    bad = dict(cols)
    bad["size"] = pa.array([None] + t.size[1:].tolist(), pa.int64())
    pq.write_table(pa.table(bad).replace_schema_metadata(md), p)
    with pytest.raises(TraceError, match="null"):
        load(p)
    del bad["size"]
    pq.write_table(pa.table(bad).replace_schema_metadata(md), p)
    with pytest.raises(TraceError, match="lacks column"):
        load(p)


def test_parquet_rejects_inconsistent_events(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = small_trace()
    cols = dict(t.columns)
    kind = cols["kind"].copy()
    kind[np.flatnonzero(kind == F)[0]] = A  # a second alloc of a live block
    cols["kind"] = kind
    md = {b"uvm_sched.schema_version": b"1", b"uvm_sched.meta": b"{}",
          b"uvm_sched.tick_ns": __import__("base64").b64encode(t.tick_ns.tobytes())}
    p = tmp_path / "bad.parquet"
    pq.write_table(pa.table(cols).replace_schema_metadata(md), p)
    with pytest.raises(TraceError, match="allocated twice"):
        load(p)


def test_corrupt_huge_tick_is_refused_not_allocated():
    with pytest.raises(TraceError, match="corrupt tick"):
        Trace(dict(tick=[0, 1 << 40], kind=[A, F], block=[0, 0], size=[8, 8]))
    with pytest.raises(TraceError, match="tick_ns has"):  # a short tick_ns is named too
        Trace(dict(tick=[0, 1 << 40], kind=[A, F], block=[0, 0], size=[8, 8]), tick_ns=[1.0])


def test_pickled_and_copied_traces_stay_immutable():
    import copy
    import pickle

    t = small_trace()
    for u in (pickle.loads(pickle.dumps(t)), copy.deepcopy(t), copy.copy(t)):
        assert u == t
        with pytest.raises(ValueError):
            u.tick[0] = 1
        with pytest.raises(ValueError):
            u.tick_ns[0] = 1.0
