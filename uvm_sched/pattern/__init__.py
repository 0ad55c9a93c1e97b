"""Pattern analysis: the iterations of a trace (step markers as ground truth, else a period
learned from the allocator events and kept only with evidence), block identity across
iterations, and per-block lifetime/idle statistics.

``analyze(trace) -> Pattern``; ``print(pattern)`` shows the characterisation,
``pattern.summary()`` returns it as a dict. Definitions are in ``_analyze``'s docstring,
the period detection (and its complexity) in ``_period``'s, the evidence a learned period
needs in ``_evidence``'s.
"""
from __future__ import annotations

from ._analyze import ACTIVATION_SHARE, CLASSES, Pattern, PatternError, analyze

__all__ = ["analyze", "Pattern", "PatternError", "CLASSES", "ACTIVATION_SHARE"]
