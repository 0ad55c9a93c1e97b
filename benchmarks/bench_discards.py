"""Discards of the advice alone: which rule for keeping them the views can support.

Oblivious mode may emit its advice alone; it then runs the advice again without its
discards and keeps them where any view shows them paying (planner/_pricing.py, Note
[Discards judged against keeping them]). A discard drops a freed block's resident range,
so the ALLOC the pool hands that range to faults fresh pages in (a certain cost); it saves
the write-back of dead bytes where the driver would have evicted them (a saving only
pressure decides). This benchmark takes the rows of a bench_robust run whose default plan
is the advice alone, plans each again from the allocator-only trace, and where the
discards went out with it, simulates, on the ground truth and in each of the pricing's
views: no plan, the advice with its discards and without them. Then it replays rules for
keeping them over those figures:

- ``any view`` (today's): kept where some view shows the advice faster with them;
- ``worst view``: kept where the advice's worst ratio to no plan over the views is lower
  with them (how candidates are judged); also over the views where no plan stalls, and
  over the views with kept reads (the events alone cannot show a discard paying);
- ``never``, and ``truth`` (the faster on the ground truth: what no rule can know).

Per rule: plans slower than demand paging by more than 1%, the geometric mean of plan /
demand, and the rows where it keeps the slower of the two by more than 1%; and the rows
whose calls (one per action, ``hw.action_call_s`` each) take the host longer than the
simulated iteration: the simulator charges a call's host time only where it delays a
transfer a kernel waits for, so a populate the pool makes a no-op costs nothing there.

    python benchmarks/bench_discards.py                        # 90% rows + 200 others
    python benchmarks/bench_discards.py --others 0 --out /tmp/d.jsonl
"""
from __future__ import annotations

import argparse
import collections
import json
import math
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

SLOWER = 1.01  # plan / demand above this counts as slower (bench_robust's bound)
_SHOWN = 1e-3  # no plan's stall, as a share of its time, below which a view shows none


def measure(case: str, jobs: list) -> list[dict]:
    """One row per (hw, budget %) of ``jobs`` for generated ``case`` ("family-sSEED"): the
    choice and its discards' verdict, and where the advice went out with its discards, the
    iteration s of demand paging and of the advice with / without them on the ground truth,
    and per view ``[no plan s, no plan's stall s, with s, without s]`` (None where the view
    cannot hold the budget)."""
    from uvm_sched import planner, sim
    from uvm_sched.planner import _pricing
    from uvm_sched.planner._plan import Plan
    from uvm_sched.sim import BudgetError
    from uvm_sched.trace import zoo

    truth = zoo.record_random(int(case.rsplit("-s", 1)[1]))
    bare = zoo.allocator_only(truth)
    rows = []
    for hw, pct in jobs:
        priced: dict = {}
        real = _pricing.price

        def caught(trace, cands, budget, prof, **kw):
            # the views and no plan the planner judged in, caught at its call of the judge
            priced.update(trace=trace, none=cands["none"], budget=budget, prof=prof,
                          starts=kw.get("starts", ()))
            return real(trace, cands, budget, prof, **kw)

        _pricing.price = caught
        try:
            advice = planner.plan(bare, f"{pct}%", hw, mode="oblivious")
        finally:
            _pricing.price = real
        pricing = advice.meta.get("pricing", {})
        row = {"case": case, "hw": hw, "budget_pct": pct, "chosen": pricing.get("chosen"),
               "discards": pricing.get("discards")}
        rows.append(row)
        if row["chosen"] != "advice-only" or not str(row["discards"]).startswith("kept"):
            continue
        acts = advice.actions
        disc = (acts["action"] == "discard").to_numpy()
        without = Plan(acts[~disc].reset_index(drop=True), dict(advice.meta))
        row["n_discards"] = int(disc.sum())
        # the host's time for the plan's calls (prefetch, advise, discard: one call each per
        # iteration; the executor makes them in the allocator hook, on the launching thread)
        row["host_calls_s"] = len(acts) * float(priced["prof"].action_call_s)
        budget = f"{pct}%"
        row["demand_s"] = sim.simulate(truth, "demand", hw, budget).iteration_time_s
        row["with_s"] = sim.simulate(truth, advice, hw, budget).iteration_time_s
        row["without_s"] = sim.simulate(truth, without, hw, budget).iteration_time_s
        row["views"] = []
        for make_view in _pricing._views(priced["trace"], priced["budget"], priced["starts"],
                                         False):
            try:
                view = make_view()
                none = sim.simulate(view, priced["none"], priced["prof"], priced["budget"])
                row["views"].append([none.iteration_time_s, none.stall_time_s] + [
                    sim.simulate(view, p, priced["prof"], priced["budget"]).iteration_time_s
                    for p in (advice, without)])
            except BudgetError:
                row["views"].append(None)
    return rows


def _worst(row: dict, col: int, views) -> float:
    """The worst ratio to no plan over ``views`` (indices) of the plan in column ``col``."""
    got = [v[col] / v[0] for j, v in enumerate(row["views"]) if v and j in views(v, j)]
    return max(got) if got else 1.0


def _rules() -> dict:
    """``{name: keeps(row) -> bool}``: the rules replayed (module docstring)."""
    every = lambda v, j: {j}  # noqa: E731
    stalls = lambda v, j: {j} if v[1] > _SHOWN * v[0] else set()  # noqa: E731
    kept_reads = lambda v, j: {j} if j else set()  # noqa: E731
    return {
        # today's judges in the events alone, the kept reads and one unseen use (not the
        # kept reads in reverse order): every replayed row was kept by it
        "any view (today's)": lambda r: any(v and v[2] < v[3] for v in r["views"][:3]),
        "worst view": lambda r: _worst(r, 2, every) < _worst(r, 3, every),
        "worst view where no plan stalls": lambda r: _worst(r, 2, stalls) < _worst(r, 3, stalls),
        "worst view with kept reads": lambda r: _worst(r, 2, kept_reads) < _worst(r, 3,
                                                                                 kept_reads),
        "never": lambda r: False,
        "truth (not knowable)": lambda r: r["with_s"] < r["without_s"],
    }


def report(rows: list[dict]) -> str:
    """A markdown table of the rules replayed over ``rows`` (``measure``'s)."""
    judged = [r for r in rows if "views" in r]
    verdicts = collections.Counter(str(r["discards"]).split(":")[0] for r in rows
                                   if r["chosen"] == "advice-only")
    lines = [f"{len(rows)} rows planned; the advice alone chosen in "
             f"{sum(verdicts.values())} (discards {dict(verdicts)}); "
             f"{len(judged)} with its discards kept are replayed.", "",
             "| rule | slower than demand +1% | geomean plan / demand | keeps the slower "
             "of the two (>1%) |", "|---|---:|---:|---:|"]
    for name, keeps in _rules().items():
        slower = wrong = 0
        logs = []
        for r in judged:
            t = r["with_s"] if keeps(r) else r["without_s"]
            slower += t / r["demand_s"] > SLOWER
            wrong += t > min(r["with_s"], r["without_s"]) * SLOWER
            logs.append(math.log(t / r["demand_s"]))
        mean = math.exp(sum(logs) / len(logs)) if logs else float("nan")
        lines.append(f"| {name} | {slower} | {mean:.4f} | {wrong} |")
    bound = [r for r in judged if r["host_calls_s"] > min(r["with_s"], r["without_s"])]
    lines += ["", f"Rows whose plan's calls take the host longer than the faster of the two's "
              f"simulated iteration (``action_call_s`` each): {len(bound)} of {len(judged)}; "
              f"of the rule's losers: "
              f"{sum(r['with_s'] / r['demand_s'] > SLOWER for r in bound)}."]
    lines += ["", "Rows where the two differ by more than 1% on the ground truth "
              "(ratios to demand paging; per view `[no plan's stall share] with / without`, "
              "as ratios to no plan there):", ""]
    for r in judged:
        w, wo = r["with_s"] / r["demand_s"], r["without_s"] / r["demand_s"]
        if abs(w / wo - 1) > 0.01:
            views = " ".join(f"v{j}[{v[1] / v[0]:.2f}] {v[2] / v[0]:.3f}/{v[3] / v[0]:.3f}"
                             if v else f"v{j} -" for j, v in enumerate(r["views"]))
            host = r["host_calls_s"] / min(r["with_s"], r["without_s"])
            lines.append(f"- {r['case']} {r['hw']} {r['budget_pct']}%: with {w:.3f}, "
                         f"without {wo:.3f}; calls {host:.2f}x the faster's iteration; "
                         f"{views}")
    return "\n".join(lines)


def _picked(robust: Path, budgets: set, others: int, seed: int) -> dict:
    """``{case: [(hw, budget %)]}``: the oblivious rows of ``robust`` (a bench_robust jsonl)
    whose plan was the advice alone, every one at ``budgets`` and ``others`` drawn from the
    rest with ``seed``."""
    rows = [json.loads(line) for line in robust.read_text().splitlines() if line.strip()]
    advice = [r for r in rows if r["plan"] == "oblivious" and r["chosen"] == "advice-only"]
    if not advice:
        raise SystemExit(f"{robust}: no oblivious row whose plan was the advice alone; give "
                         "a bench_robust.py run's robust.jsonl")
    rest = [r for r in advice if r["budget_pct"] not in budgets]
    pick = [r for r in advice if r["budget_pct"] in budgets]
    pick += random.Random(seed).sample(rest, min(others, len(rest)))
    by: dict = collections.defaultdict(list)
    for r in pick:
        by[r["case"]].append((r["hw"], r["budget_pct"]))
    return dict(sorted(by.items()))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--robust", default=str(HERE / "results" / "robust.jsonl"),
                    help="a bench_robust.py run's rows (default: the committed run)")
    ap.add_argument("--budgets", default="90", help="budgets (%% of peak) taken whole")
    ap.add_argument("--others", type=int, default=200, help="rows drawn from the rest")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", default=None, help="write the rows here (jsonl)")
    ap.add_argument("--report-only", action="store_true", help="the table from --out's rows")
    a = ap.parse_args(argv)
    if a.report_only:
        if not a.out:
            ap.error("--report-only reads the rows of --out: name the file")
        print(report([json.loads(x) for x in Path(a.out).read_text().splitlines() if x]))
        return 0
    cases = _picked(Path(a.robust), {int(b) for b in a.budgets.split(",")}, a.others, a.seed)
    rows: list[dict] = []
    out = open(a.out, "w") if a.out else None
    try:
        if a.jobs > 1:
            from multiprocessing import Pool
            with Pool(a.jobs) as pool:
                done = pool.starmap(measure, cases.items(), chunksize=1)
        else:
            done = [measure(c, j) for c, j in cases.items()]
        for got in done:
            rows += got
            if out:
                out.writelines(json.dumps(r) + "\n" for r in got)
    finally:
        if out:
            out.close()
    print(report(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
