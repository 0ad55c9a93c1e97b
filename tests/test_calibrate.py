"""uvm_sched.calibrate: the probe's logic and arithmetic on the fake driver, whose clock
(tests/native/fake_clock.h) times every call from configured rates -- the probe must
recover those rates, stay within its budget and half the free memory, and leave nothing
behind -- and its use: the measured HardwareProfile, the Scheduler's first learn."""
from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent / "native"))
import fakecuda  # noqa: E402

import uvm_sched  # noqa: E402
from uvm_sched import native  # noqa: E402
from uvm_sched._calibrate import DUPLEX_FIELD, measure, profile_from  # noqa: E402
from uvm_sched.hw import load_profile  # noqa: E402

MiB = 1 << 20
G = 1e9

# (h2d, d2h, duplex cap, remote) GB/s, fault batch us, fault-path GB/s: a PCIe 4 card, a
# PCIe 5 one whose duplex cap binds, an asymmetric one (SM copies: d2h faster), a C2C one
LINKS = [(25, 20, 30, 12, 40, 8), (50, 50, 60, 25, 30, 12), (35, 53, 70, 20, 25, 10),
         (375, 297, 400, 300, 20, 100)]


def _env(h2d, d2h, duplex, remote, fault_us, fault_gbps, **more):
    return dict(FAKE_CUDA_H2D_GBPS=str(h2d), FAKE_CUDA_D2H_GBPS=str(d2h),
                FAKE_CUDA_DUPLEX_GBPS=str(duplex), FAKE_CUDA_REMOTE_GBPS=str(remote),
                FAKE_CUDA_FAULT_US=str(fault_us), FAKE_CUDA_FAULT_GBPS=str(fault_gbps),
                **{k: str(v) for k, v in more.items()})


@pytest.mark.parametrize("link", LINKS, ids=["pcie4", "pcie5-capped", "asymmetric", "c2c"])
def test_the_probe_recovers_the_fakes_configured_rates(link):
    h2d, d2h, duplex, remote, fault_us, fault_gbps = link
    with fakecuda.backend("fake", **_env(*link)):
        f = measure(0, 200)
    assert f["h2d_Bps"] == pytest.approx(h2d * G, rel=2e-3)
    assert f["d2h_Bps"] == pytest.approx(d2h * G, rel=2e-3)
    # both ways at once: the link's aggregate (the cap, or the sum when it does not bind),
    # each direction sized so both streams are busy the same time
    both = min(duplex, h2d + d2h) * G
    assert f["duplex_Bps"] == pytest.approx(both, rel=0.02)
    share = min(1, duplex / (h2d + d2h))
    assert f["duplex_h2d_Bps"] == pytest.approx(h2d * G * share, rel=0.02)
    assert f["duplex_d2h_Bps"] == pytest.approx(d2h * G * share, rel=0.02)
    # one fault batch = its latency + migrating the one 4 KiB page the write faulted
    assert f["fault_batch_s"] == pytest.approx(fault_us * 1e-6 + 4096 / (fault_gbps * G),
                                               rel=1e-3)
    # remote reads (the copy's device-local writes, at 2,000 GB/s, keep pace)
    assert f["remote_Bps"] == pytest.approx(remote * G, rel=2e-3)
    assert f["device_name"] == "Fake GPU 0"


@pytest.mark.parametrize("budget_ms", [20, 200, 1000])
@pytest.mark.parametrize("link", [LINKS[0], LINKS[3], (6, 5, 8, 1, 60, 2)],
                         ids=["pcie4", "c2c", "slow"])
def test_the_probe_stays_within_its_budget_of_device_time(budget_ms, link):
    with fakecuda.backend("fake", **_env(*link)):
        f = measure(0, budget_ms)
    assert 0 < f["device_s"] <= budget_ms / 1e3
    if budget_ms >= 200 and link[0] >= 25:
        assert f["device_s"] >= 0.25 * budget_ms / 1e3  # and uses a fair part of it


@settings(max_examples=25, deadline=None)
@given(h2d=st.floats(1, 500), d2h=st.floats(1, 500), cap=st.floats(0.5, 1.0),
       remote=st.floats(0.2, 1.0), fault_us=st.floats(5, 300), budget_ms=st.integers(20, 2000),
       free_mib=st.integers(16, 65536))
def test_on_any_link_the_probe_recovers_it_within_budget_and_memory_or_says_why(
        h2d, d2h, cap, remote, fault_us, budget_ms, free_mib):
    env = _env(h2d, d2h, max(h2d, d2h) + cap * min(h2d, d2h), remote * min(h2d, d2h), fault_us,
               min(h2d, d2h) / 2, FAKE_CUDA_FREE_BYTES=free_mib * MiB)
    with fakecuda.backend("fake", **env) as fake:
        try:
            f = measure(0, budget_ms)
        except (ValueError, native.UvmSchedError) as e:  # too small a budget, or memory
            assert re.search(r"budget of \d+ ms is too small|bytes free; the probe needs",
                             str(e)), e
            assert fake.live_allocations() == 0
            return
        asked = sum(c["bytes"] for c in fake.calls("cuMemAllocManaged") if c["rc"] == 0)
        assert fake.live_allocations() == 0
    assert asked <= free_mib * MiB // 2
    assert 0 < f["device_s"] <= budget_ms / 1e3
    # what a prefetch of N (h2d) or 2N (d2h) bytes achieves: the fake's 4 us per call
    # included -- on little free memory (small N) and a fast link that is the probe's error
    n = f["region_bytes"]
    assert f["h2d_Bps"] == pytest.approx(n / (n / (h2d * G) + 4e-6), rel=1e-3)
    assert f["d2h_Bps"] == pytest.approx(2 * n / (2 * n / (d2h * G) + 4e-6), rel=1e-3)
    assert f["fault_batch_s"] == pytest.approx(fault_us * 1e-6 + 4096 / (min(h2d, d2h) / 2 * G),
                                               rel=0.01)


def test_a_budget_too_small_for_a_slow_link_is_refused_with_the_budget_it_needs():
    with fakecuda.backend("fake", **_env(0.5, 0.5, 1, 0.2, 60, 0.5)) as fake:
        with pytest.raises(ValueError, match=r"budget of 20 ms is too small .* needs about \d+ ms"):
            measure(0, 20)
        assert fake.live_allocations() == 0


def test_the_probe_never_asks_for_more_than_half_the_free_memory_and_frees_it_all():
    free = 96 * MiB
    with fakecuda.backend("fake", FAKE_CUDA_FREE_BYTES=str(free)) as fake:
        f = measure(0, 1000)
        asked = [c["bytes"] for c in fake.calls("cuMemAllocManaged") if c["rc"] == 0]
        assert fake.live_allocations() == 0
        log = fake.lib.fake_cuda_log().decode()
    assert sum(asked) <= free // 2 and f["region_bytes"] % (2 * MiB) == 0
    assert "race" not in log and "destroyed stream" not in log
    assert f["free_bytes"] == free


def test_too_little_free_memory_is_an_error_naming_the_bytes():
    with fakecuda.backend("fake", FAKE_CUDA_FREE_BYTES=str(32 * MiB)) as fake:
        with pytest.raises(native.UvmSchedError, match=r"33,554,432 bytes free; the probe needs 67,108,864"):
            measure(0, 200)
        assert fake.live_allocations() == 0


@pytest.mark.parametrize("fail", ["cuMemAllocManaged:2", "cuMemsetD8Async:3",
                                  "cuMemcpyDtoDAsync:1", "cuEventElapsedTime:4",
                                  "cuMemPrefetchAsync:5"])
def test_a_driver_refusal_mid_probe_is_an_error_and_leaves_nothing_behind(fail):
    with fakecuda.backend("fake", FAKE_CUDA_FAIL=fail) as fake:
        with pytest.raises(native.UvmSchedError, match=fail.split(":")[0]):
            measure(0, 200)
        assert fake.live_allocations() == 0
        made = len(fake.calls("cuStreamCreate")) + len(fake.calls("cuEventCreate"))
        gone = len(fake.calls("cuStreamDestroy")) + len(fake.calls("cuEventDestroy"))
        assert made == gone


def test_calibrate_on_the_host_backend_says_there_is_no_device():
    with fakecuda.backend("host"):
        with pytest.raises(native.UvmSchedError, match="host backend has no device"):
            uvm_sched.calibrate()


@pytest.mark.parametrize("bad", [0, 19, 10_001, "200", True, math.nan])
def test_a_budget_outside_20_ms_to_10_s_is_refused(bad):
    with pytest.raises(ValueError, match="budget_ms"):
        measure(0, bad)


def test_the_measured_profile_names_its_source_and_keeps_what_was_not_measured():
    with fakecuda.backend("fake", **_env(*LINKS[1])):
        prof = uvm_sched.calibrate(0, base="a100-40gb-pcie4")
    base = load_profile("a100-40gb-pcie4")
    assert prof.name == "a100-40gb-pcie4-calibrated"
    assert prof.h2d_prefetch_Bps == pytest.approx(50 * G, rel=2e-3)
    assert prof.device_capacity_bytes == 80 << 30  # the fake's cuMemGetInfo total
    for field in ("h2d_prefetch_Bps", "d2h_prefetch_Bps", "fault_batch_latency_s",
                  "remote_access_Bps", "device_capacity_bytes"):
        assert prof.sources[field].startswith("measured by uvm_sched.calibrate on Fake GPU 0 at ")
    assert re.search(r"both ways at once (59\.9\d|60\.0\d) GB/s", prof.sources["h2d_prefetch_Bps"])
    for field in ("peak_flops_bf16", "h2d_fault_Bps", "va_block_bytes"):
        assert getattr(prof, field) == getattr(base, field)
        assert prof.sources[field] == base.sources[field]


def test_a_figure_not_measured_leaves_the_profiles_value():
    fig = dict(h2d_Bps=30e9, d2h_Bps=20e9, duplex_Bps=40e9, duplex_h2d_Bps=20e9,
               duplex_d2h_Bps=20e9, fault_batch_s=0.0, remote_Bps=10e9, region_bytes=64 * MiB,
               duplex_h2d_bytes=MiB, duplex_d2h_bytes=MiB, fault_batches=8,
               remote_bytes=16 * MiB, total_bytes=8 << 30, device_name="X", when="t")
    base = load_profile("h100-pcie5")
    prof = profile_from(fig, base)
    assert prof.fault_batch_latency_s == base.fault_batch_latency_s
    assert prof.sources["fault_batch_latency_s"] == base.sources["fault_batch_latency_s"]
    assert prof.h2d_prefetch_Bps == 30e9
    has_duplex = DUPLEX_FIELD in prof.__dataclass_fields__
    assert not has_duplex or getattr(prof, DUPLEX_FIELD) == 40e9


def test_the_measured_profile_plans_and_simulates(tmp_path):
    from _planner_helpers import tiny_trace

    with fakecuda.backend("fake", **_env(3, 2, 4, 1, 200, 1)):  # a slow link: it shows
        prof = uvm_sched.calibrate(0)
    tr = uvm_sched.trace.load(tiny_trace(tmp_path / "t.parquet", unit=4 * MiB))
    p = uvm_sched.plan(tr, "90%", prof)
    assert p.meta["hw"] == prof.name == "h200-pcie5-calibrated"
    assert uvm_sched.sim.simulate(tr, p, prof, budget="90%").hw == prof.name
    # the measured constants are the ones simulated: demand paging on the slow link is slower
    slow = uvm_sched.sim.simulate(tr, "demand", prof, budget="90%")
    shipped = uvm_sched.sim.simulate(tr, "demand", "h200-pcie5", budget="90%")
    assert slow.iteration_time_s > 1.5 * shipped.iteration_time_s  # 200 us fault batches


# ---- the Scheduler's first learn ------------------------------------------------------------

def _loop(s, iters: int, weights: list[int]) -> None:
    for _ in range(iters):
        s.step()
        acts = [native.malloc(4 * MiB) for _ in range(4)]
        for a in reversed(acts):
            native.free(a)


def _scheduler_run(calibrate):
    from uvm_sched.runtime import Scheduler

    weights = [native.malloc(4 * MiB) for _ in range(4)]
    try:
        with Scheduler(budget="80%", warmup_iters=2, hook=False, worker="thread",
                       calibrate=calibrate) as s:
            _loop(s, 3, weights)
            assert s.wait_planned(120), s.last_error
            _loop(s, 2, weights)
            return s.stats(), s.plan
    finally:
        for w in weights:
            native.free(w)


def test_the_scheduler_calibrates_once_at_its_start_and_plans_with_it():
    with fakecuda.backend("fake", **_env(*LINKS[0])) as fake:
        st, plan = _scheduler_run(True)
        probes = len(fake.calls("cuMemGetInfo"))  # once per probe
    cal = st["calibration"]
    assert cal["status"] == "measured" and cal["profile"] == "h200-pcie5-calibrated"
    assert cal["h2d_Bps"] == pytest.approx(25e9, rel=2e-3)
    assert cal["fault_batch_s"] > 0 and cal["device_name"] == "Fake GPU 0"
    assert plan.meta["hw"] == "h200-pcie5-calibrated"
    assert probes == 1  # the Scheduler measured once


def test_auto_calibration_is_off_on_the_host_backend_and_says_why():
    with fakecuda.backend("host"):
        st, plan = _scheduler_run("auto")
    assert st["calibration"]["status"] == "off"
    assert "host backend has no device" in st["calibration"]["why"]
    assert plan.meta["hw"] == "h200-pcie5"


def test_a_failed_calibration_plans_with_the_configured_profile(caplog):
    with fakecuda.backend("fake", FAKE_CUDA_FREE_BYTES=str(16 * MiB)):
        st, plan = _scheduler_run("auto")
    assert st["calibration"]["status"] == "failed"
    assert "bytes free" in st["calibration"]["error"]
    assert plan.meta["hw"] == "h200-pcie5"
    assert "calibration failed" in caplog.text


def test_the_scheduler_refuses_a_calibrate_option_it_does_not_know():
    from uvm_sched.runtime import Scheduler

    with pytest.raises(ValueError, match="calibrate must be 'auto', True or False"):
        Scheduler(calibrate="yes")


def test_the_probe_runs_at_start_so_no_step_of_the_loop_waits_for_it():
    # it holds the allocator for up to 200 ms of device time: inside step() that is a
    # stall of the training loop
    from uvm_sched.runtime import Scheduler

    with fakecuda.backend("fake", **_env(*LINKS[0])) as fake:
        with Scheduler(budget="80%", warmup_iters=2, hook=False, worker="thread",
                       calibrate=True) as s:
            assert len(fake.calls("cuMemGetInfo")) == 1  # the probe, before any step
            assert s.stats()["calibration"]["status"] == "measured"
            _loop(s, 3, [])
            assert s.wait_planned(120), s.last_error
            assert len(fake.calls("cuMemGetInfo")) == 1  # and never again
