"""Static figures for the README, drawn from a freshly recorded zoo trace (no GPU needed).

    python benchmarks/make_figures.py                      # resnet50 at its training size
    python benchmarks/make_figures.py --model gpt2_small --batch 8 --seq 512 --budget 70%

The model is recorded at the zoo's default (training) sizes unless told otherwise, the
sizes `uvm-sched record`, the demo and the benchmark tables use.

Writes to docs/figures/ (or --out):
  memory_timeline.png  bytes in use per tick by block class, the budget, and what the
                       simulated uvm-sched run kept resident on the device;
  lifetimes.png        block lifetimes (idle gaps faint) with the plan's evict/prefetch marks;
  frontier.png         memory saved vs slowdown of every policy across budgets.
Prints what it recorded, planned and simulated. All figures are simulated, not GPU runs.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet50", help="zoo model name (default resnet50)")
    ap.add_argument("--batch", type=int, default=None, help="default: the model's training batch")
    ap.add_argument("--seq", type=int, default=None, help="tokens per sample (text models)")
    ap.add_argument("--image", type=int, default=None, help="image side in px (vision models)")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--hw", default="h200-pcie5")
    ap.add_argument("--budget", default="75%", help="budget of the timeline and lifetime figures")
    ap.add_argument("--budgets", default="90%,80%,75%,70%,60%,50%",
                    help="budgets of the frontier (comma-separated)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "figures")
    ap.add_argument("--dpi", type=int, default=110)
    a = ap.parse_args(argv)

    import uvm_sched
    from uvm_sched import sim, viz
    from uvm_sched._budget import resolve_budget
    from uvm_sched.pattern import analyze
    from uvm_sched.trace import zoo

    a.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    trace = zoo.record(a.model, batch=a.batch, seq=a.seq, image=a.image, iters=a.iters, hw=a.hw)
    size = (f"{trace.meta['seq']} tokens" if trace.meta.get("seq")
            else f"{trace.meta.get('image')} px")
    print(f"recorded {trace!r} in {time.perf_counter() - t0:.1f} s")
    pattern = analyze(trace)
    budget = resolve_budget(a.budget, trace.peak_bytes)
    plan = uvm_sched.plan(trace, budget, a.hw)
    print(f"planned {plan!r}")
    ours = sim.simulate(trace, plan, a.hw, budget)
    ideal = sim.simulate(trace, "ideal", a.hw, budget)
    print(f"simulated uvm-sched at {budget:,} B: iteration {ours.iteration_time_s * 1e3:.3f} ms, "
          f"{ours.slowdown(ideal):.3f}x ideal ({ideal.iteration_time_s * 1e3:.3f} ms), "
          f"peak resident {ours.peak_resident_bytes:,} B")

    written = []
    fig = viz.memory_timeline(trace, result=ours, budget=budget, pattern=pattern, backend="matplotlib")
    written.append(_save(fig, a.out / "memory_timeline.png", a.dpi))
    fig = viz.lifetimes(trace, plan=plan, pattern=pattern, backend="matplotlib")
    written.append(_save(fig, a.out / "lifetimes.png", a.dpi))

    budgets = [b.strip() for b in a.budgets.split(",") if b.strip()]
    t0 = time.perf_counter()
    cmp = sim.compare(trace, a.hw, budgets)
    print(f"compared {cmp['policy'].nunique()} policies x {len(budgets)} budgets in "
          f"{time.perf_counter() - t0:.1f} s")
    shown = cmp[cmp["slowdown"].map(lambda v: isinstance(v, float) and math.isfinite(v))]
    print(shown.pivot(index="budget_pct", columns="policy", values="slowdown")
          .round(3).sort_index(ascending=False).to_string())
    skipped = cmp[cmp["error"].astype(bool)] if "error" in cmp else cmp.iloc[:0]
    for _, r in skipped.drop_duplicates("budget_pct").iterrows():
        print(f"budget {r['budget_pct']:.0f}% left out: {r['error']}")
    cmp = cmp.assign(trace=f"{a.model} batch {trace.meta['batch']}, {size}, {a.hw}")
    fig = viz.frontier(cmp, backend="matplotlib")
    written.append(_save(fig, a.out / "frontier.png", a.dpi))
    for p in written:
        print(f"wrote {p.relative_to(ROOT) if p.is_relative_to(ROOT) else p} ({p.stat().st_size:,} bytes)")
    return 0


def _save(fig, path: Path, dpi: int) -> Path:
    fig.savefig(path, dpi=dpi)
    return path


if __name__ == "__main__":
    raise SystemExit(main())
