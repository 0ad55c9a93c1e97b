"""Fault-sampled planning (CUPTI GPU page faults with the warm-up's fault probes, Note
[Fault probes] in uvm_sched/planner/_faults.py) against full access sampling, oblivious
planning and demand paging, in the simulator.

Workloads are generated where persistent state dominates: mixed-precision AdamW training
(bf16 weights, fp32 master copy, Adam moments, a gradient buffer: 16 bytes per parameter
and more), with 1 or 4 gradient-accumulation steps, an EMA copy, or a frozen backbone (half
the layers without gradients or optimizer state). The probe rule has two settings, the
share of the probe candidates probed per warm-up iteration and the cap on the warm-up's
length (the rule stops earlier, at the first iteration that leaves no list open); both are
swept over their plausible range, with the warm-up iterations the rule ran. For each: the
plan's iteration time over demand paging's, the share of full sampling's saving it keeps
((demand - fault) / (demand - full)), and the probes' cost (bytes moved to the host during
the whole warm-up, over the persistent bytes; and in the busiest warm-up iteration: probes
and bytes, over the trace's peak). The probe
candidates are the persistent blocks and the long-lived non-persistent ones (activations
kept for the backward pass, ``planner._faults.LONG_LIFE``).

    python benchmarks/bench_fault_sampling.py            # all shapes, 2 profiles, 50/30%
    python benchmarks/bench_fault_sampling.py --quick    # two shapes, one profile

Writes benchmarks/results/fault_sampling.md and fault_sampling.json.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench_quality import provenance, provenance_md, write_json  # noqa: E402

RESULTS = HERE / "results"
MiB = 1 << 20
SHAPES = {  # name: (layers, accumulation steps, EMA copy, frozen share of layers)
    "adamw": (8, 1, False, 0.0),
    "adamw-accum4": (8, 4, False, 0.0),
    "adamw-ema": (8, 1, True, 0.0),
    "adamw-frozen-half": (8, 1, False, 0.5),
    "adamw-deep-accum2": (16, 2, False, 0.0),
}
SETTINGS = [(2, 1.0), (4, 1.0), (8, 1.0), (16, 1.0), (16, 0.5)]  # (cap: max_iters, share)


def llm_trace(layers: int, accum: int, ema: bool, frozen: float, *, iters: int = 4,
              params: int = 8 * MiB, act: int = 24 * MiB):
    """A mixed-precision AdamW training loop as a trace with markers and accesses; per
    trainable layer: bf16 weight (2 B/param), bf16 gradient buffer (2), fp32 master (4),
    Adam m and v (4 + 4), optional EMA (4); frozen layers hold the bf16 weight only."""
    from uvm_sched.trace import AccessMode as M, TraceBuilder

    tb = TraceBuilder(name=f"llm-{layers}x{accum}{'-ema' if ema else ''}-frozen{frozen}")
    n_frozen = int(round(layers * frozen))
    W = [tb.alloc(2 * params) for _ in range(layers)]
    train = range(n_frozen, layers)
    G = {i: tb.alloc(2 * params) for i in train}
    opt = {i: [tb.alloc(4 * params) for _ in range(4 if ema else 3)] for i in train}
    tb.next_tick(1000.0)
    fwd, bwd = 1.5e6, 3.0e6  # ns per layer
    for _ in range(iters):
        tb.mark()
        for _ in range(accum):
            acts = []
            for i in range(layers):
                a = tb.alloc(act)
                tb.access(W[i], M.READ)
                tb.access(a, M.WRITE)
                if acts:
                    tb.access(acts[-1], M.READ)
                acts.append(a)
                tb.next_tick(fwd)
            for i in reversed(range(layers)):
                tb.access(acts[i], M.READ)
                tb.access(W[i], M.READ)
                if i in G:
                    tb.access(G[i], M.READ_WRITE)
                tb.free(acts[i])
                tb.next_tick(bwd if i in G else bwd / 2)
        for i in train:  # the optimizer step, one layer per kernel
            for b in opt[i]:
                tb.access(b, M.READ_WRITE)
            tb.access(G[i], M.READ_WRITE)  # read, then zeroed
            tb.access(W[i], M.WRITE)
            tb.next_tick(0.4e6)
    return tb.build()


def one(shape: str, hw: str, budget: str) -> dict:
    from uvm_sched import pattern, planner, sim

    t = llm_trace(*SHAPES[shape])
    p = pattern.analyze(t)
    demand = sim.simulate(t, "demand", hw, budget).iteration_time_s
    obl = sim.simulate(t, "uvm-sched", hw, budget, mode="oblivious").iteration_time_s
    full = sim.simulate(t, "uvm-sched", hw, budget, mode="sampled").iteration_time_s
    pers = int(p.blocks.loc[p.blocks["persistent"], "size"].sum())
    n_pers = int(p.blocks["persistent"].sum())
    row = {"shape": shape, "hw": hw, "budget": budget, "demand_s": demand, "oblivious_s": obl,
           "peak_bytes": int(t.peak_bytes),
           "full_s": full, "persistent_bytes": pers, "n_persistent": n_pers, "fault": []}
    for w, share in SETTINGS:
        fs = planner.fault_samples(t, p, max_iters=w, share=share)
        s = sim.simulate(t, "uvm-sched", hw, budget, mode="sampled",
                         plan_opts={"samples": fs}).iteration_time_s
        keep = (demand - s) / (demand - full) if demand > full else float("nan")
        row["fault"].append({"max_iters": w, "share": share, "time_s": s,
                             "iterations": fs.attrs["iterations"],
                             "saving_kept": keep, "complete": fs.attrs["open"] == 0,
                             "open": fs.attrs["open"], "probe_bytes": fs.attrs["probe_bytes"],
                             "probes_per_iter": fs.attrs["probes_per_iter"],
                             "probe_bytes_per_iter": fs.attrs["probe_bytes_per_iter"],
                             "local_blocks": fs.attrs["local_blocks"]})
    return row


def _md(rows: list[dict], prov: dict) -> str:
    head = " | ".join(f"fault cap={w} s={s}" for w, s in SETTINGS)
    out = ["# Fault-sampled planning vs full sampling", "", provenance_md(prov), "",
           "Iteration time over demand paging (lower is better); for fault sampling the share "
           "of full sampling's saving kept in brackets, `*` when every sampled block's touch "
           "list closed. `cap` = the most warm-up iterations probed (the rule stops at the first "
           "iteration that leaves no list open), `s` = share of the probe candidates "
           "(persistent and long-lived non-persistent blocks) probed per iteration.", "",
           f"| shape | hw | budget | oblivious | full sampling | {head} |",
           "|---|---|---|---|---|" + "---|" * len(SETTINGS)]
    for r in rows:
        d = r["demand_s"]
        cells = [f"{f['time_s'] / d:.2f} ({f['saving_kept']:.0%}){'*' if f['complete'] else ''}"
                 for f in r["fault"]]
        out.append(f"| {r['shape']} | {r['hw']} | {r['budget']} | {r['oblivious_s'] / d:.2f} | "
                   f"{r['full_s'] / d:.2f} | " + " | ".join(cells) + " |")
    out += ["", "Probe cost: warm-up iterations the rule ran; bytes moved to the host over the "
            "whole warm-up, over the persistent bytes (as many come back by faults).", "",
            "| shape | persistent | " + head + " |", "|---|---|" + "---|" * len(SETTINGS)]
    seen = set()
    for r in rows:
        if r["shape"] in seen:
            continue
        seen.add(r["shape"])
        out.append(f"| {r['shape']} | {r['persistent_bytes'] / MiB:,.0f} MiB | " + " | ".join(
            f"{f['iterations']} it., {f['probe_bytes'] / r['persistent_bytes']:.2f}x"
            for f in r["fault"]) + " |")
    out += ["", "Per warm-up iteration (the busiest): probes / bytes moved to the host "
            "(x the trace's peak); probe candidates: persistent + long-lived non-persistent "
            "blocks.", "", "| shape | candidates | " + head + " |",
            "|---|---|" + "---|" * len(SETTINGS)]
    seen = set()
    for r in rows:
        if r["shape"] in seen:
            continue
        seen.add(r["shape"])
        f0 = r["fault"][0]
        out.append(f"| {r['shape']} | {r['n_persistent']}+{f0['local_blocks']} | " + " | ".join(
            f"{f['probes_per_iter']} / {f['probe_bytes_per_iter'] / MiB:,.0f} MiB "
            f"({f['probe_bytes_per_iter'] / r['peak_bytes']:.2f}x)" for f in r["fault"]) + " |")
    worse = [(r["shape"], r["hw"], r["budget"], f["max_iters"], f["share"]) for r in rows
             for f in r["fault"] if f["time_s"] > r["demand_s"]]
    out += ["", f"Fault-sampled plans slower than demand paging: {len(worse)}"
            + (f" ({worse})" if worse else ""), ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="two shapes, h200-pcie5, 50%% only")
    a = ap.parse_args(argv)
    shapes = ["adamw", "adamw-accum4"] if a.quick else list(SHAPES)
    hws = ["h200-pcie5"] if a.quick else ["h200-pcie5", "gh200-c2c"]
    budgets = ["50%"] if a.quick else ["50%", "30%"]
    t0 = time.perf_counter()
    rows = [one(s, h, b) for s in shapes for h in hws for b in budgets]
    prov = provenance(sys.argv if argv is None else ["bench_fault_sampling.py", *argv])
    doc = {"provenance": prov, "settings": SETTINGS, "rows": rows,
           "wall_s": time.perf_counter() - t0}
    RESULTS.mkdir(exist_ok=True)
    write_json(RESULTS / "fault_sampling.json", doc)
    md = _md(rows, prov)
    (RESULTS / "fault_sampling.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
