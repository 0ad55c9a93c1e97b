"""The bytes over the budget per tick while the remote fallback (``_core._remote_fallback``,
Note [Remote fallback]) takes blocks off the device one by one: its largest value over the
iteration and over one block's lifetime, after each block, without a pass over every tick
per block."""
from __future__ import annotations

import numpy as np

__all__ = ["Excess"]


class Excess:
    """Bytes over the budget per tick, ``resident - budget``, as ``_remote_fallback``
    lowers the resident bytes over blocks' lifetimes: a lifetime spanning the whole
    iteration (a persistent block's, the usual remote candidate) lowers every tick, kept
    as one shift; only the others touch the array. The same integers as updating
    ``resident`` in place and taking the maxima again, without the O(ticks) pass per
    candidate (a 1M-event LLM trace at 50%: 9,551 candidates x 135,905 ticks, 1.5 s CPU)."""

    def __init__(self, resident: np.ndarray, budget: int) -> None:
        assert resident.dtype.kind in "iu", resident.dtype  # exact integer bytes
        self.r, self.budget, self.shift = resident, int(budget), 0
        self.top = int(resident.max())

    def _whole(self, lf: int, lt: int) -> bool:
        return lf == 0 and lt + 1 >= len(self.r)

    def worst(self) -> int:
        """The largest excess over the iteration (bytes)."""
        return self.top - self.shift - self.budget

    def worst_in(self, lf: int, lt: int) -> int:
        """The largest excess over ticks ``lf..lt`` (bytes)."""
        if self._whole(lf, lt):
            return self.worst()
        return int(self.r[lf:lt + 1].max()) - self.shift - self.budget

    def lower(self, lf: int, lt: int, nbytes: int) -> None:
        """``nbytes`` fewer resident over ticks ``lf..lt``."""
        if self._whole(lf, lt):
            self.shift += nbytes
        else:
            self.r[lf:lt + 1] -= nbytes
            self.top = int(self.r.max())

    @staticmethod
    def lowered(T: int, lf: np.ndarray, lt: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
        """Per tick ``0..T-1``, what ``resident[lf:lt + 1] -= nbytes`` for each block
        takes off (``0 <= lf <= lt + 1``; a slice past the end is cut there, an empty one takes
        nothing), as one difference array: the same integers."""
        lo = np.minimum(np.asarray(lf, np.int64), T)
        hi = np.minimum(np.asarray(lt, np.int64) + 1, T)
        keep = lo < hi
        n = np.asarray(nbytes, np.int64)[keep]
        d = np.zeros(T + 1, np.int64)
        np.add.at(d, lo[keep], n)
        np.add.at(d, hi[keep], -n)
        return np.cumsum(d)[:T]
