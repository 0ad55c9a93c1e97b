"""``uvm-sched demo``: the whole job on a small built-in model -- record it on meta tensors,
plan for a budget, simulate every policy, write the HTML report.

The rule: the demo runs the same parts, in the same order, as a user's ``record``, ``plan``,
``simulate`` and ``report``, so its figure is one a user can reproduce by hand. Its default
model is recorded at the zoo's training sizes, like ``record`` and the benchmark tables, so
its row is the tables' row; ``--small`` is the smallest setting (seconds; the tests use it).
"""
from __future__ import annotations

import argparse
import time
from typing import Any

from .._fmt import fmt_bytes, fmt_pct, fmt_ratio, fmt_seconds
from . import _args, _inputs, _results
from ._output import (EXIT_OK, Out, UsageError, clean, part, report_note, table, writable,
                      write_report)

DEMO_REPORT = "uvm_sched_demo.html"
DEMO_DEFAULT = {"model": "gpt2_small", "iters": 3}
DEMO_SMALL = {"model": "unet", "batch": 16, "image": 128, "iters": 3}

EXAMPLES = ("  uvm-sched demo\n  uvm-sched demo --small -o /tmp/demo.html\n"
            "  uvm-sched demo --model resnet50 --batch 8 --budget 30% --hw gh200-c2c\n")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--small", action="store_true",
                   help=f"the smallest setting ({DEMO_SMALL['model']} batch {DEMO_SMALL['batch']}, "
                        f"{DEMO_SMALL['image']} px images): seconds instead of a minute")
    p.add_argument("--model", help=f"zoo model (default {DEMO_DEFAULT['model']})")
    p.add_argument("--batch", type=_args.positive_int,
                   help="batch size (default: the model's training size, as record uses; "
                        "uvm-sched record --list shows them)")
    p.add_argument("--seq", type=_args.positive_int, help="tokens per sample (text models)")
    p.add_argument("--image", type=_args.positive_int, help="image side in pixels (vision models)")
    p.add_argument("--iters", type=_args.positive_int, help="iterations to record (default 3)")
    p.add_argument("--budget", default=_args.DEFAULT_BUDGET,
                   help="device memory budget (default 50%%)")
    _args.hw_arg(p)
    _args.plotly_arg(p, "file")
    p.add_argument("-o", "--output", default=DEMO_REPORT,
                   help=f"HTML report to write (default ./{DEMO_REPORT})")
    p.add_argument("--no-report", action="store_true", help="skip the HTML report")


def _preset(args: argparse.Namespace) -> dict[str, Any]:
    """The model and sizes to record: the preset, with the options given on top."""
    preset: dict[str, Any] = dict(DEMO_SMALL if args.small else DEMO_DEFAULT)
    if args.model is not None and args.model != preset["model"]:
        # another model: the preset's sizes belong to the preset's model
        preset = {"model": args.model, "iters": preset["iters"]}
    for k in ("batch", "seq", "image", "iters"):
        if getattr(args, k) is not None:
            preset[k] = getattr(args, k)
    return preset


def run(args: argparse.Namespace, out: Out) -> int:
    preset = _preset(args)
    hw = _inputs.profile(args.hw)
    _inputs.check_budget_syntax([args.budget])
    dest = None if args.no_report else writable(args.output)
    zoo_names = part("uvm_sched.trace.zoo", "names", "the model zoo")
    record = part("uvm_sched.trace.zoo", "record", "the model zoo")
    plan_fn = part("uvm_sched.planner", "plan", "the planner")
    simulate = part("uvm_sched.sim", "simulate", "the simulator")
    policies = list(part("uvm_sched.sim", "POLICIES", "the simulator"))
    report: Any = part("uvm_sched.viz", "report", "the HTML report") if dest else None
    if preset["model"] not in zoo_names():
        raise UsageError(f"unknown model {preset['model']!r}; the zoo has: "
                         f"{', '.join(zoo_names())}")
    sizes = _inputs.zoo_sizes(preset["model"], preset.get("batch"), preset.get("seq"),
                              preset.get("image"))
    names = list(dict.fromkeys(["ideal", *policies]))
    timings: dict[str, float] = {}
    js = None
    t_all = time.perf_counter()
    with out.progress(total=3 + len(names) + (1 if dest else 0), description="demo") as bar:
        bar.step(f"recording {preset['model']} on meta tensors")
        t0 = time.perf_counter()
        trace = record(preset["model"], iters=preset["iters"], hw=hw.name, **sizes)
        for k in ("batch", "seq", "image"):  # the sizes the zoo actually used
            preset[k] = trace.meta.get(k, preset.get(k))
        timings["record_s"] = time.perf_counter() - t0
        bar.advance()
        budget = _inputs.budget_bytes(args.budget, trace.peak_bytes, hw)
        bar.step(f"planning for {fmt_bytes(budget)}")
        t0 = time.perf_counter()
        plan = plan_fn(trace, budget, hw)  # mode "auto": sampled, the recording has accesses
        timings["plan_s"] = time.perf_counter() - t0
        bar.advance()
        results = {}
        t0 = time.perf_counter()
        for name in names:
            bar.step(f"simulating {name}")
            if name == "uvm-sched":
                results[name] = _results.as_uvm_sched(simulate(trace, plan, hw, budget=budget))
            else:
                results[name] = simulate(trace, name, hw, budget=budget)
            bar.advance()
        timings["simulate_s"] = time.perf_counter() - t0
        if dest is not None:
            bar.step("drawing the report")
            t0 = time.perf_counter()
            title = (f"uvm_sched demo: {preset['model']} batch {preset['batch']}, "
                     f"budget {fmt_bytes(budget)} on {hw.name}")
            html = report(trace, plan=plan, results=list(results.values()), title=title,
                          plotly=args.plotly)
            js = write_report(dest, html, args.plotly)
            timings["report_s"] = time.perf_counter() - t0
            bar.advance()
    timings["total_s"] = time.perf_counter() - t_all
    ideal = results["ideal"]
    rows = []
    for name, res in results.items():
        r = _results.result_row(res, ideal)
        r["policy"] = name
        rows.append(r)
    peak = trace.peak_bytes
    if out.json:
        out.emit_json(clean({"model": preset["model"], "batch": preset["batch"],
                             "seq": preset.get("seq"), "image": preset.get("image"),
                             "iters": preset["iters"], "hw": hw.name,
                             "peak_bytes": peak, "budget_bytes": budget, "results": rows,
                             "plan": {"actions": len(plan), "summary": plan.summary(),
                                      "mode": plan.meta["mode"],
                                      "mode_reason": plan.meta["mode_reason"]},
                             "report": str(dest) if dest else None,
                             "plotly_js": str(js) if dest and js else None,
                             "timings": timings}))
        return EXIT_OK
    _print(out, preset["model"], trace, hw, budget, rows, results)
    out.stdout.print(f"planner mode (uvm-sched): {plan.meta['mode_reason']}", markup=False)
    if dest is not None:
        out.note(report_note(dest, js, "the timeline report"))
    out.note(f"done in {fmt_seconds(timings['total_s'])}")
    return EXIT_OK


def _print(out: Out, model: str, trace, hw, budget: int, rows: list[dict[str, Any]],
           results: dict) -> None:
    """The demo's tables for humans: the trace, the budget, every policy, the fastest."""
    peak = trace.peak_bytes
    info = _inputs.trace_info(trace)
    out.stdout.print(f"{model} at {_inputs.sizes_text(_inputs.sizes_of(trace.meta))}",
                     markup=False)
    out.stdout.print(_inputs.trace_line(info), markup=False)
    _results.print_budget_line(out, peak, budget, hw.name)
    out.stdout.print(table(f"every policy at {fmt_pct(budget / peak) if peak else '-'} of peak "
                           "(iteration time, slowdown vs ideal, stall, bytes moved each way, "
                           "fault batches)",
                           _results.RESULT_COLS, [_results.result_cells(r) for r in rows],
                           right=range(1, 7)))
    if "bound" in results:
        out.stdout.print(_results.BOUND_NOTE, markup=False)
    best = min((r for r in rows if r["policy"] not in ("ideal", "bound")),
               key=lambda r: r["iteration_time_s"], default=None)
    if best is not None:
        out.stdout.print(f"fastest real policy: {best['policy']} at {fmt_ratio(best['slowdown'])} "
                         f"of ideal while holding {fmt_bytes(budget)} instead of {fmt_bytes(peak)}",
                         markup=False)
