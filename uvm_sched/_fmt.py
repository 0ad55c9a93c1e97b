"""Human formatting of bytes, seconds, ratios and counts: the one place for it.

Binary units for bytes (GiB = 2**30), since device capacities and budgets are quoted that
way; SI prefixes for seconds. Every function returns a short string and accepts NaN/None
(printed as ``"-"``) so tables can show missing figures without special cases.
"""
from __future__ import annotations

import math

__all__ = ["fmt_bytes", "fmt_seconds", "fmt_ms", "fmt_ratio", "fmt_pct", "fmt_count", "byte_unit"]

_MISSING = "-"
_BYTE_UNITS = (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10),
               ("B", 1))


def _missing(x) -> bool:
    if x is None:
        return True
    try:
        return math.isnan(float(x))
    except (TypeError, ValueError):
        return True


def fmt_bytes(n, *, digits: int = 2) -> str:
    """Bytes as ``"512 B"``, ``"1.50 KiB"``, ``"3.25 GiB"`` (binary units, 1 KiB = 1024 B)."""
    if _missing(n):
        return _MISSING
    n = float(n)
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n < 1024:
        return f"{sign}{int(n)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        n /= 1024.0
        if n < 1024 or unit == "PiB":
            return f"{sign}{n:.{digits}f} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover


def fmt_seconds(s, *, digits: int = 3) -> str:
    """Seconds with a readable prefix: ``"12.3 ms"``, ``"4.56 s"``, ``"850 ns"``;
    ``digits`` significant digits. Beyond 100 minutes: ``"2.1 h"``."""
    if _missing(s):
        return _MISSING
    s = float(s)
    if abs(s) < 5e-10:  # below what ns precision shows: float noise around zero
        return "0 s"
    sign = "-" if s < 0 else ""
    a = abs(s)
    if a >= 6000:
        return f"{sign}{a / 3600:.1f} h"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
        if a >= scale or unit == "ns":
            v = a / scale
            # significant digits, without scientific notation
            decimals = max(0, digits - 1 - int(math.floor(math.log10(v))) if v > 0 else 0)
            return f"{sign}{v:.{decimals}f} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover


def fmt_ms(s, *, digits: int = 3) -> str:
    """Seconds as milliseconds with ``digits`` decimals (``"12.345 ms"``): one unit for a
    column or a title whose durations are compared with each other."""
    if _missing(s):
        return _MISSING
    return f"{float(s) * 1e3:,.{digits}f} ms"


def byte_unit(max_bytes) -> tuple[str, int]:
    """The largest binary unit in which ``max_bytes`` is at least 1, as (name, bytes):
    ``("GiB", 2**30)``; ``("B", 1)`` for 0 or NaN. For an axis that shows many sizes."""
    m = 0.0 if _missing(max_bytes) else abs(float(max_bytes))
    for name, div in _BYTE_UNITS:
        if m >= div:
            return name, div
    return "B", 1


def fmt_ratio(x, *, digits: int = 2) -> str:
    """A ratio as ``"1.23x"`` (e.g. a slowdown against the ideal run)."""
    if _missing(x):
        return _MISSING
    if math.isinf(float(x)):
        return "inf"
    return f"{float(x):.{digits}f}x"


def fmt_pct(x, *, digits: int = 1) -> str:
    """A fraction (0.5) as a percentage (``"50.0%"``)."""
    if _missing(x):
        return _MISSING
    return f"{100.0 * float(x):.{digits}f}%"


def fmt_count(n) -> str:
    """An integer count with thousands separators (``"1,234,567"``)."""
    if _missing(n):
        return _MISSING
    return f"{int(n):,}"
