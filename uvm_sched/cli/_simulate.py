"""``uvm-sched simulate``: one policy, or a saved plan, against the ideal run.

The rule: a saved plan is replayed only on the trace it was made for (its blocks are that
trace's); on another trace it is an error, or with ``--force`` a one-line warning. A lower
bound is a limit, not a run, and is said to be one. Every option (the budget, the policy,
the tuning candidates, the plan) is checked before the first simulation.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from .._fmt import fmt_ratio, fmt_seconds
from . import _args, _inputs, _results
from ._output import EXIT_OK, Out, UsageError, clean, part, table

EXAMPLES = ("  uvm-sched simulate gpt2.parquet --policy demand --budget 50%\n"
            "  uvm-sched simulate gpt2.parquet --plan plan.json --hw h200-pcie5\n")


def add_arguments(p: argparse.ArgumentParser) -> None:
    _args.trace_arg(p)
    p.add_argument("--policy", help="ideal, demand, prefetch-on-alloc, swap-activations, bound, "
                                    "uvm-sched (default uvm-sched)")
    p.add_argument("--plan", metavar="FILE", help="replay a saved plan instead of planning")
    _args.force_arg(p)
    p.add_argument("--budget", help="device memory budget (default: the plan's, else 50%%)")
    _args.hw_arg(p)
    _args.compute_times_arg(p)
    _args.mode_arg(p)
    _args.tune_arg(p)


def run(args: argparse.Namespace, out: Out) -> int:
    # bad input first, before any missing part
    trace = _inputs.load_trace(args.trace, args.device, args.assume_tick_us,
                                args.compute_times)
    hw = _inputs.profile(args.hw)
    if args.budget is not None:
        _inputs.check_budget_syntax([args.budget])
    plan = _inputs.load_plan(args.plan) if args.plan else None
    if plan is not None:
        _inputs.check_plan_fits(plan, trace, args.force)
    known = list(part("uvm_sched.sim", "POLICIES", "the simulator"))
    if plan is not None and args.policy not in (None, "uvm-sched"):
        raise UsageError("--plan replays a saved plan; leave out --policy (or say uvm-sched)")
    policy = "uvm-sched" if plan is not None else (args.policy or "uvm-sched")
    _results.policies(policy, known)
    if args.budget is None and plan is not None:
        budget = int(plan.meta["budget_bytes"])
    else:  # as --help says: the plan's budget, else 50% (not the device's capacity)
        budget = _inputs.budget_bytes(args.budget or _args.DEFAULT_BUDGET, trace.peak_bytes, hw)
    if args.tune and (plan is not None or policy != "uvm-sched"):
        raise UsageError("--tune plans candidates for the uvm-sched policy; it does not apply "
                         "to a saved plan or another policy")
    why = (plan.meta.get("mode_reason") or plan.meta.get("mode")) if plan is not None \
        else _inputs.planner_mode(trace, args.mode)[1] if policy == "uvm-sched" else None
    results = _results.simulate_policies(trace, hw, budget, [policy], out, plan=plan,
                                         mode=args.mode,
                                         tune=_inputs.check_tune(args.tune, args.mode))
    ideal = results["ideal"]
    res = results[policy]
    row = _results.result_row(res, ideal)
    row["policy"] = policy if plan is None else f"plan {Path(args.plan).name}"
    if out.json:
        d = res.to_dict()
        d["slowdown"] = row["slowdown"]
        out.emit_json(clean({"trace": args.trace, "hw": hw.name, "budget_bytes": budget,
                             "peak_bytes": trace.peak_bytes, "time_source": trace.time_source,
                             "result": d, "planner_mode": why,
                             "ideal": ideal.to_dict()}))
        return EXIT_OK
    _results.print_budget_line(out, trace.peak_bytes, budget, hw.name)
    out.stdout.print(_results.time_line(trace), markup=False)
    if why:
        out.stdout.print(f"planner mode: {why}", markup=False)
    t = table(None, _results.RESULT_COLS,
              [_results.result_cells(_results.result_row(ideal, ideal)),
               _results.result_cells(row)], right=range(1, 7))
    out.stdout.print(t)
    if policy == "bound":
        out.stdout.print(f"no schedule can beat {fmt_seconds(res.iteration_time_s)} "
                         f"({fmt_ratio(row['slowdown'])} of ideal) at this budget on {hw.name}: "
                         "a lower bound, not a run (nothing was moved)", markup=False)
        return EXIT_OK
    _print_details(out, res, plan)
    return EXIT_OK


def _print_details(out: Out, res, plan) -> None:
    """Where the stall went, the planner's own estimate beside the measured stall, and the
    guard ``--tune`` kept."""
    br = getattr(res, "stall_breakdown", None) or {}
    if br:
        out.stdout.print("stall breakdown: " + ", ".join(f"{k} {fmt_seconds(v)}"
                                                         for k, v in br.items()),
                         markup=False)
    pred = (plan.meta.get("predicted") or {}) if plan is not None else {}
    if "stall_s" in pred:
        out.stdout.print(
            f"the planner estimated a {fmt_seconds(pred['stall_s'])} stall while planning (its "
            f"queue model); the simulator measures {fmt_seconds(res.stall_time_s)}, with demand "
            "faults, the driver's eviction and overlap with compute -- this figure is the "
            "one to quote", markup=False)
    tuned = res.counters.get("tuned_guard")
    if tuned is not None:
        times = ", ".join(f"{k[len('tuning_'):-2]} {fmt_seconds(v)}"
                          for k, v in res.counters.items()
                          if k.startswith("tuning_") and k.endswith("_s"))
        out.stdout.print(f"tuned: kept {tuned} (iteration time per candidate: {times})",
                         markup=False)
