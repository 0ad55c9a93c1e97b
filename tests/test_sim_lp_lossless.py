"""The LP bound over lossless schedules (``lp_lossless=True``, Note [Lossless schedules]):
a hand-worked optimum, never below the unrestricted LP on the same slots, never above a
policy that loses nothing."""
from __future__ import annotations

import importlib.util

import pytest

from uvm_sched.sim import LP_BOUND, compare, simulate
from uvm_sched.trace import AccessMode, TraceBuilder

from test_sim_books import MS, MiB, _hw  # noqa: E402  (tests/ is on the path)
from test_sim_lp import zoo_cases  # noqa: E402,F401  (the fixture)

needs_highspy = pytest.mark.skipif(importlib.util.find_spec("highspy") is None,
                                   reason="the LP bound needs HiGHS: pip install highspy")


def _held_trace():
    """Per iteration, budget 2 MiB: t0 writes A (2 MiB), t1 reads it; t2 writes Z (2 MiB),
    t3 reads Z (1 ms) and only then are A and Z freed; every other tick is 0.01 ms."""
    b = TraceBuilder(name="held-to-free")
    for _ in range(3):
        b.mark()
        a = b.alloc(2 * MiB)
        b.access(a, AccessMode.WRITE)
        b.next_tick(0.01e6)
        b.access(a, AccessMode.READ)
        b.next_tick(0.01e6)
        z = b.alloc(2 * MiB)
        b.access(z, AccessMode.WRITE)
        b.next_tick(0.01e6)
        b.access(z, AccessMode.READ)
        b.free(a)
        b.free(z)
        b.next_tick(1e6)
    return b.build()


@needs_highspy
def test_data_held_to_its_free_must_be_written_back_for_the_room_and_the_optimum_is_worked_by_hand():
    # Unrestricted, A is dead after t1 and Z takes its room for nothing: the compute time,
    # 1.03 ms. Lossless, A (written at t0, so dirty) is kept to its FREE after t3, and Z is
    # resident from the boundary after t2: A must be written back (2 MiB at 8 MiB/ms, 0.25
    # ms) between the read at t1 and that boundary, over t1 and t2 (0.02 ms of compute):
    # 0.23 ms more
    t = _held_trace()
    plain = simulate(t, LP_BOUND, _hw(), 2 * MiB, lp_coarsen=1)
    held = simulate(t, LP_BOUND, _hw(), 2 * MiB, lp_coarsen=1, lp_lossless=True)
    assert plain.iteration_time_s == pytest.approx(1.03 * MS)
    assert held.iteration_time_s == pytest.approx(1.26 * MS)
    assert held.bytes_d2h >= 2 * MiB * (1 - 1e-6)
    for policy in ("demand", "uvm-sched"):
        assert simulate(t, policy, _hw(), 2 * MiB).iteration_time_s >= held.iteration_time_s


@needs_highspy
@pytest.mark.parametrize("model", ["unet", "gpt2_small"])
@pytest.mark.parametrize("pct", ["75%", "50%"])
def test_the_lossless_bound_is_at_least_the_lp_bound_on_its_slots_and_at_most_every_policy(
        zoo_cases, model, pct):
    t = zoo_cases[model]
    plain = simulate(t, LP_BOUND, "h200-pcie5", pct, lp_coarsen=16)
    held = simulate(t, LP_BOUND, "h200-pcie5", pct, lp_coarsen=16, lp_lossless=True)
    assert held.iteration_time_s >= plain.iteration_time_s * (1 - 1e-9)
    # every policy here keeps each block's data to its FREE (uvm-sched discards at FREEs)
    df = compare(t, "h200-pcie5", [pct], policies=["demand", "prefetch-on-alloc",
                                                   "swap-activations", "uvm-sched"])
    assert (df["error"] == "").all(), df["error"].tolist()
    for p, x in zip(df["policy"], df["iteration_time_s"]):
        assert x >= held.iteration_time_s * (1 - 1e-9), (p, x, held.iteration_time_s)
