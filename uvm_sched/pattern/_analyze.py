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
from ._evidence import check_learned, describe_kinds, iteration_kinds, structure_tokens
from ._period import detect_period, make_hash, tokenize

__all__ = ["analyze", "Pattern", "PatternError", "CLASSES", "ACTIVATION_SHARE"]

CLASSES = ("persistent", "activation", "transient", "workspace")
ACTIVATION_SHARE = 0.25  # a block living >= 25% of the iteration is an activation
_PCTS = (50, 90, 99, 100)


class PatternError(Error, ValueError):
    """The trace cannot be analysed (e.g. it has no allocations)."""


@dataclass(repr=False, eq=False)
class Pattern:
    """The periodic structure of a trace (see the module doc for every definition).

    ``period_events`` allocator events per iteration; ``iterations`` (start_tick, stop_tick)
    per iteration found; ``rep`` the representative one, spanning ``start_tick`` ..
    ``stop_tick``; ``source`` "markers" or "learned"; ``events`` / ``blocks`` its tables;
    ``tick_ns`` its device time per tick (ns); ``notes`` say what was decided and why.
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

    Returns a ``Pattern`` (see the module doc for definitions). Time: O(n log n) in the
    number of events, vectorised (no per-event Python loop).
    """
    if not isinstance(trace, Trace):
        raise PatternError(f"analyze() takes a uvm_sched Trace, got {type(trace).__name__}")
    c = trace.columns
    kind_all = c["kind"]
    ev_rows = np.flatnonzero(kind_all <= EventKind.FREE)
    n = len(ev_rows)
    if n == 0 or not np.any(kind_all == EventKind.ALLOC):
        raise PatternError(
            f"trace {trace.meta.get('name', '')!r} has no allocations ({len(trace):,} events): "
            "nothing to analyse"
        )
    ev_kind = kind_all[ev_rows].astype(np.int8)  # 0 alloc, 1 free
    ev_size = c["size"][ev_rows]
    ev_block = c["block"][ev_rows]
    ev_tick = c["tick"][ev_rows]
    n_ticks = trace.n_ticks
    tok = tokenize(ev_kind, ev_size)
    rh = make_hash(tok)
    notes: list[str] = []

    # -- markers (ground truth), else the learned period, checked ----------------------------
    marks = trace.iteration_starts
    m_ev = np.searchsorted(ev_tick, marks, "left")
    # a marker after the last allocator event starts an iteration not recorded yet (a
    # runtime learns right at a marker): it delimits nothing
    keep_m = m_ev < n
    marks, m_ev = marks[keep_m], m_ev[keep_m]
    step_ends = _frame_step_ends(trace, ev_tick, n) if not len(marks) else None
    evidence: dict[str, Any] = {}
    det = None
    if len(marks):
        source = "markers"
        seg = np.stack([m_ev, np.append(m_ev[1:], n)], axis=1)
        seg_ticks = np.stack([marks, np.append(marks[1:], n_ticks)], axis=1)
        evidence = {"signal": f"{len(marks)} step marker(s) in the trace (MARK rows)"}
        if m_ev[0] > 0:
            notes.append(f"before the first marker: {int(m_ev[0]):,} allocator events of "
                         "set-up/warm-up, not an iteration")
        period = None
    elif step_ends is not None and len(step_ends):
        source = "markers"
        fs = trace.meta["step_ends"]
        starts = np.concatenate(([0], step_ends[:-1]))
        seg = np.stack([starts, step_ends], axis=1)
        t_of = lambda e: np.where(e < n, ev_tick[np.minimum(e, n - 1)], n_ticks)  # noqa: E731
        seg_ticks = np.stack([t_of(starts), t_of(step_ends)], axis=1)
        seg_ticks[0, 0] = 0
        evidence = {"signal": f"{len(step_ends)} training step(s) ending where the trace's "
                              f"{fs.get('signal', 'step ends')} say"}
        notes.append("iteration 1 starts at the first event and includes the set-up"
                     + (f"; {n - int(step_ends[-1]):,} allocator events after the last step "
                        "are not an iteration" if step_ends[-1] < n else ""))
        period = None
    else:
        source = "learned"
        accepted, det, seg, evidence, why = _learn(tok, rh, ev_kind, ev_size, ev_block, ev_tick)
        if not accepted:
            # Per-batch shapes (dynamic padding, a different last batch) change sizes, not
            # the structure: the same lifetimes in allocator events, step after step. Taken
            # only when sizes find no period: where sizes repeat (a cycle of shapes), their
            # longer period is the evidence, never the structure's sub-period.
            stok = structure_tokens(ev_kind, ev_block)
            ok2, det2, seg2, ev2, why2 = _learn(stok, make_hash(stok), ev_kind, ev_size,
                                               ev_block, ev_tick)
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
            t_start = ev_tick[seg[:, 0]]
            t_stop = np.where(seg[:, 1] < n, ev_tick[np.minimum(seg[:, 1], n - 1)], n_ticks)
            seg_ticks = np.stack([t_start, t_stop], axis=1)
            period = det.period
        else:
            source = "learned"
            seg = np.array([[0, n]])
            seg_ticks = np.array([[0, n_ticks]])
            period = n
            evidence.setdefault("signal", "allocator events: no repeating string")
            notes.append(f"one iteration: the whole trace ({n:,} allocator events)")
    seg = seg.astype(np.int64)
    seg_ticks = seg_ticks.astype(np.int64)
    lens = seg[:, 1] - seg[:, 0]
    if period is None:  # marked: the most common length after the first, latest on ties
        pool = lens[1:] if len(lens) > 1 else lens
        vals, cnt = np.unique(pool, return_counts=True)
        best = vals[cnt == cnt.max()]
        period = int(next(x for x in pool[::-1] if x in best))
    if source == "markers":
        evidence["coverage"] = float(lens.sum() / n)

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

    # -- representative iteration and regularity ------------------------------------------
    full = lens == period
    hashes = np.zeros(len(seg), np.uint64)
    if full.any():
        hashes[full] = rh.window(seg[full, 0], period)
    if source == "learned" and det is not None and det.period == period:
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
    es, ee = int(seg[rep, 0]), int(seg[rep, 1])
    ts, te = int(seg_ticks[rep, 0]), int(seg_ticks[rep, 1])
    kinds = iteration_kinds(seg, rep, tok, ev_kind)
    line = describe_kinds(kinds, len(seg))
    if line:
        notes.append(line)

    # -- time per tick -------------------------------------------------------------------
    tick_time, tsrc = _tick_time(trace)
    cum_t, cum_nan = _cum_time(tick_time)

    blocks, events = _tables(
        trace, ev_kind, ev_size, ev_block, ev_tick, seg, rep, es, ee, ts, te, n_ticks,
        cum_t, cum_nan,
    )
    return Pattern(
        period_events=int(period),
        iterations=[(int(a), int(b)) for a, b in seg_ticks],
        rep=rep,
        source=source,
        events=events,
        blocks=blocks,
        tick_ns=np.array(tick_time[ts:te], np.float64),
        start_tick=ts,
        stop_tick=te,
        iteration_events=[(int(a), int(b)) for a, b in seg],
        identical=identical,
        coverage=float(evidence.get("coverage", 0.0)),
        tick_ns_source=tsrc,
        time_source=trace.time_source,
        has_accesses=trace.has_accesses,
        name=str(trace.meta.get("name") or trace.meta.get("source") or "trace"),
        notes=notes,
        evidence=evidence,
        kinds=kinds,
    )


def _learn(tok, rh, ev_kind, ev_size, ev_block, ev_tick):
    """detect_period on ``tok``, then Note [Never invent an iteration]:
    (accepted, detection, segments, evidence, notes)."""
    det = detect_period(tok, ev_kind, ev_size, ev_tick, rh)
    if det.period is None:
        return False, det, None, {}, []
    b, is_it = det.boundaries, det.is_iteration
    keep = np.flatnonzero(is_it)
    if not len(keep):  # cannot happen when R is primitive; never return no iteration
        keep = np.flatnonzero(b[:-1] == det.phase)
    seg = np.stack([b[keep], b[keep + 1]], axis=1).astype(np.int64)
    ok, evidence, why = check_learned(seg, det.period, ev_kind, ev_size, ev_block,
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


def _span_ms(cum, cnan, a, b) -> np.ndarray:
    """Device time of ticks [a, b) in ms (NaN where a tick's time is unknown)."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    ms = (cum[b] - cum[a]) / 1e6
    return np.where(cnan[b] - cnan[a] > 0, np.nan, ms)


# -- tables ----------------------------------------------------------------------------------
def _tables(trace, ev_kind, ev_size, ev_block, ev_tick, seg, rep, es, ee, ts, te, n_ticks,
            cum, cnan):
    import pandas as pd

    n = len(ev_kind)
    T = max(te - ts, 1)
    is_alloc = ev_kind == 0
    alloc_pos = np.flatnonzero(is_alloc)  # alloc index i = global ALLOC ordinal
    n_alloc = len(alloc_pos)
    a_block = ev_block[alloc_pos]
    order = np.argsort(a_block, kind="stable")
    free_ev = np.flatnonzero(~is_alloc)
    fi = order[np.searchsorted(a_block[order], ev_block[free_ev])]
    free_pos = np.full(n_alloc, n, np.int64)  # n = never freed
    free_pos[fi] = free_ev
    ev_aidx = np.empty(n, np.int64)
    ev_aidx[alloc_pos] = np.arange(n_alloc)
    ev_aidx[free_ev] = fi
    alloc_before = np.concatenate(([0], np.cumsum(is_alloc)))

    sel = np.flatnonzero((np.arange(n_alloc) < alloc_before[ee]) & (free_pos >= es))
    ap, fp = alloc_pos[sel], free_pos[sel]
    in_a, in_f = ap >= es, fp < ee
    persistent = ~in_a & ~in_f
    r0 = int(alloc_before[es])
    j_rep = sel - r0
    never = in_a & (fp == n)
    if never.any():
        if rep > 0:
            p0, p1 = alloc_before[seg[rep - 1, 0]], alloc_before[seg[rep - 1, 1]]
            prev = p0 + j_rep[never]
            prev_freed = np.zeros(len(prev), bool)
            okp = prev < p1
            prev_freed[okp] = free_pos[prev[okp]] < n
            persistent[never] = ~prev_freed
        else:
            persistent[never] = True
    ordinal = np.where(persistent, sel, j_rep)
    carried = ~in_a & in_f
    if carried.any():
        k = np.searchsorted(seg[:, 0], ap[carried], "right") - 1
        okk = (k >= 0) & (ap[carried] < seg[np.maximum(k, 0), 1])
        ordinal[carried] = np.where(okk, sel[carried] - alloc_before[seg[np.maximum(k, 0), 0]], -1)

    a_abs = ev_tick[ap]
    f_abs = np.where(fp < n, ev_tick[np.minimum(fp, n - 1)], n_ticks)
    lifetime = f_abs - a_abs
    lifetime_ms = _span_ms(cum, cnan, a_abs, np.minimum(f_abs + 1, n_ticks))
    alloc_tick = np.where(in_a, a_abs - ts, -1)
    free_tick = np.where(in_f, f_abs - ts, -1)
    lo = np.where(in_a, a_abs - ts, 0)
    hi = np.where(in_f, f_abs - ts, T - 1)
    nb = len(sel)

    # -- ground-truth accesses within the iteration ------------------------------------------
    has_acc = trace.has_accesses
    first_acc = np.full(nb, -1, np.int64)
    last_acc = np.full(nb, -1, np.int64)
    n_acc = np.zeros(nb, np.int64)
    access_ticks: list | None = None
    if has_acc:
        t_all = trace.tick
        r_lo, r_hi = np.searchsorted(t_all, [ts, te], "left")
        rows = r_lo + np.flatnonzero(trace.kind[r_lo:r_hi] == EventKind.ACCESS)
        blk = trace.block[rows]
        bid = ev_block[ap]
        bo = np.argsort(bid, kind="stable")
        pos = np.minimum(np.searchsorted(bid[bo], blk), max(nb - 1, 0))
        valid = bid[bo][pos] == blk if nb else np.zeros(len(blk), bool)
        key = np.unique(bo[pos[valid]] * T + (t_all[rows][valid] - ts))
        r_u, t_u = key // T, key % T
        n_acc = np.bincount(r_u, minlength=nb)
        offs = np.concatenate(([0], np.cumsum(n_acc)))
        got = n_acc > 0
        first_acc[got] = t_u[offs[:-1][got]]
        last_acc[got] = t_u[offs[1:][got] - 1]
        flat, bounds = t_u.tolist(), offs.tolist()
        access_ticks = [tuple(flat[a:z]) for a, z in zip(bounds[:-1], bounds[1:])]
        # idle runs: between consecutive accesses, before the first, after the last
        max_idle = np.where(got, 0, hi - lo + 1)
        max_idle_ms = np.where(got, 0.0, _span_ms(cum, cnan, ts + lo, ts + hi + 1))
        same = r_u[1:] == r_u[:-1]
        if same.any():
            g_r = r_u[1:][same]
            g0, g1 = t_u[:-1][same] + 1, t_u[1:][same]  # idle ticks [g0, g1)
            np.maximum.at(max_idle, g_r, g1 - g0)
            gms = np.nan_to_num(_span_ms(cum, cnan, ts + g0, ts + g1), nan=-1.0)
            np.maximum.at(max_idle_ms, g_r, gms)
        head = np.where(got, first_acc - lo, 0)
        tail = np.where(got, hi - last_acc, 0)
        head_ms = _span_ms(cum, cnan, ts + lo, ts + np.maximum(first_acc, lo))
        tail_ms = _span_ms(cum, cnan, ts + np.minimum(last_acc + 1, hi + 1), ts + hi + 1)
        cyc = persistent & got  # the gap wraps into the next iteration
        ends = np.where(cyc, head + tail, np.maximum(head, tail))
        ends_ms = np.where(cyc, head_ms + tail_ms, np.fmax(head_ms, tail_ms))
        max_idle = np.where(got, np.maximum(max_idle, ends), max_idle)
        max_idle_ms = np.where(got, np.fmax(max_idle_ms, ends_ms), max_idle_ms)
        max_idle_ms = np.where(max_idle_ms < 0, np.nan, max_idle_ms)
    else:
        max_idle = hi - lo
        max_idle_ms = _span_ms(cum, cnan, ts + lo, ts + hi)

    # -- classes ---------------------------------------------------------------------------
    rep_live = np.cumsum(np.where(is_alloc[es:ee], ev_size[es:ee], -ev_size[es:ee]))
    turn = int(ev_tick[es + int(np.argmax(rep_live))]) if ee > es else ts
    cls = np.full(nb, "transient", dtype=object)
    act = ((a_abs <= turn) & (f_abs > turn)) | (lifetime >= ACTIVATION_SHARE * T)
    cls[act] = "activation"
    ws = lifetime <= 1
    if has_acc:
        ws &= n_acc <= 1
    cls[ws] = "workspace"
    cls[persistent] = "persistent"

    # -- stability across iterations ---------------------------------------------------------
    K = len(seg)
    rn = int(alloc_before[ee]) - r0
    stab_ord = np.ones(max(rn, 0))
    life_ord = np.ones(max(rn, 0))
    if rn > 0 and K > 0:
        it = np.searchsorted(seg[:, 0], alloc_pos, "right") - 1
        ok = it >= 0
        ok[ok] = alloc_pos[ok] < seg[it[ok], 1]
        idx = np.flatnonzero(ok)
        it_start = seg[it[idx], 0]
        j = idx - alloc_before[it_start]
        m = j < rn
        idx, it_start, j = idx[m], it_start[m], j[m]
        rep_idx = r0 + np.arange(rn)
        rep_size = ev_size[alloc_pos[rep_idx]]
        rep_arel = alloc_pos[rep_idx] - es
        rep_frel = np.where(free_pos[rep_idx] < n, free_pos[rep_idx] - es, -1)
        same_size = ev_size[alloc_pos[idx]] == rep_size[j]
        frel = np.where(free_pos[idx] < n, free_pos[idx] - it_start, -1)
        same_life = same_size & (alloc_pos[idx] - it_start == rep_arel[j]) & (frel == rep_frel[j])
        stab_ord = np.bincount(j[same_size], minlength=rn) / K
        life_ord = np.bincount(j[same_life], minlength=rn) / K
    stability = np.full(nb, np.nan)
    life_stab = np.full(nb, np.nan)
    use = ~persistent & (ordinal >= 0) & (ordinal < rn)
    stability[use] = stab_ord[ordinal[use]]
    life_stab[use] = life_ord[ordinal[use]]
    if persistent.any():
        # share of iterations at whose end the block is live
        be = seg[:, 1]
        k_lo = np.searchsorted(be, ap[persistent], "right")
        k_hi = np.searchsorted(be, fp[persistent], "right")
        share = np.maximum(0, k_hi - k_lo) / K
        stability[persistent] = share
        life_stab[persistent] = share

    blocks = pd.DataFrame(
        {
            "ordinal": ordinal.astype(np.int64),
            "persistent": persistent,
            "size": ev_size[ap].astype(np.int64),
            "cls": pd.Categorical(cls, categories=list(CLASSES)),
            "alloc_tick": alloc_tick.astype(np.int64),
            "free_tick": free_tick.astype(np.int64),
            "alloc_event": np.where(in_a, ap - es, -1).astype(np.int64),
            "free_event": np.where(in_f, fp - es, -1).astype(np.int64),
            "first_access_tick": first_acc,
            "last_access_tick": last_acc,
            "access_ticks": access_ticks if has_acc else [None] * nb,
            "max_idle_ticks": max_idle.astype(np.int64),
            "max_idle_ms": max_idle_ms.astype(np.float64),
            "idle_from": "access" if has_acc else "lifetime",
            "lifetime_ticks": lifetime.astype(np.int64),
            "lifetime_ms": lifetime_ms,
            "stability": stability,
            "lifetime_stability": life_stab,
        },
        index=pd.Index(ev_block[ap], name="block"),
    )

    rows = np.searchsorted(sel, ev_aidx[es:ee])
    events = pd.DataFrame(
        {
            "event": np.arange(ee - es, dtype=np.int64),
            "kind": np.where(is_alloc[es:ee], "alloc", "free").astype(object),
            "tick": (ev_tick[es:ee] - ts).astype(np.int64),
            "block": ev_block[es:ee].astype(np.int64),
            "ordinal": ordinal[rows].astype(np.int64),
            "persistent": persistent[rows],
            "size": ev_size[es:ee].astype(np.int64),
        }
    )
    return blocks, events
