"""``uvm-sched compare``: every policy side by side at one or more budgets, and the
savings/slowdown frontier.

The rule: the command prints what the package finds. The runs come from
``uvm_sched.sim.compare`` and the frontier from ``uvm_sched.sim.savings_frontier`` (the same
function ``uvm_sched.viz.frontier`` draws with, so ``--plot`` and the table agree); this module
only orders and formats them. Every budget is read before the first simulation.
"""
from __future__ import annotations

import argparse
from typing import Any

from .._fmt import fmt_bytes, fmt_pct, fmt_ratio
from . import _args, _inputs, _results
from ._output import EXIT_OK, Out, clean, part, save_figure, table, writable

DEFAULT_COMPARE_BUDGETS = "75%,50%,30%"

EXAMPLES = ("  uvm-sched compare gpt2.parquet\n"
            "  uvm-sched compare gpt2.parquet --budget 75%,50%,30% --hw gh200-c2c --json\n"
            "  uvm-sched compare gpt2.parquet --plot frontier.html\n")


def add_arguments(p: argparse.ArgumentParser) -> None:
    _args.trace_arg(p)
    p.add_argument("--budget", default=DEFAULT_COMPARE_BUDGETS,
                   help=f"comma-separated budgets (default "
                        f"{DEFAULT_COMPARE_BUDGETS.replace('%', '%%')})")
    _args.hw_arg(p)
    _args.compute_times_arg(p)
    _args.mode_arg(p)
    _args.tune_arg(p)
    p.add_argument("--policies", help="comma-separated subset of the policies (default all)")
    p.add_argument("--plot", metavar="FILE", help="also write the savings/slowdown frontier (HTML)")


def frontier_points(df) -> list[dict[str, Any]]:
    """The points of ``savings_frontier(df)`` on the frontier, as printed: policies in the
    frame's order, each from its largest saving down (saving: a fraction of peak)."""
    front = df[df["frontier"]]
    order = {p: i for i, p in enumerate(dict.fromkeys(df["policy"]))}
    pts = sorted(front.itertuples(), key=lambda r: (order[r.policy], -float(r.saving),
                                                    float(r.slowdown)))
    return [{"policy": r.policy, "saving": float(r.saving), "slowdown": float(r.slowdown),
             "budget_bytes": int(r.budget_bytes)} for r in pts]


def run(args: argparse.Namespace, out: Out) -> int:
    # bad input first, before any missing part
    trace = _inputs.load_trace(args.trace, args.device, args.assume_tick_us,
                                args.compute_times)
    hw = _inputs.profile(args.hw)
    specs = _inputs.budget_list(args.budget)
    _inputs.check_budget_syntax(specs)
    compare = part("uvm_sched.sim", "compare", "the simulator")
    savings_frontier = part("uvm_sched.sim", "savings_frontier", "the simulator")
    known = list(part("uvm_sched.sim", "POLICIES", "the simulator"))
    policies = _results.policies(args.policies, known)
    plot = writable(args.plot, args.trace) if args.plot else None
    frontier_fig: Any = part("uvm_sched.viz", "frontier", "plots") if plot else None
    import pandas as pd

    budgets = [_inputs.budget_bytes(s, trace.peak_bytes, hw) for s in specs]
    tune = _inputs.check_tune(args.tune, args.mode)
    why = _inputs.planner_mode(trace, args.mode)[1] if "uvm-sched" in policies else None
    frames = []
    with out.progress(total=len(budgets), description="comparing") as bar:
        for spec, b in zip(specs, budgets):
            bar.step(f"simulating {len(policies)} policies at {spec} ({fmt_bytes(b)})")
            frames.append(compare(trace, hw, [b], policies=policies, mode=args.mode,
                                  tune=tune))
            bar.advance()
    df = savings_frontier(pd.concat(frames, ignore_index=True))
    front = frontier_points(df)
    df = df.drop(columns="frontier")
    if plot is not None:
        save_figure(frontier_fig(df), plot)
    if out.json:
        out.emit_json(clean({"trace": args.trace, "hw": hw.name, "peak_bytes": trace.peak_bytes,
                             "time_source": trace.time_source, "planner_mode": why,
                             "rows": df.to_dict(orient="records"), "frontier": front,
                             "plot": str(plot) if plot else None}))
        return EXIT_OK
    _print(out, args.trace, trace, hw, df, front, why)
    if plot is not None:
        out.note(f"wrote {plot}")
    return EXIT_OK


def _print(out: Out, path: str, trace, hw, df, front: list[dict[str, Any]],
           why: str | None) -> None:
    """One table per budget, then the frontier."""
    peak = trace.peak_bytes
    out.stdout.print(f"{trace.meta.get('name') or path}: peak {fmt_bytes(peak)} on {hw.name}",
                     markup=False)
    out.stdout.print(_results.time_line(trace), markup=False)
    if why:
        out.stdout.print(f"planner mode (uvm-sched): {why}", markup=False)
    errors = df["error"] if "error" in df.columns else None
    for b, g in df.groupby("budget_bytes", sort=False):
        share = f"{fmt_pct(b / peak)} of peak" if peak else ""
        rows = []
        for i, r in zip(g.index, g.itertuples()):
            if errors is not None and isinstance(errors[i], str) and errors[i]:
                rows.append([r.policy, "infeasible", "-", "-", "-", "-", "-"])
                continue
            rows.append(_results.result_cells({
                "policy": r.policy, "iteration_time_s": r.iteration_time_s,
                "slowdown": r.slowdown, "stall_time_s": r.stall_time_s,
                "bytes_h2d": r.bytes_h2d, "bytes_d2h": r.bytes_d2h, "faults": r.faults}))
        out.stdout.print(table(f"budget {fmt_bytes(b)} ({share})", _results.RESULT_COLS[:7], rows,
                               right=range(1, 7)))
        if errors is not None:
            why = next((e for e in errors[g.index] if isinstance(e, str) and e), None)
            if why:
                out.stdout.print(f"  infeasible: {why}", markup=False)
    rows = [[f["policy"], fmt_pct(f["saving"]), fmt_bytes(f["budget_bytes"]),
             ("≥ " if f["policy"] == "bound" else "") + fmt_ratio(f["slowdown"])]
            for f in front if f["policy"] != "ideal"]
    out.stdout.print(table("frontier: memory saved vs slowdown",
                           ("policy", "memory saved", "budget", "slowdown"), rows,
                           right=(1, 2, 3)))
    if "bound" in set(df["policy"]):
        out.stdout.print(_results.BOUND_NOTE, markup=False)
