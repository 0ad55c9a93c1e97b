"""``analyze(trace) -> Pattern``: iterations, block identity and per-block statistics.

Definitions (all ticks relative to the representative iteration's start unless said so):

* **Iterations** -- step markers are ground truth: MARK rows (``ProfilerStep#``,
  ``uvm_sched.step()``, the optimizer hook) start iterations; an importer's
  ``meta["step_ends"]`` (a snapshot's optimizer frames, an Execution Trace's
  ``Optimizer.step#`` ranges) end them. Marked spans are kept whatever their lengths;
  ``kinds`` groups them (``_evidence.iteration_kinds``) and a note names those that differ.
  ``period_events`` is then the most common length after the first. Without markers the
  period is learned (``_period``) from (kind, size) tokens, else from the structure
  (lifetimes in allocator events: per-batch shapes), and kept only with evidence (Note
  [Never invent an iteration] in ``_evidence``); otherwise the whole trace is one iteration
  (``period_events`` = all allocator events) and the note says which rule failed.
  ``evidence`` holds the signal used and the figures of each rule (coverage...).
* **Representative iteration** (``rep``) -- the last iteration whose token string (kind and
  size of each allocator event) is the steady-state one (the learned reference string, or,
  with markers, the most common one among iterations of the period's length).
* **Persistent** block -- live through the whole representative iteration (allocated before
  its start, freed after its end or never: weights, optimizer state), or allocated in it
  and never freed when the previous iteration's block of the same ordinal was not freed
  either (or there is no previous iteration). Ordinal = its ALLOC ordinal in the trace.
* Other blocks: ordinal = ALLOC ordinal within the iteration they were allocated in. Blocks
  allocated in the previous iteration and freed in this one (e.g. gradients freed by the
  next ``zero_grad`` when markers put the boundary before it) appear with ``alloc_tick=-1``,
  ``persistent=False`` and their ordinal in that previous iteration (-1 when it was not an
  iteration); a Plan cannot name them (they are the previous instance of that ordinal).
* **Classes** (first match): ``persistent``; ``workspace`` -- lifetime <= 1 tick (alloc and
  free in the same or adjacent ticks) and, with ground truth, accessed in at most one tick
  (no reuse); ``activation`` -- live across the iteration's turn (the tick of peak live
  bytes, where the forward pass turns into the backward pass) or living at least
  ``ACTIVATION_SHARE`` of the iteration; ``transient`` -- the rest (short-lived temporaries).
  Lifetime = free tick - alloc tick in trace ticks (never freed: to the end of the trace).
* **Idle gaps** -- with ground-truth ACCESS rows (``idle_from="access"``): the longest run
  of ticks in the block's live range within the iteration in which it is not accessed
  (cyclic across the iteration boundary for persistent blocks); without them
  (``idle_from="lifetime"``): the oblivious view, its alloc->free span within the iteration.
* **Device time** -- ``trace.tick_ns`` where known; unknown ticks are estimated as the
  difference of the ``t_ns`` of the first event of a tick and of the next tick (host time,
  interpolated over ticks without events; the last tick gets the median). When ``t_ns`` is
  just the tick number or ``meta["clock"] == "none"`` (no timing recorded) it stays NaN
  and every output says the time is unavailable (``tick_ns_source == "unknown"``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._errors import Error
from ..trace._model import EventKind, Trace
from ._evidence import (check_learned, describe_kinds, iteration_kinds, structure_tokens,
                        varying_allocs)
from ._period import detect_period, make_hash, tokenize
from ._tables import ACTIVATION_SHARE, CLASSES, AllocEvents, block_tables

__all__ = ["analyze", "Pattern", "PatternError", "CLASSES", "ACTIVATION_SHARE"]

_PCTS = (50, 90, 99, 100)


class PatternError(Error, ValueError):
    """The trace cannot be analysed (e.g. it has no allocations)."""


@dataclass(repr=False, eq=False)
class Pattern:
    """The periodic structure of a trace (see the module doc for every definition).

    ``period_events`` allocator events per iteration; ``iterations`` (start_tick, stop_tick)
    per iteration found; ``rep`` the representative one, spanning ``start_tick`` ..
    ``stop_tick``; ``source`` "markers" or "learned"; ``events`` / ``blocks`` its tables;
    ``tick_ns`` its device time per tick (ns); ``notes`` say what was decided and why;
    ``alloc_varies`` per ALLOC of the representative whether per-batch shapes resize it
    (``_evidence.varying_allocs``: a plan names those by position).
    """

    period_events: int
    iterations: list[tuple[int, int]]
    rep: int
    source: str
    events: Any  # pandas.DataFrame
    blocks: Any  # pandas.DataFrame
    tick_ns: np.ndarray
    start_tick: int
    stop_tick: int
    iteration_events: list[tuple[int, int]]  # [start, stop) in allocator-event positions
    identical: np.ndarray  # per iteration: same token string as the representative
    coverage: float  # share of allocator events in the iterations (evidence["coverage"])
    tick_ns_source: str  # "trace", "t_ns", "trace+t_ns" or "unknown"
    has_accesses: bool
    name: str = "trace"
    notes: list[str] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)  # signal, coverage, rule figures
    kinds: list[dict[str, Any]] = field(default_factory=list)  # iterations grouped
    # per ALLOC of the representative: its size changes between iterations of its structure
    alloc_varies: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    time_source: str = ""  # Trace.time_source: what the trace's clock is (words)

    @property
    def regularity(self) -> float:
        """Share of iterations identical (kinds and sizes, in order) to the representative."""
        return float(np.mean(self.identical)) if len(self.identical) else 0.0

    @property
    def alloc_sizes(self) -> list[int]:
        """Bytes of each ALLOC of the representative iteration, in order (a Plan's
        ``meta["alloc_sizes"]``)."""
        ev = self.events
        return [int(x) for x in ev.loc[ev["kind"] == "alloc", "size"]]

    @property
    def n_ticks(self) -> int:
        return self.stop_tick - self.start_tick

    def summary(self) -> dict[str, Any]:
        """The characterisation as plain data: class shares of bytes, lifetime and idle-gap
        percentiles (ticks and ms), regularity, period and iteration count."""
        b = self.blocks
        sizes = b["size"].to_numpy(np.float64)
        total = float(sizes.sum())
        by_cls = {c: int(b.loc[b["cls"] == c, "size"].sum()) for c in CLASSES}
        cnt = {c: int((b["cls"] == c).sum()) for c in CLASSES}
        local = b[(~b["persistent"]) & (b["alloc_event"] >= 0)]
        t_ms = np.nansum(self.tick_ns) / 1e6 if np.isfinite(self.tick_ns).any() else float("nan")
        ev = self.events
        live = np.cumsum(np.where(ev["kind"] == "alloc", ev["size"], -ev["size"]))
        base = int(b.loc[b["alloc_event"] < 0, "size"].sum())
        return {
            "name": self.name,
            "source": self.source,
            "period_events": int(self.period_events),
            "iterations": len(self.iterations),
            "rep": int(self.rep),
            "rep_ticks": [int(self.start_tick), int(self.stop_tick)],
            "rep_time_ms": float(t_ms),
            "tick_ns_source": self.tick_ns_source,
            "time_source": self.time_source,
            "regularity": self.regularity,
            "coverage": float(self.coverage),
            "blocks": int(len(b)),
            "bytes_total": int(total),
            "peak_bytes": int(base + (live.max() if len(live) else 0)),
            "bytes_by_class": by_cls,
            "share_by_class": {c: (by_cls[c] / total if total else 0.0) for c in CLASSES},
            "count_by_class": cnt,
            "lifetime_ticks": _pct(local["lifetime_ticks"]),
            "lifetime_ms": _pct(local["lifetime_ms"]),
            "idle_from": "access" if self.has_accesses else "lifetime",
            "idle_ticks": _pct(b["max_idle_ticks"]),
            "idle_ms": _pct(b["max_idle_ms"]),
            "stability_mean": float(b["stability"].mean()) if len(b) else float("nan"),
            "evidence": dict(self.evidence),
            "kinds": [dict(kd) for kd in self.kinds],
            "notes": list(self.notes),
        }

    def __str__(self) -> str:
        s = self.summary()
        gb = 1 << 30
        if np.isfinite(s["rep_time_ms"]):
            when = f"{s['rep_time_ms']:.3f} ms, time from {s['tick_ns_source']}" + (
                f": {s['time_source']}" if s["time_source"] else "")
        else:
            when = "time unavailable: the trace has no clock"
        ev = s["evidence"]
        lines = [
            f"pattern of {s['name']}: period {s['period_events']:,} allocator events "
            f"({s['source']}), {s['iterations']} iteration(s), representative #{s['rep']} = "
            f"ticks {s['rep_ticks'][0]:,}..{s['rep_ticks'][1]:,} ({when})",
            f"evidence: {ev.get('signal', 'none')}"
            + (f"; iterations cover {ev['coverage']:.0%} of the allocator events"
               + (" from the first on" if s["source"] == "learned" else "")
               if "coverage" in ev and s["iterations"] > 1 else ""),
            f"regularity: {s['regularity']:.0%} of iterations identical to the representative;"
            f" mean per-ordinal stability {s['stability_mean']:.2f}",
            f"blocks of one iteration (representative, persistent ones included): "
            f"{s['blocks']:,}, {s['bytes_total'] / gb:.3f} GiB; peak live "
            f"{s['peak_bytes'] / gb:.3f} GiB",
        ]
        for c in CLASSES:
            lines.append(
                f"  {c:<11} {s['count_by_class'][c]:>8,} blocks {s['bytes_by_class'][c] / gb:>10.3f}"
                f" GiB  {s['share_by_class'][c]:>6.1%}"
            )
        for label, key in (("lifetime", "lifetime"), (f"idle gap ({s['idle_from']})", "idle")):
            t, m = s[f"{key}_ticks"], s[f"{key}_ms"]
            lines.append(
                f"{label}: " + ", ".join(
                    f"p{q if q < 100 else 'max'} {t[f'p{q}']:.0f} ticks"
                    + (f"/{m[f'p{q}']:.3f} ms" if np.isfinite(m[f"p{q}"]) else "")
                    for q in _PCTS
                ) + ("" if np.isfinite(m["p50"]) else " (times unavailable)")
            )
        lines += [f"note: {n}" for n in s["notes"]]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"<Pattern {self.name}: period {self.period_events:,} events ({self.source}), "
                f"{len(self.iterations)} iterations, {len(self.blocks):,} blocks>")


def _pct(series) -> dict[str, float]:
    x = np.asarray(series, np.float64)
    x = x[np.isfinite(x)]
    if not len(x):
        return {f"p{q}": float("nan") for q in _PCTS}
    v = np.percentile(x, _PCTS)
    return {f"p{q}": float(y) for q, y in zip(_PCTS, v)}


def analyze(trace: Trace) -> Pattern:
    """Find the iterations of ``trace`` and describe each block of a representative one.

    1. Iterations: from step markers, else from an importer's step ends, else learned from
       the allocator events and kept only with evidence (``_iterations``).
    2. The representative iteration and which iterations are identical to it
       (``_representative``), and the kinds of iteration (``_evidence.iteration_kinds``).
    3. Device time per tick (``_tick_time``).
    4. The representative iteration's block and event tables (``_tables.block_tables``).

    Returns a ``Pattern`` (see the module doc for definitions). Time: O(n log n) in the
    number of events, vectorised (no per-event Python loop).
    """
    if not isinstance(trace, Trace):
        raise PatternError(f"analyze() takes a uvm_sched Trace, got {type(trace).__name__}")
    c = trace.columns
    ev_rows = np.flatnonzero(c["kind"] <= EventKind.FREE)
    if len(ev_rows) == 0 or not np.any(c["kind"] == EventKind.ALLOC):
        raise PatternError(
            f"trace {trace.meta.get('name', '')!r} has no allocations ({len(trace):,} events): "
            "nothing to analyse"
        )
    ev = AllocEvents(c["kind"][ev_rows].astype(np.int8), c["size"][ev_rows],
                     c["block"][ev_rows], c["tick"][ev_rows])
    tok = tokenize(ev.kind, ev.size)
    rh = make_hash(tok)
    notes: list[str] = []
    found = _iterations(trace, ev, tok, rh, notes)
    notes += _recording_notes(trace)
    seg = found.seg
    rep, identical, period = _representative(found, rh)
    ts, te = int(found.seg_ticks[rep, 0]), int(found.seg_ticks[rep, 1])
    kinds = iteration_kinds(seg, rep, tok, ev.kind)
    line = describe_kinds(kinds, len(seg))
    if line:
        notes.append(line)
    tick_time, tsrc = _tick_time(trace)
    blocks, events = block_tables(trace, ev, seg, rep, ts, te, *_cum_time(tick_time))
    return Pattern(
        period_events=int(period),
        iterations=[(int(a), int(b)) for a, b in found.seg_ticks],
        rep=rep,
        source=found.source,
        events=events,
        blocks=blocks,
        tick_ns=np.array(tick_time[ts:te], np.float64),
        start_tick=ts,
        stop_tick=te,
        iteration_events=[(int(a), int(b)) for a, b in seg],
        identical=identical,
        coverage=float(found.evidence.get("coverage", 0.0)),
        tick_ns_source=tsrc,
        time_source=trace.time_source,
        has_accesses=trace.has_accesses,
        name=str(trace.meta.get("name") or trace.meta.get("source") or "trace"),
        notes=notes,
        evidence=found.evidence,
        kinds=kinds,
        alloc_varies=varying_allocs(seg, rep, kinds, ev.kind, ev.size),
    )


# -- iterations: markers (ground truth), else the learned period, checked ---------------------

@dataclass
class _Found:
    """Iterations as found: allocator-event spans ``seg`` [start, stop) and their ticks,
    the period (allocator events; None: marked, the most common length decides), the
    detection (learned only) and the evidence."""

    source: str  # "markers" or "learned"
    seg: np.ndarray  # (K, 2) int64
    seg_ticks: np.ndarray  # (K, 2) int64
    period: int | None
    det: Any
    evidence: dict[str, Any]


def _iterations(trace: Trace, ev: AllocEvents, tok, rh, notes: list[str]) -> _Found:
    """Step 1 of ``analyze``: MARK rows, else ``meta["step_ends"]``, else learned (Note
    [Never invent an iteration]); notes what was decided. Sets the period of marked
    iterations (the most common length after the first, latest on ties) and their
    coverage."""
    n = ev.n
    marks = trace.iteration_starts
    m_ev = np.searchsorted(ev.tick, marks, "left")
    # a marker after the last allocator event starts an iteration not recorded yet (a
    # runtime learns right at a marker): it delimits nothing
    keep_m = m_ev < n
    marks, m_ev = marks[keep_m], m_ev[keep_m]
    step_ends = _frame_step_ends(trace, ev.tick, n) if not len(marks) else None
    if len(marks):
        found = _Found("markers", np.stack([m_ev, np.append(m_ev[1:], n)], axis=1),
                       np.stack([marks, np.append(marks[1:], trace.n_ticks)], axis=1), None,
                       None, {"signal": f"{len(marks)} step marker(s) in the trace (MARK rows)"})
        if m_ev[0] > 0:
            notes.append(f"before the first marker: {int(m_ev[0]):,} allocator events of "
                         "set-up/warm-up, not an iteration")
    elif step_ends is not None and len(step_ends):
        found = _step_end_iterations(trace, ev, step_ends, notes)
    else:
        found = _learned_iterations(trace, ev, tok, rh, notes)
    found.seg = found.seg.astype(np.int64)
    found.seg_ticks = found.seg_ticks.astype(np.int64)
    lens = found.seg[:, 1] - found.seg[:, 0]
    if found.period is None:  # marked: the most common length after the first, latest on ties
        pool = lens[1:] if len(lens) > 1 else lens
        vals, cnt = np.unique(pool, return_counts=True)
        best = vals[cnt == cnt.max()]
        found.period = int(next(x for x in pool[::-1] if x in best))
    if found.source == "markers":
        found.evidence["coverage"] = float(lens.sum() / n)
    return found


def _step_end_iterations(trace: Trace, ev: AllocEvents, step_ends, notes: list[str]) -> _Found:
    """Iterations ending where an importer's ``meta["step_ends"]`` say; the first starts at
    the first event (it includes the set-up)."""
    n, n_ticks = ev.n, trace.n_ticks
    fs = trace.meta["step_ends"]
    starts = np.concatenate(([0], step_ends[:-1]))
    t_of = lambda e: np.where(e < n, ev.tick[np.minimum(e, n - 1)], n_ticks)  # noqa: E731
    seg_ticks = np.stack([t_of(starts), t_of(step_ends)], axis=1)
    seg_ticks[0, 0] = 0
    notes.append("iteration 1 starts at the first event and includes the set-up"
                 + (f"; {n - int(step_ends[-1]):,} allocator events after the last step "
                    "are not an iteration" if step_ends[-1] < n else ""))
    return _Found("markers", np.stack([starts, step_ends], axis=1), seg_ticks, None, None,
                  {"signal": f"{len(step_ends)} training step(s) ending where the trace's "
                             f"{fs.get('signal', 'step ends')} say"})


def _learned_iterations(trace: Trace, ev: AllocEvents, tok, rh, notes: list[str]) -> _Found:
    """The period learned from (kind, size) tokens, else from the structure; without
    evidence for either, the whole trace is one iteration."""
    n, n_ticks = ev.n, trace.n_ticks
    accepted, det, seg, evidence, why = _learn(tok, rh, ev)
    if not accepted:
        # Per-batch shapes (dynamic padding, a different last batch) change sizes, not
        # the structure: the same lifetimes in allocator events, step after step. Taken
        # only when sizes find no period: where sizes repeat (a cycle of shapes), their
        # longer period is the evidence, never the structure's sub-period.
        stok = structure_tokens(ev.kind, ev.block)
        ok2, det2, seg2, ev2, why2 = _learn(stok, make_hash(stok), ev)
        if ok2:
            accepted, det, seg, evidence = True, det2, seg2, ev2
            evidence["signal"] = (f"allocator-event structure repeats every "
                                  f"{det2.period:,} events (alloc/free lifetimes; sizes "
                                  "differ between iterations)")
            why = why2
    if det is not None:
        notes += det.notes
    notes += why
    if accepted:
        t_start = ev.tick[seg[:, 0]]
        t_stop = np.where(seg[:, 1] < n, ev.tick[np.minimum(seg[:, 1], n - 1)], n_ticks)
        return _Found("learned", seg, np.stack([t_start, t_stop], axis=1), det.period, det,
                      evidence)
    evidence.setdefault("signal", "allocator events: no repeating string")
    notes.append(f"one iteration: the whole trace ({n:,} allocator events)")
    return _Found("learned", np.array([[0, n]]), np.array([[0, n_ticks]]), n, det, evidence)


def _recording_notes(trace: Trace) -> list[str]:
    """What the recording itself says: out-of-memory entries, bytes by category."""
    notes = []
    oom = trace.meta.get("oom")
    if isinstance(oom, dict) and oom.get("count"):
        first_oom = (oom.get("entries") or [{}])[0]
        notes.append(
            f"{oom['count']} out-of-memory entr{'y' if oom['count'] == 1 else 'ies'} in the "
            f"recording: the allocator failed to allocate {first_oom.get('size', 0):,} bytes "
            f"at tick {first_oom.get('tick', '?')} (device free: "
            f"{first_oom.get('device_free', 0):,} bytes)"
            + (" -- the first of them" if oom["count"] > 1 else ""))
    cats = trace.meta.get("bytes_by_category")
    if isinstance(cats, dict) and cats:
        total = sum(int(v) for v in cats.values()) or 1
        notes.append("bytes allocated by category (from the profiler): " + ", ".join(
            f"{k} {int(v) / total:.0%}" for k, v in sorted(cats.items(), key=lambda kv: -kv[1])))
    return notes


def _representative(found: _Found, rh) -> tuple[int, np.ndarray, int]:
    """Step 2 of ``analyze``: the representative iteration (the last one with the
    steady-state token string), which iterations are identical to it, and the period (its
    length when no iteration has the period's)."""
    seg, period = found.seg, found.period
    assert period is not None  # _iterations set it
    lens = seg[:, 1] - seg[:, 0]
    full = lens == period
    hashes = np.zeros(len(seg), np.uint64)
    if full.any():
        hashes[full] = rh.window(seg[full, 0], period)
    det = found.det
    if found.source == "learned" and det is not None and det.period == period:
        ref = rh.window([det.phase], period)[0]
    elif full.any():
        vals, inv, cnt = np.unique(hashes[full], return_inverse=True, return_counts=True)
        best = np.flatnonzero(cnt == cnt.max())
        # ties: the string of the latest iteration among the most common ones
        last_of = {int(v): i for i, v in enumerate(inv.ravel())}
        ref = vals[max(best, key=lambda v: last_of[int(v)])]
    else:
        ref = None
    identical = full & (hashes == ref) if ref is not None else np.zeros(len(seg), bool)
    if identical.any():
        rep = int(np.flatnonzero(identical)[-1])
    elif full.any():
        rep = int(np.flatnonzero(full)[-1])
    else:
        rep = len(seg) - 1
    if not full[rep]:
        period = int(lens[rep])
    return rep, identical, period


def _learn(tok, rh, ev: AllocEvents):
    """detect_period on ``tok``, then Note [Never invent an iteration]:
    (accepted, detection, segments, evidence, notes)."""
    det = detect_period(tok, ev.kind, ev.size, ev.tick, rh)
    if det.period is None:
        return False, det, None, {}, []
    b, is_it = det.boundaries, det.is_iteration
    assert b is not None and is_it is not None  # detect_period sets both with a period
    keep = np.flatnonzero(is_it)
    if not len(keep):  # cannot happen when R is primitive; never return no iteration
        keep = np.flatnonzero(b[:-1] == det.phase)
    seg = np.stack([b[keep], b[keep + 1]], axis=1).astype(np.int64)
    ok, evidence, why = check_learned(seg, det.period, ev.kind, ev.size, ev.block,
                                      repeated=int(round(det.coverage * len(tok))))
    return ok, det, seg, evidence, why


def _frame_step_ends(trace: Trace, ev_tick: np.ndarray, n: int) -> np.ndarray | None:
    """Allocator-event positions where training steps end, from ``meta["step_ends"]``
    (ticks, written by importers: a snapshot's Python frames, an Execution Trace's
    ``Optimizer.step#`` ranges)."""
    fs = trace.meta.get("step_ends")
    if not isinstance(fs, dict) or not isinstance(fs.get("ends"), list):
        return None
    ends = np.unique(np.asarray([int(t) for t in fs["ends"]], np.int64))
    pos = np.unique(np.searchsorted(ev_tick, ends, "left"))
    return pos[pos > 0]


# -- device time ---------------------------------------------------------------------------
def _tick_time(trace: Trace) -> tuple[np.ndarray, str]:
    tns = np.array(trace.tick_ns, np.float64)
    known = np.isfinite(tns)
    clock = trace.meta.get("clock")
    if known.all():
        return tns, (clock if isinstance(clock, str) and clock.startswith("assumed") else "trace")
    t, tn = trace.tick, trace.t_ns
    n_ticks = len(tns)
    no_clock = trace.meta.get("clock") == "none" or np.array_equal(t, tn)
    if len(t) == 0 or no_clock or n_ticks == 0:
        return tns, ("trace" if known.any() else "unknown")
    ticks = np.arange(n_ticks)
    first = np.searchsorted(t, ticks, "left")
    has = first < len(t)
    has[has] = t[first[has]] == ticks[has]
    start = np.interp(ticks, ticks[has], tn[first[has]].astype(np.float64))
    est = np.diff(start)
    tail = float(np.median(est)) if len(est) else float("nan")
    est = np.append(est, tail)
    tns[~known] = est[~known]
    return tns, ("t_ns" if not known.any() else "trace+t_ns")


def _cum_time(tick_time: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    bad = ~np.isfinite(tick_time)
    cum = np.concatenate(([0.0], np.cumsum(np.where(bad, 0.0, tick_time))))
    cnan = np.concatenate(([0], np.cumsum(bad)))
    return cum, cnan
