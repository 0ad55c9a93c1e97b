"""Gather what a GPU session measured into ``benchmarks/results/gpu_<name>.md|json``: the
validation kit's results (``scripts/gpu_check.sh OUT``), the plan actions' costs
(``scripts/gpu_action_costs.py --out costs.json``, one file per run) and any further
end-to-end runs (``scripts/gpu_e2e.py --out run.json``).

    python benchmarks/gpu_report.py --kit OUT --costs costs.json [costs2.json ...]
        [--runs run.json ...] --name h200 [--notes notes.md]

The Markdown file is the kit's summary, then one table per action-cost run (host time of
the call, time until the device finished it, rate), then the extra runs, then ``--notes``
(the reading, written by hand) appended as it is.  The JSON file holds the same data
(the kit's per-step log tails left out: they are in the kit's ``logs/``).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
MiB = 1 << 20


def cost_table(doc: dict, title: str) -> list[str]:
    """Markdown lines for one ``gpu_action_costs.py`` result."""
    lines = [f"### {title}", "", f"{doc['device']}, torch {doc['torch']}, backend "
             f"{doc['backend']}; medians of the repetitions.", "",
             "| MiB | action | call (µs) | done (µs) | GB/s |", "|---|---|---|---|---|"]
    for r in doc["rows"]:
        rate = "" if r["GBps"] is None else f"{r['GBps']:.2f}"
        lines.append(f"| {r['bytes'] // MiB} | {r['action']} | {r['call_us']:.1f} | "
                     f"{r['done_us']:.1f} | {rate} |")
    lines += ["", "With matrix products queued ahead on the same (legacy default) stream:", "",
              "| MiB | action | queued (ms) | call (µs) | queue left after the call (ms) |",
              "|---|---|---|---|---|"]
    for r in doc.get("while_busy", []):
        lines.append(f"| {r['bytes'] // MiB} | {r['action']} | {r['queued_s'] * 1e3:.0f} | "
                     f"{r['call_us']:.1f} | {r['queue_left_after_call_s'] * 1e3:.1f} |")
    return lines + [""]


def run_lines(path: Path, doc: dict) -> list[str]:
    """Markdown lines for one extra ``gpu_e2e.py`` run."""
    sched = doc.get("scheduler") or {}
    native = sched.get("native") or doc.get("stats") or {}
    return [f"- `{path.name}`: {doc['model']} {doc['mode']}, budget "
            f"{doc.get('budget_bytes') or 'none'} bytes (device shrunk: "
            f"{doc.get('device_shrunk')}), plan options {doc.get('plan_opts')}; "
            f"{doc['steps']} steps, armed from step {doc.get('armed_from')}, median "
            f"{doc['iter_ms_median']:.1f} ms over {doc.get('measured_steps')} steps; "
            f"plans {sched.get('plans')}, actions issued {native.get('actions_issued')}"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kit", type=Path, required=True, help="the kit's OUT directory")
    ap.add_argument("--costs", type=Path, nargs="*", default=[])
    ap.add_argument("--runs", type=Path, nargs="*", default=[])
    ap.add_argument("--name", required=True, help="results/gpu_NAME.md|json")
    ap.add_argument("--notes", type=Path, help="hand-written reading, appended to the .md")
    ap.add_argument("--dir", type=Path, default=RESULTS, help="where to write (default: "
                    "benchmarks/results)")
    args = ap.parse_args(argv)
    kit = json.loads((args.kit / "results.json").read_text())
    for step in kit["steps"]:
        step.pop("log_tail", None)
    costs = [json.loads(p.read_text()) for p in args.costs]
    runs = [json.loads(p.read_text()) for p in args.runs]
    cmd = "python benchmarks/gpu_report.py " + " ".join(sys.argv[1:] if argv is None else argv)
    md = [f"<!-- written by: {cmd} -->", ""]
    md += (args.kit / "summary.md").read_text().splitlines() + [""]
    if costs:
        md += ["## What each plan action costs", "",
               "`python scripts/gpu_action_costs.py --out costs.json --sizes ... --reps ...`", ""]
        for i, (p, doc) in enumerate(zip(args.costs, costs), 1):
            md += cost_table(doc, f"Run {i} (`{p.name}`)")
    if runs:
        md += ["## Further end-to-end runs", ""]
        for p, doc in zip(args.runs, runs):
            md += run_lines(p, doc)
        md.append("")
    if args.notes:
        md += args.notes.read_text().splitlines()
    stem = args.dir / f"gpu_{args.name}"
    stem.with_suffix(".md").write_text("\n".join(md) + "\n")
    stem.with_suffix(".json").write_text(json.dumps(
        {"kit": kit, "action_costs": costs, "runs": runs}, indent=1, default=str) + "\n")
    print(f"wrote {stem.with_suffix('.md')} and {stem.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
