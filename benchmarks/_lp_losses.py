"""Where a simulated plan loses against the LP's optimum (``bench_lp``): per case, what the
plan's stall waits on, how much link time the plan's own bytes need, and how many of its
write-backs carry clean data. Figures from the simulator's timeline and copy rows, the
trace's writes and the planner's own prediction; nothing here feeds the planner.

* stall split: the compute's waits (the timeline's ``stall_s``), and the part of them during
  which the host->device engine was idle -- the compute waited for room (evictions still
  being written back), not for a prefetch on the link;
* link floor: the time the plan's bytes take on the link at the copy rates and the duplex
  cap, ``max(in / h2d, out / d2h, (in + out) / duplex)`` -- a plan whose floor is over the
  target cannot meet it by timing alone;
* write-backs: device->host bytes whose block was not written since it last arrived on the
  device (or, with no arrival in the last iteration, since its allocation or one iteration
  back): clean data, which the LP drops for free and the driver writes back unless the
  block is a read-mostly duplicate.
"""
from __future__ import annotations

import numpy as np


def measure(trace, r, predicted: dict, hw) -> dict:
    """The figures above for one simulated run ``r`` (a ``SimResult`` with its timeline
    and copy rows) of a plan whose ``meta["predicted"]`` is ``predicted``; seconds, bytes."""
    tl, tr = r.timeline, r.transfers
    out = {"stall_s": r.stall_time_s, "late_prefetches": predicted.get("late_prefetches", 0),
           "eviction_wait_s": predicted.get("eviction_wait_s", 0.0),
           "link_floor_s": max(r.bytes_h2d / hw.h2d_prefetch_Bps, r.bytes_d2h / hw.d2h_prefetch_Bps,
                               (r.bytes_h2d + r.bytes_d2h) / hw.duplex_Bps)}
    if tl is None or tr is None or not len(tl):
        return out
    st = tl[tl["stall_s"] > 0]
    s0 = st["start_s"].to_numpy()
    s1 = s0 + st["stall_s"].to_numpy()
    h = tr[tr["direction"] == "h2d"]
    busy = _busy_within(h["start_s"].to_numpy(), h["end_s"].to_numpy(), s0, s1)
    out["stall_h2d_idle_s"] = float((s1 - s0).sum() - busy.sum())
    out.update(_writebacks(trace, r))
    return out


def _busy_within(starts, ends, a, b) -> np.ndarray:
    """Per interval [a_i, b_i): the time the copies [starts, ends) kept the engine busy."""
    if not len(starts) or not len(a):
        return np.zeros(len(a))
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], np.maximum.accumulate(ends[o])
    new = np.concatenate([[True], s[1:] > e[:-1]])
    last = np.concatenate([np.flatnonzero(new)[1:] - 1, [len(s) - 1]])
    S, E = s[new], e[last]  # merged, disjoint
    cum = np.concatenate([[0.0], np.cumsum(E - S)])

    def upto(t):
        i = np.searchsorted(S, t, side="right") - 1
        part = np.where(i >= 0, np.clip(t - S[np.maximum(i, 0)], 0.0,
                                        (E - S)[np.maximum(i, 0)]), 0.0)
        return cum[np.maximum(i, 0)] * (i >= 0) + part

    return upto(b) - upto(a)


def _writebacks(trace, r) -> dict:
    """Clean and dirty device->host bytes of the window (the module's rule)."""
    tl, tr = r.timeline, r.transfers
    w0, w1 = int(r.counters["window_start"]), int(r.counters["window_stop"])
    P = w1 - w0
    ticks, starts = tl["tick"].to_numpy(), tl["start_s"].to_numpy()

    def tick_of(t):
        return ticks[np.clip(np.searchsorted(starts, t, side="right") - 1, 0, len(ticks) - 1)]

    df = trace.to_pandas()
    acc = df[(df["kind"] == "access") & df["mode"].isin(["write", "read_write"])
             & (df["tick"] >= w0 - P) & (df["tick"] < w1)]
    writes = {b: np.sort(g.to_numpy()) for b, g in acc.groupby("block")["tick"]}
    al = df[df["kind"] == "alloc"]
    alloc_tick = dict(zip(al["block"].tolist(), al["tick"].tolist()))
    h = tr[tr["direction"] == "h2d"]
    arrived: dict = {}
    for b, t in zip(h["block"].tolist(), tick_of(h["end_s"].to_numpy()).tolist()):
        arrived.setdefault(b, []).append(t)
    arr = {b: np.sort(np.concatenate([np.array(v), np.array(v) - P])) for b, v in arrived.items()}
    d = tr[(tr["direction"] == "d2h") & (tr["block"] >= 0)]
    clean = dirty = 0
    for b, t, nb in zip(d["block"].tolist(), tick_of(d["start_s"].to_numpy()).tolist(),
                        d["bytes"].tolist()):
        a = arr.get(b)
        k = np.searchsorted(a, t, side="right") - 1 if a is not None else -1
        since = int(a[k]) if k >= 0 else max(int(alloc_tick.get(b, t - P)), t - P)
        w = writes.get(b)
        written = w is not None and np.searchsorted(w, since, side="left") \
            < np.searchsorted(w, t, side="right")
        if written:
            dirty += nb
        else:
            clean += nb
    return {"writeback_clean_bytes": clean, "writeback_dirty_bytes": dirty}


def table(rows, target) -> list[str]:
    """Markdown: the sampled plan's losses per case where it misses the target
    (``target(row) -> seconds``, the most the plan may take), and the misses counted by what
    bounds them."""
    md = ["\n## Where the sampled plan loses against the LP\n\n"
          "The cases where the sampled plan misses the target; ms per iteration unless named. "
          "`stall`: the compute's waits in the simulator; `h2d idle`: the part of them with "
          "the host->device engine idle (waiting for room: evictions still being written "
          "back); `late / ev. wait`: the planner's own prediction (late prefetches, ms "
          "waiting for evictions); `link floor`: the time the plan's bytes need on the link "
          "(copy rates and duplex cap); `target`: the most the plan may take; write-backs "
          "GB clean / dirty (clean: not written since the block last arrived), against the "
          "LP's device->host GB (it drops clean data for free). Rule: `benchmarks/"
          "_lp_losses.py`.\n\n"
          "| case | sampled | stall | h2d idle | late / ev. wait | link floor | target "
          "| write-backs clean / dirty | LP out |\n|---|---|---|---|---|---|---|---|---|\n"]
    link_bound = timing = 0
    for r in rows:
        loss = r.get("sampled_loss")
        if "lp-bound" not in r or not loss or r["sampled"] <= target(r):
            continue
        floor_over = loss["link_floor_s"] > target(r)
        link_bound += floor_over
        timing += not floor_over
        lp_out = r["lp_meta"].get("bytes_out")
        md.append(
            f"| {r['model']} {r['hw']} {r['budget_pct']}% | {1e3 * r['sampled']:.1f} | "
            f"{1e3 * loss['stall_s']:.1f} | {1e3 * loss.get('stall_h2d_idle_s', 0):.1f} | "
            f"{loss['late_prefetches']} / {1e3 * loss['eviction_wait_s']:.1f} | "
            f"{1e3 * loss['link_floor_s']:.1f}{' (over)' if floor_over else ''} | "
            f"{1e3 * target(r):.1f} | {loss.get('writeback_clean_bytes', 0) / 1e9:.2f} / "
            f"{loss.get('writeback_dirty_bytes', 0) / 1e9:.2f} | "
            f"{'—' if lp_out is None else f'{lp_out / 1e9:.2f}'} |\n")
    md.append(f"\nMisses whose own bytes need more link time than the target allows (selection "
              f"and write-backs bound them, not timing): {link_bound}; misses under their link "
              f"floor (lost to when transfers run): {timing}.\n")
    return md
