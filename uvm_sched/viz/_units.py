"""Colours, markers and class order shared by the figures (numbers are formatted by
``uvm_sched._fmt``, the one formatter of the package)."""
from __future__ import annotations

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
                "remote": "#17BECF", "counter": "#BCBD22"}
STALL_COLORS = {"fault": "#D62728", "eviction": "#C51B7D", "link": "#FF9896",
                "host": "#8C564B"}

