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
    if "path" not in _BUILT and os.environ.get("UVM_SCHED_FAKE_CUDA"):
        _BUILT["path"] = os.environ["UVM_SCHED_FAKE_CUDA"]
    if "path" not in _BUILT:
        cc = os.environ.get("CC", "gcc")
        if shutil.which(cc) is None:
            import pytest

            pytest.skip(f"no C compiler ({cc}) to build the fake CUDA driver")
        out = Path(tempfile.mkdtemp(prefix="uvm_fake_cuda_")) / "libcuda.so.1"
        subprocess.run([cc, "-Wall", "-Wextra", "-Werror", "-std=c11", "-O1", "-fPIC", "-shared",
                        "-fvisibility=hidden", "-pthread", "-o", str(out),
                        str(HERE / "fake_cuda.c")], check=True)
        _BUILT["path"] = str(out)
    return _BUILT["path"]


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


FAKE_ENV = ("FAKE_CUDA_VERSION", "FAKE_CUDA_DEVICES", "FAKE_CUDA_FAIL", "FAKE_CUDA_NO_DISCARD")
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
