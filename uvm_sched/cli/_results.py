"""Simulation results as the commands show them: one row of figures per policy, the short
table columns, and running the simulator over a list of policies with a progress bar.

The rule: the simulator computes (``uvm_sched.sim``), this module only lays its results out
(seconds, bytes, counts), so ``simulate``, ``compare`` and ``demo`` show the same figures under
the same headers. A lower bound is shown as a limit (``≥``), never as a run.
"""
from __future__ import annotations

from typing import Any, Sequence

from .._fmt import fmt_bytes, fmt_count, fmt_pct, fmt_ratio, fmt_seconds
from ._output import Out, UsageError, part


def result_row(res, ideal) -> dict[str, Any]:
    """One policy's figures (seconds, bytes, counts) for tables and JSON."""
    return {
        "policy": res.policy if isinstance(res.policy, str) else "plan",
        "iteration_time_s": float(res.iteration_time_s),
        "slowdown": float(res.slowdown(ideal)) if ideal is not None else None,
        "stall_time_s": float(res.stall_time_s),
        "bytes_h2d": int(res.bytes_h2d),
        "bytes_d2h": int(res.bytes_d2h),
        "faults": int(res.faults),
        "peak_resident_bytes": int(res.peak_resident_bytes),
        "divergences": int(res.divergences),
    }


# short headers so the table fits an 80-column terminal; --help and the report spell them out
# (peak resident bytes is in --json and the report)
RESULT_COLS = ("policy", "time", "vs ideal", "stall", "host→dev", "dev→host", "faults")


def result_cells(r: dict[str, Any]) -> list[str]:
    if r["policy"] == "bound":
        # a limit, not a run: no schedule can beat its time, and at least its bytes must
        # cross the link (nothing was moved; faults are not modelled by the bound)
        return [r["policy"], "≥ " + fmt_seconds(r["iteration_time_s"]),
                "≥ " + fmt_ratio(r["slowdown"]), "≥ " + fmt_seconds(r["stall_time_s"]),
                "≥ " + fmt_bytes(r["bytes_h2d"], digits=1),
                "≥ " + fmt_bytes(r["bytes_d2h"], digits=1), "-"]
    return [r["policy"], fmt_seconds(r["iteration_time_s"]), fmt_ratio(r["slowdown"]),
            fmt_seconds(r["stall_time_s"]), fmt_bytes(r["bytes_h2d"], digits=1),
            fmt_bytes(r["bytes_d2h"], digits=1), fmt_count(r["faults"])]


BOUND_NOTE = ("bound: a limit, not a run -- no schedule can beat its time at this budget on "
              "this link (≥ bytes: what must cross the link at least)")


def policies(spec: str | None, known: Sequence[str]) -> list[str]:
    """The policies named in ``spec`` (comma-separated; all of ``known`` when empty)."""
    if not spec:
        return list(known)
    out = [p.strip() for p in spec.split(",") if p.strip()]
    bad = [p for p in out if p not in known]
    if bad:
        raise UsageError(f"unknown policy {bad[0]!r}; known: {', '.join(known)}")
    return out


def as_uvm_sched(res):
    """A result of simulating a Plan object, labelled as the planner's policy: the simulator
    names it "plan", while tables and the report know the planner as "uvm-sched"."""
    import dataclasses

    return dataclasses.replace(res, policy="uvm-sched") if dataclasses.is_dataclass(res) else res


def simulate_policies(trace, hw, budget_bytes: int, names: Sequence[str], out: Out, *,
                      plan=None, mode: str = "auto", label: str = "simulating",
                      tune: tuple = ()):
    """SimResults for ``ideal`` and each policy (a Plan stands in for ``uvm-sched`` when
    given, so the plan shown in a report is the one simulated)."""
    simulate = part("uvm_sched.sim", "simulate", "the simulator")
    names = list(dict.fromkeys(["ideal", *names]))
    results = {}
    with out.progress(total=len(names), description=label) as bar:
        for name in names:
            bar.step(f"{label}: {name}")
            if name == "uvm-sched" and plan is not None:
                results[name] = as_uvm_sched(simulate(trace, plan, hw, budget=budget_bytes))
            elif name == "uvm-sched":
                results[name] = simulate(trace, name, hw, budget=budget_bytes, mode=mode,
                                         tune=tune)
            else:
                results[name] = simulate(trace, name, hw, budget=budget_bytes)
            bar.advance()
    return results


def time_line(trace) -> str:
    """Where the simulated compute time comes from, and that a figure is one iteration's."""
    return (f"compute time: {trace.time_source}; iteration time = one iteration "
            f"({'marked' if len(trace.iteration_starts) else 'learned, else the whole trace'})")


def print_budget_line(out: Out, peak: int, budget: int, hw_name: str) -> None:
    share = f" ({fmt_pct(budget / peak)} of peak {fmt_bytes(peak)})" if peak else ""
    out.stdout.print(f"budget {fmt_bytes(budget)}{share} on {hw_name}", markup=False)
