"""The cuda backend against the fake driver: backend selection, how the driver is called
(symbol resolution by version, managed allocation flags, contexts), driver faults, and
that a reset returns every reservation to the driver."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "native"))
import fakecuda  # noqa: E402

import uvm_sched  # noqa: E402
from uvm_sched import native  # noqa: E402

MiB = 1 << 20


def test_auto_picks_the_driver_when_it_has_a_device():
    with fakecuda.backend("host"):
        os.environ["UVM_SCHED_LIBCUDA"] = fakecuda.fake_path()
        native._reset("auto", force=True)
        assert uvm_sched.backend() == "cuda"
        assert "CUDA driver 13.0" in native.backend_reason()


def test_auto_falls_back_to_host_and_says_why():
    with fakecuda.backend("host", FAKE_CUDA_DEVICES="0"):
        os.environ["UVM_SCHED_LIBCUDA"] = fakecuda.fake_path()
        native._reset("auto", force=True)
        assert uvm_sched.backend() == "host"
        assert "auto" in native.backend_reason() and "no usable GPU" in native.backend_reason()
        os.environ["UVM_SCHED_LIBCUDA"] = "/nonexistent/libcuda.so.1"
        native._reset("auto", force=True)
        assert uvm_sched.backend() == "host"
        assert "/nonexistent/libcuda.so.1" in native.backend_reason()


def test_asking_for_cuda_without_a_driver_is_an_error():
    with fakecuda.backend("host"):
        os.environ["UVM_SCHED_LIBCUDA"] = "/nonexistent/libcuda.so.1"
        with pytest.raises(native.UvmSchedError, match="cannot load the CUDA driver"):
            native._reset("cuda", force=True)
        os.environ["UVM_SCHED_BACKEND"] = "cuda"  # the lazy start fails the same way
        with pytest.raises(native.UvmSchedError, match="no backend.*cannot load"):
            uvm_sched.malloc(10)


def test_unknown_backend_name():
    with fakecuda.backend("host"):
        with pytest.raises(ValueError, match="unknown backend"):
            native._reset("rocm", force=True)


def test_managed_reservations_use_the_primary_context_and_attach_global():
    with fakecuda.backend("fake", UVM_SCHED_ARENA_BYTES="64M") as fake:
        p = uvm_sched.malloc(10 * MiB)
        calls = fake.calls("cuMemAllocManaged")
        assert len(calls) == 1
        assert calls[0]["bytes"] == 64 * MiB and calls[0]["flags"] == 1  # CU_MEM_ATTACH_GLOBAL
        assert calls[0]["ptr"] <= p < calls[0]["ptr"] + 64 * MiB
        # a block bigger than an arena gets a reservation of its own, rounded to 2 MiB
        q = uvm_sched.malloc(100 * MiB + 5)
        assert fake.calls("cuMemAllocManaged")[-1]["bytes"] == 102 * MiB
        uvm_sched.free(p)
        uvm_sched.free(q)
        assert native.release_cached() == 166 * MiB
        assert len(fake.calls("cuMemFree")) == 2
        assert fake.live_allocations() == 0


def test_a_reset_returns_every_reservation_to_the_driver():
    with fakecuda.backend("fake", UVM_SCHED_ARENA_BYTES="8M") as fake:
        for _ in range(5):
            uvm_sched.malloc(6 * MiB)  # five arenas, left allocated on purpose
        assert fake.live_allocations() == 5
        with pytest.raises(native.UvmSchedError, match="5 blocks"):
            native._reset("cuda")
        native._reset("cuda", force=True)
        assert fake.live_allocations() == 0


def test_an_injected_out_of_memory_is_a_memory_error_and_the_pool_recovers():
    fail = ",".join(f"cuMemAllocManaged:{n}" for n in (2, 3, 4))
    with fakecuda.backend("fake", FAKE_CUDA_FAIL=fail, UVM_SCHED_ARENA_BYTES="8M"):
        a = uvm_sched.malloc(6 * MiB)
        with pytest.raises(native.OutOfMemoryError, match="CUDA_ERROR_OUT_OF_MEMORY") as e:
            uvm_sched.malloc(6 * MiB)
        assert e.value.size == 6 * MiB and e.value.reserved == 8 * MiB
        b = uvm_sched.malloc(6 * MiB)  # the next reservation succeeds
        uvm_sched.free(a)
        uvm_sched.free(b)
        s = uvm_sched.stats()
        assert s["n_oom"] == 1 and s["allocated_blocks"] == 0


def test_a_driver_error_at_startup_is_reported():
    with fakecuda.backend("host", FAKE_CUDA_FAIL="cuInit:1:3"):
        os.environ["UVM_SCHED_LIBCUDA"] = fakecuda.fake_path()
        with pytest.raises(native.UvmSchedError, match="cuInit failed with 3"):
            native._reset("cuda", force=True)


def test_pytorch_abi_logs_instead_of_raising():
    # a fresh process: the C ABI writes bad frees to stderr (and counts them), never aborts
    code = textwrap.dedent("""
        import ctypes, uvm_sched
        lib = ctypes.CDLL(uvm_sched.library_path())
        lib.uvm_sched_malloc.restype = ctypes.c_void_p
        lib.uvm_sched_malloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        lib.uvm_sched_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        p = lib.uvm_sched_malloc(100, 0, None)
        lib.uvm_sched_free(p, 100, 0, None)
        lib.uvm_sched_free(p, 100, 0, None)
        lib.uvm_sched_free(12345, 8, 0, None)
        assert lib.uvm_sched_malloc(2**63, 0, None) is None
        s = uvm_sched.stats()
        print(s["errors_double_free"], s["errors_unknown_pointer"], s["n_oom"])
    """)
    env = dict(os.environ, UVM_SCHED_BACKEND="host")
    env.pop("UVM_SCHED_VERBOSE", None)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "1", "1"]
    assert "double free detected of block" in r.stderr
    assert "0x3039" in r.stderr and "malloc of 9223372036854775808 bytes failed" in r.stderr


def test_a_stale_abi_tagged_build_is_never_loaded(tmp_path, monkeypatch):
    here = tmp_path / "_native"
    here.mkdir()
    stale = here / "_uvm_sched.cpython-310-x86_64-linux-gnu.so"  # left by an older build
    ours = here / "_uvm_sched.so"
    stale.write_bytes(b"")
    monkeypatch.setattr(native, "__file__", str(tmp_path / "native.py"))
    with pytest.raises(native.UvmSchedError, match="not built.*cpython-310.*stale"):
        native.library_path()
    ours.write_bytes(b"")
    assert native.library_path() == str(ours)


def test_gpu_extras_are_for_cuda_13():
    import tomllib

    extras = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())[
        "project"]["optional-dependencies"]
    assert extras["cupy"] == ["cupy-cuda13x"] and extras["cupy-cuda12"] == ["cupy-cuda12x"]
    # numba-cuda 0.21 supports CUDA 13; its cu13 extra brings libNVVM (cuda-toolkit[nvvm])
    assert extras["numba"] == ["numba-cuda[cu13]>=0.21"]
