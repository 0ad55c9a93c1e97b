"""Plan quality: the zoo x budgets x policies x hardware table, in the simulator.

Every zoo model is recorded on meta tensors at its default size (``zoo.info``: the batch
and image/sequence sizes such models are trained at on one GPU, the same sizes
``uvm-sched record MODEL`` and the demo use, so a README command reproduces a row), then
``uvm_sched.sim.compare`` runs every policy at 100/75/50/30% of the model's peak on
h200-pcie5 and gh200-c2c, with the planner ("uvm-sched") in both modes: oblivious (allocator
events only) and sampled (plus access samples), and the oblivious one with its guard tuned by
the clock (``tune=TUNE``: each candidate's plan run, the fastest kept, as
``Scheduler(tune=...)`` does on a GPU). Figures are simulated: see
benchmarks/README.md.

Writes benchmarks/results/quality.md and quality.json with the date, commit and machine, and
the headline: per model and hardware, the largest memory saving (1 - budget/peak) each policy
reaches while staying within 5% / 10% of the ideal (all-resident) iteration time.

    python benchmarks/bench_quality.py                 # the full table (minutes)
    python benchmarks/bench_quality.py --quick         # two models, one hardware profile
    python benchmarks/bench_quality.py --models gpt2_small,resnet50 --budgets 50,30
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from uvm_sched._fmt import fmt_bytes, fmt_pct, fmt_ratio, fmt_seconds  # noqa: E402

RESULTS = HERE / "results"
DEFAULT_BUDGETS = (100, 75, 50, 30)
DEFAULT_HW = ("h200-pcie5", "gh200-c2c")
OBLIVIOUS, SAMPLED = "uvm-sched (oblivious)", "uvm-sched (sampled)"
# the oblivious plan with its guard tuned by the clock, as Scheduler(tune=TUNE) does on a
# GPU (here the simulator is the clock: each candidate's plan is run, the fastest kept)
TUNED, TUNE = "uvm-sched (oblivious, tuned)", (16, 8)
# sampled mode measured against its own plan without the samples (never slower than it)
SAMPLED_TUNED, SAMPLED_TUNE = "uvm-sched (sampled, tuned)", ("oblivious",)
# the oblivious plan made from what a runtime or a memory snapshot sees (the trace exported
# as a torch memory snapshot and read back: allocations and frees with their timestamps, no
# markers, no accesses, no device times), judged on the recorded trace
ALLOC_ONLY = "uvm-sched (oblivious, from a snapshot)"
OURS = (OBLIVIOUS, TUNED, SAMPLED, SAMPLED_TUNED, ALLOC_ONLY)


def _short(mode: str) -> str:
    """'uvm-sched (oblivious, tuned)' -> 'oblivious, tuned'."""
    return mode.split("(", 1)[1].rstrip(")")
# Policies that are not something a user can run: the reference and the lower bound.
NOT_RUNNABLE = ("ideal", "bound")
HEADLINE_LIMITS = (1.05, 1.10)


# -- provenance (also used by g10_compare.py) ------------------------------------------------
def provenance(argv: list[str] | None = None, *, simulated: bool = True) -> dict:
    """Date (UTC), commit (with -dirty when tracked files differ), machine, versions;
    ``simulated``: False for figures timed on this machine (wall and CPU seconds)."""
    def git(*a: str) -> str:
        try:
            return subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True,
                                  timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    commit = git("rev-parse", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += "-dirty"
    versions = {"python": platform.python_version()}
    for mod in ("numpy", "pandas", "torch"):
        m = sys.modules.get(mod)
        if m is not None:
            versions[mod] = getattr(m, "__version__", "?")
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "machine": {"platform": platform.platform(), "processor": platform.processor() or
                    platform.machine(), "cpu_count": os.cpu_count()},
        "versions": versions,
        "command": " ".join(["python", *[str(a) for a in (argv if argv is not None else sys.argv)]]),
        "simulated": simulated,
    }


def provenance_md(p: dict) -> str:
    m = p["machine"]
    return (f"- date: {p['date']}\n- commit: `{p['commit']}`\n"
            f"- machine: {m['platform']}, {m['processor']}, {m['cpu_count']} CPUs\n"
            f"- versions: " + ", ".join(f"{k} {v}" for k, v in p["versions"].items()) + "\n"
            f"- command: `{p['command']}`\n"
            f"- all figures are **simulated** (uvm_sched.sim with the named hardware profile), "
            f"not measured on a GPU\n")


def write_json(path: Path, doc: dict) -> None:
    def default(o):
        import numpy as np

        if isinstance(o, np.integer):
            return int(o)
        if isinstance(o, np.floating):
            return float(o) if math.isfinite(float(o)) else None
        if isinstance(o, np.bool_):
            return bool(o)
        raise TypeError(type(o).__name__)

    def clean(o):
        if isinstance(o, float) and not math.isfinite(o):
            return None
        if isinstance(o, dict):
            return {str(k): clean(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [clean(v) for v in o]
        return o

    path.write_text(json.dumps(clean(doc), indent=1, default=default) + "\n")


# -- the sweep ----------------------------------------------------------------------------
def sweep(trace, hw: str, budgets_pct, *, sampled: bool = True):
    """One compare() per planner mode; rows relabelled so the modes sit side by side."""
    import pandas as pd

    from uvm_sched.sim import POLICIES, compare

    budgets = [f"{b}%" for b in budgets_pct]
    df = compare(trace, hw, budgets, policies=list(POLICIES), mode="oblivious")
    df = df.copy()
    df.loc[df["policy"] == "uvm-sched", "policy"] = OBLIVIOUS
    frames = [df]
    t = compare(trace, hw, budgets, policies=["uvm-sched"], mode="oblivious", tune=TUNE)
    t = t[t["policy"] == "uvm-sched"].copy()
    t["policy"] = TUNED
    frames.append(t)
    if sampled:
        s = compare(trace, hw, budgets, policies=["uvm-sched"], mode="sampled")
        s = s[s["policy"] == "uvm-sched"].copy()
        s["policy"] = SAMPLED
        frames.append(s)
        st = compare(trace, hw, budgets, policies=["uvm-sched"], mode="sampled",
                     tune=SAMPLED_TUNE)
        st = st[st["policy"] == "uvm-sched"].copy()
        st["policy"] = SAMPLED_TUNED
        frames.append(st)
    frames.append(_from_snapshot(trace, hw, df))
    out = pd.concat(frames, ignore_index=True)
    out["budget_pct"] = [round(100 * b / trace.peak_bytes) for b in out["budget_bytes"]]
    out["saving"] = 1.0 - out["budget_bytes"] / trace.peak_bytes
    return out


def _from_snapshot(trace, hw: str, ref):
    """ALLOC_ONLY rows: plan from the snapshot round trip of ``trace``, simulated on
    ``trace`` at the budgets of ``ref`` (compare() rows; same columns)."""
    import pandas as pd

    from uvm_sched import planner
    from uvm_sched.sim import BudgetError, simulate
    from uvm_sched.trace._export import trace_to_snapshot
    from uvm_sched.trace._snapshot import trace_from_snapshot

    snap = trace_from_snapshot(trace_to_snapshot(trace))
    cache: dict = {}
    ideal = ref.loc[ref["policy"] == "ideal", "iteration_time_s"].iloc[0]
    rows = []
    for B in ref["budget_bytes"].unique().tolist():
        row = {"budget_bytes": B, "budget_pct": 100.0 * B / trace.peak_bytes,
               "policy": ALLOC_ONLY}
        try:
            r = simulate(trace, planner.plan(snap, int(B), hw), hw, int(B), _cache=cache)
        except (BudgetError, planner.PlanError) as e:
            row.update(iteration_time_s=float("nan"), slowdown=float("nan"),
                       stall_time_s=float("nan"), bytes_h2d=0, bytes_d2h=0, faults=0,
                       error=str(e))
        else:
            row.update(iteration_time_s=r.iteration_time_s, slowdown=r.iteration_time_s / ideal,
                       stall_time_s=r.stall_time_s, bytes_h2d=r.bytes_h2d,
                       bytes_d2h=r.bytes_d2h, faults=r.faults, error="")
        rows.append(row)
    return pd.DataFrame(rows)


def alloc_only_md(rows, budgets_pct) -> str:
    """Slowdown of the plan made from the snapshot (allocator events only) beside the plan
    made from the recorded trace and demand paging, per model, hw and budget."""
    lines = ["| model | hw | budget | from a snapshot | from the recorder trace | demand | "
             "snapshot plan / demand |", "|---|---|---:|---:|---:|---:|---:|"]
    for (model, hw, pct), g in rows.groupby(["model", "hw", "budget_pct"], sort=False):
        if pct == 100 or pct not in budgets_pct:
            continue
        by = dict(zip(g["policy"], g["slowdown"]))
        a, o, d = by.get(ALLOC_ONLY), by.get(OBLIVIOUS), by.get("demand")
        ratio = a / d if a is not None and d and math.isfinite(a) and math.isfinite(d) else None
        lines.append(f"| {model} | {hw} | {pct}% | {fmt_ratio(a)} | {fmt_ratio(o)} | "
                     f"{fmt_ratio(d)} | {fmt_ratio(ratio)} |")
    return "\n".join(lines) + "\n"


def headline(rows, limits=HEADLINE_LIMITS) -> list[dict]:
    """Per (model, hw, policy): the largest saving with slowdown <= each limit (None when
    no budget tried stays within it)."""
    out = []
    for (model, hw, policy), g in rows.groupby(["model", "hw", "policy"], sort=False):
        if policy in NOT_RUNNABLE:
            continue
        rec = {"model": model, "hw": hw, "policy": policy}
        for lim in limits:
            ok = g[g["slowdown"] <= lim]
            rec[f"saving_at_{lim:.2f}"] = float(ok["saving"].max()) if len(ok) else None
        out.append(rec)
    return out


def min_feasible_bytes(df) -> int | None:
    """The smallest feasible budget the simulator named for this trace (its largest
    single-kernel working set), read from an infeasible row's error; None when every budget
    tried was feasible."""
    import re

    for e in df.get("error", []):
        m = re.search(r"at least ([\d,]+) bytes", str(e or ""))
        if m:
            return int(m.group(1).replace(",", ""))
    return None


def headline_md(head: list[dict], floors: dict | None = None, limits=HEADLINE_LIMITS) -> str:
    """One row per model and hardware: our modes beside the best baseline; ``floors``
    maps (model, hw) to the text of the smallest feasible budget."""
    import pandas as pd

    h = pd.DataFrame(head)
    floors = floors or {}
    cols = ["model", "hw", "feasible down to"]
    for lim in limits:
        tag = f"≤{round((lim - 1) * 100)}% slower"
        cols += [f"uvm-sched {_short(m)} ({tag})" for m in OURS] + [f"best baseline ({tag})"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for (model, hw), g in h.groupby(["model", "hw"], sort=False):
        cells = [model, hw, floors.get((model, hw), "-")]
        for lim in limits:
            key = f"saving_at_{lim:.2f}"
            by = {r["policy"]: r[key] for r in g.to_dict(orient="records")}

            def pct(x):
                return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt_pct(x, digits=0)

            base = {p: v for p, v in by.items() if p not in OURS
                    and v is not None and not (isinstance(v, float) and math.isnan(v))}
            best_v = max(base.values(), default=None)
            # name the baseline(s) reaching it, unless the saving is nil (every one ties at 100%)
            best_names = "/".join(p for p, v in base.items() if v == best_v)
            best = (pct(best_v) + (f" ({best_names})" if best_v else "")) if best_v is not None else "-"
            cells += [pct(by.get(m)) for m in OURS] + [best]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def wins_md(rows, budgets_pct) -> str:
    """Per budget below 100%: in how many (model, hardware) cases each planner mode is faster
    than every runnable baseline (cases where some policy ran)."""
    lines = ["| budget | " + " | ".join(f"uvm-sched {_short(m)} faster than every baseline"
                                       for m in OURS) + " |", "|---" * (1 + len(OURS)) + "|"]
    for b in budgets_pct:
        if b == 100:
            continue
        sub = rows[rows["budget_pct"] == b]
        counts = {m: [0, 0] for m in OURS}
        for _, g in sub.groupby(["model", "hw"], sort=False):
            by = dict(zip(g["policy"], g["slowdown"]))
            base = [v for p, v in by.items()
                    if p not in (*OURS, *NOT_RUNNABLE) and math.isfinite(v)]
            for mode in counts:
                ours = by.get(mode)
                if base and ours is not None and math.isfinite(ours):
                    counts[mode][1] += 1
                    counts[mode][0] += ours < min(base)
        lines.append(f"| {b}% | " + " | ".join(f"{w} of {n}" for w, n in counts.values()) + " |")
    return "\n".join(lines) + "\n"


def near_bound(slowdown: float, bound: float) -> bool:
    """The planner target: (T_plan - T_ideal) <= 1.25 (T_bound - T_ideal) + 2% of T_ideal,
    in slowdowns (T / T_ideal)."""
    return (slowdown - 1) <= 1.25 * (bound - 1) + 0.02


def targets_md(rows, budgets_pct) -> str:
    """Per planner mode, hardware and budget below 100%: cases (models the budget is
    feasible for) never slower than demand paging, and cases within the bound tolerance."""
    lines = ["| mode | hw | budget | not slower than demand | within the bound tolerance | "
             "misses (slowdown vs bound) |", "|---|---|---|---|---|---|"]
    for mode in OURS:
        for hw, gh in rows.groupby("hw", sort=False):
            for b in budgets_pct:
                if b == 100:
                    continue
                n = dem = near = 0
                miss = []
                for model, g in gh[gh["budget_pct"] == b].groupby("model", sort=False):
                    by = dict(zip(g["policy"], g["slowdown"]))
                    t, d, bd = by.get(mode), by.get("demand"), by.get("bound")
                    if t is None or bd is None or not (math.isfinite(t) and math.isfinite(bd)):
                        continue
                    n += 1
                    dem += d is None or not math.isfinite(d) or t <= d * 1.0001
                    if near_bound(t, bd):
                        near += 1
                    else:
                        miss.append(f"{model} {fmt_ratio(t)} vs {fmt_ratio(bd)}")
                if n:
                    lines.append(f"| {_short(mode)} | {hw} | {b}% | {dem} of {n} | "
                                 f"{near} of {n} | {'; '.join(miss) or '-'} |")
    return "\n".join(lines) + "\n"


def at_budget_md(rows, pct: int) -> str:
    """Slowdown at one budget per model and hardware: ours (each mode), the best baseline,
    and the simulator's lower bound on any schedule."""
    sub = rows[rows["budget_pct"] == pct]
    if not len(sub):
        return ""
    lines = ["| model | hw | " + " | ".join(f"uvm-sched {_short(m)}" for m in OURS)
             + " | best baseline | lower bound |", "|---" * (4 + len(OURS)) + "|"]
    for (model, hw), g in sub.groupby(["model", "hw"], sort=False):
        by = dict(zip(g["policy"], g["slowdown"]))
        base = {p: v for p, v in by.items()
                if p not in (*OURS, *NOT_RUNNABLE) and math.isfinite(v)}
        best = min(base.items(), key=lambda kv: kv[1], default=None)
        lines.append(f"| {model} | {hw} | " + " | ".join(fmt_ratio(by.get(m)) for m in OURS)
                     + " | " + (f"{fmt_ratio(best[1])} ({best[0]})" if best else "infeasible")
                     + f" | {fmt_ratio(by.get('bound'))} |")
    return "\n".join(lines) + "\n"


def detail_md(rows, budgets_pct) -> str:
    """Per model and hardware: slowdown and bytes moved (both ways) per policy and budget."""
    parts = []
    for (model, hw), g in rows.groupby(["model", "hw"], sort=False):
        peak = int(g["peak_bytes"].iloc[0])
        ideal = g[g["policy"] == "ideal"]["iteration_time_s"]
        parts.append(f"### {model} on {hw} (peak {fmt_bytes(peak)}, ideal iteration "
                     f"{fmt_seconds(float(ideal.iloc[0])) if len(ideal) else '-'})\n")
        cols = ["policy"] + [f"{b}%" for b in budgets_pct]
        parts.append("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n")
        for policy, gp in g.groupby("policy", sort=False):
            cells = [policy]
            for b in budgets_pct:
                r = gp[gp["budget_pct"] == b]
                if not len(r):
                    cells.append("-")
                    continue
                r = r.iloc[0]
                moved = int(r["bytes_h2d"]) + int(r["bytes_d2h"])
                cells.append(f"{fmt_ratio(r['slowdown'])} · {fmt_bytes(moved, digits=1)}")
            parts.append("| " + " | ".join(cells) + " |\n")
        parts.append("\n")
    return "".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", help="comma-separated zoo names (default: the whole zoo)")
    ap.add_argument("--budgets", default=",".join(map(str, DEFAULT_BUDGETS)),
                    help="percentages of peak (default 100,75,50,30)")
    ap.add_argument("--hw", default=",".join(DEFAULT_HW), help="hardware profiles")
    ap.add_argument("--quick", action="store_true",
                    help="gpt2_small and resnet50 on h200-pcie5 only (a smoke run)")
    ap.add_argument("--no-sampled", action="store_true", help="skip the sampled planner mode")
    ap.add_argument("--out", default=str(RESULTS), help="results folder")
    ap.add_argument("--name", default="quality", help="results file stem (default quality)")
    args = ap.parse_args(argv)

    import pandas as pd

    from uvm_sched.trace import zoo

    models = args.models.split(",") if args.models else list(zoo.names())
    hws = args.hw.split(",")
    if args.quick:
        models, hws = [m for m in ("gpt2_small", "resnet50") if m in zoo.names()], hws[:1]
        if args.name == "quality":  # a smoke run must not overwrite the full table
            args.name = "quality_quick"
    budgets = [int(b) for b in args.budgets.split(",")]
    unknown = [m for m in models if m not in zoo.names()]
    if unknown:
        ap.error(f"unknown model(s) {unknown}; the zoo has {zoo.names()}")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    # provenance first: the commit and tree state the figures were computed from
    prov = provenance(argv if argv is not None else sys.argv)
    t_start = time.perf_counter()
    frames, traces = [], {}
    for model in models:
        for hw in hws:
            # record per hardware profile: the recorder's per-tick device time is a roofline
            # for the named GPU, so compute time (what transfers must hide behind) differs
            t0 = time.perf_counter()
            trace = zoo.record(model, hw=hw)  # the zoo's default (training) sizes
            rec_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            df = sweep(trace, hw, budgets, sampled=not args.no_sampled)
            sim_s = time.perf_counter() - t0
            df.insert(0, "model", model)
            df.insert(1, "hw", hw)
            df["peak_bytes"] = trace.peak_bytes
            frames.append(df)
            floor = min_feasible_bytes(df)
            traces[(model, hw)] = {"events": len(trace), "ticks": trace.n_ticks,
                                   "min_feasible_bytes": floor,
                                   "peak_bytes": trace.peak_bytes, "record_s": rec_s,
                                   "simulate_s": sim_s,
                                   "batch": trace.meta.get("batch"),
                                   "size": (f"{trace.meta['seq']} tokens" if trace.meta.get("seq")
                                            else f"{trace.meta.get('image')} px")}
            ours = df[df["policy"] == OBLIVIOUS].set_index("budget_pct")["slowdown"]
            print(f"{model:>14} {hw:>11}: peak {fmt_bytes(trace.peak_bytes):>10}, "
                  f"{len(trace):,} events; record {rec_s:.1f}s, simulate {sim_s:.1f}s; "
                  "uvm-sched slowdown " + ", ".join(f"{b}%: {fmt_ratio(ours.get(b))}"
                                                    for b in budgets), flush=True)
    rows = pd.concat(frames, ignore_index=True)
    head = headline(rows)
    floors = {k: (f"{fmt_pct(t['min_feasible_bytes'] / t['peak_bytes'], digits=0)} of peak"
                  if t["min_feasible_bytes"] else f"< {min(budgets)}% of peak")
              for k, t in traces.items()}
    prov["elapsed_s"] = round(time.perf_counter() - t_start, 1)

    md = [f"# Plan quality: zoo x budgets x policies x hardware (simulated)\n\n",
          provenance_md(prov), f"- elapsed: {prov['elapsed_s']} s\n\n",
          f"Planner modes: oblivious (allocator events only), oblivious, tuned (its guard "
          f"chosen among auto, {', '.join(map(str, TUNE))} by the simulated iteration time, "
          "standing in for the clock `Scheduler(tune=...)` reads on a GPU; no access "
          "information), sampled (plus access samples per touch), sampled, tuned (the "
          "faster of the sampled plan and the same plan without the samples, by the same "
          "clock).\n\n"
          "Saving = 1 - budget/peak: the share of the model's peak memory that does not have to "
          "be on the device. Slowdown = iteration time / the ideal (all-resident) iteration "
          "time at the same hardware. Budgets tried: "
          + ", ".join(f"{b}%" for b in budgets) + " of peak, so savings are coarse steps.\n\n",
          "## Headline: largest saving within 5% / 10% of ideal\n\n",
          "Feasible down to: the smallest budget any policy can run at, the largest single "
          "kernel's working set (the simulator refuses budgets below it). "
          "`-`: no budget tried stays within the limit. Best baseline: the best of the "
          "runnable non-planner policies (the simulator's `bound` is a lower bound, not a "
          "policy, and is left out).\n\n",
          headline_md(head, floors),
          "\n## Planner against the baselines\n\n", wins_md(rows, budgets),
          "\n## Planner targets\n\n"
          "Never slower than `demand`; close to the simulator's lower bound: (T_plan - "
          "T_ideal) <= 1.25 (T_bound - T_ideal) + 2% of T_ideal. The bound lets the link run "
          "flat out with perfect foresight of every access and ignores the next iteration's "
          "needs (see `uvm_sched/sim/_bound.py`), so it is loose where the peak holds data "
          "only the next iteration reads.\n\n", targets_md(rows, budgets)]
    for b in budgets:
        if b != 100:
            md += [f"\n## Slowdown at {b}% of peak\n\n", at_budget_md(rows, b)]
    md += ["\n## Allocator-only traces (what the runtime sees)\n\n"
           "The oblivious plan made from the trace exported as a torch memory snapshot and read "
           "back (allocations and frees with timestamps: no markers, no accesses, no device "
           "times), judged on the recorded trace's accesses.\n\n",
           alloc_only_md(rows, budgets)]
    md += ["\n## Detail: slowdown · bytes moved (both directions) per "
          "budget\n\n", detail_md(rows, budgets),
          "## Traces\n\n| model | hw | batch | size | events | ticks | peak | record s | simulate s |\n"
          "|---|---|---|---|---|---|---|---|---|\n"]
    for (model, hw), t in traces.items():
        md.append(f"| {model} | {hw} | {t['batch']} | {t['size']} | {t['events']:,} | "
                  f"{t['ticks']:,} | {fmt_bytes(t['peak_bytes'])} | {t['record_s']:.1f} | "
                  f"{t['simulate_s']:.1f} |\n")
    (out_dir / f"{args.name}.md").write_text("".join(md))
    write_json(out_dir / f"{args.name}.json",
               {"provenance": prov, "budgets_pct": budgets, "hw": hws, "models": models,
                "traces": [{"model": m, "hw": h, **t} for (m, h), t in traces.items()],
                "headline": head, "rows": rows.to_dict(orient="records")})
    print()
    print(headline_md(head, floors))
    print(f"wrote {out_dir / (args.name + '.md')} and .json in {prov['elapsed_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
