"""Trace file I/O speed: save and load of a 1,000,000-event trace (Parquet, the target:
a few seconds), plus the snapshot and Perfetto exporters and the snapshot importer.

    python benchmarks/bench_trace_io.py [--events N] [--repeat R] [--all]

Prints seconds per operation (best of R) and events per second; writes
benchmarks/results/trace_io.{md,json}. The trace is synthetic but shaped like training:
a repeating period of 1,000 allocator events (500 allocations of varied sizes, freed in
shuffled order) with per-tick device times.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from uvm_sched.trace import EventKind, Trace, export_perfetto, export_torch_snapshot, load  # noqa: E402


def synthetic_trace(n_events: int, period: int = 1000, seed: int = 0) -> Trace:
    """``n_events`` allocator events: each period allocates period/2 blocks then frees
    them in a shuffled order; one event per tick, 1-10 us of device time per tick."""
    rng = np.random.default_rng(seed)
    half = period // 2
    sizes = rng.integers(1, 8192, half).astype(np.int64) * 512
    free_order = rng.permutation(half)
    n_iter = -(-n_events // period)
    kind = np.tile(np.r_[np.full(half, EventKind.ALLOC), np.full(half, EventKind.FREE)], n_iter)
    local = np.tile(np.r_[np.arange(half), free_order], n_iter)
    it = np.repeat(np.arange(n_iter), period)
    block = local + it * half
    size = sizes[local]
    kind, block, size = kind[:n_events], block[:n_events], size[:n_events]
    # (a partial last period is still valid: its frees follow all of its allocations)
    tick = np.arange(n_events)
    tick_ns = rng.uniform(1e3, 1e4, n_events)
    t_ns = np.concatenate([[0], np.cumsum(np.rint(tick_ns[:-1]).astype(np.int64))])
    marks = np.flatnonzero(local == 0)
    cols = {"tick": tick, "t_ns": t_ns, "kind": kind.astype(np.uint8), "block": block, "size": size}
    # MARK rows go first in their tick
    pos = marks + np.arange(len(marks))
    out = {}
    for k, v in cols.items():
        fill = {"kind": EventKind.MARK, "block": -1, "size": 0}.get(k)
        ins = v[marks] if fill is None else np.full(len(marks), fill, v.dtype)
        out[k] = np.insert(v, marks, ins)
    assert (out["kind"][pos] == EventKind.MARK).all()
    return Trace(out, tick_ns=tick_ns, meta={"source": "synthetic", "name": f"bench_{n_events}"})


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--all", action="store_true",
                    help="also time the snapshot exporter/importer and the Perfetto exporter")
    args = ap.parse_args()

    t0 = time.perf_counter()
    trace = synthetic_trace(args.events)
    build_s = time.perf_counter() - t0
    n = len(trace)
    print(f"trace: {n:,} rows ({args.events:,} allocator events + marks), built+validated "
          f"in {build_s:.2f} s, peak {trace.peak_bytes:,} bytes")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        pq = Path(d) / "t.parquet"
        rows.append(("parquet save", best_of(lambda: trace.save(pq), args.repeat), pq))
        loaded = {}
        rows.append(("parquet load", best_of(lambda: loaded.update(t=load(pq)), args.repeat), pq))
        assert loaded["t"] == trace, "Parquet round trip changed the trace"
        if args.all:
            sp = Path(d) / "t.pickle"
            rows.append(("snapshot export", best_of(lambda: export_torch_snapshot(trace, sp), 1), sp))
            rows.append(("snapshot import", best_of(lambda: load(sp), 1), sp))
            pp = Path(d) / "t.json.gz"
            rows.append(("perfetto export (.gz)", best_of(lambda: export_perfetto(trace, pp), 1), pp))
        results = []
        print(f"{'operation':<24}{'seconds':>10}{'rows/s':>14}{'file':>14}")
        for name, sec, path in rows:
            size = path.stat().st_size
            print(f"{name:<24}{sec:>10.3f}{n / sec:>14,.0f}{size / 2**20:>11.1f} MiB")
            results.append({"operation": name, "seconds": sec, "rows": n, "rows_per_s": n / sec,
                            "file_bytes": size})
    out = REPO / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    info = {"machine": platform.machine(), "python": platform.python_version(),
            "events": args.events, "rows": n, "repeat": args.repeat, "results": results}
    (out / "trace_io.json").write_text(json.dumps(info, indent=2))
    md = ["# Trace I/O", "", f"{n:,} rows; best of {args.repeat} for Parquet, one run otherwise.",
          "", "| operation | seconds | rows/s | file MiB |", "|---|---:|---:|---:|"]
    md += [f"| {r['operation']} | {r['seconds']:.3f} | {r['rows_per_s']:,.0f} | "
           f"{r['file_bytes'] / 2**20:.1f} |" for r in results]
    (out / "trace_io.md").write_text("\n".join(md) + "\n")
    print(f"wrote {out / 'trace_io.md'}")


if __name__ == "__main__":
    main()
