"""The native core's event kinds (``enum uvm_event_kind`` in ``_native/uvm_sched.h``), one
definition for every Python reader of the ring.

Stdlib only, so the ctypes face (``native.py``) can use it without importing ``trace/``.
The first kinds share their codes with the trace model's ``EventKind`` (ALLOC 0, FREE 1,
MARK 3; a test pins it), so a drain turns into a trace without a table.
"""
from __future__ import annotations

from enum import IntEnum


class NativeEvent(IntEnum):
    """Kind of one record of the native event ring (the ``kind`` field of ``EVENT_DTYPE``)."""

    ALLOC = 0
    FREE = 1
    MARK = 3
    ITER = 4  # the executor starts an iteration: arg = its number, addr = tick of its event 0
    ARM = 5
    DISARM = 6
    ACTION = 16  # 16 + action index (planner.ACTIONS): an issued plan action or direct call
    ACTION_END = 31
    OOM = 32
    BAD_FREE = 33
    DOUBLE_FREE = 34
    SIZE_MISMATCH = 35
    DRIVER_ERROR = 36
    DIVERGENCE = 37
    SKIPPED = 38
    ACTION_FAILED = 39
    UNSUPPORTED = 40
    UNADVISE = 41
    RELEASE = 42
    SYNC = 43
    PROBE = 44  # a fault probe moved a range to the host (_native_faults.probe_set)
    RESUME = 45  # the iteration goes on after events inserted into it: size = their count
