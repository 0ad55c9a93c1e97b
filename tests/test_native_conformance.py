"""One conformance suite for the allocator, run on every backend: the host emulation, the
cuda backend over the fake driver, and the real driver where a GPU is present."""
from __future__ import annotations

import ctypes
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

sys.path.insert(0, str(Path(__file__).resolve().parent / "native"))
import fakecuda  # noqa: E402

import uvm_sched  # noqa: E402
from uvm_sched import native  # noqa: E402

PAGE = 2 << 20
KIND = {v: k for k, v in native.EVENT_KINDS.items()}

BACKENDS = ["host", "fake", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture(params=BACKENDS)
def backend(request):
    with fakecuda.backend(request.param) as fake:
        yield request.param, fake
        native._check_pool(full=True)  # whatever the test did left the pool whole


def _no_overlap(blocks):
    spans = sorted(blocks)
    for (a, n), (b, _) in zip(spans, spans[1:]):
        assert a + n <= b, f"blocks overlap: 0x{a:x}+{n} > 0x{b:x}"


def test_backend_is_the_one_selected(backend):
    name, _ = backend
    assert uvm_sched.backend() == ("host" if name == "host" else "cuda")
    assert native.stats()["backend"] == uvm_sched.backend()
    assert native.backend_reason()


def test_alignment_no_overlap_and_accounting(backend):
    sizes = [1, 511, 512, 513, 4096, 70_000, 1 << 20, (1 << 20) + 1, 5 << 20, 33 << 20]
    ptrs = [uvm_sched.malloc(n) for n in sizes]
    for p, n in zip(ptrs, sizes):
        assert p % 512 == 0
        if n > 1 << 20:
            assert p % PAGE == 0, f"a {n:,}-byte block must start on a 2 MiB boundary"
    _no_overlap(list(zip(ptrs, sizes)))
    s = uvm_sched.stats()
    assert s["allocated_bytes"] == sum(sizes)
    assert s["allocated_blocks"] == len(sizes)
    assert s["peak_allocated_bytes"] == sum(sizes)
    assert s["reserved_bytes"] >= s["in_use_bytes"] >= sum(sizes)
    assert 0 <= s["fragmentation"] < 1
    for p in ptrs:
        uvm_sched.free(p)
    s = uvm_sched.stats()
    assert s["allocated_bytes"] == 0 and s["allocated_blocks"] == 0
    assert s["n_malloc"] == s["n_free"] == len(sizes)


def test_freed_memory_is_reused_on_its_stream(backend):
    a = uvm_sched.malloc(3 << 20, stream=0)
    uvm_sched.free(a)
    assert uvm_sched.malloc(3 << 20, stream=0) == a
    # another stream does not get it while it could still be in use on stream 0
    b = uvm_sched.malloc(3 << 20, stream=0x5000)
    assert b != a
    small = uvm_sched.malloc(100, stream=0x5000)
    assert native.block_info(small)["stream"] == 0x5000
    for p in (a, b, small):
        uvm_sched.free(p)


def test_zero_size_and_free_null(backend):
    assert uvm_sched.malloc(0) == 0
    uvm_sched.free(0)
    s = uvm_sched.stats()
    assert s["n_zero_size"] == 1 and s["allocated_blocks"] == 0 and s["n_free"] == 0


def test_double_free_names_the_pointer(backend):
    p = uvm_sched.malloc(3000)
    uvm_sched.free(p)
    with pytest.raises(native.FreeError, match=f"0x{p:x}") as e:
        uvm_sched.free(p)
    assert e.value.reason == "double_free"
    big = uvm_sched.malloc(3 << 20)
    uvm_sched.free(big)
    with pytest.raises(native.FreeError, match="double free"):
        uvm_sched.free(big, size=3 << 20)
    assert uvm_sched.stats()["errors_double_free"] == 2


def test_foreign_and_interior_pointers_are_refused(backend):
    buf = np.zeros(16)
    with pytest.raises(native.FreeError, match=f"0x{buf.ctypes.data:x}") as e:
        uvm_sched.free(buf.ctypes.data)
    assert e.value.reason == "unknown"
    p = uvm_sched.malloc(8 << 20)
    with pytest.raises(native.FreeError, match="not the start"):
        uvm_sched.free(p + 4096)
    with pytest.raises(native.FreeError):
        uvm_sched.free(p + PAGE)
    uvm_sched.free(p)  # the refused frees left the block intact
    assert uvm_sched.stats()["errors_unknown_pointer"] == 3


def test_wrong_size_is_refused_and_the_block_stays(backend):
    p = uvm_sched.malloc(1000)
    with pytest.raises(native.FreeError, match="size=999.*1000 bytes") as e:
        uvm_sched.free(p, size=999)
    assert e.value.reason == "size" and e.value.size == 999
    assert uvm_sched.stats()["allocated_blocks"] == 1
    uvm_sched.free(p, size=1000)
    assert uvm_sched.stats()["errors_size_mismatch"] == 1


@pytest.mark.parametrize("size", [2**64 - 1, 2**64 - 4096, 2**62])
def test_huge_sizes_raise_out_of_memory(backend, size):
    with pytest.raises(native.OutOfMemoryError) as e:
        uvm_sched.malloc(size)
    assert isinstance(e.value, MemoryError) and e.value.size == size
    assert f"{size:,}" in str(e.value)
    assert uvm_sched.stats()["n_oom"] == 1
    assert uvm_sched.stats()["allocated_blocks"] == 0


def test_negative_size_is_a_value_error(backend):
    with pytest.raises(ValueError, match="negative"):
        uvm_sched.malloc(-1)


def test_arena_exhaustion_under_a_limit():
    with fakecuda.backend("host", UVM_SCHED_LIMIT_BYTES="32M", UVM_SCHED_ARENA_BYTES="16M"):
        held = [uvm_sched.malloc(10 << 20) for _ in range(2)]
        with pytest.raises(native.OutOfMemoryError) as e:
            uvm_sched.malloc(10 << 20)
        err = e.value
        assert (err.size, err.reserved, err.limit) == (10 << 20, 32 << 20, 32 << 20)
        assert "33,554,432" in str(err)
        # small blocks still fit in the room left
        small = [uvm_sched.malloc(4096) for _ in range(100)]
        uvm_sched.free(held.pop())
        held.append(uvm_sched.malloc(10 << 20))
        for p in held + small:
            uvm_sched.free(p)
        assert native.release_cached() == 32 << 20
        assert uvm_sched.stats()["reserved_bytes"] == 0


def test_events_record_every_alloc_free_and_mark(backend):
    uvm_sched.drain_events()
    t0 = uvm_sched.stats()["ticks"]
    a = uvm_sched.malloc(100, stream=7)
    uvm_sched.step()
    b = uvm_sched.malloc(5 << 20)
    uvm_sched.free(a)
    uvm_sched.free(b)
    ev = uvm_sched.drain_events()
    assert ev.dtype == native.EVENT_DTYPE
    assert [native.EVENT_KINDS[k] for k in ev["kind"]] == ["alloc", "mark", "alloc", "free", "free"]
    assert list(ev["tick"] - t0) == [0, 1, 1, 2, 3]
    assert list(ev["addr"][[0, 2, 3, 4]]) == [a, b, a, b]
    assert list(ev["size"][[0, 2, 3, 4]]) == [100, 5 << 20, 100, 5 << 20]
    assert ev["stream"][0] == 7 and ev["stream"][3] == 7
    assert ev["arg"][3] == ev["arg"][0] and ev["arg"][2] == ev["arg"][0] + 1  # alloc ordinals
    assert np.all(np.diff(ev["t_ns"].astype(np.int64)) >= 0)
    assert len(uvm_sched.drain_events()) == 0


def test_errors_are_events_too(backend):
    p = uvm_sched.malloc(10)
    uvm_sched.free(p)
    with pytest.raises(native.FreeError):
        uvm_sched.free(p)
    with pytest.raises(native.OutOfMemoryError):
        uvm_sched.malloc(2**63)
    kinds = [native.EVENT_KINDS[k] for k in uvm_sched.drain_events()["kind"]]
    assert kinds == ["alloc", "free", "double_free", "oom"]


def test_ring_overflow_is_counted_not_silent():
    with fakecuda.backend("host", UVM_SCHED_RING_EVENTS="1024"):
        for _ in range(1000):
            uvm_sched.free(uvm_sched.malloc(64))
        s = uvm_sched.stats()
        assert s["ring_capacity"] == 1024
        assert s["events_dropped"] == 2000 - 1024
        ev = uvm_sched.drain_events()
        assert len(ev) == 1024 and ev["tick"][-1] == 1023
        uvm_sched.free(uvm_sched.malloc(64))
        assert list(uvm_sched.drain_events()["tick"]) == [2000, 2001]


def test_tracing_can_be_switched_off(backend):
    assert native.set_tracing(False) is True
    uvm_sched.free(uvm_sched.malloc(64))
    assert len(uvm_sched.drain_events()) == 0
    assert uvm_sched.stats()["ticks"] == 2  # the clock still runs
    native.set_tracing(True)


def test_library_path_and_abi():
    path = Path(uvm_sched.library_path())
    assert path.is_file() and path.parent.name == "_native"
    assert native._load().uvm_sched_abi_version() == native.ABI_VERSION


def test_eight_threads_no_lost_or_overlapping_blocks(backend):
    _threads(seconds=1.0)


@pytest.mark.slow
def test_eight_threads_ten_seconds():
    with fakecuda.backend("host"):
        _threads(seconds=10.0)


def _threads(seconds: float) -> None:
    errors: list[str] = []
    stop = time.monotonic() + seconds

    def work(tid: int) -> None:
        # each block carries (thread, serial) in its first 8 bytes: a block handed to two
        # threads at once shows up as an overwritten tag
        rng = np.random.default_rng(tid)
        live: dict[int, tuple[int, int]] = {}
        serial = 0

        def release(p: int) -> None:
            n, tag = live.pop(p)
            if ctypes.c_uint64.from_address(p).value != tag:
                errors.append(f"thread {tid}: block 0x{p:x} overwritten")
            uvm_sched.free(p, size=n)

        while time.monotonic() < stop:
            for _ in range(200):
                if live and rng.random() < 0.5:
                    release(list(live)[int(rng.integers(len(live)))])
                else:
                    n = int(rng.choice([64, 512, 3000, 70_000, 1 << 20, 3 << 20]))
                    p = uvm_sched.malloc(n, stream=tid % 2)
                    serial += 1
                    tag = tid << 48 | serial
                    ctypes.c_uint64.from_address(p).value = tag
                    live[p] = (n, tag)
        for p in list(live):
            release(p)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    s = uvm_sched.stats()
    assert s["allocated_blocks"] == 0 and s["allocated_bytes"] == 0
    assert s["n_malloc"] == s["n_free"] > 0
    assert s["errors_double_free"] == s["errors_unknown_pointer"] == 0
    # the ring saw every event in a single order: each block alloc'd once, freed once
    ev = uvm_sched.drain_events()
    if s["events_dropped"] == 0:
        allocs = ev[ev["kind"] == 0]
        frees = ev[ev["kind"] == 1]
        assert len(allocs) == len(frees) == s["n_malloc"]
        assert np.array_equal(np.sort(allocs["arg"]), np.sort(frees["arg"]))
        assert np.all(np.diff(ev["tick"].astype(np.int64)) >= 0)


# ---- property-based: malloc/free against a model ------------------------------------
class PoolModel(RuleBasedStateMachine):
    """Random malloc/free on the host backend against a dict of live blocks: no overlap,
    alignment, and byte/block accounting after every step."""

    def __init__(self):
        super().__init__()
        self.ctx = fakecuda.backend("host", UVM_SCHED_LIMIT_BYTES="256M",
                                    UVM_SCHED_ARENA_BYTES="64M")
        self.ctx.__enter__()
        self.live: dict[int, tuple[int, int]] = {}

    def teardown(self):
        self.ctx.__exit__(None, None, None)

    @rule(n=st.one_of(st.integers(1, 4096), st.integers(4097, 1 << 20),
                      st.integers((1 << 20) + 1, 40 << 20)),
          stream=st.sampled_from([0, 16, 32]))
    def malloc(self, n, stream):
        try:
            p = uvm_sched.malloc(n, stream=stream)
        except native.OutOfMemoryError as e:
            assert e.limit == 256 << 20
            return
        assert p % 512 == 0 and (n <= 1 << 20 or p % PAGE == 0)
        for q, (m, _) in self.live.items():
            assert p + n <= q or q + m <= p, f"0x{p:x}+{n} overlaps 0x{q:x}+{m}"
        self.live[p] = (n, stream)

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 10**6), cross=st.booleans())
    def free(self, i, cross):
        p = sorted(self.live)[i % len(self.live)]
        n, stream = self.live.pop(p)
        uvm_sched.free(p, size=n, stream=(stream + 16) % 48 if cross else None)

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 10**6))
    def double_free_is_refused(self, i):
        p = sorted(self.live)[i % len(self.live)]
        n, stream = self.live.pop(p)
        uvm_sched.free(p)
        with pytest.raises(native.FreeError):
            uvm_sched.free(p)

    @rule()
    def release(self):
        native.release_cached()

    @invariant()
    def accounting(self):
        native._check_pool(full=True)
        s = uvm_sched.stats()
        assert s["allocated_blocks"] == len(self.live)
        assert s["allocated_bytes"] == sum(n for n, _ in self.live.values())
        assert s["reserved_bytes"] <= 256 << 20


TestPoolModel = PoolModel.TestCase
TestPoolModel.settings = settings(max_examples=40, stateful_step_count=60, deadline=None)
