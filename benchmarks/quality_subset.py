"""A zoo subset for before/after comparisons of the planner (simulated, minutes not hours).

Per model x hw x budget (% of peak): demand paging and ideal, and three plans judged on the
recorder trace's accesses -- oblivious from the allocator-only trace (``zoo.allocator_only``,
what the runtime's ring gives), oblivious from the torch-snapshot round trip (what
``uvm-sched compare s.pickle`` plans from), sampled -- each as slowdown over ideal, with the
candidate pricing chose. Run it on two checkouts and compare:

    PYTHONPATH=<before> python benchmarks/quality_subset.py --out before.json
    PYTHONPATH=<after>  python benchmarks/quality_subset.py --out after.json
    python benchmarks/quality_subset.py --compare before.json after.json   # markdown table
"""
from __future__ import annotations

import argparse
import json
import sys

MODELS = ("gpt2_small", "resnet50", "bert_base", "unet", "vit_b16", "llama_7b")
HW = ("h200-pcie5", "gh200-c2c")
BUDGETS = (75, 50, 30)
PLANS = ("oblivious, allocator-only", "oblivious, from a snapshot", "sampled")


def measure(models=MODELS, hws=HW, budgets=BUDGETS) -> list[dict]:
    from uvm_sched import planner, sim
    from uvm_sched.trace import zoo
    from uvm_sched.trace._export import trace_to_snapshot
    from uvm_sched.trace._snapshot import trace_from_snapshot

    rows = []
    for m in models:
        tr = zoo.record(m, iters=3)
        srcs = {PLANS[0]: (zoo.allocator_only(tr), "oblivious"),
                PLANS[1]: (trace_from_snapshot(trace_to_snapshot(tr)), "oblivious"),
                PLANS[2]: (tr, "sampled")}
        for hw in hws:
            cache: dict = {}
            ideal = sim.simulate(tr, "ideal", hw, None, _cache=cache).iteration_time_s
            for pct in budgets:
                b = int(pct / 100 * tr.peak_bytes)
                try:
                    dem = sim.simulate(tr, "demand", hw, b, _cache=cache).iteration_time_s
                except sim.BudgetError:
                    continue
                row = {"model": m, "hw": hw, "budget_pct": pct, "demand_x": dem / ideal}
                for label, (src, mode) in srcs.items():
                    try:
                        p = planner.plan(src, b, hw, mode=mode)
                    except planner.PlanError:
                        continue
                    t = sim.simulate(tr, p, hw, b, _cache=cache).iteration_time_s
                    row[label] = {"x": t / ideal, "chosen": p.meta.get("pricing", {}).get("chosen")}
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def compare(before: list[dict], after: list[dict]) -> str:
    key = lambda r: (r["model"], r["hw"], r["budget_pct"])  # noqa: E731
    old = {key(r): r for r in before}
    out = ["| model | hw | budget | demand | plan | before | after | after / before | chosen (before -> after) |",
           "|---|---|---:|---:|---|---:|---:|---:|---|"]
    n = moved = 0
    for r in after:
        o = old.get(key(r))
        if o is None:
            continue
        for label in PLANS:
            if label not in r or label not in o:
                continue
            n += 1
            x0, x1 = o[label]["x"], r[label]["x"]
            moved += abs(x1 / x0 - 1) > 0.005
            out.append(f"| {r['model']} | {r['hw']} | {r['budget_pct']}% | {r['demand_x']:.2f}x | "
                       f"{label} | {x0:.2f}x | {x1:.2f}x | {x1 / x0:.3f} | "
                       f"{o[label]['chosen']} -> {r[label]['chosen']} |")
    return (f"{n} plan rows, {moved} moved by more than 0.5% (slowdown over ideal; demand "
            "paging's beside it).\n\n" + "\n".join(out) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    a = ap.parse_args(argv)
    if a.compare:
        b, c = (json.load(open(p)) for p in a.compare)
        sys.stdout.write(compare(b, c))
        return 0
    rows = measure(tuple(a.models.split(",")))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
