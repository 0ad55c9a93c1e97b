"""Plan arming from a ``Plan``, the executor's action log and replay of a trace: the parts
of the native face that read pandas frames and traces.

Kept apart from ``native.py`` (the ctypes face, stdlib and numpy only: DESIGN.md's import
rule) and re-exported there, so ``uvm_sched.native.arm_plan`` etc. stay where users find
them.  pandas and the trace model are imported on use, so importing the native face
stays light.  The native calls go through the ``native`` module (``native.malloc``), so a test
that replaces one there replaces it here too.
"""
from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np

from . import native
from ._codes import NativeEvent
from .native import _ACTION_BASE, _ACTION_NAMES, EVENT_DTYPE, PLAN_ROW_DTYPE
# keyed by int: the drained ``kind`` is a plain int (an IntEnum member hashes as its value)
_NOT_ISSUED: dict[int, str] = {NativeEvent.SKIPPED: "skipped", NativeEvent.ACTION_FAILED: "failed",
               NativeEvent.UNSUPPORTED: "unsupported"}


def plan_table(plan) -> np.ndarray:
    """A ``Plan``'s actions as ``PLAN_ROW_DTYPE`` rows, persistent blocks not yet resolved
    (block = the plan's ordinal, addr 0): what :func:`arm_plan` starts from. Needs no
    library, so a background worker can do it (``arm_plan(..., table=)``)."""
    acts = plan.actions
    table = np.zeros(len(acts), PLAN_ROW_DTYPE)
    if len(acts):
        table["tick"] = acts["tick"].to_numpy()
        code = {a: i for i, a in enumerate(_ACTION_NAMES)}
        # over a plain object array: iterating the Arrow-backed column itself cost 4 us a
        # row (the Scheduler arms on the training thread)
        table["action"] = [code[a] for a in acts["action"].to_numpy(dtype=object)]
        table["persistent"] = acts["persistent"].to_numpy(dtype=bool)
        table["block"] = acts["block"].to_numpy()
        table["offset"] = acts["offset"].to_numpy()
        table["bytes"] = acts["bytes"].to_numpy()
    return table


def arm_plan(plan, persistent_addrs: Mapping[int, int] | Iterable[int] | None = None, *,
             device: int = 0, start_now: bool = True, phase: int = 0,
             phase_allocs: Iterable[int] | None = None, table: np.ndarray | None = None,
             resync: bool = False) -> None:
    """Arm the executor with a ``uvm_sched.planner.Plan``. ``persistent_addrs`` maps the
    plan's persistent block ordinals (ordinal among all allocations since recording
    started) to live addresses: a mapping, or a sequence indexed by ordinal (e.g. the
    addresses of the recorded ALLOC events in order). An action on a persistent block
    that is not live (now, or when the action is due, even if its address was reused)
    is skipped and counted. Raises ``ValueError`` naming the first persistent row whose
    block has no address at all. ``phase``/``phase_allocs``: arm mid-iteration, see
    :func:`arm`. ``table``: ``plan_table(plan)`` made beforehand (not modified).
    ``resync``: a ``sync="period"`` plan is armed ``sync="period_resync"`` (after a
    divergence the executor waits for the iteration's start instead of counting on; the
    runtime's choice; a replay compared with the simulator keeps ``"period"``)."""
    table = plan_table(plan) if table is None else np.array(table, PLAN_ROW_DTYPE)
    n = len(table)
    if n:
        pers = table["persistent"].astype(bool)
        if pers.any():
            if persistent_addrs is None:
                i = int(np.flatnonzero(pers)[0])
                raise ValueError(f"plan row {i} names persistent block {int(table['block'][i])}; "
                                 "pass persistent_addrs (ordinal -> address)")
            lookup = (persistent_addrs.get if isinstance(persistent_addrs, Mapping)
                      else _seq_get(list(persistent_addrs)))
            # one identity check per block (several rows name each), in row order
            rows = np.flatnonzero(pers)
            blocks = table["block"][rows]
            ub, first, inv = np.unique(blocks, return_index=True, return_inverse=True)
            asked = np.zeros(len(ub), np.uint64)
            for j in np.argsort(first, kind="stable").tolist():
                b = int(ub[j])
                a = lookup(b)
                if not a:
                    raise ValueError(f"plan row {int(rows[first[j]])}: no address for "
                                     f"persistent block {b}")
                asked[j] = int(a)
            # the identity check, one native call for every block (a call per block costs
            # ~3 us: 10 ms for an LLM's weights and optimizer state on the training thread)
            found = _block_ordinals(asked)
            live = found != _NO_BLOCK
            # a block freed already: addr 0, the executor skips (counts) it
            ords = np.where(live, found, ub.astype(np.uint64)).astype(table["block"].dtype)
            addrs = np.where(live, asked, np.uint64(0))
            table["block"][rows] = ords[inv]
            table["addr"][rows] = addrs[inv]
    meta = plan.meta
    sync = meta.get("sync", "marker")
    # one int64 array: native.arm checks it whole; a list is checked element by element
    # (~0.4 us each: 10 ms for an LLM iteration's 25k allocations on the training thread)
    sizes = np.asarray(meta["alloc_sizes"], dtype=np.int64)
    native.arm(table, sizes, int(meta["period_events"]),
               sync="period_resync" if resync and sync == "period" else sync, device=device,
               start_now=start_now, phase=phase, phase_allocs=phase_allocs)


def _block_ordinals(addrs: np.ndarray) -> np.ndarray:
    """The global allocation ordinal of the live block starting at each address (uint64
    per address; ``_NO_BLOCK`` where none starts there), in one native call."""
    ptrs = np.ascontiguousarray(addrs, dtype=np.uint64)
    out = np.empty(len(ptrs), np.uint64)
    native._raise(native._load().uvm_sched_block_ordinals(
        ptrs.ctypes.data, len(ptrs), out.ctypes.data), "uvm_sched_block_ordinals")
    return out


_NO_BLOCK = np.uint64(2**64 - 1)  # = UINT64_MAX in uvm_sched_block_ordinals


def _seq_get(seq: list):
    return lambda j: seq[j] if 0 <= j < len(seq) else None


def action_log(events: np.ndarray):
    """The executor's part of a drain as a pandas DataFrame (direct calls left out), one
    row per plan row the executor handled: ``iteration``, ``tick`` (allocator event
    ordinal within the iteration), ``row`` (index in the armed table), ``action`` (name), ``status``
    (``issued``/``skipped``/``failed``/``unsupported``), ``addr``, ``bytes``, ``stream``.
    The drain must include the ``iter`` event that started each iteration."""
    import pandas as pd  # on use: importing uvm_sched.native stays light

    ev = np.asarray(events, EVENT_DTYPE)
    kind = ev["kind"]
    rows = []
    it, start = -1, 0
    for e, k in zip(ev, kind):
        k = int(k)
        if k == NativeEvent.ITER:  # addr: the tick of the iteration's event 0
            it, start = int(e["arg"]), int(e["addr"])
        elif ((_ACTION_BASE <= k < _ACTION_BASE + len(_ACTION_NAMES) or k in _NOT_ISSUED)
              and int(e["arg"]) >= 0):  # arg < 0: a direct call, not a plan row
            issued = k <= NativeEvent.ACTION_END
            rows.append((it, int(e["tick"]) - start, int(e["arg"]),
                         _ACTION_NAMES[k - _ACTION_BASE] if issued else None,
                         "issued" if issued else _NOT_ISSUED[k],
                         int(e["addr"]), int(e["size"]), int(e["stream"])))
    return pd.DataFrame(rows, columns=["iteration", "tick", "row", "action", "status", "addr",
                                       "bytes", "stream"])


def replay(trace, plan=None, *, arm_at: int | None = None, device: int = 0) -> np.ndarray:
    """Run a trace's allocator events through this allocator (ALLOC -> malloc, FREE ->
    free, MARK -> step) and return the drained events. With ``plan``, the executor is
    armed at the MARK at tick ``arm_at`` (default: the first MARK after every persistent
    block the plan names is allocated; tick 0 without marks),
    persistent blocks resolved from the replayed allocations (ordinal among the trace's
    ALLOC rows). A ``sync="period"`` plan is armed at the phase the simulator's period grid
    has there (iterations start at allocator events ``e`` with ``(e - a) % period_events ==
    0``, ``a = plan.meta.get("period_start_event", 0)``), so the two agree wherever it is
    armed. Blocks still live at the end are freed (their frees follow the trace's
    events). Meant for the host backend: memory is reserved, never touched. The ring is
    drained first; pending events of the caller are discarded."""
    from .trace._model import EventKind

    native.drain_events()
    c = trace.columns
    kinds, blocks, sizes, ticks = c["kind"], c["block"], c["size"], c["tick"]
    addr_of: dict[int, int] = {}
    order: list[int] = []  # address of each ALLOC row, in order (persistent ordinals)
    marks = trace.iteration_starts
    if plan is not None and arm_at is None:
        # The first MARK after the allocation of every persistent block the plan names (a
        # first iteration may allocate optimizer state: before that MARK those blocks have
        # no address yet), as the Scheduler arms only after its warm-up.
        pers = plan.actions.loc[plan.actions["persistent"].to_numpy(bool), "block"]
        alloc_rows = np.flatnonzero(kinds == EventKind.ALLOC)
        ready_row = int(alloc_rows[min(int(pers.max()), len(alloc_rows) - 1)]) if len(pers) else -1
        mark_rows = np.flatnonzero(kinds == EventKind.MARK)
        later = mark_rows[mark_rows > ready_row]
        arm_at = int(ticks[later[0]]) if len(later) else (int(marks[0]) if len(marks) else 0)
    armed = False
    n_ev = 0  # allocator events replayed so far
    recent: list[tuple[int, int]] = []  # (event ordinal, block) of the ALLOCs replayed

    def maybe_arm(at_mark: bool, tick: int) -> None:
        nonlocal armed
        if plan is None or armed:
            return
        assert arm_at is not None  # set above whenever a plan is given
        if tick < arm_at:
            return
        if plan.meta.get("sync", "marker") == "marker" and len(marks) and not at_mark:
            return
        phase, phase_allocs = 0, None
        if plan.meta.get("sync", "marker") == "period":
            # the period grid of the simulator: iterations start at the allocator events
            # e >= anchor with (e - anchor) % period == 0; armed wherever we are on it
            period = int(plan.meta["period_events"])
            anchor = int(plan.meta.get("period_start_event", 0)) % period
            if n_ev < anchor:
                return  # before the first iteration: arm when it starts
            phase = (n_ev - anchor) % period
            phase_allocs = [addr_of.get(b, 0) for e, b in recent if e >= n_ev - phase]
            phase_allocs = phase_allocs[:len(plan.meta["alloc_sizes"])]
        arm_plan(plan, order, device=device, start_now=True, phase=phase,
                 phase_allocs=phase_allocs)
        armed = True

    try:
        for i in range(len(kinds)):
            k = int(kinds[i])
            if k == EventKind.MARK:
                native.step()
                maybe_arm(True, int(ticks[i]))
            elif k == EventKind.ALLOC:
                maybe_arm(False, int(ticks[i]))
                a = native.malloc(int(sizes[i]), device=device)
                addr_of[int(blocks[i])] = a
                order.append(a)
                recent.append((n_ev, int(blocks[i])))
                n_ev += 1
            elif k == EventKind.FREE:
                maybe_arm(False, int(ticks[i]))
                native.free(addr_of.pop(int(blocks[i])))
                n_ev += 1
    finally:
        if armed:
            native.disarm()
        for a in addr_of.values():
            native.free(a)
    return native.drain_events()
