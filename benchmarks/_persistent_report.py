"""bench_persistent.py's results as Markdown and JSON (``write``): the summary first, then
one row per workload, hardware and budget."""
from __future__ import annotations

from pathlib import Path

from bench_persistent import FAULT, FULL, HEAVY_SHARE, TARGET
from bench_quality import provenance, provenance_md, write_json


def _r(x) -> str:
    return "-" if x is None else ("inf" if x == float("inf") else f"{x:.2f}")


def summary_md(doc: dict) -> list[str]:
    s, labels = doc["summary"], doc["modes"]
    n = len(doc["rows"])
    lines = ["## Summary", "",
             f"| mode | slower than demand (of {n}) | plan/demand, median | worst | "
             f"persistent-heavy rows | full sampling's saving / the mode's, median | worst | "
             f"within {TARGET}x |", "|---|---|---|---|---|---|---|---|"]
    for m in labels:
        x = s[m]
        lines.append(f"| {m} | {len(x['slower_than_demand'])} | "
                     f"{_r(x['median_plan_over_demand'])} | {_r(x['worst_plan_over_demand'])} | "
                     f"{x['heavy_rows']} | {_r(x['median_full_over_mode_saving'])} | "
                     f"{_r(x['worst_full_over_mode_saving'])} | "
                     f"{x['within_target']} of {x['heavy_rows']} |")
    for m in labels:
        if s[m]["slower_than_demand"]:
            lines.append(f"\n{m} slower than demand: " + ", ".join(s[m]["slower_than_demand"]))
    if FAULT in s and s[FAULT].get("misses"):
        lines.append(f"\n{FAULT} beyond {TARGET}x of full sampling's saving: "
                     + ", ".join(s[FAULT]["misses"]))
    lines += warmup_md(doc)
    if doc["infeasible"]:
        lines.append("\nInfeasible (below one tick's working set, no policy runs): " + ", ".join(
            f"{x['workload']} {x['hw']} {x['budget_pct']}%" for x in doc["infeasible"]))
    for m, why in doc["not_run"].items():
        lines.append(f"\nNot run: {m} ({why}).")
    lines += ["", f"Saving: (T_demand - T_mode) / (T_demand - T_ideal), the share of demand "
              f"paging's time over ideal that the plan removes. Persistent-heavy: persistent "
              f"blocks >= {HEAVY_SHARE:.0%} of the peak; rows where full sampling ({FULL}) "
              "saves under 1% are left out of the ratio. `auto` on a trace that carries "
              "accesses is sampled at rate 1 (the runtime's auto gets the same touches from "
              "PyTorch's dispatch tracer); its plan is then the same as sampled 1.0's and is "
              "simulated once.", ""]
    return lines


def warmup_md(doc: dict) -> list[str]:
    """The fault-sampled warm-up's cost and result per setting of its rule (the modes whose
    samples carry ``planner.fault_samples``'s attrs)."""
    s = doc["summary"]
    labels = [m for m in doc["modes"] if any("probe" in r["modes"][m] for r in doc["rows"])]
    if not labels:
        return []
    lines = ["", "Warm-up probing per setting of its rule (Note [Fault probes]: every open "
             "list probed each iteration until none is open, at most the cap; "
             f"`{FAULT}` is the default, cap 16, full share): the warm-up iterations the rule "
             "ran, the bytes it moved to the host over the whole warm-up and in its busiest "
             "iteration (x the trace's peak; as many come back by faults), over all rows.", "",
             "| setting | warm-up iterations, median | max | bytes moved (x peak), median | "
             "max | busiest iteration (x peak), max | lists left open, median | "
             f"within {TARGET}x | slower than demand |", "|---|---|---|---|---|---|---|---|---|"]

    def med(v):
        v = sorted(v)
        return v[len(v) // 2] if v else None

    for m in labels:
        xs = [r["modes"][m]["probe"] | {"peak": r["peak_bytes"]} for r in doc["rows"]
              if "probe" in r["modes"][m]]
        it = [x["iterations"] for x in xs]
        tot = [x["probe_bytes"] / x["peak"] for x in xs]
        busy = [x["probe_bytes_per_iter"] / x["peak"] for x in xs]
        lines.append(f"| {m} | {med(it)} | {max(it)} | {_r(med(tot))} | {_r(max(tot))} | "
                     f"{_r(max(busy))} | {med([x['open'] for x in xs])} | "
                     f"{s[m]['within_target']} of {s[m]['heavy_rows']} | "
                     f"{len(s[m]['slower_than_demand'])} |")
    return lines


def rows_md(doc: dict) -> list[str]:
    labels = doc["modes"]
    head = ("| workload | hw | budget | persistent | demand/ideal | best bound/ideal | "
            + " | ".join(labels) + " | probes |")
    lines = ["## Rows", "", "Per mode: plan/demand (saving); `*`: priced back to advice-only "
             "or no plan by the planner's own pricing. `probes` (the fault-sampled warm-up's "
             "cost): warm-up iterations the rule ran; bytes moved to the host over the "
             "warm-up (x the peak); probes / bytes in the busiest warm-up iteration "
             "(x the peak); persistent + non-persistent blocks probed, lists left open.",
             "", head, "|" + "---|" * (7 + len(labels))]
    for r in doc["rows"]:
        cells = []
        for m in labels:
            v = r["modes"][m]
            mark = "" if v["pricing"] in (None, "plan") else "*"
            cells.append(f"{v['plan_over_demand']:.2f} ({v['saving']:.0%}){mark}")
        lines.append(f"| {r['workload']} | {r['hw']} | {r['budget_pct']}% | "
                     f"{r['persistent_share']:.0%} | {r['demand_s'] / r['ideal_s']:.2f} | "
                     f"{'≥ ' + format(r['bound_s'] / r['ideal_s'], '.2f')}"
                     f"{' (lp)' if r['bound'] != 'bound' else ''} | " + " | ".join(cells)
                     + f" | {_probe(r)} |")
    return lines


def _probe(r: dict) -> str:
    x = r.get("probe")
    if not x:
        return "-"
    return (f"{x['iterations']} it., {x['probe_bytes'] / r['peak_bytes']:.2f}x; "
            f"{x['probes_per_iter']} / {x['probe_bytes_per_iter'] / 2**20:,.0f} MiB "
            f"({x['probe_bytes_per_iter'] / r['peak_bytes']:.2f}x), "
            f"{x['persistent_blocks']}+{x['local_blocks']}, open {x['open']}")


def write(doc: dict, out: Path, argv) -> None:
    prov = provenance(argv)
    prov["elapsed_s"] = round(doc["elapsed_s"], 1)
    md = ["# Planning modes where persistent state dominates (simulated)", "",
          provenance_md(prov) + f"- elapsed: {prov['elapsed_s']} s", ""]
    md += summary_md(doc) + rows_md(doc)
    text = "\n".join(md) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / "persistent.md").write_text(text)
    write_json(out / "persistent.json", {"provenance": prov, **doc})
    print(text)
