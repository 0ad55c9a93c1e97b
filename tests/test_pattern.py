"""Pattern analysis on synthetic traces with known structure: period, iterations, block
identity (ordinals), persistent blocks, classes, idle gaps, markers checked, noise."""
from __future__ import annotations

import numpy as np
import pytest

from uvm_sched.pattern import CLASSES, Pattern, PatternError, analyze
from uvm_sched.pattern._synth import training_trace
from uvm_sched.trace import EventKind, Trace, TraceBuilder

ALLOC, FREE, MARK = EventKind.ALLOC, EventKind.FREE, EventKind.MARK


def strip_marks(tr: Trace) -> Trace:
    keep = tr.kind != MARK
    return Trace({k: v[keep] for k, v in tr.columns.items()}, tick_ns=tr.tick_ns, meta=tr.meta)


def marker_counts(tr: Trace) -> np.ndarray:
    """Allocator events between consecutive MARKs (the last one: to the end)."""
    ev = (tr.kind == ALLOC) | (tr.kind == FREE)
    ticks = tr.tick[ev]
    starts = np.searchsorted(ticks, tr.iteration_starts)
    return np.diff(np.append(starts, len(ticks)))


def steady_period(**kw) -> int:
    """Events per iteration, counted from markers on the same trace (independent of analyze)."""
    c = marker_counts(training_trace(markers=True, **kw))
    assert len(set(c[1:].tolist())) == 1
    return int(c[1])


# -- period ---------------------------------------------------------------------------------
@pytest.mark.parametrize("layers", [1, 4, 9])
def test_clean_trace_period_is_events_per_iteration(layers):
    p = analyze(training_trace(layers=layers, iters=5))
    assert p.source == "learned"
    assert p.period_events == steady_period(layers=layers, iters=5)
    assert len(p.iterations) == 5
    assert len(p.events) == p.period_events
    assert len(p.alloc_sizes) == int((p.events["kind"] == "alloc").sum())
    assert p.regularity >= 0.8  # the last iteration lacks the next zero_grad's frees


def test_learned_period_not_fooled_by_identical_layers():
    # 24 layers of one width: the forward pass repeats every layer, but activations pile
    # up there (unbalanced), so the layer is not taken for the iteration.
    kw = dict(layers=24, iters=3, width=512)
    p = analyze(training_trace(**kw))
    assert p.period_events == steady_period(**kw)


def test_very_deep_net_period_found_where_layer_multiples_match_everywhere():
    # 10,000 layers: the lags that are multiples of the layer pattern (60 events) match
    # almost every position, far more lags than the plain-token ranking keeps; the
    # live-bytes tokens must still bring the iteration's lag forward.
    kw = dict(layers=10_000, iters=3, accesses=False)
    p = analyze(training_trace(**kw))
    assert p.period_events == steady_period(**kw)
    assert len(p.iterations) == 3


def test_iterations_are_disjoint_tick_ranges_in_order():
    p = analyze(training_trace(iters=6))
    its = p.iterations
    assert all(a < b for a, b in its)
    assert all(its[i][1] <= its[i + 1][0] for i in range(len(its) - 1))
    assert (p.start_tick, p.stop_tick) == its[p.rep]
    assert len(p.tick_ns) == p.stop_tick - p.start_tick


def test_no_repetition_whole_trace_is_one_iteration():
    tr = training_trace(iters=1)
    p = analyze(tr)
    n_events = int(np.sum((tr.kind == ALLOC) | (tr.kind == FREE)))
    assert p.period_events == n_events
    assert p.iterations == [(0, tr.n_ticks)]
    assert p.rep == 0 and p.source == "learned"
    assert any("one iteration" in n for n in p.notes)
    # weights, Adam state and the weight gradients are never freed: they outlive the
    # (only) iteration
    assert p.blocks["persistent"].sum() == 4 * 3 + 4


def test_random_balanced_iteration_repeated_is_found():
    rng = np.random.default_rng(7)
    for trial in range(20):
        tb = TraceBuilder()
        for _ in range(rng.integers(0, 5)):  # prologue: persistent blocks
            tb.alloc(int(rng.integers(1, 50)) * 4096)
        n_ops = int(rng.integers(3, 40))
        sizes = rng.integers(1, 30, size=n_ops) * 512
        frees_after = rng.integers(0, n_ops, size=n_ops)
        for _ in range(int(rng.integers(3, 8))):
            live = []
            for i in range(n_ops):
                live.append((max(i, int(frees_after[i])), tb.alloc(int(sizes[i]))))
                for when, b in [x for x in live if x[0] == i]:
                    tb.free(b)
                live = [x for x in live if x[0] != i]
                tb.next_tick(100.0)
        tr = tb.build()
        p = analyze(tr)
        # the smallest period of the repeated string (it may be shorter than n_ops*2 when
        # the random iteration is itself periodic, so compare with the brute force)
        expected = brute_force_period(tr, 2 * n_ops)
        assert p.period_events == expected, (trial, p.notes)


def brute_force_period(tr: Trace, iteration_events: int) -> int:
    ev = (tr.kind == ALLOC) | (tr.kind == FREE)
    tok = list(zip(tr.kind[ev].tolist(), tr.size[ev].tolist()))
    body = tok[len(tok) - iteration_events:]
    for q in range(1, iteration_events + 1):
        if iteration_events % q == 0 and body == body[:q] * (iteration_events // q):
            return q
    raise AssertionError


# -- noise --------------------------------------------------------------------------------
def test_different_last_batch_keeps_the_period_and_a_steady_representative():
    p = analyze(training_trace(iters=5, last_batch=3))
    assert p.period_events == steady_period(iters=5)
    assert len(p.iterations) == 5
    assert not p.identical[-1] and p.identical[p.rep]
    assert p.rep == 3
    # batch-sized blocks change size in 1 iteration of 5; weight-sized ones do not
    b = p.blocks[~p.blocks["persistent"]]
    batchy = (b["size"] < (1 << 20)) & (b["size"] != 512)  # 512: the loss, batch-free
    assert np.allclose(b.loc[batchy, "stability"], 0.8)
    assert np.allclose(b.loc[~batchy, "stability"], 1.0)


def test_eval_pass_between_iterations():
    p = analyze(training_trace(iters=5, eval_after={1}))
    assert p.period_events == steady_period(iters=5)
    assert len(p.iterations) == 5
    # the iteration holding the eval pass is longer and differs; the representative does not
    assert not p.identical[1] and p.identical[p.rep]
    assert p.iteration_events[1][1] - p.iteration_events[1][0] > p.period_events


def test_warmup_iteration_allocating_adam_state():
    kw = dict(iters=4, warmup_adam=True)
    tr = training_trace(**kw)
    p = analyze(tr)
    assert p.period_events == steady_period(**kw)
    assert not p.identical[0]  # the warm-up also allocates m, v
    assert p.rep >= 1
    # Adam state: allocated in iteration 0, persistent, named by its ALLOC ordinal in the trace
    allocs = tr.block[tr.kind == ALLOC]
    pers = p.blocks[p.blocks["persistent"]]
    assert len(pers) == 4 * 3
    for blk, row in pers.iterrows():
        assert row["ordinal"] == int(np.flatnonzero(allocs == blk)[0])
        assert row["cls"] == "persistent"
        assert row["alloc_tick"] == -1 and row["free_tick"] == -1


def test_leaking_a_small_tensor_per_iteration():
    # a loop that keeps every loss: live bytes creep up by 512 B per iteration
    p = analyze(training_trace(iters=5, leak=True))
    assert p.period_events == steady_period(iters=5, leak=True)
    assert len(p.iterations) == 5
    kept = p.blocks[(p.blocks["size"] == 512) & (p.blocks["alloc_event"] >= 0)]
    assert len(kept) == 1 and kept["persistent"].all()  # never freed, like its predecessors


# -- markers --------------------------------------------------------------------------------
def test_markers_that_agree_are_used():
    tr = training_trace(iters=4, markers=True)
    p = analyze(tr)
    assert p.source == "markers"
    assert [a for a, _ in p.iterations] == tr.iteration_starts.tolist()
    assert p.period_events == analyze(strip_marks(tr)).period_events


def test_a_marker_after_the_last_event_starts_an_iteration_not_seen_yet():
    """A runtime learns right at a marker: the trace then ends with a MARK that no
    allocator event follows. It delimits nothing and must not make the markers look
    irregular (3 iterations of N events and one of 0)."""
    tr = training_trace(iters=4, markers=True)
    cols = tr.columns
    last = {k: v[-1:].copy() for k, v in cols.items()}  # one more row: a MARK one tick on
    last["kind"][:] = MARK
    last["tick"][:] = tr.n_ticks
    t2 = Trace({k: np.concatenate([v, last[k]]) for k, v in cols.items()},
               tick_ns=np.append(tr.tick_ns, 1000.0), meta=tr.meta)
    assert len(t2.iteration_starts) == len(tr.iteration_starts) + 1
    p = analyze(t2)
    assert p.source == "markers", p.notes
    assert [a for a, _ in p.iterations] == tr.iteration_starts.tolist()


def test_markers_every_two_iterations_are_the_iterations():
    # markers are ground truth: a marker every other step makes two-step iterations
    tr = training_trace(iters=6, markers=True, marker_iters={0, 2, 4})
    p = analyze(tr)
    assert p.source == "markers"
    assert [a for a, _ in p.iterations] == tr.iteration_starts.tolist()
    assert p.period_events == 2 * steady_period(iters=6)


def test_irregular_markers_are_kept_and_their_kinds_reported():
    tr = training_trace(iters=6, markers=True, marker_iters={0, 1, 3, 4})
    p = analyze(tr)
    assert p.source == "markers"
    assert len(p.iterations) == 4
    counts = marker_counts(tr)
    # spans of 1, 2, 1, 2 steps: two kinds, each named with its event count
    assert sorted({kd["events"] for kd in p.kinds}) == sorted(set(counts.tolist()))
    assert any("differ from the representative" in n for n in p.notes)


def test_markers_used_when_nothing_repeats():
    # two iterations, the first a warm-up: no two equal copies, the markers still hold
    tr = training_trace(iters=2, markers=True, warmup_adam=True)
    p = analyze(tr)
    assert p.source == "markers"
    assert p.rep == 1
    assert p.period_events == marker_counts(tr)[1]
    first = [kd for kd in p.kinds if kd["iterations"] == [0]]
    assert first and first[0]["label"] == "first (warm-up?)"
    assert first[0]["delta_events"] == marker_counts(tr)[0] - marker_counts(tr)[1]


def test_gradients_freed_after_the_marker_are_carried_blocks():
    # markers precede zero_grad: last iteration's weight gradients are freed inside this one
    p = analyze(training_trace(iters=4, markers=True))
    b = p.blocks
    carried = b[(b["alloc_event"] < 0) & (b["free_event"] >= 0)]
    assert len(carried) == 4
    assert not carried["persistent"].any()
    own = b[(b["alloc_event"] >= 0) & (b["free_event"] < 0) & ~b["persistent"]]
    # the same ordinals, allocated again in this iteration and freed in the next
    assert sorted(carried["ordinal"]) == sorted(own["ordinal"])
    assert sorted(carried["size"]) == sorted(own["size"])


# -- block identity --------------------------------------------------------------------------
def test_ordinals_follow_the_plan_convention():
    tr = training_trace(iters=5)
    p = analyze(tr)
    ev = p.events
    assert ev["event"].tolist() == list(range(p.period_events))
    allocs = ev[ev["kind"] == "alloc"]
    assert (allocs["ordinal"].to_numpy() == np.arange(len(allocs))).all()
    assert not allocs["persistent"].any()
    # the frees name the ordinal of their block's alloc
    by_block = dict(zip(allocs["block"], allocs["ordinal"]))
    frees = ev[(ev["kind"] == "free") & ev["block"].isin(list(by_block))]
    assert (frees["ordinal"] == frees["block"].map(by_block)).all()
    # events agree with the trace rows of the representative iteration
    rows = ((tr.kind == ALLOC) | (tr.kind == FREE)) & (tr.tick >= p.start_tick) & (tr.tick < p.stop_tick)
    assert ev["block"].tolist() == tr.block[rows].tolist()
    assert (ev["tick"] + p.start_tick).tolist() == tr.tick[rows].tolist()
    # blocks table agrees with events
    b = p.blocks
    loc = b[b["alloc_event"] >= 0]
    assert (ev.loc[loc["alloc_event"], "block"].to_numpy() == loc.index.to_numpy()).all()


def test_persistent_blocks_are_weights_and_optimizer_state():
    tr = training_trace(layers=3, iters=4)
    p = analyze(tr)
    first_allocs = tr.block[tr.kind == ALLOC][: 3 * 3]  # 3 weights, then m and v of each
    pers = p.blocks.index[p.blocks["persistent"]]
    assert sorted(pers) == sorted(first_allocs.tolist())
    assert (p.blocks.loc[pers, "ordinal"] == np.arange(9)).all()
    assert (p.blocks.loc[pers, "stability"] == 1.0).all()


def test_classes():
    p = analyze(training_trace(layers=4, iters=4))
    b = p.blocks
    assert set(b["cls"].astype(str)) <= set(CLASSES)
    ws = b[b["size"] == (1 << 20)]
    assert (ws["cls"] == "workspace").all() and len(ws) == 4
    assert (b.loc[b["persistent"], "cls"] == "persistent").all()
    # forward outputs live across the forward/backward turn: activations
    loc = b[~b["persistent"] & (b["alloc_event"] >= 0)]
    live_at_turn = loc[(loc["lifetime_ticks"] > 1) & (loc["free_tick"] > loc["alloc_tick"] + 5)]
    assert (live_at_turn["cls"] == "activation").all()
    # temporaries freed a tick after their alloc and used in both ticks: transient (not
    # workspace, which is used by one kernel only)
    tmp = loc[(loc["lifetime_ticks"] == 1) & (loc["access_ticks"].map(len) == 2)]
    assert len(tmp) and (tmp["cls"] == "transient").all()


def test_access_ticks_and_idle_gaps():
    p = analyze(training_trace(layers=4, iters=4))
    b = p.blocks
    T = p.stop_tick - p.start_tick
    for blk, r in b.iterrows():
        ticks = r["access_ticks"]
        assert ticks == tuple(sorted(set(ticks)))
        if not ticks:
            continue
        assert r["first_access_tick"] == ticks[0] and r["last_access_tick"] == ticks[-1]
        lo = r["alloc_tick"] if r["alloc_tick"] >= 0 else 0
        hi = r["free_tick"] if r["free_tick"] >= 0 else T - 1
        gaps = [b2 - a2 - 1 for a2, b2 in zip(ticks, ticks[1:])]
        if r["persistent"]:
            gaps.append(ticks[0] + T - 1 - ticks[-1])
        else:
            gaps += [ticks[0] - lo, hi - ticks[-1]]
        assert r["max_idle_ticks"] == max(gaps), blk
        assert r["idle_from"] == "access"
    # tick time is 1000 ns everywhere in the synthetic trace
    assert np.allclose(b["max_idle_ms"], b["max_idle_ticks"] * 1e-3)


def test_without_accesses_idle_is_the_lifetime_view():
    p = analyze(training_trace(iters=4, accesses=False))
    b = p.blocks
    assert b["access_ticks"].isna().all()
    assert (b["first_access_tick"] == -1).all()
    assert (b["idle_from"] == "lifetime").all()
    loc = b[(b["alloc_tick"] >= 0) & (b["free_tick"] >= 0)]
    assert (loc["max_idle_ticks"] == loc["free_tick"] - loc["alloc_tick"]).all()
    assert p.summary()["idle_from"] == "lifetime"


def test_tick_time_estimated_from_t_ns_when_unknown():
    tb = TraceBuilder()
    t = 0
    w = tb.alloc(4096, t_ns=t)
    for it in range(4):
        for d, size in ((10, 512), (30, 1024), (20, 2048)):
            t += 5
            b = tb.alloc(size, t_ns=t)
            tb.free(b, t_ns=t + 1)
            tb.next_tick()  # unknown device time
            t += d
    tb.free(w, t_ns=t)
    p = analyze(tb.build())
    assert p.period_events == 6
    assert p.tick_ns_source == "t_ns"
    assert np.isfinite(p.tick_ns).all()
    # first rows of consecutive ticks are 5 + d apart
    assert set(np.round(p.tick_ns).astype(int)) <= {15, 35, 25}


def test_no_timing_stays_unknown():
    tb = TraceBuilder()
    for _ in range(3):
        b = tb.alloc(512)
        tb.free(b)
        tb.next_tick()
    p = analyze(tb.build())
    assert p.tick_ns_source == "unknown" and np.isnan(p.tick_ns).all()
    assert np.isnan(p.summary()["lifetime_ms"]["p50"])


# -- summary ----------------------------------------------------------------------------------
def test_summary_and_str():
    p = analyze(training_trace(iters=5, last_batch=2))
    s = p.summary()
    assert s["period_events"] == p.period_events and s["iterations"] == 5
    assert abs(sum(s["share_by_class"].values()) - 1) < 1e-9
    assert sum(s["bytes_by_class"].values()) == int(p.blocks["size"].sum())
    assert s["regularity"] == pytest.approx(0.8)
    assert s["lifetime_ticks"]["p50"] <= s["lifetime_ticks"]["p90"] <= s["lifetime_ticks"]["p100"]
    text = str(p)
    for word in ("period", "regularity", "persistent", "activation", "lifetime", "idle"):
        assert word in text
    assert isinstance(p, Pattern) and "Pattern" in repr(p)


def test_no_allocations_is_an_error():
    tb = TraceBuilder(name="empty")
    tb.mark()
    tb.next_tick()
    with pytest.raises(PatternError, match="no allocations"):
        analyze(tb.build())
    with pytest.raises(PatternError, match="Trace"):
        analyze([1, 2, 3])
