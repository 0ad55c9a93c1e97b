"""Figure data from a Trace, a Plan and a SimResult: plain numpy/pandas, no plotting library.

Every function here returns the numbers a figure draws plus, where it had to drop detail to
stay responsive (or could not know something), a short ``note`` the figure prints.

Conventions: tick ``t`` is drawn as the interval ``[t, t + 1)``. A block is in use during
every tick from its ALLOC tick to its FREE tick inclusive (within a tick allocations come
before the kernel and frees after it), so bytes in use at tick ``t`` are the tick's high-water
mark and their maximum is ``Trace.peak_bytes``.
"""
from __future__ import annotations

import heapq
from typing import Any

import numpy as np
import pandas as pd

from ..trace._model import EventKind, Trace
from ._units import CLASS_ORDER

ALLOC, FREE, ACCESS = int(EventKind.ALLOC), int(EventKind.FREE), int(EventKind.ACCESS)

# The native pool gives blocks above 1 MiB whole 2 MiB pages; smaller ones share slab pages,
# which the executor never discards.
_DISCARD_MIN_BYTES = 2**20

# Plan action -> the family drawn on the lifetime chart.
ACTION_FAMILY = {
    "prefetch_to_device": "prefetch",
    "prefetch_to_host": "evict",
    "discard": "discard",
    "advise_preferred_host": "advise",
    "advise_accessed_by": "advise",
    "advise_read_mostly": "advise",
}


# -- block classes ---------------------------------------------------------------------------
def get_pattern(trace: Trace, pattern: Any = None) -> tuple[Any, str | None]:
    """``(pattern, None)`` from ``uvm_sched.pattern.analyze(trace)`` (or the one given), or
    ``(None, reason)`` when the pattern module is missing or cannot analyse this trace."""
    if pattern is not None:
        return pattern, None
    try:
        from ..pattern import analyze
    except ImportError:
        return None, "pattern analysis unavailable"
    try:
        return analyze(trace), None
    except (ValueError, RuntimeError) as e:
        return None, f"pattern analysis failed: {e}"


def block_classes(trace: Trace, pattern: Any = None, why: str | None = None) -> tuple[pd.Series, str]:
    """Class of every block (Series indexed by trace block id, values in ``CLASS_ORDER``) and
    a note saying where the classes came from.

    With a pattern (``uvm_sched.pattern``): its ``blocks.cls`` for the representative
    iteration; blocks of other iterations take the class of the same allocation ordinal in
    the representative iteration when their size matches. Everything else falls back to a
    lifetime rule: persistent = never freed or alive across an iteration start; transient =
    freed within one tick of its allocation; activation = the rest.
    """
    bt = trace.block_table()
    cls = pd.Series(np.full(len(bt), None, dtype=object), index=bt.index, name="cls")
    pat = pattern
    if pat is not None:
        pb = pat.blocks
        known = pb.index.intersection(bt.index)
        cls.loc[known] = pb.loc[known, "cls"].astype(str).to_numpy()
        local = pb[~pb["persistent"].astype(bool)]
        its = np.asarray(pat.iterations, dtype=np.int64).reshape(-1, 2)
        if len(local) and len(its):
            n_ord = int(local["ordinal"].max()) + 1
            rep_size = np.full(n_ord, -1, np.int64)
            rep_cls = np.full(n_ord, None, dtype=object)
            rep_size[local["ordinal"].to_numpy()] = local["size"].to_numpy()
            rep_cls[local["ordinal"].to_numpy()] = local["cls"].astype(str).to_numpy()
            # every block's iteration and its allocation ordinal within it, all at once
            order = np.argsort(bt["alloc_row"].to_numpy(), kind="stable")
            a_tick = bt["alloc_tick"].to_numpy()[order]
            it = np.searchsorted(its[:, 0], a_tick, side="right") - 1
            inside = (it >= 0) & (a_tick < its[np.maximum(it, 0), 1])
            sel, it = order[inside], it[inside]
            first = np.searchsorted(it, it, side="left")  # it is sorted (alloc order)
            ords = np.arange(len(sel)) - first
            ok = ords < n_ord
            sel, ords = sel[ok], ords[ok]
            ok = rep_size[ords] == bt["size"].to_numpy()[sel]
            sel, ords = sel[ok], ords[ok]
            todo = cls.iloc[sel].isna().to_numpy()
            cls.iloc[sel[todo]] = rep_cls[ords[todo]]
        note = "classes from pattern analysis"
    else:
        note = "classes from a lifetime rule" + (f" ({why})" if why else "")
    missing = cls.isna().to_numpy()
    if missing.any():
        rule = _lifetime_rule(trace, bt)
        cls[missing] = rule[missing]
        if pat is not None:
            note += f"; {int(missing.sum()):,} blocks outside its iterations by a lifetime rule"
    cls = cls.where(cls.isin(CLASS_ORDER), "other")
    return cls, note


def _lifetime_rule(trace: Trace, bt: pd.DataFrame) -> np.ndarray:
    a = bt["alloc_tick"].to_numpy()
    f = bt["free_tick"].to_numpy()
    never = f < 0
    starts = trace.iteration_starts
    # alive across an iteration start: some start s with a < s <= f
    crosses = np.searchsorted(starts, np.where(never, a, f), side="right") > np.searchsorted(
        starts, a, side="right"
    )
    out = np.where(f - a <= 1, "transient", "activation").astype(object)
    out[never | crosses] = "persistent"
    return out


# -- memory in use ---------------------------------------------------------------------------
def memory_by_class(trace: Trace, classes: pd.Series) -> pd.DataFrame:
    """Bytes in use during each tick, one column per class present (stacking order), index
    ``tick`` 0..n_ticks-1 (int64 bytes)."""
    n = trace.n_ticks
    bt = trace.block_table()
    end = bt["free_tick"].to_numpy()
    end = np.where(end < 0, n - 1, end)
    cl = classes.reindex(bt.index).to_numpy()
    size = bt["size"].to_numpy()
    out = {}
    for c in CLASS_ORDER:
        m = cl == c
        if not m.any():
            continue
        d = np.bincount(bt["alloc_tick"].to_numpy()[m], weights=size[m], minlength=n + 1)
        d -= np.bincount(end[m] + 1, weights=size[m], minlength=n + 1)
        out[c] = np.cumsum(d[:n]).round().astype(np.int64)
    return pd.DataFrame(out, index=pd.RangeIndex(n, name="tick"))


def downsample_peaks(df: pd.DataFrame, max_points: int) -> tuple[pd.DataFrame, str | None]:
    """At most ``max_points`` rows: each bin of consecutive ticks is shown by its tick with the
    most bytes in use (so peaks survive and the stack stays consistent)."""
    n = len(df)
    if n <= max_points or n == 0:
        return df, None
    width = -(-n // max_points)
    total = df.to_numpy().sum(axis=1)
    nb = -(-n // width)
    pad = np.full(nb * width, -1, dtype=np.float64)
    pad[:n] = total
    pick = pad.reshape(nb, width).argmax(axis=1) + np.arange(nb) * width
    return df.iloc[pick], (
        f"downsampled: {n:,} ticks shown as {nb:,} points (each the peak of {width} ticks)"
    )


def cumulative_ms(trace: Trace) -> np.ndarray:
    """Device time at the start of each tick in ms (NaN from the first unknown tick on)."""
    t = np.asarray(trace.tick_ns, dtype=np.float64)
    return np.concatenate([[0.0], np.cumsum(t)[:-1]]) / 1e6 if len(t) else t


# -- lifetimes -------------------------------------------------------------------------------
def lifetime_table(trace: Trace, classes: pd.Series, max_blocks: int) -> tuple[pd.DataFrame, str | None]:
    """One row per block drawn: ``block`` (id), ``size``, ``cls``, ``start``, ``end`` (tick
    interval [start, end)), ``freed`` (bool), ``y`` (row: allocation order). Above
    ``max_blocks`` only the largest blocks are kept and the note says how much is shown."""
    bt = trace.block_table().sort_values("alloc_row")
    n = trace.n_ticks
    note = None
    if len(bt) > max_blocks:
        # the largest first; among equal sizes the earliest allocated
        keep = np.argsort(-bt["size"].to_numpy(), kind="stable")[:max_blocks]
        kept = bt.iloc[np.sort(keep)]
        share = kept["size"].sum() / max(1, bt["size"].sum())
        note = (f"{len(bt):,} blocks: showing the {max_blocks:,} largest "
                f"({share:.0%} of allocated bytes)")
        bt = kept
    free = bt["free_tick"].to_numpy()
    df = pd.DataFrame({
        "block": bt.index.to_numpy(),
        "size": bt["size"].to_numpy(),
        "cls": classes.reindex(bt.index).fillna("other").to_numpy(),
        "start": bt["alloc_tick"].to_numpy(),
        "end": np.where(free < 0, n, free + 1),
        "freed": free >= 0,
        "y": np.arange(len(bt)),
    })
    return df, note


def busy_spans(trace: Trace, blocks: np.ndarray, max_spans: int = 200_000) -> tuple[pd.DataFrame, str | None]:
    """Tick intervals in which each block of ``blocks`` is accessed (from ACCESS rows):
    columns ``block, start, end`` ([start, end) in ticks). Consecutive accessed ticks merge;
    where that leaves more than ``max_spans`` spans, idle gaps shorter than a threshold are
    merged too and the note gives it. Empty frame (and a note) when the trace has no
    ACCESS rows."""
    k = trace.kind
    acc = k == ACCESS
    if not acc.any():
        return pd.DataFrame({"block": [], "start": [], "end": []}, dtype=np.int64), (
            "no access rows in this trace: idle gaps unknown")
    b = trace.block[acc]
    t = trace.tick[acc]
    sel = np.isin(b, blocks)
    b, t = b[sel], t[sel]
    order = np.lexsort((t, b))
    b, t = b[order], t[order]
    keep = np.ones(len(b), bool)
    keep[1:] = (b[1:] != b[:-1]) | (t[1:] != t[:-1])
    b, t = b[keep], t[keep]
    if not len(b):
        return pd.DataFrame({"block": [], "start": [], "end": []}, dtype=np.int64), None
    same = np.zeros(len(b), bool)
    same[1:] = b[1:] == b[:-1]
    gap = np.zeros(len(b), np.int64)
    gap[1:] = t[1:] - t[:-1]
    within = gap[same]
    threshold = 1  # split a span where the next access is more than `threshold` ticks later
    n_spans = int((~same).sum() + (within > threshold).sum())
    note = None
    if n_spans > max_spans:
        allowed = max(0, max_spans - int((~same).sum()))
        desc = np.sort(within)[::-1]
        threshold = int(desc[allowed]) if allowed < len(desc) else threshold
        note = f"idle gaps of {threshold} ticks or less not drawn (too many to show)"
    new = ~same | (gap > threshold)
    starts_i = np.flatnonzero(new)
    ends_i = np.append(starts_i[1:], len(b)) - 1
    return pd.DataFrame({"block": b[starts_i], "start": t[starts_i], "end": t[ends_i] + 1}), note


# -- plan actions on the trace ---------------------------------------------------------------
def plan_marks(trace: Trace, plan: Any, pattern: Any = None, why: str | None = None
               ) -> tuple[pd.DataFrame, str | None]:
    """Where the executor would fire ``plan``'s actions in ``trace``: columns ``x`` (tick
    position: allocator events before a kernel are at its tick, frees after it at tick + 1),
    ``tick``, ``block`` (trace id), ``action``, ``family``, ``bytes``, ``iteration``.

    Plan semantics as the simulator's: iterations start at MARK ticks (with ``sync ==
    "period"`` or without marks: at the iterations pattern analysis found, else every
    ``period_events`` allocator events); the action with tick ``k`` fires right after
    allocator event ``k``; block ordinals name the j-th ALLOC of the iteration (or of the
    trace, persistent); an allocation of another size than ``alloc_sizes`` disarms the plan
    for the rest of that iteration; actions on blocks not live are skipped, except a discard
    at its block's own FREE (the native executor's rules, exec.c). ``bytes``: what the
    action covers (``bytes`` 0 = to the block's end). ``pattern``/``why``
    as for ``block_classes``."""
    k, t, b, s = trace.kind, trace.tick, trace.block, trace.size
    ev = np.flatnonzero((k == ALLOC) | (k == FREE))
    all_allocs = np.flatnonzero(k == ALLOC)
    bt = trace.block_table()
    alloc_row = pd.Series(bt["alloc_row"].to_numpy(), index=bt.index)
    free_row = pd.Series(bt["free_row"].to_numpy(), index=bt.index)
    meta = plan.meta
    period = int(meta["period_events"])
    sizes = np.asarray(meta["alloc_sizes"], dtype=np.int64)
    notes = []

    # iteration -> [e0, e1) in allocator-event indices
    marks = trace.iteration_starts
    ev_ticks = t[ev]
    if meta.get("sync", "marker") != "period" and len(marks):
        tick_bounds = list(zip(marks, list(marks[1:]) + [trace.n_ticks]))
        bounds = [(int(np.searchsorted(ev_ticks, a)), int(np.searchsorted(ev_ticks, z)))
                  for a, z in tick_bounds]
    else:
        pat = pattern
        if pat is not None and len(pat.iterations):
            bounds = [(int(np.searchsorted(ev_ticks, a)), int(np.searchsorted(ev_ticks, z)))
                      for a, z in pat.iterations]
            notes.append("iterations from pattern analysis")
        else:
            bounds = [(e, min(e + period, len(ev))) for e in range(0, len(ev), max(1, period))]
            notes.append(f"iterations every {period:,} allocator events from the first"
                         + (f" ({why})" if why else ""))

    acts = plan.actions
    a_tick = acts["tick"].to_numpy(np.int64)
    a_blk = acts["block"].to_numpy(np.int64)
    a_pers = acts["persistent"].to_numpy(bool)
    a_name = acts["action"].to_numpy(object)
    a_bytes = acts["bytes"].to_numpy(np.int64)
    a_off = acts["offset"].to_numpy(np.int64)
    out = []
    diverged = 0
    for it, (e0, e1) in enumerate(bounds):
        rows = ev[e0:e1]
        if not len(rows):
            continue
        is_alloc = k[rows] == ALLOC
        allocs = rows[is_alloc]
        alloc_pos = np.flatnonzero(is_alloc)  # event index of each allocation in the iteration
        n = min(len(allocs), len(sizes))
        bad = np.flatnonzero(s[allocs[:n]] != sizes[:n])
        if len(bad):
            first_bad = int(bad[0])
        elif len(allocs) > len(sizes):
            first_bad = len(sizes)
        else:
            first_bad = -1
        armed_until = len(rows) if first_bad < 0 else int(alloc_pos[first_bad])
        diverged += first_bad >= 0
        fire = a_tick < armed_until
        ai = np.flatnonzero(fire)
        if not len(ai):
            continue
        row_k = rows[a_tick[ai]]
        blk_row = np.full(len(ai), -1, np.int64)
        p = a_pers[ai]
        j = a_blk[ai]
        okp = p & (j < len(all_allocs))
        blk_row[okp] = all_allocs[j[okp]]
        okl = ~p & (j < len(allocs))
        blk_row[okl] = allocs[j[okl]]
        has = blk_row >= 0
        ai, row_k, blk_row = ai[has], row_k[has], blk_row[has]
        blocks = b[blk_row]
        fr = free_row.reindex(blocks).to_numpy()
        live = (alloc_row.reindex(blocks).to_numpy() <= row_k) & ((fr < 0) | (fr > row_k))
        # as the native executor (exec.c): a discard at the very FREE of its block fires
        # (dead data, not yet reusable); discards of blocks that own no whole 2 MiB page
        # (<= 1 MiB, slab-allocated) are skipped; an offset past the block's end is skipped
        is_discard = a_name[ai] == "discard"
        live |= is_discard & (fr == row_k)
        bsize = s[blk_row]
        live &= ~is_discard | (bsize > _DISCARD_MIN_BYTES)
        live &= a_off[ai] < bsize
        ai, row_k, blocks, bsize = ai[live], row_k[live], blocks[live], bsize[live]
        out.append(pd.DataFrame({
            "x": t[row_k] + (k[row_k] == FREE),
            "tick": t[row_k],
            "block": blocks,
            "action": a_name[ai],
            "family": [ACTION_FAMILY.get(a, "advise") for a in a_name[ai]],
            "bytes": np.where(a_bytes[ai] > 0, np.minimum(a_bytes[ai], bsize - a_off[ai]),
                              bsize - a_off[ai]),
            "iteration": it,
        }))
    if diverged:
        notes.append(f"plan disarmed by a size mismatch in {diverged} of {len(bounds)} iterations")
    df = pd.concat(out, ignore_index=True) if out else pd.DataFrame(
        {"x": [], "tick": [], "block": [], "action": [], "family": [], "bytes": [], "iteration": []})
    return df, "; ".join(notes) or None


# -- simulation results ----------------------------------------------------------------------
def window(result: Any) -> tuple[float, float]:
    """(start_s, end_s) of the simulator's measured window, from its timeline (else from
    its transfers)."""
    tl = result.timeline
    if tl is not None and len(tl):
        start = float(tl["start_s"].min())
        end = float((tl["start_s"] + tl["compute_s"] + tl["stall_s"]).max())
        return start, end
    tr = result.transfers
    if tr is not None and len(tr):
        return float(tr["start_s"].min()), float(tr["end_s"].max())
    return 0.0, float(result.iteration_time_s)


def transfer_lanes(result: Any, max_transfers: int = 100_000) -> tuple[pd.DataFrame, dict, str | None]:
    """Transfers of ``result`` relative to the measured window, in ms: columns ``start_ms,
    end_ms, direction, cause, bytes, block, lane`` (lane: which copy engine queue of that
    direction, assigned greedily so overlapping transfers get separate lanes); plus the
    busy share of the window per direction (0..1)."""
    t0, t1 = window(result)
    span = max(t1 - t0, 1e-12)
    tr = result.transfers
    cols = ["start_ms", "end_ms", "direction", "cause", "bytes", "block", "lane"]
    if tr is None or not len(tr):
        return pd.DataFrame({c: [] for c in cols}), {"h2d": 0.0, "d2h": 0.0}, None
    df = pd.DataFrame({
        "start_ms": (tr["start_s"].to_numpy(float) - t0) * 1e3,
        "end_ms": (tr["end_s"].to_numpy(float) - t0) * 1e3,
        "direction": tr["direction"].astype(str).to_numpy(),
        "cause": tr["cause"].astype(str).to_numpy(),
        "bytes": tr["bytes"].to_numpy(np.int64),
        "block": tr["block"].to_numpy(np.int64) if "block" in tr else -1,
    })
    notes = []
    inside = (df["end_ms"] > 0) & (df["start_ms"] < span * 1e3)
    if (~inside).any():
        notes.append(f"{int((~inside).sum()):,} transfers outside the measured window not shown")
        df = df[inside]
    df["start_ms"] = df["start_ms"].clip(lower=0)
    df["end_ms"] = df["end_ms"].clip(upper=span * 1e3)
    df = df.sort_values(["direction", "start_ms"], kind="stable").reset_index(drop=True)
    lanes = np.zeros(len(df), np.int64)
    busy = {}
    for d in ("h2d", "d2h"):
        idx = np.flatnonzero(df["direction"].to_numpy() == d)
        st, en = df["start_ms"].to_numpy()[idx], df["end_ms"].to_numpy()[idx]
        heap: list[tuple[float, int]] = []
        n_lanes = 0
        eps = 1e-9
        for i, (a, z) in enumerate(zip(st, en)):
            if heap and heap[0][0] <= a + eps:
                _, lane = heapq.heappop(heap)
            else:
                lane, n_lanes = n_lanes, n_lanes + 1
            lanes[idx[i]] = lane
            heapq.heappush(heap, (z, lane))
        busy[d] = _union_length(st, en) / (span * 1e3)
    df["lane"] = lanes
    if len(df) > max_transfers:
        df, tol = _merge_close(df, max_transfers, span * 1e3)
        notes.append(f"transfers closer than {tol:.3g} ms merged ({len(df):,} bars shown)")
    return df, busy, "; ".join(notes) or None


def _union_length(st: np.ndarray, en: np.ndarray) -> float:
    if not len(st):
        return 0.0
    o = np.argsort(st, kind="stable")
    st, en = st[o], en[o]
    reach = np.maximum.accumulate(en)
    new = np.ones(len(st), bool)
    new[1:] = st[1:] > reach[:-1]
    g_start = st[new]
    g_end = np.maximum.reduceat(en, np.flatnonzero(new))
    return float((g_end - g_start).sum())


def _merge_close(df: pd.DataFrame, max_rows: int, span_ms: float) -> tuple[pd.DataFrame, float]:
    tol = span_ms * 1e-5
    while True:
        df = df.sort_values(["direction", "lane", "cause", "start_ms"], kind="stable")
        key = df["direction"] + "/" + df["lane"].astype(str) + "/" + df["cause"]
        prev_end = df["end_ms"].shift()
        new = (key != key.shift()) | (df["start_ms"] - prev_end > tol)
        g = new.cumsum()
        merged = df.groupby(g, sort=False).agg(
            start_ms=("start_ms", "min"), end_ms=("end_ms", "max"), direction=("direction", "first"),
            cause=("cause", "first"), bytes=("bytes", "sum"), block=("block", "first"),
            lane=("lane", "first"))
        if len(merged) <= max_rows:
            return merged.reset_index(drop=True), tol
        tol *= 4


STALL_COLUMNS = {"fault": "stall_fault_s", "eviction": "stall_evict_s",
                 "link": "stall_link_s", "host": "stall_host_s"}


def stall_table(result: Any, max_points: int = 5_000) -> tuple[pd.DataFrame, str | None]:
    """Stall time per tick of the measured window in ms: columns ``tick``, ``compute_ms``,
    one per stall kind (``fault``, ``eviction``, ``link``, ``host``). Above ``max_points``
    ticks, consecutive ticks are summed into bins (``tick`` = the bin's first tick)."""
    tl = result.timeline
    df = pd.DataFrame({"tick": tl["tick"].to_numpy(np.int64),
                       "compute_ms": tl["compute_s"].to_numpy(float) * 1e3})
    for name, col in STALL_COLUMNS.items():
        df[name] = tl[col].to_numpy(float) * 1e3 if col in tl else 0.0
    n = len(df)
    if n <= max_points:
        return df, None
    width = -(-n // max_points)
    g = np.arange(n) // width
    agg = {c: "sum" for c in df.columns if c != "tick"}
    agg["tick"] = "first"
    out = df.groupby(g).agg(agg)[list(df.columns)].reset_index(drop=True)
    return out, f"downsampled: {n:,} ticks summed into bins of {width}"


def frontier_table(compare_df: pd.DataFrame) -> pd.DataFrame:
    """Rows of ``uvm_sched.sim.compare`` with a finite slowdown, sorted for drawing, with
    ``saving`` and ``frontier`` from ``uvm_sched.sim.savings_frontier`` (the one definition
    the CLI prints too) and ``savings_pct`` (the saving in % of peak)."""
    from ..sim import savings_frontier

    df = savings_frontier(compare_df)
    df["savings_pct"] = 100.0 * df["saving"]
    df = df[np.isfinite(df["slowdown"].astype(float))]
    return df.sort_values(["policy", "savings_pct"], kind="stable").reset_index(drop=True)
