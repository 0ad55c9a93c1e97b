"""Planner unit cases with known optimal answers (hand-made iterations, fast)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from uvm_sched.planner import Plan, PlanError, plan
from uvm_sched.trace import AccessMode, TraceBuilder

from _planner_helpers import one_iteration, slow_link

TICK_NS = 1000.0


def _two_blocks(b_from: int, b_to: int, *, n_ticks: int = 20, a_size: int = 4000,
                b_size: int = 4000):
    """Block A lives ticks 0..n-1 (used at its ends), block B lives ticks b_from..b_to;
    a 1-byte block allocated and freed at every other tick gives the runtime a control
    point at every tick."""
    tb = TraceBuilder(name="two-blocks")
    A = tb.alloc(a_size)
    B = None
    for t in range(n_ticks):
        if t > 0:
            x = tb.alloc(1)
        if t == b_from:
            B = tb.alloc(b_size)
        if t == b_to:
            tb.free(B)
        if t == n_ticks - 1:
            tb.free(A)
        if t > 0:
            tb.free(x)
        tb.next_tick(TICK_NS)
    return tb.build()


def _event_of(pat, kind: str, tick: int, size: int) -> int:
    ev = pat.events
    m = (ev["kind"] == kind) & (ev["tick"] == tick) & (ev["size"] == size)
    return int(ev.loc[m, "event"].iloc[0])


def _plan(trace, budget, bw, **kw):
    pat = one_iteration(trace)
    kw.setdefault("populate", False)  # the cases pin evictions/prefetches of idle gaps
    kw.setdefault("guard", 1)
    return plan(trace, budget, hw=slow_link(bw), pattern=pat, **kw), pat


def _planned_windows(p, pat, block: int = 0) -> list[tuple[int, int]]:
    """(eviction event, prefetch event) pairs of ``block`` in plan order."""
    a = p.actions[p.actions["block"] == block]
    out = a[a["action"] == "prefetch_to_host"]["tick"].tolist()
    back = a[a["action"] == "prefetch_to_device"]["tick"].tolist()
    return list(zip(out, back))


def _window_ticks(p, pat, block: int = 0) -> list[tuple[int, int]]:
    """The same pairs as trace ticks (of the allocator events they follow)."""
    ev_tick = pat.events.set_index("event")["tick"]
    return [(int(ev_tick.loc[a]), int(ev_tick.loc[b])) for a, b in _planned_windows(p, pat, block)]


def test_one_gap_evicts_after_last_use_and_prefetches_just_in_time():
    tr = _two_blocks(8, 10)
    p, pat = _plan(tr, 5000, 4e9)  # 4000 B take exactly one tick each way
    acts = p.actions
    assert list(acts["action"]) == ["prefetch_to_host", "prefetch_to_device"]
    assert (acts["block"] == 0).all() and not acts["persistent"].any()
    # A's uses (guard 1): ticks 0,1 and 18,19. The first control point after tick 1 is
    # queued is the 1-byte free of tick 1; the prefetch (1 tick) must start by tick 17.
    assert int(acts["tick"].iloc[0]) == _event_of(pat, "free", 1, 1)
    assert int(acts["tick"].iloc[1]) == _event_of(pat, "alloc", 17, 1)
    pred = p.meta["predicted"]
    assert pred["stall_s"] == 0 and pred["over_budget_ticks"] == 0
    assert pred["peak_resident_bytes"] <= 5000


def test_bandwidth_exactly_enough_has_no_stall():
    # 1 GB/s: eviction done at tick 6, prefetch must start at tick 14: B at 6..13 fits.
    tr = _two_blocks(6, 13)
    p, _ = _plan(tr, 5000, 1e9)
    pred = p.meta["predicted"]
    assert pred["over_budget_ticks"] == 0 and pred["stall_s"] == 0


def test_bandwidth_one_tick_short_costs_exactly_one_tick():
    # B one tick longer: the only way to stay in budget is a prefetch issued after B's
    # free (tick 14), finishing 1 us after A's next use would want it.
    tr = _two_blocks(6, 14)
    p, pat = _plan(tr, 5000, 1e9)
    pred = p.meta["predicted"]
    assert pred["over_budget_ticks"] == 0
    assert pred["stall_s"] == pytest.approx(1e-6)
    pf = p.actions[p.actions["action"] == "prefetch_to_device"]
    # issued at the last control point that orders it after kernel 14 (the allocation
    # before kernel 15), so that B's free and every release there comes first
    assert int(pf["tick"].iloc[0]) == _event_of(pat, "alloc", 15, 1)
    assert int(pf["tick"].iloc[0]) > _event_of(pat, "free", 14, 4000)


def test_no_eviction_when_everything_fits():
    tr = _two_blocks(8, 10)
    p, _ = _plan(tr, 8100, 4e9)
    assert not p.actions["action"].isin(["prefetch_to_host", "prefetch_to_device"]).any()


def test_auto_guard_keeps_a_block_through_reads_up_to_32_ticks_after_its_allocation():
    # Oblivious mode cannot see a read 20-30 ops after an allocation (a CNN's skip or
    # concat input); the widest automatic guard is 32 ticks, so A (alive 0..199, pressure
    # from B at ticks 60..70) leaves only after tick 32 is queued, and comes back by 167.
    tr = _two_blocks(60, 70, n_ticks=200)
    p, pat = _plan(tr, 5000, 4e9, guard="auto")
    (evict, back), = _window_ticks(p, pat)
    assert 32 <= evict < 60 and 70 <= back < 167
    assert p.meta["guard"][0] == 32
    assert p.meta["predicted"]["over_budget_ticks"] == 0


def test_auto_guard_uses_16_ticks_on_a_block_living_fewer_than_six_wide_guards():
    # A lives 0..119 (< 6 x 32 ticks): the 32-tick guard would only shrink its window, so
    # the widest guard it gets is 16 -- it leaves once tick 16 is queued, before tick 32.
    tr = _two_blocks(60, 70, n_ticks=120)
    p, pat = _plan(tr, 5000, 4e9, guard="auto")
    (evict, back), = _window_ticks(p, pat)
    assert 16 <= evict < 32 and 70 <= back < 103


def test_infeasible_budget_names_the_tick_and_bytes():
    tr = _two_blocks(8, 10)
    with pytest.raises(PlanError, match=r"tick 8 .*4,001 bytes"):
        _plan(tr, 3999, 4e9)


def test_eviction_too_slow_for_the_budget_is_predicted_as_a_wait():
    # 0.25 GB/s: A's eviction (issued at tick 2, 16 us) lands at 18 us, but B needs the
    # room at tick 4 (4 us): the compute waits 14 us for it (rather than the driver
    # evicting something else), and the plan predicts exactly that wait.
    tr = _two_blocks(4, 6)
    p, _ = _plan(tr, 5000, 0.25e9)
    pred = p.meta["predicted"]
    assert pred["over_budget_ticks"] == 0
    assert pred["eviction_wait_s"] == pytest.approx(14e-6)


def test_discard_is_placed_at_the_free_event_of_large_blocks():
    tr = _two_blocks(8, 10, a_size=4 << 20, b_size=4 << 20)
    # the table as built: priced, it would be no plan (everything fits, the discards show
    # no gain in any view; planner/_pricing.py, Note [A tie acts less])
    p, pat = _plan(tr, 1 << 40, 50e9, price=False)
    d = p.actions[p.actions["action"] == "discard"]
    assert sorted(d["block"]) == [0, 9]  # A, and B after 8 tiny blocks (ticks 1..8)
    for _, r in d.iterrows():
        ev = pat.events[pat.events["event"] == r["tick"]].iloc[0]
        assert ev["kind"] == "free" and ev["ordinal"] == r["block"]


def test_populate_prefetches_every_allocation_at_its_alloc_event_first():
    tr = _two_blocks(8, 10)
    p, pat = _plan(tr, 5000, 4e9, populate=True)
    acts = p.actions
    pop = acts[(acts["action"] == "prefetch_to_device")]
    allocs = pat.events[pat.events["kind"] == "alloc"]
    # one per allocation, at its own event (plus A's planned prefetch back)
    assert set(zip(allocs["event"], allocs["ordinal"])) <= set(zip(pop["tick"], pop["block"]))
    assert len(pop) == len(allocs) + 1
    # at a tick holding both, the populate comes before the eviction
    for k, grp in acts.groupby("tick", sort=False):
        names = list(grp["action"])
        if "prefetch_to_host" in names and "prefetch_to_device" in names:
            assert names.index("prefetch_to_device") < names.index("prefetch_to_host")


def test_plan_round_trips_through_json_and_parquet(tmp_path):
    tr = _two_blocks(8, 10)
    p, _ = _plan(tr, 5000, 4e9)
    for name in ("p.json", "p.parquet"):
        p.save(tmp_path / name)
        q = Plan.load(tmp_path / name)
        pd.testing.assert_frame_equal(q.actions, p.actions)
        assert q.meta["alloc_sizes"] == p.meta["alloc_sizes"]
        assert q.meta["sync"] == "period" and q.meta["mode"] == "oblivious"


def _optimizer_state_trace():
    """Persistent W (weights: first tick to last) and S (optimizer state: touched by the
    step at the end only), plus activations that need the room in the middle."""
    tb = TraceBuilder(name="opt-state")
    W = tb.alloc(4000)
    S = tb.alloc(8000)
    tb.next_tick(TICK_NS)
    acts = []
    for t in range(1, 30):
        x = tb.alloc(1)
        if 5 <= t < 15:
            acts.append(tb.alloc(1000))
        if 15 <= t < 25 and acts:
            tb.free(acts.pop())
        tb.free(x)
        tb.next_tick(TICK_NS)
    return tb.build()


def test_sampled_mode_finds_the_optimizer_state_window():
    tr = _optimizer_state_trace()
    pat = one_iteration(tr)
    # make W and S persistent blocks allocated before the iteration
    samples = pd.DataFrame({"block": [0, 1], "persistent": [True, True],
                            "first_touch": [1, 28], "last_touch": [28, 28]})
    # price=False: the case pins the selection; at these byte sizes (blocks far below a
    # page) every plan simulates as slow as demand paging, so pricing may keep advice only
    p = plan(tr, 18000, hw=slow_link(8e9), pattern=pat, mode="sampled", samples=samples,
             populate=False, guard=1, price=False)
    moved = p.actions[p.actions["action"].isin(["prefetch_to_host", "prefetch_to_device"])]
    assert set(moved["block"]) == {1}  # the optimizer state, not the weights
    assert p.meta["predicted"]["over_budget_ticks"] == 0


def test_oblivious_mode_refuses_samples():
    tr = _two_blocks(8, 10)
    with pytest.raises(PlanError, match="sampled"):
        plan(tr, 5000, hw=slow_link(4e9), pattern=one_iteration(tr), mode="oblivious",
             samples=pd.DataFrame({"block": [0], "first_touch": [0], "last_touch": [1]}))


def test_auto_mode_is_sampled_with_samples_or_accesses_and_oblivious_without():
    from uvm_sched.planner import resolve_mode
    from uvm_sched.trace._llm import llm_trace

    tr = llm_trace(layers=1, micro_batches=1, hidden=64, seq=16, vocab=128, accesses=True)
    assert resolve_mode(tr) == ("sampled", "auto: sampled, the trace carries accesses")
    bare = _two_blocks(8, 10)  # allocator events only
    assert resolve_mode(bare, "auto", samples=pd.DataFrame()) == (
        "sampled", "auto: sampled, access samples were given")
    mode, why = resolve_mode(bare)
    assert mode == "oblivious" and why.startswith("auto: oblivious, no access source")
    assert resolve_mode(bare, "sampled") == ("sampled", "sampled, as requested")
    p = plan(bare, 5000, hw=slow_link(4e9), pattern=one_iteration(bare))
    assert (p.meta["mode"], p.meta["mode_requested"], p.meta["mode_reason"]) == (
        "oblivious", "auto", why)
    with pytest.raises(PlanError, match="unknown planning mode 'clairvoyant'; known: auto"):
        resolve_mode(bare, "clairvoyant")


def test_unknown_mode_and_option_are_rejected():
    tr = _two_blocks(8, 10)
    with pytest.raises(PlanError, match="unknown planning mode"):
        plan(tr, 5000, mode="psychic", pattern=one_iteration(tr))
    with pytest.raises(TypeError, match="unknown option"):
        plan(tr, 5000, pattern=one_iteration(tr), gaurd=2)


def test_a_plan_learned_without_markers_is_anchored_where_its_iteration_starts():
    """No MARKs: the plan syncs on the period, counted from the allocator event where the
    learned iteration starts (after the 12 weight/state allocations), so the simulator runs
    it without a single divergence."""
    import numpy as np

    from uvm_sched.sim import simulate
    from uvm_sched.trace import EventKind, Trace

    from _planner_helpers import training_trace

    tr = training_trace(iters=5)
    keep = tr.kind != EventKind.MARK
    bare = Trace({k: v[keep] for k, v in tr.columns.items()}, tick_ns=tr.tick_ns, meta=tr.meta)
    p = plan(bare, "50%", "h200-pcie5")
    assert p.meta["sync"] == "period"
    ev_ticks = bare.tick[bare.kind <= EventKind.FREE]
    assert p.meta["period_start_event"] % p.meta["period_events"] == 12 % p.meta["period_events"]
    assert np.all(ev_ticks[:12] == 0)
    assert simulate(bare, p, "h200-pcie5", "50%").divergences == 0


def test_touch_samples_keep_a_block_on_the_device_for_its_mid_lifetime_read():
    """A (ticks 0..19) is read at tick 10 too; B (4..15) needs the room. First/last touch
    says A is idle 1..18, so the plan sends it away across tick 10 (the read would fault);
    one row per touch shows the read, and the plan brings A back before tick 10 and sends
    it away again after it (two windows instead of one)."""
    tr = _two_blocks(4, 15)
    pat = one_iteration(tr)
    summary = pd.DataFrame({"block": [0], "first_touch": [0], "last_touch": [19]})
    touches = pd.DataFrame({"block": [0, 0, 0], "tick": [0, 10, 19]})
    kw = dict(hw=slow_link(4e9), pattern=pat, mode="sampled", populate=False, guard=1)
    blind = plan(tr, 5000, samples=summary, **kw)
    seeing = plan(tr, 5000, samples=touches, **kw)
    read_event = _event_of(pat, "alloc", 10, 1)  # the control point of tick 10
    (off, on), = _planned_windows(blind, pat, 0)
    assert off < read_event < on  # away across the read it cannot see
    windows = _planned_windows(seeing, pat, 0)
    assert len(windows) == 2
    assert windows[0][1] < read_event < windows[1][0]
    assert seeing.meta["predicted"]["over_budget_ticks"] == 0


def test_touch_samples_are_merged_over_iterations_and_checked():
    from uvm_sched.planner._sampling import merge_samples

    m = merge_samples(pd.DataFrame({
        "iteration": [0, 0, 1, 1, 0],
        "block": [3, 3, 3, 5, 5],
        "persistent": [False, False, False, True, True],
        "tick": [9, 2, 5, 7, 7],
        "read": [True, True, False, True, True],
        "touched_bytes": [10, 20, 30, 40, 50],
    }))
    first, last, read_only, touched, ticks = m[(False, 3)]
    assert (first, last, read_only, touched) == (2, 9, False, 30)
    assert ticks.tolist() == [2, 5, 9]  # the union of both iterations' touches
    assert m[(True, 5)][4].tolist() == [7] and m[(True, 5)][2] is True
    with pytest.raises(ValueError, match="tick -1 is negative"):
        merge_samples(pd.DataFrame({"block": [0], "tick": [-1]}))
    with pytest.raises(ValueError, match=r"lack column\(s\) \['block'\]"):
        merge_samples(pd.DataFrame({"tick": [1]}))


def test_sampled_mode_maps_state_host_resident_when_its_touches_are_few():
    """Persistent W (4000 B, read at every tick), persistent S (8000 B, touched at ticks 10
    and 18 only) and an activation A (14000 B, ticks 5..25, read at every tick) do not fit
    20000 B, and the link (1 GB/s: 8 ticks for S each way) cannot move S out of the way in
    time. Priced by its two touches, reading S in place costs less than leaving the 6001 B
    excess to the driver, so the sampled plan maps S host-resident; W, read 28 times, stays."""
    tb = TraceBuilder(name="remote-state")
    tb.alloc(4000)
    tb.alloc(8000)
    tb.next_tick(TICK_NS)
    for t in range(1, 30):
        x = tb.alloc(1)
        if t == 5:
            A = tb.alloc(14000)
        if t == 25:
            tb.free(A)
        tb.free(x)
        tb.next_tick(TICK_NS)
    tr = tb.build()
    pat = one_iteration(tr)
    a_ord = int(pat.blocks.loc[pat.blocks["size"] == 14000, "ordinal"].iloc[0])
    samples = pd.concat([
        pd.DataFrame({"block": 0, "persistent": True, "tick": range(1, 29)}),
        pd.DataFrame({"block": 1, "persistent": True, "tick": [10, 18]}),
        pd.DataFrame({"block": a_ord, "persistent": False, "tick": range(5, 26)}),
    ])
    kw = dict(hw=slow_link(1e9), pattern=pat, mode="sampled", samples=samples,
              populate=False, guard=1)
    p = plan(tr, 20000, **kw)
    remote = p.actions[p.actions["action"] == "advise_preferred_host"]
    assert remote["block"].tolist() == [1] and remote["persistent"].all()
    assert p.meta["predicted"]["remote_blocks"] == 1
    # without the fallback the excess is left to the driver
    with pytest.raises(PlanError, match="tick 10 of the iteration needs 26,001 bytes"):
        plan(tr, 20000, remote_fallback=False, **kw)


def test_at_one_event_the_eviction_is_issued_before_the_populate_that_needs_its_room():
    """A is used at tick 0 and tick 19; the first control point after its use is B's
    allocation (no allocator event in between), where B must be populated into the room
    A leaves. The table issues A's eviction first: the simulator's driver then evicts
    nothing of its own (a populate claimed first would push it to evict by LRU)."""
    from uvm_sched.sim import simulate

    tb = TraceBuilder(name="same-event")
    A = tb.alloc(4 << 20)
    tb.access(A, AccessMode.WRITE)
    tb.next_tick(TICK_NS)
    for t in range(1, 20):
        if t == 5:
            B = tb.alloc(4 << 20)
        if 5 <= t <= 12:
            tb.access(B, AccessMode.READ_WRITE)
        if t == 12:
            tb.free(B)
        if t == 19:
            tb.access(A, AccessMode.READ)
            tb.free(A)
        tb.next_tick(TICK_NS * 100)
    tr = tb.build()
    pat = one_iteration(tr)
    p = plan(tr, 5 << 20, hw=slow_link(64e9), pattern=pat, guard=0)
    b_alloc = _event_of(pat, "alloc", 5, 4 << 20)
    at = p.actions[p.actions["tick"] == b_alloc]
    assert at["action"].tolist()[:2] == ["prefetch_to_host", "prefetch_to_device"]
    assert at["block"].tolist()[:2] == [0, 1]  # A leaves, then B is populated
    r = simulate(tr, p, slow_link(64e9), 5 << 20)
    assert not (r.transfers["cause"] == "evict").any()


def test_touches_of_a_live_run_map_to_the_block_live_at_that_address_then():
    """An address the pool hands out again belongs to the block allocated there last; a
    touch of memory no block holds is dropped; the tick is the allocator event before the
    clock reading (the op's own allocation)."""
    import numpy as np

    from uvm_sched.planner import samples_from_touches
    from uvm_sched.trace._native import trace_from_events

    from _planner_helpers import host_backend

    gen = host_backend()
    next(gen)
    native = pytest.importorskip("uvm_sched.native")
    try:
        native.drain_events()
        w = native.malloc(4 << 20)
        clocks, addrs = [native.event_clock()], [w]  # tick 0: w written
        a = native.malloc(4 << 20)
        clocks.append(native.event_clock())
        addrs.append(a)  # tick 1: a written
        native.free(a)
        b = native.malloc(4 << 20)  # tick 3, at a's address (the pool reuses it)
        clocks += [native.event_clock(), native.event_clock()]
        addrs += [b, 12345]  # b written; an address no block holds
        native.free(b)
        native.free(w)
        ev = native.drain_events()
    finally:
        next(gen, None)
    assert b == a
    trace, addresses = trace_from_events(ev, return_addresses=True)
    pat = one_iteration(trace)
    smp = samples_from_touches(trace, addresses, pat, clocks, addrs, k0=int(ev["tick"][0]))
    got = sorted(zip(smp["block"], smp["tick"]))
    assert got == [(0, 0), (1, 1), (2, 3)]  # w, a, then b (a new block at a's address)
    assert np.issubdtype(smp["tick"].dtype, np.integer)
