"""The lifetime chart puts a plan's marks where the native executor really fires them:
replay a zoo trace through the allocator's host backend with the plan armed and compare the
executor's log with ``viz``'s reading of the plan, iteration by iteration."""
from __future__ import annotations

import pytest

pytest.importorskip("torch")


def test_plan_marks_match_the_native_executor_log():
    import uvm_sched
    from uvm_sched.trace import zoo
    from uvm_sched.viz import _data

    try:
        from uvm_sched import native

        backend = native.backend()
    except (ImportError, OSError) as e:
        pytest.skip(f"native library not built: {e}")
    if backend != "host":
        pytest.skip(f"replay is for the host backend; this process runs on {backend}")
    trace = zoo.record("unet")
    plan = uvm_sched.plan(trace, "75%", "h200-pcie5")
    # Arm at the second iteration, as the Scheduler does after warm-up: the first one
    # allocates the optimizer state the plan names, which has no address before that.
    log = native.action_log(native.replay(trace, plan, arm_at=int(trace.iteration_starts[1])))
    marks, _ = _data.plan_marks(trace, plan)
    marks = marks[marks.iteration >= 1].assign(iteration=lambda m: m.iteration - 1)
    assert len(marks) > 100  # a plan that does something
    issued = log[log.status == "issued"].groupby(["iteration", "action"]).size()
    drawn = marks.groupby(["iteration", "action"]).size()
    assert issued.to_dict() == drawn.to_dict()
    # bytes too: the executor moves what the marks say (discards are left out: the executor
    # rounds them up to the end of the block's last 2 MiB page)
    moved = log[(log.status == "issued") & (log.action != "discard")]
    drawn_moves = marks[marks.action != "discard"]
    assert (moved.groupby(["iteration", "action"])["bytes"].sum().to_dict()
            == drawn_moves.groupby(["iteration", "action"])["bytes"].sum().to_dict())
