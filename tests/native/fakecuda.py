"""Test helper: build the fake CUDA driver (fake_cuda.c) once per process and switch the
native library between backends.  Imported by tests/test_native*.py, test_executor*.py."""
from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
_BUILT: dict[str, str] = {}


def fake_path() -> str:
    """Path of a freshly built fake libcuda.so.1 (gcc; one build per process), or of the
    one $UVM_SCHED_FAKE_CUDA names (built beforehand: scripts/wheel_check.sh tests the
    installed wheel with no compiler on PATH)."""
    return build_fake("fake_cuda.c", "libcuda.so.1", "UVM_SCHED_FAKE_CUDA", "CUDA driver")


def build_fake(source: str, soname: str, env: str, what: str) -> str:
    """Path of the fake library built from ``source`` (this folder) as ``soname``, once
    per process, or the prebuilt one ``$env`` names; skips the test without a compiler."""
    if source not in _BUILT and os.environ.get(env):
        _BUILT[source] = os.environ[env]
    if source not in _BUILT:
        cc = os.environ.get("CC", "gcc")
        if shutil.which(cc) is None:
            import pytest

            pytest.skip(f"no C compiler ({cc}) to build the fake {what} library")
        out = Path(tempfile.mkdtemp(prefix="uvm_fake_")) / soname
        subprocess.run([cc, "-Wall", "-Wextra", "-Werror", "-std=c11", "-O1", "-fPIC", "-shared",
                        "-fvisibility=hidden", "-pthread", "-o", str(out),
                        str(HERE / source)], check=True)
        _BUILT[source] = str(out)
    return _BUILT[source]


class Fake:
    """The loaded fake driver (the same instance the native library dlopen'd)."""

    def __init__(self, path: str) -> None:
        self.lib = ctypes.CDLL(path)
        self.lib.fake_cuda_log.restype = ctypes.c_char_p
        self.lib.fake_cuda_live_allocations.restype = ctypes.c_int

    def clear(self) -> None:
        self.lib.fake_cuda_log_clear()

    def calls(self, name_prefix: str | None = None) -> list[dict]:
        """Recorded calls as dicts: ``seq``, ``name``, ``rc`` and the key=value fields."""
        out = []
        for line in self.lib.fake_cuda_log().decode().splitlines():
            parts = line.split()
            d: dict = {"seq": int(parts[0]), "name": parts[1]}
            for p in parts[2:]:
                if "=" in p:
                    k, v = p.split("=", 1)
                    d[k] = int(v, 0) if v[:1].isdigit() or v[:1] == "-" else v
            d["rc"] = int(parts[-1]) if parts[-2] == "->" else None
            if name_prefix is None or d["name"].startswith(name_prefix):
                out.append(d)
        return out

    def live_allocations(self) -> int:
        return self.lib.fake_cuda_live_allocations()

    def proc(self, name: str, *argtypes, version: int = 13000):
        """The fake's entry point ``name`` as resolved by cuGetProcAddress_v2 at ABI
        ``version``, callable from ctypes (returns the CUresult)."""
        fn = ctypes.c_void_p()
        status = ctypes.c_int()
        self.lib.cuGetProcAddress_v2.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p),
                                                 ctypes.c_int, ctypes.c_ulonglong,
                                                 ctypes.POINTER(ctypes.c_int)]
        rc = self.lib.cuGetProcAddress_v2(name.encode(), ctypes.byref(fn), version, 0,
                                          ctypes.byref(status))
        assert rc == 0 and fn.value, f"the fake has no {name} at ABI {version}"
        return ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(fn.value)

    def app_stream(self, device: int = 0) -> int:
        """A stream of ``device``'s context, as the application would have made it."""
        self.lib.fake_cuda_stream_create_on.restype = ctypes.c_void_p
        return self.lib.fake_cuda_stream_create_on(device)

    def destroy_stream(self, stream: int) -> int:
        """What the application's ``cuStreamDestroy(stream)`` does: the CUresult. Any later
        use of the handle is refused (CUDA_ERROR_INVALID_HANDLE, logged "destroyed")."""
        return self.proc("cuStreamDestroy", ctypes.c_void_p)(stream)

    def destroyed_stream_uses(self) -> list[str]:
        """The log lines of calls that were given a destroyed stream."""
        return [line for line in self.lib.fake_cuda_log().decode().splitlines()
                if "destroyed stream" in line]

    def touch(self, stream: int, ptr: int, nbytes: int) -> int:
        """A kernel of the application using [ptr, ptr+nbytes) on stream: the CUresult
        (1 = it may run at the same time as a discard of the range)."""
        self.lib.fake_cuda_touch.argtypes = [ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_size_t]
        return self.lib.fake_cuda_touch(stream or None, ptr, nbytes)

    def primary(self, device: int) -> int:
        """The primary context of ``device`` (retained)."""
        ctx = ctypes.c_void_p()
        retain = self.proc("cuDevicePrimaryCtxRetain", ctypes.POINTER(ctypes.c_void_p), ctypes.c_int)
        assert retain(ctypes.byref(ctx), device) == 0
        return ctx.value

    def set_current(self, ctx: int | None) -> None:
        """Make ``ctx`` current on the calling thread (None: no context)."""
        assert self.proc("cuCtxSetCurrent", ctypes.c_void_p)(ctx) == 0

    def current_device(self) -> int | None:
        """The device of the calling thread's current context (None: no context)."""
        d = ctypes.c_int()
        rc = self.proc("cuCtxGetDevice", ctypes.POINTER(ctypes.c_int))(ctypes.byref(d))
        return d.value if rc == 0 else None


FAKE_ENV = ("FAKE_CUDA_VERSION", "FAKE_CUDA_DEVICES", "FAKE_CUDA_FAIL", "FAKE_CUDA_NO_DISCARD",
            # the clock's rates and the memory cuMemGetInfo reports (fake_clock.h)
            "FAKE_CUDA_H2D_GBPS", "FAKE_CUDA_D2H_GBPS", "FAKE_CUDA_DUPLEX_GBPS",
            "FAKE_CUDA_REMOTE_GBPS", "FAKE_CUDA_FAULT_US", "FAKE_CUDA_FAULT_GBPS",
            "FAKE_CUDA_POPULATE_GBPS", "FAKE_CUDA_HBM_GBPS", "FAKE_CUDA_LAUNCH_US",
            "FAKE_CUDA_TOTAL_BYTES", "FAKE_CUDA_FREE_BYTES")
UVM_ENV = ("UVM_SCHED_LIBCUDA", "UVM_SCHED_BACKEND", "UVM_SCHED_LIMIT_BYTES",
           "UVM_SCHED_ARENA_BYTES", "UVM_SCHED_RING_EVENTS", "UVM_SCHED_TRACE",
           "UVM_SCHED_VERBOSE")


@contextlib.contextmanager
def backend(name: str, **env: str):
    """Run the block on a fresh native state: ``name`` is "host", "fake" (the cuda
    backend over the fake driver) or "cuda" (the real driver); ``env`` sets UVM_SCHED_* /
    FAKE_CUDA_* variables for the start.  Yields the Fake (or None)."""
    from uvm_sched import native

    saved = {k: os.environ.get(k) for k in FAKE_ENV + UVM_ENV}
    try:
        for k in FAKE_ENV + UVM_ENV:
            os.environ.pop(k, None)
        os.environ["UVM_SCHED_VERBOSE"] = "0"
        os.environ.update(env)
        fake = None
        if name == "fake":
            os.environ["UVM_SCHED_LIBCUDA"] = fake_path()
            fake = Fake(fake_path())
            native._reset("cuda", force=True)
            fake.clear()
        else:
            native._reset(name, force=True)
        native.drain_events()
        yield fake
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        native._reset(None, force=True)  # back to what the environment selects
