"""A recorded training loop run again through the allocator under a ``Scheduler``: how the
runtime would have behaved on it (states, plans, relearns, steps armed per kind).

Rule: each ALLOC of the trace is a ``native.malloc`` of its bytes, each FREE a
``native.free``, each MARK a ``Scheduler.step()``; without marks the Scheduler is polled
every ``poll_every`` allocator events (as a loop without markers would be, from
``uvm_sched.step()``-less code that calls ``poll()``). Where a plan is being made, the
replay waits for it (``wait_planned``) before the next event: the figures then say what the
runtime does with the plan, not how fast this machine plans. Meant for the host backend
(``native._reset("host")``): memory is reserved, never touched, so only the runtime's
decisions are measured, not time (so the watchdog, which times steps, is best left off:
``watchdog_iters=0``). The ring is drained first: pending events of the caller are dropped.
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["replay_loop"]


def replay_loop(trace, *, poll_every: int = 64, timeout_s: float = 300.0,
                **scheduler_opts: Any) -> dict[str, Any]:
    """Replay ``trace``'s allocator events and marks under ``Scheduler(**scheduler_opts)``
    (``hook`` is off: the marks are the steps) and return its ``stats()`` at the end, plus
    ``executor_clean_share``: the executor's iterations that ran without a divergence (or
    went on in phase after events inserted into them) and the stretches inserted that ran
    whole by a plan of their own (an eval batch: ``_runtime_insertions``) over those
    iterations and all the stretches inserted -- the armed share of a loop without
    markers (None when it ran none). Raises
    ``TimeoutError`` when a plan takes longer than ``timeout_s`` seconds."""
    from . import native
    from .runtime import Scheduler
    from .trace._model import EventKind

    c = trace.columns
    kinds, blocks, sizes = c["kind"], c["block"], c["size"]
    addr: dict[int, int] = {}
    s = Scheduler(hook=False, **scheduler_opts)
    native.drain_events()  # what the caller left in the ring is not this loop's
    n_ev = 0
    try:
        s.start()
        for i in np.flatnonzero(kinds <= EventKind.MARK).tolist():
            k = int(kinds[i])
            if k == EventKind.MARK:
                s.step()
            elif k == EventKind.ALLOC:
                addr[int(blocks[i])] = native.malloc(int(sizes[i]))
                n_ev += 1
            elif k == EventKind.FREE:
                native.free(addr.pop(int(blocks[i])))
                n_ev += 1
            else:
                continue
            if k != EventKind.MARK and n_ev % poll_every == 0:
                s.poll()
            if s._job is not None and not s.wait_planned(timeout_s) and s._job is not None:
                raise TimeoutError(f"no plan after {timeout_s:,.0f} s at allocator event "
                                   f"{n_ev:,} of {trace.meta.get('name', 'the trace')!r}")
            # a plan of another kind (eval, partial batch), of an inserted stretch
            for kind_job in (s._steps.plans.job, s._steps.inserts.job):
                if kind_job is not None and not kind_job.done.wait(timeout_s):
                    raise TimeoutError(f"no kind plan after {timeout_s:,.0f} s at allocator "
                                       f"event {n_ev:,}")
        st = s.stats()
    finally:
        s.close()
        for a in addr.values():
            native.free(a)
    it = int(st["iterations_armed"])
    stretches = it + int(st["insertions"])
    clean = it - int(st["iterations_diverged"]) + int(st["insertions_planned"])
    st["executor_clean_share"] = clean / stretches if it else None
    return st
