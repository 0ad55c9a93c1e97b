"""What PyTorch's pluggable allocator gets from uvm_sched, checked without a GPU: a refused
allocation is a C++ exception with the reason, never a NULL (torch's
CUDAPluggableAllocator::malloc does not check); graph capture is refused; record_stream
makes the free wait for the recorded stream; empty_cache releases the cache."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "native"))
import fakecuda  # noqa: E402
from conftest import skip_without_compiler  # noqa: E402

import uvm_sched  # noqa: E402
from uvm_sched import native  # noqa: E402
from uvm_sched.integrations import torch as uvm_torch  # noqa: E402

MiB = 1 << 20
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def shim_check(tmp_path_factory):
    cxx = skip_without_compiler("CXX", "g++")
    exe = tmp_path_factory.mktemp("shim") / "torch_shim_check"
    subprocess.run([cxx, "-std=c++17", "-Wall", "-Werror", "-o", str(exe),
                    str(HERE / "native" / "torch_shim_check.cpp"), "-ldl"], check=True)

    def run(nbytes, *extra, **env):
        e = dict(os.environ, UVM_SCHED_VERBOSE="0", **env)
        r = subprocess.run([str(exe), native.library_path(), uvm_torch._shim_path(),
                            str(nbytes), *extra], capture_output=True, text=True, env=e,
                           timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout.strip()

    return run


def test_a_refused_allocation_reaches_torch_as_an_exception_with_the_reason(shim_check):
    assert shim_check(MiB, UVM_SCHED_BACKEND="host").startswith("ptr 0x")
    out = shim_check(1 << 30, UVM_SCHED_BACKEND="host", UVM_SCHED_LIMIT_BYTES="64M")
    assert out.startswith("caught: uvm_sched: CUDA out of memory: cannot allocate "
                          "1073741824 bytes on CUDA device 0"), out


def test_graph_capture_is_refused_with_a_clear_error(shim_check):
    env = dict(UVM_SCHED_BACKEND="cuda", UVM_SCHED_LIBCUDA=fakecuda.fake_path())
    assert shim_check(MiB, **env).startswith("ptr 0x")
    out = shim_check(MiB, "capture", **env)
    assert out.startswith("caught: uvm_sched: refused to allocate") and "graph capture" in out


def _core():
    lib = native._load()
    lib.uvm_sched_torch_malloc_status.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p,
                                                  ctypes.POINTER(ctypes.c_void_p)]
    lib.uvm_sched_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                         ctypes.c_void_p]
    lib.uvm_sched_torch_record_stream.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    return lib


def test_record_stream_makes_the_free_wait_for_the_recorded_stream():
    with fakecuda.backend("fake") as fake:
        lib = _core()
        alloc_s, side = fake.app_stream(0), fake.app_stream(0)
        side_name = [ln for ln in fake.lib.fake_cuda_log().decode().splitlines()
                     if "app stream" in ln][-1].split()[-1]
        p = ctypes.c_void_p()
        assert lib.uvm_sched_torch_malloc_status(4 * MiB, 0, alloc_s, ctypes.byref(p)) == 0
        lib.uvm_sched_torch_record_stream(p, side)
        fake.clear()
        lib.uvm_sched_torch_free(p, 4 * MiB, 0, alloc_s)
        calls = fake.calls()
        names = [c["name"] for c in calls if c["name"] != "cuCtxSetCurrent"]
        assert names[:4] == ["cuEventCreate", "cuEventRecord", "cuEventSynchronize",
                             "cuEventDestroy"]
        rec = next(c for c in calls if c["name"] == "cuEventRecord")
        assert rec["stream"] == side_name  # the recorded stream, not the allocation one
        assert uvm_sched.stats()["allocated_blocks"] == 0
        fake.clear()
        q = ctypes.c_void_p()
        assert lib.uvm_sched_torch_malloc_status(4 * MiB, 0, alloc_s, ctypes.byref(q)) == 0
        lib.uvm_sched_torch_free(q, 4 * MiB, 0, alloc_s)  # not recorded: no wait
        assert not fake.calls("cuEventSynchronize")


def test_empty_cache_returns_the_cached_arenas():
    with fakecuda.backend("fake", UVM_SCHED_ARENA_BYTES="8M") as fake:
        lib = _core()
        uvm_sched.free(uvm_sched.malloc(4 * MiB))
        assert fake.live_allocations() == 1
        lib.uvm_sched_torch_empty_cache()
        assert fake.live_allocations() == 0


def test_the_allocator_torch_gets_is_the_shim_with_empty_cache_and_record_stream(monkeypatch):
    made = {}

    class Inner:
        def set_reset_fn(self, a):
            made["reset"] = a

        def set_record_stream_fn(self, a):
            made["record"] = a

    class Pluggable:
        def __init__(self, path, alloc_name, free_name):
            made["args"] = (path, alloc_name, free_name)
            self._allocator = Inner()

        def allocator(self):
            return self._allocator

    fake_torch = types.SimpleNamespace(
        __version__="2.13.0+cu130", version=types.SimpleNamespace(cuda="13.0"),
        cuda=types.SimpleNamespace(is_initialized=lambda: False,
                                   memory=types.SimpleNamespace(CUDAPluggableAllocator=Pluggable)))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setattr(uvm_torch, "_ALLOCATOR", None)
    uvm_torch.allocator()
    assert made["args"] == (uvm_torch._shim_path(), "uvm_sched_torch_malloc",
                            "uvm_sched_torch_free_shim")
    core = native._load()
    addr = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
    assert made["reset"] == addr(core.uvm_sched_torch_empty_cache)
    assert made["record"] == addr(core.uvm_sched_torch_record_stream)
