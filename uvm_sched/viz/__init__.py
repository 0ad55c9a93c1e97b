"""Figures of a trace, a plan and simulation results, and a self-contained HTML report.

Every figure function takes ``backend="plotly"`` (interactive, default) or
``"matplotlib"`` (static) and returns that library's figure object. They need only a
``Trace`` (``uvm_sched.trace``), a ``Plan`` and ``SimResult``s (``uvm_sched.sim``): no
torch, no GPU. plotly/matplotlib are imported when a figure is drawn
(``pip install 'uvm_sched[viz]'``).

Units: bytes on the axes in B/KiB/MiB/GiB (chosen per figure), time in ms, the trace's
clock in ticks (one kernel per tick). Large inputs are thinned to stay responsive
(memory: peak per bin of ticks; lifetimes: the largest ``max_blocks`` blocks; transfers and
stalls: merged/binned) and each figure says so in its subtitle.
"""
from ._figures import copy_engines, frontier, lifetimes, memory_timeline, stalls
from ._report import plotly_js_name, report, write_plotly_js

__all__ = ["memory_timeline", "lifetimes", "copy_engines", "stalls", "frontier", "report",
           "write_plotly_js", "plotly_js_name"]
