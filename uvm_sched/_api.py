"""The user-facing allocator API (re-exported lazily by ``uvm_sched``): allocate and free
managed memory, mark iterations, read counters and the event ring.  The implementation and
the executor live in ``uvm_sched.native``; this module is the stable, small face."""
from __future__ import annotations

import sys

from .native import backend, drain_events, free, library_path, malloc, stats
from .native import step as _native_step

__all__ = ["malloc", "free", "stats", "step", "drain_events", "backend", "library_path"]


def step() -> None:
    """Mark the start of an iteration (a MARK event; re-synchronises an armed plan with
    ``sync="marker"``). A live ``uvm_sched.trace.recording()`` marks it too."""
    mod = sys.modules.get("uvm_sched.trace._live")
    if mod is not None:  # loaded only when a recording was ever started
        mod._note_step()
    _native_step()
