"""planner._known_view (Note [The samples' view]): a plan made from given samples is priced
on the allocator events with the samples' touches, not on views that hold none of them."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from uvm_sched import pattern, planner
from uvm_sched.planner._known_view import known_view
from uvm_sched.trace import AccessMode as M, EventKind, TraceBuilder

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def _loop(iters: int = 3):
    """W persistent, read at ticks 0, 3, 5 of each 6-tick iteration; activation a alive
    ticks 0..4 (freed at 4), touched at 0 and 2."""
    tb = TraceBuilder(name="kv")
    W = tb.alloc(4 << 20)
    tb.access(W, M.WRITE)
    tb.next_tick(1000.0)
    for _ in range(iters):
        tb.mark()
        a = tb.alloc(8 << 20)
        tb.access(a, M.WRITE)
        tb.access(W, M.READ)
        tb.next_tick(1e5)  # 0
        tb.next_tick(1e5)  # 1
        tb.access(a, M.READ)
        tb.next_tick(1e5)  # 2
        tb.access(W, M.READ)
        tb.next_tick(1e5)  # 3
        tb.free(a)
        tb.next_tick(1e5)  # 4
        tb.access(W, M.READ_WRITE)
        tb.next_tick(1e5)  # 5
    t = tb.build()
    return t, pattern.analyze(t)


def _acc(view, block: int) -> list[int]:
    m = (view.kind == EventKind.ACCESS) & (view.block == block)
    return sorted(view.tick[m].tolist())


def test_the_view_holds_the_sampled_touches_in_every_iteration_and_the_model_elsewhere():
    t, p = _loop()
    starts = [int(s) for s, _ in p.iterations]
    W = 0
    smp = pd.DataFrame({"block": [0, 0], "persistent": True, "tick": [3, 5]})
    v = known_view(t, p, smp)
    assert v.meta["samples_view"] and v.meta["allocator_only"]
    # W: its write at its ALLOC (before the iterations), then the samples in each iteration
    # (the truth's tick-0 read is not sampled: not in the view)
    assert _acc(v, W) == [0] + [s + k for s in starts for k in (3, 5)]
    # the activations are not sampled: written at their ALLOC, read at their FREE
    bt = t.block_table()
    for b, r in bt[bt.index != W].iterrows():
        assert _acc(v, b) == [r["alloc_tick"], r["free_tick"]]
    # an open list's tail (assumed rows) is one read in it, not a touch per tick
    tail = pd.DataFrame({"block": 0, "persistent": True, "tick": [3, 4, 5],
                         "assumed": [False, True, True]})
    assert _acc(known_view(t, p, tail), W) == [0] + [s + k for s in starts for k in (3, 4)]
    # summary form: no such view (a touch per tick of the busy stretch)
    assert known_view(t, p, pd.DataFrame({"block": [0], "persistent": True, "first_touch": 0,
                                          "last_touch": 5})) is None


def test_a_plan_from_given_samples_is_priced_on_their_touches():
    import _persistent_workloads as wl

    t = wl.persistent_trace(name="kv", layers=2, hidden=256, seq=128, vocab=4096,
                            micro_batches=2, iters=3)
    p = pattern.analyze(t)
    budget = int(t.peak_bytes * 0.3)
    drawn = planner.plan(t, budget, "h200-pcie5", mode="sampled", pattern=p)
    given = planner.plan(t, budget, "h200-pcie5", mode="sampled", pattern=p,
                         samples=planner.draw_samples(t, p))
    a, b = drawn.meta["pricing"], given.meta["pricing"]
    assert b["judge"] == "simulator on the allocator events with the given samples' touches"
    # every touch given: demand paging costs in the view what it costs on the trace (the
    # allocator events alone showed it 180x cheaper, so the plan was priced a tie with it)
    assert b["none_s"] == pytest.approx(a["none_s"], rel=1e-9)
    # drawn samples also price the oblivious plan (Note [The oblivious plan as a
    # candidate], and it without its populates that move nothing), given ones do not:
    # both act, neither falls back to advice alone or to not acting
    assert b["chosen"] == "plan"
    assert a["chosen"] == "plan" or a["chosen"].startswith("oblivious"), a["chosen"]
    assert "advice-only" not in a["chosen"] and "none" != a["chosen"]
    assert b["plan_s"] < 0.5 * b["none_s"]
    assert np.isfinite([b["plan_s"], b["advice-only_s"]]).all()
