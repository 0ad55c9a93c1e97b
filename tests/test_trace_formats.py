"""The profiler formats people have, each recognised by content in `trace.load`: Kineto
`[memory]` events without `Addr` (PyTorch <= 1.9), the torch.profiler memory timeline raw
export, and the PyTorch Execution Trace (Chakra JSON). Files are written here in each exact
schema (the schema's source is in each importer's docstring) and counted independently;
real CPU exports of torch.profiler are loaded too."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from uvm_sched.pattern import analyze
from uvm_sched.trace import EventKind, TraceError, load

A, F, ACC, M = EventKind.ALLOC, EventKind.FREE, EventKind.ACCESS, EventKind.MARK


def count(tr, kind) -> int:
    return int(np.count_nonzero(tr.kind == kind))


# -- Kineto [memory] without Addr -------------------------------------------------------------
def old_kineto(steps=6, with_totals=True, preexisting=4096):
    """A PyTorch <= 1.9 profile: ProfilerStep# spans and [memory] instant events with
    Device Type/Device Id/Bytes (and Total Allocated), no Addr. Returns (doc, truth)."""
    ev, ts, total = [], 1000.0, preexisting
    n_alloc = n_free = 0

    def mem(nbytes, dev_type=1):
        nonlocal ts, total, n_alloc, n_free
        ts += 1.0
        args = {"Device Type": dev_type, "Device Id": 0, "Bytes": nbytes}
        if dev_type == 1:
            total += nbytes
            n_alloc += nbytes > 0
            n_free += nbytes < 0
            if with_totals:
                args["Total Allocated"] = total
        ev.append({"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
                   "args": args})

    mem(-preexisting)  # a free of a block allocated before profiling
    for s in range(steps):
        ev.append({"ph": "X", "cat": "cpu_op", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1,
                   "ts": ts + 0.5, "dur": 100.0})
        acts = [1 << 20, 3 << 20, 1 << 20]  # two equal sizes: pairing order matters
        for b in acts:
            mem(b)
        mem(512)  # a CPU allocation on the way: not CUDA
        mem(2048)
        mem(-2048)
        for b in reversed(acts):
            mem(-b)
    return {"traceEvents": ev}, {"alloc": n_alloc, "free": n_free, "steps": steps}


def test_kineto_without_addr_loads_with_frees_paired_by_size(tmp_path):
    doc, truth = old_kineto()
    p = tmp_path / "resnet_old.json"
    p.write_text(json.dumps(doc))
    tr = load(p)
    assert count(tr, A) == truth["alloc"] + 1  # + the block live before profiling
    assert count(tr, F) == truth["free"]
    assert tr.meta["free_pairing"].startswith("by size")
    assert tr.meta["bytes_before_profiling"] == 4096
    assert tr.meta["preexisting_blocks"] == 1
    # last in, first out: the second 1 MiB block is freed first, the first one last
    bt = tr.block_table()
    first = bt[bt["alloc_tick"] >= 1].iloc[:3]
    assert (first["free_tick"].to_numpy() > first["alloc_tick"].to_numpy()).all()
    assert first["free_tick"].iloc[0] > first["free_tick"].iloc[2]
    p6 = analyze(tr)
    assert p6.source == "markers" and len(p6.iterations) == truth["steps"]
    assert p6.regularity == 1.0


def test_kineto_without_addr_or_totals_and_mixed_addr(tmp_path):
    doc, truth = old_kineto(steps=2, with_totals=False)
    p = tmp_path / "a.json"
    p.write_text(json.dumps(doc))
    tr = load(p)
    assert count(tr, A) == truth["alloc"] + 1 and "bytes_before_profiling" not in tr.meta
    doc["traceEvents"][3]["args"]["Addr"] = 0x1000
    p.write_text(json.dumps(doc))
    with pytest.raises(TraceError, match="no Addr while 1 others have one"):
        load(p)


# -- torch.profiler memory timeline (raw) -------------------------------------------------
PARAM, OPT, INPUT, TEMP, ACT, GRAD = 0, 1, 2, 3, 4, 5


def timeline_rows(steps=5):
    """Raw rows [t_ns, action, bytes, category] of a small training loop, with the truth:
    each allocation's category, in order."""
    rows, cats, t = [], [], 1_000_000
    frees = 0
    for b in (4096, 256):  # parameters, live before profiling
        rows.append([-1, 1, b, PARAM])
        cats.append(PARAM)
    grads = []
    for s in range(steps):
        t += 10
        rows.append([t, 2, 1024, INPUT])
        cats.append(INPUT)
        acts = []
        for b in (2048, 2048, 512):
            t += 10
            rows.append([t, 2, b, ACT])
            cats.append(ACT)
            acts.append(b)
        t += 10
        rows += [[t, 2, 64, TEMP], [t, 4, -64, TEMP]]
        cats.append(TEMP)
        frees += 1
        for b in reversed(acts):
            t += 10
            rows.append([t, 4, -b, ACT])
            frees += 1
        t += 10
        rows.append([t, 4, -1024, INPUT])
        frees += 1
        if s == 0:
            for b in (4096, 256):
                t += 10
                rows.append([t, 2, b, GRAD])
                cats.append(GRAD)
                grads.append(b)
                rows.append([t, 2, b, OPT])
                cats.append(OPT)
        else:  # gradients accumulate in place: a new version, no allocation
            for b in grads:
                t += 10
                rows += [[t, 3, -b, GRAD], [t, 3, b, GRAD]]
    return rows, cats, frees


@pytest.mark.parametrize("gz", [False, True])
def test_memory_timeline_raw_loads_with_categories(tmp_path, gz):
    rows, cats, frees = timeline_rows()
    p = tmp_path / ("mem.raw.json.gz" if gz else "mem.raw.json")
    data = json.dumps(rows).encode()
    p.write_bytes(gzip.compress(data) if gz else data)
    tr = load(p)
    assert tr.meta["source"] == "torch_memory_timeline"
    assert count(tr, A) == len(cats) and count(tr, F) == frees
    assert [tr.meta["categories"][c] for c in tr.meta["alloc_category"]] == \
        [tr.meta["categories"][c] for c in cats]
    assert tr.meta["bytes_by_category"]["activation"] == 5 * (2048 + 2048 + 512)
    # the two 2 KiB activations of a step: the later one is freed first (last in, first out)
    bt = tr.block_table()
    a1, a2 = bt[bt["size"] == 2048].iloc[:2].itertuples()
    assert a2.free_tick < a1.free_tick
    p5 = analyze(tr)
    # no markers in this format: the 5 steps are learned (the first allocates the state)
    assert p5.source == "learned" and len(p5.iterations) == 5, p5.notes
    assert any(n.startswith("bytes allocated by category") and "activation" in n
               for n in p5.notes)


def test_memory_timeline_plot_export_is_refused_with_the_raw_route(tmp_path):
    p = tmp_path / "mem.json"
    p.write_text(json.dumps([[1, 2, 3], [[0, 1], [0, 2], [1, 2]]]))
    with pytest.raises(TraceError, match="raw.json.gz"):
        load(p)


def test_memory_timeline_bad_rows(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps([[1, 2, 64, 3], [2, 9, 64, 3]]))
    with pytest.raises(TraceError, match="row 1 has action 9"):
        load(p)
    p.write_text(json.dumps([[1, 2, 64, 3], [2, 4, 64, 3]]))
    with pytest.raises(TraceError, match="wrong sign"):
        load(p)


# -- Execution Trace ------------------------------------------------------------------------
class ETWriter:
    """Nodes of an Execution Trace in the 1.1.x-chakra schema (or 1.0.x with flat lists)."""

    def __init__(self, flat=False):
        self.nodes, self.next, self.flat = [], 2, flat
        self.leaf_storages: list[set[int]] = []  # truth: storages each leaf op touches

    def node(self, name, ins=(), outs=(), parent=1, leaf=True):
        i = self.next
        self.next += 1
        tv = lambda ts: ([t for t, _ in ts], ["Tensor(float)"] * len(ts))  # noqa: E731
        iv, it = tv(ins)
        ov, ot = tv(outs)
        if self.flat:
            nd = {"id": i, "name": name, "ctrl_deps": parent, "inputs": iv, "input_types": it,
                  "input_shapes": [[]] * len(iv), "outputs": ov, "output_types": ot,
                  "output_shapes": [[]] * len(ov)}
        else:
            nd = {"id": i, "name": name, "ctrl_deps": parent,
                  "inputs": {"values": iv, "shapes": [[]] * len(iv), "types": it,
                             "strides": [[]] * len(iv)},
                  "outputs": {"values": ov, "shapes": [[]] * len(ov), "types": ot,
                              "strides": [[]] * len(ov)},
                  "attrs": [{"name": "rf_id", "type": "uint64", "value": i}]}
        self.nodes.append(nd)
        if leaf and (ins or outs):
            self.leaf_storages.append({v[1] for v, _ in list(ins) + list(outs)})
        return i

    def doc(self):
        return {"schema": "1.0.2-chakra.0.0.4" if self.flat else "1.1.1-chakra.0.0.4",
                "pid": 7, "time": "2026-01-01 00:00:00", "start_ts": 1, "finish_ts": 2,
                # nodes are written as ops end: children before parents
                "nodes": sorted(self.nodes, key=lambda n: -n["id"])}


def tensor(tid, sid, numel, dev="cuda:0"):
    return ([tid, sid, 0, numel, 4, dev], None)


def et_training(steps=4, flat=False):
    """Linear layer training: W (weight) and its gradient G live on; per step an input, an
    output, a loss; the optimizer updates W in place. Returns (doc, truth)."""
    w = ETWriter(flat)
    W, G = tensor(1, 1, 1000), tensor(2, 2, 1000)
    fresh = 0
    for s in range(steps):
        st = w.node(f"ProfilerStep#{s}", leaf=False)
        x = tensor(10 + s, 100 + s, 64)  # a new storage each step
        w.node("aten::randn", outs=[x], parent=st)
        lin = w.node("aten::linear", parent=st, leaf=False)
        y = tensor(20, 200, 32)  # the same storage id every step: reused address
        w.node("aten::addmm", ins=[x, W], outs=[y], parent=lin)
        loss = tensor(30, 300, 1)
        w.node("aten::sum", ins=[y], outs=[loss], parent=st)
        w.node("aten::mm", ins=[y, x], outs=[G] if s == 0 else [], parent=st)
        if s > 0:
            w.node("aten::add_", ins=[G, y], outs=[G], parent=st)
        w.node("aten::add_", ins=[W, G], outs=[W], parent=st)
        fresh += 3 + (s == 0)  # x, y, loss (and G once)
    # pre-existing: W (first seen as an input)
    return w.doc(), {"blocks": fresh + 1, "ops": len(w.leaf_storages), "steps": steps,
                     "accesses": sum(len(x) for x in w.leaf_storages)}


@pytest.mark.parametrize("flat", [False, True])
def test_execution_trace_gives_accesses_and_steps(tmp_path, flat):
    doc, truth = et_training(flat=flat)
    p = tmp_path / "et.json"
    p.write_text(json.dumps(doc))
    tr = load(p)
    assert tr.meta["source"] == "execution_trace" and tr.meta["clock"] == "none"
    assert count(tr, A) == truth["blocks"]
    assert count(tr, ACC) == truth["accesses"]
    assert count(tr, M) == truth["steps"]
    assert tr.meta["ops"] == truth["ops"]
    pat = analyze(tr)
    assert pat.source == "markers" and len(pat.iterations) == truth["steps"]
    assert pat.tick_ns_source == "unknown"
    # W and G outlive the recording; the per-step storages are freed after their last use
    bt = tr.block_table()
    assert (bt["free_tick"] == -1).sum() == 2


def test_execution_trace_device_choice(tmp_path):
    doc, _ = et_training(steps=2)
    p = tmp_path / "et.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(TraceError, match=r"no tensor on 'cpu' .*cuda:0"):
        load(p, device="cpu")
    assert load(p, device="cuda:0") == load(p)


def test_plan_in_sampled_mode_from_an_execution_trace(tmp_path):
    from uvm_sched import cli

    doc, _ = et_training(steps=5)
    p = tmp_path / "et.json"
    p.write_text(json.dumps(doc))
    out = tmp_path / "plan.json"
    assert cli.main(["plan", str(p), "--mode", "sampled", "--budget", "60%", "-o", str(out)]) == 0
    from uvm_sched.planner import Plan

    plan = Plan.load(out)
    assert plan.meta["mode"] == "sampled" and plan.meta["tick_time_source"] == "unknown"


# -- real torch.profiler exports (CPU) ---------------------------------------------------------
@pytest.fixture(scope="module")
def real_exports(tmp_path_factory):
    """A 4-step CPU training loop under torch.profiler with the Execution Trace observer:
    the raw memory timeline and the Execution Trace it writes."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile

    d = tmp_path_factory.mktemp("real")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    opt = torch.optim.AdamW(model.parameters())
    et = ExecutionTraceObserver().register_callback(str(d / "et.json"))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                 with_stack=True, execution_trace_observer=et) as prof:
        for _ in range(4):
            model(torch.randn(16, 32)).mean().backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    with pytest.warns(FutureWarning):
        prof.export_memory_timeline(str(d / "tl.raw.json.gz"), device="cpu")
    prof.export_chrome_trace(str(d / "cpu.json"))
    return d


def test_real_memory_timeline_counts_match_its_rows(real_exports):
    rows = json.loads(gzip.decompress((real_exports / "tl.raw.json.gz").read_bytes()))
    tr = load(real_exports / "tl.raw.json.gz")
    creates = sum(r[1] in (1, 2) for r in rows)
    destroys = sum(r[1] == 4 for r in rows)
    assert count(tr, A) - tr.meta["preexisting_blocks"] == creates
    assert count(tr, F) == destroys
    assert len(analyze(tr).iterations) == 4


def test_real_execution_trace_counts_match_its_nodes(real_exports):
    doc = json.loads((real_exports / "et.json").read_text())
    tr = load(real_exports / "et.json", device="cpu")
    parents = {n["ctrl_deps"] for n in doc["nodes"] if n["ctrl_deps"] != n["id"]}
    leaves_with_tensors = [n for n in doc["nodes"] if n["id"] not in parents and any(
        isinstance(t, str) and "Tensor" in t
        for side in ("inputs", "outputs") for t in n[side]["types"])]
    assert tr.meta["ops"] == len(leaves_with_tensors)
    steps = sum(n["name"].startswith("Optimizer.step#") for n in doc["nodes"])
    assert steps == 4
    p = analyze(tr)
    assert p.source == "markers" and len(p.iterations) == steps


def test_cli_device_option_reads_a_cpu_profile(real_exports, capsys):
    from uvm_sched import cli

    path = str(real_exports / "cpu.json")
    assert cli.main(["analyze", path]) != 0
    assert "--device cpu" in capsys.readouterr().err
    assert cli.main(["analyze", path, "--device", "cpu", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pattern"]["iterations"] == 4  # 4 steps (no ProfilerStep spans without a schedule)
    # a format without devices says the option does not apply
    assert cli.main(["analyze", str(real_exports / "tl.raw.json.gz"), "--device", "cpu"]) != 0
