"""Import a PyTorch Execution Trace (``torch.profiler.ExecutionTraceObserver``; the
Chakra-compatible JSON, schema ``"1.0.x-chakra..."`` / ``"1.1.x-chakra..."``).

Schema (``torch/csrc/profiler/standalone/execution_trace_observer.cpp``: ``writeJsonNode``,
``convertIValue``, ``initExecutionTraceStart``): a JSON object ``{"schema", "pid", "time",
"start_ts", "nodes": [...], "finish_ts"}``. Each node is one operator or ``record_function``
range:

* ``id`` -- assigned when the op starts (ids increase in start order; nodes are written
  when they end, so children come before their parent in the file); ``name``
  (``aten::addmm``, ``ProfilerStep#3``, ...); ``ctrl_deps`` -- the parent node's id.
* ``inputs`` / ``outputs`` -- ``{"values", "shapes", "types", "strides"}`` (1.0.x files:
  ``inputs``/``outputs`` are the value lists, with ``input_types``/``output_types`` beside
  them). A tensor's type is ``"Tensor(float)"`` and its value ``[tensor_id, storage_id,
  offset, numel, itemsize, device]`` (ids minted per TensorImpl / per storage data pointer;
  offset and numel in elements, itemsize in bytes, device like ``"cuda:0"``). Lists and
  tuples of tensors (``GenericList[...]``) nest these values.
* ``attrs`` -- rf_id, fw_parent, seq_id, scope, tid, fw_tid, op_schema... (not used here).

What it gives is *which op touches which storage*: ground-truth accesses of a real run,
with no allocator events and no op times. Mapping to a Trace:

* Ticks are the leaf ops (nodes no other node names as ``ctrl_deps``) that touch a tensor
  on the chosen device, in ``id`` order; each gets ACCESS rows (inputs READ, outputs
  WRITE; both: READ_WRITE) of the storages they touch.
* Blocks are storage lifetimes. A storage that first appears as an op's output not among
  its inputs is allocated at that op (a fresh output); one that first appears as an input
  existed before (weights, the batch): allocated at tick 0. Since storage ids follow data
  pointers, which the caching allocator reuses, a fresh output of a storage seen before
  starts a new lifetime. A lifetime ends (FREE) after its last touching op -- the earliest
  the allocator may have freed it, so lifetimes are lower bounds -- except for blocks that
  outlive the recording: those that existed before it, and those made before the last
  ``ProfilerStep`` and still used in it (weights, optimizer state) are never freed. Sizes are the largest
  extent touched, ``(offset + numel) * itemsize`` bytes, not the allocator's rounded block.
* ``ProfilerStep#N`` nodes: a MARK at the first leaf op started after the step began.
  Without them, ``Optimizer.step#...`` ranges (the optimizer's profiling hook) end the
  training steps: ``meta["step_ends"]`` holds the tick after each one's last leaf op, which
  ``pattern.analyze`` takes as step markers.
* No clock: ``t_ns`` repeats the tick and ``meta["clock"] = "none"``.
"""
from __future__ import annotations

import bisect
import re
from typing import Any

from ._model import AccessMode, TraceBuilder, TraceError

__all__ = ["is_execution_trace", "trace_from_execution_trace"]

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_OPT_STEP = "Optimizer.step#"
_R, _W, _RW = AccessMode.READ, AccessMode.WRITE, AccessMode.READ_WRITE


def is_execution_trace(doc: Any) -> bool:
    """True for an Execution Trace JSON: a dict with a ``nodes`` list and a ``schema`` naming
    Chakra (or the pre-Chakra ``1.0.x`` schema)."""
    return (isinstance(doc, dict) and isinstance(doc.get("nodes"), list)
            and isinstance(doc.get("schema"), str)
            and ("chakra" in doc["schema"] or doc["schema"].startswith("1.")))


def _side(node: dict, which: str) -> tuple[list, list]:
    """(values, types) of a node's inputs or outputs, in either schema version."""
    v = node.get(which)
    if isinstance(v, dict):
        return list(v.get("values") or []), list(v.get("types") or [])
    types = node.get(f"{which[:-1]}_types") or []
    return list(v or []), list(types)


def _tensors(values: list, types: list, out: list) -> None:
    """Append (storage_id, extent bytes, device) of every tensor in values (nested lists)."""
    for v, t in zip(values, types + [None] * (len(values) - len(types))):
        ts = t if isinstance(t, str) else ""
        if ts.startswith("Tensor") and isinstance(v, list) and len(v) == 6:
            _tid, sid, off, numel, item, dev = v
            if all(isinstance(x, int) and not isinstance(x, bool) for x in (sid, off, numel, item)) \
                    and sid > 0 and isinstance(dev, str):
                out.append((sid, (off + numel) * item, dev))
        elif isinstance(v, list) and ("List" in ts or "Tuple" in ts):
            inner = _inner_types(ts, len(v))
            _tensors(v, inner, out)


def _inner_types(ts: str, n: int) -> list:
    """Element types of ``GenericList[Tensor(float),Tensor(float)]`` (best effort: a
    tensor list's elements are all tensors)."""
    i = ts.find("[")
    body = ts[i + 1:-1] if i >= 0 and ts.endswith("]") else ""
    parts, depth, cur = [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch in "[("
        depth -= ch in "])"
        cur += ch
    if cur:
        parts.append(cur)
    return parts if len(parts) == n else [parts[0] if parts else ""] * n


def trace_from_execution_trace(doc: dict, *, device: str = "cuda", where: str = "trace",
                               name: str | None = None):
    """Convert a parsed Execution Trace (module doc) to a Trace with ACCESS rows."""
    from ._kineto import _parse_device

    _, dev_id, dev_name = _parse_device(device)
    by_id, parents, steps = _nodes(doc["nodes"], where)
    ops, cuda_devs = _leaf_ops(by_id, parents, dev_id, dev_name, where)
    op_ids = [nid for nid, _, _ in ops]
    # Blocks that outlive the recording are not freed: those that existed before it and
    # those made before the last step and still used in it (weights, optimizer state).
    last_step = bisect.bisect_right(op_ids, steps[-1]) if steps else len(ops)
    life = _Lifetimes(ops, last_step)
    tb = TraceBuilder(source="execution_trace", name=name or "execution_trace",
                      device=dev_name if dev_name != "cuda" else (cuda_devs[0] if cuda_devs else "cuda"),
                      units={"size": "bytes (tensor extent)", "tick": "leaf operator"},
                      clock="none", schema=str(doc.get("schema")),
                      ops=len(ops), storages=len({s for _, i, o in ops for s, _ in i + o}))
    step_at: dict[int, int] = {}
    for sid in steps:
        k = bisect.bisect_right(op_ids, sid)
        if k < len(ops):
            step_at.setdefault(k, sid)
    life.emit(tb, step_at)
    tr = tb.build()  # no clock: t_ns is the tick (the TraceBuilder's default)
    if not steps:
        ends = _optimizer_step_ends(by_id, op_ids)
        if ends:
            shift = 1 if life.pre else 0
            tr.meta["step_ends"] = {"signal": "Optimizer.step# ranges",
                                    "ends": [k + shift for k in ends]}
    return tr


def _nodes(nodes: Any, where: str) -> tuple[dict[int, dict], set[int], list[int]]:
    """(node id -> node, the ids other nodes name as their parent (``ctrl_deps``), the ids
    of the ``ProfilerStep#N`` nodes in order)."""
    by_id: dict[int, dict] = {}
    parents: set[int] = set()
    for i, nd in enumerate(nodes):
        if not isinstance(nd, dict) or not isinstance(nd.get("id"), int):
            raise TraceError(f"{where}: nodes[{i}] is not an object with an integer id")
        by_id[nd["id"]] = nd
        p = nd.get("ctrl_deps")
        if isinstance(p, int) and p != nd["id"]:
            parents.add(p)
    steps = sorted(nd["id"] for nd in nodes if isinstance(nd.get("name"), str)
                   and _STEP.match(nd["name"]))
    return by_id, parents, steps


def _leaf_ops(by_id: dict[int, dict], parents: set[int], dev_id: int | None, dev_name: str,
              where: str) -> tuple[list[tuple[int, list, list]], list[str]]:
    """The ticks: leaf ops (nodes not in ``parents``) that touch a tensor on the chosen
    device, in id order, as (id, [(storage, bytes) read], [(storage, bytes) written]); and
    the CUDA devices any leaf op's tensors are on."""
    def on_device(dev: str) -> bool:
        if dev_name == "cpu":
            return dev == "cpu"
        return dev.startswith("cuda") and (dev_id is None or dev in (f"cuda:{dev_id}",))

    ops = []
    devices: dict[str, int] = {}
    for nid in sorted(by_id):
        nd = by_id[nid]
        if nid in parents:
            continue
        ins: list = []
        outs: list = []
        _tensors(*_side(nd, "inputs"), ins)
        _tensors(*_side(nd, "outputs"), outs)
        for _, _, d in ins + outs:
            devices[d] = devices.get(d, 0) + 1
        ins = [(s, b) for s, b, d in ins if on_device(d)]
        outs = [(s, b) for s, b, d in outs if on_device(d)]
        if ins or outs:
            ops.append((nid, ins, outs))
    cuda_devs = sorted(d for d in devices if d.startswith("cuda"))
    if not ops:
        raise TraceError(
            f"{where}: an Execution Trace with no tensor on {dev_name!r} (tensors by device: "
            f"{devices or 'none'}); pass device=\"cpu\" or \"cuda:N\" (CLI: --device)")
    if dev_name == "cuda" and len(cuda_devs) > 1:
        raise TraceError(f"{where}: tensors on several CUDA devices {cuda_devs}; pass "
                         "device=\"cuda:N\" (CLI: --device cuda:N)")
    return ops, cuda_devs


class _Lifetimes:
    """Storage lifetimes over the leaf ops (the module docstring's blocks): a storage first
    seen as an input existed before the recording (``pre``), a fresh output starts a new
    lifetime, a lifetime ends after its last op unless it outlives the recording (made
    before op ``last_step`` and still used from it on)."""

    def __init__(self, ops: list[tuple[int, list, list]], last_step: int) -> None:
        last_use: dict[int, int] = {}
        self.block_size: dict[int, int] = {}
        self.pre: list[int] = []  # blocks allocated before the first op
        created_at: dict[int, int] = {}
        cur: dict[int, int] = {}  # storage -> its current block
        self.op_blocks: list[list[tuple[int, int]]] = []  # per op: (block, mode)
        nb = 0
        for k, (_, ins, outs) in enumerate(ops):
            in_s = {s for s, _ in ins}
            touched: dict[int, int] = {}
            for s, b in ins:
                if s not in cur:
                    cur[s] = nb
                    self.pre.append(nb)
                    nb += 1
                blk = cur[s]
                self.block_size[blk] = max(self.block_size.get(blk, 0), b)
                touched[blk] = touched.get(blk, 0) | _R
            fresh: set[int] = set()
            for s, b in outs:
                if s not in in_s and s not in fresh:  # a fresh output: a new lifetime
                    fresh.add(s)
                    cur[s] = nb
                    created_at[nb] = k
                    nb += 1
                blk = cur[s]
                self.block_size[blk] = max(self.block_size.get(blk, 0), b)
                touched[blk] = touched.get(blk, 0) | _W
            for blk in touched:
                last_use[blk] = k
            self.op_blocks.append(list(touched.items()))
        pre_set = set(self.pre)
        self.frees_at: dict[int, list[int]] = {}  # op index -> blocks freed after it
        for blk, k in last_use.items():
            if blk in pre_set or (k >= last_step and created_at.get(blk, -1) < last_step):
                continue
            self.frees_at.setdefault(k, []).append(blk)
        self.created: dict[int, list[int]] = {}  # op index -> blocks it allocates
        for blk, k in created_at.items():
            self.created.setdefault(k, []).append(blk)

    def emit(self, tb: TraceBuilder, step_at: dict[int, int]) -> None:
        """The rows: the pre-existing blocks at tick 0 (a tick of their own), then per op
        a MARK where a step starts (``step_at``), its allocations, accesses and frees."""
        ids: dict[int, int] = {}
        for blk in self.pre:
            ids[blk] = tb.alloc(max(self.block_size[blk], 1))
        if self.pre:
            tb.next_tick()
        for k in range(len(self.op_blocks)):
            if k in step_at:
                tb.mark()
            for blk in self.created.get(k, []):
                ids[blk] = tb.alloc(max(self.block_size[blk], 1))
            for blk, mode in self.op_blocks[k]:
                tb.access(ids[blk], mode)
            for blk in self.frees_at.get(k, []):
                tb.free(ids[blk])
            tb.next_tick()


def _optimizer_step_ends(by_id: dict[int, dict], op_ids: list[int]) -> list[int]:
    """Op index just after each ``Optimizer.step#`` range (its last descendant leaf)."""
    children: dict[int, list[int]] = {}
    for nid, nd in by_id.items():
        p = nd.get("ctrl_deps")
        if isinstance(p, int) and p != nid:
            children.setdefault(p, []).append(nid)
    ends = []
    for nid, nd in by_id.items():
        if not (isinstance(nd.get("name"), str) and nd["name"].startswith(_OPT_STEP)):
            continue
        last, todo = nid, [nid]
        while todo:
            x = todo.pop()
            last = max(last, x)
            todo += children.get(x, [])
        ends.append(bisect.bisect_right(op_ids, last))
    return sorted(set(e for e in ends if e > 0))
