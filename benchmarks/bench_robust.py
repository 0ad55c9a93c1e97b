"""Robustness: is the plan ever slower than doing nothing, on workloads nobody tuned it on?

Generated cases (``uvm_sched.trace.zoo.record_random(seed)``: recurrent LMs with a large
vocabulary, mixtures of experts, encoder/decoder attention, CNNs with long concat chains,
U-Nets, MLPs, fine-tuning where AdamW state dominates; random depth, width, batch, sequence
and dtype) x hardware profiles x budgets (% of the trace's peak), simulated. Per case and
budget: the baselines (demand paging, prefetch-on-alloc, swap-activations) and the planner
three ways -- oblivious from the full trace, oblivious from the allocator-only trace (what
the runtime's ring gives; ``zoo.allocator_only``), sampled (touches drawn from the full
trace; an allocator-only trace has no accesses to sample) -- every plan judged on the full
trace's ground-truth accesses.

Writes benchmarks/results/robust.md and robust.json: per family the distribution of plan /
demand, plan / ideal and plan / best baseline, how often the planner fell back (advice only
or no plan, ``plan.meta["pricing"]``), every case where a plan is slower than demand paging
by more than 1% (by name and seed), and every case where the sampled plan is slower than the
oblivious one. Rows are appended to robust.jsonl as they are measured, so a run cut short
keeps what it did (``--resume`` skips the seeds already there).

    python benchmarks/bench_robust.py                      # 300 cases (hours on 2 cores)
    python benchmarks/bench_robust.py --cases 20 --jobs 2  # a sample
    python benchmarks/bench_robust.py --report-only        # tables from robust.jsonl
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

from bench_quality import provenance, provenance_md  # noqa: E402

RESULTS = HERE / "results"
DEFAULT_HW = ("h200-pcie5", "gh200-c2c", "a100-40gb-pcie4")
DEFAULT_BUDGETS = (90, 75, 60, 50, 40)
BASELINES = ("demand", "prefetch-on-alloc", "swap-activations")
# (label, planning mode, plan from the allocator-only trace)
PLANS = (("oblivious", "oblivious", False), ("oblivious, allocator-only", "oblivious", True),
         ("sampled", "sampled", False))
SLOWER = 1.01  # plan / demand above this counts as slower (the bound)


def run_case(seed: int, hws=DEFAULT_HW, budgets=DEFAULT_BUDGETS, only=None) -> list[dict]:
    """All rows of one generated case: one per (hw, budget, plan); figures in s. Each row
    carries the case's time split (``time_s``: recording, baselines, planning, judging).
    ``only``: a set of (hw, budget %) pairs, the rows to run (default all).

    The oblivious plan of the full trace is the oblivious plan of its allocator-only twin by
    construction (oblivious mode never reads the accesses, and its pricing strips them:
    ``tests/test_planner_sim.py::test_oblivious_plan_is_identical_without_ground_truth_accesses``),
    so it is planned and judged once; its row is a copy marked ``same_as``."""
    from uvm_sched import planner, sim
    from uvm_sched.trace import zoo

    clock = {"record": 0.0, "baselines": 0.0, "plan": 0.0, "judge": 0.0}
    t0 = time.perf_counter()
    tr = zoo.record_random(seed)
    al = zoo.allocator_only(tr)
    clock["record"] = time.perf_counter() - t0
    rows = []
    for hw in hws:
        if only is not None and not any(h == hw for h, _ in only):
            continue
        cache: dict = {}
        t1 = time.perf_counter()
        ideal = sim.simulate(tr, "ideal", hw, None, _cache=cache).iteration_time_s
        clock["baselines"] += time.perf_counter() - t1
        for pct in budgets:
            if only is not None and (hw, pct) not in only:
                continue
            b = f"{pct}%"
            base = {"case": tr.meta["name"], "family": tr.meta["family"], "seed": seed,
                    "hw": hw, "budget_pct": pct, "peak_bytes": int(tr.peak_bytes),
                    "ideal_s": ideal}
            t1 = time.perf_counter()
            try:
                for pol in BASELINES:
                    base[f"{pol}_s"] = sim.simulate(tr, pol, hw, b, _cache=cache).iteration_time_s
            except sim.BudgetError as e:
                rows.append({**base, "plan": None, "error": str(e)})
                continue
            finally:
                clock["baselines"] += time.perf_counter() - t1
            done: dict = {}
            for label, mode, _ in PLANS:
                row = {**base, "plan": label}
                if mode == "oblivious" and "oblivious" in done:
                    rows.append({**done["oblivious"], **row, "same_as": done["oblivious"]["plan"]})
                    continue
                t1 = time.perf_counter()
                try:
                    p = planner.plan(al if mode == "oblivious" else tr, b, hw, mode=mode)
                except planner.PlanError as e:
                    rows.append({**row, "error": str(e)})
                    continue
                finally:
                    clock["plan"] += time.perf_counter() - t1
                t1 = time.perf_counter()
                row["plan_s"] = sim.simulate(tr, p, hw, b, _cache=cache).iteration_time_s
                clock["judge"] += time.perf_counter() - t1
                row["chosen"] = p.meta.get("pricing", {}).get("chosen", "plan")
                rows.append(row)
                done[mode] = row
    for r in rows:
        r["case_s"] = time.perf_counter() - t0
        r["time_s"] = dict(clock)
    return rows


def _q(xs, q):
    import numpy as np

    return float(np.quantile(np.asarray(xs, float), q)) if len(xs) else float("nan")


def report(rows: list[dict], prov: dict) -> str:
    import pandas as pd

    df = pd.DataFrame([r for r in rows if r.get("plan_s") is not None])
    err = [r for r in rows if r.get("error")]
    out = ["# Robustness: plans on generated workloads", "", provenance_md(prov), ""]
    if df.empty:
        return "\n".join(out + ["No case ran."])
    df["vs_demand"] = df["plan_s"] / df["demand_s"]
    df["vs_ideal"] = df["plan_s"] / df["ideal_s"]
    df["vs_best"] = df["plan_s"] / df[[f"{b}_s" for b in BASELINES]].min(axis=1)
    cases = df[["family", "seed"]].drop_duplicates()
    asked = prov.get("cases_requested")
    ran = len({r["seed"] for r in rows})
    if asked and asked > ran:
        out += [f"**Partial run: {ran} of the {asked} requested cases ran** (seeds in "
                "order from the first; the run was stopped for time -- `--resume` continues it).",
                ""]
    if ran > len(cases):
        out += [f"{ran} cases ran; {ran - len(cases)} of them have no row any plan could run "
                "(every budget below a tick's working set).", ""]
    out += [f"**{len(cases)} generated cases** ({', '.join(f'{f}: {n}' for f, n in cases.family.value_counts().sort_index().items())}) "
            f"x {df.hw.nunique()} hardware profiles x budgets "
            f"{', '.join(f'{x}%' for x in sorted(df.budget_pct.unique(), reverse=True))}: "
            f"{len(df)} plan rows ({len(err)} (case, budget) rows could not run: a tick's "
            "working set above the budget, or no feasible plan).", ""]
    slow = df[df.vs_demand > SLOWER]
    out += [f"Plans slower than demand paging by more than {SLOWER - 1:.0%}: **{len(slow)}** "
            f"of {len(df)}.", ""]
    out += ["## Per family and plan", "",
            "plan / demand: median, 90th percentile, max; plan / ideal: median; plan / best "
            "baseline (min of demand, prefetch-on-alloc, swap-activations): median, max; "
            "fallback: share of plans priced worse than acting less (advice only or no plan).",
            "",
            "| family | plan | rows | /demand med | p90 | max | /ideal med | /best med | /best max | fallback | slower than demand |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (fam, lab), g in df.groupby(["family", "plan"]):
        fb = (g["chosen"] != "plan").mean()
        out.append(f"| {fam} | {lab} | {len(g)} | {g.vs_demand.median():.3f} | "
                   f"{_q(g.vs_demand, .9):.3f} | {g.vs_demand.max():.3f} | "
                   f"{g.vs_ideal.median():.2f} | {g.vs_best.median():.3f} | "
                   f"{g.vs_best.max():.3f} | {fb:.0%} | {int((g.vs_demand > SLOWER).sum())} |")
    out += ["", "## Per hardware profile and budget (all families)", "",
            "| hw | budget | rows | /demand med | max | /ideal med | slower than demand |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for (hw, pct), g in df.groupby(["hw", "budget_pct"]):
        out.append(f"| {hw} | {pct}% | {len(g)} | {g.vs_demand.median():.3f} | "
                   f"{g.vs_demand.max():.3f} | {g.vs_ideal.median():.2f} | "
                   f"{int((g.vs_demand > SLOWER).sum())} |")
    out += _time_split(rows)
    out += ["", "## Every plan slower than demand paging", ""]
    if slow.empty:
        out.append("None.")
    else:
        out += ["| case | seed | hw | budget | plan | plan / demand | chosen |", "|---|---:|---|---:|---|---:|---|"]
        for r in slow.sort_values("vs_demand", ascending=False).itertuples():
            out.append(f"| {r.case} | {r.seed} | {r.hw} | {r.budget_pct}% | {r.plan} | "
                       f"{r.vs_demand:.3f} | {r.chosen} |")
    piv = df.pivot_table(index=["case", "seed", "hw", "budget_pct"], columns="plan",
                         values="plan_s").dropna(subset=["oblivious", "sampled"])
    worse = piv[piv["sampled"] > SLOWER * piv["oblivious"]]
    out += ["", "## Sampled slower than oblivious (by more than 1%)", "",
            f"**{len(worse)}** of {len(piv)} (case, hw, budget) rows.", ""]
    if len(worse):
        out += ["| case | seed | hw | budget | sampled / oblivious |", "|---|---:|---|---:|---:|"]
        for (case, seed, hw, pct), r in worse.iterrows():
            out.append(f"| {case} | {seed} | {hw} | {pct}% | {r['sampled'] / r['oblivious']:.3f} |")
    return "\n".join(out) + "\n"


def _time_split(rows: list[dict]) -> list[str]:
    """Where a case's time goes (rows written before the split was recorded are left out)."""
    per = {r["seed"]: r for r in rows if r.get("time_s")}
    if not per:
        return []
    import pandas as pd

    t = pd.DataFrame([{**r["time_s"], "case": r["case_s"]} for r in per.values()])
    out = ["", f"## Where the time goes (per case, {len(t)} cases; s)", "",
           "The oblivious plan is made once per (case, hw, budget), from the allocator-only "
           "trace: the full trace gives the same plan by construction (oblivious mode never "
           "reads the accesses and its pricing strips them), so its row is a copy (`same_as`).",
           "", "| phase | mean | median | max | share of the total |", "|---|---:|---:|---:|---:|"]
    for k in ("record", "baselines", "plan", "judge", "case"):
        out.append(f"| {k if k != 'case' else 'whole case'} | {t[k].mean():.1f} | "
                   f"{t[k].median():.1f} | {t[k].max():.1f} | {t[k].sum() / t['case'].sum():.0%} |")
    return out


def repro_rows(rows: list[dict], n: int) -> dict[int, set]:
    """A fast before/after set drawn from a finished run's ``rows``: ``n`` (case, hw,
    budget) rows whose oblivious plan is slower than demand, ``n`` where the sampled plan
    is slower than the oblivious one, and ``n`` that pass both, each spread evenly over
    the rows sorted by (family, seed, hw, budget) so that every family is in it; returns
    ``{seed: {(hw, budget %)}}``."""
    import numpy as np

    key = lambda r: (r["family"], r["seed"], r["hw"], r["budget_pct"])  # noqa: E731
    obl = {key(r): r for r in rows if r.get("plan") == "oblivious" and r.get("plan_s")}
    smp = {key(r): r for r in rows if r.get("plan") == "sampled" and r.get("plan_s")}
    slow = sorted(k for k, r in obl.items() if r["plan_s"] > SLOWER * r["demand_s"])
    worse = sorted(k for k, r in smp.items() if k in obl
                   and r["plan_s"] > SLOWER * obl[k]["plan_s"])
    bad = set(slow) | set(worse)
    good = sorted(k for k in obl if k not in bad)
    pick: dict[int, set] = {}
    for ks in (slow, worse, good):
        for i in np.unique(np.linspace(0, len(ks) - 1, min(n, len(ks))).astype(int)) \
                if ks else []:
            fam, seed, hw, pct = ks[i]
            pick.setdefault(seed, set()).add((hw, pct))
    return pick


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=300, help="generated cases (seeds)")
    ap.add_argument("--seed0", type=int, default=0, help="first seed")
    ap.add_argument("--hw", default=",".join(DEFAULT_HW))
    ap.add_argument("--budgets", default=",".join(map(str, DEFAULT_BUDGETS)),
                    help="percent of each trace's peak")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--name", default="robust")
    ap.add_argument("--resume", action="store_true", help="skip seeds already in <name>.jsonl")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--repro", type=int, default=0, metavar="N",
                    help="run only N rows slower than demand, N sampled-slower-than-oblivious "
                         "and N passing rows of results/robust.jsonl (a finished run; "
                         "repro_rows), into <name>.jsonl: a before/after set in minutes")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    jl = out / f"{a.name}.jsonl"
    hws = tuple(a.hw.split(","))
    budgets = tuple(int(x) for x in a.budgets.split(","))
    rows = [json.loads(x) for x in jl.read_text().splitlines()] if jl.exists() and \
        (a.resume or a.report_only) else []
    only: dict = {}
    if a.repro:
        src = RESULTS / "robust.jsonl"
        if src == jl:
            ap.error("--repro reads robust.jsonl: give another --name for its rows")
        only = repro_rows([json.loads(x) for x in src.read_text().splitlines()], a.repro)
    if not a.report_only:
        done = {r["seed"] for r in rows}
        seeds = sorted(only) if a.repro else range(a.seed0, a.seed0 + a.cases)
        seeds = [s for s in seeds if s not in done]
        mode = "a" if a.resume else "w"
        with open(jl, mode) as f:
            if a.jobs > 1:
                from concurrent.futures import ProcessPoolExecutor

                with ProcessPoolExecutor(a.jobs) as ex:
                    it = ex.map(run_case, seeds, [hws] * len(seeds), [budgets] * len(seeds),
                                [only.get(s) for s in seeds])
                    for s, rs in zip(seeds, it):
                        _emit(f, rows, rs, s)
            else:
                for s in seeds:
                    _emit(f, rows, run_case(s, hws, budgets, only.get(s)), s)
    prov = provenance(argv)
    prov["cases_requested"] = len(only) if a.repro else a.cases
    (out / f"{a.name}.md").write_text(report(rows, prov))
    print(f"wrote {out / (a.name + '.md')} ({len({r['seed'] for r in rows})} cases)")
    return 0


def _emit(f, rows, rs, seed) -> None:
    for r in rs:
        f.write(json.dumps(r) + "\n")
    f.flush()
    rows.extend(rs)
    slow = [r for r in rs if r.get("plan_s") and r["plan_s"] > SLOWER * r["demand_s"]]
    name = rs[0]["case"] if rs else seed
    print(f"{name}: {len(rs)} rows, {rs[0]['case_s'] if rs else 0:.0f} s, "
          f"{len(slow)} slower than demand", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
