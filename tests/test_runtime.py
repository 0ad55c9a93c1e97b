"""The runtime Scheduler end to end on the host backend: record, learn, plan, arm, watch,
re-learn when the batch size changes."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

native = pytest.importorskip("uvm_sched.native")
pytest.importorskip("uvm_sched.trace._native", reason="trace_from_events (native drain -> Trace) has not landed")

from uvm_sched._runtime_recording import live_ordinal  # noqa: E402
from uvm_sched.runtime import Scheduler, SchedulerWarning  # noqa: E402

from _planner_helpers import host_backend  # noqa: E402

MiB = 1 << 20


host = pytest.fixture(host_backend)


class Loop:
    """A training loop in miniature: weights allocated once; each iteration allocates
    activations in a forward pass and frees them in reverse in a backward pass."""

    def __init__(self, layers: int = 8, weight: int = 4 * MiB):
        self.weights = [native.malloc(weight) for _ in range(layers)]
        self.layers = layers

    def iteration(self, batch: int, mid=None) -> None:
        acts = []
        for i in range(self.layers):
            acts.append(native.malloc(batch * MiB))
            tmp = native.malloc(MiB // 2)
            native.free(tmp)
            if mid is not None and i == self.layers // 2:
                mid()  # e.g. a poll in the middle of the forward pass
        grads = []
        for a in reversed(acts):
            g = native.malloc(batch * MiB)
            native.free(a)
            grads.append(g)
        for g in grads:
            native.free(g)

    def close(self):
        for w in self.weights:
            native.free(w)


def _run(s: Scheduler, loop: Loop, batch: int, iters: int) -> None:
    for _ in range(iters):
        s.step()
        loop.iteration(batch)


def test_scheduler_learns_plans_and_arms_after_warmup(host):
    loop = Loop()
    with Scheduler(budget="60%", hw="h200-pcie5", warmup_iters=3, hook=False) as s:
        _run(s, loop, batch=8, iters=3)
        assert s.state == "recording"
        _run(s, loop, batch=8, iters=1)
        assert s.state == "recording" and s.stats()["planning"]  # off the training thread
        assert s.wait_planned(300), s.last_error
        assert s.state == "armed"
        _run(s, loop, batch=8, iters=3)
        st = s.stats()
        assert st["plans"] == 1 and st["relearns"] == 0
        assert st["steps_before_plan"] == 4 and st["plan_time_s"] > 0
        assert st["native"]["plan_armed"] == 1
        assert st["native"]["actions_issued"] > 0
        assert st["native"]["divergences"] == 0
        assert s.plan.summary()["prefetch_to_host"]["count"] > 0  # 60% needs evictions
        assert st["budget_bytes"] == s.plan.meta["budget_bytes"]
    assert native.stats()["plan_armed"] == 0  # closed: disarmed
    loop.close()


def test_batch_size_change_diverges_then_relearns(host):
    loop = Loop()
    with Scheduler(budget="60%", warmup_iters=2, relearn_after=2, hook=False) as s:
        _run(s, loop, batch=8, iters=3)
        assert s.wait_planned(300), s.last_error
        _run(s, loop, batch=8, iters=1)
        _run(s, loop, batch=6, iters=3)  # every iteration now diverges at its first alloc
        st = s.stats()
        assert st["divergences"] >= 2 and st["relearns"] == 1
        assert s.state == "recording"
        _run(s, loop, batch=6, iters=3)
        assert s.wait_planned(300), s.last_error
        assert s.stats()["plans"] == 2
        assert s.plan.meta["alloc_sizes"][0] == 6 * MiB
        # the new plan runs clean
        before = native.stats()["divergences"]
        _run(s, loop, batch=6, iters=2)
        assert native.stats()["divergences"] == before
    loop.close()


def test_a_plan_from_one_batch_size_on_another_breaks_nothing(host):
    loop = Loop()
    with Scheduler(budget="60%", warmup_iters=2, relearn_after=100, hook=False) as s:
        _run(s, loop, batch=8, iters=3)
        assert s.wait_planned(300), s.last_error
        _run(s, loop, batch=4, iters=3)  # plan disarmed each iteration, allocator unharmed
        st = s.stats()
        assert st["divergences"] >= 3 and s.state == "armed"
        assert st["native"]["errors_unknown_pointer"] == 0
    loop.close()
    assert native.stats()["allocated_blocks"] == 0


def test_scheduler_rejects_bad_arguments():
    with pytest.raises(ValueError, match="warmup_iters"):
        Scheduler(warmup_iters=0)
    with pytest.raises(ValueError, match="unknown planning mode"):
        Scheduler(mode="clairvoyant")



def test_sampled_mode_without_pytorch_samples_faults_or_says_what_it_needs(monkeypatch):
    import importlib.util

    from uvm_sched._runtime_faults import FaultSampler

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else real(name, *a))
    with pytest.raises(ValueError, match=r"needs PyTorch.*sampler='cupti'.*plan_opts=\{'samples'"):
        Scheduler(mode="sampled", sampler="torch", hook=False)
    assert isinstance(Scheduler(mode="sampled", hook=False)._touches, FaultSampler)
    with pytest.raises(ValueError, match="sampler must be one of"):
        Scheduler(mode="sampled", sampler="nvml", hook=False)


class TensorLoop(Loop):
    """The loop above with PyTorch ops on the blocks (CPU tensors over uvm_sched's host
    memory), so a dispatch-mode tracer sees which block each op touches. Each layer writes
    its activation after allocating it; layer 6 also reads layer 1's (a skip connection,
    in the middle of its lifetime); the backward pass reads each before freeing it."""

    def iteration(self, batch: int, mid=None) -> None:
        import torch

        acts = []
        for i in range(self.layers):
            a = native.malloc(batch * MiB)
            acts.append(a)
            x = self.tensor(a, MiB)  # the first MiB stands for the whole block
            x.add_(self.tensor(self.weights[i], MiB))  # reads the weight, writes the act
            if i == 6:
                x.add_(self.tensor(acts[1], MiB))  # the skip read
        for a in reversed(acts):
            self.tensor(a, MiB).mul_(torch.tensor(1, dtype=torch.uint8))
            native.free(a)

    @staticmethod
    def tensor(ptr: int, nbytes: int):
        import ctypes

        import torch

        return torch.frombuffer((ctypes.c_uint8 * nbytes).from_address(ptr), dtype=torch.uint8)


def test_sampled_mode_records_its_samples_from_pytorch_ops_during_warmup(host):
    pytest.importorskip("torch")
    loop = TensorLoop()
    with Scheduler(budget="60%", hw="h200-pcie5", warmup_iters=3, mode="sampled",
                   hook=False, touch_device="cpu") as s:
        assert s._touches.active  # tracing while it learns
        _run(s, loop, batch=2, iters=4)
        assert s.wait_planned(300), s.last_error
        assert s.plan.meta["mode"] == "sampled"
        assert not s._touches.active  # and no longer once the plan is armed
        smp = s.samples
        ev = s.pattern.events
        allocs = ev[ev["kind"] == "alloc"]
        # layer 1's activation: the second allocation of the iteration
        act1 = int(allocs["ordinal"].iloc[1])
        ticks = sorted(smp.loc[~smp["persistent"] & (smp["block"] == act1), "tick"])
        skip = int(allocs["tick"].iloc[6])  # layer 6's allocation (ticks within the iteration)
        assert ticks == [int(allocs["tick"].iloc[1]), skip, ticks[-1]] and ticks[-1] > skip
        # (written, skip-read, read back in the backward pass)
        weights = smp[smp["persistent"]]
        assert weights["block"].nunique() == loop.layers  # every weight seen
        _run(s, loop, batch=2, iters=2)
        assert s.stats()["divergences"] == 0
    loop.close()


def test_default_mode_on_a_pytorch_loop_is_sampled_and_the_tracer_is_gone_once_armed(host):
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    loop = TensorLoop()
    with Scheduler(budget="60%", hw="h200-pcie5", warmup_iters=3, hook=False,
                   touch_device="cpu") as s:
        assert s.mode == "auto" and s._touches.active  # the tracer runs in the warm-up
        assert "dispatch tracer" in s.stats()["mode_reason"]
        _run(s, loop, batch=2, iters=4)
        assert s.wait_planned(300), s.last_error
        st = s.stats()
        assert st["mode"] == "sampled" == s.plan.meta["mode"]
        assert st["mode_reason"].startswith("auto: sampled, the dispatch tracer saw")
        assert s.samples["block"].nunique() >= loop.layers
        # armed: no dispatch mode on the loop's thread, nothing recorded any more
        assert not s._touches.active
        assert not any(type(m).__name__ == "_Touches" for m in _get_current_dispatch_mode_stack())
        seen = len(s._touches.clocks)
        _run(s, loop, batch=2, iters=2)
        x = torch.ones(4)
        x.add_(x)
        assert len(s._touches.clocks) == seen
        assert s.stats()["iterations_armed"] >= 1 and s.stats()["divergences"] == 0
    loop.close()


def test_default_mode_whose_tracer_sees_no_op_on_a_block_plans_oblivious_and_says_why(host):
    pytest.importorskip("torch")
    loop = Loop()  # allocations only: no PyTorch op touches the blocks
    with Scheduler(budget="60%", warmup_iters=3, hook=False, touch_device="cpu") as s:
        _run(s, loop, batch=8, iters=4)
        assert s.wait_planned(300), s.last_error
        st = s.stats()
        assert st["mode"] == "oblivious" and st["learn_failures"] == 0
        assert st["mode_reason"].startswith("auto: oblivious, no access source: the dispatch "
                                            "tracer saw no PyTorch op")
    loop.close()


def test_default_mode_without_pytorch_loaded_is_oblivious_and_says_why(monkeypatch):
    import sys

    from uvm_sched._runtime_setup import touch_source

    monkeypatch.delitem(sys.modules, "torch", raising=False)
    rec, why = touch_source("auto", {}, "cuda")
    assert rec is None and why.startswith("auto: oblivious, no access source: PyTorch is not "
                                          "loaded")
    assert touch_source("auto", {"samples": object()}, "cuda")[1] == \
        "auto: sampled, access samples were given in plan_opts"


def test_without_markers_the_learned_period_arms_the_plan(host):
    loop = Loop()
    with Scheduler(budget="60%", warmup_iters=3, hook=False, min_period_events=16) as s:
        for _ in range(8):
            loop.iteration(8)
            if s.wait_planned(300):  # (a learned period needs warmup_iters repetitions)
                break
        assert s.state == "armed", s.last_error
        assert s.plan.meta["sync"] == "period"
        for _ in range(3):
            loop.iteration(8)
        st = s.stats()
        assert st["native"]["actions_issued"] > 0
        assert st["native"]["divergences"] == 0
    loop.close()


def test_without_markers_a_poll_mid_iteration_arms_at_the_phase_it_is_at(host):
    loop = Loop()
    with Scheduler(budget="60%", warmup_iters=3, hook=False, min_period_events=16) as s:
        for _ in range(8):
            loop.iteration(8, mid=s.poll)  # polled only ever in the middle of forward
            if s._job is not None:
                # the loop runs on while the plan is made; the next poll arms it where the
                # loop has got to
                assert s._job.done.wait(60)
            if s.state == "armed":
                break
        assert s.state == "armed", s.last_error
        assert s.plan.meta["sync"] == "period"
        period = int(s.plan.meta["period_events"])
        native.drain_events()  # (the scheduler's own drains see the rest)
        for _ in range(3):
            loop.iteration(8)
        ev = native.drain_events()
        st = s.stats()
        assert st["native"]["divergences"] == 0  # allocation ordinals lined up from arming
        assert st["native"]["actions_issued"] > 0
        # the executor's iterations are whole periods apart, in step with the loop's
        starts = ev["addr"][ev["kind"] == 4]
        assert len(starts) >= 3 and set(int(x) for x in (starts[1:] - starts[:-1])) == {period}
    loop.close()


def test_optimizer_step_hook_marks_iterations(host):
    torch = pytest.importorskip("torch")
    w = torch.nn.Parameter(torch.zeros(4))
    opt = torch.optim.SGD([w], lr=0.1)
    loop = Loop()
    with Scheduler(budget="60%", warmup_iters=2, hook=True) as s:
        for _ in range(4):
            loop.iteration(8)
            w.grad = torch.ones(4)
            opt.step()  # the global hook marks the iteration
        assert native.stats()["marks"] >= 4
        assert s.wait_planned(300), s.last_error
    marks = native.stats()["marks"]
    opt.step()  # closed: the hook is gone
    assert native.stats()["marks"] == marks
    loop.close()


def test_sampled_mode_that_sees_no_op_on_its_blocks_says_so(host):
    pytest.importorskip("torch")
    loop = Loop()  # allocations only: no PyTorch op touches the blocks
    with Scheduler(budget="60%", hw="h200-pcie5", warmup_iters=3, mode="sampled",
                   hook=False, touch_device="cpu") as s:
        _run(s, loop, batch=2, iters=4)
        assert not s.wait_planned(300)
        assert s.state == "recording" and s.stats()["learn_failures"] >= 1
        assert "dispatch tracer saw no PyTorch op" in s.last_error
    loop.close()


def test_tuning_keeps_the_guard_whose_iterations_the_clock_finds_fastest(host):
    """With markers, the Scheduler arms each candidate guard's plan in turn and times its
    iterations between markers. The loop here is slower under the default guards (it
    sleeps 20 ms per iteration while they are armed), so the tuner must keep guard 8."""
    import time

    loop = Loop()
    with Scheduler(budget="60%", hw="h200-pcie5", warmup_iters=3, hook=False,
                   tune=(8,), tune_iters=2) as s:
        _run(s, loop, batch=8, iters=4)
        assert s.wait_planned(300), s.last_error
        assert s.stats()["tuning_now"] == "auto"
        seen = []
        for _ in range(12):
            s.step()
            seen.append(s.stats().get("tuning_now"))
            if s.plan.meta["guard"] != [8]:
                time.sleep(0.02)
            loop.iteration(8)
        assert s.tuning.keys() == {"auto", "8"}
        assert s.tuning["8"] < s.tuning["auto"]
        assert s.plan.meta["guard"] == [8] and "8" in seen
        assert s.stats()["divergences"] == 0
    loop.close()


def test_tuning_without_markers_says_why_it_did_not_run(host):
    loop = Loop()
    with Scheduler(budget="60%", warmup_iters=3, hook=False, min_period_events=16,
                   tune=(8,)) as s:
        for _ in range(8):
            loop.iteration(8)
            if s.wait_planned(300):  # (a learned period needs warmup_iters repetitions)
                break
        assert s.state == "armed", s.last_error
        assert s.plan.meta["sync"] == "period"
        assert s.tuning == {} and "iteration markers" in s.stats()["tuning_skipped"]
    loop.close()


def test_tuning_candidates_are_checked():
    with pytest.raises(ValueError, match="tuning candidates are guards .* got 'wide'"):
        Scheduler(tune=("wide",), hook=False)
    with pytest.raises(ValueError, match="'oblivious' is for mode='sampled' or 'auto'"):
        Scheduler(tune=("oblivious",), hook=False, mode="oblivious")
    with pytest.raises(ValueError, match="tune_iters"):
        Scheduler(tune=(8,), tune_iters=0, hook=False)


def test_sampled_mode_can_measure_its_plan_against_the_oblivious_one(host):
    pytest.importorskip("torch")
    loop = TensorLoop()
    with Scheduler(budget="60%", hw="h200-pcie5", warmup_iters=3, mode="sampled",
                   hook=False, touch_device="cpu", tune=("oblivious",), tune_iters=1) as s:
        _run(s, loop, batch=2, iters=4)
        assert s.wait_planned(300), s.last_error
        _run(s, loop, batch=2, iters=2 * 3 + 1)
        assert s.tuning.keys() == {"auto", "oblivious"}
        assert s.plan.meta["mode"] == ("oblivious" if s.tuning["oblivious"] < s.tuning["auto"]
                                       else "sampled")
    loop.close()


def test_a_missing_planner_package_never_reaches_the_training_loop(host, monkeypatch):
    # installed --no-deps (a GPU image), pandas may be absent: planning fails, the loop
    # goes on unplanned and the Scheduler says what to install
    import sys

    monkeypatch.setitem(sys.modules, "pandas", None)  # `import pandas` now fails
    loop = Loop()
    # a thread worker: planning in this process, where pandas is now missing
    with Scheduler(budget="60%", warmup_iters=2, hook=False, worker="thread") as s:
        _run(s, loop, batch=8, iters=5)
        assert not s.wait_planned(300)
        st = s.stats()
        assert s.state == "recording" and st["learn_failures"] >= 1
        assert "pandas" in st["last_error"] and "pip install pandas" in st["last_error"]
    loop.close()


def test_the_scheduler_runs_on_the_given_device_or_torchs_current_one(host, monkeypatch):
    import sys
    import types

    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(
        is_available=lambda: True, current_device=lambda: 1))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setenv("RANK", "3")
    s = Scheduler(hook=False).start()
    assert (s.device, s.rank) == (1, 3)
    # auto: "torch" is loaded, but this one has no dispatch modes: no tracer, and it says so
    assert s.stats()["mode_reason"].startswith("auto: oblivious, no access source: "
                                               "the access sampler did not start")
    s.close()
    s = Scheduler(hook=False, device=2).start()
    assert s.device == 2 and s.stats()["device"] == 2
    s.close()
    with pytest.raises(ValueError, match="device must be"):
        Scheduler(device=-1)


def armed_run(worker: str = "process") -> dict:
    """The miniature loop planned at 60% by ``worker``, armed, and run clean for two
    iterations with actions issued; its ``stats()``."""
    loop = Loop()
    with Scheduler(budget="60%", warmup_iters=2, hook=False, worker=worker) as s:
        _run(s, loop, batch=8, iters=3)
        assert s.wait_planned(300), s.last_error
        _run(s, loop, batch=8, iters=2)
        st = s.stats()
        assert st["native"]["actions_issued"] > 0 and st["native"]["divergences"] == 0
    loop.close()
    return st


def test_planning_on_a_thread_of_this_process_arms_the_same_way(host):
    armed_run("thread")
    with pytest.raises(ValueError, match="worker must be 'process' or 'thread'"):
        Scheduler(worker="fork")


def test_live_blocks_are_tracked_across_batches_with_reused_addresses(host):
    """The vectorised live-block table: an address freed and allocated again within one
    drained batch is alive with its last allocation (ordinal); one freed last is gone."""
    with Scheduler(hook=False) as s:
        a = native.malloc(MiB)
        b = native.malloc(MiB)
        s.poll()
        native.free(a)
        c = native.malloc(MiB)  # may reuse a's address
        native.free(b)
        s.poll()
        live = {int(x) for x in s._live["addr"]}
        assert live == {c}
        ords = s._live["arg"]
        assert live_ordinal(s._live, np.array([ords[0], ords[0] - 1])).tolist() == [True, False]
        native.free(c)
        s.poll()
        assert len(s._live) == 0


def test_live_block_table_matches_a_dict_model_over_random_batches(host):
    """The table _track_live keeps equals the plain model (the set of blocks this test
    holds), whatever the mix of blocks born and freed within and across drained batches,
    and stays in allocation order."""
    import random

    rnd = random.Random(7)
    held: set[int] = set()
    with Scheduler(hook=False) as s:
        for _ in range(40):
            for _ in range(rnd.randrange(0, 60)):
                if held and rnd.random() < 0.45:
                    a = rnd.choice(sorted(held))
                    native.free(a)
                    held.remove(a)
                else:
                    held.add(native.malloc(rnd.choice([4096, MiB, 3 * MiB])))
            s.poll()
            assert {int(a) for a in s._live["addr"]} == held
            assert list(s._live["arg"]) == sorted(s._live["arg"])  # allocation order
        for a in sorted(held):
            native.free(a)
        s.poll()
        assert len(s._live) == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 30), st.booleans()), max_size=200),
       st.lists(st.integers(1, 40), min_size=1, max_size=10))
def test_live_block_table_on_synthetic_batches_with_dropped_events(ops, cuts):
    """_track_live over event arrays built here (no allocator): allocations with rising
    ordinals, frees of live ones, some ALLOC records lost (as a full ring drops them, so
    ordinals skip), split into batches anywhere; the table holds exactly the blocks the
    model holds that were seen allocated, in ordinal order."""
    from uvm_sched.native import EVENT_DTYPE

    rows, live, seen, ordinal = [], {}, set(), 0
    for is_alloc, pick, dropped in ops:
        if is_alloc or not live:
            ordinal += 1
            live[ordinal] = 4096 * ordinal
            if not dropped:
                rows.append((0, 4096 * ordinal, ordinal))
                seen.add(ordinal)
        else:
            o = sorted(live)[pick % len(live)]
            del live[o]
            rows.append((1, 4096 * o, o))
    ev = np.zeros(len(rows), EVENT_DTYPE)
    if rows:
        ev["kind"], ev["addr"], ev["arg"] = zip(*rows)
    s = Scheduler(hook=False)
    i = 0
    for c in cuts * (1 + len(ev) // max(sum(cuts), 1)):
        s._track_live(ev[i:i + c])
        i += c
        if i >= len(ev):
            break
    assert list(s._live["arg"]) == sorted(o for o in live if o in seen)


def test_a_scheduler_that_sees_steps_but_no_allocation_warns_once_naming_cause_and_fix(host):
    import warnings

    import uvm_sched

    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with Scheduler(budget="50%", warmup_iters=2, hook=True):
            for _ in range(5):  # the README's loop, on CPU tensors: nothing reaches uvm_sched
                model(torch.randn(4, 8)).sum().backward()
                opt.step()
                opt.zero_grad()
    mine = [w for w in seen if issubclass(w.category, uvm_sched.Warning)]
    assert len(mine) == 1, [str(w.message) for w in seen]
    msg = str(mine[0].message)
    cause = ("no CUDA" if not torch.cuda.is_available() else "not PyTorch's CUDA allocator")
    assert cause in msg and "change_current_allocator(uvm_sched.allocator())" in msg
    assert "uvm-sched record -- python" in msg


def test_a_scheduler_whose_loop_allocates_through_uvm_sched_does_not_warn(host):
    import warnings

    import uvm_sched

    loop = Loop()
    with warnings.catch_warnings():
        warnings.simplefilter("error", uvm_sched.Warning)
        with Scheduler(budget="60%", warmup_iters=2) as s:
            _run(s, loop, 8, 4)
    loop.close()


def _slow_while_armed(s: Scheduler, loop: Loop, iters: int, sleep_s: float) -> list:
    """Run ``iters`` iterations, sleeping ``sleep_s`` in each one that runs with a plan
    armed (an injected slow plan); returns the watchdog phase seen at each marker."""
    import time

    phases = []
    for _ in range(iters):
        s.step()
        phases.append((s.stats().get("watchdog") or {}).get("phase"))
        if native.stats()["plan_armed"]:
            time.sleep(sleep_s)
        loop.iteration(8)
    return phases


def test_watchdog_disarms_a_plan_slower_than_no_plan_and_warns_once(host):
    loop = Loop()
    with Scheduler(budget="60%", hw="h200-pcie5", warmup_iters=3, hook=False,
                   watchdog_iters=2) as s:
        _run(s, loop, batch=8, iters=4)
        assert s.wait_planned(300), s.last_error  # (planned in the background)
        with pytest.warns(SchedulerWarning, match="watchdog: the plan's iterations took") as w:
            phases = _slow_while_armed(s, loop, 12, 0.02)
        assert len(w) == 1
        assert "none" in phases  # no plan was measured, with the plan disarmed
        st = s.stats()
        assert s.state == "unplanned" and st["state"] == "unplanned"
        assert st["watchdog_disarms"] == 1 and st["native"]["plan_armed"] == 0
        assert st["watchdog"]["phase"] == "disarmed"
        assert st["watchdog"]["plan_s"] > 1.03 * st["watchdog"]["no_plan_s"]
        assert "disarmed" in st["last_error"]
    loop.close()


def test_watchdog_keeps_a_plan_no_slower_than_no_plan(host):
    loop = Loop()
    with Scheduler(budget="60%", hw="h200-pcie5", warmup_iters=3, hook=False,
                   watchdog_iters=2) as s:
        _run(s, loop, batch=8, iters=4)
        assert s.wait_planned(300), s.last_error  # (planned in the background)
        # the unplanned iterations are the slow ones here: the plan pays
        import time

        for _ in range(12):
            s.step()
            if not native.stats()["plan_armed"]:
                time.sleep(0.02)
            loop.iteration(8)
        st = s.stats()
        assert s.state == "armed" and st["watchdog"]["phase"] == "watch"
        assert st["watchdog_disarms"] == 0 and st["native"]["plan_armed"] == 1
        assert st["watchdog"]["no_plan_s"] > st["watchdog"]["plan_s"]
    loop.close()


def test_watchdog_iters_is_checked():
    with pytest.raises(ValueError, match="watchdog_iters must be >= 0"):
        Scheduler(watchdog_iters=-1, hook=False)


def test_touch_recorder_sees_tensor_lists_and_every_result_and_stops_recording(host):
    torch = pytest.importorskip("torch")
    from uvm_sched.integrations.torch import TouchRecorder

    a, b = torch.ones(4), torch.zeros(4)
    with TouchRecorder("cpu") as rec:
        c = torch.cat([a, b])  # a Tensor[] argument
        lo, hi = torch.chunk(c, 2)  # a tuple of results (views of c's storage)
        m = torch.ones(2, 2, dtype=torch.bool)
        m.index_put_((torch.tensor([0]),), torch.tensor(False))  # a Tensor?[] argument
    ptr = lambda t: t.untyped_storage().data_ptr()  # noqa: E731
    seen = set(int(x) for x in rec.addresses)
    assert {ptr(a), ptr(b), ptr(c), ptr(lo), ptr(hi), ptr(m)} <= seen
    n = len(rec.clocks)
    torch.cat([a, b])
    assert len(rec.clocks) == n and not rec.active


def test_a_strict_start_that_raises_leaves_no_tracer_or_hook_behind(host):
    pytest.importorskip("torch")
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    from uvm_sched.runtime import SchedulerError

    native.set_tracing(False)  # recording off: a strict Scheduler raises in start()
    try:
        s = Scheduler(budget="60%", hook=True, strict=True, touch_device="cpu")
        with pytest.raises(SchedulerError, match="event recording is off"):
            s.start()
    finally:
        native.set_tracing(True)
    assert s.state == "closed" and s._hook_handle is None and not s._touches.active
    assert not any(type(m).__name__ == "_Touches" for m in _get_current_dispatch_mode_stack())
