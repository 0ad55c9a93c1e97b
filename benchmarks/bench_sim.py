"""Simulator speed (events/s, seconds per policy) and the G10 cross-check.

    python benchmarks/bench_sim.py [--quick] [--zoo NAME[:BATCH] ...] [--no-g10]

Sections:
1. a synthetic trace sized like ResNet-152 at batch 1280 (~300 GB peak, ~150k 2 MiB VA
   blocks per iteration, thousands of ticks), every policy at 50% of peak;
2. zoo traces (if the recorder is installed), every policy at 50% of peak;
3. the G10 artifact's workloads (if ../shared/workloads/g10 exists): our ``demand``
   slowdown over ``ideal`` at 40 GiB on ``a100-40gb-g10`` beside the artifact's base UVM,
   with the pool model (default) and with cudaMallocManaged/cudaFree per tensor.
Complexity: O(A + E + Q) numpy work under a Python loop of O(T) ticks (A tick-chunk
accesses, E allocator events, Q chunk migrations); see uvm_sched/sim/_engine.py.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from uvm_sched.sim import POLICIES, simulate  # noqa: E402
from uvm_sched.trace import AccessMode, TraceBuilder  # noqa: E402

GiB = 1 << 30
MiB = 1 << 20
G10_ARTIFACT = {  # name: (base UVM s, ideal s), from ../shared/workloads/g10/README.md
    "BERT_Base_256": (19.65, 7.29),
    "VIT_1280": (24.60, 3.72),
    "Inceptionv3_1536": (281.0, 59.7),
    "ResNet152_1280": (468.9, 112.6),
    "SENet154_1024": (730.8, 132.9),
}


def synthetic(layers: int = 1500, act_bytes: int = 200 * MiB, iters: int = 2, seed: int = 0):
    """A CNN-shaped trace: per layer a weight, an activation kept for backward and a
    workspace; backward reads activations in reverse."""
    rng = np.random.default_rng(seed)
    b = TraceBuilder(name="synthetic")
    ws = [b.alloc(int(rng.integers(1, 40)) * MiB) for _ in range(layers)]
    for w in ws:
        b.access(w, AccessMode.WRITE)
    b.next_tick(1e5)
    sizes = (rng.uniform(0.2, 1.8, layers) * act_bytes).astype(np.int64)
    for _ in range(iters):
        b.mark()
        acts = []
        for i in range(layers):
            a = b.alloc(int(sizes[i]))
            tmp = b.alloc(64 * MiB)
            b.access(ws[i])
            if acts:
                b.access(acts[-1])
            b.access(a, AccessMode.WRITE)
            b.access(tmp, AccessMode.READ_WRITE)
            b.free(tmp)
            acts.append(a)
            b.next_tick(float(rng.uniform(2e5, 2e6)))
        for i in reversed(range(layers)):
            g = b.alloc(int(sizes[i]))
            b.access(acts[i])
            b.access(ws[i], AccessMode.READ_WRITE)
            b.access(g, AccessMode.WRITE)
            b.free(acts[i])
            b.free(g)
            b.next_tick(float(rng.uniform(4e5, 4e6)))
    return b.build()


def bench(trace, hw, budget, policies, label):
    ideal = simulate(trace, "ideal", hw, budget)
    print(f"\n{label}: {trace!r}")
    print(f"  {'policy':18s} {'seconds':>8s} {'events/s':>12s} {'slowdown':>9s} "
          f"{'h2d GiB':>9s} {'d2h GiB':>9s} {'faults':>10s}")
    for pol in policies:
        t0 = time.perf_counter()
        try:
            r = simulate(trace, pol, hw, budget)
        except Exception as e:  # report, keep going (e.g. the planner is not installed)
            print(f"  {pol:18s} error: {type(e).__name__}: {e}")
            continue
        dt = time.perf_counter() - t0
        print(f"  {pol:18s} {dt:8.2f} {len(trace) / dt:12,.0f} {r.slowdown(ideal):9.3f} "
              f"{r.bytes_h2d / GiB:9.2f} {r.bytes_d2h / GiB:9.2f} {r.faults:10,}")


def g10(shared: Path):
    from uvm_sched.trace import load

    print("\nG10 cross-check: demand slowdown over ideal, a100-40gb-g10 at 40 GiB")
    print(f"  {'workload':18s} {'ideal s':>8s} {'art. UVM':>9s} {'ours(pool)':>11s} {'gap':>7s} "
          f"{'ours(per-tensor)':>17s} {'gap':>7s} {'bound':>6s} {'sim s':>6s}")
    for name, (uvm, ideal_s) in G10_ARTIFACT.items():
        folder = shared / "workloads" / "g10" / name
        if not folder.is_dir():
            print(f"  {name:18s} absent")
            continue
        t = load(folder)
        t0 = time.perf_counter()
        i = simulate(t, "ideal", "a100-40gb-g10", "40GiB")
        d = simulate(t, "demand", "a100-40gb-g10", "40GiB")
        dt = time.perf_counter() - t0
        d2 = simulate(t, "demand", "a100-40gb-g10", "40GiB", pool=False)
        bd = simulate(t, "bound", "a100-40gb-g10", "40GiB")
        art = uvm / ideal_s
        s1, s2 = d.slowdown(i), d2.slowdown(i)
        print(f"  {name:18s} {i.iteration_time_s:8.2f} {art:8.2f}x {s1:10.2f}x {s1 / art - 1:+7.0%} "
              f"{s2:16.2f}x {s2 / art - 1:+7.0%} {bd.slowdown(i):5.2f}x {dt:6.2f}")


def sweep():
    from uvm_sched.sim import compare
    from uvm_sched.trace import zoo

    t_all = time.perf_counter()
    pols = list(POLICIES)
    print("| model | budget | " + " | ".join(p for p in pols if p != "ideal") + " |")
    print("|---|---|" + "---|" * (len(pols) - 1))
    sim_s = 0.0
    for name in zoo.names():
        try:
            tr = zoo.record(name)
        except Exception as e:
            print(f"| {name} | record failed: {type(e).__name__}: {e} |")
            continue
        t0 = time.perf_counter()
        df = compare(tr, "h200-pcie5", ["100%", "75%", "50%", "30%"], policies=pols)
        sim_s += time.perf_counter() - t0
        for pct, g in df.groupby("budget_pct", sort=False):
            cells = []
            for p in pols:
                if p == "ideal":
                    continue
                row = g[g.policy == p].iloc[0]
                cells.append("budget < working set" if row["error"].startswith("budget")
                             else ("error" if row["error"] else f"{row['slowdown']:.2f}x"))
            print(f"| {name} | {pct:.0f}% | " + " | ".join(cells) + " |")
    print(f"\nsimulation time {sim_s:.1f} s, total with recording {time.perf_counter() - t_all:.1f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller synthetic trace")
    ap.add_argument("--zoo", nargs="*", default=None,
                    help="zoo traces NAME[:BATCH] (default: resnet152:1280 bert_base gpt2_small)")
    ap.add_argument("--no-g10", action="store_true")
    ap.add_argument("--sweep", action="store_true",
                    help="only the zoo sweep: every zoo model (default sizes) x 100/75/50/30%% "
                         "x every policy on h200-pcie5, printed as a Markdown table")
    args = ap.parse_args()
    if args.sweep:
        return sweep()
    pols = [p for p in POLICIES]
    t0 = time.perf_counter()
    syn = synthetic(layers=300 if args.quick else 1500)
    print(f"synthetic trace built in {time.perf_counter() - t0:.1f} s")
    bench(syn, "h200-pcie5", "50%", pols, "synthetic (ResNet-152-b1280-sized)")
    try:
        from uvm_sched.trace import zoo
    except ImportError as e:
        print(f"\nzoo: not available ({e})")
        zoo = None
    if zoo is not None:
        for spec in (args.zoo if args.zoo is not None else ["resnet152:1280", "bert_base", "gpt2_small"]):
            name, _, batch = spec.partition(":")
            t0 = time.perf_counter()
            tr = zoo.record(name, batch=int(batch) if batch else None)
            print(f"\nrecorded {spec} in {time.perf_counter() - t0:.1f} s")
            bench(tr, "h200-pcie5", "50%", pols, f"zoo {spec}")
    shared = Path(os.environ.get("UVM_SCHED_SHARED", ROOT.parent / "shared"))
    if not args.no_g10 and (shared / "workloads" / "g10").is_dir():
        g10(shared)


if __name__ == "__main__":
    main()
