"""Hardware profiles: the numbers the simulator and planner use for one GPU and its link.

A profile is a TOML file in ``uvm_sched/hw/profiles/`` (or any path). Every number is a
table ``{value = ..., source = "...", low = ..., high = ...}``: the source names the public
measurement (with its setting) or vendor document it comes from, or begins ``assumed:`` and
says how it was chosen; ``low``/``high`` (same unit as ``value``) are its plausible range --
for a measured constant the measurement spread, for an assumed one the span of what is
published or physically possible. Figures are reported across that range
(``benchmarks/bench_sensitivity.py``), because until a GPU measures a constant, the range is
what we know about it.
A flag (``access_counter_migration``) is ``{value = true|false, source = "..."}``.
"""
from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any, Mapping

from .._errors import Error

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["HardwareProfile", "load_profile", "profile_names", "ProfileError"]

_DIR = Path(__file__).with_name("profiles")
_TEXT = ("name", "description", "sources", "ranges")


class ProfileError(Error, ValueError):
    """A hardware profile is missing, malformed, or has an impossible number."""


@dataclasses.dataclass(frozen=True)
class HardwareProfile:
    """One GPU, its host link and the UVM driver's behaviour on it.

    Units: bytes, bytes per second, seconds, FLOP/s.
    """

    name: str
    description: str
    device_capacity_bytes: int  # usable device memory
    peak_flops_fp32: float
    peak_flops_bf16: float  # dense tensor-core peak (also used for fp16)
    hbm_bandwidth_Bps: float
    h2d_prefetch_Bps: float  # cudaMemPrefetchAsync host -> device
    d2h_prefetch_Bps: float  # cudaMemPrefetchAsync device -> host (planned eviction)
    h2d_fault_Bps: float  # demand-fault driven migration host -> device
    d2h_evict_Bps: float  # driver eviction under oversubscription, device -> host
    remote_access_Bps: float  # device reading host memory in place (accessed-by)
    fault_batch_latency_s: float  # fixed cost of servicing one fault batch
    fault_batch_bytes: int  # bytes migrated per fault batch (a VA-block's worth at most)
    page_bytes: int  # migration granule of the fault path
    va_block_bytes: int  # the driver's VA block (eviction/prefetch unit), 2 MiB
    copy_engines: int  # independent copy engines usable each way
    duplex_Bps: float  # aggregate bytes/s over both directions while both copy at once
    action_call_s: float  # host time of one cudaMemPrefetchAsync / cudaMemAdvise call
    access_counter_migration: bool  # the driver migrates remotely read data by access counts
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict, compare=False)
    # field -> (low, high), same unit as the value; a field left out has (value, value)
    ranges: Mapping[str, tuple] = dataclasses.field(default_factory=dict, compare=False)

    @property
    def remote_read_Bps(self) -> float:
        """Rate of the device reading host memory in place: the profile's remote rate,
        never above what the host->device direction of the link carries."""
        return min(self.remote_access_Bps, self.h2d_prefetch_Bps)

    @property
    def remote_write_Bps(self) -> float:
        """Rate of the device writing host memory in place: the remote rate, never above
        the device->host direction of the link (writes load that direction)."""
        return min(self.remote_access_Bps, self.d2h_prefetch_Bps)

    def transfer_s(self, nbytes: int, direction: str = "h2d", *, fault: bool = False) -> float:
        """Seconds to move ``nbytes`` over the link (``direction`` ``h2d``/``d2h``)."""
        if direction == "h2d":
            bw = self.h2d_fault_Bps if fault else self.h2d_prefetch_Bps
        elif direction == "d2h":
            bw = self.d2h_evict_Bps if fault else self.d2h_prefetch_Bps
        else:
            raise ValueError(f"direction must be 'h2d' or 'd2h', not {direction!r}")
        return nbytes / bw

    def recalibrated(self, measurements: Mapping[str, Any] | str | Path) -> "HardwareProfile":
        """A copy with fields replaced by measurements.

        ``measurements``: a mapping or a JSON file ``{"fields": {name: value, ...},
        "source": "...", "date": "..."}`` (the GPU calibration kit writes one). Unknown
        field names are rejected.
        """
        data: Mapping[str, Any] = (measurements if isinstance(measurements, Mapping)
                                   else json.loads(Path(measurements).read_text()))
        fields = data.get("fields")
        if not isinstance(fields, Mapping):
            raise ProfileError("calibration JSON needs a 'fields' object of name -> value")
        known = {f.name: f for f in dataclasses.fields(self)} 
        src = data.get("source", "calibration measurement")
        date = data.get("date", "")
        changes: dict[str, Any] = {}
        for k, v in fields.items():
            if k not in known or k in _TEXT:
                raise ProfileError(f"calibration names unknown profile field {k!r}")
            changes[k] = v if isinstance(getattr(self, k), bool) else type(getattr(self, k))(v)
        return self.with_measured(changes,
                                  {k: f"measured: {src} {date}".strip() for k in changes})

    def with_measured(self, values: Mapping[str, Any], sources: Mapping[str, str],
                      **text: str) -> "HardwareProfile":
        """A copy with ``values`` (field -> measured value, the field's unit) and their
        ``sources``; a measurement outside a field's plausible range widens the range.
        ``text``: a new ``name``/``description``. Checked as a profile read from a file."""
        ranges = dict(self.ranges)
        for k, v in values.items():
            if k in ranges:  # (a flag has no range)
                lo, hi = ranges[k]
                ranges[k] = (min(lo, v), max(hi, v))
        changes: dict[str, Any] = {**values, **text}
        return dataclasses.replace(self, **changes, sources={**self.sources, **sources},
                                   ranges=ranges)  # (__post_init__ checks it)

    def uncertain(self) -> list[str]:
        """Names of the numeric fields whose plausible range is wider than one value."""
        return [k for k, (lo, hi) in self.ranges.items() if lo < hi]

    def with_value(self, key: str, value: float) -> "HardwareProfile":
        """A copy with field ``key`` set to ``value`` (unit of the field), which must lie
        in the field's plausible range ``ranges[key]``; the source says so."""
        if key not in self.ranges:
            raise ProfileError(f"profile {self.name}: no numeric field {key!r}; fields: "
                               f"{', '.join(sorted(self.ranges))}")
        lo, hi = self.ranges[key]
        if not lo <= value <= hi:
            raise ProfileError(f"profile {self.name}: {key} = {value!r} is outside its "
                               f"plausible range [{lo!r}, {hi!r}]; use recalibrated() for a "
                               f"measured value")
        v = type(getattr(self, key))(value)
        sources = {**self.sources, key: f"varied within its range: {value!r}"}
        return dataclasses.replace(self, **{key: v}, sources=sources)

    def __post_init__(self) -> None:
        full = {f.name: self.ranges.get(f.name, (getattr(self, f.name),) * 2)
                for f in dataclasses.fields(self)
                if f.name not in _TEXT and f.type not in ("bool", bool)}  # a flag has no range
        object.__setattr__(self, "ranges", full)
        self._check()  # a profile built by hand is checked as one read from a file

    def _check(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name in ("name", "description"):
                if not isinstance(v, str):
                    raise ProfileError(f"profile {v!r}: {f.name} must be a string")
                continue
            if f.name in ("sources", "ranges"):
                continue
            if f.type in ("bool", bool):
                if not isinstance(v, bool):
                    raise ProfileError(f"profile {self.name}: {f.name} must be true or false, "
                                       f"got {v!r}")
                continue
            want_int = f.type in ("int", int)
            if isinstance(v, bool) or not isinstance(v, int if want_int else (int, float)):
                raise ProfileError(f"profile {self.name}: {f.name} must be "
                                   f"{'a whole number' if want_int else 'a number'}, got {v!r}")
            if not (v > 0 and math.isfinite(v)):
                raise ProfileError(f"profile {self.name}: {f.name} must be > 0 and finite, "
                                   f"got {v!r}")
        for k, (lo, hi) in self.ranges.items():
            if not (isinstance(lo, (int, float)) and isinstance(hi, (int, float))
                    and 0 < lo <= hi and math.isfinite(hi)):
                raise ProfileError(f"profile {self.name}: {k} range must be 0 < low <= high "
                                   f"(finite numbers), got low={lo!r}, high={hi!r}")
        if self.va_block_bytes % self.page_bytes:
            raise ProfileError(
                f"profile {self.name}: va_block_bytes {self.va_block_bytes:,} is not a multiple "
                f"of page_bytes {self.page_bytes:,}"
            )


def profile_names() -> list[str]:
    """Names of the profiles shipped with the package."""
    return sorted(p.stem for p in _DIR.glob("*.toml"))


def load_profile(name_or_path: "str | Path | HardwareProfile") -> HardwareProfile:
    """Load a shipped profile by name (``"h200-pcie5"``) or a TOML file by path."""
    if isinstance(name_or_path, HardwareProfile):
        return name_or_path
    p = Path(name_or_path)
    if not p.suffix and not p.exists():
        p = _DIR / f"{name_or_path}.toml"
        if not p.exists():
            raise ProfileError(
                f"unknown hardware profile {name_or_path!r}; shipped: {', '.join(profile_names())}"
            )
    from .._files import input_file

    try:
        input_file(p, "hardware profile", 1 << 20, ProfileError)  # a profile is ~2 KiB
        raw = tomllib.loads(p.read_bytes().decode("utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ProfileError(f"{p}: cannot read hardware profile ({e})") from None
    except UnicodeDecodeError:
        raise ProfileError(f"{p}: not a hardware profile (binary, not UTF-8 TOML text)") from None
    typed: dict[str, Any] = {}
    sources: dict[str, str] = {}
    ranges: dict[str, tuple] = {}
    for f in dataclasses.fields(HardwareProfile):
        if f.name in ("sources", "ranges"):
            continue
        if f.name not in raw:
            raise ProfileError(f"{p}: profile lacks {f.name!r}")
        entry = raw[f.name]
        if f.name in ("name", "description") and not isinstance(entry, dict):
            typed[f.name] = entry
            continue
        if f.type in ("bool", bool):  # a flag has no range
            if not isinstance(entry, dict) or set(entry) != {"value", "source"} \
                    or not str(entry["source"]).strip() or not isinstance(entry["value"], bool):
                raise ProfileError(f"{p}: {f.name} must be {{value = true|false, source = "
                                   f"\"...\"}} (a non-empty source), got {entry!r}")
            sources[f.name], typed[f.name] = entry["source"], entry["value"]
            continue
        if not isinstance(entry, dict) or set(entry) != {"value", "source", "low", "high"} \
                or not str(entry["source"]).strip():
            raise ProfileError(f"{p}: {f.name} must be {{value = ..., source = \"...\", "
                               f"low = ..., high = ...}} (a non-empty source), got {entry!r}")
        sources[f.name] = entry["source"]
        v, lo, hi = (_number(p, f, entry[k], k) for k in ("value", "low", "high"))
        if not lo <= v <= hi:
            raise ProfileError(f"{p}: {f.name} needs low <= value <= high, got low={lo!r}, "
                               f"value={v!r}, high={hi!r}")
        typed[f.name], ranges[f.name] = v, (lo, hi)
    return HardwareProfile(**typed, sources=sources, ranges=ranges)  # (checked by __post_init__)


def _number(p: Path, f: dataclasses.Field, v: Any, key: str) -> "int | float":
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ProfileError(f"{p}: {f.name} {key} is {v!r}, expected a finite number")
    if f.type in ("int", int):
        if v != int(v):
            raise ProfileError(f"{p}: {f.name} {key} is {v!r}, expected a whole number")
        return int(v)
    return float(v)
