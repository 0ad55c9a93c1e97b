"""The public figure functions: prepare the numbers (``_data``), then draw them with the chosen
backend (``_plotly`` interactive, ``_mpl`` static). Plotting libraries are imported lazily."""
from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pandas as pd

from .._budget import resolve_budget
from .._fmt import byte_unit, fmt_bytes, fmt_ms
from ..trace._model import Trace
from . import _data

BACKENDS = ("plotly", "matplotlib")

_NEEDS = {"plotly": ("plotly", "plotly>=5"), "matplotlib": ("matplotlib", "matplotlib>=3.7")}


def _backend(backend: str):
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    mod, req = _NEEDS[backend]
    try:
        importlib.import_module(mod)
    except ImportError:
        other = "matplotlib" if backend == "plotly" else "plotly"
        raise ImportError(
            f"uvm_sched.viz needs {mod} for backend={backend!r}: pip install 'uvm_sched[viz]' "
            f"(or '{req}'), or pass backend={other!r}") from None
    return importlib.import_module("._plotly" if backend == "plotly" else "._mpl", __package__)


def _draw(draw: Any, name: str, spec: dict) -> Any:
    """``draw.<name>(spec)``; a plotly figure also gets its static twin (``_plotly.Figure``)."""
    fig = getattr(draw, name)(spec)
    if hasattr(draw, "with_static_twin"):
        fig = draw.with_static_twin(fig, name, spec)
    return fig


def trace_name(trace: Trace) -> str:
    m = trace.meta
    name = m.get("name") or m.get("model") or m.get("source") or "trace"
    if m.get("batch"):
        name = f"{name} (batch {m['batch']})"
    return str(name)


def _result_label(result: Any) -> str:
    pol = getattr(result, "policy", "?")
    b = getattr(result, "budget_bytes", None)
    return f"{pol}" + (f" at budget {fmt_bytes(b)}" if b else "")


def _check_result(result: Any, need: tuple[str, ...]) -> None:
    missing = [n for n in need if not hasattr(result, n)]
    if missing:
        raise TypeError(
            f"expected a SimResult from uvm_sched.sim.simulate, got {type(result).__name__} "
            f"without {', '.join(missing)}")


def memory_timeline(trace: Trace, *, result: Any = None, budget: Any = None,
                    backend: str = "plotly", pattern: Any = None, max_points: int = 10_000) -> Any:
    """Bytes in use over ticks, stacked by block class (persistent, activation, workspace,
    transient), with the budget as a line and, given a ``SimResult``, the simulated
    device-resident bytes over its measured window.

    ``budget``: anything ``resolve_budget`` reads (bytes, "40GiB", "50%" of the trace's
    peak); default: ``result.budget_bytes``. ``pattern``: a ``uvm_sched.pattern.analyze``
    result to reuse for the classes. Above ``max_points`` ticks each bin shows its peak tick
    (said on the figure); the same for the simulated line above ``max_points`` ticks. Y axis in GiB/MiB, x axis in ticks (hover: device time in ms).
    Returns a plotly ``Figure`` or a matplotlib ``Figure``."""
    draw = _backend(backend)
    pat, why = _data.get_pattern(trace, pattern)
    classes, cnote = _data.block_classes(trace, pat, why)
    mem = _data.memory_by_class(trace, classes)
    mem_ds, dnote = _data.downsample_peaks(mem, max_points)
    budget_bytes = None
    if budget is not None:
        budget_bytes = resolve_budget(budget, trace.peak_bytes)
    elif result is not None and getattr(result, "budget_bytes", None):
        budget_bytes = int(result.budget_bytes)
    resident, rnote = None, None
    if result is not None:
        _check_result(result, ("timeline", "policy"))
        tl = result.timeline
        res = pd.DataFrame({"bytes": tl["resident_bytes"].to_numpy(np.float64)},
                           index=tl["tick"].to_numpy())
        res, rnote = _data.downsample_peaks(res, max_points)
        rnote = rnote and f"device-resident line {rnote}"
        resident = (res.index.to_numpy(), res["bytes"].to_numpy(),
                    f"device-resident, simulated ({_result_label(result)})")
    top = max([trace.peak_bytes, budget_bytes or 0]
              + ([float(np.nanmax(resident[1]))] if resident is not None and len(resident[1]) else []))
    unit, div = byte_unit(top)
    ms = _data.cumulative_ms(trace)
    spec = {
        "title": f"Memory in use: {trace_name(trace)} (peak {fmt_bytes(trace.peak_bytes)})",
        "notes": [n for n in (cnote, dnote, rnote) if n],
        "ticks": mem_ds.index.to_numpy(),
        "ms": ms[mem_ds.index.to_numpy()] if len(ms) else ms,
        "series": {c: mem_ds[c].to_numpy() / div for c in mem_ds.columns},
        "unit": unit,
        "div": div,
        "n_ticks": trace.n_ticks,
        "budget": budget_bytes,
        "resident": None if resident is None else (resident[0], resident[1] / div, resident[2]),
        "marks": trace.iteration_starts,
    }
    return _draw(draw, "memory_timeline", spec)


def lifetimes(trace: Trace, *, plan: Any = None, max_blocks: int = 50_000, backend: str = "plotly",
              pattern: Any = None) -> Any:
    """Block lifetime chart: one row per block in allocation order, a faint bar from its
    allocation to its free, solid where the kernel accesses it (so idle gaps show), coloured
    by class; with a ``Plan``, its prefetch/evict/discard/advise actions as marks where the
    executor fires them. Above ``max_blocks`` blocks only the largest are drawn (said on the
    figure). X axis in ticks. Returns a plotly or matplotlib ``Figure``."""
    draw = _backend(backend)
    if max_blocks < 1:
        raise ValueError(f"max_blocks must be at least 1, got {max_blocks}")
    pat, why = _data.get_pattern(trace, pattern)
    classes, cnote = _data.block_classes(trace, pat, why)
    lt, lnote = _data.lifetime_table(trace, classes, max_blocks)
    spans, snote = _data.busy_spans(trace, lt["block"].to_numpy())
    y_of = dict(zip(lt["block"].to_numpy().tolist(), lt["y"].to_numpy().tolist()))
    if len(spans):
        spans = spans.assign(y=spans["block"].map(y_of),
                             cls=spans["block"].map(dict(zip(lt["block"], lt["cls"]))))
    marks, mnote, title_plan = None, None, ""
    if plan is not None:
        marks, mnote = _data.plan_marks(trace, plan, pat, why)
        marks = marks[marks["block"].isin(lt["block"])]
        marks = marks.assign(y=marks["block"].map(y_of))
        title_plan = (f", plan for {fmt_bytes(plan.meta['budget_bytes'])} "
                      f"({len(plan):,} actions/iteration)")
    unit, div = byte_unit(lt["size"].max() if len(lt) else 0)
    spec = {
        "title": f"Block lifetimes: {trace_name(trace)}{title_plan}",
        "notes": [n for n in (lnote, cnote, snote, mnote) if n],
        "blocks": lt,
        "spans": spans,
        "marks": marks,
        "unit": unit,
        "div": div,
        "n_ticks": trace.n_ticks,
    }
    return _draw(draw, "lifetimes", spec)


def copy_engines(result: Any, *, backend: str = "plotly", max_transfers: int = 100_000) -> Any:
    """Copy-engine occupancy per direction over the simulator's measured window: one bar per
    transfer (host->device above, device->host below; overlapping transfers on separate
    lanes), coloured by cause (plan, fault, evict, alloc); the title gives each direction's
    busy share. X axis in ms from the window start. Returns a plotly or matplotlib ``Figure``."""
    draw = _backend(backend)
    _check_result(result, ("transfers", "timeline", "iteration_time_s"))
    df, busy, note = _data.transfer_lanes(result, max_transfers)
    t0, t1 = _data.window(result)
    spec = {
        "title": (f"Copy engines: {_result_label(result)}; host→device busy {busy['h2d']:.0%}, "
                  f"device→host busy {busy['d2h']:.0%} of {fmt_ms(t1 - t0)}"),
        "notes": [note] if note else [],
        "transfers": df,
        "window_ms": (t1 - t0) * 1e3,
    }
    return _draw(draw, "copy_engines", spec)


def stalls(result: Any, *, backend: str = "plotly", max_points: int = 5_000) -> Any:
    """Stall time per tick of the measured window, stacked by cause (fault, eviction, link,
    host), in ms; the title gives the totals from ``result.stall_breakdown``. Returns a plotly or
    matplotlib ``Figure``."""
    draw = _backend(backend)
    _check_result(result, ("timeline", "stall_breakdown", "iteration_time_s"))
    df, note = _data.stall_table(result, max_points)
    sb = result.stall_breakdown
    parts = ", ".join(f"{k} {fmt_ms(float(sb.get(k, 0.0)))}" for k in _data.STALL_COLUMNS)
    spec = {
        "title": (f"Stalls: {_result_label(result)}; {fmt_ms(float(result.stall_time_s))} of "
                  f"{fmt_ms(float(result.iteration_time_s))} ({parts})"),
        "notes": [note] if note else [],
        "table": df,
    }
    return _draw(draw, "stalls", spec)


def frontier(compare_df, *, backend: str = "plotly") -> Any:
    """Memory saved (% of peak) against slowdown (x ideal) per policy, one line per policy
    across the budgets of a ``uvm_sched.sim.compare`` frame; ``ideal`` is drawn as the 1.0x
    line, and a point off the frontier (``uvm_sched.sim.savings_frontier``) as a hollow
    marker. Returns a plotly or matplotlib ``Figure``."""
    draw = _backend(backend)
    df = _data.frontier_table(compare_df)
    if not len(df):
        raise ValueError("frontier: the compare frame has no row with a finite slowdown")
    name = None
    if "trace" in compare_df.columns and compare_df["trace"].nunique() == 1:
        name = str(compare_df["trace"].iloc[0])
    table = df[df["policy"] != "ideal"]
    spec = {
        "title": "Memory saved vs slowdown" + (f": {name}" if name else "")
                 + " (lower right is better)",
        # the same frontier `uvm-sched compare` prints (uvm_sched.sim.savings_frontier)
        "notes": [] if table["frontier"].all() else
                 ["hollow: a budget that another budget of the same policy beats (it saves at "
                  "least as much and runs faster)"],
        "table": table,
    }
    return _draw(draw, "frontier", spec)
