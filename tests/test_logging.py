"""Logging: the Scheduler's transitions reach the "uvm_sched.runtime" logger (INFO, a
failure at WARNING, per-iteration detail at DEBUG), the native library's load and backend
the "uvm_sched.native" logger, and the C core's messages from the PyTorch ABI reach
Python's logging instead of stderr. Nothing is printed."""
from __future__ import annotations

import ctypes
import logging
import subprocess
import sys

import pytest

native = pytest.importorskip("uvm_sched.native")
pytest.importorskip("uvm_sched.trace._native", reason="trace_from_events has not landed")

from uvm_sched.runtime import Scheduler  # noqa: E402

from _planner_helpers import host_backend  # noqa: E402

MiB = 1 << 20
host = pytest.fixture(host_backend)


def _iteration(batch: int, layers: int = 6) -> None:
    acts = [native.malloc(batch * MiB) for _ in range(layers)]
    for a in reversed(acts):
        native.free(a)


def _run(s: Scheduler, batch: int, iters: int) -> None:
    for _ in range(iters):
        s.step()
        _iteration(batch)


def _messages(caplog, level=logging.INFO) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "uvm_sched.runtime" and r.levelno >= level]


def _one(messages: list[str], prefix: str) -> str:
    hits = [m for m in messages if m.startswith(prefix)]
    assert hits, f"no {prefix!r} record among {messages}"
    return hits[0]


def test_each_scheduler_transition_is_logged(host, caplog):
    caplog.set_level(logging.DEBUG, logger="uvm_sched")
    weights = [native.malloc(4 * MiB) for _ in range(4)]
    s = Scheduler(budget="60%", warmup_iters=2, relearn_after=2, hook=False).start()
    assert "2 warm-up iterations" in _one(_messages(caplog), "recording:")
    _run(s, batch=8, iters=3)
    assert s.wait_planned(300), s.last_error  # (planned in the background)
    learned = _one(_messages(caplog), "learned:")
    assert f"period {s.plan.meta['period_events']} allocator events" in learned
    assert "from markers" in learned and "mode oblivious" in learned
    assert f"{len(s.plan)} actions" in learned
    assert f"{int(s.plan.meta['budget_bytes']):,} bytes" in learned
    assert "sync on marker" in _one(_messages(caplog), "armed:")
    _run(s, batch=8, iters=1)
    assert any(m.startswith("armed iteration") for m in _messages(caplog, logging.DEBUG))
    assert not any(m.startswith("armed iteration") for m in _messages(caplog))  # DEBUG only
    _run(s, batch=5, iters=3)  # every iteration diverges: disarm and relearn
    assert s.stats()["relearns"] == 1
    assert "relearning" in _one(_messages(caplog), "disarmed: 2 steps in a row diverged")
    _run(s, batch=5, iters=3)
    assert s.wait_planned(300), s.last_error
    assert len([m for m in _messages(caplog) if m.startswith("learned:")]) == 2
    s.close()
    assert "closed" in _one(_messages(caplog), "disarmed: the scheduler was closed")
    assert "2 plans, 1 relearns" in _one(_messages(caplog), "closed:")
    for w in weights:
        native.free(w)


def test_a_failure_to_learn_is_logged_as_a_warning_with_its_reason(host, caplog):
    caplog.set_level(logging.INFO, logger="uvm_sched")
    weights = [native.malloc(64 * MiB) for _ in range(2)]  # persistent: no budget below them
    s = Scheduler(budget=MiB, warmup_iters=2, hook=False).start()
    _run(s, batch=8, iters=3)
    assert not s.wait_planned(300)
    assert s.state == "recording" and s.last_error
    warned = [r for r in caplog.records
              if r.name == "uvm_sched.runtime" and r.levelno == logging.WARNING]
    assert warned, [r.getMessage() for r in caplog.records]
    assert s.last_error in warned[0].getMessage()
    assert "unplanned" in warned[0].getMessage()
    s.close()
    for w in weights:
        native.free(w)


def test_tuning_verdict_is_logged(host, caplog):
    caplog.set_level(logging.INFO, logger="uvm_sched")
    s = Scheduler(budget="60%", warmup_iters=2, hook=False, tune=(16,), tune_iters=1).start()
    _run(s, batch=8, iters=3)
    assert s.wait_planned(300), s.last_error  # (planned in the background)
    _run(s, batch=8, iters=9)
    assert s.tuning, s.stats()
    assert "2 candidates" in _one(_messages(caplog), "tuning:")
    assert _one(_messages(caplog), "tuned: keeping")
    s.close()


def test_the_backend_is_logged_once(host, caplog):
    caplog.set_level(logging.INFO, logger="uvm_sched.native")
    native._backend_logged = None
    native.backend()
    native.stats()
    hits = [r.getMessage() for r in caplog.records if r.getMessage().startswith("native backend")]
    assert hits == [f"native backend: host ({native.backend_reason()})"]


def test_the_c_cores_pytorch_abi_errors_reach_logging_not_stderr(host, caplog, capfd):
    caplog.set_level(logging.WARNING, logger="uvm_sched.native")
    lib = native._load()
    f = lib.uvm_sched_free  # the PyTorch ABI: it has no status to return
    f(ctypes.c_void_p(0x1234), 8, 0, None)
    native.drain_events()  # Python reads the library: the C core's lines move to logging
    msgs = [r.getMessage() for r in caplog.records if r.name == "uvm_sched.native"]
    assert any("native core:" in m and "0x1234" in m for m in msgs), msgs
    assert "0x1234" not in capfd.readouterr().err


def test_loading_the_library_is_logged_and_prints_nothing():
    code = ("import logging, uvm_sched.native as n; "
            "logging.basicConfig(level=logging.INFO, format='%(name)s %(message)s'); "
            "n.malloc(1) and None; n.backend(); n._load().uvm_sched_free(0x1234, 8, 0, None); "
            "n.stats()")
    quiet = subprocess.run([sys.executable, "-c", code.replace("logging.basicConfig", "dict")],
                           capture_output=True, text=True, env=_env())
    assert quiet.returncode == 0 and quiet.stdout == "" and quiet.stderr == "", quiet.stderr
    loud = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_env())
    assert "uvm_sched.native loaded the native library" in loud.stderr, loud.stderr
    assert "uvm_sched.native native backend: host" in loud.stderr
    assert "uvm_sched.native native core: " in loud.stderr and "0x1234" in loud.stderr


def _env() -> dict:
    import os

    return {**os.environ, "UVM_SCHED_BACKEND": "host"}


def test_c_log_lines_beyond_its_buffer_are_counted_as_lost(monkeypatch, caplog):
    monkeypatch.setenv("UVM_SCHED_VERBOSE", "2")  # log every error, not only the first 20
    native._reset("host", force=True)
    try:
        caplog.set_level(logging.WARNING, logger="uvm_sched.native")
        lib = native._load()
        native.drain_events()
        for i in range(200):  # ~60 bytes each: more than the C core's 4 KiB between reads
            lib.uvm_sched_free(ctypes.c_void_p(0x10000 + 16 * i), 8, 0, None)
        native.drain_events()
        msgs = [r.getMessage() for r in caplog.records if r.name == "uvm_sched.native"]
        kept = [m for m in msgs if "0x1" in m and "lost" not in m]
        lost = [m for m in msgs if "log lines lost" in m]
        assert 0 < len(kept) < 200 and len(lost) == 1
        assert int(lost[0].split("native core: ")[1].split()[0]) == 200 - len(kept)
    finally:
        monkeypatch.delenv("UVM_SCHED_VERBOSE")
        native._reset("host", force=True)
