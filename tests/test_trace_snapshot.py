"""PyTorch memory snapshots: import of a snapshot built with the documented schema, the
safe unpickler, export that torch.cuda._memory_viz renders, and export -> import round trips."""
from __future__ import annotations

import io
import pickle

import numpy as np
import pytest

from uvm_sched.trace import (AccessMode, EventKind, Trace, TraceBuilder, TraceError,
                             export_torch_snapshot, load)

A, F = EventKind.ALLOC, EventKind.FREE
MiB = 1 << 20
BASE = 0x7F10_0000_0000


def ev(action, addr, size, t, stream=0, **kw):
    return {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": t,
            "frames": [{"filename": "train.py", "line": 10, "name": "forward"}], **kw}


def documented_snapshot() -> dict:
    """A snapshot as `torch.cuda.memory._snapshot()` documents it: one 2 MiB segment whose
    final state holds block B (allocated in the trace) and block P (allocated before
    recording and never freed); block X was allocated before recording and is freed in it."""
    seg = {
        "device": 0, "address": BASE, "total_size": 2 * MiB, "stream": 0,
        "segment_type": "large", "segment_pool_id": (0, 0), "allocated_size": 4096,
        "active_size": 4096, "requested_size": 3000,
        "blocks": [
            {"address": BASE, "size": 1024, "requested_size": 1000, "state": "active_allocated",
             "frames": []},  # P
            {"address": BASE + 1024, "size": 1024, "requested_size": 0, "state": "inactive",
             "frames": []},
            {"address": BASE + 2048, "size": 2048, "requested_size": 2000,
             "state": "active_allocated", "frames": []},  # B
            {"address": BASE + 4096, "size": 2 * MiB - 4096, "requested_size": 0,
             "state": "inactive", "frames": []},
        ],
    }
    trace = [
        ev("segment_alloc", BASE, 2 * MiB, 100),
        ev("alloc", BASE + 1024, 512, 101),  # a
        ev("alloc", BASE + 2048, 2000, 102, stream=5),  # B
        ev("free_requested", BASE + 1024, 512, 103),
        ev("free_completed", BASE + 1024, 512, 104),
        ev("free_requested", BASE + 8192, 4096, 105),  # X: allocated before recording
        ev("free_completed", BASE + 8192, 4096, 106),
        {"action": "oom", "size": 1 << 40, "device_free": 5, "stream": 0, "time_us": 107,
         "frames": []},
        ev("alloc", BASE + 1024, 256, 108),  # c reuses a's address
        ev("free_requested", BASE + 1024, 256, 109),
        ev("free_completed", BASE + 1024, 256, 110),
        {"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "time_us": 111, "frames": []},
    ]
    return {"segments": [seg], "device_traces": [trace]}


def write(tmp_path, obj, name="snap.pickle", protocol=4):
    p = tmp_path / name
    p.write_bytes(pickle.dumps(obj, protocol=protocol))
    return p


def alloc_free_sequence(t: Trace):
    """[(kind, k, size, stream)] of ALLOC/FREE rows, k = the block's allocation ordinal:
    comparable across traces whose block ids differ."""
    ordinal: dict[int, int] = {}
    out = []
    for k, b, s, st in zip(t.kind.tolist(), t.block.tolist(), t.size.tolist(), t.stream.tolist()):
        if k == A:
            ordinal[b] = len(ordinal)
        if k in (A, F):
            out.append((k, ordinal[b], s, st))
    return out


def test_documented_snapshot_imports(tmp_path):
    t = load(write(tmp_path, documented_snapshot()))
    assert t.meta["source"] == "torch_snapshot" and t.meta["preexisting_blocks"] == 2
    # tick 0: X (freed later) and P (never freed); then one tick per alloc/free event
    rows = list(zip(t.tick.tolist(), t.kind.tolist(), t.size.tolist(), t.stream.tolist()))
    assert rows == [
        (0, A, 4096, 0),  # X
        (0, A, 1000, 0),  # P (requested size of the segment's block)
        (1, A, 512, 0),  # a
        (2, A, 2000, 5),  # B
        (3, F, 512, 0),  # a, at free_completed
        (4, F, 4096, 0),  # X
        (5, A, 256, 0),  # c
        (6, F, 256, 0),
    ]
    # fresh block id for the reused address, one lifetime per id
    bt = t.block_table()
    assert len(bt) == 5 and bt["free_tick"].tolist().count(-1) == 2
    # t_ns from time_us, relative to the first allocator event
    assert t.t_ns.tolist()[2:] == [0, 1000, 3000, 5000, 7000, 9000]
    assert t.meta["t0_us"] == 101
    assert t.n_ticks == 7


def test_free_requested_is_the_free_when_no_free_completed(tmp_path):
    snap = documented_snapshot()
    snap["device_traces"][0] = [e for e in snap["device_traces"][0]
                                if e["action"] != "free_completed"]
    t = load(write(tmp_path, snap))
    assert t.meta["free_action"] == "free_requested"
    assert [k for k in t.kind.tolist()].count(F) == 3


def test_device_option_and_missing_device(tmp_path):
    snap = documented_snapshot()
    snap["device_traces"] = [[], snap["device_traces"][0]]
    snap["segments"][0]["device"] = 1
    p = write(tmp_path, snap)
    with pytest.raises(TraceError, match=r"no allocator events for device 0 .*device 1: 9 alloc/free entries, 1 oom"):
        load(p, device=0)
    t = load(p, device=1)
    assert set(t.device.tolist()) == {1} and t.meta["device"] == "cuda:1"
    assert load(p) == t  # the one device with events is the default
    assert load(p, device="cuda:1") == t
    assert load(p, device="cuda") == t  # any CUDA device: the one with events
    with pytest.raises(ValueError, match="device"):
        load(p, device="cpu")
    with pytest.raises(TypeError, match="iterations"):
        load(p, iterations=3)


def test_time_going_backwards_is_clamped_and_missing_time_counts_events(tmp_path):
    snap = {"segments": [], "device_traces": [[
        ev("alloc", 0x1000, 8, 50), ev("alloc", 0x2000, 8, 40), ev("free_completed", 0x1000, 8, 60)]]}
    t = load(write(tmp_path, snap))
    assert t.t_ns.tolist() == [0, 0, 10_000]
    for e in snap["device_traces"][0]:
        del e["time_us"]
    t = load(write(tmp_path, snap))
    assert t.t_ns.tolist() == [0, 1, 2] and "t0_us" not in t.meta
    assert t.meta["clock"] == "none"


def test_no_clock_with_blocks_before_the_first_event_makes_no_time(tmp_path):
    # a free of a block allocated before recording puts the recorded events at tick 1..:
    # the tick-0 row must not make t_ns look like a clock of 1 ns per event
    from uvm_sched.pattern import analyze

    entries = [ev("free_completed", 0x9000, 64, 0)]
    for i in range(12):
        entries += [ev("alloc", 0x1000, 128 * (1 + i % 3), 0),
                    ev("free_completed", 0x1000, 128 * (1 + i % 3), 0)]
    for e in entries:
        del e["time_us"]
    t = load(write(tmp_path, {"segments": [], "device_traces": [entries]}))
    assert t.meta["preexisting_blocks"] == 1 and t.meta["clock"] == "none"
    assert (t.t_ns == t.tick).all()
    p = analyze(t)
    assert p.tick_ns_source == "unknown" and np.isnan(p.tick_ns).all()
    assert np.isnan(p.summary()["rep_time_ms"])
    assert "time unavailable" in str(p) and " ms" not in str(p).split("evidence")[0]


def multi_device_snapshot() -> dict:
    """Three GPUs: device 0 and 2 have events; device 2 uses expandable segments
    (segment_map/segment_unmap) and records an OOM between two allocations."""
    d0 = [ev("alloc", 0x1000, 64, 1), ev("free_completed", 0x1000, 64, 2)]
    d2 = [
        ev("segment_map", BASE, 2 * MiB, 10),
        ev("alloc", BASE, 1 * MiB, 11),
        {"action": "oom", "size": 80 * MiB, "device_free": 3 * MiB, "stream": 0,
         "time_us": 12, "frames": []},
        ev("segment_map", BASE + 2 * MiB, 2 * MiB, 13),
        ev("alloc", BASE + 2 * MiB, 1 * MiB, 14),
        ev("free_completed", BASE, 1 * MiB, 15),
        ev("segment_unmap", BASE, 2 * MiB, 16),
    ]
    return {"segments": [], "device_traces": [d0, [], d2]}


def test_several_devices_are_listed_and_one_is_chosen(tmp_path):
    p = write(tmp_path, multi_device_snapshot())
    with pytest.raises(TraceError, match=r"2 devices \(device 0: 2 alloc/free entries; "
                                         r"device 2: 3 alloc/free entries, 1 oom\).*device=N"):
        load(p)
    assert load(p, device=0).meta["device"] == "cuda:0"


def test_expandable_segments_and_oom_are_kept(tmp_path):
    from uvm_sched.pattern import analyze

    t = load(write(tmp_path, multi_device_snapshot()), device=2)
    assert [int(k) for k in t.kind] == [A, A, F]
    assert t.meta["expandable_segments"] is True
    assert t.meta["segment_entries"] == {"segment_map": 2, "segment_unmap": 1}
    oom = t.meta["oom"]
    assert oom["count"] == 1
    # the OOM came after the first alloc (tick 0), before the second (tick 1)
    assert oom["entries"] == [{"entry": 2, "size": 80 * MiB, "device_free": 3 * MiB,
                               "time_us": 12, "stream": 0, "tick": 1}]
    notes = " ".join(analyze(t).notes)
    assert "1 out-of-memory entry" in notes and f"{80 * MiB:,} bytes at tick 1" in notes


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda s: s.pop("device_traces"), "_record_memory_history"),
        (lambda s: s["device_traces"][0].append(ev("alloc", BASE + 2048, 8, 200)), "still live"),
        (lambda s: s["device_traces"][0].insert(4, ev("free_completed", BASE + 1024, 512, 103)),
         "double free"),
        (lambda s: s["device_traces"][0].append(ev("free_completed", BASE + 2048, 99, 200)),
         "allocated with 2,000 bytes"),
        (lambda s: s["device_traces"][0][1].update(size=1.5), "integer addr/size"),
        (lambda s: s["device_traces"][0][1].update(size=-1), "out of range"),
        (lambda s: s["device_traces"][0][1].update(time_us="x"), "time_us"),
        (lambda s: s["device_traces"][0].__setitem__(1, [1, 2]), "expected a dict"),
        (lambda s: s.__setitem__("segments", 5), "'segments' is a int"),
        (lambda s: s["segments"][0]["blocks"][0].update(size=None), "size is None"),
    ],
)
def test_inconsistent_snapshots_raise(tmp_path, mutate, match):
    snap = documented_snapshot()
    mutate(snap)
    with pytest.raises(TraceError, match=match):
        load(write(tmp_path, snap))


def test_unknown_action_warns_and_the_rest_loads(tmp_path):
    import uvm_sched

    expected = load(write(tmp_path, documented_snapshot()))
    snap = documented_snapshot()
    snap["device_traces"][0][3:3] = [ev("teleport", 1, 1, 200), ev("teleport", 2, 1, 201)]
    with pytest.warns(uvm_sched.Warning, match=r"actions.*'teleport' \(2x\)"):
        t = load(write(tmp_path, snap))
    assert t.kind.tolist() == expected.kind.tolist() and t.size.tolist() == expected.size.tolist()


def test_unknown_entry_field_warns_and_the_rest_loads(tmp_path):
    import uvm_sched

    expected = load(write(tmp_path, documented_snapshot()))
    snap = documented_snapshot()
    for e in snap["device_traces"][0]:
        e["stack_id"] = 7
    with pytest.warns(uvm_sched.Warning, match=r"entry fields.*'stack_id'"):
        t = load(write(tmp_path, snap))
    assert t.kind.tolist() == expected.kind.tolist() and t.size.tolist() == expected.size.tolist()


def test_unknown_top_level_field_warns_and_the_rest_loads(tmp_path):
    import uvm_sched

    expected = load(write(tmp_path, documented_snapshot()))
    snap = documented_snapshot()
    snap["memory_pools"] = []
    with pytest.warns(uvm_sched.Warning, match=r"top-level fields.*'memory_pools'"):
        t = load(write(tmp_path, snap))
    assert t.kind.tolist() == expected.kind.tolist()


def test_a_snapshot_with_only_known_fields_loads_without_warning(tmp_path):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load(write(tmp_path, documented_snapshot()))


def test_foreign_pickles_raise(tmp_path):
    with pytest.raises(TraceError, match="not a PyTorch memory snapshot"):
        load(write(tmp_path, {"weights": [1, 2]}))
    with pytest.raises(TraceError, match="old format"):
        load(write(tmp_path, [{"address": 0, "blocks": []}]))
    with pytest.raises(TraceError, match="not a PyTorch memory snapshot"):
        load(write(tmp_path, 42))


class Evil:
    def __reduce__(self):
        return (print, ("unpickled code ran",))


def test_unpickler_refuses_globals(tmp_path, capsys):
    snap = documented_snapshot()
    snap["payload"] = Evil()
    with pytest.raises(TraceError, match="builtins.print"):
        load(write(tmp_path, snap))
    assert "unpickled code ran" not in capsys.readouterr().out
    # plain containers written the protocol-2 way (sets via builtins.set) are fine
    snap = documented_snapshot()
    snap["extra"] = {1, 2}
    t = load(write(tmp_path, snap, protocol=2))
    assert len(t) == 8


# -- export ---------------------------------------------------------------------------------
def builder_trace(n_iter=3, devices=(0,)) -> Trace:
    b = TraceBuilder(name="exp", source="test")
    w = {d: b.alloc(4 * MiB + 3, device=d) for d in devices}
    for it in range(n_iter):
        b.mark()
        for d in devices:
            x = b.alloc(1000, stream=3, device=d)
            y = b.alloc(3 * MiB, device=d)
            b.access(w[d], AccessMode.READ, device=d)
            b.next_tick(100.0)
            b.free(x, stream=3, device=d)
            z = b.alloc(0, device=d)  # zero-byte allocations exist too
            b.next_tick(200.0)
            b.free(z, device=d)
            b.free(y, device=d)
        b.next_tick(50.0)
    return b.build()


def test_export_round_trip_same_alloc_free_sequence(tmp_path):
    t = builder_trace()
    p = tmp_path / "out.pickle"
    export_torch_snapshot(t, p)
    u = load(p)
    assert alloc_free_sequence(u) == alloc_free_sequence(t)
    assert u.meta["preexisting_blocks"] == 0
    # one tick per allocator event; times survive at microsecond resolution
    n_af = int(np.isin(t.kind, [A, F]).sum())
    assert u.n_ticks == n_af == len(u)
    sel = np.isin(t.kind, [A, F])
    assert np.array_equal(u.t_ns, (t.t_ns[sel] // 1000 - t.t_ns[sel][0] // 1000) * 1000)


def test_export_round_trip_per_device(tmp_path):
    t = builder_trace(devices=(0, 1))
    p = tmp_path / "two.pickle"
    export_torch_snapshot(t, p)
    for d in (0, 1):
        u = load(p, device=d)
        sub = Trace({k: v[(t.device == d) | (t.kind == EventKind.MARK)] for k, v in t.columns.items()},
                    validate=False)
        assert alloc_free_sequence(u) == alloc_free_sequence(sub)


def test_export_of_blocks_live_at_end(tmp_path):
    b = TraceBuilder(name="live")
    keep = b.alloc(5000)
    tmp = b.alloc(700)
    b.next_tick()
    b.free(tmp)
    b.alloc(900)
    t = b.build()
    export_torch_snapshot(t, tmp_path / "l.pickle")
    snap = pickle.loads((tmp_path / "l.pickle").read_bytes())
    seg = snap["segments"][0]
    active = [blk for blk in seg["blocks"] if blk["state"] == "active_allocated"]
    assert sorted(blk["requested_size"] for blk in active) == [900, 5000]
    assert sum(blk["size"] for blk in seg["blocks"]) == seg["total_size"]
    # blocks tile the segment: each starts where the previous ended
    addr = seg["address"]
    for blk in seg["blocks"]:
        assert blk["address"] == addr
        addr += blk["size"]
    u = load(tmp_path / "l.pickle")
    assert alloc_free_sequence(u) == alloc_free_sequence(t) and u.meta["preexisting_blocks"] == 0
    assert keep == 0


def test_exported_snapshot_is_plain_data_and_renders(tmp_path):
    memviz = pytest.importorskip("torch.cuda._memory_viz")
    t = builder_trace()
    p = tmp_path / "viz.pickle"
    export_torch_snapshot(t, p)

    class OnlyBuiltins(pickle.Unpickler):
        def find_class(self, module, name):
            raise AssertionError(f"exported snapshot references {module}.{name}")

    snap = OnlyBuiltins(io.BytesIO(p.read_bytes())).load()
    html = memviz.trace_plot(snap)
    assert "snapshot.pickle" in html
    assert memviz.segment_plot(snap)
    assert memviz.trace_plot(snap, plot_segments=True)
    text = memviz.trace(snap)  # replays every entry (alloc/free naming by segment)
    assert text.count(" = a[") == int((t.kind == A).sum())
    summary = memviz.segsum(snap)  # asserts the allocator accounting adds up
    assert "segments: 1" in summary
    flame = memviz.memory(snap, format_flamegraph=lambda s: s)
    assert "active_allocated" in flame and "exp" in flame
    assert memviz.segments(snap, format_flamegraph=lambda s: s)


def test_export_refuses_negative_device(tmp_path):
    t = Trace(dict(tick=[0], kind=[0], block=[0], size=[8], device=[-1]))
    with pytest.raises(TraceError, match="device -1"):
        export_torch_snapshot(t, tmp_path / "x.pickle")
    assert not (tmp_path / "x.pickle").exists()


def test_export_layout_reuses_addresses_within_segment(tmp_path):
    t = builder_trace(n_iter=20)
    export_torch_snapshot(t, tmp_path / "r.pickle")
    snap = pickle.loads((tmp_path / "r.pickle").read_bytes())
    seg = snap["segments"][0]
    entries = snap["device_traces"][0]
    assert entries[0]["action"] == "segment_alloc" and entries[0]["size"] == seg["total_size"]
    live: dict[int, int] = {}
    for e in entries[1:]:
        if e["action"] == "alloc":
            end = e["addr"] + max(e["size"], 1)
            assert seg["address"] <= e["addr"] and end <= seg["address"] + seg["total_size"]
            for a, s in live.items():  # no two live blocks overlap
                assert end <= a or a + s <= e["addr"]
            live[e["addr"]] = max(e["size"], 1)
        elif e["action"] == "free_completed":
            live.pop(e["addr"])
    # a repeating workload reuses its addresses: the segment stays near the peak
    assert seg["total_size"] <= 2 * t.peak_bytes + (2 << 20)


def test_no_clock_is_not_simulated_unless_a_tick_time_is_assumed(tmp_path):
    from uvm_sched import cli
    from uvm_sched.pattern import analyze
    from uvm_sched.sim import simulate

    entries = []
    for i in range(12):
        entries += [ev("alloc", 0x1000, 4 * MiB * (1 + i % 3), 0),
                    ev("free_completed", 0x1000, 4 * MiB * (1 + i % 3), 0)]
    for e in entries:
        del e["time_us"]
    p = write(tmp_path, {"segments": [], "device_traces": [entries]})
    t = load(p)
    assert not t.has_clock
    with pytest.raises(ValueError, match="no clock.*assume_tick_ns"):
        simulate(t, "demand", "h200-pcie5", "50%")
    a = t.assume_tick_ns(2000.0)
    assert a.has_clock and a.meta["clock"] == "assumed 2000 ns per tick"
    r = simulate(a, "ideal", "h200-pcie5")
    assert r.compute_time_s == pytest.approx(2e-6 * (r.counters.get("window_stop", a.n_ticks)
                                                     - r.counters.get("window_start", 0)))
    assert analyze(a).tick_ns_source.startswith("assumed")
    # the whole peak as budget: simulate's default (50%) is below this trace's working set
    assert cli.main(["simulate", str(p), "--policy", "demand", "--budget", "100%"]) == 2
    assert cli.main(["simulate", str(p), "--policy", "demand", "--budget", "100%",
                     "--assume-tick-us", "2"]) == 0
