"""Pattern analysis: the iteration period of a trace (learned from the allocator events,
markers checked), block identity across iterations, and per-block lifetime/idle statistics.

``analyze(trace) -> Pattern``; ``print(pattern)`` shows the characterisation,
``pattern.summary()`` returns it as a dict. Definitions are in ``_analyze``'s docstring,
the period detection (and its complexity) in ``_period``'s.
"""
from __future__ import annotations

from ._analyze import ACTIVATION_SHARE, CLASSES, Pattern, PatternError, analyze

__all__ = ["analyze", "Pattern", "PatternError", "CLASSES", "ACTIVATION_SHARE"]
