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
               if f.name not in ("name", "description", "sources", "ranges")]
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
