"""Note [A read per repeat] (``planner._pricing``): an iteration's inner loop found from the
allocator events alone, and a remote mapping left out where its twin without it is faster
once every repeat of that loop reads a remotely mapped block."""
from __future__ import annotations

import numpy as np
import pandas as pd

from uvm_sched import planner
from uvm_sched.pattern._period import repeat_starts
from uvm_sched.planner import Plan
from uvm_sched.planner._pricing import remote_refuted
from uvm_sched.trace import AccessMode, TraceBuilder, zoo

MiB = 1 << 20


def test_repeat_starts_finds_each_copy_of_the_inner_loop():
    # a prefix of distinct sizes, then 6 copies of (alloc 1 MiB, alloc 2 MiB, free 2 MiB):
    # a time step whose 1 MiB state piles up, then a suffix; one event per tick
    prefix = [(0, 5 * MiB), (0, 7 * MiB), (0, 11 * MiB)]
    step = [(0, 1 * MiB), (0, 2 * MiB), (1, 2 * MiB)]
    suffix = [(1, 11 * MiB), (1, 7 * MiB), (0, 13 * MiB)]
    ev = prefix + step * 6 + suffix
    kind = np.array([k for k, _ in ev], np.int8)
    size = np.array([s for _, s in ev], np.int64)
    tick = np.arange(len(ev), dtype=np.int64) + 100
    got = repeat_starts(kind, size, tick)
    assert got.tolist() == [100 + len(prefix) + 3 * i for i in range(6)]
    # no string repeats: no loop
    assert not len(repeat_starts(kind[:3], size[:3], tick[:3]))


def _rnn(steps_repeat: bool):
    """Three marked iterations of a recurrent-like loop: a persistent 8 MiB weight read at
    each of 16 steps, each step keeping a 1 MiB state (the same sizes every step where
    ``steps_repeat``, else a different size per step: no inner loop in the allocator
    events); the iteration frees the states at its end."""
    tb = TraceBuilder(name="rnn-like")
    w = tb.alloc(8 * MiB)
    tb.access(w, AccessMode.WRITE)
    tb.next_tick(1e5)
    for _ in range(3):
        tb.mark()
        states = []
        for s in range(16):
            h = tb.alloc(MiB if steps_repeat else MiB + 4096 * (s + 1))
            tb.access(w, AccessMode.READ)
            tb.access(h, AccessMode.WRITE)
            states.append(h)
            tb.next_tick(1e5)
        for h in states:
            tb.free(h)
        tb.next_tick(1e5)
    return tb.build()


def _candidates(trace):
    """The plan mapping the weight (the trace's ALLOC ordinal 0) host-resident, its advice
    alone (the same rows) and their twins without it (nothing)."""
    meta = planner.plan(trace, 64 * MiB, "h200-pcie5", mode="oblivious", price=False).meta
    rows = pd.DataFrame({"tick": [0, 0, 0], "action": ["advise_preferred_host",
                                                       "advise_accessed_by", "prefetch_to_host"],
                         "block": [0, 0, 0], "persistent": [True] * 3, "offset": [0] * 3,
                         "bytes": [8 * MiB] * 3})
    return {"plan": Plan(rows, dict(meta)), "advice-only": Plan(rows.copy(), dict(meta)),
            "local": Plan(rows.iloc[:0], dict(meta)),
            "local advice-only": Plan(rows.iloc[:0], dict(meta))}


TWINS = {"plan": "local", "advice-only": "local advice-only"}


def test_a_remote_mapping_read_in_every_time_step_is_left_out():
    bare = zoo.allocator_only(_rnn(steps_repeat=True))
    got = remote_refuted(bare, _candidates(bare), TWINS, 64 * MiB, _profile(), _starts(bare))
    assert set(got) == {"plan", "advice-only"}
    for t, t_twin in got.values():
        assert t > t_twin  # the weight crosses the link at each step; resident in the twin


def test_no_inner_loop_leaves_the_remote_mapping_to_the_other_views():
    bare = zoo.allocator_only(_rnn(steps_repeat=False))
    assert remote_refuted(bare, _candidates(bare), TWINS, 64 * MiB, _profile(),
                          _starts(bare)) == {}


def _starts(trace):
    from uvm_sched.pattern import analyze

    return [a for a, _ in analyze(trace).iterations]


def _profile():
    from uvm_sched.hw import load_profile

    return load_profile("h200-pcie5")
