"""Training loops that vary: iterations found, plans against demand paging, and how much
of the loop the runtime runs armed (issue 22).

Each shape of ``uvm_sched.pattern._loops`` (dynamic padding, a partial last batch, a step
with events missing, eval batches, gradient accumulation, activation checkpointing, a
compiled model, and the fixed-shape loop) with and without step markers:

* **found / true** -- ``analyze`` on the whole loop against the true steps, and what it
  found (``_loops.judge``: the steps, groups of steps, "no period" with its reason, or a
  sub-period, which must never be);
* **plan / demand** -- as the runtime plans: from the first ``WARMUP`` steps (its warm-up
  and the step after it), then simulated on the whole loop (the measured window is its last
  complete iteration, which the plan never saw), at 75% and 50% of the loop's peak on
  h200-pcie5 and gh200-c2c; below 1 the plan is faster;
* **twin** -- the dynamic-padding loop's saving (1 - plan/demand) at 50% on h200-pcie5
  beside its fixed-shape twin's (every step the shape of the measured one);
* **armed** -- the loop replayed through the allocator (host backend) under a
  ``Scheduler(budget="50%", watchdog_iters=0)``: with markers, the share of steps after
  the first plan that ran armed (``stats()["armed_share"]``); without, the share of the
  executor's iterations without a divergence.

    python benchmarks/bench_loops.py                 # every shape, 16 steps (~2 min)
    python benchmarks/bench_loops.py --shapes fixed,dynamic_padding --steps 10
    python benchmarks/bench_loops.py --quick         # 10 steps a loop

Writes benchmarks/results/loops.md and loops.json. Figures are simulated (see
benchmarks/README.md); the runtime column counts decisions, not time.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench_quality import provenance, provenance_md, write_json  # noqa: E402

RESULTS = HERE / "results"
HW = ("h200-pcie5", "gh200-c2c")
BUDGETS = ("75%", "50%")
WARMUP = 4  # steps the plan is made from: the Scheduler's 3 warm-up steps and the next


def warmup_prefix(trace, truth, steps: int = WARMUP):
    """The trace up to the start of step ``steps`` (its first ``steps`` steps, with the
    set-up before them): what the runtime has recorded when it plans."""
    from uvm_sched.trace import EventKind

    ev_ticks = trace.tick[trace.kind <= EventKind.FREE]
    return trace.slice_ticks(0, int(ev_ticks[truth.bounds[steps]]))


def plan_vs_demand(trace, truth, hw: str, budget: str) -> dict:
    """Plan from the warm-up prefix, simulate it and demand paging on the whole loop."""
    import uvm_sched
    from uvm_sched import sim

    p = uvm_sched.plan(warmup_prefix(trace, truth), budget, hw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (a plan from the prefix: PlanMismatchWarning)
        d = sim.simulate(trace, "demand", hw, budget=budget)
        r = sim.simulate(trace, p, hw, budget=budget)
    return {"plan_s": r.iteration_time_s, "demand_s": d.iteration_time_s,
            "ratio": r.iteration_time_s / d.iteration_time_s, "divergences": r.divergences,
            "chosen": p.meta.get("pricing", {}).get("chosen", "plan")}


def armed_share(trace) -> float | None:
    """The runtime on the host backend over the loop: the armed share (module doc)."""
    from uvm_sched import native
    from uvm_sched._runtime_replay import replay_loop

    native._reset("host", force=True)
    st = replay_loop(trace, budget="50%", hw="h200-pcie5", worker="thread", watchdog_iters=0)
    return st["armed_share"] if st["armed_share"] is not None else st["executor_clean_share"]


def row(shape: str, markers: bool, steps: int) -> dict:
    from uvm_sched.pattern import analyze
    from uvm_sched.pattern._loops import judge, loop_trace

    t0 = time.perf_counter()
    tr, truth = loop_trace(shape, markers=markers, steps=steps)
    pat = analyze(tr)
    out = {"shape": shape, "markers": markers, "true": truth.steps,
           "found": len(pat.iterations), "verdict": judge(pat, truth),
           "why": next((s for s in pat.notes if s.startswith("no period")), ""),
           "sims": {f"{hw} {b}": plan_vs_demand(tr, truth, hw, b) for hw in HW for b in BUDGETS},
           "armed": armed_share(tr)}
    out["seconds"] = time.perf_counter() - t0
    return out


def twin(steps: int) -> dict:
    """Dynamic padding's saving beside its fixed-shape twin's, at 50% on h200-pcie5."""
    from uvm_sched.pattern._loops import loop_trace

    dyn, truth = loop_trace("dynamic_padding", steps=steps)
    rows = truth.rows[-1]  # the measured step's
    fixed, ftruth = loop_trace("fixed", steps=steps, rows=rows)
    d = plan_vs_demand(dyn, truth, "h200-pcie5", "50%")
    f = plan_vs_demand(fixed, ftruth, "h200-pcie5", "50%")
    sd, sf = 1 - d["ratio"], 1 - f["ratio"]
    return {"rows": rows, "dynamic_saving": sd, "fixed_saving": sf,
            "within_10pct": abs(sd - sf) <= 0.10 * sf}


def write(rows: list[dict], tw: dict, prov: dict) -> None:
    cols = [f"{hw} {b}" for hw in HW for b in BUDGETS]
    lines = ["# Training loops that vary: iterations, plans, the runtime", "",
             "Plans are made from the first 4 steps (what the runtime has seen when it "
             "plans) and simulated on the whole loop; plan/demand below 1 is faster. armed: "
             "with markers the share of steps after the first plan that ran armed, without "
             "markers the share of the executor's iterations without a divergence.", "",
             "| shape | markers | found/true | found | " + " | ".join(f"plan/demand {c}"
                                                            for c in cols) + " | armed |",
             "|---|---|---:|---|" + "---:|" * len(cols) + "---:|"]
    for r in rows:
        sims = " | ".join(f"{r['sims'][c]['ratio']:.3f}" for c in cols)
        armed = "-" if r["armed"] is None else f"{r['armed']:.0%}"
        found = r["verdict"] + (f" ({r['why'][:90]}...)" if r["why"] else "")
        lines.append(f"| {r['shape']} | {'yes' if r['markers'] else 'no'} | "
                     f"{r['found']}/{r['true']} | {found} | {sims} | {armed} |")
    worst = max(r["sims"][c]["ratio"] for r in rows for c in cols)
    lines += ["", f"Slowest plan against demand paging: {worst:.3f}x (1.000 = no faster).", "",
              f"Dynamic padding beside its fixed-shape twin ({tw['rows']} rows, the measured "
              f"step's), 50% on h200-pcie5: saving {tw['dynamic_saving']:.1%} vs "
              f"{tw['fixed_saving']:.1%} (within 10% of the twin's: "
              f"{'yes' if tw['within_10pct'] else 'no'}).", "", provenance_md(prov)]
    (RESULTS / "loops.md").write_text("\n".join(lines))
    write_json(RESULTS / "loops.json", {"provenance": prov, "rows": rows, "twin": tw})


def main(argv: list[str] | None = None) -> int:
    from uvm_sched.pattern._loops import SHAPES

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--quick", action="store_true", help="10 steps a loop")
    args = ap.parse_args(argv)
    if args.quick:
        args.steps = 10
    prov = provenance(argv)
    rows = []
    for shape in args.shapes.split(","):
        for markers in (True, False):
            rows.append(row(shape, markers, args.steps))
            r = rows[-1]
            print(f"{shape:16s} markers={markers!s:5s} found {r['found']}/{r['true']} "
                  f"{r['verdict']:16s} plan/demand " + " ".join(
                      f"{v['ratio']:.3f}" for v in r["sims"].values())
                  + f" armed {r['armed']} ({r['seconds']:.1f} s)", flush=True)
    tw = twin(args.steps)
    print(f"twin: dynamic saving {tw['dynamic_saving']:.3f}, fixed {tw['fixed_saving']:.3f}")
    write(rows, tw, prov)
    return 0


if __name__ == "__main__":
    sys.exit(main())
