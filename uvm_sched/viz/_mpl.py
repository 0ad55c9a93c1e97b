"""Matplotlib drawings of the specs built in ``_figures`` (static; imported only when used).

Figures are made with ``matplotlib.figure.Figure`` directly (not pyplot), so nothing is
opened on screen and no global state is touched; save with ``fig.savefig(path)``."""
from __future__ import annotations

import textwrap

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from .._fmt import fmt_bytes
from ._units import CAUSE_COLORS, CLASS_COLORS, MARK_STYLE, MPL_MARKERS, STALL_COLORS


def _figure(spec, height: float = 4.2, width: float = 10.0):
    lines = [ln for n in spec["notes"] for ln in textwrap.wrap(n, int(width * 13))]
    fig = Figure(figsize=(width, height + 0.2 * len(lines)), layout="constrained")
    ax = fig.add_subplot()
    title = spec["title"] + "".join("\n" + s for s in lines)
    ax.set_title(title, loc="left", fontsize=10)
    return fig, ax


def _legend_below(fig, handles) -> None:
    # below the axes, so it never hides the data (peaks are often top right)
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=min(4, len(handles)),
                   fontsize=8, frameon=False)


def memory_timeline(spec) -> Figure:
    fig, ax = _figure(spec)
    x = spec["ticks"]
    if len(x):
        xs = np.append(x, x[-1] + 1)
        labels = list(spec["series"])
        ys = [np.append(v, v[-1]) for v in spec["series"].values()]
        ax.stackplot(xs, *ys, labels=labels, step="post",
                     colors=[CLASS_COLORS[c] for c in labels], linewidth=0)
    if spec["resident"] is not None:
        tk, y, label = spec["resident"]
        if len(tk):
            ax.step(np.append(tk, tk[-1] + 1), np.append(y, y[-1]), where="post", color="black",
                    linewidth=1.2, label=label)
            ax.axvspan(tk.min(), tk.max() + 1, color="#DDDDDD", alpha=0.4, zorder=0)
    if spec["budget"]:
        b = spec["budget"] / spec["div"]
        ax.axhline(b, color="#D62728", linestyle="--", linewidth=1.5,
                   label=f"budget {fmt_bytes(spec['budget'])}")
    marks = spec["marks"]
    if 0 < len(marks) <= 100:
        for m in marks:
            ax.axvline(m, color="#888888", linewidth=0.6, linestyle=":")
    ax.set_xlim(0, max(1, spec["n_ticks"]))
    ax.set_ylim(bottom=0)
    ax.set_xlabel("tick (one kernel per tick; dotted: iteration starts)")
    ax.set_ylabel(f"memory in use ({spec['unit']})")
    _legend_below(fig, ax.get_legend_handles_labels()[0])
    ax.grid(axis="y", alpha=0.3)
    return fig


def lifetimes(spec) -> Figure:
    fig, ax = _figure(spec, height=5.5)
    lt, spans = spec["blocks"], spec["spans"]
    n = len(lt)
    lw = float(np.clip(300 / max(n, 1), 0.3, 8))
    handles = []
    for cls, color in CLASS_COLORS.items():
        sel = lt[lt["cls"] == cls]
        if not len(sel):
            continue
        segs = np.stack([np.stack([sel["start"], sel["y"]], 1), np.stack([sel["end"], sel["y"]], 1)], 1)
        # an (n, 2, 2) array is what LineCollection takes (its stubs say Sequence only)
        ax.add_collection(LineCollection(segs, colors=color, linewidths=lw, alpha=0.3))  # type: ignore[arg-type]
        handles.append(Line2D([], [], color=color, linewidth=4, label=cls))
        if len(spans):
            sp = spans[spans["cls"] == cls]
            if len(sp):
                segs = np.stack([np.stack([sp["start"], sp["y"]], 1), np.stack([sp["end"], sp["y"]], 1)], 1)
                ax.add_collection(LineCollection(segs.astype(float), colors=color,  # type: ignore[arg-type]
                                                 linewidths=lw))
    marks = spec["marks"]
    if marks is not None:
        for fam, (label, symbol, color) in MARK_STYLE.items():
            m = marks[marks["family"] == fam]
            if len(m):
                ax.scatter(m["x"], m["y"], marker=MPL_MARKERS[symbol], color=color, s=18, zorder=3,
                           linewidths=0.8)
                handles.append(Line2D([], [], marker=MPL_MARKERS[symbol], color=color, linestyle="",
                                      label=f"planned {label}"))
    ax.set_xlim(0, max(1, spec["n_ticks"]))
    ax.set_ylim(max(n, 1) - 0.5, -0.5)
    ax.set_xlabel("tick (faint: live but idle; solid: accessed by the tick's kernel)")
    ax.set_ylabel("block (allocation order)")
    _legend_below(fig, handles)
    return fig


def copy_engines(spec) -> Figure:
    fig, ax = _figure(spec, height=3.2)
    df = spec["transfers"]
    n_h2d = int(df.loc[df["direction"] == "h2d", "lane"].max() + 1) if (df["direction"] == "h2d").any() else 1
    n_d2h = int(df.loc[df["direction"] == "d2h", "lane"].max() + 1) if (df["direction"] == "d2h").any() else 1
    y = np.where(df["direction"] == "h2d", df["lane"], n_h2d + 0.6 + df["lane"]).astype(float)
    handles = []
    for cause in list(CAUSE_COLORS) + sorted(set(df["cause"]) - set(CAUSE_COLORS)):
        m = (df["cause"] == cause).to_numpy()
        if not m.any():
            continue
        color = CAUSE_COLORS.get(cause, "#17BECF")
        sub = df[m]
        ax.barh(y[m], sub["end_ms"] - sub["start_ms"], left=sub["start_ms"], height=0.8,
                color=color, linewidth=0)
        handles.append(Line2D([], [], color=color, linewidth=6, label=f"{cause} transfers"))
    if not len(df):
        ax.text(0.5, 0.5, "no transfers in the measured window", ha="center", transform=ax.transAxes)
    ticks = list(range(n_h2d)) + [n_h2d + 0.6 + i for i in range(n_d2h)]
    ax.set_yticks(ticks, [f"host→device {i}" for i in range(n_h2d)]
                  + [f"device→host {i}" for i in range(n_d2h)])
    ax.set_ylim(ticks[-1] + 0.6, -0.6)
    ax.set_xlim(0, max(spec["window_ms"], 1e-9))
    ax.set_xlabel("time since the measured iteration started (ms)")
    if handles:
        ax.legend(handles=handles, loc="upper right", fontsize=8, framealpha=0.9)
    return fig


def stalls(spec) -> Figure:
    fig, ax = _figure(spec, height=3.5)
    df = spec["table"]
    x = df["tick"].to_numpy(float)
    w = np.diff(np.append(x, x[-1] + (x[-1] - x[-2] if len(x) > 1 else 1))) if len(x) else x
    bottom = np.zeros(len(df))
    for kind, color in STALL_COLORS.items():
        ax.bar(x, df[kind], width=w, bottom=bottom, align="edge", color=color, linewidth=0,
               label=f"{kind} stall")
        bottom = bottom + df[kind].to_numpy(float)
    if len(x):
        ax.step(np.append(x, x[-1] + w[-1]), np.append(df["compute_ms"], df["compute_ms"].iloc[-1]),
                where="post", color="#7F7F7F", linewidth=1, label="compute")
    ax.set_xlabel("tick of the measured iteration")
    ax.set_ylabel("time per tick (ms)")
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper right", fontsize=8, framealpha=0.9)
    ax.grid(axis="y", alpha=0.3)
    return fig


def frontier(spec) -> Figure:
    fig, ax = _figure(spec, height=4.2, width=7.5)
    df = spec["table"]
    palette = ["#1B7837", "#D62728", "#1F77B4", "#FF7F0E", "#9467BD", "#8C564B", "#E377C2", "#17BECF"]
    for i, (pol, g) in enumerate(df.groupby("policy", sort=False)):
        color = palette[i % len(palette)]
        on = g["frontier"].to_numpy(bool)
        ax.plot(g["savings_pct"], g["slowdown"], marker="o", markevery=list(on), linewidth=2,
                linestyle=":" if pol == "bound" else "-", color=color, label=str(pol))
        if not on.all():  # off the frontier: hollow
            ax.plot(g["savings_pct"][~on], g["slowdown"][~on], linestyle="none", marker="o",
                    markerfacecolor="none", color=color)
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="ideal (all resident)")
    ys = df["slowdown"].to_numpy(float)
    if len(ys) and ys.max() / max(ys.min(), 1e-9) > 20:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.set_xlim(0, min(100.0, float(df["savings_pct"].max()) + 10) if len(df) else 100.0)
    ax.set_xlabel("memory saved (% of peak bytes)")
    ax.set_ylabel("slowdown (× ideal iteration time)")
    ax.legend(fontsize=8, framealpha=0.9)
    ax.grid(alpha=0.3)
    return fig
