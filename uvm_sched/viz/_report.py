"""One HTML page with the figures of a trace, its plan and simulation results.

How the page gets plotly.js (``plotly=``): ``"inline"`` (default) carries the 4.8 MB bundle
in the page -- one file that opens offline; ``"file"`` loads it by a relative path from
``plotly-<version>.min.js`` beside the page (``write_plotly_js`` writes it; the version in
the name keeps a page from loading another plotly's bundle left in the folder) -- opens
offline, and the page itself stays small (the demo's default); ``"cdn"`` links it from
cdn.plot.ly -- small, needs the network.

The page reads top down as a reader acts on it: the verdict (how much slower than all
resident, at which budget) and *why* -- the binding constraint, from the figures of the
simulated run: how busy the link is, how much of the budget the device holds at its peak,
and what the stall is made of -- then the results table, then the figures. Every figure
shares one time axis, ms of the trace's device time (tick k, the k-th kernel, starts at the
sum of the earlier kernels' times; hovers give the tick and the op where the trace knows
it), so the memory, lifetimes, copy-engine and stall figures line up; the simulator's copies
and stalls are placed at the kernel they overlap. Long timelines are decimated (the largest
blocks, peak-preserving bins, coordinates rounded to 1 us), which the figures say; numbers
travel as compact typed arrays and plotly's template once per page (see ``_compact``).

Each figure is embedded as JSON in ``<script type="application/json" class="uvm-fig"
data-target="ID">`` and drawn by a few lines of script at the end of the page, so the page is
plain data a program can read back (the tests do).
"""
from __future__ import annotations

import base64
import html
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .._fmt import fmt_bytes, fmt_ms
from ..trace._model import EventKind, Trace
from . import _data
from ._figures import _backend, copy_engines, frontier, lifetimes, memory_timeline, stalls, trace_name

PLOTLY_MODES = ("inline", "file", "cdn")  # how the report gets plotly.js (module docstring)

_CSS = """
body{font-family:Helvetica,Arial,sans-serif;margin:24px auto;max-width:1200px;color:#222;padding:0 16px}
h1{font-size:22px;margin-bottom:4px} h2{font-size:17px;margin:28px 0 6px;border-bottom:1px solid #ddd}
.meta{color:#555;font-size:13px;line-height:1.5} .note{color:#666;font-size:13px}
.verdict{font-size:15px;line-height:1.5;background:#f7f7f2;border-left:4px solid #1B7837;padding:8px 14px}
.verdict.slow{border-left-color:#D62728} .verdict ul{margin:4px 0 0 0;padding-left:20px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
th,td{border:1px solid #ddd;padding:4px 8px;text-align:right} th{background:#f4f4f4}
td:first-child,th:first-child{text-align:left} .fig{width:100%}
"""

_LOADER = """
var uvmTemplate = JSON.parse(document.getElementById('uvm-template').textContent);
document.querySelectorAll('script.uvm-fig').forEach(function (s) {
  var f = JSON.parse(s.textContent);
  f.layout.template = uvmTemplate;
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
    head = ["policy", "budget", "iteration", "slowdown vs ideal", "stall",
            "fault / eviction / link / host stall",
            "host→device", "device→host", "faults", "peak resident", "divergences"]
    rows = []
    for r in sims:
        if ideal is not None:
            slow = r.slowdown(ideal) if hasattr(r, "slowdown") else r.iteration_time_s / ideal.iteration_time_s
            slow_s = f"{slow:.3f}×"
        else:
            slow_s = "(no ideal run)"
        sb = getattr(r, "stall_breakdown", {}) or {}
        if str(r.policy) == "bound":  # a limit, not a run: nothing faster is possible
            rows.append(["bound (no schedule beats it)", fmt_bytes(r.budget_bytes),
                         "≥ " + fmt_ms(float(r.iteration_time_s)), "≥ " + slow_s,
                         "≥ " + fmt_ms(float(r.stall_time_s)), "-",
                         "≥ " + fmt_bytes(r.bytes_h2d), "≥ " + fmt_bytes(r.bytes_d2h), "-", "-",
                         "-"])
            continue
        rows.append([
            str(r.policy), fmt_bytes(r.budget_bytes), fmt_ms(float(r.iteration_time_s)), slow_s,
            fmt_ms(float(r.stall_time_s)),
            " / ".join(fmt_ms(float(sb.get(k, 0.0))) for k in _data.STALL_COLUMNS),
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
    fmt: dict[str, Callable[[Any], str]] = {
           "budget_bytes": fmt_bytes, "bytes_h2d": fmt_bytes, "bytes_d2h": fmt_bytes,
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
        f"{trace.n_events:,} events", f"{trace.n_ticks:,} ticks", f"{n_blocks:,} allocations (blocks, all iterations)",
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


_DECIMALS = 3  # ms coordinates rounded to 1 us: what a reader can tell apart, and short JSON


# -- what the page carries ---------------------------------------------------------------------
# Numbers travel as plotly's typed arrays (base64): whole numbers in the smallest integer type
# that holds them, the rest as float32 where that changes no value a reader sees, else
# float64. Positions (x, width, base) are ms on the 1 us grid (_DECIMALS) and hovers print
# them with 3 decimals: float32 moves such a value by less than half a us up to 16 s of
# device time, so it prints the same; other numbers (bytes in GiB/MiB, stall ms) print
# with at most 4 decimals.
_F32_TOL = {"x": 0.5 * 10.0 ** -_DECIMALS, "width": 0.5 * 10.0 ** -_DECIMALS,
            "base": 0.5 * 10.0 ** -_DECIMALS}
_F32_TOL_OTHER = 5e-5
_INT_TYPES = (np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32)


def _smallest(a: np.ndarray, tol: float) -> np.ndarray:
    """``a`` in the smallest dtype that moves no value by more than ``tol``."""
    if a.dtype.kind == "f":
        finite = np.isfinite(a)
        if not (finite.all() and np.array_equal(a, np.round(a))):
            f32 = a.astype(np.float32)
            err = np.abs(f32[finite].astype(np.float64) - a[finite])
            return f32 if not err.size or float(err.max()) < tol else a
    lo, hi = a.min(), a.max()
    for t in _INT_TYPES:
        info = np.iinfo(t)
        if info.min <= lo and hi <= info.max:
            return a.astype(t)
    return a.astype(np.float64)  # plotly.js reads no 64-bit integers


def _compact(values: Any, key: str = "") -> Any:
    """A trace attribute (``key``: x, y, customdata...) as plotly.js's typed array spec
    (``{"dtype", "bdata", "shape"}``, how plotly writes numpy arrays) in the smallest dtype;
    anything but a numeric array (lists with ``None`` gaps, strings) is returned as is."""
    if isinstance(values, dict) and "bdata" in values and "dtype" in values:
        shape = tuple(int(n) for n in str(values.get("shape", "-1")).split(","))
        values = np.frombuffer(base64.b64decode(values["bdata"]),
                               dtype=np.dtype(values["dtype"]).newbyteorder("<")).reshape(shape)
    if not isinstance(values, np.ndarray) or values.dtype.kind not in "fiu" or not values.size:
        return values
    a = _smallest(values, _F32_TOL.get(key, _F32_TOL_OTHER))
    spec = {"dtype": a.dtype.str.lstrip("<|"),
            "bdata": base64.b64encode(a.astype(a.dtype.newbyteorder("<")).tobytes()).decode()}
    if a.ndim > 1:
        spec["shape"] = ", ".join(str(n) for n in a.shape)
    return spec


def _figure_json(fig) -> tuple[str, Any]:
    """(the figure as JSON without its template, the template): the template (plotly_white,
    ~7 KB) is the same for every figure, so the page carries it once (``uvm-template``)."""
    from plotly.io.json import to_json_plotly

    d = fig.to_plotly_json()
    template = d["layout"].pop("template", None)
    for tr in d["data"]:
        for key, v in tr.items():
            tr[key] = _compact(v, key)
    return to_json_plotly(d), template


def _script_json(text: str) -> str:
    # "</" inside JSON would end the <script> element early; "<\/" is the same JSON string.
    return text.replace("</", "<\\/")


def _embed(fig, target: str) -> tuple[str, Any]:
    data, template = _figure_json(fig)
    return (f'<script type="application/json" class="uvm-fig" data-target="{target}">'
            f"{_script_json(data)}</script>", template)


# -- one time axis ----------------------------------------------------------------------------


class _Clock:
    """Ticks <-> ms of the trace's device time: tick k starts at ``edges[k]`` ms (fractional
    ticks interpolate within their kernel). ``ok`` is False when some tick's time is unknown
    (an imported snapshot): the figures then stay in ticks, and the page says so."""

    def __init__(self, trace: Trace) -> None:
        t = np.asarray(trace.tick_ns, dtype=np.float64)
        self.n = int(trace.n_ticks)
        self.ok = bool(len(t)) and bool(np.isfinite(t).all())
        self.edges = np.concatenate([[0.0], np.cumsum(t)]) / 1e6 if self.ok else None
        names = trace.meta.get("block_names")
        self.names = ({int(k): str(v) for k, v in names.items()}
                      if isinstance(names, Mapping) else {})
        ops = trace.meta.get("tick_ops")
        self.ops = None
        if isinstance(ops, Mapping) and len(ops.get("index", ())) == self.n:
            names = list(ops["names"])
            self.ops = [names[i] for i in ops["index"]]

    def ms(self, ticks) -> np.ndarray:
        assert self.edges is not None, "ms() of a trace without a clock"  # callers check ok
        x = np.asarray(ticks, dtype=np.float64)
        return np.round(np.interp(x, np.arange(self.n + 1, dtype=np.float64), self.edges),
                        _DECIMALS)

    def ms_list(self, xs) -> list:
        """A polyline's x (None gaps kept: plotly breaks lines there) in ms."""
        xs = list(xs)
        idx = [i for i, v in enumerate(xs) if v is not None]
        if idx:
            conv = self.ms([xs[i] for i in idx]).tolist()
            for i, v in zip(idx, conv):
                xs[i] = v
        return xs

    def op(self, tick) -> str:
        if self.ops is None or tick is None or not np.isfinite(tick):
            return ""
        k = int(tick)
        return self.ops[k] if 0 <= k < self.n else ""

    @property
    def total_ms(self) -> float:
        return float(self.edges[-1]) if self.edges is not None else float(self.n)


_AXIS_MS = "time (ms of device time; tick k = the k-th kernel, hover for it and its op)"


def _retime_ticks(fig, clock: _Clock, kind: str) -> None:
    """Memory / lifetimes / stall figures: x from ticks to ms, hovers naming tick and op."""
    for tr in fig.data:
        if tr.x is None:
            continue
        raw = list(tr.x)
        is_list = any(v is None for v in raw)
        ticks = np.array([np.nan if v is None else float(v) for v in raw])
        tr.x = clock.ms_list(raw) if is_list else clock.ms(ticks)
        tmpl = tr.hovertemplate or ""
        if kind == "lifetimes" and str(tr.name).endswith("(accessed)"):
            # a point per access span: naming tick and op on each would double the page;
            # the block's own row (live) carries them
            tr.hovertemplate = "accessed by the kernel here (%{x:.3f} ms)<extra></extra>"
            continue
        ops = [clock.op(t) for t in ticks] if clock.ops is not None else None
        if kind == "memory" and "(t=%{customdata:.3f} ms)" in tmpl:
            tr.customdata = ticks
            tmpl = tmpl.replace("tick %{x} (t=%{customdata:.3f} ms)",
                                "%{x:.3f} ms, tick %{customdata:.0f}")
        elif "tick %{x}" in tmpl and tr.customdata is None:
            tr.customdata = ticks
            tmpl = tmpl.replace("tick %{x}", "tick %{customdata:.0f} (%{x:.3f} ms)")
        # the block's name and op on its row; plan marks (markers) keep their action text
        if (kind == "lifetimes" and tr.mode != "markers" and "customdata[2]" in tmpl
                and tr.customdata is not None):
            cd = np.asarray(tr.customdata, dtype=np.float64)
            if cd.ndim == 2 and cd.shape[1] > 2 and (clock.ops is not None or clock.names):
                def label(b, t) -> str:
                    name = clock.names.get(int(b)) if np.isfinite(b) else None
                    op = clock.op(t)
                    return ", ".join(x for x in (name, f"allocated by {op}" if op else "") if x)

                tr.text = [label(b, t) for b, t in zip(cd[:, 0], cd[:, 2])]
                tmpl = tmpl.replace("<extra>", "<br>%{text}<extra>")
                ops = None
        if kind == "lifetimes" and tr.mode == "markers":
            ops = None  # plan marks: their text is the action
        if ops is not None and tmpl and "%{text}" not in tmpl:
            tr.text = ops
            tmpl = tmpl.replace("<extra>", "<br>op %{text}<extra>")
        if tmpl:
            tr.hovertemplate = tmpl
    shapes = []
    for sh in fig.layout.shapes or ():
        if sh.xref in (None, "x"):
            sh.x0, sh.x1 = (float(v) for v in clock.ms([sh.x0, sh.x1]))
        shapes.append(sh)
    fig.layout.shapes = shapes
    for an in fig.layout.annotations or ():
        if an.xref in (None, "x") and an.x is not None:
            an.x = float(clock.ms([an.x])[0])


def _retime_stalls(fig, clock: _Clock) -> None:
    """Stall bars at their kernel's start, as wide as the kernels they cover (bins too); the
    compute line names the tick and op (the hover box lists every trace at that time)."""
    for tr in fig.data:
        ticks = np.asarray(tr.x, dtype=np.float64)
        if not len(ticks):
            continue
        tr.x = clock.ms(ticks)
        if tr.type == "bar":
            nxt = np.append(ticks[1:], ticks[-1] + 1)
            tr.width = np.maximum(clock.ms(nxt) - tr.x, 10.0 ** -_DECIMALS)
            tr.offset = 0
            continue
        tr.customdata = ticks
        tr.hovertemplate = (tr.hovertemplate or "").replace(
            "tick %{x}", "tick %{customdata:.0f} (%{x:.3f} ms)")
        if clock.ops is not None:
            tr.text = [clock.op(t) for t in ticks]
            tr.hovertemplate = tr.hovertemplate.replace("<extra>", "<br>op %{text}<extra>")
    _one_hover_box(fig, next((tr for tr in fig.data if tr.type != "bar"), None))


def _one_hover_box(fig, keep) -> None:
    """One hover box per time listing every trace there (plotly's "x unified"), the tick and
    op said once, by the trace ``keep``: the other traces' hovers keep their first line (the
    value) and drop their per-point tick and op arrays -- stacked traces would otherwise
    each carry the same ones."""
    fig.update_layout(hovermode="x unified")
    fig.update_xaxes(hoverformat=".3f")
    for tr in fig.data:
        tmpl = tr.hovertemplate or ""
        if tr is keep or "<br>" not in tmpl:
            continue
        tr.hovertemplate = tmpl.split("<br>", 1)[0] + "<extra></extra>"
        tr.text = None
        tr.customdata = None


def _retime_copies(fig, clock: _Clock, result) -> None:
    """Copy-engine bars from the simulated clock to the kernel they overlap: simulated time
    -> fractional tick of the window (each tick lasts compute + stall there) -> ms."""
    tl = result.timeline
    if tl is None or not len(tl):
        return
    t0 = float(tl["start_s"].min())
    start = (tl["start_s"].to_numpy(float) - t0) * 1e3
    end = start + (tl["compute_s"].to_numpy(float) + tl["stall_s"].to_numpy(float)) * 1e3
    ticks = tl["tick"].to_numpy(np.float64)
    sim_edges = np.append(start, end[-1])
    tick_edges = np.append(ticks, ticks[-1] + 1)
    for tr in fig.data:
        if tr.x is None:
            continue
        raw = list(tr.x)
        idx = [i for i, v in enumerate(raw) if v is not None]
        if idx:
            frac = np.interp([raw[i] for i in idx], sim_edges, tick_edges)
            for i, v in zip(idx, clock.ms(frac).tolist()):
                raw[i] = v
        tr.x = raw
        if tr.hovertemplate:
            tr.hovertemplate = tr.hovertemplate.replace(
                "<br>%{x:.3f} ms, lasts", "<br>beside the kernel at %{x:.3f} ms; lasts")


def _axes(fig, clock: _Clock, x_range: tuple[float, float]) -> None:
    fig.update_xaxes(title_text=_AXIS_MS, range=list(x_range))


# -- the verdict --------------------------------------------------------------------------------
def _verdict(trace: Trace, sims: list[Any], main: Any, budget: Any) -> str:
    """The verdict and its why, in words: slowdown, the bound, link busy share, the budget's
    headroom at the peak, and the stall and copies by cause."""
    if main is None:
        return ""
    ideal = next((r for r in sims if str(r.policy) == "ideal"), None)
    bound = next((r for r in sims if str(r.policy) == "bound"), None)
    B = int(getattr(main, "budget_bytes", 0) or budget or 0)
    peak = int(trace.peak_bytes)
    slow = main.slowdown(ideal) if ideal is not None else None
    head = (f"{main.policy}: {fmt_ms(float(main.iteration_time_s))} per iteration"
            + (f", {slow:.2f}× the all-resident {fmt_ms(float(ideal.iteration_time_s))}"
               if slow is not None and ideal is not None else "")
            + (f", holding {fmt_bytes(B)} ({B / peak:.0%} of the peak {fmt_bytes(peak)})"
               if peak and B else ""))
    why: list[str] = []
    if bound is not None and ideal is not None:
        bslow = bound.slowdown(ideal)
        why.append(f"No schedule can beat {fmt_ms(float(bound.iteration_time_s))} "
                   f"({bslow:.2f}×) at this budget on {bound.hw}: at least "
                   f"{fmt_bytes(bound.bytes_h2d)} must cross the link; this run is "
                   f"{float(main.iteration_time_s) / max(float(bound.iteration_time_s), 1e-12):.2f}× "
                   "that bound.")
    _, busy, _ = _data.transfer_lanes(main)
    link = max(busy.values()) if busy else 0.0
    resident = int(main.peak_resident_bytes)
    headroom = 1 - resident / B if B else 0.0
    tr = main.transfers
    by_cause = ""
    if tr is not None and len(tr):
        g = tr.groupby("cause", observed=True)["bytes"].agg(["count", "sum"])
        by_cause = "; copies by cause: " + ", ".join(
            f"{c} {int(r['count']):,} ({fmt_bytes(int(r['sum']))})" for c, r in g.iterrows())
    sb = {k: float(v) for k, v in (getattr(main, "stall_breakdown", None) or {}).items()}
    stall = float(main.stall_time_s)
    parts = ", ".join(f"{k} {fmt_ms(v)}" for k, v in sb.items() if v > 0) or "none"
    why.append(f"Link busy {busy.get('h2d', 0):.0%} host→device, {busy.get('d2h', 0):.0%} "
               f"device→host of the iteration; the device holds at most {fmt_bytes(resident)} "
               f"of its {fmt_bytes(B)} budget ({headroom:.0%} headroom); stall "
               f"{fmt_ms(stall)} ({parts}); {int(main.faults):,} fault batches{by_cause}.")
    if slow is not None and slow <= 1.05:
        why.append("The transfers hide behind compute: this budget costs (almost) nothing.")
    elif link >= 0.8 and headroom >= 0.25:
        why.append(f"Binding constraint: the link ({link:.0%} busy) while {headroom:.0%} of the "
                   "budget stays unused at the peak -- the schedule moves data it had room to "
                   "keep. A plan that sees the accesses (sampled mode), another guard "
                   "(tune=...), or a larger budget moves less.")
    elif link >= 0.8:
        why.append(f"Binding constraint: the link ({link:.0%} busy) with the budget full: the "
                   "bytes that must move set the pace. A larger budget or a faster link "
                   "(e.g. a C2C profile) is what helps.")
    elif sb and max(sb, key=lambda k: sb[k]) == "fault" and sb["fault"] > 0.5 * stall:
        why.append("Binding constraint: demand faults -- blocks touched before a prefetch "
                   "brought them in, paid at fault-batch latency. Reads in the middle of a "
                   "lifetime are invisible to the oblivious mode; sampled mode sees them.")
    elif sb and max(sb, key=lambda k: sb[k]) == "host" and sb["host"] > 0.5 * stall:
        why.append(f"Binding constraint: the host -- kernels wait {fmt_ms(sb['host'])} for "
                   "the launching thread, busy with the plan's prefetch and advise calls "
                   "(hw.action_call_s each): a plan with fewer actions, or none, is "
                   "faster here (`uvm-sched compare` shows both).")
    elif sb and max(sb, key=lambda k: sb[k]) == "eviction" and sb["eviction"] > 0.5 * stall:
        why.append("Binding constraint: evictions -- kernels wait for room on the device "
                   "while copies out are still running.")
    elif sb and max(sb, key=lambda k: sb[k]) == "link" and sb["link"] > 0.5 * stall:
        why.append(f"Binding constraint: waiting for copies in flight ({fmt_ms(sb['link'])} of "
                   f"the stall) while the link is busy only {link:.0%} of the iteration -- the "
                   "copies bunch up where the plan can issue them and start too late for "
                   "their kernel. Sampled mode, another guard (tune=...) or a larger budget "
                   "may let them start earlier: `uvm-sched compare` says which.")
    else:
        why.append("Binding constraint: neither the link nor faults dominate; the stall is "
                   "spread over many short waits (see the stall figure).")
    cls = "verdict" + (" slow" if slow is not None and slow > 1.05 else "")
    items = "".join(f"<li>{html.escape(w)}</li>" for w in why)
    return (f'<h2>Verdict</h2><div class="{cls}"><b>{html.escape(head)}</b>'
            f"<ul>{items}</ul></div>")


def plotly_js_name() -> str:
    """The file name a ``plotly="file"`` report loads plotly.js from (beside the page)."""
    _backend("plotly")
    from plotly import offline

    return f"plotly-{offline.get_plotlyjs_version()}.min.js"


def write_plotly_js(folder: str | Path = ".") -> Path:
    """Write the plotly.js bundle (~4.8 MB) into ``folder`` under ``plotly_js_name()``: the
    file a page made with ``report(..., plotly="file")`` in that folder loads. A file already
    there with the same bytes is kept; otherwise it is written whole or not at all
    (``uvm_sched._files``). Returns its path. Raises ``OSError`` when it cannot be written."""
    from plotly import offline

    from .._files import write_atomic

    path = Path(folder) / plotly_js_name()
    data = offline.get_plotlyjs().encode("utf-8")
    if not (path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data):
        write_atomic(path, data)
    return path


def report(trace: Trace, *, plan: Any = None, results: Any = None, title: str | None = None,
           pattern: Any = None, max_blocks: int = 2_000, max_points: int = 2_000,
           plotly: str = "inline") -> str:
    """One HTML page, returned as a string. ``plotly``: ``"inline"`` carries plotly.js in the
    page (one file, no network needed to view it); ``"file"`` loads it from
    ``plotly_js_name()`` beside the page -- write it there with ``write_plotly_js(folder)``;
    the page is ~4.8 MB smaller and still opens offline; ``"cdn"`` links it from cdn.plot.ly
    (small, needs the network). From the top: the verdict and why (slowdown, the
    lower bound when a ``bound`` result is given, link busy share, the budget's headroom at the
    peak, stall and copies by cause, and the binding constraint in words), the table of all
    results, then memory in use over time by class with the budget; block lifetimes with the
    plan's transfers; copy-engine occupancy and stalls of the simulated ``uvm-sched`` run (or
    the first non-ideal one) and of ``demand`` when given; and the savings/slowdown frontier
    when a ``compare`` frame is given. All figures share one time axis in ms of the trace's
    device time (see the module docstring).

    ``plan``: a ``Plan``; ``results``: a ``SimResult``, a list or dict of them, and/or a
    ``uvm_sched.sim.compare`` frame (in a list with the SimResults). ``max_blocks``: the
    lifetime chart draws the largest this many blocks; ``max_points``: memory and stall
    timelines keep this many (peak-preserving) points, copy-engine figures this many bars
    (close transfers merged) -- both keep the page small, and the figures say what they left
    out. The page does not simulate: without results it shows
    the trace (and plan) only, and says so."""
    if plotly not in PLOTLY_MODES:
        raise ValueError(f"plotly must be one of {', '.join(PLOTLY_MODES)}, not {plotly!r}")
    _backend("plotly")
    plotly_js = _plotly_script(plotly)
    sims, frames = _split_results(results)
    pat, why = _data.get_pattern(trace, pattern)
    main = _primary(sims)
    budget = plan.meta["budget_bytes"] if plan is not None else None
    clock = _Clock(trace)
    top = _top(trace, sims, frames, main, budget, clock)
    figs = _Figures(clock)
    kw = {"pattern": pat} if pat is not None else {}
    _draw(figs, trace, plan, sims, frames, main, budget, kw, max_blocks, max_points)
    head_meta = _trace_summary(trace)
    if plan is not None:
        head_meta += "<br>" + _plan_summary(plan)
    if why:
        head_meta += "<br>" + html.escape(why)
    return _page(title or f"uvm_sched report: {trace_name(trace)}", plotly_js, head_meta,
                 top, figs)


def _plotly_script(plotly: str) -> str:
    """The page's ``<script>`` that provides plotly.js in mode ``plotly`` (see ``report``)."""
    from plotly import offline  # not `import plotly.offline`: it would rebind `plotly`

    if plotly == "inline":
        return f'<script type="text/javascript">{offline.get_plotlyjs()}</script>'
    if plotly == "file":
        return f'<script src="{plotly_js_name()}" charset="utf-8"></script>'
    # the version this plotly writes figures for
    return ('<script src="https://cdn.plot.ly/plotly-'
            f'{offline.get_plotlyjs_version()}.min.js" charset="utf-8"></script>')


def _top(trace: Trace, sims: list, frames: list, main: Any, budget: Any,
         clock: "_Clock") -> list[str]:
    """The page's blocks above the figures: the verdict, the results and policy tables (or
    a note that no results were given), and what the shared time axis means."""
    top: list[str] = []
    if sims:
        top.append(_verdict(trace, sims, main, budget))
        top.append("<h2>Results</h2>" + _results_table(sims))
    else:
        top.append('<h2>Simulation</h2><p class="note">No simulation results were given: '
                   'pass results=uvm_sched.sim.simulate(...) (or compare(...)) to see the '
                   'verdict, copy engines, stalls and the policy table.</p>')
    for df in frames:
        top.append("<h2>Policies side by side</h2>" + _frame_table(df))
    if clock.ok:
        top.append('<p class="note">One time axis for every figure: ms of the trace\'s device '
                   f"time, {clock.n:,} ticks over {fmt_ms(clock.total_ms / 1e3)} (tick k = the "
                   "k-th kernel; it starts at the sum of the earlier kernels' times). Simulated "
                   "copies and stalls sit at the kernel they overlap; hovers give simulated "
                   "durations.</p>")
    else:
        top.append('<p class="note">Some ticks of this trace have no device time, so the '
                   "figures' x axes are in ticks (one kernel each).</p>")
    return top


class _Figures:
    """The page's figures in order: each one's heading and ``<div>``, its embedding script
    and its plotly template, all on the trace's one time axis (``clock``)."""

    def __init__(self, clock: "_Clock") -> None:
        self.clock = clock
        self.x_range = (0.0, clock.total_ms)
        self.sections: list[str] = []
        self.embeds: list[str] = []
        self.templates: list[Any] = []

    def add(self, heading: str, fig, target: str, note: str = "") -> None:
        self.sections.append(f"<h2>{html.escape(heading)}</h2>"
                             + (f'<p class="note">{html.escape(note)}</p>' if note else "")
                             + f'<div id="{target}" class="fig"></div>')
        embed, template = _embed(fig, target)
        self.embeds.append(embed)
        self.templates.append(template)

    def timed(self, fig, kind: str, result=None):
        """``fig`` moved from ticks onto the ms axis (when the trace has device times)."""
        clock = self.clock
        if not clock.ok:
            return fig
        if kind == "copies":
            _retime_copies(fig, clock, result)
        elif kind == "stalls":
            _retime_stalls(fig, clock)
        else:
            _retime_ticks(fig, clock, kind)
            if kind == "memory":
                _one_hover_box(fig, next((tr for tr in fig.data if tr.stackgroup), None))
        _axes(fig, clock, self.x_range)
        return fig


def _draw(figs: _Figures, trace: Trace, plan: Any, sims: list, frames: list, main: Any,
          budget: Any, kw: dict, max_blocks: int, max_points: int) -> None:
    """Adds the report's figures to ``figs``: memory, lifetimes, then copy engines and
    stalls of ``main`` and of ``demand``, then a frontier per ``compare`` frame."""
    add, timed = figs.add, figs.timed
    add("Memory in use",
        timed(memory_timeline(trace, result=main, budget=budget, max_points=max_points, **kw),
              "memory"), "fig-memory",
        "Bytes allocated during each kernel, stacked by block class; the dashed line is the budget"
        + ("; the black line is what the simulator kept on the device." if main is not None else "."))
    add("Block lifetimes" + (" and planned transfers" if plan is not None else ""),
        timed(lifetimes(trace, plan=plan, max_blocks=max_blocks, **kw), "lifetimes"),
        "fig-lifetimes",
        "One row per block in allocation order. Zoom in to scrub through an iteration.")
    shown = [main] + [r for r in sims if str(r.policy) == "demand" and r is not main] if main else []
    for i, r in enumerate(shown):
        tag = f" ({r.policy})"
        add("Copy engines" + tag, timed(copy_engines(r, max_transfers=max_points), "copies", r),
            f"fig-copy-{i}")
        add("Stalls" + tag, timed(stalls(r, max_points=max_points), "stalls"), f"fig-stalls-{i}")
    for j, df in enumerate(frames):
        if {"policy", "budget_pct", "slowdown"} <= set(df.columns):
            add("Savings / slowdown frontier", frontier(df), f"fig-frontier-{j}")


def _page(page_title: str, plotly_js: str, head_meta: str, top: list[str],
          figs: _Figures) -> str:
    """The HTML page: head, the blocks above the figures, the figures and their scripts."""
    from plotly.io.json import to_json_plotly

    from .. import __version__

    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(page_title)}</title><style>{_CSS}</style>"
        f"{plotly_js}</head>\n<body>"
        f"<h1>{html.escape(page_title)}</h1><p class=\"meta\">{head_meta}</p>\n"
        + "\n".join(top + figs.sections)
        + f'\n<p class="note">Made by uvm_sched {html.escape(__version__)}. Simulated figures come '
          "from the simulator's hardware model, not from a GPU run.</p>\n"
        + "\n".join(figs.embeds)
        + '\n<script type="application/json" id="uvm-template">'
        + _script_json(to_json_plotly(figs.templates[0] if figs.templates else {})) + "</script>"
        + f"\n<script>{_LOADER}</script>\n</body></html>\n"
    )
