"""Hardware profiles: the numbers the simulator and planner use for one GPU and its link.

A profile is a TOML file in ``uvm_sched/hw/profiles/`` (or any path). Every number is a
table ``{value = ..., source = "..."}``: the source names the paper, vendor document or
our own measurement, or says that it is an estimate (``assumed:``) and how it was chosen;
an entry may add ``low``/``high``, its plausible range. A flag is ``{value = true|false,
source = "..."}``.
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
    copy_engines: int  # independent copy engines usable each way (full duplex link)
    action_call_s: float  # host time of one cudaMemPrefetchAsync / cudaMemAdvise call
    access_counter_migration: bool  # the driver migrates remotely read data by access counts
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict, compare=False)

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
        sources = dict(self.sources)
        for k, v in fields.items():
            if k not in known or k in ("name", "description", "sources"):
                raise ProfileError(f"calibration names unknown profile field {k!r}")
            changes[k] = v if isinstance(getattr(self, k), bool) else type(getattr(self, k))(v)
            sources[k] = f"measured: {src} {date}".strip()
        out = dataclasses.replace(self, **changes, sources=sources)
        out._check()
        return out

    def __post_init__(self) -> None:
        self._check()  # a profile built by hand is checked as one read from a file

    def _check(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name in ("name", "description"):
                if not isinstance(v, str):
                    raise ProfileError(f"profile {v!r}: {f.name} must be a string")
                continue
            if f.name == "sources":
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
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for f in dataclasses.fields(HardwareProfile):
        if f.name == "sources":
            continue
        if f.name not in raw:
            raise ProfileError(f"{p}: profile lacks {f.name!r}")
        entry = raw[f.name]
        if isinstance(entry, dict):
            if "value" not in entry or not entry.get("source"):
                raise ProfileError(f"{p}: {f.name} needs both 'value' and 'source'")
            values[f.name], sources[f.name] = entry["value"], entry["source"]
        elif f.name in ("name", "description"):
            values[f.name] = entry
        else:
            raise ProfileError(f"{p}: {f.name} must be {{value = ..., source = \"...\"}}")
    typed = {}
    for f in dataclasses.fields(HardwareProfile):
        if f.name == "sources":
            continue
        v = values[f.name]
        if f.type in ("bool", bool) and not isinstance(v, bool):
            raise ProfileError(f"{p}: {f.name} value is {v!r}, expected true or false")
        if f.type in ("int", int, "float", float):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ProfileError(f"{p}: {f.name} value is {v!r}, expected a finite number")
            if f.type in ("int", int) and v != int(v):
                raise ProfileError(f"{p}: {f.name} value is {v!r}, expected a whole number")
            v = int(v) if f.type in ("int", int) else float(v)
        typed[f.name] = v
    return HardwareProfile(**typed, sources=sources)  # (checked by __post_init__)
