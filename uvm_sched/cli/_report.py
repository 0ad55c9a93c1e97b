"""``uvm-sched report``: an interactive HTML timeline of a trace, its plan and their
simulation (memory, lifetimes, copy engines, stalls).

The rule: the plan drawn is the plan simulated (a ``--plan`` stands in for the ``uvm-sched``
policy), and by default the report simulates ``demand`` and ``bound`` beside it, so its
verdict says both what doing nothing costs and what no schedule can beat. The page is
written whole or not at all, after the output and every input were checked.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from . import _args, _inputs, _results
from ._output import EXIT_OK, Out, clean, part, report_note, writable, write_report

EXAMPLES = ("  uvm-sched report gpt2.parquet -o report.html\n"
            "  uvm-sched report gpt2.parquet --plan plan.json -o report.html\n")


def add_arguments(p: argparse.ArgumentParser) -> None:
    _args.trace_arg(p)
    p.add_argument("--plan", metavar="FILE", help="a saved plan to draw and simulate")
    _args.force_arg(p)
    p.add_argument("--budget", help="budget to simulate at (default: the plan's, else 50%%)")
    _args.hw_arg(p)
    _args.mode_arg(p)
    p.add_argument("--policies", help="policies to simulate for the stall and copy-engine views "
                                      "(default demand,bound,uvm-sched)")
    p.add_argument("--no-sim", action="store_true", help="draw the trace (and plan) only")
    p.add_argument("--title", help="page title")
    _args.plotly_arg(p, "inline")
    p.add_argument("-o", "--output", default="report.html", metavar="FILE",
                   help="HTML file to write (default report.html)")


def run(args: argparse.Namespace, out: Out) -> int:
    # bad input first, before any missing part
    trace = _inputs.load_trace(args.trace, args.device, args.assume_tick_us)
    hw = _inputs.profile(args.hw)
    if args.budget is not None:
        _inputs.check_budget_syntax([args.budget])
    dest = writable(args.output, args.trace, args.plan)
    report = part("uvm_sched.viz", "report", "the HTML report")
    plan = _inputs.load_plan(args.plan) if args.plan else None
    if plan is not None:
        _inputs.check_plan_fits(plan, trace, args.force)
    if args.budget is None and plan is not None:
        budget = int(plan.meta["budget_bytes"])
    else:
        budget = _inputs.budget_bytes(args.budget or _args.DEFAULT_BUDGET, trace.peak_bytes, hw)
    results = []
    if not args.no_sim:
        known = list(part("uvm_sched.sim", "POLICIES", "the simulator"))
        # bound: the report's verdict says what no schedule can beat
        policies = _results.policies(
            args.policies or ",".join(p for p in ("demand", "bound", "uvm-sched") if p in known),
            known)
        sims = _results.simulate_policies(trace, hw, budget, policies, out, plan=plan,
                                          mode=args.mode)
        results = list(sims.values())
        if plan is None and "uvm-sched" in policies:
            out.note(f"planner mode: {_inputs.planner_mode(trace, args.mode)[1]}")
    with out.progress(description="report") as bar:
        bar.step("drawing the report")
        title = args.title or f"uvm_sched: {trace.meta.get('name') or Path(args.trace).name}"
        html = report(trace, plan=plan, results=results or None, title=title,
                      plotly=args.plotly)
    js = write_report(dest, html, args.plotly)
    if out.json:
        out.emit_json({"path": str(dest), "bytes": dest.stat().st_size, "budget_bytes": budget,
                       "plotly_js": str(js) if js else None,
                       "results": [clean(r.to_dict()) for r in results]})
    else:
        out.note(report_note(dest, js))
    return EXIT_OK
