"""What the Scheduler records from the native ring: the table of live blocks, and the
recording a plan is learned from.

Rule: the live table is the ALLOC records of every block alive, in allocation order. An ALLOC's
``arg`` is the global allocation ordinal (rising) and a FREE's names the ordinal it frees,
so the table stays sorted by ordinal by appending, and a free is a binary search:
O(b + f log(L + b)) for b events, f frees and L live blocks, no sort. Why: the training
thread pays for each drained event, so the work per batch is numpy over the batch, never
Python per event. The blocks alive when a recording starts are its prefix (weights,
optimizer state), so persistent ordinals and addresses stay right across re-learning.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ._codes import NativeEvent

# The ring's kinds as plain ints, for the runtime's numpy comparisons: with an IntEnum
# operand ``kinds == NativeEvent.MARK`` is 5x slower (35 vs 7 us over 50k events, numpy 2:
# an int subclass is not taken as a Python int scalar), on the training thread's path.
ALLOC, FREE, MARK, ITER, DIVERGENCE = (int(NativeEvent.ALLOC), int(NativeEvent.FREE),
                                       int(NativeEvent.MARK), int(NativeEvent.ITER),
                                       int(NativeEvent.DIVERGENCE))
RESUME = int(NativeEvent.RESUME)


def track_live(live: np.ndarray, ev: np.ndarray) -> np.ndarray:
    """``live`` (ALLOC records by ordinal) after the drained batch ``ev``, vectorised."""
    k = ev["kind"]
    arg = ev["arg"]
    ia = np.flatnonzero(k == ALLOC)
    freed = arg[k == FREE]
    keep_new = None
    if len(freed) and len(ia):
        # most blocks born in a batch die in it (activations): drop those first, so
        # only survivors are copied
        a_ord = arg[ia]
        a0 = int(a_ord[0])
        keep_new = np.ones(len(ia), bool)
        if int(a_ord[-1]) - a0 == len(ia) - 1:
            # consecutive ordinals (every one of them in this batch): a free's index is
            # arithmetic
            inb = (freed >= a0) & (freed <= int(a_ord[-1]))
            keep_new[freed[inb] - a0] = False
        else:
            j = np.searchsorted(a_ord, freed)
            inb = j < len(ia)
            jj = j[inb]
            hit = a_ord[jj] == freed[inb]
            keep_new[jj[hit]] = False
            inb[inb] = hit
        freed = freed[~inb]  # frees of blocks born before this batch
    # rows move as raw records: numpy copies a structured dtype field by field
    # (measured 20x slower than the same gather as void records)
    raw_t = np.dtype(f"V{ev.dtype.itemsize}")
    out = live.view(raw_t)
    if len(freed) and len(out):
        ords = live["arg"]
        i = np.searchsorted(ords, freed)
        ok = i < len(ords)  # (a block allocated before the scheduler started)
        i = i[ok]
        keep = np.ones(len(out), bool)
        keep[i[ords[i] == freed[ok]]] = False
        out = out[keep]
    if len(ia):
        born = ev.view(raw_t)[ia if keep_new is None else ia[keep_new]]
        out = np.concatenate([out, born]) if len(born) else out
    return out.view(ev.dtype)


def live_ordinal(live: np.ndarray, ordinals: np.ndarray) -> np.ndarray:
    """Whether each allocation ordinal is still alive in ``live`` (bool per ordinal)."""
    ords = live["arg"]
    i = np.minimum(np.searchsorted(ords, ordinals), max(len(ords) - 1, 0))
    return (ords[i] == ordinals) if len(ords) else np.zeros(len(ordinals), bool)


@dataclasses.dataclass
class Recording:
    """One recording: the prefix (ALLOC records of the blocks alive when it started, in
    allocation order), then the drained chunks (EVENT_DTYPE arrays, never copied: they are
    never written again)."""

    prefix: np.ndarray
    next_try: int  # allocator events at which a period is looked for next (no markers)
    chunks: list[np.ndarray] = dataclasses.field(default_factory=list)
    marks: int = 0  # MARK events recorded
    alloc_events: int = 0  # ALLOC and FREE events recorded
    dropped_at: int | None = None  # the ring's drop count when it started (first poll)

    def add(self, ev: np.ndarray) -> None:
        """Append a drained batch."""
        self.chunks.append(ev)
        k = ev["kind"]
        self.marks += int(np.count_nonzero(k == MARK))
        self.alloc_events += int(np.count_nonzero((k == ALLOC) |
                                                  (k == FREE)))

    def parts(self) -> list[np.ndarray]:
        """What it holds, in order (a list of arrays; an empty prefix left out)."""
        return ([self.prefix] if len(self.prefix) else []) + list(self.chunks)

    def release(self, empty_prefix: np.ndarray) -> None:
        """Forget what was recorded (a plan keeps its own copy). The arrays are freed on
        the native module's memory helper thread: an LLM's recorded iterations are ~100 MB,
        whose release (~3 ms of unmapping) would otherwise land on the training thread's
        step."""
        from . import native

        old = [self.prefix, *self.chunks]
        self.chunks, self.prefix = [], empty_prefix
        native._DRAIN_MEMORY.drop_later(old)

    def last_allocator_events(self, n: int) -> np.ndarray:
        """The last ``n`` ALLOC/FREE events recorded (prefix included), oldest first."""
        out: list[np.ndarray] = []
        for c in reversed([self.prefix] + self.chunks):
            if n <= 0:
                break
            k = c["kind"]
            rows = c[(k == ALLOC) | (k == FREE)]
            out.append(rows[max(0, len(rows) - n):])
            n -= len(out[-1])
        return np.concatenate(out[::-1]) if out else self.prefix[:0]

    def period_phase(self, start_ev: int, period: int, live: np.ndarray,
                     n_allocs: int, start_level: int | None = None) -> tuple[int, list[int]]:
        """Where a plan synced on the learned period (``period`` allocator events, the
        learned iteration starting at event ``start_ev`` of the recording) arms now: the
        phase, how far the current iteration has got, and the addresses of its allocations
        so far, in order: 0 for one already freed (the executor skips its rows); at most
        ``n_allocs`` (the plan's: more has diverged already, which the next allocation
        tells the executor). The phase counts from the last point in the last ``period``
        events where ``start_level`` bytes were live (where the learned iteration starts,
        ``_learn.learn``; bytes of ``live``'s terms); without one (or no ``start_level``),
        in whole periods over everything recorded, which an iteration of another length
        since ``start_ev`` (an eval batch, a step with events missing) puts out of phase."""
        phase = (len(self.prefix) + self.alloc_events - start_ev) % period
        if start_level is not None:
            recent = self.last_allocator_events(period)
            signed = np.where(recent["kind"] == ALLOC, 1, -1) * recent["size"].astype(np.int64)
            after = int(live["size"].astype(np.int64).sum())  # bytes live now
            hits = np.flatnonzero(after - int(signed.sum()) + np.cumsum(signed) == start_level)
            if len(hits):
                phase = len(recent) - 1 - int(hits[-1])
        tail = self.last_allocator_events(phase)
        tail = tail[tail["kind"] == ALLOC]
        same = live_ordinal(live, tail["arg"])  # allocated then and still alive
        allocs = np.where(same, tail["addr"], 0).astype(np.int64).tolist()
        return phase, allocs[:n_allocs]
