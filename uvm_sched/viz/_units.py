"""Unit choices and labels shared by the figures: bytes as B/KiB/MiB/GiB, time in ms."""
from __future__ import annotations

import math

_BYTE_UNITS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1))

# Class order = stacking order (bottom to top) and legend order.
CLASS_ORDER = ("persistent", "activation", "workspace", "transient", "other")
CLASS_COLORS = {
    "persistent": "#4C78A8",
    "activation": "#F58518",
    "workspace": "#54A24B",
    "transient": "#B279A2",
    "other": "#9D9D9D",
}
# Plan action families drawn on the lifetime chart: (label, plotly symbol, colour).
MARK_STYLE = {
    "prefetch": ("prefetch to device", "triangle-right", "#1B7837"),
    "evict": ("evict to host", "triangle-left", "#C51B7D"),
    "discard": ("discard", "x", "#4D4D4D"),
    "advise": ("advise", "diamond", "#762A83"),
}
MPL_MARKERS = {"triangle-right": ">", "triangle-left": "<", "x": "x", "diamond": "D"}
CAUSE_COLORS = {"plan": "#1B7837", "fault": "#D62728", "evict": "#C51B7D", "alloc": "#7F7F7F",
                "remote": "#17BECF"}
STALL_COLORS = {"fault": "#D62728", "eviction": "#C51B7D", "link": "#FF9896"}


def byte_unit(max_bytes: float) -> tuple[str, int]:
    """The largest binary unit in which ``max_bytes`` is at least 1: ("GiB", 2**30)..."""
    m = abs(float(max_bytes)) if max_bytes == max_bytes else 0.0
    for name, div in _BYTE_UNITS:
        if m >= div:
            return name, div
    return "B", 1


def fmt_bytes(n: float) -> str:
    """``n`` bytes for humans, e.g. ``1.50 GiB`` (``?`` for NaN/None)."""
    if n is None or (isinstance(n, float) and math.isnan(n)):
        return "?"
    name, div = byte_unit(n)
    if div == 1:
        return f"{int(n):,} B"
    return f"{n / div:,.2f} {name}"


def fmt_ms(seconds: float) -> str:
    """``seconds`` as milliseconds, e.g. ``12.345 ms``."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "?"
    return f"{seconds * 1e3:,.3f} ms"
