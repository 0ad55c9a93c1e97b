"""One self-contained HTML page (plotly.js inlined once, works offline) with the figures of a
trace, its plan and simulation results.

Each figure is embedded as JSON in ``<script type="application/json" class="uvm-fig"
data-target="ID">`` and drawn by a few lines of script at the end of the page, so the page is
plain data a program can read back (the tests do).
"""
from __future__ import annotations

import html
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..trace._model import EventKind, Trace
from . import _data
from ._figures import _backend, copy_engines, frontier, lifetimes, memory_timeline, stalls, trace_name
from ._units import fmt_bytes, fmt_ms

_CSS = """
body{font-family:Helvetica,Arial,sans-serif;margin:24px auto;max-width:1200px;color:#222;padding:0 16px}
h1{font-size:22px;margin-bottom:4px} h2{font-size:17px;margin:28px 0 6px;border-bottom:1px solid #ddd}
.meta{color:#555;font-size:13px;line-height:1.5} .note{color:#666;font-size:13px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:right} th{background:#f4f4f4}
td:first-child,th:first-child{text-align:left} .fig{width:100%}
"""

_LOADER = """
document.querySelectorAll('script.uvm-fig').forEach(function (s) {
  var f = JSON.parse(s.textContent);
  Plotly.newPlot(s.dataset.target, f.data, f.layout, {responsive: true, displaylogo: false});
});
"""


def _split_results(results: Any) -> tuple[list[Any], list[Any]]:
    """(SimResults, compare frames) from whatever ``results`` was given."""
    import pandas as pd

    if results is None:
        return [], []
    if isinstance(results, pd.DataFrame) or hasattr(results, "timeline"):
        items = [results]
    elif isinstance(results, Mapping):
        items = list(results.values())
    else:
        items = list(results)
    sims, frames = [], []
    for r in items:
        if isinstance(r, pd.DataFrame):
            frames.append(r)
        elif hasattr(r, "timeline") and hasattr(r, "policy"):
            sims.append(r)
        else:
            raise TypeError(
                f"report: results must be SimResults from uvm_sched.sim.simulate (one, a list or a "
                f"dict) or a frame from uvm_sched.sim.compare; got {type(r).__name__}")
    return sims, frames


def _primary(sims: list[Any]) -> Any:
    for name in ("uvm-sched", "plan"):  # "plan": a Plan given to simulate() directly
        for r in sims:
            if str(r.policy) == name:
                return r
    for r in sims:
        if str(r.policy) != "ideal":
            return r
    return sims[0] if sims else None


def _results_table(sims: list[Any]) -> str:
    ideal = next((r for r in sims if str(r.policy) == "ideal"), None)
    head = ["policy", "budget", "iteration", "slowdown vs ideal", "stall", "fault / eviction / link stall",
            "host→device", "device→host", "faults", "peak resident", "divergences"]
    rows = []
    for r in sims:
        if ideal is not None:
            slow = r.slowdown(ideal) if hasattr(r, "slowdown") else r.iteration_time_s / ideal.iteration_time_s
            slow_s = f"{slow:.3f}×"
        else:
            slow_s = "(no ideal run)"
        sb = getattr(r, "stall_breakdown", {}) or {}
        rows.append([
            str(r.policy), fmt_bytes(r.budget_bytes), fmt_ms(float(r.iteration_time_s)), slow_s,
            fmt_ms(float(r.stall_time_s)),
            " / ".join(fmt_ms(float(sb.get(k, 0.0))) for k in ("fault", "eviction", "link")),
            fmt_bytes(r.bytes_h2d), fmt_bytes(r.bytes_d2h), f"{int(r.faults):,}",
            fmt_bytes(r.peak_resident_bytes), f"{int(getattr(r, 'divergences', 0)):,}",
        ])
    return _table(head, rows)


def _frame_table(df) -> str:
    cols = [c for c in ("budget_bytes", "budget_pct", "policy", "iteration_time_s", "slowdown",
                        "stall_time_s", "bytes_h2d", "bytes_d2h", "faults") if c in df.columns]
    names = {"budget_bytes": "budget", "budget_pct": "budget (% of peak)", "iteration_time_s": "iteration",
             "slowdown": "slowdown vs ideal", "stall_time_s": "stall", "bytes_h2d": "host→device",
             "bytes_d2h": "device→host"}
    fmt = {"budget_bytes": fmt_bytes, "bytes_h2d": fmt_bytes, "bytes_d2h": fmt_bytes,
           "budget_pct": lambda v: f"{float(v):.0f}%", "iteration_time_s": lambda v: fmt_ms(float(v)),
           "stall_time_s": lambda v: fmt_ms(float(v)), "slowdown": lambda v: f"{float(v):.3f}×",
           "faults": lambda v: f"{int(v):,}", "policy": str}
    rows = [[fmt[c](v) for c, v in zip(cols, rec)] for rec in df[cols].itertuples(index=False)]
    return _table([names.get(c, c) for c in cols], rows)


def _table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _trace_summary(trace: Trace) -> str:
    k = trace.kind
    n_blocks = int((k == EventKind.ALLOC).sum())
    marks = trace.iteration_starts
    known = np.isfinite(trace.tick_ns)
    parts = [
        f"{trace.n_events:,} events", f"{trace.n_ticks:,} ticks", f"{n_blocks:,} blocks",
        f"{len(marks)} iteration marks", f"peak {fmt_bytes(trace.peak_bytes)} in use",
    ]
    if known.any():
        parts.append(f"device time {fmt_ms(float(np.nansum(trace.tick_ns)) / 1e9)}"
                     + ("" if known.all() else f" over the {int(known.sum()):,} ticks with a known time"))
    elif trace.meta.get("clock") == "none":
        parts.append("time unavailable: the trace has no clock")
    if str(trace.meta.get("clock", "")).startswith("assumed"):
        parts.append(f"times {trace.meta['clock']} (the trace has no clock)")
    parts.append("ground-truth accesses: " + ("yes" if trace.has_accesses else "no"))
    for key in ("source", "hw", "model", "batch"):
        if trace.meta.get(key) not in (None, ""):
            parts.append(f"{key}: {trace.meta[key]}")
    return " · ".join(html.escape(p) for p in parts)


def _plan_summary(plan: Any) -> str:
    m = plan.meta
    counts = ", ".join(f"{a.replace('_', ' ')} {v['count']:,} ({fmt_bytes(v['bytes'])})"
                       for a, v in plan.summary().items() if v["count"])
    text = (f"plan: mode {m.get('mode', '?')}, budget {fmt_bytes(m['budget_bytes'])}, hw {m.get('hw', '?')}, "
            f"{int(m['period_events']):,} allocator events per iteration; actions per iteration: "
            f"{counts or 'none'}")
    return html.escape(text)


def _embed(fig, target: str) -> str:
    # "</" inside JSON would end the <script> element early; "<\/" is the same JSON string.
    data = fig.to_json().replace("</", "<\\/")
    return f'<script type="application/json" class="uvm-fig" data-target="{target}">{data}</script>'


def report(trace: Trace, *, plan: Any = None, results: Any = None, title: str | None = None,
           pattern: Any = None) -> str:
    """One self-contained HTML page (returned as a string; plotly.js inlined once, no network
    needed to view it) with: memory in use over ticks by class with the budget; block
    lifetimes with the plan's transfers; copy-engine occupancy and stalls of the simulated
    ``uvm-sched`` run (or the first non-ideal one) and of ``demand`` when given; a table of
    all results; and the savings/slowdown frontier when a ``compare`` frame is given.

    ``plan``: a ``Plan``; ``results``: a ``SimResult``, a list or dict of them, and/or a
    ``uvm_sched.sim.compare`` frame (in a list with the SimResults). The page does not
    simulate: without results it shows the trace (and plan) only, and says so."""
    _backend("plotly")
    import plotly.offline

    sims, frames = _split_results(results)
    pat, why = _data.get_pattern(trace, pattern)
    pat_arg = pat if pat is not None else None
    main = _primary(sims)
    budget = plan.meta["budget_bytes"] if plan is not None else None
    name = trace_name(trace)
    page_title = title or f"uvm_sched report: {name}"

    sections: list[str] = []
    embeds: list[str] = []

    def add(heading: str, fig, target: str, note: str = "") -> None:
        sections.append(f"<h2>{html.escape(heading)}</h2>"
                        + (f'<p class="note">{html.escape(note)}</p>' if note else "")
                        + f'<div id="{target}" class="fig"></div>')
        embeds.append(_embed(fig, target))

    kw = {"pattern": pat_arg} if pat_arg is not None else {}
    add("Memory in use", memory_timeline(trace, result=main, budget=budget, **kw), "fig-memory",
        "Bytes allocated during each tick, stacked by block class; the dashed line is the budget"
        + ("; the black line is what the simulator kept on the device." if main is not None else "."))
    add("Block lifetimes" + (" and planned transfers" if plan is not None else ""),
        lifetimes(trace, plan=plan, **kw), "fig-lifetimes",
        "One row per block in allocation order. Zoom in to scrub through an iteration.")
    shown = [main] + [r for r in sims if str(r.policy) == "demand" and r is not main] if main else []
    for i, r in enumerate(shown):
        tag = f" ({r.policy})"
        add("Copy engines" + tag, copy_engines(r), f"fig-copy-{i}")
        add("Stalls" + tag, stalls(r), f"fig-stalls-{i}")
    if not sims:
        sections.append('<h2>Simulation</h2><p class="note">No simulation results were given: '
                        'pass results=uvm_sched.sim.simulate(...) (or compare(...)) to see copy '
                        'engines, stalls and the policy table.</p>')
    if sims:
        sections.append("<h2>Results</h2>" + _results_table(sims))
    for j, df in enumerate(frames):
        sections.append("<h2>Policies side by side</h2>" + _frame_table(df))
        if {"policy", "budget_pct", "slowdown"} <= set(df.columns):
            add("Savings / slowdown frontier", frontier(df), f"fig-frontier-{j}")

    head_meta = _trace_summary(trace)
    if plan is not None:
        head_meta += "<br>" + _plan_summary(plan)
    if why:
        head_meta += "<br>" + html.escape(why)
    from .. import __version__

    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(page_title)}</title><style>{_CSS}</style>"
        f'<script type="text/javascript">{plotly.offline.get_plotlyjs()}</script></head>\n<body>'
        f"<h1>{html.escape(page_title)}</h1><p class=\"meta\">{head_meta}</p>\n"
        + "\n".join(sections)
        + f'\n<p class="note">Made by uvm_sched {html.escape(__version__)}. Simulated figures come '
          "from the simulator's hardware model, not from a GPU run.</p>\n"
        + "\n".join(embeds)
        + f"\n<script>{_LOADER}</script>\n</body></html>\n"
    )
