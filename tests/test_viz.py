"""uvm_sched.viz: the numbers each figure draws, both backends, and the HTML report.

Traces are built here with TraceBuilder; SimResults are small hand-made objects with the
documented fields (the figures read only those), so these tests do not depend on the
simulator's numbers."""
from __future__ import annotations

import html.parser
import json
import sys
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from uvm_sched.planner import Plan
from uvm_sched.trace import AccessMode, EventKind, TraceBuilder
from uvm_sched import viz
from uvm_sched.viz import _data

MiB = 2**20


def training_trace(iters: int = 3, layers: int = 4, access: bool = True, name: str = "toy"):
    """Weights allocated once; per iteration: forward allocates an activation and a
    short-lived workspace per layer, backward frees the activations in reverse."""
    tb = TraceBuilder(name=name, source="test")
    weights = [tb.alloc(8 * MiB) for _ in range(layers)]
    tb.next_tick(1e5)
    for _ in range(iters):
        tb.mark()
        acts = []
        for w in weights:
            a = tb.alloc(16 * MiB)
            ws = tb.alloc(4 * MiB)
            if access:
                tb.access(w)
                tb.access(a, AccessMode.WRITE)
                tb.access(ws, AccessMode.READ_WRITE)
            tb.free(ws)
            acts.append(a)
            tb.next_tick(2e5)
        for w, a in zip(reversed(weights), reversed(acts)):
            g = tb.alloc(16 * MiB)
            if access:
                tb.access(w, AccessMode.READ_WRITE)
                tb.access(a)
                tb.access(g, AccessMode.WRITE)
            tb.free(g)
            tb.free(a)
            tb.next_tick(4e5)
    return tb.build()


def in_use_brute_force(trace) -> np.ndarray:
    """Bytes of blocks alive during each tick, by walking every block."""
    bt = trace.block_table()
    out = np.zeros(trace.n_ticks, np.int64)
    for size, a, f in zip(bt["size"], bt["alloc_tick"], bt["free_tick"]):
        out[a:(f if f >= 0 else trace.n_ticks - 1) + 1] += size
    return out


def fake_result(policy="uvm-sched", *, ticks=range(13, 25), budget=64 * MiB, transfers=None,
                stall_scale=1.0):
    ticks = np.asarray(list(ticks))
    n = len(ticks)
    compute = np.full(n, 2e-4)
    fault = np.where(np.arange(n) % 3 == 0, 5e-5, 0.0) * stall_scale
    evict = np.where(np.arange(n) % 4 == 1, 3e-5, 0.0) * stall_scale
    link = np.full(n, 1e-5) * stall_scale
    stall = fault + evict + link
    start = 1.0 + np.concatenate([[0], np.cumsum(compute + stall)[:-1]])
    tl = pd.DataFrame({
        "tick": ticks, "start_s": start, "compute_s": compute, "stall_s": stall,
        "stall_fault_s": fault, "stall_evict_s": evict, "stall_link_s": link,
        "resident_bytes": np.linspace(40, 60, n) * MiB, "h2d_bytes": 0, "d2h_bytes": 0,
    })
    if transfers is None:
        transfers = pd.DataFrame({
            "start_s": [1.0, 1.0001, 1.0005, 1.0002], "end_s": [1.0003, 1.0004, 1.0009, 1.0006],
            "direction": ["h2d", "h2d", "h2d", "d2h"], "bytes": [4 * MiB, 2 * MiB, 8 * MiB, 8 * MiB],
            "block": [5, 6, 7, 8], "cause": ["plan", "fault", "plan", "evict"],
        })
    it = float((compute + stall).sum())
    r = SimpleNamespace(
        policy=policy, hw="h200-pcie5", budget_bytes=budget, iteration_time_s=it,
        compute_time_s=float(compute.sum()), stall_time_s=float(stall.sum()),
        stall_breakdown={"fault": float(fault.sum()), "eviction": float(evict.sum()),
                         "link": float(link.sum())},
        bytes_h2d=int(transfers.loc[transfers.direction == "h2d", "bytes"].sum()),
        bytes_d2h=int(transfers.loc[transfers.direction == "d2h", "bytes"].sum()),
        faults=3, peak_resident_bytes=60 * MiB, divergences=0, timeline=tl, transfers=transfers)
    r.slowdown = lambda ideal: r.iteration_time_s / ideal.iteration_time_s
    return r


def names(fig) -> list[str]:
    return [d.name for d in fig.data]


def heading(fig) -> str:
    """A plotly figure's title and subtitle (where the notes about thinning go)."""
    t = fig.layout.title
    return f"{t.text} {t.subtitle.text or ''}"


# -- memory in use ---------------------------------------------------------------------------
def test_memory_in_use_per_tick_matches_every_block_and_peaks_at_trace_peak():
    t = training_trace()
    classes, _ = _data.block_classes(t)
    mem = _data.memory_by_class(t, classes)
    total = mem.to_numpy().sum(axis=1)
    assert np.array_equal(total, in_use_brute_force(t))
    assert total.max() == t.peak_bytes


def test_lifetime_rule_classes_weights_activations_and_workspaces():
    t = training_trace(layers=2)
    classes, note = _data.block_classes(t, None, "no pattern here")
    bt = t.block_table()
    assert list(classes.loc[[0, 1]]) == ["persistent", "persistent"]  # weights
    assert "no pattern here" in note
    # workspaces (freed in their allocation tick) and gradients are transient
    short = bt.index[(bt.free_tick - bt.alloc_tick) == 0]
    assert (classes.loc[short] == "transient").all()
    longer = bt.index[(bt.free_tick - bt.alloc_tick) > 1]
    assert (classes.loc[longer] == "activation").all()


def test_memory_timeline_draws_classes_budget_and_simulated_residency():
    t = training_trace()
    r = fake_result()
    fig = viz.memory_timeline(t, result=r, budget="50%")
    got = names(fig)
    assert {"persistent", "activation", "transient"} <= set(got)
    budget = next(d for d in fig.data if d.name.startswith("budget"))
    # the y axis is in MiB for a 160 MiB peak; 50% of peak = 80 MiB
    assert "(MiB)" in fig.layout.yaxis.title.text
    assert budget.y[0] == pytest.approx(t.peak_bytes / 2 / MiB)
    res = next(d for d in fig.data if d.name.startswith("device-resident"))
    assert np.array_equal(np.asarray(res.x), r.timeline["tick"].to_numpy())
    assert np.asarray(res.y).max() == pytest.approx(60)


def test_memory_timeline_budget_defaults_to_the_results():
    fig = viz.memory_timeline(training_trace(), result=fake_result(budget=32 * MiB))
    budget = next(d for d in fig.data if d.name.startswith("budget"))
    assert budget.y[0] == pytest.approx(32)


def test_long_traces_are_downsampled_to_peaks_and_the_figure_says_so():
    t = training_trace(iters=40, layers=10)  # 801 ticks
    fig = viz.memory_timeline(t, max_points=100)
    assert len(fig.data[0].x) <= 100
    stacked = np.sum([np.asarray(d.y) for d in fig.data if d.stackgroup == "mem"], axis=0)
    assert stacked.max() * MiB == pytest.approx(t.peak_bytes)
    assert "downsampled" in heading(fig)


# -- lifetimes -------------------------------------------------------------------------------
def test_busy_spans_merge_consecutive_accessed_ticks():
    tb = TraceBuilder()
    b = tb.alloc(MiB)
    for tick in range(8):
        if tick in (1, 2, 5):
            tb.access(b)
        if tick == 7:
            tb.free(b)
        tb.next_tick(1.0)
    spans, note = _data.busy_spans(tb.build(), np.array([b]))
    assert spans[["start", "end"]].values.tolist() == [[1, 3], [5, 6]]
    assert note is None


def test_busy_spans_keep_only_the_longest_gaps_when_there_are_too_many():
    tb = TraceBuilder()
    b = tb.alloc(MiB)
    for tick in range(100):
        if tick % 2 == 0 or tick in (51, 53):
            tb.access(b)
        tb.next_tick(1.0)
    t = tb.build()
    spans, _ = _data.busy_spans(t, np.array([b]))
    assert len(spans) == 48  # every other tick idle, except the gaps closed by 51 and 53
    spans, note = _data.busy_spans(t, np.array([b]), max_spans=5)
    assert len(spans) <= 5 and "idle gaps" in note


def test_lifetimes_without_access_rows_say_idle_gaps_are_unknown():
    fig = viz.lifetimes(training_trace(access=False))
    assert "idle gaps unknown" in heading(fig)
    assert not any("accessed" in n for n in names(fig))


def test_lifetimes_above_the_cap_draw_the_largest_blocks_and_say_so():
    t = training_trace(iters=3, layers=4)
    n_blocks = len(t.block_table())
    fig = viz.lifetimes(t, max_blocks=10)
    drawn = sum(np.isfinite(np.asarray(d.x, float)).sum() // 2 for d in fig.data
                if d.name.endswith("(live)"))
    assert drawn == 10
    assert f"{n_blocks:,} blocks: showing the 10 largest" in heading(fig)
    with pytest.raises(ValueError, match="max_blocks"):
        viz.lifetimes(t, max_blocks=0)


def toy_plan(t, actions):
    bt = t.block_table()
    starts = t.iteration_starts
    # allocation sizes of one iteration, in order (all iterations of the toy are alike)
    sizes = bt[(bt.alloc_tick >= starts[-1])].sort_values("alloc_row")["size"].tolist()
    k = t.kind[(t.tick >= starts[-1])]
    period = int(((k == EventKind.ALLOC) | (k == EventKind.FREE)).sum())
    return Plan(pd.DataFrame(actions, columns=["tick", "action", "block", "persistent", "offset", "bytes"]),
                {"budget_bytes": 64 * MiB, "period_events": period, "alloc_sizes": sizes,
                 "mode": "oblivious", "hw": "h200-pcie5"})


def test_plan_actions_land_on_the_right_trace_ticks_and_blocks():
    t = training_trace(iters=2, layers=2)
    # one iteration's allocator events: (alloc a0, alloc ws0, free ws0) (alloc a1, alloc ws1,
    # free ws1) (alloc g1, free g1, free a1) (alloc g0, free g0, free a0)
    plan = toy_plan(t, [
        (1, "prefetch_to_host", 0, False, 0, 16 * MiB),    # after ws0's alloc: evict a0
        (8, "prefetch_to_device", 0, False, 0, 16 * MiB),  # after a1's free: bring a0 back
        (0, "advise_read_mostly", 1, True, 0, 8 * MiB),    # weight 1 (2nd alloc of the trace)
        (0, "discard", 3, False, 0, 16 * MiB),             # ordinal 3 is not allocated yet: skipped
    ])
    marks, note = _data.plan_marks(t, plan)
    assert note is None
    bt = t.block_table()
    for it, start in enumerate(t.iteration_starts):
        m = marks[marks.iteration == it].set_index("action")
        a0 = bt[bt.alloc_tick == start].sort_values("alloc_row").index[0]
        assert m.loc["prefetch_to_host", "block"] == a0
        assert m.loc["prefetch_to_host", "x"] == start  # an alloc: before the kernel
        assert m.loc["prefetch_to_device", "block"] == a0
        a1_free = bt.loc[a0 + 2, "free_tick"]  # a0, ws0, then a1
        assert m.loc["prefetch_to_device", "x"] == a1_free + 1  # a free: after the kernel
        assert m.loc["advise_read_mostly", "block"] == 1
        assert "discard" not in m.index
    fig = viz.lifetimes(t, plan=plan)
    assert {"planned evict to host", "planned prefetch to device", "planned advise"} <= set(names(fig))


def test_plan_is_disarmed_after_an_allocation_of_another_size():
    t = training_trace(iters=2, layers=2)
    plan = toy_plan(t, [(0, "prefetch_to_host", 0, False, 0, 16 * MiB),
                        (5, "prefetch_to_host", 1, False, 0, 4 * MiB)])
    plan.meta["alloc_sizes"] = list(plan.meta["alloc_sizes"])
    plan.meta["alloc_sizes"][3] = 1  # the 4th allocation (ws1, allocator event 4) "differs"
    marks, note = _data.plan_marks(t, plan)
    assert sorted(marks["iteration"]) == [0, 1]  # only the action before event 4 fires
    assert (marks["action"] == "prefetch_to_host").all() and (marks["bytes"] == 16 * MiB).all()
    assert "disarmed" in note and "2 of 2" in note


# -- simulation results ----------------------------------------------------------------------
def test_copy_engines_put_overlapping_transfers_on_separate_lanes():
    r = fake_result()
    df, busy, note = _data.transfer_lanes(r)
    h2d = df[df.direction == "h2d"].sort_values("start_ms")
    assert h2d["lane"].tolist() == [0, 1, 0]  # 2nd overlaps the 1st; 3rd starts after both end
    window_ms = (r.timeline.start_s + r.timeline.compute_s + r.timeline.stall_s).max() * 1e3 - 1e3
    assert busy["h2d"] == pytest.approx((0.4 + 0.4) / window_ms, rel=1e-6)
    assert busy["d2h"] == pytest.approx(0.4 / window_ms, rel=1e-6)
    assert note is None
    fig = viz.copy_engines(r)
    assert {"plan transfers", "fault transfers", "evict transfers"} == set(names(fig))
    assert "ms" in fig.layout.xaxis.title.text


def test_copy_engines_drop_transfers_outside_the_window_and_say_so():
    tr = pd.DataFrame({"start_s": [0.1, 1.0], "end_s": [0.2, 1.0002], "direction": ["h2d", "h2d"],
                       "bytes": [MiB, MiB], "block": [1, 2], "cause": ["plan", "plan"]})
    fig = viz.copy_engines(fake_result(transfers=tr))
    assert "1 transfers outside the measured window" in heading(fig)


def test_many_transfers_are_merged_below_the_cap():
    n = 2000
    s = 1.0 + np.arange(n) * 1e-6
    tr = pd.DataFrame({"start_s": s, "end_s": s + 0.9e-6, "direction": "h2d", "bytes": MiB,
                       "block": np.arange(n), "cause": "fault"})
    df, busy, note = _data.transfer_lanes(fake_result(transfers=tr), max_transfers=100)
    assert len(df) <= 100 and "merged" in note
    assert df["bytes"].sum() == n * MiB  # merging keeps every byte


def test_stalls_are_stacked_per_tick_and_binning_keeps_the_totals():
    r = fake_result(ticks=range(0, 50))
    fig = viz.stalls(r)
    assert {"fault stall", "eviction stall", "link stall", "host stall",
            "compute"} == set(names(fig))
    fault = next(d for d in fig.data if d.name == "fault stall")
    assert np.asarray(fault.y).sum() == pytest.approx(r.stall_breakdown["fault"] * 1e3)
    df, note = _data.stall_table(r, max_points=7)
    assert len(df) <= 7 and "downsampled" in note
    assert df["eviction"].sum() == pytest.approx(r.stall_breakdown["eviction"] * 1e3)


def test_frontier_plots_savings_against_slowdown_per_policy():
    cmp = pd.DataFrame({
        "budget_bytes": [80, 80, 80, 40, 40, 40], "budget_pct": [75, 75, 75, 50, 50, 50],
        "policy": ["ideal", "demand", "uvm-sched"] * 2,
        "iteration_time_s": [1, 3, 1.1, 1, 6, 1.3], "slowdown": [1, 3, 1.1, 1, 6, 1.3],
    })
    fig = viz.frontier(cmp)
    assert set(names(fig)) == {"demand", "uvm-sched", "ideal (all resident)"}
    ours = next(d for d in fig.data if d.name == "uvm-sched")
    assert list(ours.x) == [25, 50] and list(ours.y) == [1.1, 1.3]
    with pytest.raises(ValueError, match="budget_pct"):
        viz.frontier(cmp.drop(columns="budget_pct"))


def test_figures_reject_things_that_are_not_sim_results():
    with pytest.raises(TypeError, match="SimResult"):
        viz.stalls(object())


# -- backends --------------------------------------------------------------------------------
def test_every_figure_draws_with_matplotlib(tmp_path):
    from matplotlib.figure import Figure

    t = training_trace()
    r = fake_result()
    cmp = pd.DataFrame({"budget_pct": [75, 50], "policy": ["demand", "demand"], "slowdown": [2.0, 4.0]})
    figs = [viz.memory_timeline(t, result=r, backend="matplotlib"),
            viz.lifetimes(t, plan=toy_plan(t, [(1, "prefetch_to_host", 0, False, 0, 16 * MiB)]),
                          backend="matplotlib"),
            viz.copy_engines(r, backend="matplotlib"), viz.stalls(r, backend="matplotlib"),
            viz.frontier(cmp, backend="matplotlib")]
    for i, f in enumerate(figs):
        assert isinstance(f, Figure)
        f.savefig(tmp_path / f"{i}.png", dpi=50)
        assert (tmp_path / f"{i}.png").stat().st_size > 1000
        assert f.axes[0].get_title(loc="left")


def test_unknown_or_missing_backend_is_a_clear_error(monkeypatch):
    with pytest.raises(ValueError, match="backend must be one of"):
        viz.memory_timeline(training_trace(), backend="bokeh")
    monkeypatch.setitem(sys.modules, "plotly", None)  # as if plotly were not installed
    with pytest.raises(ImportError, match=r"pip install 'uvm_sched\[viz\]'"):
        viz.memory_timeline(training_trace())


# -- report ----------------------------------------------------------------------------------
class _Page(html.parser.HTMLParser):
    """Collects the embedded figures, the divs they target and the tables of a report."""

    def __init__(self):
        super().__init__()
        self.figs: dict[str, dict] = {}
        self.divs: set[str] = set()
        self.scripts: list[dict] = []
        self.tables = 0
        self._in: dict | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script":
            self._in = {"attrs": a, "text": ""}
        elif tag == "div" and "id" in a:
            self.divs.add(a["id"])
        elif tag == "table":
            self.tables += 1

    def handle_data(self, data):
        if self._in is not None:
            self._in["text"] += data

    def handle_endtag(self, tag):
        if tag == "script" and self._in is not None:
            self.scripts.append(self._in)
            if self._in["attrs"].get("class") == "uvm-fig":
                self.figs[self._in["attrs"]["data-target"]] = json.loads(self._in["text"])
            self._in = None


def parse(page: str) -> _Page:
    p = _Page()
    p.feed(page)
    return p


def trace_names(fig: dict) -> set[str]:
    return {d.get("name") for d in fig["data"]}


def test_report_holds_every_figure_with_its_traces_and_plotly_once():
    t = training_trace()
    plan = toy_plan(t, [(1, "prefetch_to_host", 0, False, 0, 16 * MiB),
                        (8, "prefetch_to_device", 0, False, 0, 16 * MiB)])
    ideal = fake_result("ideal", stall_scale=0.0)
    results = [ideal, fake_result("demand", stall_scale=5.0), fake_result("uvm-sched")]
    page = viz.report(t, plan=plan, results=results, title="toy </script> report")
    p = parse(page)
    assert set(p.figs) == {"fig-memory", "fig-lifetimes", "fig-copy-0", "fig-stalls-0",
                           "fig-copy-1", "fig-stalls-1"}
    assert set(p.figs) <= p.divs
    assert {"persistent", "activation", "transient"} <= trace_names(p.figs["fig-memory"])
    assert any(n.startswith("budget") for n in trace_names(p.figs["fig-memory"]))
    assert any(n.startswith("device-resident") and "uvm-sched" in n for n in trace_names(p.figs["fig-memory"]))
    assert {"planned evict to host", "planned prefetch to device"} <= trace_names(p.figs["fig-lifetimes"])
    # bars are one polyline per class broken by JSON nulls (a NaN in a binary array would be
    # drawn by plotly.js as a line joining the bars)
    live = next(d for d in p.figs["fig-lifetimes"]["data"] if d["name"] == "activation (live)")
    assert isinstance(live["x"], list) and live["x"][2] is None and live["y"][2] is None
    assert "plan transfers" in trace_names(p.figs["fig-copy-0"])
    assert "uvm-sched" in p.figs["fig-copy-0"]["layout"]["title"]["text"]
    assert "demand" in p.figs["fig-stalls-1"]["layout"]["title"]["text"]
    assert {"fault stall", "eviction stall", "link stall"} <= trace_names(p.figs["fig-stalls-0"])
    assert p.tables == 1
    # plotly.js inlined exactly once; nothing fetched from the network
    big = [s for s in p.scripts if len(s["text"]) > 1_000_000]
    assert len(big) == 1 and "Plotly" in big[0]["text"]
    assert not any("src" in s["attrs"] for s in p.scripts)
    assert "<title>toy &lt;/script&gt; report</title>" in page
    # each row's slowdown is against the ideal run
    table = page[page.index("<table>"):page.index("</table>")]
    assert f"{results[1].iteration_time_s / ideal.iteration_time_s:.3f}×" in table
    assert f"{results[2].iteration_time_s / ideal.iteration_time_s:.3f}×" in table


def test_report_without_results_shows_the_trace_and_says_what_is_missing():
    page = viz.report(training_trace())
    p = parse(page)
    assert set(p.figs) == {"fig-memory", "fig-lifetimes"}
    assert "No simulation results were given" in page


def test_report_takes_a_compare_frame_and_draws_the_frontier():
    cmp = pd.DataFrame({"budget_bytes": [80 * MiB, 40 * MiB], "budget_pct": [50.0, 25.0],
                        "policy": ["demand", "demand"], "iteration_time_s": [0.3, 0.6],
                        "slowdown": [3.0, 6.0], "stall_time_s": [0.2, 0.5], "bytes_h2d": [1, 2],
                        "bytes_d2h": [1, 2], "faults": [10, 20]})
    p = parse(viz.report(training_trace(), results={"demand": fake_result("demand"), "cmp": cmp}))
    assert "fig-frontier-0" in p.figs and "demand" in trace_names(p.figs["fig-frontier-0"])
    assert p.tables == 2
    with pytest.raises(TypeError, match="compare"):
        viz.report(training_trace(), results=[42])


def test_pattern_classes_carry_over_to_every_iteration_by_allocation_ordinal():
    pattern = pytest.importorskip("uvm_sched.pattern")
    t = training_trace(iters=4, layers=3)
    pat = pattern.analyze(t)
    classes, note = _data.block_classes(t, pat)
    assert note.startswith("classes from pattern analysis")
    bt = t.block_table()
    per_iter = []
    for start, stop in pat.iterations:
        blocks = bt[(bt.alloc_tick >= start) & (bt.alloc_tick < stop)].sort_values("alloc_row").index
        per_iter.append(classes.loc[blocks].tolist())
    rep = per_iter[pat.rep]
    assert all(c == rep for c in per_iter)  # every iteration of the toy is alike
    reps = pat.blocks[~pat.blocks.persistent].sort_values("ordinal")["cls"].tolist()
    assert rep == reps


def test_a_discard_fires_at_its_blocks_own_free_but_not_later():
    t = training_trace(iters=2, layers=2)
    # events: a0 ws0 -ws0 | a1 ws1 -ws1 | g1 -g1 -a1 | g0 -g0 -a0  (0..11)
    plan = toy_plan(t, [(11, "discard", 0, False, 0, 16 * MiB),   # a0 freed by event 11: fires
                        (2, "discard", 1, False, 0, 4 * MiB),     # ws0 freed by event 2: fires
                        (11, "discard", 1, False, 0, 4 * MiB)])   # ws0 long gone: skipped
    marks, _ = _data.plan_marks(t, plan)
    assert sorted(marks.groupby("iteration").size().tolist()) == [2, 2]
    assert sorted(marks["bytes"].unique().tolist()) == [4 * MiB, 16 * MiB]
