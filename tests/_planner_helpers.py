"""Test helpers for the planner: hand-made iterations with known answers.

``one_iteration(trace)`` describes a trace that *is* one iteration (no period to find) in
the shape ``pattern.analyze`` returns, so unit cases can pin the planner alone.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from uvm_sched.hw import load_profile
from uvm_sched.trace import AccessMode, EventKind


@dataclasses.dataclass
class OneIteration:
    events: pd.DataFrame
    blocks: pd.DataFrame
    tick_ns: np.ndarray
    start_tick: int
    stop_tick: int
    period_events: int
    source: str = "learned"
    rep: int = 0

    @property
    def iterations(self):
        return [(self.start_tick, self.stop_tick)]


def one_iteration(trace) -> OneIteration:
    k = trace.kind
    rows = np.flatnonzero((k == EventKind.ALLOC) | (k == EventKind.FREE))
    bt = trace.block_table()
    alloc_rows = np.flatnonzero(k == EventKind.ALLOC)
    ordinal = pd.Series(np.arange(len(alloc_rows)), index=trace.block[alloc_rows])
    persistent = bt["free_tick"] < 0
    ev = pd.DataFrame({
        "event": np.arange(len(rows)),
        "kind": np.where(k[rows] == EventKind.ALLOC, "alloc", "free"),
        "tick": trace.tick[rows],
        "block": trace.block[rows],
    })
    ev["ordinal"] = ordinal.loc[ev["block"]].to_numpy()
    ev["persistent"] = persistent.loc[ev["block"]].to_numpy()
    ev["size"] = trace.size[rows]
    ev_of_row = pd.Series(np.arange(len(rows)), index=rows)
    blocks = pd.DataFrame({
        "ordinal": ordinal.loc[bt.index].to_numpy(),
        "persistent": persistent.to_numpy(),
        "size": bt["size"].to_numpy(),
        "cls": np.where(persistent, "persistent", "activation"),
        "alloc_tick": bt["alloc_tick"].to_numpy(),
        "free_tick": bt["free_tick"].to_numpy(),
        "alloc_event": ev_of_row.loc[bt["alloc_row"]].to_numpy(),
        "free_event": [int(ev_of_row.loc[r]) if r >= 0 else -1 for r in bt["free_row"]],
    }, index=bt.index)
    n = trace.n_ticks
    return OneIteration(ev, blocks, np.asarray(trace.tick_ns, float), 0, n, len(rows))


def a_and_b(n_ticks: int, b_from: int, b_to: int, *, reads=(), name: str = "a-and-b",
            mark: bool = False, written_first: bool = False):
    """A hand-made iteration: A (4000 B) lives all ``n_ticks`` ticks and is read at ticks 0
    and n-1 and at each of ``reads`` (``written_first``: written, not read, at tick 0, so its
    eviction is a write-back); B (4000 B) lives and is used at ``b_from..b_to``, so under a
    5000-byte budget A must be away over B's life. A 1-byte block allocated and freed at
    every tick but the first gives the runtime a control point there. ``mark``: a marker
    first (the simulator then measures the whole trace as one iteration)."""
    from uvm_sched.trace import AccessMode, TraceBuilder

    tb = TraceBuilder(name=name)
    if mark:
        tb.mark()
    A = tb.alloc(4000)
    B = None
    for t in range(n_ticks):
        x = tb.alloc(1) if t > 0 else None
        if t == b_from:
            B = tb.alloc(4000)
        if t == 0 and written_first:
            tb.access(A, AccessMode.WRITE)
        elif t in (0, n_ticks - 1) or t in reads:
            tb.access(A, AccessMode.READ)
        if b_from <= t <= b_to:
            tb.access(B, AccessMode.READ_WRITE)
        if t == b_to:
            tb.free(B)
        if t == n_ticks - 1:
            tb.free(A)
        if x is not None:
            tb.free(x)
        tb.next_tick(1000.0)
    return tb.build()


def slow_link(bytes_per_s: float = 1e9, name: str = "h200-pcie5"):
    """The shipped profile with every link bandwidth set to ``bytes_per_s`` and calls that
    cost next to nothing (1 ps: the cases' ticks are microseconds, where the assumed 5 us
    per prefetch/advise call would make the host, not the link, the subject)."""
    p = load_profile(name)
    return dataclasses.replace(p, h2d_prefetch_Bps=bytes_per_s, d2h_prefetch_Bps=bytes_per_s,
                               h2d_fault_Bps=bytes_per_s / 4, d2h_evict_Bps=bytes_per_s / 2,
                               remote_access_Bps=bytes_per_s / 2, action_call_s=1e-12)


def training_trace(iters: int = 4, layers: int = 6, act: int = 8 << 20, weight: int = 4 << 20,
                   tick_ns: float = 200_000.0, batch_scale: float = 1.0, accesses: bool = True):
    """A small training loop as a trace with MARKs and ground-truth accesses: weights and
    Adam-like state (persistent), forward activations kept for backward, gradients."""
    from uvm_sched.trace import AccessMode, TraceBuilder

    tb = TraceBuilder(name="mini-train")
    a_sz = int(act * batch_scale)
    W = [tb.alloc(weight) for _ in range(layers)]
    M = [tb.alloc(weight) for _ in range(layers)]
    tb.next_tick(1000.0)
    for _ in range(iters):
        tb.mark()
        acts = []
        x = tb.alloc(a_sz)
        if accesses:
            tb.access(x, AccessMode.WRITE)
        tb.next_tick(tick_ns)
        prev = x
        for i in range(layers):  # forward
            y = tb.alloc(a_sz)
            tmp = tb.alloc(a_sz // 4)
            if accesses:
                tb.access(prev, AccessMode.READ)
                tb.access(W[i], AccessMode.READ)
                tb.access(tmp, AccessMode.READ_WRITE)
                tb.access(y, AccessMode.WRITE)
            tb.free(tmp)
            tb.next_tick(tick_ns)
            acts.append(prev)
            prev = y
        g = tb.alloc(a_sz)
        if accesses:
            tb.access(prev, AccessMode.READ)
            tb.access(g, AccessMode.WRITE)
        tb.free(prev)
        tb.next_tick(tick_ns)
        grads = []
        for i in reversed(range(layers)):  # backward
            gw = tb.alloc(weight)
            g2 = tb.alloc(a_sz)
            if accesses:
                tb.access(acts[i], AccessMode.READ)
                tb.access(W[i], AccessMode.READ)
                tb.access(g, AccessMode.READ)
                tb.access(gw, AccessMode.WRITE)
                tb.access(g2, AccessMode.WRITE)
            tb.free(acts[i])
            tb.free(g)
            tb.next_tick(tick_ns)
            g = g2
            grads.append((i, gw))
        tb.free(g)
        for i, gw in grads:  # optimizer step
            if accesses:
                tb.access(W[i], AccessMode.READ_WRITE)
                tb.access(M[i], AccessMode.READ_WRITE)
                tb.access(gw, AccessMode.READ)
            tb.free(gw)
            tb.next_tick(tick_ns / 10)
    return tb.build()


def tiny_trace(path, unit: int = 1024):
    """A hand-made 3-iteration trace saved to ``path`` (no recorder needed): one persistent
    block of 4 ``unit`` bytes, and per iteration an activation of 8 units freed mid-way and
    one of 16 freed at its end, with MARKs and accesses. Returns ``path``."""
    from uvm_sched.trace import TraceBuilder

    b = TraceBuilder(source="test", name="tiny")
    w = b.alloc(4 * unit)
    for _ in range(3):
        b.mark()
        x = b.alloc(8 * unit)
        b.access(w)
        b.access(x)
        b.next_tick(1000.0)
        y = b.alloc(16 * unit)
        b.access(x)
        b.access(y)
        b.free(x)
        b.next_tick(2000.0)
        b.access(y)
        b.free(y)
        b.next_tick(500.0)
    b.build().save(path)
    return path


def host_backend():
    """A fresh native allocator on the host backend for one test (skips where the library
    is not built), torn down (plan disarmed, blocks dropped) after it. Use as a fixture:
    ``host = pytest.fixture(host_backend)``."""
    import pytest

    native = pytest.importorskip("uvm_sched.native")
    try:
        native._reset("host", force=True)
    except native.UvmSchedError as e:  # pragma: no cover - library not built
        pytest.skip(f"native library unavailable: {e}")
    yield
    native.disarm()
    native._reset("host", force=True)


def plan_one_iteration(tr, mode: str, hw):
    """``tr`` planned as one iteration under a 5000-byte budget, unpriced and without
    populates (the hand-made cases' subject is the schedule): (plan, its OneIteration)."""
    from uvm_sched.planner import plan

    pat = one_iteration(tr)
    return plan(tr, 5000, hw=hw, pattern=pat, mode=mode, populate=False, guard="auto",
                price=False), pat


def block_action_ticks(p, pat, action: str, block: int = 0) -> list[int]:
    """The trace ticks of the allocator events ``block``'s ``action`` rows are issued at."""
    ev_tick = pat.events.set_index("event")["tick"]
    a = p.actions[(p.actions["action"] == action) & (p.actions["block"] == block)]
    return sorted(int(ev_tick.loc[k]) for k in a["tick"])


def written_before_the_loop(tb, *sizes: int, tick_ns: float) -> list:
    """Blocks of ``sizes`` (bytes) allocated on the ``TraceBuilder`` and written whole
    before its first MARK, then one tick of ``tick_ns`` ns: weights as a warm-up leaves
    them (persistent, resident)."""
    blocks = [tb.alloc(n) for n in sizes]
    for b in blocks:
        tb.access(b, AccessMode.WRITE)
    tb.next_tick(tick_ns)
    return blocks


def pool_shortfalls(prob, discarded, passes: int = 3) -> dict:
    """Bytes each ALLOC event of ``prob``'s iteration comes up short in the pool's
    first-in first-out byte queue, replayed apart from the planner (Note [Discards the
    pool needs], planner/_populates.py): a FREE adds its block's size unless ``discarded``
    ((n,) bool) names it, an ALLOC takes up to its size; ``{event: bytes}`` of the last of
    ``passes`` passes over the iteration (each starts from the queue the one before left)."""
    owner = {}
    for b, (a, f) in enumerate(zip(prob.alloc_event.tolist(), prob.free_event.tolist())):
        if a >= 0:
            owner[a] = b
        if f >= 0:
            owner[f] = b
    queued, short = 0, {}
    for _ in range(passes):
        for e in range(prob.E):
            b = owner.get(e)
            if b is None:
                continue
            if prob.ev_free[e]:
                queued += 0 if discarded[b] else int(prob.size[b])
            else:
                take = min(int(prob.size[b]), queued)
                queued -= take
                short[e] = int(prob.size[b]) - take
    return short
