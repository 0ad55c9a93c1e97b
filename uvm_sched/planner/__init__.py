"""The planner: from a learned iteration and a memory budget to a Plan."""
from ._plan import ACTIONS, PLAN_VERSION, Plan, PlanError

__all__ = ["Plan", "PlanError", "ACTIONS", "PLAN_VERSION"]
