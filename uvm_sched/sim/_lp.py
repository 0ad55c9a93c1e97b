"""A lower bound on the steady-state iteration time from a linear program (policy
``"lp-bound"``), solved with HiGHS (``pip install highspy``).

Note [The LP bound]
-------------------
Rationale. ``bound`` (``_bound``) looks at one boundary (or one boundary and one deadline)
at a time. A schedule has to satisfy all of them at once with one link: the LP does.

The program, over the measured window's ``W`` ticks taken as one iteration of a periodic
schedule (boundary ``t`` = the instant kernel ``t``'s compute starts; slot ``t`` = from
boundary ``t`` to boundary ``t + 1``, the last slot wrapping to boundary 0 of the next
iteration). Units: MiB and ms, so that the numbers stay near 1.

* ``D[t] >= C[t]`` (the kernel's compute time); minimise ``sum D``.
* Data. A block's *data* lives from a birth -- its first access ever, or a write of the
  whole block that reads nothing -- to the last access before its next birth (or before
  it is freed). Between those, it is dead: nothing constrains it. Per block and boundary
  of a live stretch, the resident fraction is split in ``c`` (clean: its host copy is
  valid) and ``d`` (dirty: written on the device since it came in).
* An access at tick ``t`` of fraction ``a`` (its largest range over the size):
  ``c + d + q >= a``, ``q`` the fraction used in place on the host (zero-copy). ``q``'s
  bytes cross in slot ``t - 1``, while the kernel waits (the slot's time beyond its
  compute: ``sum size q <= bw (D[t-1] - C[t-1])``): host->device if the access reads,
  device->host if it writes, both if both.
* Residency rises only by bytes moved in over slot ``t`` (``in``), except at a birth
  (first touch populates pages; a whole-block write makes new data), by the fraction a
  partial write that reads nothing writes (new data), and by pages never touched before
  (an access reaching beyond the largest range accessed so far, counting the accesses
  before the window): ``c[t+1] <= c[t] + in[t]`` (a write at ``t`` dirties all:
  ``c[t+1] <= in[t]``), ``d[t+1] <= d[t] (+ c[t] if tick t writes) + p[t+1]``, ``p`` the
  fraction populated at tick ``t + 1``.
* Dirty data leaves only by being written back: ``d[t+1] >= d[t] (+ c[t] if tick t
  writes) - out[t]``; clean data may be dropped.
* Per boundary ``sum size (c + d) <= B``; per slot ``sum size (in + q_read) <= bw_in D``
  and ``sum size (out + q_write) <= bw_out D``, ``bw_*`` the fastest path each way.
* A block alive across the whole window (allocated before it, not freed in it) wraps: its
  stretch at the end of the window continues into the start of the next iteration. A
  block alive at the window's start only (allocated in the previous iteration) starts
  with whatever residency the budget allows, clean; one alive at the end only has no
  constraint after its last access.

Why every schedule the simulator runs in a steady state satisfies it (a relaxation). Take
the simulator's boundary times and let ``D[t]`` be the time between them: each contains
its kernel's compute, so ``D[t] >= C[t]``, and ``sum D`` is the iteration time. Let ``c +
d`` be the chunk bytes resident at the boundary (the simulator claims more: copies in
flight and dead pool ranges count against its budget and not here -- dropping those
constraints relaxes), ``in``/``out`` the bytes its copies moved during the slot (a copy
spanning several slots is split by time; each direction's copy engine runs at most at the
fastest path of that direction, so each slot's bytes fit in ``bw * D``), and ``q`` the
bytes a zero-copy access used in place (the simulator moves them in the stall before the
kernel: in the slot before it). Then:

* accesses: the kernel waits until every byte it needs is resident or has crossed in place;
  the simulator rounds partial accesses up to pages and the tree prefetcher to whole VA
  blocks, which only needs more;
* rises: a byte becomes resident by a migration (prefetch or fault) that crosses the link,
  or by populating fresh pages (first touch, pool reuse of dead ranges -- at a birth), or
  its content is new (written whole, or the written part of a partial pure write) -- the
  simulator migrates host bytes even then, which costs more;
* dirty bytes: in the simulator a chunk's written resident bytes reach the host only by a
  write-back (eviction or planned prefetch to the host) over the device->host engine; bytes
  that came in from the host and were not written since may be dropped (the simulator
  drops only read-mostly duplicates the driver evicts) -- clean drops are free here;
* the LP treats a block's bytes as interchangeable (a fraction, not ranges), which only
  widens the choice;
* dead data has no constraint at all (the simulator keeps freed memory in its pool and
  writes dead ranges back).

So each iteration of a steady-state run is a feasible point and its time is at least the
optimum. The simulator measures one iteration after warm-up: when its state at the
window's start differs from the state at the end (a warm-up left data resident that the
window does not restore), that one iteration can be faster than any periodic schedule by
at most the difference; over many iterations the average cannot. Fault latencies and queue
order are left out (as in ``bound``).

Size. Columns: about 4 per (block, boundary) of a live stretch plus one per access and one
per tick; ``max_columns`` guards the solve (HiGHS's dual simplex on one core: unet at
batch 16, 654 ticks, 217k columns in 28 s; resnet50 at the zoo's default size, 465k
columns, 126 s). Over it, ``lp_bound`` coarsens time: consecutive slots (``k`` ticks, or of
any lengths: Note [Slot partitions]), boundaries only at each slot's first tick, and every
constraint about a tick inside a slot replaced by one that the exact program implies:

* an access inside a slot: ``c + d + in[slot] + q >= a - p`` at the slot's first boundary
  (what is resident at the tick was resident at the slot's start or came in during the
  slot); a pure write, or an access after a birth in the same slot, has no row (populated
  where it happens); the data a birth inside a slot writes is at the next boundary
  resident, or went out, or was written in place: ``d + out[slot] + q >= a``;
* clean and dirty over a slot: ``c' <= c + in`` (``c' <= in`` if the block is written in the
  slot), ``d' <= d + c + in + p`` summed over the slot's writes and populations, and
  ``d' >= d - out`` (a write at the slot's first tick: ``d' >= d + c - out``);
* the budget holds at the slot boundaries only; ``q`` crosses in the slot holding the tick
  before its kernel, within that slot's time beyond its compute.

Each is a sum or a weakening of exact constraints, so every exact solution maps to a
coarse one of the same time: the coarse optimum is at most the exact one, and still a
lower bound. Over ``max_columns`` even at one slot per window, ``LpTooLarge`` says by how
much.

Note [Block classes]
--------------------
Rationale. A million-event trace has ~100k blocks in its window; at four or more columns
per block no slot size brings the program near ``max_columns``. But most blocks are alike:
the activations of one layer in successive micro-batches, once their ticks fall in the same
slots, give the same sub-program.

Approach. A block's sub-program (its columns, its own rows, and where it enters the shared
rows) depends on its accesses only through their order, each one's slot, whether it is its
slot's first tick, its fraction, whether it reads and writes, and on the block's birth,
wrap and pages touched before the window (``_stretches`` reads ticks only through their
order; ``_add_run`` through the partition's slot of the tick, whether it starts it and the
slot of ``tick - 1``, which those two give, and through comparisons with the stretch's first
tick, which the order gives). Its size enters only as the coefficient of its columns in the
shared rows (budget, link and zero-copy). ``_classes`` keys each block by exactly those
inputs and builds one sub-program per key, with the members' summed size.

Why the optimum is unchanged (the merge is exact, so the bound stays a relaxation of the
exact program by the coarsening argument alone). Members share one feasible set ``P`` for
their own variables and enter the shared rows as ``size_i * x_i``. Given a solution of the
unmerged program, the size-weighted mean ``x = sum size_i x_i / sum size_i`` lies in ``P``
(convex) and contributes ``(sum size_i) x``, the same amounts, to every shared row: the
merged program has a solution with the same slot times. Given a solution of the merged
one, setting every ``x_i = x`` gives the same shared sums. So the optima are equal;
``lp_bound(merge=False)`` builds one sub-program per block (the test compares the two).

Time budget. HiGHS stops at ``time_limit_s``; a program stopped before its optimum proves
nothing, so ``LpOverBudget`` is raised and ``simulate`` reports the fast ``bound``
instead (``counters["lp_fallback"]``): the gap a plan could be proven to have is then its
time over that bound.
"""
from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass

import numpy as np

from .._errors import Error
from ._lp_lossless import held_to_free
from ._lp_slots import Slots, family
from ._prep import Prepared

__all__ = ["lp_bound", "LpResult", "LpTooLarge", "LpOverBudget", "MAX_COLUMNS"]

MiB = float(1 << 20)
# Columns HiGHS solves in about a minute on one core (resnet50 at batch 64, 1,631 ticks:
# ~150k columns, ~10 s); larger programs are coarsened in time first.
MAX_COLUMNS = 100_000


class LpTooLarge(Error, ValueError):
    """The program has more columns than allowed even after coarsening."""


class LpOverBudget(Error, RuntimeError):
    """HiGHS reached its time limit before the optimum (no bound can be claimed from it)."""


@dataclass
class LpResult:
    """``time_s``: the bound (s); ``status``: HiGHS's model status; ``columns``/``rows``/
    ``nonzeros``: the program's size; ``coarsen``: ticks merged per slot (the most in one
    slot where slots are not uniform; 1: exact); ``build_s``/``solve_s``: wall time of each
    step; ``slot_s``: the optimum's slot durations (s; slot ``g`` = window ticks
    ``slot_start[g] ..``); ``bytes_in``/``bytes_out``:
    bytes the optimum moves over the link per slot, each way (migrations and zero-copy);
    ``classes``: block classes in the program (Note [Block classes]); ``primal`` (asked
    for only): per live stretch of a class, (its blocks, the slots of its boundaries, the
    optimum's resident fraction there: clean + dirty); ``slot_start``: each slot's first
    window tick."""

    time_s: float
    status: str
    columns: int
    rows: int
    nonzeros: int
    coarsen: int
    build_s: float
    solve_s: float
    slot_s: np.ndarray
    bytes_in: np.ndarray
    bytes_out: np.ndarray
    slot_start: np.ndarray
    classes: int = 0
    primal: list | None = None


def _highs():
    """A silent ``highspy.Highs``; ImportError with the fix when highspy is missing."""
    try:
        import highspy
    except ImportError as e:  # pragma: no cover - exercised where highspy is absent
        raise ImportError("policy 'lp-bound' needs HiGHS: pip install highspy "
                          "(or the project's 'lp' extra)") from e
    # HiGHS writes a banner to the process's stdout (file descriptor 1) when its first
    # solver object is made; the library must not print, so that one line goes nowhere
    with _quiet_fd1():
        h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    return highspy, h


@contextlib.contextmanager
def _quiet_fd1():
    try:
        saved = os.dup(1)
    except OSError:  # pragma: no cover - no stdout at all
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _accesses(prep: Prepared):
    """Per (block, window tick) with an access, sorted by block then tick: block, tick,
    fraction of the block (its largest range), reads, writes; and per block the largest
    fraction accessed before the window (pages already touched)."""
    ws, we = prep.window
    W = we - ws
    at, ab, an = prep.ab_tick, prep.ab_block, prep.ab_need
    size_all = np.maximum(prep.bsize, 1).astype(np.float64)
    before = at < ws
    m0 = np.zeros(len(prep.bsize))
    np.maximum.at(m0, ab[before], np.minimum(an[before] / size_all[ab[before]], 1.0))
    inw = (at >= ws) & (at < we)
    key = ab[inw].astype(np.int64) * W + (at[inw] - ws)
    o = np.argsort(key, kind="stable")
    key = key[o]
    need, rd, wr = an[inw][o], prep.ab_read[inw][o], prep.ab_write[inw][o]
    if not len(key):
        z = np.zeros(0, np.int64)
        return z, z, np.zeros(0), np.zeros(0, bool), np.zeros(0, bool), m0
    first = np.concatenate([[True], key[1:] != key[:-1]])
    st = np.flatnonzero(first)
    need = np.maximum.reduceat(need, st)
    rd = np.logical_or.reduceat(rd, st)
    wr = np.logical_or.reduceat(wr, st)
    key = key[st]
    b, t = key // W, key % W
    frac = np.minimum(need / size_all[b], 1.0)
    return b, t, frac, rd, wr, m0


def _stretches(ticks, frac, rd, wr, born: bool, wraps: bool, m0: float):
    """A block's live stretches (its data from a birth to the last access before the next
    one), in time order: lists of access indices, with (cyclic, birth at the first access,
    free start) flags; and per access the fraction it may populate (``pop``): new data (a
    write that reads nothing) or pages never touched before (fresh)."""
    n = len(ticks)
    birth = wr & ~rd & (frac >= 1.0)
    if born:
        birth = birth.copy()
        birth[0] = True
    pop = np.zeros(n)
    m = m0
    for i in range(n):
        if birth[i]:
            m = frac[i] if not wr[i] else 1.0
            continue
        pop[i] = frac[i] if (wr[i] and not rd[i]) else max(0.0, frac[i] - m)
        m = max(m, frac[i])
    if wraps and not birth.any():
        return [(list(range(n)), True, False, False)], pop
    order = list(range(n))
    if wraps:
        k0 = int(np.flatnonzero(birth)[0])
        order = order[k0:] + order[:k0]
    runs: list[list[int]] = []
    for i in order:
        if birth[i] or not runs:
            runs.append([i])
        else:
            runs[-1].append(i)
    return [(r, False, bool(birth[r[0]]), not birth[r[0]]) for r in runs], pop


class _Builder:
    def __init__(self) -> None:
        self.ncol = 0
        self.lo: list = []
        self.hi: list = []
        self.cost: list = []
        self.rows_i: list = []
        self.rows_j: list = []
        self.rows_v: list = []
        self.nrow = 0
        self.tag = -1  # the block whose columns are being made (-1: none)
        self.col_block: list = []
        self.rlo: list = []
        self.rhi: list = []
        self.n_classes = 0
        self.members: list = []  # the blocks of the class being built (the primal's owners)
        self.runs: list = []  # per stretch: (members, slots, clean columns, dirty columns)

    def cols(self, n, lo=0.0, hi=np.inf, cost=0.0):
        i = np.arange(self.ncol, self.ncol + n)
        self.ncol += n
        self.col_block.append(np.full(n, self.tag, np.int64))
        self.lo.append(np.broadcast_to(np.asarray(lo, float), (n,)))
        self.hi.append(np.broadcast_to(np.asarray(hi, float), (n,)))
        self.cost.append(np.broadcast_to(np.asarray(cost, float), (n,)))
        return i

    def rows(self, n, lo, hi):
        i = np.arange(self.nrow, self.nrow + n)
        self.nrow += n
        self.rlo.append(np.broadcast_to(np.asarray(lo, float), (n,)))
        self.rhi.append(np.broadcast_to(np.asarray(hi, float), (n,)))
        return i

    def coef(self, r, c, v):
        r, c = np.asarray(r, np.int64), np.asarray(c, np.int64)
        v = np.broadcast_to(np.asarray(v, float), r.shape)
        self.rows_i.append(r)
        self.rows_j.append(c)
        self.rows_v.append(v)


@dataclass
class _Shared:
    """The program's per-slot columns and rows every block adds to: ``D`` (slot times),
    the budget row, the link rows each way and the zero-copy rows each way."""

    D: np.ndarray
    bud: np.ndarray
    inn: np.ndarray
    out: np.ndarray
    qin: np.ndarray
    qout: np.ndarray
    S: int
    W: int
    part: Slots


def _build(prep: Prepared, hw, budget: int, part: Slots, acc=None, classes=None):
    """The program over the slots of ``part`` (one tick each: exact; see the Note and Note
    [Slot partitions]), one sub-program per block class (Note [Block classes])."""
    ws, we = prep.window
    W = we - ws
    S = part.S
    C = part.sums(prep.dur_s[ws:we] * 1e3)
    L = _Builder()
    sh = _shared_rows(L, hw, budget, part, C)
    acc = _accesses(prep) if acc is None else acc
    classes = _classes(prep, acc, part) if classes is None else classes
    L.n_classes = len(classes)
    for rep, i0, i1, born, wraps, size, members in classes:
        b_acc, t_acc, frac, rd, wr, m0 = acc
        L.tag, L.members = rep, members
        tk, fr, r_, w_ = t_acc[i0:i1], frac[i0:i1], rd[i0:i1], wr[i0:i1]
        runs, pop = _stretches(tk, fr, r_, w_, born, wraps, m0[rep])
        for run, cyclic, birth0, free0 in runs:
            _add_run(L, sh, size, tk, fr, r_, w_, pop, np.asarray(run), cyclic, birth0, free0)
    return L, sh.D, S, C


def _shared_rows(L: "_Builder", hw, budget: int, part: Slots, C) -> _Shared:
    S = part.S
    bw_in, bw_out = _bandwidths(hw)
    D = L.cols(S, lo=C, cost=1.0)
    r_bud = L.rows(S, -np.inf, budget / MiB)  # sum size (c + d) <= B
    r_in = L.rows(S, -np.inf, 0.0)  # sum size (in + q_read) - bw_in D <= 0
    r_out = L.rows(S, -np.inf, 0.0)
    L.coef(r_in, D, -bw_in)
    L.coef(r_out, D, -bw_out)
    # zero-copy bytes cross while the kernel waits for them, not while the one before it
    # computes: sum size q - bw (D - C) <= 0 per slot and direction
    r_qin = L.rows(S, -np.inf, -bw_in * C)
    r_qout = L.rows(S, -np.inf, -bw_out * C)
    L.coef(r_qin, D, -bw_in)
    L.coef(r_qout, D, -bw_out)
    return _Shared(D, r_bud, r_in, r_out, r_qin, r_qout, S, part.W, part)


def _classes(prep: Prepared, acc, part: Slots, merge: bool = True):
    """Blocks with the same sub-program over the slots of ``part``, merged (Note [Block
    classes]): per class (representative block, its accesses ``i0 .. i1`` in ``acc``,
    born in the window, wraps, summed size in MiB, its blocks), in the order of first
    members."""
    ws, we = prep.window
    b_acc, t_acc, frac, rd, wr, m0 = acc
    if not len(b_acc):
        return []
    nb = len(prep.bsize)
    first_any = np.full(nb, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first_any, prep.ab_block, prep.ab_tick)
    wraps_b = (prep.balloc_tick < ws) & ((prep.bfree_tick < 0) | (prep.bfree_tick >= we))
    starts = np.flatnonzero(np.concatenate([[True], b_acc[1:] != b_acc[:-1]]))
    ends = np.concatenate([starts[1:], [len(b_acc)]])
    # what the sub-program reads of each access: its slot, whether it is the slot's first
    # tick, reads, writes (the order of a block's accesses is its tick order)
    code = (part.of[t_acc] * 2 + part.first[t_acc]) * 4 + rd * 2 + wr
    code_b = code.astype(np.int64).tobytes()
    frac_b = frac.astype(np.float64).tobytes()
    out: dict = {}
    for i0, i1 in zip(starts.tolist(), ends.tolist()):
        b = int(b_acc[i0])
        size = float(prep.bsize[b]) / MiB
        if size <= 0:
            continue
        born = bool(first_any[b] >= ws)
        wraps = bool(wraps_b[b]) and not born
        key = (born, wraps, float(m0[b]), code_b[8 * i0:8 * i1], frac_b[8 * i0:8 * i1]) \
            if merge else b
        c = out.get(key)
        if c is None:
            out[key] = [b, i0, i1, born, wraps, size, [b]]
        else:
            c[5] += size
            c[6].append(b)
    return [tuple(v) for v in out.values()]


def _fit(prep: Prepared, hw, budget: int, max_columns: int, coarsen: int | None,
         merge: bool, slots="uniform", lossless: bool = False):
    """The program at level ``coarsen`` of partition family ``slots`` (``family``), or
    (None) about the finest within ``max_columns``: (builder, D, S, C, k, partition).
    Levels are tried on a cheap estimate of the columns; a build over the limit scales
    the estimate and coarsens further."""
    acc = held_to_free(prep, _accesses(prep)) if lossless else _accesses(prep)
    part_at, k_max = family(prep, budget, slots)
    ratio = 1.0
    lo = 0  # the largest level known to be over the limit
    k = 1 if coarsen is None else int(coarsen)
    memo: dict = {}

    def estimate(k_):
        if k_ not in memo:
            part = part_at(k_)
            cl = _classes(prep, acc, part, merge)
            memo.clear()  # keep one: the classes of a large trace are not small
            memo[k_] = (part, cl, _columns_estimate(acc[1], cl, part))
        return memo[k_]

    while True:
        part, classes, raw = estimate(k)
        if coarsen is None and raw * ratio > max_columns and k < k_max:
            lo = k
            k = min(k_max, max(k + 1, int(k * raw * ratio / max_columns * 1.1) + 1))
            continue
        if coarsen is None and k - lo > max(1, k // 8):
            mid = (lo + k) // 2  # a finer level may fit too: the bound is tighter there
            if estimate(mid)[2] * ratio <= max_columns:
                k = mid
            else:
                lo = mid
            continue
        L, D, S, C = _build(prep, hw, budget, part, acc, classes)
        ratio = max(ratio, L.ncol / max(raw, 1))
        if L.ncol <= max_columns or coarsen is not None:
            return L, D, S, C, k, part
        if k >= k_max:
            raise LpTooLarge(
                f"the LP bound needs {L.ncol:,} columns even with every tick of the "
                f"{part.W:,}-tick window merged, over the limit of {max_columns:,}; raise "
                f"max_columns")
        lo = k
        k = min(k_max, max(k + 1, int(k * L.ncol / max_columns * 1.1) + 1))


def _columns_estimate(t_acc, classes, part: Slots) -> int:
    """About the columns of the program of ``classes`` over the slots of ``part``."""
    S = part.S
    n = S
    of = part.of
    for _, i0, i1, _born, wraps, _size, _members in classes:
        span = S if wraps else int(of[t_acc[i1 - 1]] - of[t_acc[i0]]) + 1
        n += (i1 - i0) + 2 * span
    return n


def _add_run(L: "_Builder", sh: _Shared, size: float, tk, fr, r_, w_, pop, run, cyclic: bool,
             birth0: bool, free0: bool) -> None:
    """One live stretch of a block class: its columns (clean, dirty, moved in and out,
    zero-copy), its access rows and its transitions (see the Note)."""
    S, W, of = sh.S, sh.W, sh.part.of
    r_bud, r_in, r_out, r_qin, r_qout = sh.bud, sh.inn, sh.out, sh.qin, sh.qout

    def uslot(u):  # unrolled tick -> unrolled slot
        return (u // W) * S + of[u % W]

    run = np.asarray(run)
    if cyclic:
        u = tk[run]
        m = S
        idx = of[u]
        u0 = 0
    else:
        u0 = 0 if free0 else int(tk[run[0]])
        u = u0 + (tk[run] - u0) % W  # unrolled ticks from the stretch's start
        g0 = uslot(u0)
        idx = uslot(u) - g0
        m = int(idx[-1]) + 1
    slots = (uslot(u0) + np.arange(m)) % S if not cyclic else np.arange(S)
    at_start = sh.part.first[u % W]
    # the stretch's first boundary: free at a birth on it (first touch or new
    # data), clean when carried in; zero when the birth falls inside the slot
    c = L.cols(m, hi=1.0)
    d = L.cols(m, hi=1.0)
    if not cyclic:
        chi, dhi = L.hi[-2].copy(), L.hi[-1].copy()
        if free0 or (birth0 and not w_[run[0]]):
            dhi[0] = 0.0
        if birth0 and not at_start[0]:
            chi[0] = dhi[0] = 0.0
        L.hi[-2], L.hi[-1] = chi, dhi
    L.coef(r_bud[slots], c, size)
    L.coef(r_bud[slots], d, size)
    L.runs.append((L.members, slots, c, d))
    ntr = m if cyclic else m - 1
    inside = ~at_start
    # an access inside its slot may also use what came in during the slot before it
    need_in = bool(inside.any()) and (cyclic or bool(inside[idx == m - 1].any()))
    ncin = max(ntr, m if need_in else 0)
    tin = L.cols(ncin)
    tout = L.cols(ncin)
    L.coef(r_in[slots[:ncin]], tin, size)
    L.coef(r_out[slots[:ncin]], tout, size)
    # accesses: c + d (+ in over the slot, inside it) + q >= a. Pure writes inside
    # a slot populate where they happen (no row), and so does a birth inside a slot
    # for the accesses after it in that slot; the data such a birth writes is, at
    # the next boundary, resident (dirty), or went out, or was written in place:
    # d[1] + out[0] + q >= a
    skip = np.zeros(len(run), bool)
    inb = birth0 and not at_start[0]
    if inb:
        skip |= idx == idx[0]
        skip[0] = False
    skip |= w_[run] & ~r_[run] & ~at_start & ~(np.arange(len(run)) == 0)
    a = np.flatnonzero(~skip)
    ai = run[a]
    q = L.cols(len(a), hi=fr[ai])
    lo_ = fr[ai] - np.where(at_start[a], 0.0, pop[ai])
    ra = L.rows(len(a), lo_, np.inf)
    reg = np.ones(len(a), bool)
    if inb:
        reg[0] = False
        L.rlo[-1] = np.concatenate([[fr[ai[0]] if m > 1 else 0.0], lo_[1:]])
        if m > 1:
            L.coef([ra[0]], [d[1]], 1.0)
            L.coef([ra[0]], [tout[0]], 1.0)
    L.coef(ra[reg], c[idx[a][reg]], 1.0)
    L.coef(ra[reg], d[idx[a][reg]], 1.0)
    L.coef(ra, q, 1.0)
    ins = inside[a] & reg
    L.coef(ra[ins], tin[idx[a][ins]], 1.0)
    prev_slot = of[(u[a] - 1) % W]
    rk, wk = r_[ai], w_[ai]
    L.coef(r_in[prev_slot[rk]], q[rk], size)
    L.coef(r_out[prev_slot[wk]], q[wk], size)
    L.coef(r_qin[prev_slot[rk]], q[rk], size)
    L.coef(r_qout[prev_slot[wk]], q[wk], size)
    if ntr <= 0:
        return
    _add_transitions(L, run, idx, at_start, w_, pop, cyclic, birth0, m, ntr, c, d, tin, tout)


def _add_transitions(L: "_Builder", run, idx, at_start, w_, pop, cyclic: bool, birth0: bool,
                     m: int, ntr: int, c, d, tin, tout) -> None:
    """The rows from one boundary of a stretch to the next (see the Note)."""
    # per transition j -> j+1 (slot slots[j]): writes at the slot's first tick
    # (wst), at a later tick of it (wlat), population over (start, next start]
    src = np.arange(ntr)
    dst = (src + 1) % m
    wst = np.zeros(m, bool)
    wlat = np.zeros(m, bool)
    popj = np.zeros(m)
    for j_, ii, st_ in zip(idx.tolist(), run.tolist(), at_start.tolist()):
        if w_[ii]:
            if st_:
                wst[j_] = True
            else:
                wlat[j_] = True
        if st_ and j_ > 0:
            popj[j_ - 1] += pop[ii]
        elif not st_:
            popj[j_] += pop[ii] if not (birth0 and ii == run[0]) else 1.0
        elif cyclic and j_ == 0:
            popj[m - 1] += pop[ii]
    popj = np.minimum(popj, 1.0)
    ws_, wl_ = wst[src], wlat[src]
    tin_, tout_ = tin[:ntr], tout[:ntr]
    # clean rises only by bytes moved in; a write in the slot dirties what was there
    rc = L.rows(ntr, -np.inf, 0.0)
    L.coef(rc, c[dst], 1.0)
    keep = ~(ws_ | wl_)
    L.coef(rc[keep], c[src][keep], -1.0)
    L.coef(rc, tin_, -1.0)
    # dirty rises only by a write of what was resident (or came in before it) and
    # by population
    rdr = L.rows(ntr, -np.inf, popj[src])
    L.coef(rdr, d[dst], 1.0)
    L.coef(rdr, d[src], -1.0)
    wany = ws_ | wl_
    L.coef(rdr[wany], c[src][wany], -1.0)
    L.coef(rdr[wl_], tin_[wl_], -1.0)
    # and falls only by a write-back (a write at the slot's first tick dirtied all
    # of what was resident then)
    rf = L.rows(ntr, 0.0, np.inf)
    L.coef(rf, d[dst], 1.0)
    L.coef(rf, d[src], -1.0)
    L.coef(rf[ws_], c[src][ws_], -1.0)
    L.coef(rf, tout_, 1.0)


def lp_bound(prep: Prepared, hw, budget: int, *, max_columns: int = MAX_COLUMNS,
             coarsen: int | None = None, time_limit_s: float = 600.0,
             options: dict | None = None, merge: bool = True,
             primal: bool = False, slots="uniform", lossless: bool = False) -> LpResult:
    """Solve the program of Note [The LP bound] for the measured window of ``prep`` under
    ``budget`` bytes on ``hw``. ``slots``: the time partition (Note [Slot partitions]):
    ``"uniform"`` (``coarsen`` ticks per slot), ``"weighted"`` (boundaries where they
    matter, ``coarsen`` its level) or the slot starts themselves (window ticks, the first
    0); ``coarsen``: default 1 (exact), or about the finest level that brings the program
    under ``max_columns``; ``time_limit_s``: HiGHS's limit (s); ``options``: other HiGHS
    options by name; ``merge``: one sub-program per block class (Note [Block classes];
    False: one per block, the same optimum); ``primal``: also the optimum's residency per
    block and slot boundary; ``lossless``: Note [Lossless schedules]. Raises
    ``LpTooLarge`` when even merging the whole window into a few slots would not,
    ``LpOverBudget`` when HiGHS reaches ``time_limit_s`` first, ``RuntimeError`` when it
    stops otherwise before the optimum (its status and the program's size in the message)."""
    t0 = time.perf_counter()
    L, D, S, C, k, part = _fit(prep, hw, budget, max_columns, coarsen, merge, slots, lossless)
    if not (isinstance(slots, str) and slots == "uniform"):
        k = part.widest  # what ``coarsen`` reports: the most ticks merged in one slot
    slot_words = f"{part.S:,} slot(s) of up to {k} tick(s)"
    if L.ncol > max_columns:
        raise LpTooLarge(f"the LP bound needs {L.ncol:,} columns with {slot_words}, "
                         f"over the limit of {max_columns:,}; coarsen more or raise max_columns")
    highspy, h = _highs()
    ri = np.concatenate(L.rows_i)
    cj = np.concatenate(L.rows_j)
    vv = np.concatenate(L.rows_v)
    # one entry per (row, column): HiGHS refuses repeated ones (a one-slot cycle puts a
    # column on both sides of its own transition)
    key, inv = np.unique(cj * L.nrow + ri, return_inverse=True)
    vv = np.bincount(inv, weights=vv, minlength=len(key))
    ri, cj = key % L.nrow, key // L.nrow
    start = np.searchsorted(cj, np.arange(L.ncol + 1)).astype(np.int32)
    lp = highspy.HighsLp()
    lp.num_col_ = L.ncol
    lp.num_row_ = L.nrow
    inf = highspy.kHighsInf
    lp.col_cost_ = np.concatenate(L.cost)
    lp.col_lower_ = np.concatenate(L.lo)
    lp.col_upper_ = np.where(np.isfinite(np.concatenate(L.hi)), np.concatenate(L.hi), inf)
    lp.row_lower_ = np.where(np.isfinite(np.concatenate(L.rlo)), np.concatenate(L.rlo), -inf)
    lp.row_upper_ = np.where(np.isfinite(np.concatenate(L.rhi)), np.concatenate(L.rhi), inf)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = start
    lp.a_matrix_.index_ = ri.astype(np.int32)
    lp.a_matrix_.value_ = vv
    h.setOptionValue("time_limit", float(time_limit_s))
    for k_, v_ in (options or {}).items():
        h.setOptionValue(k_, v_)
    if h.passModel(lp) != highspy.HighsStatus.kOk:
        raise RuntimeError(f"HiGHS refused the LP bound's program ({L.ncol:,} columns, "
                           f"{L.nrow:,} rows, {len(vv):,} nonzeros)")
    t1 = time.perf_counter()
    h.run()
    t2 = time.perf_counter()
    status = h.modelStatusToString(h.getModelStatus())
    if status == "Time limit reached":
        raise LpOverBudget(
            f"HiGHS did not solve the LP bound within its {time_limit_s:g} s budget "
            f"({L.ncol:,} columns, {L.nrow:,} rows, {len(vv):,} nonzeros, {slot_words}, "
            f"{L.n_classes:,} block classes)")
    if status != "Optimal":
        raise RuntimeError(f"HiGHS stopped with status {status!r} on the LP bound "
                           f"({L.ncol:,} columns, {L.nrow:,} rows, {len(vv):,} nonzeros, "
                           f"{slot_words}, {t2 - t1:.1f} s)")
    sol = h.getSolution()
    x = np.asarray(sol.col_value)
    act = np.asarray(sol.row_value)
    slot_ms = x[D]
    # link rows hold sum size (in + q) - bw D (MiB): their activity plus bw D is the bytes
    bw_in, bw_out = _bandwidths(hw)
    return LpResult(time_s=float(slot_ms.sum()) * 1e-3, status=status, columns=L.ncol,
                    rows=L.nrow, nonzeros=len(vv), coarsen=k, build_s=t1 - t0,
                    solve_s=t2 - t1, slot_s=slot_ms * 1e-3,
                    bytes_in=np.maximum(act[S:2 * S] + bw_in * slot_ms, 0) * MiB,
                    bytes_out=np.maximum(act[2 * S:3 * S] + bw_out * slot_ms, 0) * MiB,
                    classes=L.n_classes, slot_start=part.starts,
                    primal=[(np.asarray(m), s, x[c] + x[d]) for m, s, c, d in L.runs]
                    if primal else None)


def _bandwidths(hw) -> tuple[float, float]:
    """The fastest path each way (host->device, device->host), MiB per ms. Each direction
    gets its own full rate: the LP leaves the link's duplex cap (``duplex_Bps``) out, a
    relaxation -- every transfer schedule that respects the cap also respects the two
    one-way rates, so the feasible set only grows and the optimum stays a lower bound."""
    return (max(hw.h2d_prefetch_Bps, hw.h2d_fault_Bps, hw.remote_access_Bps) / MiB / 1e3,
            max(hw.d2h_prefetch_Bps, hw.d2h_evict_Bps, hw.remote_access_Bps) / MiB / 1e3)
