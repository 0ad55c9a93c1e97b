"""Plotly drawings of the specs built in ``_figures`` (interactive; imported only when used)."""
from __future__ import annotations

import html
import textwrap

import numpy as np
import plotly.graph_objects as go

from .._fmt import fmt_bytes
from ._units import CAUSE_COLORS, CLASS_COLORS, MARK_STYLE, STALL_COLORS

# Above this many line segments a trace is drawn with WebGL (scattergl) to stay responsive.
_GL_SEGMENTS = 5_000
_FONT = dict(family="Helvetica, Arial, sans-serif", size=12)


class Figure(go.Figure):
    """A plotly figure of ``uvm_sched.viz`` that carries a static twin: in a notebook its
    output holds the interactive figure (``application/vnd.plotly.v1+json``, what Jupyter
    shows) and a PNG of the same numbers drawn by the matplotlib backend (``image/png``,
    what an exported HTML page, nbviewer or a repository viewer shows: they render no
    plotly JSON). Axis ranges set on the figure (``fig.update_xaxes(range=...)``) apply to
    the PNG too. Without matplotlib the output is plotly's alone."""

    _uvm_static: tuple[str, dict] | None = None  # (name of the _mpl drawing, its spec)

    def to_static_png(self, dpi: int = 80) -> bytes | None:
        """The static twin as PNG bytes (None without matplotlib)."""
        if self._uvm_static is None:
            return None
        try:
            from . import _mpl
        except ImportError:
            return None
        import io

        name, spec = self._uvm_static
        mfig = getattr(_mpl, name)(spec)
        ax = mfig.axes[0]
        for axis, set_lim in ((self.layout.xaxis, ax.set_xlim), (self.layout.yaxis, ax.set_ylim)):
            if axis.range is not None and axis.type != "log" and not axis.autorange:
                set_lim(*axis.range)
        buf = io.BytesIO()
        mfig.savefig(buf, format="png", dpi=dpi)
        return buf.getvalue()

    def _repr_mimebundle_(self, include=None, exclude=None, validate=True, **kwargs):
        import base64

        bundle = super()._repr_mimebundle_(include, exclude, validate, **kwargs)
        png = self.to_static_png()
        if png is not None:
            bundle["image/png"] = base64.b64encode(png).decode()
        return bundle

    def _ipython_display_(self) -> None:
        # plotly's own display goes through its renderers and would drop the PNG
        from IPython.display import display

        display(self._repr_mimebundle_(), raw=True)

    def show(self, *args, **kwargs) -> None:
        """In a notebook kernel, display with the static twin; elsewhere plotly's ``show``."""
        if not args and not kwargs and _in_kernel():
            self._ipython_display_()
        else:
            super().show(*args, **kwargs)


def _in_kernel() -> bool:
    import sys

    ipy = sys.modules.get("IPython")
    shell = ipy.get_ipython() if ipy is not None else None
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def with_static_twin(fig: go.Figure, name: str, spec: dict) -> Figure:
    """``fig`` as a :class:`Figure` whose static twin is ``_mpl.<name>(spec)``."""
    # the class is swapped in place: a copy would validate every trace again (slow on
    # large lifetime charts); Figure adds no state but one attribute
    fig.__class__ = Figure
    fig._uvm_static = (name, spec)
    return fig


def _note_lines(spec) -> list[str]:
    return [ln for n in spec["notes"] for ln in textwrap.wrap(n, 140)]


def _title(spec) -> dict:
    title = dict(text=f"<b>{html.escape(spec['title'], quote=False)}</b>", x=0.01, xanchor="left",
                 yref="container", y=0.99, yanchor="top", font=dict(size=15))
    lines = _note_lines(spec)
    if lines:
        title["subtitle"] = dict(text="<br>".join(html.escape(ln, quote=False) for ln in lines),
                                 font=dict(size=11, color="#555555"))
    return title


def _layout(fig: go.Figure, spec, *, height: int = 460) -> go.Figure:
    n = len(_note_lines(spec))
    fig.update_layout(
        title=_title(spec), height=height + 16 * n, template="plotly_white", font=_FONT,
        margin=dict(l=70, r=20, t=80 + 15 * n, b=50),
        legend=dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1.0,
                    traceorder="normal"),
        hovermode="closest",
    )
    return fig


def _segments(x0, x1, y) -> tuple[list, list]:
    """Horizontal segments as one polyline broken by gaps (one trace, fast to draw).

    The gaps are ``None`` in plain lists (JSON null): plotly.js does not clean typed
    arrays, so a NaN gap sent as a binary array would be drawn as a connecting line."""
    n = len(x0)
    xs = np.full(3 * n, None, dtype=object)
    ys = np.full(3 * n, None, dtype=object)
    xs[0::3] = np.asarray(x0).tolist()
    xs[1::3] = np.asarray(x1).tolist()
    ys[0::3] = ys[1::3] = np.asarray(y).tolist()
    return xs.tolist(), ys.tolist()


def _per_point(values, fill=np.nan) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    out = np.full(3 * len(v), fill)
    out[0::3] = out[1::3] = v
    return out


def memory_timeline(spec) -> go.Figure:
    fig = go.Figure()
    unit = spec["unit"]
    # one more point at the end so the last tick's step [t, t + 1) is drawn
    x = np.append(spec["ticks"], spec["n_ticks"]) if len(spec["ticks"]) else spec["ticks"]
    ms = np.append(spec["ms"], np.nan) if len(spec["ticks"]) else spec["ms"]
    for cls, y in spec["series"].items():
        y = np.append(y, y[-1]) if len(y) else y
        fig.add_trace(go.Scatter(
            x=x, y=y, name=cls, mode="lines", stackgroup="mem", line=dict(width=0.5, shape="hv",
            color=CLASS_COLORS[cls]), fillcolor=CLASS_COLORS[cls], customdata=ms,
            hovertemplate=f"{cls}: %{{y:.3f}} {unit}<br>tick %{{x}} (t=%{{customdata:.3f}} ms)<extra></extra>"))
    if spec["resident"] is not None:
        tk, y, label = spec["resident"]
        fig.add_trace(go.Scatter(
            x=tk, y=y, name=label, mode="lines", line=dict(color="black", width=1.5, shape="hv"),
            hovertemplate=f"resident %{{y:.3f}} {unit}<br>tick %{{x}}<extra></extra>"))
        if len(tk):
            fig.add_vrect(x0=float(tk.min()), x1=float(tk.max()) + 1, fillcolor="#EEEEEE",
                          opacity=0.5, line_width=0, layer="below",
                          annotation_text="simulated window", annotation_position="top left")
    if spec["budget"]:
        b = spec["budget"] / spec["div"]
        fig.add_trace(go.Scatter(
            x=[0, spec["n_ticks"]], y=[b, b], name=f"budget {fmt_bytes(spec['budget'])}", mode="lines",
            line=dict(color="#D62728", width=2, dash="dash"), hoverinfo="name"))
    marks = spec["marks"]
    if 0 < len(marks) <= 100:
        for m in marks:
            fig.add_vline(x=float(m), line=dict(color="#888888", width=0.6, dash="dot"))
    fig.update_xaxes(title_text="tick (one kernel per tick; dotted: iteration starts)",
                     range=[0, max(1, spec["n_ticks"])])
    fig.update_yaxes(title_text=f"memory in use ({unit})", rangemode="tozero")
    return _layout(fig, spec)


def lifetimes(spec) -> go.Figure:
    fig = go.Figure()
    lt = spec["blocks"]
    spans = spec["spans"]
    n = len(lt)
    width = float(np.clip(480 / max(n, 1), 1, 10))
    unit, div = spec["unit"], spec["div"]
    Scatter = go.Scattergl if n > _GL_SEGMENTS or len(spans) > _GL_SEGMENTS else go.Scatter
    for cls in CLASS_COLORS:
        sel = lt[lt["cls"] == cls]
        if not len(sel):
            continue
        xs, ys = _segments(sel["start"].to_numpy(), sel["end"].to_numpy(), sel["y"].to_numpy())
        # float32 halves what the page carries for big traces (hover needs ~7 digits)
        cd = np.stack([_per_point(sel["block"]), _per_point(sel["size"] / div),
                       _per_point(sel["start"]), _per_point(sel["end"] - 1)], axis=1).astype(np.float32)
        fig.add_trace(Scatter(
            x=xs, y=ys, mode="lines", name=f"{cls} (live)", legendgroup=cls,
            line=dict(color=CLASS_COLORS[cls], width=width), opacity=0.3, customdata=cd,
            hovertemplate=(f"block %{{customdata[0]}} ({cls})<br>%{{customdata[1]:.3f}} {unit}"
                           "<br>alloc tick %{customdata[2]}, last tick %{customdata[3]}<extra></extra>")))
        if len(spans):
            sp = spans[spans["cls"] == cls]
            if len(sp):
                xs, ys = _segments(sp["start"].to_numpy(), sp["end"].to_numpy(), sp["y"].to_numpy())
                fig.add_trace(Scatter(
                    x=xs, y=ys, mode="lines", name=f"{cls} (accessed)", legendgroup=cls,
                    line=dict(color=CLASS_COLORS[cls], width=width),
                    hovertemplate="accessed around tick %{x} (row %{y})<extra></extra>"))
    marks = spec["marks"]
    if marks is not None:
        MScatter = go.Scattergl if len(marks) > _GL_SEGMENTS else go.Scatter
        for fam, (label, symbol, color) in MARK_STYLE.items():
            m = marks[marks["family"] == fam]
            if not len(m):
                continue
            cd = np.stack([m["block"].to_numpy(np.float64), m["bytes"].to_numpy(np.float64) / div,
                           m["tick"].to_numpy(np.float64)], axis=1)
            actions = m["action"].to_numpy()
            # one action in the family: named once in the template, not once per mark
            one = html.escape(str(actions[0]), quote=False) if len(set(actions)) == 1 else None
            fig.add_trace(MScatter(
                x=m["x"].to_numpy(np.float64), y=m["y"].to_numpy(np.float64), mode="markers",
                name=f"planned {label}", marker=dict(symbol=symbol, color=color, size=11,
                line=dict(width=0.5, color="white")), customdata=cd,
                text=None if one else actions,
                hovertemplate=(f"{one or '%{text}'}<br>block %{{customdata[0]}}, "
                               f"%{{customdata[1]:.3f}} {unit}"
                               "<br>fired at tick %{customdata[2]}<extra></extra>")))
    fig.update_xaxes(title_text="tick (faint: live but idle; solid: accessed by the tick's kernel)",
                     range=[0, max(1, spec["n_ticks"])])
    fig.update_yaxes(title_text="block (allocation order)", autorange="reversed",
                     showgrid=False, zeroline=False)
    return _layout(fig, spec, height=560)


def copy_engines(spec) -> go.Figure:
    fig = go.Figure()
    df = spec["transfers"]
    n_h2d = int(df.loc[df["direction"] == "h2d", "lane"].max() + 1) if (df["direction"] == "h2d").any() else 1
    n_d2h = int(df.loc[df["direction"] == "d2h", "lane"].max() + 1) if (df["direction"] == "d2h").any() else 1
    # host->device lanes on top (y = 0..), device->host below, a gap between
    y = np.where(df["direction"] == "h2d", df["lane"], n_h2d + 0.6 + df["lane"]).astype(np.float64)
    width = float(np.clip(200 / (n_h2d + n_d2h), 3, 24))
    Scatter = go.Scattergl if len(df) > _GL_SEGMENTS else go.Scatter
    for cause in list(CAUSE_COLORS) + sorted(set(df["cause"]) - set(CAUSE_COLORS)):
        m = (df["cause"] == cause).to_numpy()
        if not m.any():
            continue
        sub = df[m]
        xs, ys = _segments(sub["start_ms"].to_numpy(), sub["end_ms"].to_numpy(), y[m])
        cd = np.stack([_per_point(sub["bytes"] / 2**20), _per_point(sub["block"]),
                       _per_point(sub["end_ms"] - sub["start_ms"])], axis=1)
        fig.add_trace(Scatter(
            x=xs, y=ys, mode="lines", name=f"{cause} transfers",
            line=dict(color=CAUSE_COLORS.get(cause, "#17BECF"), width=width), customdata=cd,
            hovertemplate=(f"{cause}: %{{customdata[0]:.3f}} MiB, block %{{customdata[1]}}"
                           "<br>%{x:.3f} ms, lasts %{customdata[2]:.3f} ms<extra></extra>")))
    if not len(df):
        fig.add_annotation(text="no transfers in the measured window", showarrow=False,
                           x=0.5, y=0.5, xref="paper", yref="paper")
    tickvals = list(range(n_h2d)) + [n_h2d + 0.6 + i for i in range(n_d2h)]
    ticktext = [f"host→device {i}" for i in range(n_h2d)] + [f"device→host {i}" for i in range(n_d2h)]
    fig.update_yaxes(tickvals=tickvals, ticktext=ticktext, autorange="reversed",
                     title_text="copy engine lane", showgrid=False, zeroline=False)
    fig.update_xaxes(title_text="time since the measured iteration started (ms)",
                     range=[0, max(spec["window_ms"], 1e-9)])
    return _layout(fig, spec, height=230 + 28 * (n_h2d + n_d2h))


def stalls(spec) -> go.Figure:
    fig = go.Figure()
    df = spec["table"]
    for kind, color in STALL_COLORS.items():
        fig.add_trace(go.Bar(
            x=df["tick"], y=df[kind], name=f"{kind} stall", marker=dict(color=color, line_width=0),
            hovertemplate=f"{kind} stall %{{y:.4f}} ms<br>tick %{{x}}<extra></extra>"))
    fig.add_trace(go.Scatter(
        x=df["tick"], y=df["compute_ms"], name="compute", mode="lines",
        line=dict(color="#7F7F7F", width=1, shape="hv"),
        hovertemplate="compute %{y:.4f} ms<br>tick %{x}<extra></extra>"))
    fig.update_layout(barmode="stack", bargap=0)
    fig.update_xaxes(title_text="tick of the measured iteration")
    fig.update_yaxes(title_text="time per tick (ms)", rangemode="tozero")
    return _layout(fig, spec, height=380)


def frontier(spec) -> go.Figure:
    fig = go.Figure()
    df = spec["table"]
    palette = ["#1B7837", "#D62728", "#1F77B4", "#FF7F0E", "#9467BD", "#8C564B", "#E377C2", "#17BECF"]
    for i, (pol, g) in enumerate(df.groupby("policy", sort=False)):
        extra = g["budget_bytes"].to_numpy(np.float64) / 2**30 if "budget_bytes" in g else np.full(len(g), np.nan)
        fig.add_trace(go.Scatter(
            x=g["savings_pct"], y=g["slowdown"], name=str(pol), mode="lines+markers",
            line=dict(color=palette[i % len(palette)], width=2, dash="dot" if pol == "bound" else "solid"),
            marker=dict(size=8, symbol=["circle" if f else "circle-open" for f in g["frontier"]]),
            customdata=extra,
            hovertemplate=(f"{pol}<br>saves %{{x:.0f}}% of peak (budget %{{customdata:.2f}} GiB)"
                           "<br>slowdown %{y:.3f}x<extra></extra>")))
    fig.add_trace(go.Scatter(x=[0, 100], y=[1, 1], name="ideal (all resident)", mode="lines",
                             line=dict(color="black", width=1, dash="dash"), hoverinfo="name"))
    ys = df["slowdown"].to_numpy(np.float64)
    if len(ys) and ys.max() / max(ys.min(), 1e-9) > 20:
        vals = [v for v in _log_ticks(min(ys.min(), 1.0), ys.max())]
        fig.update_yaxes(type="log", tickvals=vals, ticktext=[f"{v:g}×" for v in vals])
    x_max = min(100.0, float(df["savings_pct"].max()) + 10) if len(df) else 100.0
    fig.update_xaxes(title_text="memory saved (% of peak bytes)", range=[0, x_max])
    fig.update_yaxes(title_text="slowdown (× ideal iteration time)")
    return _layout(fig, spec, height=420)


def _log_ticks(lo: float, hi: float) -> list[float]:
    """1-2-5 ticks covering [lo, hi] for a log axis."""
    out = []
    for e in range(int(np.floor(np.log10(max(lo, 1e-9)))), int(np.ceil(np.log10(max(hi, 1e-9)))) + 1):
        out += [m * 10.0**e for m in (1, 2, 5) if lo / 1.01 <= m * 10.0**e <= hi * 2]
    return out
