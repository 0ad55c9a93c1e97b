"""Traces from the native allocator's event ring (``uvm_sched.drain_events()``)."""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ._model import COLUMNS, EventKind, Trace

__all__ = ["trace_from_events"]


def trace_from_events(events: np.ndarray, *, meta: Mapping[str, Any] | None = None,
                      return_addresses: bool = False) -> Any:
    """Turn drained allocator events into a Trace.

    One tick per allocator event: an event with ring tick ``k`` lands on trace tick
    ``k - k0`` (``k0`` = the first event's tick), so trace ticks are exactly the plan's
    allocator-event clock (gaps appear only where the ring dropped events, see
    ``stats()["events_dropped"]``). Addresses become fresh block ids in allocation order
    (an address reused after a free gets a new id). ``step()`` markers become MARK rows
    at the tick of the next allocator event. A free of a block allocated before the
    drained window gets a synthetic ALLOC at tick 0. Executor and error events are left
    out. Device time per tick is unknown (NaN); ``t_ns`` holds the host clock in ns.

    Block ids follow the order of the ALLOC rows, so block id = allocation ordinal in the
    trace (what a plan's persistent block ordinal means). With ``return_addresses=True``
    returns ``(trace, addresses)``, where ``addresses[block]`` is the block's address:
    ``native.arm_plan(plan, persistent_addrs=addresses)`` resolves persistent blocks.
    """
    from ..native import EVENT_DTYPE

    ev = np.asarray(events)
    if ev.dtype != EVENT_DTYPE:
        ev = ev.astype(EVENT_DTYPE)
    kind = ev["kind"]
    ev = ev[(kind == EventKind.ALLOC) | (kind == EventKind.FREE) | (kind == EventKind.MARK)]
    n = len(ev)
    k0 = int(ev["tick"][0]) if n else 0
    kinds = ev["kind"].astype(np.uint8)
    addrs = ev["addr"]
    block = np.full(n, -1, np.int64)
    live: dict[int, int] = {}
    block_addr: list[int] = []
    pre: list[tuple[int, int, int]] = []  # (block, size, stream) allocated before the window
    for i in range(n):
        k = kinds[i]
        if k == EventKind.ALLOC:
            a = int(addrs[i])
            b = len(block_addr)
            block_addr.append(a)
            live[a] = b
            block[i] = b
        elif k == EventKind.FREE:
            a = int(addrs[i])
            b = live.pop(a, -1)
            if b < 0:
                b = len(block_addr)
                block_addr.append(a)
                pre.append((b, int(ev["size"][i]), int(ev["stream"][i])))
            block[i] = b
    t_ns = ev["t_ns"].astype(np.int64)
    cols = {
        "tick": (ev["tick"].astype(np.int64) - k0),
        "t_ns": t_ns,
        "kind": kinds,
        "block": block,
        "size": np.where(kinds == EventKind.MARK, 0, ev["size"].astype(np.int64)),
        "stream": ev["stream"].astype(np.int64),
        "device": ev["device"].astype(np.int16),
    }
    if pre:
        m = len(pre)
        head = {
            "tick": np.zeros(m, np.int64),
            "t_ns": np.full(m, t_ns[0] if n else 0, np.int64),
            "kind": np.full(m, EventKind.ALLOC, np.uint8),
            "block": np.array([p[0] for p in pre], np.int64),
            "size": np.array([p[1] for p in pre], np.int64),
            "stream": np.array([p[2] for p in pre], np.int64),
            "device": np.zeros(m, np.int16),
        }
        cols = {c: np.concatenate([head[c], cols[c]]) for c in cols}
        # block ids in the order of the ALLOC rows (the synthetic ones come first), so a
        # block id is also the block's allocation ordinal in the trace
        is_alloc = cols["kind"] == EventKind.ALLOC
        old = cols["block"][is_alloc]
        new_of = np.empty(len(block_addr), np.int64)
        new_of[old] = np.arange(len(old))
        blk = cols["block"].copy()
        blk[blk >= 0] = new_of[blk[blk >= 0]]
        cols["block"] = blk
        reordered = np.empty(len(block_addr), np.uint64)
        reordered[new_of] = np.asarray(block_addr, np.uint64)
        block_addr = list(reordered)
    info = {"source": "uvm_sched.native", "first_tick": k0, "blocks_before_window": len(pre)}
    info.update(meta or {})
    trace = Trace({c: np.asarray(v, COLUMNS[c]) for c, v in cols.items()}, meta=info)
    if return_addresses:
        return trace, np.asarray(block_addr, np.uint64)
    return trace
