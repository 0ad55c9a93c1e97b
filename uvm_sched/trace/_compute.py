"""Measured compute times in place of the roofline: ``Trace.with_compute_times(measured)``.

The rule (one, for every source): a measured *iteration* time replaces the trace's
estimate of it, and is spread over the ticks in proportion to the trace's own per-tick
times (the roofline of a recorded trace). Every tick is scaled by one factor,

    scale = median measured iteration time / median iteration time of the trace

(the trace's iterations run from each marker to the next, the last to the end of the
trace; a measured trace's, from marker to marker: complete ones only),
so the shape of an iteration (which op is long, which is short) stays the roofline's and
its length becomes the device's. Why the median and one factor: a measured run and a
recorded trace rarely have the same iterations one to one (warm-up, a partial last batch,
another number of steps), and the median is what a steady state is; why not per op: an
allocator-level trace does not name the ops, so a measured op cannot be matched to a tick
without guessing (a Kineto trace's own ticks are allocator events, not ops).

Sources of measured iteration times, ``measured``:

* a ``Trace`` with kernel times and iteration markers (``load`` of a Kineto/profiler JSON
  recorded on a GPU with ``ProfilerStep`` spans): per iteration, the sum of its kernel
  durations (device busy time: "kernel time per tick via correlation ids");
* a ``Trace`` with markers but no device time per tick (``Scheduler.trace()``, a
  ``uvm_sched`` runtime recording): per iteration, the wall time between its markers as
  the runtime's clock measured them (``t_ns`` of the MARK events);
* a sequence of seconds per iteration (one's own timer, the runtime's marker timings).

The result's ``time_source`` says which, with the figures (``meta["compute_times"]``).
A trace without markers, or whose ticks have no time to spread over, is refused with the
reason (``TraceError``): spreading evenly would be an assumption, and
``assume_tick_ns`` is the place to make one.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ._model import CPU_WALL_CLOCK, EventKind, Trace, TraceError

__all__ = ["with_compute_times", "measured_iterations"]


def _iteration_bounds(trace: Trace, to_end: bool = False) -> list[tuple[int, int]]:
    """(start, stop) ticks of the trace's iterations: from one MARK to the next, and with
    ``to_end`` from the last MARK to the end of the trace too (the iteration the simulator
    measures when it is complete)."""
    m = [int(x) for x in trace.iteration_starts]
    if to_end and m:
        m.append(trace.n_ticks)
    return [(a, b) for a, b in zip(m, m[1:]) if b > a]


def measured_iterations(measured: Any) -> tuple[np.ndarray, str]:
    """(seconds per measured iteration, where they come from in words) from a ``Trace``
    (kernel times between its markers, else wall time between them) or a sequence of
    seconds. TraceError when none can be had, naming why."""
    if isinstance(measured, Trace):
        name = measured.meta.get("name") or measured.meta.get("source") or "trace"
        its = _iteration_bounds(measured)
        if not its:
            raise TraceError(
                f"measured times from {name!r}: it has {len(measured.iteration_starts)} "
                "iteration marker(s); at least two are needed to time one iteration "
                "(profile with a schedule and prof.step(), or call step() per iteration)")
        if measured.meta.get("time_source") == CPU_WALL_CLOCK:
            raise TraceError(f"measured times from {name!r}: its times are a CPU profile's "
                             f"({CPU_WALL_CLOCK}), not a GPU's")
        tns = np.asarray(measured.tick_ns, np.float64)
        spans = [tns[a:b] for a, b in its]
        if all(np.isfinite(s).all() for s in spans):
            secs = np.array([float(s.sum()) for s in spans]) * 1e-9
            return secs, f"kernel times of {name!r} (sum per iteration)"
        kind, t_ns = measured.kind, measured.t_ns
        mark_t: dict[int, int] = {}
        for tick, t in zip(measured.tick[kind == EventKind.MARK],
                           t_ns[kind == EventKind.MARK]):
            mark_t.setdefault(int(tick), int(t))
        if not measured.has_clock:
            raise TraceError(f"measured times from {name!r}: it has neither kernel times nor "
                             "a clock on its markers")
        secs = np.array([(mark_t[b] - mark_t[a]) * 1e-9 for a, b in its])
        return secs, f"wall time between the markers of {name!r}"
    try:
        secs = np.asarray(measured, np.float64).ravel()
    except (TypeError, ValueError):
        raise TypeError("measured compute times must be a Trace or a sequence of seconds per "
                        f"iteration, got {type(measured).__name__}") from None
    if isinstance(measured, (str, bytes)) or not len(secs):
        raise TypeError("measured compute times must be a Trace or a non-empty sequence of "
                        f"seconds per iteration, got {measured!r}")
    return secs, "seconds given per iteration"


def with_compute_times(trace: Trace, measured: "Trace | Sequence[float]") -> Trace:
    """``trace`` with its per-tick device times scaled so that its median iteration takes
    the median measured iteration time (see the module doc for the rule and the sources);
    ``meta["time_source"]`` says where the time now comes from and ``meta["compute_times"]``
    holds the figures (seconds: ``measured_iteration_s``, ``estimated_iteration_s``,
    ``scale``, ``iterations``)."""
    secs, where = measured_iterations(measured)
    bad = ~(np.isfinite(secs) & (secs > 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise TraceError(f"measured iteration {i} takes {float(secs[i])!r} s ({where}); every "
                         "iteration time must be a positive number of seconds")
    name = trace.meta.get("name") or "trace"
    its = _iteration_bounds(trace, to_end=True)
    if not its:
        raise TraceError(f"trace {name!r} has no iteration marker: no iteration to give the "
                         "measured iteration time to")
    tns = np.asarray(trace.tick_ns, np.float64)
    if not np.isfinite(tns).all():
        raise TraceError(
            f"trace {name!r} has {int((~np.isfinite(tns)).sum()):,} tick(s) of unknown device "
            "time: the measured time is spread in proportion to the ticks' own times; give "
            "them one first (trace.assume_tick_ns(ns), CLI --assume-tick-us)")
    est = float(np.median([tns[a:b].sum() for a, b in its])) * 1e-9
    if not est > 0:
        raise TraceError(f"trace {name!r}: its iterations take no time ({trace.time_source}); "
                         "there is nothing to spread the measured time in proportion to")
    meas = float(np.median(secs))
    scale = meas / est
    was = trace.time_source
    meta = dict(trace.meta, time_source=(
        f"measured: {meas * 1e3:.4g} ms per iteration (median of {len(secs)}, {where}), "
        f"spread over the ticks in proportion to the {was}"),
        compute_times={"measured_iteration_s": meas, "estimated_iteration_s": est,
                       "scale": scale, "iterations": int(len(secs)), "source": where,
                       "spread_by": was})
    return Trace(trace.columns, tick_ns=tns * scale, meta=meta, validate=False)
