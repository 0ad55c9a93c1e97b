"""The simulator's event loop compiled (numba ``@njit(nogil=True)``, ``_fast_kernels``).

The rule is ``_engine.Engine`` driven by ``_api._run`` (plain Python over numpy, the
definition); the compiled loop makes the same state changes in the same order, in integer
bytes and the same floating-point operations, so every figure of a ``SimResult`` -- times,
bytes each way, faults, the timeline, the copies, the actions carried out -- is identical.
``tests/test_sim_fast.py`` checks that on generated traces, every policy.

The schedule a policy gives is known before the run (a Plan's arming depends on the trace's
allocator events only), so it is laid out first as one table of (tick, stage) rows
(``action_table``) that the loop walks; whether each row is carried out (the block is live)
is decided in the loop, as ``_api._executes`` does.

numba is optional: without it ``available()`` is False and ``simulate`` runs the reference,
with one logged note. ``UVM_SCHED_SIM_KERNEL=python`` forces the reference.
"""
from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np

from ..trace import EventKind
from ._prep import Prepared

__all__ = ["available", "calls", "run", "action_table"]

logger = logging.getLogger(__name__)

_mod: Any = None  # _fast_kernels, once imported
_state = {"checked": False, "calls": 0}
CAUSES = np.asarray(["plan", "evict", "fault", "remote", "counter"], dtype=object)
DIRECTIONS = np.asarray(["h2d", "d2h"], dtype=object)
LEDGER = ("populated", "migrated_in", "reused_in", "evicted_out", "discarded", "freed",
          "reused_out", "dropped_dup", "remote_in", "remote_out")  # Engine.led's order


def available() -> bool:
    """True when the compiled loop can be used (numba installed and not switched off)."""
    global _mod
    if os.environ.get("UVM_SCHED_SIM_KERNEL", "").lower() == "python":
        return False
    if not _state["checked"]:
        _state["checked"] = True
        try:
            from . import _fast_kernels
            _mod = _fast_kernels
        except ImportError as e:
            logger.info("sim: numba is not installed (%s); the event loop runs in plain "
                        "Python (several times slower on large traces; pip install numba)", e)
    return _mod is not None


def calls() -> int:
    """How many compiled runs (the event loop, the lower bound's deadline sweep) this process
    has made (for tests that check the fast path was taken)."""
    return _state["calls"]


def action_table(sched, prep: Prepared, end_t: int):
    """The actions ``sched.at`` gives for ticks ``0 .. end_t - 1``, as arrays sorted by
    (tick, stage): ``ptr`` (rows ``ptr[2t] .. ptr[2t+1]`` before tick ``t``'s kernel, ``..
    ptr[2t+2]`` after it), ``code``, ``block`` (dense), ``lo``, ``hi`` (bytes), ``event``
    (a Plan's allocator-event ordinal, else -1), ``flag`` (a discard the executor may
    carry out on a block freed by the very event it follows), and the schedule's
    divergences counted before each tick (``end_t + 1`` values)."""
    from ._policies import PlanSchedule, PrefetchOnAlloc, Schedule, SwapActivations

    if isinstance(sched, PlanSchedule) and available():
        return _plan_table(sched, prep, end_t)
    z = np.zeros(0, np.int64)
    if type(sched) is Schedule:
        return (np.zeros(2 * end_t + 1, np.int64), z, z, z, z, z, np.zeros(0, bool),
                np.zeros(end_t + 1, np.int64))
    if isinstance(sched, PrefetchOnAlloc):
        s = int(prep.ev_ptr[end_t])
        rows = np.flatnonzero(prep.ev_kind[:s] == EventKind.ALLOC)
        tick = np.searchsorted(prep.ev_ptr, rows, side="right") - 1
        key = 2 * tick
        n = len(rows)
        return (_ptr(key, end_t), np.zeros(n, np.int64), prep.ev_block[rows].astype(np.int64),
                np.zeros(n, np.int64), np.full(n, -1, np.int64), np.full(n, -1, np.int64),
                np.zeros(n, bool), np.zeros(end_t + 1, np.int64))
    if isinstance(sched, SwapActivations):
        items = [(2 * t + st, (*a, -1, False)) for st, d in ((0, sched.pre), (1, sched.post))
                 for t, lst in d.items() if t < end_t for a in lst]
        return _from_items(items, end_t, np.zeros(end_t + 1, np.int64))
    # any other schedule: ask it tick by tick, as the reference loop does
    items = []
    div = np.zeros(end_t + 1, np.int64)
    for t in range(end_t):
        div[t] = sched.divergences
        for st, stage in ((0, "pre"), (1, "post")):
            acts = sched.at(t, stage)
            free_ok = getattr(sched, "discard_at_free", ())
            items += [(2 * t + st, (*a[:4], a[4] if len(a) > 4 else -1, a[1] in free_ok))
                      for a in acts]
    div[end_t] = sched.divergences
    return _from_items(items, end_t, div)


def _starts(prep: Prepared) -> np.ndarray:
    """Per tick: does an iteration start there (Note [Host calls] in ``_mechanisms``)."""
    s = np.zeros(max(prep.n_ticks, 1), bool)
    m = np.asarray(prep.iter_starts, np.int64)
    s[m[(m >= 0) & (m < prep.n_ticks)]] = True
    return s


def _ptr(key: np.ndarray, end_t: int) -> np.ndarray:
    return np.searchsorted(key, np.arange(2 * end_t + 1)).astype(np.int64)


def _from_items(items, end_t: int, div: np.ndarray):
    """The table from ((2 tick + stage), (code, block, lo, hi, event, flag)) items."""
    items.sort(key=lambda x: x[0])  # stable: each (tick, stage) keeps its order
    n = len(items)
    key = np.fromiter((k for k, _ in items), np.int64, n)
    col = [np.fromiter((a[i] for _, a in items), np.int64, n) for i in range(5)]
    flag = np.fromiter((bool(a[5]) for _, a in items), bool, n)
    return _ptr(key, end_t), col[0], col[1], col[2], col[3], col[4], flag, div


def _plan_table(sched, prep: Prepared, end_t: int):
    k, *cols = sched.rows  # sorted by k, the plan's order within one k (as by_k)
    period = sched.period
    keep = (k >= 0) & (k < period)
    k, cols = k[keep], [c[keep] for c in cols]
    k_ptr = np.searchsorted(k, np.arange(period + 1)).astype(np.int64)
    marks = np.zeros(max(end_t, 1), bool)
    m = np.asarray(sorted(sched.marks), np.int64)
    marks[m[m < end_t]] = True
    by_period = sched.sync == "period"
    ptr, code, blk, lo, hi, ev, flag, div = _mod.plan_table(
        end_t, prep.ev_ptr, prep.ev_kind, prep.ev_block, prep.bsize, prep.balloc_tick, marks,
        int(m.min()) if len(m) else -1, by_period, period, sched.anchor,
        np.asarray(sched.sizes, np.int64), k_ptr, cols[0], cols[1], cols[2].astype(bool),
        cols[3], cols[4], _mod.DISCARD)
    sched.divergences = int(div[end_t])  # as after the reference's calls to at()
    return ptr, code, blk, lo, hi, ev, flag, div


def run(prep: Prepared, hw, B: int, sched, pool: bool, zero_fill: bool, to_end: bool,
        discard_min: int, figures_only: bool = False,
        stop_above_s: float = float("inf")) -> dict:
    """The run ``_api._run`` makes, compiled: the window's books as a dict (see
    ``_api._window_result``) plus ``actions`` (tick, stage, code, block, event arrays).
    ``figures_only``: no timeline, copies or actions (None; ``_api``'s Note [Figures
    only]); ``stop_above_s``: stop once the window's time so far is above it (the books
    then say ``stopped``; ``_api``, Note [A run stopped once it is slower])."""
    assert available()
    ws, we = prep.window
    end_t = prep.n_ticks if to_end else we
    ptr, code, blk, lo, hi, ev, flag, div = action_table(sched, prep, end_t)
    hwf = np.array([hw.fault_batch_latency_s, hw.h2d_fault_Bps, hw.d2h_evict_Bps,
                    hw.remote_read_Bps, hw.d2h_prefetch_Bps, hw.h2d_prefetch_Bps,
                    hw.remote_write_Bps, hw.action_call_s,
                    float(hw.access_counter_migration), hw.duplex_Bps], float)
    I, outf, outi, rows_f, rows_i, trf, tri, ran, stopped = _mod.run(
        prep.n_ticks, ws, we, to_end, np.ascontiguousarray(prep.dur_s, float), prep.ev_ptr,
        prep.ev_kind, prep.ev_block, prep.acc_ptr, prep.acc_chunk, prep.acc_need,
        prep.acc_write, prep.acc_read, prep.bchunk0, prep.bnchunk, prep.bsize, prep.csize,
        prep.cblock, ptr, code, blk, lo, hi, flag, int(B), int(hw.va_block_bytes),
        int(hw.fault_batch_bytes), hwf, bool(pool), bool(zero_fill), int(discard_min),
        _starts(prep), float(stop_above_s))
    _state["calls"] += 1
    if I[_mod.ERR] == 1:
        raise RuntimeError(
            f"simulator invariant broken: need {int(I[_mod.ERR_NEED]):,} bytes with "
            f"{int(I[_mod.CLAIMED]):,} held of a {int(B):,} byte budget and nothing left to "
            "evict")
    if I[_mod.ERR] == 2:
        raise ValueError(f"unknown action code {int(I[_mod.ERR_NEED])}")
    ntr = int(outi[7])
    t_start = float(outf[4])
    W = 0 if figures_only else len(rows_f)
    tl = None
    if W:
        tl = {"tick": np.arange(ws, ws + W, dtype=np.int64), "start_s": rows_f[:, 0],
              "compute_s": rows_f[:, 1], "stall_s": rows_f[:, 2],
              "stall_fault_s": rows_f[:, 3], "stall_evict_s": rows_f[:, 4],
              "stall_link_s": rows_f[:, 5], "stall_host_s": rows_f[:, 6],
              "resident_bytes": rows_i[:, 0],
              "h2d_bytes": rows_i[:, 1], "d2h_bytes": rows_i[:, 2]}
    tr = None
    if ntr and not figures_only:  # the copies' times are relative to the window's start
        tr = {"start_s": trf[:ntr, 0] - t_start, "end_s": trf[:ntr, 1] - t_start,
              "direction": DIRECTIONS[tri[:ntr, 0]], "bytes": tri[:ntr, 1],
              "block": tri[:ntr, 2], "cause": CAUSES[tri[:ntr, 3]]}
    # only a Plan's actions are listed (SimResult.actions)
    sel = np.flatnonzero(ran) if sched.plan_events and not figures_only \
        else np.zeros(0, np.int64)
    tick = np.searchsorted(ptr, sel, side="right") - 1  # row -> 2t + stage
    actions = (tick // 2, np.where(tick % 2 == 0, "pre", "post").astype(object), code[sel],
               blk[sel], ev[sel])
    return {"T": float(outf[0]), "sf": float(outf[1]), "se": float(outf[2]),
            "sl": float(outf[3]), "sh": float(outf[5]), "claimed_end": int(outi[0]),
            "pending_end": int(outi[1]),
            "resident_end": int(outi[2]), "bytes_h2d": int(outi[3]),
            "bytes_d2h": int(outi[4]), "faults": int(outi[5]), "peak": int(outi[6]),
            "led": {k: int(v) for k, v in zip(LEDGER, outi[8:])},
            "divergences": int(div[we] - div[ws]),
            "timeline": tl, "transfers": tr, "actions": actions, "stopped": bool(stopped)}

