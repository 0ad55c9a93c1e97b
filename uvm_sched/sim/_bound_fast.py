"""The deadline term of ``_bound``'s lower bound as one compiled sweep (numba
``@njit(nogil=True)``): O((W + A) log W) time and O(W) memory for W window ticks and A read
intervals, where ``_bound._deadline_bound_reference`` walks the W x W table of (boundary,
deadline) pairs in row chunks (O(W^2) time; a 1M-event LLM trace's window has ~10^5 ticks).

Rule: sweep the deadline ``d`` up the window; a segment tree over boundary rows ``r`` holds
``P[r] + N(r, d) / bw`` (``P[r]``: the compute before tick ``r``; ``N(r, d)``: the bytes read
at deadlines ``<= d`` by intervals alive at ``r``). Why it is exact: an interval ``[lo, hi]``
joins every ``N(r, d)`` with ``lo <= r <= hi <= d``, so it is added, once, over rows ``lo ..
hi`` when the sweep reaches ``d = hi``; rows above ``d`` have no pair yet and hold -inf until
the sweep reaches them (row ``d`` opens before the intervals ending at ``d`` are added, so
they cover it). The best pair at ``d`` is then the tree's maximum less ``P[d] + B / bw``.
Imported only when numba is installed.
"""
from __future__ import annotations

import numpy as np

from ._fast_memory import jit

__all__ = ["deadline_sweep"]


@jit
def _pull(val, tag, i):
    """Recompute the maxima above node ``i`` (each node: its children's max plus its own
    pending add)."""
    i >>= 1
    while i >= 1:
        val[i] = max(val[2 * i], val[2 * i + 1]) + tag[i]
        i >>= 1


@jit
def _add(val, tag, size, lo, hi, x):
    """Add ``x`` to rows ``lo .. hi`` (inclusive)."""
    a, b = lo + size, hi + size + 1
    while a < b:
        if a & 1:
            val[a] += x
            tag[a] += x
            a += 1
        if b & 1:
            b -= 1
            val[b] += x
            tag[b] += x
        a >>= 1
        b >>= 1
    _pull(val, tag, lo + size)
    _pull(val, tag, hi + size)


@jit
def _argmax_row(val, size):
    """The leftmost row holding the tree's maximum."""
    i = 1
    while i < size:
        i = 2 * i if val[2 * i] >= val[2 * i + 1] else 2 * i + 1
    return i - size


@jit
def _bit_add(bit, i, x):
    """Fenwick tree over rows: add ``x`` at row ``i`` (prefix sums are then exact int64)."""
    i += 1
    while i < len(bit):
        bit[i] += x
        i += i & -i


@jit
def _bit_prefix(bit, i):
    """Sum of rows ``0 .. i``."""
    i += 1
    s = 0
    while i > 0:
        s += bit[i]
        i -= i & -i
    return s


@jit
def _sweep(P, lo, hi, n, budget, bw, order, near, keep):
    """One sweep of the deadline (see the module's rule). Returns the approximate best stall
    per deadline (``near`` and ``keep`` unused) or, given ``near`` (the deadlines whose
    approximate best lies within tolerance of the overall best) and ``keep`` (the
    tolerance's floor), the exact best pair among the rows there: (stall, row, its bytes
    N(r, d)), the stall computed as the reference computes it, ties to the smallest row,
    then deadline."""
    W = len(P) - 1
    size = 1
    while size < max(W, 1):
        size *= 2
    val = np.full(2 * size, -np.inf)
    tag = np.zeros(2 * size)
    bit = np.zeros(W + 2, np.int64)  # exact bytes N(r, d): range adds as two point adds
    best_at = np.full(W, -np.inf)
    stack = np.empty(64, np.int64)
    acc = np.empty(64)
    k, A = 0, len(hi)
    best, best_r, best_need = 0.0, 0, 0
    for d in range(W):
        # open row d at P[d]: no add so far covers it (every earlier interval ends before d)
        val[d + size] = P[d]
        _pull(val, tag, d + size)
        while k < A and hi[order[k]] == d:
            i = order[k]
            _add(val, tag, size, lo[i], d, n[i] / bw)
            _bit_add(bit, lo[i], n[i])
            _bit_add(bit, d + 1, -n[i])
            k += 1
        best_at[d] = val[1] - P[d] - budget / bw
        if len(near) == 0 or not near[d]:
            continue
        # every row whose approximate value clears the floor, left to right, evaluated exactly
        top = 0
        stack[0], acc[0] = 1, 0.0
        while top >= 0:
            node, above = stack[top], acc[top]
            top -= 1
            if val[node] + above - P[d] - budget / bw < keep:
                continue
            if node >= size:
                r = node - size
                need = _bit_prefix(bit, r)
                v = (need - budget) / bw - (P[d] - P[r])
                # the reference keeps the smallest row, then deadline, of equal stalls; in
                # exact arithmetic the sweep's order (deadline, then row) meets the same pair
                # first (of maxima (r1, d2) and (r2, d1), r1 < r2 <= d1 < d2, (r1, d1) is
                # one too), the row test covers floats that round apart
                if v > best or (v == best and v > 0 and r < best_r):
                    best, best_r, best_need = v, r, need
                continue
            above += tag[node]
            stack[top + 1], acc[top + 1] = 2 * node + 1, above
            stack[top + 2], acc[top + 2] = 2 * node, above
            top += 2
    return best_at, best, best_r, best_need


def deadline_sweep(P, lo, hi, n, budget, bw):
    """(best stall seconds, boundary row, the pair's bytes ``N(r, d)``) over all pairs ``r <=
    d`` of ``(N(r, d) - budget) / bw - (P[d] - P[r])``, as
    ``_bound._deadline_bound_reference`` finds it (the same float, the same pair); the stall
    is 0.0 (row 0, 0 bytes) when no pair is positive. ``P``: float64[W + 1] compute seconds before each window tick; ``lo``,
    ``hi``: int64 interval rows (``hi``: the deadline), ``n``: int64 bytes; ``budget``:
    bytes; ``bw``: bytes per second."""
    order = np.argsort(hi, kind="stable")
    none = np.zeros(0, np.bool_)
    approx, _, _, _ = _sweep(P, lo, hi, n, budget, bw, order, none, 0.0)
    top = float(approx.max()) if len(approx) else 0.0
    if not top > 0:
        return 0.0, 0, 0
    # the tree's running sums of n / bw differ from the exact stall in the last bits: every
    # pair within a generous tolerance of the best is evaluated exactly (a handful, unless
    # many rows tie), so the pair and its float are the reference's
    tol = 1e-9 * (float(P[-1]) + float(n.sum()) / bw + budget / bw + abs(top))
    keep = top - tol
    _, best, r, need = _sweep(P, lo, hi, n, budget, bw, order, approx >= keep, keep)
    return best, r, need
