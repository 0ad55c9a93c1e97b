"""Sensitivity: how the headline figures move across the hardware constants' plausible ranges.

Every uncertain constant of a profile (``HardwareProfile.uncertain()``: the ones whose
``low``/``high`` differ, see ``uvm_sched/hw/profiles``) is set to its low and then its high
value, one at a time, plus two corners: all pessimistic (every bandwidth and batch size at
its low, every latency at its high) and all optimistic (the reverse). At each setting the
headlines are recomputed:

- quality: the oblivious planner's slowdown over ideal at 50% of peak on h200-pcie5 (the
  README's "simulate --plan" figure for gpt2_small), beside demand paging;
- GH200 saving: the largest memory saving (of 25/50/70%) within 5% of the all-resident
  iteration time on gh200-c2c, oblivious planner (the README's GH200 table);
- G10: the G10 workloads (../shared/workloads/g10, where present) at 40 GiB, ratio to ideal
  for the planner and demand paging. The ``a100-40gb-g10`` profile holds the artifact's own
  constants (no range), so here the workloads run on ``a100-40gb-pcie4``'s ranges: what the
  comparison would say on a real A100 whose constants are anywhere in their range.

The planner is run twice at each setting: planned with the varied profile (it knows the
hardware: the headline) and planned with the nominal profile but run on the varied one (it
was told the wrong constant). "Never slower than demand" is checked for both at every
setting, and every violation is listed by name.

    python benchmarks/bench_sensitivity.py            # the default run (minutes)
    python benchmarks/bench_sensitivity.py --quick    # one case per headline, corners only

Writes benchmarks/results/sensitivity.md and sensitivity.json (``--quick``: *_quick).
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

from bench_quality import provenance, provenance_md, write_json  # noqa: E402

from uvm_sched._fmt import fmt_ratio  # noqa: E402

QUALITY_HW, GH_HW, G10_HW = "h200-pcie5", "gh200-c2c", "a100-40gb-pcie4"
QUALITY = ("gpt2_small", "resnet50", "unet")  # at 50% of peak
GH_MODELS = ("resnet50", "bert_base", "gpt2_small")
GH_BUDGETS = (75, 50, 30)  # % of peak: savings 25/50/70%
G10 = ("BERT_Base_256", "VIT_1280")
MOVES = 0.10  # a headline that moves by more than this is shown as a range
SLACK = 1e-9  # float rounding allowed in "never slower than demand"


def slow_end(key: str) -> str:
    """Which end of a constant's range makes the hardware slower: the high end of a time
    (``*_s``), the low end of a rate or a size."""
    return "high" if key.endswith("_s") else "low"


def settings(hw, keys: list[str], quick: bool) -> list[tuple[str, dict]]:
    """(label, {key: 'low'|'high'}) for every setting: nominal, each key at each end (not
    with ``quick``), and the two corners."""
    out = [("nominal", {})]
    if not quick:
        out += [(f"{k} {end}", {k: end}) for k in keys for end in ("low", "high")]
    out.append(("all pessimistic", {k: slow_end(k) for k in keys}))
    out.append(("all optimistic", {k: "high" if slow_end(k) == "low" else "low"
                                   for k in keys}))
    return out


def varied(hw, setting: dict):
    """``hw`` with each named constant at the named end of its own range."""
    for key, end in setting.items():
        if key in hw.uncertain():
            lo, hi = hw.ranges[key]
            hw = hw.with_value(key, lo if end == "low" else hi)
    return hw


class Case:
    """One trace at one budget on one profile: the nominal plan made once, reused."""

    def __init__(self, group: str, name: str, trace, hw, budget: int) -> None:
        from uvm_sched import planner

        self.group, self.name, self.trace, self.hw, self.budget = group, name, trace, hw, budget
        self.nominal_plan = planner.plan(trace, budget, hw)
        self.nominal = self.run(hw)  # (raises BudgetError where no schedule fits)

    def run(self, hw) -> dict:
        """Slowdowns over ideal on ``hw``: planner (planned on ``hw``), planner planned on
        the nominal profile, demand paging."""
        from uvm_sched import planner
        from uvm_sched.sim import simulate

        cache: dict = {}
        sim = (lambda pol: simulate(self.trace, pol, hw, self.budget, _cache=cache)
               .iteration_time_s)
        ideal = sim("ideal")
        return {"plan": sim(planner.plan(self.trace, self.budget, hw)) / ideal,
                "nominal_plan": sim(self.nominal_plan) / ideal,
                "demand": sim("demand") / ideal}


def cases(args) -> tuple[list[Case], list[str]]:
    """The headline cases (traces recorded or loaded once each), and the ones left out
    because their budget is below a kernel's working set (the simulator's reason)."""
    from uvm_sched.hw import load_profile
    from uvm_sched.planner import PlanError
    from uvm_sched.sim import BudgetError
    from uvm_sched.trace import zoo

    out: list[Case] = []
    skipped: list[str] = []

    def add(group: str, name: str, trace, hw: str, budget: int) -> None:
        try:
            out.append(Case(group, name, trace, load_profile(hw), budget))
        except (BudgetError, PlanError) as e:
            skipped.append(f"{group} {name}: {e}")

    for m in QUALITY[:1] if args.quick else QUALITY:
        t = zoo.record(m, hw=QUALITY_HW)
        add("quality", m, t, QUALITY_HW, t.peak_bytes // 2)
    for m in GH_MODELS[:1] if args.quick else GH_MODELS:
        t = zoo.record(m, hw=GH_HW)
        for pct in GH_BUDGETS:
            add("gh200", f"{m} {pct}%", t, GH_HW, round(t.peak_bytes * pct / 100))
    g10 = _g10_dir()
    if g10 is not None:
        from uvm_sched.trace import load
        for w in G10[:1] if args.quick else G10:
            if (g10 / w).is_dir():
                add("g10", w, load(g10 / w), G10_HW, 40 << 30)
    return out, skipped


def _g10_dir():
    from g10_compare import g10_dir
    return g10_dir()


def headlines(case_rows: list[tuple[Case, dict]]) -> dict[str, float]:
    """Headline name -> figure at one setting (slowdowns; GH200: saving within 5%)."""
    out: dict[str, float] = {}
    for c, r in case_rows:
        if c.group == "quality":
            out[f"{c.name} 50% h200: plan"] = r["plan"]
            out[f"{c.name} 50% h200: demand"] = r["demand"]
        elif c.group == "g10":
            out[f"G10 {c.name}: plan"] = r["plan"]
            out[f"G10 {c.name}: demand"] = r["demand"]
    gh: dict[str, float] = {}
    for c, r in case_rows:
        if c.group == "gh200":
            model, pct = c.name.split()
            saving = 1 - int(pct.rstrip("%")) / 100
            key = f"{model} gh200: saving within 5%"
            gh.setdefault(key, 0.0)
            if r["plan"] <= 1.05:
                gh[key] = max(gh[key], saving)
    out.update(gh)
    return out


def violations(label: str, case_rows: list[tuple[Case, dict]]) -> list[str]:
    """Every case where a plan is slower than demand paging at this setting."""
    out = []
    for c, r in case_rows:
        for which in ("plan", "nominal_plan"):
            if not r[which] <= r["demand"] * (1 + SLACK):
                out.append(f"{label}: {c.group} {c.name}: {which.replace('_', ' ')} "
                           f"{r[which]:.3f}x > demand {r['demand']:.3f}x")
    return out


def _fmt(name: str, v: float) -> str:
    if v is None or not math.isfinite(v):
        return "n/a"
    return f"{v:.0%}" if "saving" in name else fmt_ratio(v)


def summary_md(table: dict[str, dict[str, float]]) -> tuple[str, list[str]]:
    """Per headline: nominal, lowest and highest across settings (with the setting), and
    whether it moves by more than MOVES; also the names of the headlines that do."""
    names = list(table["nominal"])
    lines = ["| headline | nominal | lowest (setting) | highest (setting) | moves |",
             "|---|---:|---:|---:|---:|"]
    ranged = []
    for n in names:
        vals = {s: row[n] for s, row in table.items() if n in row}
        lo_s = min(vals, key=lambda s: vals[s])
        hi_s = max(vals, key=lambda s: vals[s])
        nom = vals["nominal"]
        move = (vals[hi_s] - vals[lo_s]) / nom if nom else (1.0 if vals[hi_s] > 0 else 0.0)
        flag = f"**{move:.0%}**" if move > MOVES else f"{move:.0%}"
        if move > MOVES:
            ranged.append(n)
        lines.append(f"| {n} | {_fmt(n, nom)} | {_fmt(n, vals[lo_s])} ({lo_s}) | "
                     f"{_fmt(n, vals[hi_s])} ({hi_s}) | {flag} |")
    return "\n".join(lines) + "\n", ranged


def detail_md(table: dict[str, dict[str, float]]) -> str:
    """Every setting x every headline."""
    names = list(table["nominal"])
    lines = ["| setting | " + " | ".join(names) + " |",
             "|---|" + "---:|" * len(names)]
    for s, row in table.items():
        lines.append(f"| {s} | " + " | ".join(_fmt(n, row.get(n)) for n in names) + " |")
    return "\n".join(lines) + "\n"


def ranges_md(profiles) -> str:
    """The uncertain constants of each profile used: nominal, low, high."""
    lines = ["| profile | constant | low | nominal | high |", "|---|---|---:|---:|---:|"]
    for hw in profiles:
        for k in hw.uncertain():
            lo, hi = hw.ranges[k]
            lines.append(f"| {hw.name} | {k} | {lo:g} | {getattr(hw, k):g} | {hi:g} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="one case per headline and the two corners only (a smoke run)")
    ap.add_argument("--out", default=str(HERE / "results"), help="results folder")
    args = ap.parse_args(argv)
    prov = provenance(argv if argv is not None else sys.argv)
    t0 = time.perf_counter()
    all_cases, skipped = cases(args)
    profiles = {c.hw.name: c.hw for c in all_cases}
    keys = sorted({k for hw in profiles.values() for k in hw.uncertain()})
    table: dict[str, dict[str, float]] = {}
    broken: list[str] = []
    for label, setting in settings(None, keys, args.quick):
        rows = [(c, c.run(varied(c.hw, setting)) if setting else c.nominal)
                for c in all_cases]
        table[label] = headlines(rows)
        broken += violations(label, rows)
        print(f"{label:32s} " + "  ".join(f"{_fmt(n, v)}" for n, v in table[label].items()),
              flush=True)
    summary, ranged = summary_md(table)
    wall = time.perf_counter() - t0
    stem = "sensitivity_quick" if args.quick else "sensitivity"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    verdict = ("holds at every setting: no plan slower than demand paging" if not broken else
               f"VIOLATED in {len(broken)} case(s):\n\n" + "\n".join(f"- {b}" for b in broken))
    md = (f"# Sensitivity of the headline figures to the hardware constants\n\n"
          f"{provenance_md(prov)}\n"
          f"Simulated. Each uncertain constant at its low and high end, one at a time, and "
          f"the all-pessimistic / all-optimistic corners (`python benchmarks/"
          f"bench_sensitivity.py{' --quick' if args.quick else ''}`, {wall:.0f} s wall). "
          f"Slowdowns are over the all-resident iteration; the plan is made with the "
          f"profile it runs on. G10 rows: the G10 workloads on `{G10_HW}`'s ranges (the "
          f"`a100-40gb-g10` profile is the artifact's constants, without a range).\n\n"
          f"## Summary (bold: moves by more than {MOVES:.0%}: quote it as a range)\n\n"
          f"{summary}\n"
          f"## Never slower than demand paging\n\nChecked for the plan made with the "
          f"varied profile and for the plan made with the nominal one but run on the "
          f"varied hardware: {verdict}\n\n"
          f"## Every setting\n\n{detail_md(table)}\n"
          + (f"Left out (infeasible budget, any schedule): "
             f"{'; '.join(skipped)}\n\n" if skipped else "")
          + f"## The ranges\n\n{ranges_md(profiles.values())}")
    (out / f"{stem}.md").write_text(md)
    write_json(out / f"{stem}.json", {"provenance": prov, "wall_s": wall, "table": table,
                                      "moves_over_10pct": ranged, "violations": broken})
    print(f"\n{summary}\nnever slower than demand: {verdict}\nwrote {out / stem}.md "
          f"({wall:.0f} s)")
    return 1 if broken else 0


if __name__ == "__main__":
    raise SystemExit(main())
