"""Iterations need evidence: when a learned period is believed, and what differs between
iterations.

Note [Never invent an iteration]
--------------------------------
A string of allocator events that repeats is not yet a training iteration. Inside one step,
an optimizer's per-parameter loop over identical layers, the layer blocks of a backward
pass, or an autotuner that runs a piece of the graph twice all repeat, balanced, and a
planner fed such a "period" plans for one that does not exist. So the iterations a lag
segments (``_period``) are kept only when all of these hold; else the whole trace is one
iteration and the note says which rule failed, with its numbers:

1. **Copies** -- at least ``MIN_COPIES`` iterations. Two copies of a string are what an
   autotuner's benchmark run and the real run also give.
2. **Own memory** -- each iteration after the first frees only blocks allocated in it or in
   the iteration before (last step's gradients freed by ``zero_grad``). Stages of one longer
   step free what an earlier stage allocated (each backward block frees forward
   activations); no more than ``OLD_FREE_MAX`` of their events may do so.
3. **Level** -- an iteration returns memory to its starting level, and the trace from the
   first iteration on never falls below that level by more than ``PEAK_SLACK`` times the most
   any iteration rises: repeats nested inside something that held memory (the layer blocks
   of a backward pass, with the forward activations freed after them) do. A run of frees
   that ends the recording (tear-down: ``del model``) is left out of this rule.
4. **Peak** -- outside the iterations, the live bytes of blocks that are freed again never
   rise above their level at the first iteration by more than ``PEAK_SLACK`` times the most
   any iteration rises. A step's forward pass holds the trace's peak; an optimizer loop
   found after it does not. (Blocks never freed -- a warm-up allocating the optimizer's
   state -- do not count.)
5. **Coverage** -- the iterations cover at least ``MIN_ITER_COVERAGE`` of the allocator events
   from the first iteration on; before it, set-up and warm-up are reported as such (events
   whose blocks live on into the iterations are set-up, the rest warm-up). After the last
   iteration, up to one period (a cut-short iteration) is not counted against it.

When the (kind, size) tokens find no accepted period, ``structure_tokens`` (each event's
lifetime in allocator events) are tried under the same rules: per-batch shapes (dynamic
padding) change sizes, not the structure. Where sizes do repeat, their period stands.

Markers (MARK rows: ``ProfilerStep#``, ``uvm_sched.step()``, the optimizer hook; or the
step frames of a memory snapshot) are ground truth: the marked spans are the iterations,
whatever their lengths. ``kinds`` groups them (and learned ones) by their event string:
identical to the representative, the same alloc/free structure with other sizes (per-batch
shapes), or another structure (warm-up, eval, a partial batch), each with its event counts.
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["check_learned", "iteration_kinds", "structure_tokens", "varying_allocs", "MIN_COPIES",
           "OLD_FREE_MAX", "PEAK_SLACK", "MIN_ITER_COVERAGE"]

MIN_COPIES = 3
OLD_FREE_MAX = 0.02  # share of the events of iterations 2.. that free older blocks
PEAK_SLACK = 1.5  # outside rise <= 1.5 x the largest rise inside an iteration
MIN_ITER_COVERAGE = 0.8  # of the allocator events from the first iteration on


def alloc_position(ev_kind: np.ndarray, ev_block: np.ndarray) -> np.ndarray:
    """Per allocator event, the position of its block's ALLOC (-1 when the trace has none)."""
    n = len(ev_kind)
    a = np.flatnonzero(ev_kind == 0)
    order = np.argsort(ev_block[a], kind="stable")
    sb = ev_block[a][order]
    k = np.minimum(np.searchsorted(sb, ev_block), max(len(sb) - 1, 0))
    out = np.full(n, -1, np.int64)
    if len(sb):
        hit = sb[k] == ev_block
        out[hit] = a[order][k[hit]]
    return out


def check_learned(seg: np.ndarray, p: int, ev_kind: np.ndarray, ev_size: np.ndarray,
                  ev_block: np.ndarray, repeated: int = 0
                  ) -> tuple[bool, dict[str, Any], list[str]]:
    """Apply Note [Never invent an iteration] to learned segments ``seg`` ([start, stop)
    allocator-event positions, sorted) of period ``p``; ``repeated``: allocator events in
    repeats of the string (whole copies count, wherever the segmentation puts its phase).
    Returns (accepted, evidence, notes).
    """
    n = len(ev_kind)
    k = max(len(seg), repeated // max(p, 1))
    covered = int((seg[:, 1] - seg[:, 0]).sum())
    first, last = int(seg[0, 0]), int(seg[-1, 1])
    ev: dict[str, Any] = {"signal": f"allocator events repeat every {p:,} events",
                          "copies": k}
    notes: list[str] = []
    what = f"{k} cop{'y' if k == 1 else 'ies'} of a {p:,}-event string"
    if k < MIN_COPIES:
        ev["coverage"] = covered / n
        return False, ev, [f"no period: {what}, fewer than {MIN_COPIES} (an autotuner's "
                           "benchmark run and its real run repeat too)"]
    born = alloc_position(ev_kind, ev_block)
    is_free = ev_kind == 1
    delta = np.where(is_free, -ev_size, ev_size).astype(np.int64)
    live = np.concatenate(([0], np.cumsum(delta)))  # live[e] = before event e

    # 2. own memory
    in_it = np.zeros(n, bool)
    it_of = np.full(n, -1, np.int64)
    for i, (a, b) in enumerate(seg):
        in_it[a:b] = True
        it_of[a:b] = i
    later = np.flatnonzero(in_it & (it_of >= 1) & is_free)
    prev_start = seg[np.maximum(it_of[later] - 1, 0), 0]
    old = int(np.count_nonzero(born[later] < prev_start))
    n_later = int((seg[1:, 1] - seg[1:, 0]).sum())
    ev["old_frees"] = old
    if old > OLD_FREE_MAX * max(n_later, 1):
        ev["coverage"] = covered / n
        return False, ev, [
            f"no period: {what} found, but iterations 2..{k} free {old:,} blocks allocated "
            f"before the iteration before them ({old / max(n_later, 1):.0%} of their events): "
            "they are stages of one longer step, not steps"]

    # 3. level
    level = int(live[first])
    rise_in = max(int(live[a:b + 1].max()) - int(live[a]) for a, b in seg)
    # trailing frees that end the recording: tear-down, not a step's
    nz = np.flatnonzero(~is_free)
    end = max(int(nz[-1]) + 1 if len(nz) else 0, last)
    teardown = n - end
    low = int(live[first:end + 1].min())
    drop = level - low
    ev["drop_below_start_bytes"] = drop
    if drop > PEAK_SLACK * max(rise_in, 1):
        at = first + int(np.argmin(live[first:end + 1]))
        ev["coverage"] = covered / n
        return False, ev, [
            f"no period: {what} found, but after the first of them live bytes fall {drop:,} "
            f"bytes below its starting level (by allocator event {at:,}), more than "
            f"{PEAK_SLACK}x the most an iteration rises ({rise_in:,}): the repeats are nested "
            "in something that held that memory (a step), or the recording ends by freeing it"]

    # 4. peak, of memory that is freed again: a warm-up that allocates the optimizer's
    # state for good between two iterations is not a step's peak
    fpos = _free_pos(born, is_free, n)
    freed = np.where(is_free, born >= 0, fpos < n)
    tlive = np.concatenate(([0], np.cumsum(np.where(freed, delta, 0))))
    t_in = max(int(tlive[a:b + 1].max()) - int(tlive[a]) for a, b in seg)
    rise_in = max(rise_in, t_in)
    outside = ~in_it
    rise_out = int(tlive[1:][outside].max()) - int(tlive[first]) if outside.any() else 0
    ev["rise_inside_bytes"], ev["rise_outside_bytes"] = rise_in, rise_out
    if rise_out > PEAK_SLACK * max(rise_in, 1):
        at = int(np.flatnonzero(outside & (tlive[1:] - tlive[first] == rise_out))[0])
        ev["coverage"] = covered / n
        return False, ev, [
            f"no period: {what} found, but outside them live bytes rise {rise_out:,} bytes "
            f"above their starting level (at allocator event {at:,}), more than "
            f"{PEAK_SLACK}x the most an iteration rises ({rise_in:,}): the repeats are a "
            "part of a step, not steps"]

    # 5. coverage
    pre = np.arange(first)
    setup = int(np.count_nonzero((ev_kind[pre] == 0) & (_free_pos(born, is_free, n)[pre] >= first)))
    warm = first - setup
    gaps = int(np.count_nonzero(outside[first:last]))
    tail_left = max(0, (end - last) - p)
    denom = covered + gaps + tail_left
    cov = covered / max(denom, 1)
    ev.update(coverage=cov, covered_events=covered, setup_events=setup, warmup_events=warm,
              gap_events=gaps, tail_events=n - last, teardown_events=teardown)
    if cov < MIN_ITER_COVERAGE:
        return False, ev, [
            f"no period: {what} found, but they cover {covered:,} of the {denom:,} allocator "
            f"events from the first of them on ({cov:.0%} < {MIN_ITER_COVERAGE:.0%}; "
            f"{gaps:,} between them, {tail_left:,} after them)"]
    if setup or warm:
        notes.append(f"before iteration 1: {setup:,} set-up events (blocks that live on into "
                     f"the iterations) and {warm:,} warm-up events, not iterations")
    if teardown:
        notes.append(f"the recording ends with {teardown:,} frees (tear-down), not an iteration")
    return True, ev, notes


def structure_tokens(ev_kind: np.ndarray, ev_block: np.ndarray) -> np.ndarray:
    """Dense token per allocator event from structure alone: an ALLOC's lifetime in allocator
    events (to its FREE; -1 never freed), a FREE's age. Equal in iterations that differ only
    in sizes (per-batch shapes), unlike the (kind, size) tokens."""
    n = len(ev_kind)
    born = alloc_position(ev_kind, ev_block)
    is_free = ev_kind == 1
    fpos = _free_pos(born, is_free, n)
    pos = np.arange(n)
    span = np.where(is_free, pos - born, np.where(fpos < n, fpos - pos, -1))
    key = span.astype(np.int64) * 2 + is_free
    _, inv = np.unique(key, return_inverse=True)
    return inv.astype(np.int64).ravel()


def _free_pos(born: np.ndarray, is_free: np.ndarray, n: int) -> np.ndarray:
    """Per allocator event: for an ALLOC, the position of its FREE (n if never)."""
    out = np.full(n, n, np.int64)
    f = np.flatnonzero(is_free & (born >= 0))
    out[born[f]] = f
    return out


def iteration_kinds(seg: np.ndarray, rep: int, tok: np.ndarray, ev_kind: np.ndarray
                    ) -> list[dict[str, Any]]:
    """Group iterations ``seg`` by event string: ``identical`` to the representative
    ``rep``, ``same structure`` (alloc/free order) with other sizes, or ``other``. Each
    kind: label, iterations (indices), events (min, max) and the difference in events from
    the representative's count."""
    groups: dict[tuple, list[int]] = {}
    for i, (a, b) in enumerate(seg):
        key = (int(b - a), hash(tok[a:b].tobytes()), hash(ev_kind[a:b].tobytes()))
        groups.setdefault(key, []).append(i)
    ra, rb = seg[rep]
    r_len = int(rb - ra)
    r_struct = ev_kind[ra:rb].tobytes()
    last = len(seg) - 1
    kinds = []
    for (length, _, _), its in groups.items():
        a, b = seg[its[0]]
        if rep in its:
            label = "steady"
        elif length == r_len and ev_kind[a:b].tobytes() == r_struct:
            label = "same structure, other sizes"
        elif its == [0]:
            label = "first (warm-up?)"
        elif its == [last]:
            label = "last (partial batch or cut short?)"
        else:
            label = "other"
        kd = {"label": label, "iterations": its, "events": length,
              "delta_events": length - r_len}
        if label == "other" and length > r_len:
            at = inserted_at(tok[a:b], tok[ra:rb])
            if at is not None:  # the representative with a stretch of another kind inside
                kd["inserted"] = {"at_event": at, "events": length - r_len}
        kinds.append(kd)
    # structure twins merge: per-batch shapes are one kind
    merged: dict[str, dict] = {}
    out = []
    for kd in kinds:
        if kd["label"] == "same structure, other sizes":
            m = merged.get(kd["label"])
            if m is not None:
                m["iterations"] = sorted(m["iterations"] + kd["iterations"])
                continue
            merged[kd["label"]] = kd
        out.append(kd)
    out.sort(key=lambda kd: (kd["label"] != "steady", kd["iterations"][0]))
    return out


def inserted_at(seg_tok: np.ndarray, rep_tok: np.ndarray) -> int | None:
    """Where a stretch of events was inserted into the representative's string to give
    ``seg_tok`` (longer): the position ``i`` such that ``seg_tok`` is ``rep_tok[:i]``, the
    stretch, then ``rep_tok[i:]`` (the representative's tokens exactly, around it: an eval
    batch between the optimizer step and the next step's first frees); None when no such
    split exists. The stretch is a step of another kind inside a learned iteration."""
    n, e = len(rep_tok), len(seg_tok) - len(rep_tok)
    if e <= 0:
        return None
    diff = np.flatnonzero(seg_tok[:n] != rep_tok)
    head = int(diff[0]) if len(diff) else n  # common prefix
    diff = np.flatnonzero(seg_tok[e:][::-1] != rep_tok[::-1])
    tail = int(diff[0]) if len(diff) else n  # common suffix
    return min(head, n) if head + tail >= n else None


def describe_kinds(kinds: list[dict[str, Any]], n_its: int) -> str | None:
    """One note line for the iterations that differ from the representative (None: none)."""
    odd = [kd for kd in kinds if kd["label"] != "steady"]
    if not odd:
        return None
    n_odd = sum(len(kd["iterations"]) for kd in odd)
    parts = []
    for kd in odd[:6]:
        its = kd["iterations"]
        shown = ", #".join(map(str, its[:6])) + ("..." if len(its) > 6 else "")
        d = kd["delta_events"]
        ins = kd.get("inserted")
        why = "" if ins is None else (f": the iteration with {ins['events']:,} events of "
                                      f"another kind inserted at its event {ins['at_event']:,}"
                                      " -- an eval batch? a step of its own")
        parts.append(f"{kd['label']}: #{shown} ({'same count' if d == 0 else f'{d:+,} events'}"
                     f"{why})")
    more = f"; {len(odd) - 6} more kinds" if len(odd) > 6 else ""
    return f"{n_odd} of {n_its} iterations differ from the representative -- " + "; ".join(parts) + more


def varying_allocs(seg: np.ndarray, rep: int, kinds: list[dict[str, Any]], ev_kind: np.ndarray,
                   ev_size: np.ndarray) -> np.ndarray:
    """Per ALLOC of the representative iteration: whether its size differs in an iteration
    of the same structure (the ``steady`` and ``same structure, other sizes`` kinds): the
    positions per-batch shapes resize, which a plan names by position and sizes at run time
    (``planner``: ``alloc_sizes`` 0)."""
    a, b = seg[rep]
    rep_alloc = ev_kind[a:b] == 0
    want = ev_size[a:b][rep_alloc]
    out = np.zeros(len(want), bool)
    for kd in kinds:
        if kd["label"] not in ("steady", "same structure, other sizes"):
            continue
        for i in kd["iterations"]:
            s, e = seg[i]
            if e - s == b - a:
                out |= ev_size[s:e][rep_alloc] != want
    return out
