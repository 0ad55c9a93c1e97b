"""One reading of a memory budget, shared by the planner, the simulator and the CLI."""
from __future__ import annotations

import math

__all__ = ["resolve_budget", "MAX_BUDGET_BYTES"]

# No device, host or file system holds an exabyte: a budget over it is a typo (1e30GiB),
# and would overflow the int64 byte counts of the planner and simulator.
MAX_BUDGET_BYTES = 1 << 60


def resolve_budget(budget: "int | float | str | None", peak_bytes: int, *,
                   default_bytes: int | None = None) -> int:
    """A budget in bytes from ``budget``: an int (bytes), a string ``"50%"`` (percent of
    ``peak_bytes``), a string of bytes with an optional unit (``"40GiB"``, ``"40GB"``,
    ``"512MiB"``), or a float in (0, 1] (fraction of ``peak_bytes``). ``None`` gives
    ``default_bytes`` (an error where that is None too)."""
    if budget is None:
        if default_bytes is None:
            raise ValueError("no budget given; pass bytes (e.g. 40GiB) or a share of peak (e.g. 50%)")
        return int(default_bytes)
    if isinstance(budget, bool):
        raise TypeError(f"budget must be bytes, a fraction or a percentage, not {budget!r}")
    if isinstance(budget, float):
        if not (math.isfinite(budget) and 0 < budget <= 1):
            raise ValueError(f"a fractional budget must be in (0, 1], got {budget}")
        return int(budget * peak_bytes)
    if isinstance(budget, int):
        return _bounded(budget, budget)
    s = str(budget).strip().replace("_", "").replace(",", "")
    if s.endswith("%"):
        try:
            pct = float(s[:-1])
        except ValueError:
            raise ValueError(f"cannot read budget {budget!r}: expected e.g. '50%'") from None
        if not (math.isfinite(pct) and 0 < pct <= 100):
            raise ValueError(f"a percentage budget must be in (0, 100], got {budget!r}")
        nbytes = int(round(pct / 100 * peak_bytes))
        if nbytes <= 0 and peak_bytes <= 0:
            raise ValueError(f"budget {budget!r} of a peak of {peak_bytes:,} bytes is no bytes: "
                             "the trace allocates nothing (give bytes, e.g. 512MiB)")
        if nbytes <= 0:
            raise ValueError(f"budget {budget!r} of a {peak_bytes:,}-byte peak is less than "
                             "one byte; give a larger share (e.g. 50%) or bytes (e.g. 512MiB)")
        return nbytes
    units = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
             "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "b": 1}
    low = s.lower()
    for u, mult in units.items():  # longest suffixes first (dict order above)
        if low.endswith(u):
            num = low[: -len(u)].strip()
            break
    else:
        num, mult = low, 1
    try:
        value = float(num)
    except ValueError:
        raise ValueError(
            f"cannot read budget {budget!r}: give bytes (40GiB, 40GB, 123456) or a share of peak (50%)"
        ) from None
    if not math.isfinite(value):
        raise ValueError(f"budget must be a finite number of bytes, got {budget!r}")
    return _bounded(int(value * mult), budget)


def _bounded(nbytes: int, given) -> int:
    if nbytes <= 0:
        raise ValueError(f"budget must be positive, got {given!r}")
    if nbytes > MAX_BUDGET_BYTES:
        raise ValueError(f"budget {given!r} is {nbytes:,} bytes, over {MAX_BUDGET_BYTES:,} "
                         "(1 EiB): a typo? give e.g. 40GiB or 50%")
    return nbytes
