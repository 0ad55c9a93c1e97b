"""Shipped hardware profiles: every number has a source and a plausible range; the G10
profile is the artifact's."""
from __future__ import annotations

import dataclasses
import json

import pytest

from uvm_sched.hw import HardwareProfile, ProfileError, load_profile, profile_names

SHIPPED = ["h200-pcie5", "h100-pcie5", "a100-40gb-pcie4", "gh200-c2c", "a100-40gb-g10"]


def test_all_contract_profiles_are_shipped():
    assert set(SHIPPED) <= set(profile_names())


@pytest.mark.parametrize("name", SHIPPED)
def test_every_number_has_a_source_and_sane_ordering(name):
    p = load_profile(name)
    numeric = [f.name for f in dataclasses.fields(HardwareProfile)
               if f.name not in ("name", "description", "sources", "ranges")
               and f.type not in ("bool", bool)]  # a flag has a source, no range
    for f in numeric:
        assert p.sources.get(f, "").strip(), f"{name}: {f} has no source"
        lo, hi = p.ranges[f]
        assert lo <= getattr(p, f) <= hi, f"{name}: {f} outside its range"
        if lo < hi:  # an uncertain constant is measured (with its setting) or assumed
            assert p.sources[f].startswith(("measured:", "assumed:")), (name, f)
    # fault-driven migration is never faster than a planned copy
    assert p.h2d_fault_Bps <= p.h2d_prefetch_Bps
    assert p.va_block_bytes == 2 * 1024 * 1024
    assert p.fault_batch_bytes <= p.va_block_bytes


def test_g10_profile_has_exactly_the_artifact_constants():
    p = load_profile("a100-40gb-g10")
    assert p.device_capacity_bytes == 40 * 2**30
    for f in ("h2d_prefetch_Bps", "d2h_prefetch_Bps", "h2d_fault_Bps", "d2h_evict_Bps"):
        assert getattr(p, f) == 15.754e9
    assert p.fault_batch_latency_s == 45e-6
    assert p.page_bytes == 4096


def test_gh200_link_is_nvlink_c2c_class():
    p = load_profile("gh200-c2c")
    assert p.h2d_prefetch_Bps == 375e9 and p.h2d_prefetch_Bps <= 450e9


def test_recalibration_from_a_measurement_file(tmp_path):
    f = tmp_path / "cal.json"
    f.write_text(json.dumps({"fields": {"h2d_fault_Bps": 9.5e9, "fault_batch_latency_s": 4e-5},
                             "source": "calibration kit", "date": "2025-01-01"}))
    p = load_profile("h200-pcie5").recalibrated(f)
    assert p.h2d_fault_Bps == 9.5e9 and p.fault_batch_latency_s == 4e-5
    assert "measured" in p.sources["h2d_fault_Bps"]
    with pytest.raises(ProfileError, match="unknown profile field"):
        load_profile("h200-pcie5").recalibrated({"fields": {"warp_speed": 1}})


def _profile_text(**change):
    """The shipped h200-pcie5 profile's TOML with ``h2d_fault_Bps``'s keys replaced."""
    from uvm_sched.hw import _DIR
    text = (_DIR / "h200-pcie5.toml").read_text()
    head, rest = text.split("[h2d_fault_Bps]\n", 1)
    body, tail = rest.split("\n\n", 1)
    keys = dict(line.split(" = ", 1) for line in body.splitlines())
    keys.update(change)
    body = "\n".join(f"{k} = {v}" for k, v in keys.items() if v is not None)
    return f"{head}[h2d_fault_Bps]\n{body}\n\n{tail}"


@pytest.mark.parametrize("change, message", [
    (dict(low=None), r"h2d_fault_Bps must be \{value = \.\.\., source"),
    (dict(low="13e9"), r"h2d_fault_Bps needs low <= value <= high, got low=13000000000\.0, "
                       r"value=12000000000\.0, high=30000000000\.0"),
    (dict(high="true"), r"h2d_fault_Bps high is True, expected a finite number"),
    (dict(source='"  "'), r"h2d_fault_Bps must be .*a non-empty source"),
])
def test_a_profile_without_a_valid_range_or_source_is_refused_by_name(tmp_path, change,
                                                                       message):
    f = tmp_path / "bad.toml"
    f.write_text(_profile_text(**change))
    with pytest.raises(ProfileError, match=message):
        load_profile(f)
    f.write_text(_profile_text())
    assert load_profile(f).ranges["h2d_fault_Bps"] == (3e9, 30e9)


def test_with_value_stays_inside_the_range_and_recalibration_widens_it():
    p = load_profile("h200-pcie5")
    assert "duplex_Bps" in p.uncertain() and "va_block_bytes" not in p.uncertain()
    lo, hi = p.ranges["duplex_Bps"]
    q = p.with_value("duplex_Bps", lo)
    assert q.duplex_Bps == lo and q.ranges == p.ranges and "varied" in q.sources["duplex_Bps"]
    assert p.with_value("fault_batch_bytes", 1 << 20).fault_batch_bytes == 1 << 20
    with pytest.raises(ProfileError, match=r"h200-pcie5: duplex_Bps = 1000000000000\.0 is outside "
                                           r"its plausible range \[50000000000\.0, "
                                           r"100000000000\.0\]"):
        p.with_value("duplex_Bps", 1e12)
    with pytest.raises(ProfileError, match="no numeric field 'warp_speed'"):
        p.with_value("warp_speed", 1)
    r = p.recalibrated({"fields": {"duplex_Bps": 120e9}})
    assert r.ranges["duplex_Bps"] == (lo, 120e9)
