"""SimResult: what one simulation run measured over its window (the steady-state iteration)."""
from __future__ import annotations

import dataclasses
from typing import Any

from .._errors import Error

__all__ = ["SimResult", "BudgetError"]


class BudgetError(Error, ValueError):
    """The budget is below the bytes one tick's kernel touches: no schedule can run it."""


@dataclasses.dataclass
class SimResult:
    """Times in seconds, sizes in bytes, over the measured window (the last complete
    iteration, or the whole trace when it has no iteration markers).

    ``stall_breakdown`` splits ``stall_time_s`` by cause: ``fault`` (demand faults),
    ``eviction`` (waiting for room), ``link`` (waiting for copies in flight), ``host``
    (waiting for the launching thread, busy with prefetch/advise calls; Note [Host calls]
    in ``sim._mechanisms``). ``faults`` counts fault *batches* serviced. ``divergences``
    counts iterations in the window where a plan was disarmed. ``timeline`` has one row per
    tick of the window; ``transfers`` one row per copy (fault-path copies of one tick aggregated, ``block`` -1).
    ``counters`` holds extra figures (the byte ledger of the whole run, window ticks).
    ``actions`` (a Plan's runs only, else empty) has one row per plan action the executor
    carried out, over the WHOLE trace (warm-up iterations included, not only the window:
    filter on ``tick`` against ``counters["window_start"/"window_stop"]`` for the window):
    ``tick`` (trace tick), ``stage`` (``"pre"``: issued after the tick's allocations, before
    its kernel; ``"post"``: after its kernel and frees), ``action`` (a name from
    ``uvm_sched.planner.ACTIONS``), ``block`` (trace block id), ``event`` (the allocator-event
    ordinal within the iteration the action follows, i.e. the plan row's tick).
    ``time_source``: where the compute time of the run came from (the trace's
    ``time_source``: a GPU trace, a roofline, measured times spread over a roofline...).
    """

    policy: str
    hw: str
    budget_bytes: int
    iteration_time_s: float
    compute_time_s: float
    stall_time_s: float
    stall_breakdown: dict
    bytes_h2d: int
    bytes_d2h: int
    faults: int
    peak_resident_bytes: int
    divergences: int
    timeline: Any = dataclasses.field(repr=False, default=None)
    transfers: Any = dataclasses.field(repr=False, default=None)
    counters: dict = dataclasses.field(default_factory=dict, repr=False)
    actions: Any = dataclasses.field(repr=False, default=None)
    time_source: str = ""  # where the compute time came from (Trace.time_source)

    def slowdown(self, ideal: "SimResult") -> float:
        """``iteration_time_s`` over ``ideal``'s (1.0 = no slowdown)."""
        if ideal.iteration_time_s <= 0:
            return float("nan") if self.iteration_time_s <= 0 else float("inf")
        return self.iteration_time_s / ideal.iteration_time_s

    def to_dict(self) -> dict[str, Any]:
        """JSON-able fields (no DataFrames)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
             if f.name not in ("timeline", "transfers", "actions")}
        d["stall_breakdown"] = {k: float(v) for k, v in self.stall_breakdown.items()}
        d["counters"] = {k: (v if isinstance(v, (str, bool)) else float(v) if isinstance(v, float) else int(v))
                         for k, v in self.counters.items()}
        for k in ("budget_bytes", "bytes_h2d", "bytes_d2h", "faults", "peak_resident_bytes",
                  "divergences"):
            d[k] = int(d[k])
        for k in ("iteration_time_s", "compute_time_s", "stall_time_s"):
            d[k] = float(d[k])
        return d
