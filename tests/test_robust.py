"""A plan is a hint that must never hurt: on workloads the planner was not tuned on (the
random families of ``trace.zoo.random_model``) and on allocator-only traces (what the
runtime's ring or a torch memory snapshot gives), the default plan is never slower than
plain demand paging by more than 1%. ``benchmarks/bench_robust.py`` runs the same check
over hundreds of cases; here a small fixed-seed sample runs in the default suite."""
from __future__ import annotations

import pytest

pytest.importorskip("torch")

from uvm_sched import planner, sim  # noqa: E402
from uvm_sched.trace import EventKind, zoo  # noqa: E402
from _planner_helpers import pool_shortfalls  # noqa: E402

SLACK = 1.01  # plan / demand allowed: the bound (timing of the same simulator)


def _ratio(full, plan_src, budget, hw, mode):
    """Simulated iteration time of the plan made from ``plan_src`` (judged on ``full``'s
    accesses) over demand paging's, at ``budget`` on ``hw``."""
    cache: dict = {}
    dem = sim.simulate(full, "demand", hw, budget, _cache=cache).iteration_time_s
    p = planner.plan(plan_src, budget, hw, mode=mode)
    return sim.simulate(full, p, hw, budget, _cache=cache).iteration_time_s / dem, p


def test_random_model_is_reproducible_and_covers_every_family():
    a, b = zoo.random_model(7), zoo.random_model(7)
    assert a.family == b.family and a.params == b.params
    assert {zoo.random_model(s).family for s in range(64)} == set(zoo.FAMILIES)
    with pytest.raises(ValueError, match="unknown family 'rnn'"):
        zoo.random_model(0, "rnn")


def test_allocator_only_keeps_allocations_frees_and_marks_not_accesses():
    tr = zoo.record_random(1, "mlp", iters=2)
    al = zoo.allocator_only(tr)
    assert tr.has_accesses and not al.has_accesses
    keep = tr.kind != EventKind.ACCESS
    assert (al.tick == tr.tick[keep]).all() and (al.block == tr.block[keep]).all()
    assert al.peak_bytes == tr.peak_bytes and al.meta["allocator_only"] is True
    assert (al.kind == EventKind.MARK).sum() == (tr.kind == EventKind.MARK).sum()


# An LSTM language model with a large-vocabulary softmax (the first case): the
# oblivious plan was 1.46x demand at 60% of peak, 1.95x after the marker fix, 1.14x as
# advice-only once a pricing view refuted the full plan: its remote mapping of recurrent
# weights, read at every time step, priced at two reads. Priced by the reads the gradients
# show (planner/_reads.py) the weights stay on the device: 0.50x, as sampled.
@pytest.mark.parametrize("mode", ["oblivious", "sampled"])
def test_lstm_language_model_plan_is_not_slower_than_demand(mode):
    tr = zoo.record_random(13, "lstm")
    r, _ = _ratio(tr, tr, "60%", "h200-pcie5", mode)
    assert r <= SLACK, f"{mode} plan {r:.2f}x demand paging"


# An advice-only fallback slower than demand paging (benchmarks/results/robust.md,
# "Diagnosis on fresh seeds"): lstm-s311 (64 time steps) on a100-40gb-pcie4 at 60% of peak,
# was 5.77x: its remote mapping of persistent blocks read at every time step. The pricing
# views cannot tell them from the AdamW state whose remote fallback wins (adamw-mb16 at
# 30%: 0.20x); the guessed reads and fault-backs (planner/_reads.py) do: 0.85x.
def test_recurrent_remote_fallback_is_not_slower_than_demand():
    tr = zoo.record_random(311)
    assert tr.meta["family"] == "lstm"
    r, p = _ratio(tr, zoo.allocator_only(tr), "60%", "a100-40gb-pcie4", "oblivious")
    assert r <= SLACK, f"plan {r:.3f}x demand paging ({p.meta.get('pricing')})"


# Reads freed together past the budget (planner/_pricing.py, Note [Reads no tick can hold]):
# lstm-s1009 on a100-40gb-pcie4 at 40% of peak frees 956,669,952 bytes at one tick, above
# the budget, so the simulator refused the events alone and the plan went out unpriced:
# 1.17x demand paging. With those reads spilled to the ticks before, it is priced.
def test_a_plan_whose_freed_reads_exceed_the_budget_is_priced_not_slower_than_demand():
    tr = zoo.record_random(1009)
    assert tr.meta["family"] == "lstm"
    r, p = _ratio(tr, zoo.allocator_only(tr), "40%", "a100-40gb-pcie4", "oblivious")
    assert "unpriced" not in p.meta["pricing"], p.meta["pricing"]
    assert r <= SLACK, f"plan {r:.3f}x demand paging ({p.meta.get('pricing')})"


# Discards no view shows paying are left out (planner/_pricing.py, Note [Discards judged
# against keeping them]): gru-s31 on gh200-c2c at 75% of peak, 0.35x demand paging with or
# without its 9 discards. (gru-s174 pinned this, 1.03x demand paging with its discards and
# 0.78x without, until the simulator charged every call to the launching thread: its
# populates, 2,049 calls against 6.1 ms of compute, made the advice host-bound either way;
# without its populates that move nothing it is 0.68x, tests/test_planner_idle_calls.py.)
def test_discards_no_view_shows_paying_are_left_out_and_the_plan_is_not_slower():
    tr = zoo.record_random(31)
    assert tr.meta["family"] == "gru"
    r, p = _ratio(tr, zoo.allocator_only(tr), "75%", "gh200-c2c", "oblivious")
    assert p.meta["pricing"]["discards"].startswith("left out"), p.meta["pricing"]
    assert r <= SLACK, f"plan {r:.3f}x demand paging ({p.meta.get('pricing')})"


# ... and a schedule that moves blocks keeps them: it counts a freed block's bytes as room
# from its FREE on (encdec-s134 on h200-pcie5 at 90% of peak: 0.07x demand paging with its
# 190 discards, 0.99x without them; encdec-s505, 0.70x and 1.11x, pinned this until the kept
# reads in reverse order refuted its plan: planner/_pricing.py, Note [Kept reads in either
# order]).
def test_a_plan_that_moves_blocks_keeps_its_discards():
    tr = zoo.record_random(134)
    assert tr.meta["family"] == "encdec"
    r, p = _ratio(tr, zoo.allocator_only(tr), "90%", "h200-pcie5", "oblivious")
    assert p.meta["pricing"]["chosen"] == "plan" and "discards" not in p.meta["pricing"]
    assert (p.actions["action"] == "discard").any()
    assert r <= SLACK, f"plan {r:.3f}x demand paging ({p.meta.get('pricing')})"


# Ties at the worst view, broken by the other views (planner/_pricing.py, Note [Ties broken
# by the other views]): every candidate ties at no plan's time in the allocator events
# alone, and the kept reads show the advice alone faster than the full plan.
# - mlp-s1008 (width 4096, batch 4096) on h200-pcie5 at 75% of peak: its feature maps are the
#   size of its square weights, so their ALLOCs count as uses (planner/_reads.py: 6.3 reads
#   guessed, 2-6 on the ground truth; robust.md, "reads guessed from the gradients"); the
#   full plan's moves lose to demand paging (1.02x), its advice alone 0.89x.
# - gru-s61 on gh200-c2c at 60%: the advice 0.29x no plan with the kept reads against the
#   plan's 0.59x; on the ground truth 0.45x (without its discards) against 1.07x.
@pytest.mark.parametrize("seed,family,hw,budget", [(1008, "mlp", "h200-pcie5", "75%"),
                                                   (61, "gru", "gh200-c2c", "60%")])
def test_a_tie_at_the_worst_view_is_broken_by_the_other_views(seed, family, hw, budget):
    tr = zoo.record_random(seed)
    assert tr.meta["family"] == family
    r, p = _ratio(tr, zoo.allocator_only(tr), budget, hw, "oblivious")
    assert p.meta["pricing"]["chosen"] == "advice-only", p.meta["pricing"]
    assert r <= SLACK, f"plan {r:.3f}x demand paging ({p.meta.get('pricing')})"


# Ties broken by the least worst regret over the events alone and the kept reads
# (planner/_pricing.py, Note [The hint that costs least when wrong]): the full plans below
# won the tie on the kept reads and lost to demand paging on the ground truth, where their
# advice alone wins.
# mlp-s167 on h200-pcie5 at 75% of peak: the plan 0.42x no plan with the kept reads, 2.70x
# in the events alone, 1.01x demand paging; its advice 0.91x, 1.55x, 0.90x. unet-s216 on
# gh200-c2c at 75%: the plan 3.73x in the events alone and 1.03x demand paging; the advice
# 2.02x and 0.89x -- and its calls, 1.19 ms of host stall in the events alone, more than
# its 1.11 ms gain with the kept reads, so it is withheld too (Note [Calls the host cannot
# hide]): no plan.
@pytest.mark.parametrize("seed,family,hw,budget", [(167, "mlp", "h200-pcie5", "75%"),
                                                   (216, "unet", "gh200-c2c", "75%")])
def test_a_tie_goes_to_the_hint_whose_worst_regret_is_least(
        seed, family, hw, budget):
    tr = zoo.record_random(seed)
    assert tr.meta["family"] == family
    r, p = _ratio(tr, zoo.allocator_only(tr), budget, hw, "oblivious")
    pricing = p.meta["pricing"]
    assert pricing["chosen"] == "advice-only" or pricing.get("calls", "").startswith(
        "advice-only not emitted"), pricing
    assert r <= SLACK, f"plan {r:.3f}x demand paging ({p.meta.get('pricing')})"


# A plan whose gain in the kept reads is the driver's loss in their one guessed order
# (planner/_pricing.py, Note [Kept reads in either order]): on the ground truth the plans
# lose to the order the program reads its weights in, not to a freed block's unseen use
# (benchmarks/results/robust.md, "the kept reads in reverse order"). encdec-s71 on
# gh200-c2c at 90% of peak: the full plan 0.49x no plan with the kept reads, 1.21x demand
# paging on the ground truth, 1.17x read in reverse order.
def test_a_plan_won_only_by_the_kept_reads_order_is_refuted():
    tr = zoo.record_random(71)
    assert tr.meta["family"] == "encdec"
    r, p = _ratio(tr, zoo.allocator_only(tr), "90%", "gh200-c2c", "oblivious")
    assert p.meta["pricing"]["chosen"] != "plan", p.meta["pricing"]
    assert r <= SLACK, f"plan {r:.3f}x demand paging ({p.meta.get('pricing')})"


# The snapshot case: GPT-2 exported as a torch memory snapshot and planned/judged
# from it (allocations and frees only; the simulator's extremal accesses).
@pytest.fixture(scope="module")
def gpt2_snapshot(tmp_path_factory):
    import pickle

    from uvm_sched import trace as T
    from uvm_sched.trace._export import trace_to_snapshot

    path = tmp_path_factory.mktemp("snap") / "s.pickle"
    path.write_bytes(pickle.dumps(trace_to_snapshot(zoo.record("gpt2_small", iters=3))))
    return T.load(path)


@pytest.mark.parametrize("hw,budget", [("h200-pcie5", "50%"), ("gh200-c2c", "75%"),
                                       ("gh200-c2c", "50%")])
def test_plan_from_a_torch_snapshot_is_not_slower_than_demand(gpt2_snapshot, hw, budget):
    st = gpt2_snapshot
    r, _ = _ratio(st, st, budget, hw, "oblivious")
    assert r <= SLACK, f"plan {r:.2f}x demand paging"


# Issue 25's one oblivious row slower than demand paging (benchmarks/bench_persistent.py:
# adamw-mb16, mixed-precision AdamW with 16 accumulation steps, h200-pcie5, 50% of peak):
# 1.10x. Its evictions of activations are read again inside their guessed idle gaps; the
# view with one unseen use per block refutes the full plan (advice-only: 0.92x).
def test_persistent_adamw_mb16_oblivious_plan_is_not_slower_than_demand():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from _persistent_workloads import WORKLOADS, persistent_trace

    tr = persistent_trace(name="adamw-mb16", **WORKLOADS["adamw-mb16"])
    r, p = _ratio(tr, zoo.allocator_only(tr), "50%", "h200-pcie5", "oblivious")
    assert r <= SLACK, f"plan {r:.3f}x demand paging ({p.meta.get('pricing')})"


# LLaMA-7B planned from its torch memory snapshot (allocator events only), judged on the
# recorder trace's accesses (benchmarks/results/quality.md, "from a snapshot"). Slow:
# recording LLaMA-7B.
@pytest.fixture(scope="module")
def llama_snapshot():
    from uvm_sched.trace._export import trace_to_snapshot
    from uvm_sched.trace._snapshot import trace_from_snapshot

    tr = zoo.record("llama_7b", iters=3)
    return tr, trace_from_snapshot(trace_to_snapshot(tr))


# At 75% of peak it was 1.16x demand paging, refuted by no view: 56% of the snapshot's
# ticks (one per allocator event) take no time, so the guards were no time at all and the
# schedule met the budget on paper by moving 44 GB of activations it could not hide. The
# planner merges ticks of no device time (planner/_instants.py): 0.39x, as from the
# recorder's ticks; at 50% 0.58x -> 0.38x.
@pytest.mark.slow
@pytest.mark.parametrize("share", [0.75, 0.5])
def test_llama_plan_from_a_snapshot_is_not_slower_than_demand(llama_snapshot, share):
    tr, snap = llama_snapshot
    r, p = _ratio(tr, snap, int(share * tr.peak_bytes), "h200-pcie5", "oblivious")
    assert r <= SLACK, f"plan {r:.3f}x demand paging ({p.meta.get('pricing')})"


# A small fixed-seed sample of benchmarks/bench_robust.py (the families whose cases record
# and simulate in seconds; the recurrent ones are the LSTM case above): every plan, from the
# full trace or the allocator-only one, within 1% of demand paging or faster.
# finetune-s3 at 90% of peak was 1.19x demand paging: its schedule moves no block (the link
# serves no gap) and its populates at the ticks left over budget made the driver evict what
# the next ticks read (first touches come up to 10 ticks after the ALLOC); those populates
# are left out now (planner/_populates.py, Note [Populates that evict]): 0.87x; and the
# ranges freed before them stay for the pool to hand them (Note [Discards the pool
# needs]): every discard kept, no plan, 1.00x.
# encdec-s0 at 90% was 1.22x: its schedule evicts 64 blocks, every candidate tied with no
# plan in the pricing views but the kept reads, which showed the plan faster; read in reverse
# order (planner/_pricing.py, Note [Kept reads in either order]) they refute it.
SAMPLE = [("mlp", 1), ("encdec", 0), ("moe", 0), ("finetune", 3)]


@pytest.mark.parametrize("family,seed", SAMPLE)
def test_generated_workload_plans_are_never_slower_than_demand(family, seed):
    tr = zoo.record_random(seed, family, iters=3)
    al = zoo.allocator_only(tr)
    for budget in ("90%", "50%"):
        try:
            sim.simulate(tr, "demand", "h200-pcie5", budget)
        except sim.BudgetError:
            continue  # a tick's working set is above this budget: nothing can run it
        for src, mode in ((al, "oblivious"), (tr, "sampled")):
            r, p = _ratio(tr, src, budget, "h200-pcie5", mode)
            assert r <= SLACK, (f"{tr.meta['name']} {mode} at {budget}: plan {r:.3f}x demand "
                                f"paging (pricing: {p.meta.get('pricing')})")


# Recycled pool ranges: a block evicted after its last touch and freed while its bytes are
# on the host leaves dead bytes there that come back when the pool hands the range out
# again (a populate, or the next block's first touch migrates them in). So every freed block
# of the iteration whose last move before its FREE is an eviction is discarded at that FREE
# (sampled mode evicted small dead tails it cannot discard: 11-142 blocks per plan).
@pytest.mark.parametrize("family,seed", [("mlp", 1), ("encdec", 0)])
def test_no_dead_bytes_left_on_the_host_for_a_recycled_range(family, seed):
    from uvm_sched import pattern

    tr = zoo.record_random(seed, family, iters=3)
    pat = pattern.analyze(tr)
    b = pat.blocks
    b = b[~b["persistent"] & (b["alloc_event"] >= 0) & (b["free_event"] >= 0)]
    for mode in ("oblivious", "sampled"):
        p = planner.plan(tr, "50%", "h200-pcie5", mode=mode, price=False, pattern=pat)
        a = p.actions[~p.actions["persistent"]]
        moved = a[a["action"].isin(["prefetch_to_host", "prefetch_to_device"])]
        evicted = 0
        for o, f in zip(b["ordinal"].tolist(), b["free_event"].tolist()):
            m = moved[(moved["block"] == o) & (moved["tick"] <= f)]
            if len(m) and m["action"].iloc[-1] == "prefetch_to_host":
                evicted += 1
                assert ((a["block"] == o) & (a["action"] == "discard") & (a["tick"] == f)).any(), \
                    f"{mode}: block {o} freed at event {f} with its dead bytes on the host"
        assert evicted or mode == "oblivious", f"{mode}: no dead tail evicted, nothing checked"


# Sampled mode with samples drawn from the trace knows the accesses, so its pricing times
# the oblivious plan beside its own candidates (planner/_planner.py, Note [The oblivious
# plan as a candidate]): cnn_skip-s114 on gh200-c2c at 90% of peak was 1.81x the oblivious
# plan (robust.md, the 300-case run), and samples given by a caller add no such candidate.
def test_sampled_plan_is_never_slower_than_the_oblivious_one_when_it_knows_the_accesses():
    tr = zoo.record_random(114, "cnn_skip", iters=3)
    al = zoo.allocator_only(tr)
    hw, budget = "gh200-c2c", "90%"
    ro, _ = _ratio(tr, al, budget, hw, "oblivious")
    rs, p = _ratio(tr, tr, budget, hw, "sampled")
    assert rs <= ro * (1 + 1e-9), f"sampled {rs:.3f}x, oblivious {ro:.3f}x demand paging"
    assert {"oblivious_s", "oblivious advice-only_s"} <= set(p.meta["pricing"]), \
        p.meta["pricing"]
    from uvm_sched import pattern
    from uvm_sched.planner._sampling import draw_samples

    pat = pattern.analyze(tr)
    given = planner.plan(tr, budget, hw, mode="sampled", pattern=pat,
                         samples=draw_samples(tr, pat, sample_rate=1.0, noise=0.0, seed=0))
    assert "oblivious_s" not in given.meta["pricing"], given.meta["pricing"]


# ... and the oblivious advice without its discards, which oblivious mode may emit (Note
# [Discards judged against keeping them]): gru-s31 on gh200-c2c at 75% of peak, oblivious
# 0.35x demand paging, sampled 0.31x (gru-s174 pinned this until its discards were kept,
# above).
def test_sampled_plan_is_never_slower_than_oblivious_advice_without_its_discards():
    tr = zoo.record_random(31)
    hw, budget = "gh200-c2c", "75%"
    ro, po = _ratio(tr, zoo.allocator_only(tr), budget, hw, "oblivious")
    rs, ps = _ratio(tr, tr, budget, hw, "sampled")
    assert po.meta["pricing"]["discards"].startswith("left out"), po.meta["pricing"]
    assert rs <= ro * (1 + 1e-9), f"sampled {rs:.3f}x, oblivious {ro:.3f}x demand paging"
    assert "oblivious advice-only without discards_s" in ps.meta["pricing"], ps.meta["pricing"]


# Note [Populates that evict] (planner/_populates.py): at ticks the schedule leaves over
# budget and frees nothing at (here: it moves no block), the fresh blocks allocated there
# are not populated (the driver alone makes room, at their first touch); where its moves
# free room at every tick over budget (here at 50%), every fresh block is populated as
# before (its evictions make the room the populates claim).
def test_populates_left_out_only_where_the_schedule_frees_nothing_over_budget():
    from uvm_sched import pattern

    al = zoo.allocator_only(zoo.record_random(3, "finetune", iters=3))
    pat = pattern.analyze(al)
    b = pat.blocks
    fresh = set(b.loc[~b["persistent"] & (b["alloc_event"] >= 0), "ordinal"].tolist())
    for budget, moves in (("90%", False), ("50%", True)):
        p = planner.plan(al, budget, "h200-pcie5", mode="oblivious", price=False, pattern=pat)
        pred = p.meta["predicted"]
        assert (pred["evictions"] > 0) == moves and (moves or pred["over_budget_ticks"] > 0)
        a = p.actions
        populated = set(a.loc[(a["action"] == "prefetch_to_device") & ~a["persistent"],
                              "block"].tolist())
        if moves:
            assert fresh <= populated, f"{budget}: {len(fresh - populated)} not populated"
        else:
            assert 0 < len(fresh - populated) < len(fresh), (budget, len(populated), len(fresh))


# Sampled mode judged on the trace with its own accesses sees all that not acting costs:
# its pricing takes no candidate slower than no plan for a tie with it (gru-s245 at 60% of
# peak on h200-pcie5: the sampled advice-only, 1.86x demand paging, was emitted).
def test_sampled_plan_judged_on_its_own_accesses_is_not_slower_than_demand():
    tr = zoo.record_random(245, iters=3)  # the bench's case: its family drawn from the seed
    r, p = _ratio(tr, tr, "60%", "h200-pcie5", "sampled")
    assert r <= SLACK, f"sampled plan {r:.3f}x demand paging ({p.meta.get('pricing')})"


# Note [Discards the pool needs] (planner/_populates.py): where populates are left out, the
# pool's first-in first-out byte queue, replayed here apart from the planner over the
# iteration's allocator events with the plan's own discards, holds each unpopulated block's
# bytes at its ALLOC (it reuses a resident range, as without a plan) -- or the plan keeps
# every range (discards none) and the queue has no more to give.
@pytest.mark.parametrize("family,seed", [("finetune", 3), ("mlp", 1), ("encdec", 308)])
def test_unpopulated_blocks_reuse_the_ranges_the_plan_keeps(family, seed):
    import numpy as np

    from uvm_sched import pattern
    from uvm_sched.planner import _planner
    from uvm_sched.planner._populates import populates_that_evict

    seen: dict = {}
    actions = _planner._actions

    def spy(prob, info, sched, *a):
        seen.setdefault("x", (prob, info, sched))
        return actions(prob, info, sched, *a)

    al = zoo.allocator_only(zoo.record_random(seed, family, iters=3))
    pat = pattern.analyze(al)
    checked = 0
    for budget in ("90%", "75%"):
        seen.clear()
        _planner._actions = spy
        try:
            p = planner.plan(al, budget, "h200-pcie5", mode="oblivious", price=False,
                             pattern=pat)
        finally:
            _planner._actions = actions
        prob, info, sched = seen["x"]
        left_out = populates_that_evict(prob, sched)
        if not left_out.any():
            continue
        checked += 1
        named = set(p.actions.loc[p.actions["action"] == "discard", "block"].tolist())
        discarded = np.isin(info["ordinal"], list(named)) & ~prob.persistent
        short = pool_shortfalls(prob, discarded)
        starved = [b for b in np.flatnonzero(left_out).tolist()
                   if short.get(int(prob.alloc_event[b]), 0) > 0]
        assert not starved or not named, (
            f"{budget}: {len(starved)} unpopulated blocks fresh at their ALLOC while the plan "
            f"discards {len(named)} ranges")
    assert checked, "no budget left a populate out: nothing checked"


# The rule on the ground truth: mlp-s411 on gh200-c2c at 90% of peak moved nothing and
# discarded the ranges its unpopulated blocks would reuse: 1.47x demand paging (faults
# 14 -> 28, the same bytes over the link). Also finetune-s418 (1.14x on gh200-c2c).
@pytest.mark.parametrize("seed", [411, 418])
def test_no_move_plan_keeps_the_ranges_its_unpopulated_blocks_reuse(seed):
    tr = zoo.record_random(seed)  # bench_robust's case of this seed (mlp, finetune)
    r, p = _ratio(tr, zoo.allocator_only(tr), "90%", "gh200-c2c", "oblivious")
    assert r <= SLACK, f"plan {r:.3f}x demand paging ({p.meta.get('pricing')})"


# Note [Populates that evict], per tick: a schedule that moves blocks yet leaves the worst
# ticks' excess as it was (moe-s417 at 90% of peak: 14 MiB moved, 74 MiB over budget
# untouched) leaves out the populates at those ticks, as a schedule that moves nothing
# does; with them it was 1.45-1.53x demand paging on all three profiles.
def test_moving_plan_leaves_out_the_populates_where_its_moves_free_nothing():
    from uvm_sched import pattern

    al = zoo.allocator_only(zoo.record_random(417))  # bench_robust's case (moe)
    pat = pattern.analyze(al)
    b = pat.blocks
    fresh = set(b.loc[~b["persistent"] & (b["alloc_event"] >= 0), "ordinal"].tolist())
    p = planner.plan(al, "90%", "h200-pcie5", mode="oblivious", price=False, pattern=pat)
    a = p.actions
    assert p.meta["predicted"]["evictions"] > 0
    populated = set(a.loc[(a["action"] == "prefetch_to_device") & ~a["persistent"],
                          "block"].tolist())
    assert 0 < len(fresh - populated) < len(fresh), (len(populated), len(fresh))


@pytest.mark.parametrize("hw", ["h200-pcie5", "gh200-c2c", "a100-40gb-pcie4"])
def test_moving_plan_over_budget_where_it_moves_nothing_is_not_slower_than_demand(hw):
    tr = zoo.record_random(417)
    r, p = _ratio(tr, zoo.allocator_only(tr), "90%", hw, "oblivious")
    assert r <= SLACK, f"plan {r:.3f}x demand paging ({p.meta.get('pricing')})"
