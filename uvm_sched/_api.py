"""The user-facing allocator API (re-exported lazily by ``uvm_sched``): allocate and free
managed memory, mark iterations, read counters and the event ring.  The implementation and
the executor live in ``uvm_sched.native``; this module is the stable, small face."""
from __future__ import annotations

from .native import backend, drain_events, free, library_path, malloc, stats, step

__all__ = ["malloc", "free", "stats", "step", "drain_events", "backend", "library_path"]
