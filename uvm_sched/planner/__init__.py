"""The planner: from a learned iteration and a memory budget to a Plan.

``plan(trace, budget, hw, mode)`` (see ``_planner`` for the algorithm) returns a ``Plan``;
``Plan.load(path)`` reads one back; ``draw_samples(trace, pattern)`` draws the access samples
of ``mode="sampled"`` from a trace's ground truth (the frame format a sampling source gives).
"""
from ._plan import ACTIONS, PLAN_VERSION, Plan, PlanError, PlanMismatchWarning, trace_fingerprint
from ._faults import fault_samples, samples_from_faults
from ._planner import MODES, PLAN_OPTIONS, plan, resolve_mode, tuning_candidates
from ._sampling import draw_samples, samples_from_touches

__all__ = ["plan", "Plan", "PlanError", "ACTIONS", "PLAN_VERSION", "MODES", "draw_samples",
           "samples_from_touches", "fault_samples", "samples_from_faults", "resolve_mode",
           "tuning_candidates", "trace_fingerprint", "PLAN_OPTIONS", "PlanMismatchWarning"]
