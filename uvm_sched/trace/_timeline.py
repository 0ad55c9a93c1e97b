"""Import a ``torch.profiler`` memory timeline raw export
(``prof.export_memory_timeline("x.raw.json.gz")``, plain or gzip JSON).

Schema (``torch/profiler/_memory_profiler.py``, ``MemoryProfileTimeline.
export_memory_timeline_raw``): a JSON list of rows ``[t, action, numbytes, category]``:

* ``t`` -- ``start_time_ns`` of the profiler event (ns); ``-1`` for ``PREEXISTING``.
* ``action`` -- ``Action`` enum value: 1 ``PREEXISTING`` (live when profiling began),
  2 ``CREATE``, 3 ``INCREMENT_VERSION`` (written as two rows at one ``t``: ``-numbytes``
  in the old version's category, ``+numbytes`` in the new one's), 4 ``DESTROY``.
* ``numbytes`` -- bytes, positive for PREEXISTING/CREATE, negative for DESTROY.
* ``category`` -- index into ``_CATEGORY_TO_INDEX`` (the order of ``_CATEGORY_TO_COLORS``):
  0 parameter, 1 optimizer_state, 2 input, 3 temporary, 4 activation, 5 gradient,
  6 autograd_detail, 7 unknown.

Rows carry no address or tensor id, so allocations are paired the way the sizes allow:

* PREEXISTING and CREATE -> ALLOC of a fresh block (PREEXISTING rows first, at the first
  row's time); DESTROY -> FREE of the most recent live block of that size and category
  (last in, first out; a DESTROY with none was live before profiling: a tick-0 block).
* INCREMENT_VERSION -> no allocator event (the storage stays); the live block of that size
  and old category takes the new category.
* One tick per allocator event; ``t_ns`` relative to the first timed row. No device time
  is recorded (``tick_ns`` unknown). ``meta["categories"]`` names the categories;
  ``meta["alloc_category"]`` gives each ALLOC's (in order) last category, and
  ``meta["bytes_by_category"]`` the bytes allocated per category. ``meta["free_pairing"]``
  says the pairing is by size.

The plot export (``x.json``: ``[times, sizes by category]``) has no allocations; it is
refused with a message naming the raw export.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ._model import Trace, TraceError

__all__ = ["CATEGORIES", "is_memory_timeline", "is_timeline_plot", "trace_from_timeline"]

CATEGORIES = ("parameter", "optimizer_state", "input", "temporary", "activation", "gradient",
              "autograd_detail", "unknown")
_PREEXISTING, _CREATE, _INCREMENT, _DESTROY = 1, 2, 3, 4


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_memory_timeline(doc: Any) -> bool:
    """True for a raw memory timeline: a list whose first row is 4 integers, action 1..4."""
    if not isinstance(doc, list) or not doc:
        return False
    r = doc[0]
    return (isinstance(r, list) and len(r) == 4 and all(_int(x) for x in r)
            and 1 <= r[1] <= 4)


def is_timeline_plot(doc: Any) -> bool:
    """True for the plot export: ``[times, sizes]`` with a list of lists for sizes."""
    return (isinstance(doc, list) and len(doc) == 2 and isinstance(doc[0], list)
            and isinstance(doc[1], list) and bool(doc[1]) and isinstance(doc[1][0], list))


def trace_from_timeline(doc: list, *, where: str = "timeline", name: str | None = None) -> Trace:
    """Convert a parsed raw memory timeline (module doc) to a Trace."""
    from ._snapshot import replay_addresses

    rows = []
    for i, r in enumerate(doc):
        if not (isinstance(r, list) and len(r) == 4 and all(_int(x) for x in r)):
            raise TraceError(f"{where}: row {i} is {str(r)[:80]}, expected [t_ns, action, "
                             "bytes, category] integers")
        t, act, nb, cat = r
        if not 1 <= act <= 4:
            raise TraceError(f"{where}: row {i} has action {act}, expected 1..4 (PREEXISTING, "
                             "CREATE, INCREMENT_VERSION, DESTROY)")
        if not 0 <= cat < len(CATEGORIES):
            raise TraceError(f"{where}: row {i} has category {cat}, expected 0..{len(CATEGORIES) - 1}")
        if abs(nb) >= 2**62 or (act in (_PREEXISTING, _CREATE) and nb < 0) or \
                (act == _DESTROY and nb > 0):
            raise TraceError(f"{where}: row {i} ({r}) has bytes of the wrong sign or range")
        rows.append((t if act != _PREEXISTING else -1, 0 if act == _PREEXISTING else 1, i, act,
                     nb, cat))
    rows.sort()
    timed = [r[0] for r in rows if r[0] >= 0]
    t_first = timed[0] if timed else 0
    ops: list[int] = []
    addrs: list[int] = []
    sizes: list[int] = []
    times: list[int] = []
    cat_of: dict[int, int] = {}  # address -> current category
    live: dict[tuple[int, int], list[int]] = {}  # (bytes, category) -> addresses, LIFO
    nxt = 1
    pending_version: list[tuple[int, int]] = []  # INCREMENT_VERSION "-" halves at this t
    for t, _, i, act, nb, cat in rows:
        b = abs(nb)
        tt = max(t, t_first)
        if act == _INCREMENT:
            if nb < 0:
                pending_version.append((b, cat))
                continue
            if not pending_version:
                raise TraceError(f"{where}: row {i}: INCREMENT_VERSION +{b:,} bytes without "
                                 "its -bytes half")
            ob, ocat = pending_version.pop(0)
            stack = live.get((ob, ocat))
            if stack:
                a = stack.pop()
                cat_of[a] = cat
                live.setdefault((b, cat), []).append(a)
            continue
        if act in (_PREEXISTING, _CREATE):
            a = nxt
            nxt += 1
            cat_of[a] = cat
            live.setdefault((b, cat), []).append(a)
            ops.append(1)
        else:
            stack = live.get((b, cat))
            if stack:
                a = stack.pop()
            else:
                a = nxt  # live before profiling and never reported PREEXISTING
                nxt += 1
                cat_of[a] = cat
            ops.append(-1)
        addrs.append(a)
        sizes.append(b)
        times.append(tt - t_first)
    if not ops:
        raise TraceError(f"{where}: a memory timeline without CREATE/DESTROY rows: nothing to import")
    meta = {
        "source": "torch_memory_timeline",
        "name": name or "timeline",
        "units": {"t_ns": "ns", "size": "bytes", "tick": "allocator event"},
        "free_pairing": "by size and category, last in first out (rows carry no address)",
        "categories": list(CATEGORIES),
    }
    tr = replay_addresses(ops, addrs, sizes, times, [0] * len(ops), device=0, where=where,
                          describe=lambda j: f"allocator event {j:,}", meta=meta)
    # categories per ALLOC row, in the trace's order (tick-0 blocks first)
    from ._model import EventKind

    alloc_rows = np.flatnonzero(tr.kind == EventKind.ALLOC)
    block_addr = _block_addresses(tr, ops, addrs)
    cats = [cat_of.get(block_addr.get(int(b), -1), len(CATEGORIES) - 1)
            for b in tr.block[alloc_rows].tolist()]
    by = np.bincount(np.asarray(cats, np.int64), weights=tr.size[alloc_rows].astype(np.float64),
                     minlength=len(CATEGORIES))
    tr.meta["alloc_category"] = cats
    tr.meta["bytes_by_category"] = {c: int(v) for c, v in zip(CATEGORIES, by) if v}
    return tr


def _block_addresses(tr: Trace, ops: list[int], addrs: list[int]) -> dict[int, int]:
    """Block id -> the synthetic address it was replayed from (each address names one
    lifetime here, so the first row of each block gives it)."""
    from ._model import EventKind

    ev = np.flatnonzero((tr.kind == EventKind.ALLOC) | (tr.kind == EventKind.FREE))
    n_pre = len(ev) - len(ops)  # tick-0 rows come first
    out: dict[int, int] = {}
    for j, r in enumerate(ev[n_pre:].tolist()):
        out.setdefault(int(tr.block[r]), addrs[j])
    return out
