"""Memory work off the training thread (part of ``native``): drained events land in pages
already mapped, and released recordings are unmapped elsewhere.

Rule: a drain copies the ring into a view carved from a slab that a helper thread
allocated and touched page by page ahead of need; with no slab room it allocates fresh, as
before. Why: the drain runs on the training thread, and the copy into fresh memory costs
its page faults there, ~10x the copy itself (the figures are in
benchmarks/results/runtime_loop.md). The views are ordinary arrays: a batch kept (a
recording's chunk) keeps its slab alive, a batch dropped frees nothing until the slab's
other views go too, so at most one slab's worth of memory is held beyond what is kept.
What ``drop_later`` is given is freed on the same helper thread.
"""
from __future__ import annotations

import os
import threading

import numpy as np

# The smallest slab (bytes): a step of a small model drains less; the ring itself holds 59 MB.
_MIN_SLAB_BYTES = 8 << 20
# The largest slab (bytes): a drain bigger than this is allocated fresh (a ring of 2^20
# 56-byte events drained whole is 59 MB; this bounds the memory held ahead to 64 MiB).
_MAX_SLAB_BYTES = 64 << 20
_PAGE_BYTES = 4096


class DrainSlabs:
    """Hands out arrays of ``dtype`` from pre-touched slabs; thread-safe. A slab holds
    ``_SLABS_PER_DRAIN`` times the recent drains' size (within the bounds above), and the
    next one is asked for when the current one has less room than that size."""

    _SLABS_PER_DRAIN = 4

    def __init__(self, dtype: np.dtype) -> None:
        self.dtype = np.dtype(dtype)
        self._lock = threading.Lock()
        self._slab: np.ndarray | None = None  # the slab carved from
        self._used = 0  # records of it handed out
        self._recent = 0  # the size of recent requests (records; the largest, decaying)
        self._wanted = 0  # records the helper is asked to prepare (0: none)
        self._wake = threading.Condition(self._lock)
        self._helper: threading.Thread | None = None
        self._to_drop: list = []  # what the helper releases next (drop_later)
        self.fresh = 0  # requests no slab had room for (allocated fresh)
        self.carved = 0  # requests served from a slab
        self.prepared = 0  # slabs the helper made
        # a forked child has no helper, and the lock may have been held by it at the fork
        os.register_at_fork(after_in_child=self._forget)

    def start(self) -> None:
        """Start the helper thread (off the training loop's path: starting a thread
        costs milliseconds on a loaded machine)."""
        with self._lock:
            self._ensure_helper()

    def empty(self, n: int) -> np.ndarray:
        """An uninitialised array of ``n`` records, from a slab when one has room."""
        with self._lock:
            # (decaying: one huge drain, e.g. after a long time between polls, does not
            # size every slab after it)
            self._recent = max(n, self._recent - self._recent // 4)
            slab = self._slab
            if slab is not None and len(slab) - self._used >= n:
                out = slab[self._used:self._used + n]
                self._used += n
                self.carved += 1
            else:
                out = None
                self.fresh += 1
            want = self._slab_records()
            # the next slab when this one cannot hold another drain like the recent ones,
            # unless no slab can (drains past the bound are allocated fresh)
            if (slab is None or len(slab) - self._used < self._recent) and want >= self._recent:
                self._ask(want)
        return out if out is not None else np.empty(n, self.dtype)

    def drain(self, lib) -> np.ndarray:
        """Everything the native ring ``lib`` holds now, oldest first (one array)."""
        parts = []
        while True:
            n = int(lib.uvm_sched_ring_pending())
            if n == 0:
                break
            out = self.empty(n)
            got = int(lib.uvm_sched_drain(out.ctypes.data, n))
            parts.append(out[:got])
            if got < n:
                break
        if not parts:
            return np.empty(0, self.dtype)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def drop_later(self, objs: list) -> None:
        """Release ``objs`` (the list is emptied) on the helper thread. Why: a recording's
        ~100 MB of arrays cost milliseconds of unmapping where they are freed, and starting
        a thread for it from ``step()`` costs as much on a loaded machine."""
        with self._lock:
            self._to_drop.extend(objs)
            objs.clear()
            self._ensure_helper()
            self._wake.notify()

    def room(self) -> int:
        """Records the current slab can still hand out (0: none prepared yet)."""
        with self._lock:
            return 0 if self._slab is None else len(self._slab) - self._used

    def _slab_records(self) -> int:
        want = self._SLABS_PER_DRAIN * self._recent * self.dtype.itemsize
        return min(max(want, _MIN_SLAB_BYTES), _MAX_SLAB_BYTES) // self.dtype.itemsize

    def _ask(self, records: int) -> None:
        # (under the lock) a request the helper serves, unless one as large is pending
        if self._wanted >= records:
            return
        self._wanted = records
        self._ensure_helper()
        self._wake.notify()

    def _ensure_helper(self) -> None:
        if self._helper is None:
            self._helper = threading.Thread(target=self._serve, name="uvm_sched-memory",
                                            daemon=True)
            self._helper.start()

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._slab, self._used, self._wanted, self._helper = None, 0, 0, None
        self._to_drop = []  # (the child's own references to them stay where they are)

    def _serve(self) -> None:
        while True:
            with self._wake:
                while self._wanted == 0 and not self._to_drop:
                    self._wake.wait()
                records, drop, self._to_drop = self._wanted, self._to_drop, []
            del drop[:]  # (here, outside the lock: the unmapping is the slow part)
            if records == 0:
                continue
            slab = np.empty(records, self.dtype)
            slab.view(np.uint8)[::_PAGE_BYTES] = 0  # the page faults, here, not on the loop
            with self._lock:
                self.prepared += 1
                if self._slab is None or len(self._slab) - self._used < len(slab):
                    self._slab, self._used = slab, 0
                self._wanted = 0
