"""Planner benchmark: planning time, and plan quality in the simulator against the baselines.

    python benchmarks/bench_planner.py [--quick] [--models a,b] [--hw h200-pcie5,gh200-c2c]
                                       [--cache DIR] [--no-g10] [--sampled]

1. Planning time for one iteration of ~100,000 allocator events (synthetic training loop),
   pattern analysis and planning timed separately (target: planning <= 2 s).
2. Quality on zoo traces (recorded with ``uvm_sched.trace.zoo.record`` at realistic batch
   sizes, cached in ``--cache``): iteration time over ideal for demand, prefetch-on-alloc,
   swap-activations, the lower bound and the planner at 75/50/30% of peak, per profile.
   ``plan`` is the simulator's default (pooled allocator); ``plan/nopool`` runs the same
   plan with ``pool=False`` (frees release memory at once), which is what executing the
   plan's discards at FREE events gives -- shown separately because neither the simulator
   nor the executor issue a discard for a block its own FREE released yet.
   Target checks per row: never slower than demand; (T_plan - T_ideal) <= 1.25 (T_bound -
   T_ideal) + 2% T_ideal.
3. Headline: per model on gh200-c2c the largest memory saving (budgets 90..20%) at <= 5%
   slowdown, and on h200-pcie5 at <= 10%, for the planner and the two baselines.
4. G10 workloads (``../shared/workloads/g10``) on ``a100-40gb-g10`` at 40 GiB: ratio to
   ideal next to the G10 artifact's G10-Host figure.

Writes ``benchmarks/results/bench_planner.md`` and ``.json``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_quality import near_bound  # noqa: E402

from uvm_sched.pattern import analyze  # noqa: E402
from uvm_sched.planner import plan  # noqa: E402
from uvm_sched.sim import BudgetError, simulate  # noqa: E402
from uvm_sched.trace import TraceBuilder, AccessMode  # noqa: E402

# zoo configurations: realistic batch sizes (recording on meta tensors costs the same)
ZOO = {
    "resnet50_b64": ("resnet50", dict(batch=64, image=224)),
    "resnet152_b32": ("resnet152", dict(batch=32, image=224)),
    "inception_v3_b32": ("inception_v3", dict(batch=32, image=299)),
    "senet154_b16": ("senet154", dict(batch=16, image=224)),
    "unet_b8": ("unet", dict(batch=8, image=256)),
    "vit_b16_b64": ("vit_b16", dict(batch=64, image=224)),
    "bert_base_b32": ("bert_base", dict(batch=32, seq=128)),
    "gpt2_small_b8": ("gpt2_small", dict(batch=8, seq=512)),
    "gpt2_medium_b4": ("gpt2_medium", dict(batch=4, seq=512)),
    "gpt_1b5_b1": ("gpt_1b5", dict(batch=1, seq=512)),
}
QUICK = ["resnet50_b64", "bert_base_b32", "unet_b8", "gpt2_small_b8", "vit_b16_b64"]
G10_HOST = {"BERT_Base_256": 7.99 / 7.29, "VIT_1280": 6.23 / 3.72,
            "Inceptionv3_1536": 65.4 / 59.7, "ResNet152_1280": 115.7 / 112.6,
            "SENet154_1024": 146.1 / 132.9}  # the artifact README's table, G10-Host / ideal


def synthetic_iteration(n_events: int, iters: int = 2):
    """A training loop whose iteration has about ``n_events`` allocator events."""
    layers = max(1, n_events // 8)
    tb = TraceBuilder(name=f"synthetic-{n_events}")
    W = [tb.alloc(1 << 20) for _ in range(layers)]
    tb.next_tick(1000.0)
    for _ in range(iters):
        tb.mark()
        acts = []
        for i in range(layers):
            a = tb.alloc(4 << 20)
            t = tb.alloc(1 << 20)
            tb.access(W[i], AccessMode.READ)
            tb.access(a, AccessMode.WRITE)
            tb.free(t)
            tb.next_tick(20_000.0)
            acts.append(a)
        for i in reversed(range(layers)):
            g = tb.alloc(4 << 20)
            gw = tb.alloc(1 << 20)
            tb.access(acts[i], AccessMode.READ)
            tb.access(g, AccessMode.WRITE)
            tb.free(acts[i])
            tb.free(g)
            tb.free(gw)
            tb.next_tick(40_000.0)
    return tb.build(validate=False)


def bench_planning_time(n_events: int = 100_000) -> dict:
    tr = synthetic_iteration(n_events)
    t0 = time.perf_counter()
    pat = analyze(tr)
    t_pat = time.perf_counter() - t0
    out = {"events_per_iteration": int(pat.period_events), "analyze_s": t_pat}
    for b in ("50%", "30%"):
        t0 = time.perf_counter()
        p = plan(tr, b, "h200-pcie5", pattern=pat)
        out[f"plan_{b}_s"] = time.perf_counter() - t0
        out[f"plan_{b}_actions"] = len(p)
    # sampled mode: one sample per touch (every access of the synthetic trace), drawn inside
    t0 = time.perf_counter()
    p = plan(tr, "50%", "h200-pcie5", pattern=pat, mode="sampled")
    out["plan_50%_sampled_s"] = time.perf_counter() - t0
    out["plan_50%_sampled_actions"] = len(p)
    return out


def zoo_trace(key: str, cache: Path):
    from uvm_sched.trace import load
    from uvm_sched.trace.zoo import record

    f = cache / f"{key}.parquet"
    if f.exists():
        return load(f)
    name, kw = ZOO[key]
    tr = record(name, iters=3, **kw)
    cache.mkdir(parents=True, exist_ok=True)
    tr.save(f)
    return tr


def _ratio(tr, pol, hw, b, cache, ideal, **kw):
    try:
        return simulate(tr, pol, hw, b, _cache=cache, **kw).iteration_time_s / ideal
    except BudgetError:
        return float("nan")


def quality(tr, hw: str, budgets, modes=("oblivious",)) -> list[dict]:
    cache: dict = {}
    ideal = simulate(tr, "ideal", hw, _cache=cache).iteration_time_s
    pat = analyze(tr)
    rows = []
    for b in budgets:
        row = {"budget": b, "ideal_s": ideal}
        for pol in ("demand", "prefetch-on-alloc", "swap-activations", "bound"):
            row[pol] = _ratio(tr, pol, hw, b, cache, ideal)
        if math.isnan(row["bound"]):
            row["error"] = "budget below a tick's working set"
            rows.append(row)
            continue
        for mode in modes:
            t0 = time.perf_counter()
            try:
                p = plan(tr, b, hw, mode=mode, pattern=pat)
            except ValueError as e:
                row[f"plan_{mode}_error"] = str(e)
                continue
            row[f"plan_time_{mode}_s"] = time.perf_counter() - t0
            tag = "plan" if mode == "oblivious" else f"plan_{mode}"
            row[tag] = simulate(tr, p, hw, b, _cache=cache).iteration_time_s / ideal
            row[f"{tag}/nopool"] = simulate(tr, p, hw, b, _cache=cache, pool=False).iteration_time_s / ideal
        rows.append(row)
    return rows


def _meets(r: dict, key: str) -> dict:
    t, d, bd = r.get(key, float("nan")), r["demand"], r["bound"]
    return {"not_slower_than_demand": bool(t <= d * 1.0001),
            "near_bound": bool(near_bound(t, bd))}


def headline(tr, hw: str, max_slow: float) -> dict:
    """Largest saving (1 - budget/peak, budgets 90..20% of peak in steps of 10) at <=
    ``max_slow`` slowdown, per policy (``plan/nopool``: the plan with its discards in
    effect, see the module doc)."""
    cache: dict = {}
    ideal = simulate(tr, "ideal", hw, _cache=cache).iteration_time_s
    pat = analyze(tr)
    out = {k: 0.0 for k in ("plan", "plan/nopool", "prefetch-on-alloc", "swap-activations")}
    for pct in range(90, 15, -10):
        b = f"{pct}%"
        try:
            p = plan(tr, b, hw, pattern=pat)
            r = {"plan": simulate(tr, p, hw, b, _cache=cache),
                 "plan/nopool": simulate(tr, p, hw, b, _cache=cache, pool=False)}
            for pol in ("prefetch-on-alloc", "swap-activations"):
                r[pol] = simulate(tr, pol, hw, b, _cache=cache)
        except (BudgetError, ValueError):
            break
        for k, v in r.items():
            if v.iteration_time_s / ideal <= 1 + max_slow:
                out[k] = max(out[k], 1 - pct / 100)
    return out


def g10(shared: Path) -> list[dict]:
    from uvm_sched.trace import load

    rows = []
    root = shared / "workloads" / "g10"
    for name, ref in G10_HOST.items():
        d = root / name
        if not d.is_dir():
            continue
        tr = load(d)
        cache: dict = {}
        hw = "a100-40gb-g10"
        ideal = simulate(tr, "ideal", hw, _cache=cache).iteration_time_s
        row = {"workload": name, "g10_host": ref}
        for pol in ("demand", "bound"):
            row[pol] = _ratio(tr, pol, hw, "40GiB", cache, ideal)
        t0 = time.perf_counter()
        p = plan(tr, "40GiB", hw)
        row["plan_time_s"] = time.perf_counter() - t0
        row["plan"] = simulate(tr, p, hw, "40GiB", _cache=cache).iteration_time_s / ideal
        row["plan/nopool"] = simulate(tr, p, hw, "40GiB", _cache=cache, pool=False).iteration_time_s / ideal
        rows.append(row)
        print(f"  g10 {name}: " + " ".join(f"{k}={v:.3f}" for k, v in row.items() if isinstance(v, float)), flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="five models, no headline sweep")
    ap.add_argument("--models", default=None)
    ap.add_argument("--hw", default="h200-pcie5,gh200-c2c")
    ap.add_argument("--cache", default=os.environ.get("UVM_SCHED_ZOO_CACHE", "/tmp/uvm_sched_zoo_cache"))
    ap.add_argument("--no-g10", action="store_true")
    ap.add_argument("--sampled", action="store_true", help="also plan in sampled mode")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    a = ap.parse_args(argv)
    res: dict = {"command": "python benchmarks/bench_planner.py " + " ".join(argv or sys.argv[1:])}

    print("planning time (synthetic iteration of ~100,000 allocator events):", flush=True)
    pt = bench_planning_time()
    res["planning_time"] = pt
    print("  " + ", ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in pt.items()))

    models = a.models.split(",") if a.models else (QUICK if a.quick else list(ZOO))
    hws = a.hw.split(",")
    modes = ("oblivious", "sampled") if a.sampled else ("oblivious",)
    res["quality"] = []
    res["headline"] = []
    for m in models:
        tr = zoo_trace(m, Path(a.cache))
        for hw in hws:
            budgets = ("75%", "65%", "50%") if m.startswith("gpt_1b5") else ("75%", "50%", "30%")
            for r in quality(tr, hw, budgets, modes):
                r.update(model=m, hw=hw)
                if "plan" in r:
                    r["checks"] = _meets(r, "plan")
                    r["checks_nopool"] = _meets(r, "plan/nopool")
                res["quality"].append(r)
                print(f"  {m} {hw} {r['budget']}: " + " ".join(
                    f"{k}={v:.3f}" for k, v in r.items()
                    if isinstance(v, float) and k not in ("ideal_s",) and not k.startswith("plan_time")),
                    flush=True)
        if not a.quick:
            for hw, slow in (("gh200-c2c", 0.05), ("h200-pcie5", 0.10)):
                h = headline(tr, hw, slow)
                res["headline"].append({"model": m, "hw": hw, "max_slowdown": slow, **h})
                print(f"  headline {m} {hw} <= {slow:.0%}: " + " ".join(f"{k}={v:.0%}" for k, v in h.items()), flush=True)

    if not a.no_g10:
        shared = Path(os.environ.get("UVM_SCHED_SHARED", ROOT.parent / "shared"))
        if (shared / "workloads" / "g10").is_dir():
            print("G10 workloads on a100-40gb-g10 at 40 GiB:", flush=True)
            res["g10"] = g10(shared)
        else:
            print(f"G10 workloads: {shared / 'workloads' / 'g10'} absent, skipped")

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_planner.json").write_text(json.dumps(res, indent=1, default=float))
    (out / "bench_planner.md").write_text(_markdown(res))
    print(f"wrote {out / 'bench_planner.md'} and .json")
    return 0


def _markdown(res: dict) -> str:
    L = ["# Planner benchmark", "", f"Command: `{res['command']}`", "",
         "## Planning time", "", "| figure | value |", "|---|---|"]
    L += [f"| {k} | {v:.3f} |" if isinstance(v, float) else f"| {k} | {v} |"
          for k, v in res["planning_time"].items()]
    L += ["", "## Quality (iteration time / ideal)", "",
          "`plan/nopool`: the same plan with `pool=False` (every free releases its memory at "
          "once, as one cudaFree per tensor would); the pooled run executes the plan's "
          "discards at FREE events, so the two agree wherever freed blocks are over 1 MiB.", "",
          "| model | hw | budget | demand | prefetch-on-alloc | swap-activations | bound | plan | plan/nopool | sampled/nopool | <= demand (nopool) | near bound (nopool) |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["quality"]:
        f = lambda k: f"{r[k]:.3f}" if isinstance(r.get(k), float) and not math.isnan(r[k]) else "-"  # noqa: E731
        c, cn = r.get("checks", {}), r.get("checks_nopool", {})
        yn = lambda d, k: ("yes" if d[k] else "no") if k in d else "-"  # noqa: E731
        L.append(f"| {r['model']} | {r['hw']} | {r['budget']} | {f('demand')} | {f('prefetch-on-alloc')} | "
                 f"{f('swap-activations')} | {f('bound')} | {f('plan')} | {f('plan/nopool')} | "
                 f"{f('plan_sampled/nopool')} | {yn(c, 'not_slower_than_demand')} ({yn(cn, 'not_slower_than_demand')}) | "
                 f"{yn(c, 'near_bound')} ({yn(cn, 'near_bound')}) |")
    if res.get("headline"):
        L += ["", "## Headline: largest memory saving within the slowdown limit", "",
              "| model | hw | max slowdown | plan | plan/nopool | prefetch-on-alloc | swap-activations |",
              "|---|---|---|---|---|---|---|"]
        for h in res["headline"]:
            L.append(f"| {h['model']} | {h['hw']} | {h['max_slowdown']:.0%} | {h['plan']:.0%} | "
                     f"{h['plan/nopool']:.0%} | {h['prefetch-on-alloc']:.0%} | {h['swap-activations']:.0%} |")
    if res.get("g10"):
        L += ["", "## G10 workloads (a100-40gb-g10, 40 GiB)", "",
              "| workload | G10-Host | demand | bound | plan | plan/nopool |", "|---|---|---|---|---|---|"]
        for r in res["g10"]:
            L.append(f"| {r['workload']} | {r['g10_host']:.2f} | {r['demand']:.2f} | {r['bound']:.2f} | "
                     f"{r['plan']:.2f} | {r['plan/nopool']:.2f} |")
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
