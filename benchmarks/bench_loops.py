"""Training loops that vary: iterations found, plans against demand paging, and how much
of the loop the runtime runs armed (issue 22).

Each shape of ``uvm_sched.pattern._loops`` (dynamic padding, a partial last batch, a step
with events missing, eval batches, gradient accumulation, activation checkpointing, a
compiled model, and the fixed-shape loop) with and without step markers:

* **found / true** -- ``analyze`` on the whole loop against the true steps (its iterations
  and the stretches of another kind it found inserted into them: ``_loops.steps_found``),
  and what it found (``_loops.judge``: the steps, groups of steps, "no period" with its reason, or a
  sub-period, which must never be);
* **plan / demand** -- as the runtime plans: from the first ``WARMUP`` steps (its warm-up
  and the step after it), then simulated on the whole loop (the measured window is its last
  complete iteration, which the plan never saw), at 75% and 50% of the loop's peak on
  h200-pcie5 and gh200-c2c; below 1 the plan is faster;
* **twin** -- the dynamic-padding loop's saving (1 - plan/demand) at 50% on h200-pcie5
  beside its fixed-shape twin's (every step the shape of the measured one), over 4 draws
  of the sequence lengths and a deeper model;
* **range** -- the shapes' own parameters (sequence-length draws, micro-steps, steps
  between eval batches, depth) across a plausible range (not with ``--quick``);
* **armed** -- the loop replayed through the allocator (host backend) under a
  ``Scheduler(budget="50%", watchdog_iters=0)``: with markers, the share of steps after
  the first plan that ran armed (``stats()["armed_share"]``); without, the executor's
  iterations that ran without a divergence (or went on in phase after events inserted
  into them) and the inserted stretches run whole by a plan of their own (an eval batch
  met again: ``_runtime_insertions``) over those iterations and all the inserted
  stretches, ``_runtime_replay``'s ``executor_clean_share``.

    python benchmarks/bench_loops.py                 # every shape, 16 steps (~3 min)
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
    from uvm_sched.pattern._loops import judge, loop_trace, steps_found

    t0 = time.perf_counter()
    tr, truth = loop_trace(shape, markers=markers, steps=steps)
    pat = analyze(tr)
    out = {"shape": shape, "markers": markers, "true": truth.steps,
           "found": steps_found(pat), "verdict": judge(pat, truth),
           "why": next((s for s in pat.notes if s.startswith("no period")), ""),
           "sims": {f"{hw} {b}": plan_vs_demand(tr, truth, hw, b) for hw in HW for b in BUDGETS},
           "armed": armed_share(tr)}
    out["seconds"] = time.perf_counter() - t0
    return out


def twin(steps: int, seed: int = 0, **kw) -> dict:
    """Dynamic padding's saving beside its fixed-shape twin's, at 50% on h200-pcie5."""
    from uvm_sched.pattern._loops import loop_trace

    dyn, truth = loop_trace("dynamic_padding", steps=steps, seed=seed, **kw)
    rows = truth.rows[-1]  # the measured step's
    fixed, ftruth = loop_trace("fixed", steps=steps, rows=rows, **kw)
    d = plan_vs_demand(dyn, truth, "h200-pcie5", "50%")
    f = plan_vs_demand(fixed, ftruth, "h200-pcie5", "50%")
    sd, sf = 1 - d["ratio"], 1 - f["ratio"]
    return {"seed": seed, **kw, "rows": rows, "dynamic_saving": sd, "fixed_saving": sf,
            "within_10pct": abs(sd - sf) <= 0.10 * sf}


# The shapes' own parameters across a plausible range (none was tuned on one value): the
# seed of the sequence lengths, micro-steps, steps between eval batches, depth.
RANGE = [("dynamic_padding", {"seed": s}) for s in (1, 2, 3)] + \
    [("dynamic_padding", {"layers": 12})] + \
    [("grad_accum", {"k": k}) for k in (2, 4, 8)] + \
    [("eval_every", {"k": k}) for k in (2, 3, 5, 10)] + \
    [("fixed", {"layers": n}) for n in (3, 12)] + [("checkpointing", {"layers": 12})]


def range_row(shape: str, kw: dict, steps: int) -> dict:
    """One shape at other parameters: found (with and without markers), plan/demand at 50%
    on h200-pcie5 (plan from the warm-up), the runtime's armed share (with markers and
    without)."""
    from uvm_sched.pattern import analyze
    from uvm_sched.pattern._loops import judge, loop_trace, steps_found

    tr, truth = loop_trace(shape, steps=steps, **kw)
    bare, btruth = loop_trace(shape, markers=False, steps=steps, **kw)
    pb = analyze(bare)
    return {"shape": shape, "params": kw, "true": truth.steps,
            "found": len(analyze(tr).iterations), "verdict": judge(analyze(tr), truth),
            "found_bare": steps_found(pb), "verdict_bare": judge(pb, btruth),
            "ratio": plan_vs_demand(tr, truth, "h200-pcie5", "50%")["ratio"],
            "armed": armed_share(tr), "armed_bare": armed_share(bare)}


def write(rows: list[dict], twins: list[dict], ranged: list[dict], prov: dict) -> None:
    cols = [f"{hw} {b}" for hw in HW for b in BUDGETS]
    lines = ["# Training loops that vary: iterations, plans, the runtime", "",
             "Plans are made from the first 4 steps (what the runtime has seen when it "
             "plans) and simulated on the whole loop; plan/demand below 1 is faster. armed: "
             "with markers the share of steps after the first plan that ran armed, without "
             "markers the executor's iterations run without a divergence (or gone on in "
             "phase after events inserted into them: an eval batch) and the inserted "
             "stretches run by a plan of their own (an eval batch met again) over those "
             "iterations and all the inserted stretches.", "",
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
              "## Dynamic padding beside its fixed-shape twin", "",
              "Saving (1 - plan/demand) at 50% on h200-pcie5; the twin runs every step at the "
              "rows of the measured (last) step.", "",
              "| sequence lengths | rows measured | dynamic padding | fixed twin | within 10% |",
              "|---|---:|---:|---:|---|"]
    for t in twins:
        extra = ", ".join(f"{k}={v}" for k, v in t.items() if k in ("layers",))
        lines.append(f"| seed {t['seed']}{', ' + extra if extra else ''} | {t['rows']} | "
                     f"{t['dynamic_saving']:.1%} | {t['fixed_saving']:.1%} | "
                     f"{'yes' if t['within_10pct'] else 'no'} |")
    lines += ["", "## The shapes' parameters across their range", "",
              "found: with markers / without (the verdict); plan/demand at 50% on h200-pcie5 "
              "(plan from the warm-up); armed: the runtime with markers / without.", "",
              "| shape | parameters | found/true (markers) | without markers | plan/demand | "
              "armed (markers) | armed (without) |", "|---|---|---:|---|---:|---:|---:|"]
    for r in ranged:
        params = ", ".join(f"{k}={v}" for k, v in r["params"].items())
        armed, bare = ("-" if a is None else f"{a:.0%}" for a in (r["armed"], r["armed_bare"]))
        lines.append(f"| {r['shape']} | {params} | {r['found']}/{r['true']} ({r['verdict']}) | "
                     f"{r['found_bare']} ({r['verdict_bare']}) | {r['ratio']:.3f} | {armed} | "
                     f"{bare} |")
    lines += ["", provenance_md(prov)]
    (RESULTS / "loops.md").write_text("\n".join(lines))
    write_json(RESULTS / "loops.json", {"provenance": prov, "rows": rows, "twins": twins,
                                        "range": ranged})


def main(argv: list[str] | None = None) -> int:
    from uvm_sched.pattern._loops import SHAPES

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--quick", action="store_true", help="10 steps a loop, no range table")
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
    twins = [twin(args.steps, seed) for seed in (0, 1, 2, 3)] + [twin(args.steps, 0, layers=12)]
    for t in twins:
        print(f"twin {t}")
    ranged = [] if args.quick else [range_row(s, kw, args.steps) for s, kw in RANGE]
    for r in ranged:
        print(f"range {r}")
    write(rows, twins, ranged, prov)
    return 0


if __name__ == "__main__":
    sys.exit(main())
