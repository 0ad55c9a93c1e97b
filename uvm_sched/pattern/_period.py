"""Period detection on the allocator-event sequence (no markers needed).

The sequence is the ALLOC/FREE rows of a trace, each turned into a token ``(kind, size)``
mapped to a dense integer. Training repeats the same token string every iteration, so the
iteration length ``p`` (in allocator events) is a lag at which the string matches itself.

Steps, each vectorised with numpy (n = allocator events):

1. **Candidate lags** -- every token gets a random unit phase ``exp(2πi·u[token])``; the
   FFT autocorrelation of that signal at lag ``p`` is, in expectation, the number of
   positions ``i`` with ``tok[i] == tok[i+p]`` (different tokens contribute zero-mean noise
   of order ``sqrt(n)``). The best lags by that count (absolute and per compared position)
   are kept, plus the divisors of the best one. The same is done on tokens that also carry
   the bytes live before the event: there the iteration's lag ranks first even in deep nets
   whose many identical layers make multiples of a layer's lag match nearly everywhere.
   ``O(n log n)``.
2. **Exact score** of each candidate ``p`` -- the runs of ``tok[i] == tok[i+p]``. A run of
   length ``>= p`` holds at least two full copies of a length-``p`` string. A run counts only
   when it is *balanced*: the bytes allocated minus freed over one period window are ~0
   (within ``BALANCE_TOL`` of the bytes allocated in it). That is what an iteration does in
   steady state, and what the repeats of one layer inside the forward pass do not
   (activations pile up), so layer-sized sub-periods are rejected. The score is the share of
   the sequence covered by balanced runs (each run ``[a, b)`` covers ``[a, b + p)``).
   ``O(n)`` per candidate, ``K`` candidates (``K <= ~60``).
3. **Choice** -- the smallest candidate whose coverage is within ``COVERAGE_TOL`` of the best
   (multiples of the period cover as much as the period itself). No period when the best
   coverage is below ``MIN_COVERAGE``.
4. **Phase and segmentation** -- inside the longest balanced run the iteration starts where
   the fewest bytes are live (between the optimizer step and the next forward), at a tick
   boundary; among equal levels, the one that starts the longest stretch above it. The representative string ``R`` is the ``p`` tokens from there. Boundaries are
   the occurrences (rolling hash, verified exactly) of a start signature (the shortest prefix
   of ``R`` that occurs once in ``R`` read cyclically) and the ends of the matching end
   signature. Segments between boundaries are iterations when they hold ``R``'s tokens
   (bag recall >= ``RECALL_MIN``, length <= 3p: a warm-up iteration that also allocates the
   optimizer state) or ``R``'s kinds position by position (``KIND_AGREE_MIN`` of
   ``max(len, p)``: a different last batch, a last iteration cut short; the trailing segment
   shorter than ``p`` at ``KIND_AGREE_MIN`` of its own length against ``R``'s beginning: a
   last iteration cut short by more than ``1 - KIND_AGREE_MIN`` of ``p``); the others (weight
   set-up, an eval pass outside the learned iteration, tear-down) are not iterations.

Overall ``O(n log n)`` time and ``O(n)`` memory.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Detection", "detect_period", "tokenize", "RollingHash", "make_hash", "score_lag"]

BALANCE_TOL = 0.02  # |net bytes| per period window <= 2% of the bytes allocated in it
COVERAGE_TOL = 0.01  # candidates within 1% of the sequence of the best coverage tie
MIN_COVERAGE = 0.4  # below this share of the sequence, no period is claimed
RECALL_MIN = 0.9  # a segment is an iteration when it holds >= 90% of R's tokens
KIND_AGREE_MIN = 0.9  # ... or R's kinds at >= 90% of max(len, p) positions
N_CANDIDATES = 24  # lags kept per ranking from the autocorrelation
_SEED = 0x5EED  # fixed: analysis is deterministic


def tokenize(kind: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Dense int64 token per allocator event: equal iff same kind (alloc/free) and size."""
    key = size.astype(np.int64) * 2 + (kind != 0)
    _, inv = np.unique(key, return_inverse=True)
    return inv.astype(np.int64).ravel()


class RollingHash:
    """Polynomial hashes of any window of a token string, modulo 2**64 (numpy wraps).

    ``window(s, m)`` = sum_j v[tok[s+j]] * B**-j over j < m, from prefix sums of
    ``v[tok[j]] * B**-j`` (B odd, so invertible mod 2**64) re-scaled by ``B**s``.
    """

    def __init__(self, tok: np.ndarray, values: np.ndarray, base: int) -> None:
        n = len(tok)
        inv = pow(base, -1, 1 << 64)
        with np.errstate(over="ignore"):
            ipow = np.cumprod(np.full(n + 1, inv, np.uint64))
            ipow = np.concatenate(([np.uint64(1)], ipow[:-1]))
            self._bpow = np.concatenate(
                ([np.uint64(1)], np.cumprod(np.full(n, base, np.uint64)))
            )
            self._prefix = np.concatenate(
                ([np.uint64(0)], np.cumsum(values[tok] * ipow[:n], dtype=np.uint64))
            )
        self.n = n
        self.values, self.base = values, base

    def of(self, tok: np.ndarray) -> "RollingHash":
        """A hash over another token string with the same per-token values and base."""
        return RollingHash(tok, self.values, self.base)

    def window(self, starts, m: int) -> np.ndarray:
        """Hashes of the windows ``[s, s+m)`` for each start ``s`` (array of uint64)."""
        s = np.asarray(starts, np.int64)
        with np.errstate(over="ignore"):
            return (self._prefix[s + m] - self._prefix[s]) * self._bpow[s]

    def all_windows(self, m: int) -> np.ndarray:
        """Hashes of every window of length ``m`` (``n - m + 1`` of them)."""
        return self.window(np.arange(self.n - m + 1), m)


def make_hash(tok: np.ndarray) -> RollingHash:
    """A RollingHash over ``tok`` with fixed random per-token values (deterministic)."""
    n_tokens = int(tok.max()) + 1 if len(tok) else 1
    rng = np.random.default_rng(_SEED)
    values = rng.integers(0, np.iinfo(np.int64).max, size=n_tokens, dtype=np.int64)
    values = values.astype(np.uint64) * np.uint64(2) + np.uint64(1)
    base = int(rng.integers(1 << 40, 1 << 62)) | 1
    return RollingHash(tok, values, base)


def find_occurrences(tok: np.ndarray, rh: RollingHash, pattern: np.ndarray) -> np.ndarray:
    """Start positions where ``pattern`` occurs in ``tok`` (hash match, verified exactly)."""
    m = len(pattern)
    if m == 0 or m > len(tok):
        return np.empty(0, np.int64)
    sub = rh.of(pattern).window([0], m)[0]
    cand = np.flatnonzero(rh.all_windows(m) == sub)
    if len(cand) == 0:
        return cand
    ok = np.ones(len(cand), bool)
    # Exact check in chunks so the index matrix stays ~1M entries.
    step = max(1, 1_000_000 // m)
    ar = np.arange(m)
    for c0 in range(0, len(cand), step):
        c = cand[c0:c0 + step]
        ok[c0:c0 + step] = (tok[c[:, None] + ar] == pattern).all(axis=1)
    return cand[ok]


def candidate_lags(tok: np.ndarray, n_tokens: int, k: int = N_CANDIDATES) -> np.ndarray:
    """Lags ``2 <= p <= n/2`` most likely to be periods, from the phase autocorrelation."""
    n = len(tok)
    max_lag = n // 2
    if max_lag < 2:
        return np.empty(0, np.int64)
    rng = np.random.default_rng(_SEED + 1)
    phase = np.exp(2j * np.pi * rng.random(n_tokens)).astype(np.complex64)
    x = phase[tok]
    # Zero padding to n + max_lag keeps lags <= max_lag free of wrap-around; single
    # precision is plenty (rounding ~1e-7 * n against sqrt(n) noise) and halves the work.
    size = _fast_len(n + max_lag)
    f = np.fft.fft(x, size)
    r = np.fft.ifft(f * np.conj(f))[: max_lag + 1].real  # r[p] ~ #{i: tok[i]==tok[i+p]}
    lags = np.arange(max_lag + 1)
    r[:2] = -np.inf
    # A period needs >= p matching positions (two full copies); drop lags that cannot.
    r[r < 0.8 * lags] = -np.inf
    valid = np.isfinite(r)
    if not valid.any():
        return np.empty(0, np.int64)
    kk = min(k, int(valid.sum()))
    by_count = np.argpartition(-r, kk - 1)[:kk]
    frac = np.where(valid, r / np.maximum(n - lags, 1), -np.inf)
    by_frac = np.argpartition(-frac, kk - 1)[:kk]
    cands = np.union1d(by_count, by_frac)
    cands = cands[valid[cands]]
    best = int(cands[np.argmax(r[cands])])
    divs = [best // d for d in range(2, 17) if best % d == 0 and best // d >= 2]
    return np.union1d(cands, np.asarray(divs, np.int64)).astype(np.int64)


def _fast_len(target: int) -> int:
    """Smallest 2^a 3^b 5^c >= target (sizes the FFT handles fastest)."""
    best = 1 << max(0, int(target - 1).bit_length())
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            q = p35
            while q < target:
                q *= 2
            best = min(best, q)
            p35 *= 3
        p5 *= 5
    return best


@dataclass
class LagScore:
    p: int
    coverage: int  # allocator events covered by balanced runs
    run_starts: np.ndarray  # balanced runs [a, b) of tok[i] == tok[i+p]
    run_ends: np.ndarray


def score_lag(tok: np.ndarray, net_cum: np.ndarray, alloc_cum: np.ndarray, p: int) -> LagScore:
    """Coverage of the sequence by balanced runs at lag ``p`` (see module doc). O(n)."""
    n = len(tok)
    if p < 1 or 2 * p > n:
        e = np.empty(0, np.int64)
        return LagScore(p, 0, e, e)
    eq = tok[:-p] == tok[p:]
    d = np.diff(np.concatenate(([0], eq.view(np.int8), [0])).astype(np.int8))
    starts = np.flatnonzero(d == 1)
    ends = np.flatnonzero(d == -1)
    keep = (ends - starts) >= p
    starts, ends = starts[keep], ends[keep]
    if len(starts):
        net = net_cum[starts + p] - net_cum[starts]
        gross = alloc_cum[starts + p] - alloc_cum[starts]
        bal = np.abs(net) <= BALANCE_TOL * np.maximum(gross, 1)
        starts, ends = starts[bal], ends[bal]
    if not len(starts):
        return LagScore(p, 0, starts, ends)
    cov_end = ends + p
    prev = np.concatenate(([0], np.maximum.accumulate(cov_end)[:-1]))
    covered = np.maximum(0, cov_end - np.maximum(starts, prev)).sum()
    return LagScore(p, int(covered), starts, ends)


@dataclass
class Detection:
    """What the learned detection found (allocator-event positions, 0-based)."""

    period: int | None  # None: no repetition found
    coverage: float = 0.0  # share of allocator events covered by balanced runs
    phase: int = 0  # start of the reference iteration R in the event sequence
    scores: dict[int, float] = field(default_factory=dict)  # lag -> coverage share
    boundaries: np.ndarray | None = None  # sorted segment boundaries (incl. 0 and n)
    is_iteration: np.ndarray | None = None  # per segment
    notes: list[str] = field(default_factory=list)

    def coverage_of(self, p: int) -> float:
        return self.scores.get(p, 0.0)


def detect_period(
    tok: np.ndarray,
    kind: np.ndarray,
    size: np.ndarray,
    ev_tick: np.ndarray,
    rh: RollingHash,
    extra_lags: tuple[int, ...] = (),
) -> Detection:
    """Learn the period and the iteration segments of an allocator-event token string.

    ``kind`` (0 alloc / 1 free), ``size`` (bytes) and ``ev_tick`` (trace tick) are per
    event; ``extra_lags`` are scored too (e.g. the marker spacing, to check it).
    """
    n = len(tok)
    is_alloc = kind == 0
    delta = np.where(is_alloc, size, -size).astype(np.int64)
    net_cum = np.concatenate(([0], np.cumsum(delta)))
    alloc_cum = np.concatenate(([0], np.cumsum(np.where(is_alloc, size, 0))))
    n_tokens = int(tok.max()) + 1 if n else 0
    cands = candidate_lags(tok, n_tokens)
    # Deep nets repeat one layer many times, so multiples of the layer's lag can outrank
    # the iteration in plain token matches. Tokens that also carry the bytes live before
    # the event match at the iteration's lag (steady state returns to the same level) and
    # not at a layer's (activations pile up), so the iteration ranks first there.
    with np.errstate(over="ignore"):
        mixed = (tok.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ (
            net_cum[:-1].astype(np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F))
    _, tok_live = np.unique(mixed, return_inverse=True)
    tok_live = tok_live.astype(np.int64).ravel()
    cands = np.union1d(cands, candidate_lags(tok_live, int(tok_live.max()) + 1 if n else 0))
    extra = [int(x) for x in extra_lags if 2 <= int(x) <= n // 2]
    cands = np.union1d(cands, np.asarray(extra, np.int64)).astype(np.int64)
    scored = {int(p): score_lag(tok, net_cum, alloc_cum, int(p)) for p in cands}
    det = Detection(None, scores={p: s.coverage / n for p, s in scored.items()})
    if not scored:
        det.notes.append(f"{n:,} allocator events: too few to hold two copies of a period")
        return det
    best = max(s.coverage for s in scored.values())
    if best < MIN_COVERAGE * n:
        det.notes.append(
            f"no repeating, balanced allocator-event string covers >= {MIN_COVERAGE:.0%} of "
            f"the {n:,} events (best {best / n:.1%})"
        )
        return det
    ok = sorted(p for p, s in scored.items() if s.coverage >= best - COVERAGE_TOL * n)
    p = ok[0]
    phase, at, a = _phase(scored[p], p, net_cum, ev_tick)
    q = _level_returns(at, net_cum[a:a + p], scored, n)
    if q is not None:
        det.notes.append(
            f"memory returns to the iteration's level every {q:,} allocator events inside "
            f"the {p:,}-event repeat: iterations of {q:,} events (the rest of the repeat, "
            "an eval batch or the like, is not one of them)")
        p = q
        phase, _, _ = _phase(scored[p], p, net_cum, ev_tick)
    det.period, det.coverage = p, scored[p].coverage / n
    det.phase = phase
    det.boundaries, det.is_iteration = _segment(tok, kind, rh, phase, p)
    return det


def _phase(sc: LagScore, p: int, net_cum: np.ndarray, ev_tick: np.ndarray
           ) -> tuple[int, np.ndarray, int]:
    """Step 4's phase of lag ``p``, the positions at the fewest live bytes in the window
    it was found in, and where that window starts."""
    # Phase: in the longest balanced run, the tick-boundary position with the fewest live
    # bytes (between one iteration's optimizer step and the next forward pass).
    i = int(np.argmax(sc.run_ends - sc.run_starts))
    a = int(sc.run_starts[i])
    win = np.arange(a, a + p)
    tick_edge = np.ones(len(win), bool)
    tick_edge[win > 0] = ev_tick[win[win > 0]] != ev_tick[win[win > 0] - 1]
    live = net_cum[win].astype(np.float64)
    live[~tick_edge] = np.inf
    if not tick_edge.any():
        return a, np.zeros(0, np.int64), a
    # Ties (an optimizer's per-parameter loop returns to the level after each
    # parameter): the one that starts the longest stretch above the level, read
    # cyclically -- the forward and backward passes, not a parameter's update.
    at = np.flatnonzero(live == live.min())
    gap = np.diff(np.append(at, at[0] + p))
    return int(win[at[int(np.argmax(gap))]]), at, a


def _level_returns(at: np.ndarray, live: np.ndarray, scored: dict, n: int) -> int | None:
    """A shorter lag ``q`` that is the iteration inside the repeat of ``len(live)`` events
    (``live``: the bytes live over one window of it): memory comes back to the repeat's
    fewest live bytes every ``q`` events (the positions ``at``) for at least
    ``MIN_COVERAGE`` of the repeat, the repeat's peak lies in one of those ``q``-event
    stretches (the forward and backward passes, not an optimizer's per-parameter loop,
    which also returns to the level), and ``q`` is a balanced period of its own (covering
    ``MIN_COVERAGE`` of the sequence). Train steps with an eval batch every few steps:
    the eval cycle repeats, but each train step ends where it began. A gradient-
    accumulation micro-step is never one: the gradients it keeps hold memory above the
    level until the optimizer step. None when there is none."""
    p = len(live)
    if len(at) < 2:
        return None
    gaps = np.diff(np.append(at, at[0] + p))
    vals, counts = np.unique(gaps, return_counts=True)
    j = int(np.argmax(counts))
    q = int(vals[j])
    sq = scored.get(q)
    peak_in = gaps[(int(np.searchsorted(at, int(np.argmax(live)), "right")) - 1) % len(at)]
    if q >= p or sq is None or sq.coverage < MIN_COVERAGE * n \
            or counts[j] * q < MIN_COVERAGE * p or peak_in != q:
        return None
    return q


def _unique_len(rr_hash: RollingHash, p: int, at_end: bool) -> int:
    """Shortest signature length m (8, 16, ... <= p) that occurs once per period in R·R."""
    m = min(8, p)
    while True:
        h = rr_hash.all_windows(m)  # windows of R·R, starts 0..2p-m
        starts = np.arange(len(h))
        ref = p - m if at_end else 0
        same = (h == h[ref]) & ((starts - ref) % p != 0)
        if not same.any() or m >= p:
            return m
        m = min(2 * m, p)


def _segment(tok, kind, rh: RollingHash, phase: int, p: int):
    n = len(tok)
    R = tok[phase:phase + p]
    rr = rh.of(np.concatenate([R, R]))
    m_s = _unique_len(rr, p, at_end=False)
    m_e = _unique_len(rr, p, at_end=True)
    starts = find_occurrences(tok, rh, R[:m_s])
    ends = find_occurrences(tok, rh, R[p - m_e:]) + m_e
    b = np.unique(np.concatenate(([0, n], starts, ends, [phase]))).astype(np.int64)
    seg_len = np.diff(b)
    n_seg = len(seg_len)
    # Bag recall of R in each segment.
    seg_id = np.repeat(np.arange(n_seg), seg_len)
    n_tok = int(tok.max()) + 1
    r_count = np.bincount(R, minlength=n_tok)
    key = seg_id * n_tok + tok
    uk, cnt = np.unique(key, return_counts=True)
    common = np.minimum(cnt, r_count[uk % n_tok])
    recall = np.bincount(uk // n_tok, weights=common, minlength=n_seg) / p
    is_it = (recall >= RECALL_MIN) & (seg_len <= 3 * p)
    # R's kinds position by position (sizes may differ: a different last batch; a last
    # iteration cut short of R's trailing frees).
    near = np.flatnonzero(~is_it & (2 * seg_len >= p) & (2 * seg_len <= 3 * p))
    if len(near):
        rk = kind[phase:phase + p]
        ar = np.arange(p)
        step = max(1, 1_000_000 // p)
        for c0 in range(0, len(near), step):
            s = near[c0:c0 + step]
            L = seg_len[s][:, None]
            inside = ar < L
            k = kind[np.minimum(b[s][:, None] + ar, n - 1)]
            agree = ((k == rk) & inside).sum(axis=1) / np.maximum(seg_len[s], p)
            is_it[s] = agree >= KIND_AGREE_MIN
    # The trailing segment shorter than R: the last iteration, cut short (a partial last
    # batch, the recording stopped), when it is R's beginning -- its kinds agree with R's
    # first ones at KIND_AGREE_MIN of its own positions, or within as many edits (a partial
    # batch skips an op or two: the rest is shifted); the 2 * len >= p above still holds.
    last = n_seg - 1
    if not is_it[last] and p <= 2 * seg_len[last] < 2 * p:
        n_tail = int(seg_len[last])
        tail, head = kind[b[last]:b[last] + n_tail], kind[phase:phase + p]
        in_place = np.count_nonzero(tail == head[:n_tail]) / n_tail
        slack = (1 - KIND_AGREE_MIN) * n_tail
        is_it[last] = in_place >= KIND_AGREE_MIN or _prefix_edits(tail, head, int(slack)) <= slack
    return b, is_it


_MAX_EDIT_CELLS = 20_000_000  # the edit distance's table: ~0.1 s of numpy, one per analysis


def _prefix_edits(a: np.ndarray, r: np.ndarray, d: int) -> float:
    """Edits (insertions, deletions, substitutions) between ``a`` and the closest prefix of
    ``r`` of length ``len(a) +- d`` (Levenshtein, one numpy row per element of ``a``; an
    insertion run is a running minimum). ``inf`` when the table would exceed
    ``_MAX_EDIT_CELLS`` (a trailing segment of a very long iteration: positions only)."""
    n, m = len(a), min(len(r), len(a) + d)
    if n * (m + 1) > _MAX_EDIT_CELLS:
        return float("inf")
    r = r[:m]
    j = np.arange(m + 1)
    prev = j.astype(np.int64)
    for i in range(1, n + 1):
        base = np.empty(m + 1, np.int64)
        base[0] = i
        base[1:] = np.minimum(prev[:-1] + (r != a[i - 1]), prev[1:] + 1)
        prev = np.minimum.accumulate(base - j) + j  # an insertion costs 1 per element
    return float(prev[max(0, n - d):].min())
