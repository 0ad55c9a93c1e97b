"""One scenario, two engines: each ``kernels/`` microbenchmark's simulator twin gives the
figure worked out by hand from the profile, the table covers what ``kernels.measure``
writes, and ``uvm-sched sidebyside`` prints measured | simulated | ratio ("no GPU" without
a measurement)."""
from __future__ import annotations

import dataclasses
import json
import math
import re

import pytest

from conftest import REPO

from uvm_sched.hw import load_profile
from uvm_sched.sim import TWINS, side_by_side
from uvm_sched.sim._twins import read_measurements, simulate_twin

MiB, GiB = 1 << 20, 1 << 30
N = 128 * MiB  # the twins' buffer here: 64 VA blocks (a multiple of 2 x 16 pieces)


def _hw():
    """Round numbers: copies 10 GB/s in, 5 GB/s out; faults 2 GB/s + 0.1 ms per 2 MiB
    batch; eviction 1 GB/s; remote access 4 GB/s; 64 KiB pages."""
    return dataclasses.replace(
        load_profile("h200-pcie5"), name="round",
        h2d_prefetch_Bps=10e9, d2h_prefetch_Bps=5e9, h2d_fault_Bps=2e9, d2h_evict_Bps=1e9,
        remote_access_Bps=4e9, fault_batch_latency_s=1e-4, fault_batch_bytes=2 * MiB,
        page_bytes=64 * 1024, va_block_bytes=2 * MiB)


def _sim(name):
    return simulate_twin(name, _hw(), N)


FAULT_S = N / 2e9 + (N // (2 * MiB)) * 1e-4  # every byte migrated, one batch per 2 MiB


# name -> the figure worked by hand from _hw() (see each comment)
BY_HAND = {
    "copy h2d alone": 10e9,  # the prefetch rate in
    "copy d2h alone": 5e9,  # the prefetch rate out
    # both at once on a full-duplex link: 2N bytes over the slower direction's N / 5 GB/s
    "copy both ways at once": 2 * N / (N / 5e9),
    "fault-driven migration": N / FAULT_S,
    # the second half of the buffer evicts the first (N/2 written back at 1 GB/s), serially
    "fault-driven migration, 2x oversubscribed": N / (FAULT_S + (N / 2) / 1e9),
    # one batch per VA block, migrating the one 64 KiB page the 4 KiB read rounds up to
    "isolated fault (per VA block)": 1e-4 + 64 * 1024 / 2e9,
    "parallel sparse faults (per VA block)": 1e-4 + 64 * 1024 / 2e9,
    # fresh pages: one batch latency per 2 MiB, nothing over the link
    "first touch of fresh memory": (GiB // (2 * MiB)) * 1e-4,
    "eviction": 1e9,  # N written back, beyond two eviction-free halves
    "remote read, preferred_host + accessed_by": 4e9,  # in place, host -> device
    "remote write, preferred_host + accessed_by": 4e9,  # in place, device -> host
}


@pytest.mark.parametrize("name", sorted(BY_HAND))
def test_each_twin_gives_the_figure_worked_by_hand(name):
    assert _sim(name) == pytest.approx(BY_HAND[name], rel=1e-6)


def test_the_single_advice_twins_run_through_the_engine():
    # what the engine does with one advice alone is its own mechanism; here only that the
    # twin runs and measures the kernel (a positive, finite rate no faster than the link)
    for t in TWINS:
        if "alone" in t.name and t.name.startswith("remote"):
            v = _sim(t.name)
            assert 0 < v < 10e9 and math.isfinite(v), (t.name, v)


def test_the_reference_engine_gives_the_same_figures(monkeypatch):
    fast = {t.name: _sim(t.name) for t in TWINS}
    monkeypatch.setenv("UVM_SCHED_SIM_KERNEL", "python")
    for t in TWINS:
        assert _sim(t.name) == pytest.approx(fast[t.name], rel=1e-9), t.name


def test_every_twin_reads_a_figure_kernels_measure_writes():
    src = (REPO / "kernels" / "measure.py").read_text()
    assert len({t.name for t in TWINS}) == len(TWINS)
    for t in TWINS:
        where, key, *sub = t.measured.split(".")
        assert where in ("fields", "extra"), t
        assert f'{where}["{key}"]' in src, (t.name, t.measured)
        if sub:  # remote_Bps.<op>_<advice>: the loop's labels
            op, label = re.fullmatch(r"(read|write)_(.+)", sub[0]).groups()
            assert f'("{label}", ' in src and f'"{op}"' in src, t.measured
        if where == "fields":
            assert hasattr(_hw(), key), t.measured  # a profile field, recalibrated from it


def test_side_by_side_divides_the_simulated_figure_by_the_measured_one():
    doc = {"fields": {"h2d_prefetch_Bps": 20e9, "fault_batch_latency_s": 2e-4},
           "extra": {"buffer_bytes": N, "remote_Bps": {"read_both": 8e9}}, "source": "x"}
    rows = {r["scenario"]: r for r in side_by_side(doc, _hw())}
    assert list(rows) == [t.name for t in TWINS]
    h2d = rows["copy h2d alone"]
    assert h2d["measured"] == 20e9 and h2d["ratio"] == pytest.approx(0.5)
    iso = rows["isolated fault (per VA block)"]
    assert iso["ratio"] == pytest.approx(BY_HAND[iso["scenario"]] / 2e-4)
    assert rows["eviction"]["measured"] is None and rows["eviction"]["ratio"] is None
    assert rows["remote read, preferred_host + accessed_by"]["measured"] is None  # a field
    # without a measurement: the simulated column alone
    alone = side_by_side(None, _hw(), N)
    assert all(r["measured"] is None and r["ratio"] is None for r in alone)
    assert [r["simulated"] for r in alone] == pytest.approx([r["simulated"] for r in rows.values()])


def test_a_buffer_below_the_twins_granule_is_refused_with_the_numbers():
    with pytest.raises(ValueError, match=r"at least 67,108,864 bytes.*got 1,048,576"):
        simulate_twin("eviction", _hw(), MiB)
    with pytest.raises(ValueError, match="unknown scenario 'nope'"):
        simulate_twin("nope", _hw(), N)


def test_a_file_that_is_not_a_measurement_is_refused_naming_it(tmp_path):
    bad = tmp_path / "cal.json"
    bad.write_text('{"source": "x"}')
    with pytest.raises(ValueError, match=r"cal.json: not a kernels.measure result"):
        read_measurements(bad)
    bad.write_text("{")
    with pytest.raises(ValueError, match=r"cal.json: cannot read the measurements"):
        read_measurements(bad)


def test_the_command_prints_no_gpu_without_a_measurement_and_ratios_with_one(tmp_path):
    from test_cli import run_cli

    r = run_cli("sidebyside", "--gib", "0.125")
    assert r.returncode == 0, r.stderr
    assert "measured: no GPU" in r.stdout
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("copy h2d alone")]
    assert len(lines) == 1 and "no GPU" in lines[0] and "50 GB/s" in lines[0]
    cal = tmp_path / "calibration.json"
    cal.write_text(json.dumps({"fields": {"h2d_prefetch_Bps": 25e9}, "source": "on a test",
                               "extra": {"buffer_bytes": N}}))
    out = tmp_path / "sbs.json"
    r = run_cli("sidebyside", "--measured", cal, "-o", out)
    assert r.returncode == 0, r.stderr
    row = next(ln for ln in r.stdout.splitlines() if ln.startswith("copy h2d alone"))
    assert "25 GB/s" in row and "50 GB/s" in row and "2.00" in row
    assert "not measured" in r.stdout  # the rows the file lacks
    doc = json.loads(out.read_text())
    assert doc["measured_source"] == "on a test" and len(doc["rows"]) == len(TWINS)
    r = run_cli("sidebyside", "--measured", tmp_path / "none.json")
    assert r.returncode == 2 and "none.json: cannot read the measurements" in r.stderr
