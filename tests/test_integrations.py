"""Framework adapters: PyTorch, CuPy, Numba. CPU checks of what can be checked without a
GPU (clear errors, the plugin protocols, the exported ABI); GPU-marked end-to-end runs in
a fresh process (PyTorch refuses to swap an allocator once CUDA is in use)."""
from __future__ import annotations

import ctypes
import gc
import importlib
import os
import subprocess
import sys
import textwrap

import pytest

import uvm_sched
from uvm_sched import native


def test_the_library_exports_the_pytorch_abi():
    lib = ctypes.CDLL(uvm_sched.library_path())
    for name in ("uvm_sched_malloc", "uvm_sched_free", "uvm_sched_abi_version"):
        assert hasattr(lib, name), name
    # the 4-argument free PyTorch calls, through the same library instance
    lib.uvm_sched_malloc.restype = ctypes.c_void_p
    lib.uvm_sched_malloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    lib.uvm_sched_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    before = uvm_sched.stats()["n_malloc"]
    p = lib.uvm_sched_malloc(4096, 0, None)
    assert p and native.block_info(p)["size"] == 4096
    assert uvm_sched.stats()["n_malloc"] == before + 1
    lib.uvm_sched_free(p, 4096, 0, None)
    assert uvm_sched.stats()["allocated_blocks"] == 0
    assert lib.uvm_sched_malloc(0, 0, None) is None  # size 0 -> NULL, never an abort


def test_torch_allocator_on_a_cpu_torch_is_a_clear_error():
    torch = pytest.importorskip("torch")
    if torch.version.cuda:
        pytest.skip("this torch has CUDA; the CPU-only error does not apply")
    with pytest.raises(RuntimeError, match="without CUDA"):
        uvm_sched.allocator()


def test_optimizer_steps_become_iteration_markers():
    torch = pytest.importorskip("torch")
    from uvm_sched.integrations.torch import mark_optimizer_steps

    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    uvm_sched.drain_events()
    marks = uvm_sched.stats()["marks"]
    handle = mark_optimizer_steps()
    try:
        for _ in range(3):
            opt.zero_grad()
            model(torch.ones(1, 4)).sum().backward()
            opt.step()
    finally:
        handle.remove()
    assert uvm_sched.stats()["marks"] == marks + 3
    kinds = [native.EVENT_KINDS[k] for k in uvm_sched.drain_events()["kind"]]
    assert kinds.count("mark") == 3


def test_cupy_allocator_without_cupy_is_a_clear_error():
    try:
        importlib.import_module("cupy")
    except ImportError:
        with pytest.raises(RuntimeError, match="needs CuPy"):
            uvm_sched.cupy_allocator()
    else:
        pytest.skip("CuPy is installed; the missing-CuPy error does not apply")


def test_a_cupy_block_keeps_its_allocation_stream_alive_until_it_is_freed(monkeypatch):
    # CuPy destroys a stream when its Stream object goes (cuStreamDestroy); the free of a
    # block made on it is ordered after that stream, which must still exist then
    import types
    import weakref

    class Stream:
        ptr = 0x5000

    class Memory:
        def __init__(self, ptr, size, owner, device_id):
            self.ptr, self.owner = ptr, owner

    current = {"stream": Stream()}
    cuda = types.SimpleNamespace(
        Device=lambda: types.SimpleNamespace(id=0),
        get_current_stream=lambda: current["stream"],
        UnownedMemory=Memory,
        MemoryPointer=lambda mem, offset: types.SimpleNamespace(mem=mem),
    )
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
    blocks = uvm_sched.stats()["allocated_blocks"]
    mp = uvm_sched.cupy_allocator()(4096)
    assert native.block_info(mp.mem.ptr)["stream"] == Stream.ptr
    alive = weakref.ref(current.pop("stream"))
    gc.collect()
    assert alive() is not None, "the stream went while its block is live"
    del mp
    gc.collect()
    assert alive() is None
    assert uvm_sched.stats()["allocated_blocks"] == blocks


def test_numba_plugin_protocol():
    driver = pytest.importorskip("numba.cuda.cudadrv.driver")
    mod = importlib.import_module("uvm_sched.numba")
    cls = mod._numba_memory_manager
    assert issubclass(cls, driver.BaseCUDAMemoryManager)
    assert issubclass(cls, driver.HostOnlyCUDAMemoryManager)

    class _Ctx:  # what numba passes: a context with a device
        class device:
            id = 0

    mm = cls(context=_Ctx())
    assert mm.interface_version == 1
    mm.initialize()
    before = uvm_sched.stats()["allocated_blocks"]
    ptr = mm.memalloc(3 << 20)
    assert ptr.size == 3 << 20
    assert uvm_sched.stats()["allocated_blocks"] == before + 1
    ptr.free()  # numba's explicit release runs our finalizer
    del ptr
    gc.collect()
    assert uvm_sched.stats()["allocated_blocks"] == before


class _Ctx:  # what numba passes: a context with a device
    class device:
        id = 0


def _numba_manager():
    pytest.importorskip("numba.cuda.cudadrv.driver")
    mm = importlib.import_module("uvm_sched.numba")._numba_memory_manager(context=_Ctx())
    mm.initialize()
    return mm


def test_numba_plugin_works_without_use_nv_binding(monkeypatch):
    # numba-cuda 0.21 (CUDA 13 support) removed driver.USE_NV_BINDING: the NVIDIA binding
    # is the only one, and its CUdeviceptr wraps the address
    mm = _numba_manager()
    from numba.cuda.cudadrv import driver

    class Binding:
        class CUdeviceptr(int):
            pass

    monkeypatch.delattr(driver, "USE_NV_BINDING", raising=False)
    monkeypatch.setattr(driver, "binding", Binding, raising=False)
    ptr = mm.memalloc(1 << 20)
    assert isinstance(ptr.device_pointer, Binding.CUdeviceptr) and ptr.device_pointer > 0
    ptr.free()


def test_numba_plugin_defers_numbas_own_cleanup():
    # the EMM interface: "EMM Plugins that override this method must obtain the context
    # manager from this method before yielding"
    mm = _numba_manager()
    with mm.defer_cleanup():
        assert mm.deallocations.is_disabled
    assert not mm.deallocations.is_disabled


def test_numba_plugin_reports_the_devices_memory(monkeypatch):
    mm = _numba_manager()
    from numba.cuda.cudadrv import driver

    class Drv:
        @staticmethod
        def cuMemGetInfo(free, total):
            free._obj.value, total._obj.value = 100 << 30, 141 << 30

    monkeypatch.setattr(driver, "USE_NV_BINDING", False, raising=False)
    monkeypatch.setattr(driver, "driver", Drv)
    info = mm.get_memory_info()
    assert (info.free, info.total) == (100 << 30, 141 << 30)


def test_numba_plugin_refuses_ipc_of_managed_memory_clearly():
    mm = _numba_manager()
    ptr = mm.memalloc(1 << 20)
    with pytest.raises(NotImplementedError, match="managed memory.*cuIpcGetMemHandle"):
        mm.get_ipc_handle(ptr)
    ptr.free()


def _fresh(code: str, **env) -> subprocess.CompletedProcess:
    e = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.gpu
def test_torch_trains_a_few_steps_on_uvm_sched():
    pytest.importorskip("torch")
    r = _fresh("""
        import torch, uvm_sched
        torch.cuda.memory.change_current_allocator(uvm_sched.allocator())
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(),
                                    torch.nn.Linear(1024, 10)).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x, y = torch.randn(256, 512, device="cuda"), torch.randint(0, 10, (256,), device="cuda")
        losses = []
        for _ in range(20):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            uvm_sched.step()
            losses.append(loss.item())
        torch.cuda.synchronize()
        s = uvm_sched.stats()
        assert s["backend"] == "cuda", s
        assert s["n_malloc"] > 20 and s["allocated_bytes"] > 0, s
        assert losses[-1] < losses[0], losses
        print("ok", s["n_malloc"], s["peak_allocated_bytes"], losses[0], losses[-1])
    """)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok" in r.stdout


@pytest.mark.gpu
def test_torch_gets_an_error_not_a_null_tensor_and_graph_capture_is_refused():
    # torch's CUDAPluggableAllocator::malloc does not check for NULL: the shim raises
    pytest.importorskip("torch")
    r = _fresh("""
        import torch, uvm_sched
        torch.cuda.memory.change_current_allocator(uvm_sched.allocator())
        a = torch.ones(1 << 20, device="cuda")
        try:
            torch.empty(1 << 30, dtype=torch.uint8, device="cuda")  # over the 256M limit
            raise SystemExit("no error for an allocation past the limit")
        except RuntimeError as e:
            assert "uvm_sched: CUDA out of memory" in str(e) and "1073741824 bytes" in str(e), e
        assert float(a.sum()) == 1 << 20  # the context is alive
        side = torch.cuda.Stream()
        b = torch.ones(1 << 20, device="cuda")
        with torch.cuda.stream(side):
            c = b * 2
        b.record_stream(side)
        del b
        torch.cuda.empty_cache()
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g):
                torch.ones(1 << 20, device="cuda")
            raise SystemExit("graph capture was not refused")
        except RuntimeError as e:
            assert "graph capture" in str(e), e
        print("ok", float(c.sum()))
    """, UVM_SCHED_LIMIT_BYTES="256M")
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


@pytest.mark.gpu
def test_torch_refuses_the_swap_after_cuda_is_initialised():
    pytest.importorskip("torch")
    r = _fresh("""
        import torch, uvm_sched
        torch.zeros(1, device="cuda")
        try:
            uvm_sched.allocator()
        except RuntimeError as e:
            assert "already initialised" in str(e)
            print("ok")
    """)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


@pytest.mark.gpu
def test_numba_kernels_run_on_uvm_sched_memory():
    pytest.importorskip("numba")
    r = _fresh("""
        import numpy as np
        from numba import cuda
        import uvm_sched

        @cuda.jit
        def add_one(a):
            i = cuda.grid(1)
            if i < a.size:
                a[i] += 1

        d = cuda.to_device(np.arange(1 << 20, dtype=np.float32))
        add_one[1024, 1024](d)
        out = d.copy_to_host()
        assert out[5] == 6.0
        assert uvm_sched.stats()["n_malloc"] >= 1
        print("ok")
    """, NUMBA_CUDA_MEMORY_MANAGER="uvm_sched.numba")
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


@pytest.mark.gpu
def test_cupy_arrays_live_in_uvm_sched_memory():
    pytest.importorskip("cupy")
    r = _fresh("""
        import cupy, uvm_sched
        cupy.cuda.set_allocator(uvm_sched.cupy_allocator())
        a = cupy.arange(1 << 20, dtype=cupy.float32)
        assert float((a + 1).sum()) > 0
        assert uvm_sched.stats()["n_malloc"] >= 2
        del a
        print("ok")
    """)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr
