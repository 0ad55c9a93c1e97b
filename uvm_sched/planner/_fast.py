"""The planner's selection sweep as a compiled kernel (numba ``@njit(nogil=True)``).

The rule is ``_reference.select`` (plain Python, the definition); this module makes the
same decisions in the same order, over arrays in place of ``_Gap`` objects, and releases
the GIL while it runs (the runtime plans on a background thread). Both heaps order their
items by keys that are unique (a gap index and a segment start are part of every key), so
any correct binary heap pops them in the reference's order and the plans are identical;
``tests/test_planner_fast.py`` checks that on generated traces.

numba is optional (the ``numba`` extra): without it ``available()`` is False and the
planner runs the reference, with one logged note. Set ``UVM_SCHED_PLANNER_KERNEL=python``
to force the reference (to compare, or to rule the kernel out when something looks wrong).
"""
from __future__ import annotations

import logging
import operator
import os
from typing import Callable

import numpy as np

__all__ = ["available", "select", "fixed_fields", "calls"]

logger = logging.getLogger(__name__)

_kernel: Callable[..., np.ndarray] | None = None  # the compiled sweep, once built
_state = {"checked": False, "calls": 0}


def available() -> bool:
    """True when the compiled sweep can be used (numba installed and not switched off)."""
    if os.environ.get("UVM_SCHED_PLANNER_KERNEL", "").lower() == "python":
        return False
    if not _state["checked"]:
        _state["checked"] = True
        try:
            _build()
        except ImportError as e:
            logger.info("planner: numba is not installed (%s); the selection sweep runs in "
                        "plain Python (about 10x slower on large traces; pip install numba)",
                        e)
    return _kernel is not None


def calls() -> int:
    """How many sweeps the compiled kernel has run in this process (for tests that check
    the fast path was taken)."""
    return _state["calls"]


def fixed_fields(gaps) -> tuple:
    """The fields of ``gaps`` that no sweep and no timing pass changes (``_core._windows``
    sets them): ``blk``, ``t_off``, ``t_on_late``, ``level`` (ticks; arrays) and the sibling
    groups as CSR (``grp``, ``ptr``, ``members``), in the reference's list order (the order
    the groups were built in). Gathered once per schedule and handed to each ``select``:
    rebuilding them at every sweep cost ten times the compiled sweep itself."""
    n = len(gaps)
    fields = operator.attrgetter("blk", "t_off", "t_on_late", "level")
    table = np.array([fields(g) for g in gaps], np.int64).reshape(n, 4).T
    blk, t_off, t_on_late, level = (np.ascontiguousarray(c) for c in table)
    index = {id(g): i for i, g in enumerate(gaps)}
    grp = np.full(n, -1, np.int64)
    ptr = [0]
    members: list[int] = []
    seen: dict[int, int] = {}
    for i, g in enumerate(gaps):
        if not g.sibs:
            continue
        k = seen.get(id(g.sibs))
        if k is None:
            k = seen[id(g.sibs)] = len(ptr) - 1
            members.extend(index[id(x)] for x in g.sibs)
            ptr.append(len(members))
        grp[i] = k
    return (blk, t_off, t_on_late, level, grp, np.asarray(ptr, np.int64),
            np.asarray(members, np.int64))


def select(gaps, resident, budget, size, T, q, fixed=None) -> list:
    """``_reference.select`` (same arguments, same effects on the gaps, same result),
    compiled. ``fixed``: ``fixed_fields(gaps)``, where the caller sweeps the same gaps
    again (else gathered here). O((G + T) log G) plus the heap traffic of the late-prefetch
    queue."""
    n = len(gaps)
    blk, t_off, t_on_late, level, grp, ptr, members = \
        fixed if fixed is not None else fixed_fields(gaps)
    # the fields a sweep or a timing pass changes, in one pass (the flags as 0/1)
    fields = operator.attrgetter("t_on", "kp_min", "chosen", "bad")
    table = np.array([fields(g) for g in gaps], np.int64).reshape(n, 4).T
    t_on, kp_min = (np.ascontiguousarray(c) for c in table[:2])
    chosen, bad = table[2] != 0, table[3] != 0
    old_on, old_kp, old_chosen = t_on.copy(), kp_min.copy(), chosen.copy()
    assert _kernel is not None  # the planner calls select only when available() built it
    picked = _kernel(blk, t_off, t_on, t_on_late, level, chosen, bad, kp_min, grp, ptr, members,
                     np.ascontiguousarray(resident, np.int64), np.int64(budget),
                     np.ascontiguousarray(size, np.int64), np.int64(T),
                     np.ascontiguousarray(q, np.int64))
    _state["calls"] += 1
    for j in np.flatnonzero((t_on != old_on) | (kp_min != old_kp) | (chosen != old_chosen)):
        g = gaps[j]
        g.t_on, g.kp_min, g.chosen = int(t_on[j]), int(kp_min[j]), bool(chosen[j])
    return [gaps[i] for i in picked.tolist()]


def _build() -> None:
    global _kernel
    from . import _fast_kernels  # imports numba (ImportError without it)

    _kernel = _fast_kernels.kernel
