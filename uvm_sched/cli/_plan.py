"""``uvm-sched plan``: plan prefetches and evictions for a memory budget, and save the plan.

The rule: the plan's own estimate (the planner's queue model) is printed as an estimate and
never as the result: ``uvm-sched simulate TRACE --plan FILE`` runs the plan through the
simulator's Unified Memory model, and that measured figure is the one the tables quote. The
trace, the profile, the budget and the output file are all checked before planning starts.
"""
from __future__ import annotations

import argparse
import time
from typing import Any

from .._fmt import fmt_bytes, fmt_count, fmt_pct, fmt_seconds
from . import _args, _inputs
from ._output import EXIT_OK, PROG, Out, UsageError, clean, output, part, table, writable

EXAMPLES = ("  uvm-sched plan gpt2.parquet --budget 50% -o plan.json\n"
            "  uvm-sched plan gpt2.parquet --budget 12GiB --hw gh200-c2c --mode sampled "
            "--sample-rate 0.1 -o plan.parquet\n")

_PREDICTED_SHOWN = ("ideal_s", "stall_s", "bytes_h2d", "bytes_d2h", "peak_resident_bytes")


def add_arguments(p: argparse.ArgumentParser) -> None:
    _args.trace_arg(p)
    p.add_argument("--budget", default=_args.DEFAULT_BUDGET,
                   help="device memory budget (default 50%%)")
    _args.hw_arg(p)
    _args.compute_times_arg(p)
    _args.mode_arg(p)
    p.add_argument("--sample-rate", type=_args.fraction, metavar="P",
                   help="sampled mode: probability that one access is observed, in (0, 1] "
                        "(default 1)")
    p.add_argument("--noise", type=_args.nonnegative, metavar="TICKS",
                   help="sampled mode: standard deviation of the observed tick, in ticks "
                        "(default 0)")
    p.add_argument("--method", choices=("greedy", "lp"), default="greedy",
                   help="greedy (default: the planner the runtime uses) or lp: offline, "
                        "sampled mode on a trace with accesses; the LP bound's optimum "
                        "guides the selection (needs highspy), priced beside the greedy plan")
    p.add_argument("-o", "--output", metavar="FILE", help="plan file to write (.json or .parquet)")


def _fmt_any(key: str, v: Any) -> str:
    """A figure by its key's unit suffix: ``*_s`` seconds, ``*bytes*`` bytes, else a count."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return str(v)
    if key.endswith("_s"):
        return fmt_seconds(v)
    if "bytes" in key:
        return fmt_bytes(v)
    return fmt_count(v) if float(v).is_integer() else f"{v:.3g}"


def run(args: argparse.Namespace, out: Out) -> int:
    # bad input first, before any missing part
    trace = _inputs.load_trace(args.trace, args.device, args.assume_tick_us,
                                args.compute_times)
    hw = _inputs.profile(args.hw)
    _inputs.check_budget_syntax([args.budget])
    dest = writable(args.output, args.trace) if args.output else None
    plan_fn = part("uvm_sched.planner", "plan", "the planner")
    opts: dict[str, Any] = {}
    if args.sample_rate is not None:
        opts["sample_rate"] = args.sample_rate
    if args.noise is not None:
        opts["noise"] = args.noise
    mode, why = _inputs.planner_mode(trace, args.mode)
    if opts and mode != "sampled":
        raise UsageError(f"--sample-rate/--noise only apply in sampled mode; this run's mode: "
                         f"{why}")
    if args.method != "greedy":
        if mode != "sampled":
            raise UsageError(f"--method {args.method} plans from the trace's accesses (sampled "
                             f"mode); this run's mode: {why}")
        opts["method"] = args.method
    with out.progress(description="planning") as bar:
        budget = _inputs.budget_bytes(args.budget, trace.peak_bytes, hw)
        bar.step(f"planning for {fmt_bytes(budget)} ({mode})")
        t0 = time.perf_counter()
        plan = plan_fn(trace, budget, hw, mode=args.mode, **opts)
        elapsed = time.perf_counter() - t0
    if dest is not None:
        with output(dest) as tmp:
            plan.save(tmp)
    summary = plan.summary()
    meta = {k: v for k, v in plan.meta.items() if k != "alloc_sizes"}
    meta["alloc_count"] = len(plan.meta.get("alloc_sizes", ()))
    if out.json:
        out.emit_json(clean({"path": str(dest) if dest else None, "actions": len(plan),
                             "plan_s": elapsed, "meta": meta, "summary": summary}))
        return EXIT_OK
    peak = trace.peak_bytes
    out.stdout.print(
        f"plan ({plan.meta.get('mode', args.mode)}) for {fmt_bytes(budget)} on {hw.name}: "
        f"{fmt_pct(budget / peak) if peak else '-'} of peak {fmt_bytes(peak)}, "
        f"{fmt_count(plan.meta['period_events'])} allocator events per iteration, "
        f"{fmt_count(len(plan))} actions (planned in {fmt_seconds(elapsed)})", markup=False)
    out.stdout.print(f"planner mode: {plan.meta.get('mode_reason', why)}", markup=False)
    lp = plan.meta.get("lp")
    if isinstance(lp, dict):
        out.stdout.print(
            f"LP-guided: {lp['fallback']}" if "fallback" in lp else
            f"LP-guided: LP bound {fmt_seconds(lp['bound_s'])} per iteration "
            f"({fmt_count(lp['columns'])} columns, {lp['ticks_per_slot']} tick(s) per slot, "
            f"{fmt_seconds(lp['lp_s'])}); kept: {plan.meta.get('pricing', {}).get('chosen', 'plan')}", markup=False)
    rows = [(a, fmt_count(v["count"]), fmt_bytes(v["bytes"])) for a, v in summary.items()
            if v["count"]]
    out.stdout.print(table("actions per iteration", ("action", "count", "bytes"), rows,
                           right=(1, 2)))
    _print_estimate(out, plan)
    if dest is not None:
        out.note(f"wrote {dest}")
    else:
        out.note("(plan not saved; pass -o plan.json to keep it)")
    return EXIT_OK


def _print_estimate(out: Out, plan) -> None:
    """The planner's own estimate, said to be one (the simulator's figure is the result)."""
    pred = plan.meta.get("predicted")
    if not (isinstance(pred, dict) and pred):
        return
    shown = [(k, v) for k, v in pred.items() if k in _PREDICTED_SHOWN]
    if not shown:
        return
    out.stdout.print("planner's own estimate: " + ", ".join(
        f"{k.removesuffix('_s').removesuffix('_bytes').replace('_', ' ')} {_fmt_any(k, v)}"
        for k, v in shown)
        + (" (times assume 1 µs per tick: the trace has no clock)"
           if plan.meta.get("tick_time_source") == "unknown" else ""), markup=False)
    out.stdout.print(
        "  (its queue model while planning: copies at the link's prefetch rate, a late "
        "prefetch or a waited-for eviction counted whole as stall, no demand faults; "
        f"`{PROG} simulate TRACE --plan FILE` runs the plan through the simulator's "
        "Unified Memory model -- faults, eviction, overlap with compute -- and that "
        "measured figure is the one the tables quote: expect the two to differ)",
        markup=False)
