"""Drained events land in memory a helper thread has already faulted in
(``uvm_sched/_drain_slabs.py``): the training thread's drain takes no page faults once a
slab is ready, batches never share bytes, and a forked child drains without the helper."""
from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "native"))
import fakecuda  # noqa: E402

from uvm_sched import native  # noqa: E402
from uvm_sched._drain_slabs import _MAX_SLAB_BYTES, DrainSlabs  # noqa: E402

EVENTS = 50_000  # ~2.8 MB of records: ~680 fresh pages


@pytest.fixture
def host():
    with fakecuda.backend("host"):
        yield


def _wait_for_room(slabs: DrainSlabs, records: int) -> None:
    deadline = time.monotonic() + 30
    while slabs.room() < records:
        assert time.monotonic() < deadline, f"no slab with room for {records:,} records"
        time.sleep(0.01)


def _minor_faults_of_this_thread() -> int:
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt


@pytest.mark.skipif(not hasattr(resource, "RUSAGE_THREAD"), reason="Linux-only rusage")
def test_a_drain_into_a_ready_slab_takes_no_page_faults_on_the_calling_thread(host):
    slabs = native._DRAIN_MEMORY
    native.drain_events()
    for _ in range(EVENTS // 2):
        native.free(native.malloc(256))
    slabs.empty(EVENTS)  # (the size seen: the helper prepares room for a few of them)
    _wait_for_room(slabs, EVENTS)
    before = _minor_faults_of_this_thread()
    ev = native.drain_events()
    faults = _minor_faults_of_this_thread() - before
    assert len(ev) == EVENTS
    # a fresh array would fault every page it fills: len * 56 / 4096 = 683 pages
    assert faults < EVENTS * ev.dtype.itemsize // 4096 // 10, faults


def test_batches_carved_from_one_slab_share_no_bytes():
    slabs = DrainSlabs(native.EVENT_DTYPE)
    slabs.empty(1000)
    _wait_for_room(slabs, 3000)
    a, b = slabs.empty(1000), slabs.empty(1000)
    assert a.base is not None and a.base is b.base  # (both carved from the slab)
    a["arg"], b["arg"] = 1, 2
    assert (a["arg"] == 1).all() and (b["arg"] == 2).all()


def test_a_drain_larger_than_any_slab_is_allocated_fresh_and_asks_for_no_slab():
    slabs = DrainSlabs(native.EVENT_DTYPE)
    n = _MAX_SLAB_BYTES // native.EVENT_DTYPE.itemsize + 1
    out = slabs.empty(n)
    assert len(out) == n and slabs.fresh == 1 and slabs.carved == 0
    assert slabs.room() == 0 and slabs._helper is None  # no slab asked for: none could hold it


def test_drains_after_a_huge_one_are_carved_from_slabs_again():
    slabs = DrainSlabs(native.EVENT_DTYPE)
    slabs.empty(_MAX_SLAB_BYTES // native.EVENT_DTYPE.itemsize + 1)
    deadline = time.monotonic() + 30
    while slabs.carved == 0:
        assert time.monotonic() < deadline, "no drain carved from a slab after the huge one"
        slabs.empty(1000)
        time.sleep(0.01)
    for _ in range(30):  # one slab holds a thousand of these: no more are made for them
        slabs.empty(1000)
        time.sleep(0.005)
    assert slabs.prepared <= 2, slabs.prepared


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_drains_without_the_parents_helper():
    # the helper is busy (the lock may be held at the fork): the child must neither wait
    # for it nor for a lock nobody will release
    code = """if True:
        import os, sys
        from uvm_sched import native
        slabs = native._DRAIN_MEMORY
        slabs.empty(10_000)
        pid = os.fork()
        if pid == 0:
            out = slabs.empty(123)
            os._exit(0 if len(out) == 123 else 1)
        _, status = os.waitpid(pid, 0)
        sys.exit(os.waitstatus_to_exitcode(status))
    """
    proc = subprocess.run([sys.executable, "-c", code], timeout=60,
                          env={**os.environ, "UVM_SCHED_BACKEND": "host"})
    assert proc.returncode == 0


def test_what_is_dropped_later_is_released_on_the_helper_thread():
    import threading
    import weakref

    import numpy as np

    slabs = DrainSlabs(native.EVENT_DTYPE)
    released_on = []

    class Marker:
        def __del__(self):
            released_on.append(threading.current_thread().name)

    chunk = np.ones(1000)
    gone = weakref.ref(chunk)
    objs = [chunk, Marker()]
    del chunk
    slabs.drop_later(objs)
    assert objs == []  # the caller holds nothing of it any more
    deadline = time.monotonic() + 30
    while gone() is not None or not released_on:
        assert time.monotonic() < deadline, "not released"
        time.sleep(0.01)
    assert released_on == ["uvm_sched-memory"]


def test_a_scheduler_starts_the_memory_helper_before_its_first_step():
    # starting a thread costs milliseconds on a loaded machine: not inside step()
    code = """if True:
        import sys
        from uvm_sched import native
        from uvm_sched.runtime import Scheduler
        with Scheduler(budget="80%", hook=False, worker="thread"):
            sys.exit(0 if native._DRAIN_MEMORY._helper is not None else 3)
    """
    proc = subprocess.run([sys.executable, "-c", code], timeout=120,
                          env={**os.environ, "UVM_SCHED_BACKEND": "host"})
    assert proc.returncode == 0
