"""The planner: from a learned iteration and a memory budget to a Plan.

``plan(trace, budget, hw, mode)`` (see ``_planner`` for the algorithm) returns a ``Plan``;
``Plan.load(path)`` reads one back.
"""
from ._plan import ACTIONS, PLAN_VERSION, Plan, PlanError
from ._planner import MODES, plan

__all__ = ["plan", "Plan", "PlanError", "ACTIONS", "PLAN_VERSION", "MODES"]
