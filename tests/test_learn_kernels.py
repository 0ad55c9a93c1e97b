"""The process worker's first plan on a cold kernel cache (Note [The first plan on a cold
kernel cache] in ``uvm_sched/_learn.py``): while the helper compiles its kernels, a stand-in
with the plain-Python kernels answers; a helper that is ready first takes the request over;
a helper that dies compiling leaves the stand-in's answer standing."""
from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from uvm_sched import _learn

from test_runtime import armed_run, host  # noqa: F401  (host: the fixture)

#: a helper whose kernels are "compiled" at once (numba's real compile is not what is tested)
QUICK = ("import uvm_sched._warmup as w; w.compile_kernels = lambda: {}; "
         "from uvm_sched._learn import main; main()")


class Helpers:
    """What ``_learn._start_process`` starts, recorded as (python_kernels, process):
    ``compiled`` / ``stand_in``, when set, is the code the helper / the stand-in runs
    instead of the real one."""

    def __init__(self) -> None:
        self.compiled: str | None = None
        self.stand_in: str | None = None
        self.started: list = []
        self._real = _learn._start_process

    def start(self, python_kernels: bool = False) -> subprocess.Popen:
        code = self.stand_in if python_kernels else self.compiled
        if code is None:
            proc = self._real(python_kernels)
        else:
            proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE,
                                    env=_learn.helper_env(python_kernels))
        self.started.append((python_kernels, proc))
        return proc

    def kinds(self) -> list:
        return [k for k, _ in self.started]


@pytest.fixture
def worker(monkeypatch):
    """A process worker of its own (the shared one is left alone) and its ``helpers``;
    afterwards closed, and every helper it started gone (fakes that never end killed)."""
    w = _learn.Worker("process")
    monkeypatch.setitem(_learn._shared, "process", w)
    helpers = Helpers()
    monkeypatch.setattr(_learn, "_start_process", helpers.start)
    w.helpers = helpers
    yield w
    w.close()
    for _, proc in helpers.started:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _plan_kernels(worker) -> str:
    """Run the miniature loop until a plan is armed; the kernels that made it."""
    return armed_run()["plan_kernels"]


def test_a_plan_asked_while_the_helper_compiles_comes_from_the_plain_python_stand_in(
        host, worker):
    worker.helpers.compiled = "import time; time.sleep(600)"  # compiles on and on
    assert _plan_kernels(worker) == "python"
    assert worker.helpers.kinds() == [False, True]
    assert worker._compiling


def test_a_helper_ready_before_the_stand_in_answers_takes_the_request(host, worker):
    worker.helpers.compiled = "import time; time.sleep(2); " + QUICK
    worker.helpers.stand_in = "import sys; sys.stdin.buffer.read()"  # never answers
    assert _plan_kernels(worker) == "compiled"
    assert worker.helpers.kinds() == [False, True]
    assert worker.helpers.started[1][1].poll() is not None  # killed, not left behind
    assert worker._stand_in is None and not worker._compiling


def test_a_helper_ready_before_the_request_plans_alone(host, worker):
    worker.helpers.compiled = QUICK
    worker._start_helper()
    assert worker._helper_ready(120)
    assert _plan_kernels(worker) == "compiled"
    assert worker.helpers.kinds() == [False]  # no stand-in was needed


def test_a_helper_that_dies_compiling_leaves_the_stand_in_answering(host, worker, caplog):
    worker.helpers.compiled = "import time; time.sleep(1); raise SystemExit(3)"
    worker.helpers.stand_in = ("import time; time.sleep(3); from uvm_sched._learn import "
                               "main; main()")
    with caplog.at_level(logging.WARNING, logger="uvm_sched._learn"):
        assert _plan_kernels(worker) == "python"
    assert "died compiling its kernels" in caplog.text
    kinds = worker.helpers.kinds()  # (a helper dead before the request is restarted)
    assert kinds[0] is False and kinds[-1] is True and kinds.count(True) == 1


def test_closing_leaves_a_compiling_helper_to_finish_on_its_own(worker):
    worker.helpers.compiled = "import time; time.sleep(3); " + QUICK
    worker._start_helper()
    worker.close()  # returns at once: the helper is not waited for
    proc = worker.helpers.started[0][1]
    assert proc.poll() is None
    assert proc.wait(60) == 0  # it compiled, read the closed pipe, and ended


def test_a_helper_whose_loop_process_is_gone_ends_quietly():
    # the loop's process exited (its end of the answer pipe closed) while the helper was
    # still working: its answer meets a broken pipe, and the user's terminal gets no
    # traceback from it
    proc = subprocess.Popen([sys.executable, "-c", QUICK], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=_learn.helper_env())
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # first: no answer can be read before it breaks
    _learn._write_frame(proc.stdin, {"ping": True})
    proc.stdin.close()
    err = proc.stderr.read()
    assert proc.wait(60) == 0
    assert err == b"", err.decode()
