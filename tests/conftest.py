"""Test-wide fixtures: the `gpu` marker skips (with a reason) where no CUDA device is
present, `skip_without_compiler` skips a test that compiles something where no compiler is
on PATH (scripts/wheel_check.sh tests the installed wheel so), and `shared_dir` finds
../shared (the published workloads) or skips.  With $UVM_SCHED_TEST_INSTALLED (a
site-packages folder) the session refuses to start unless uvm_sched is imported from there."""
from __future__ import annotations

import ctypes
import functools
import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=None)
def cuda_device_reason() -> str | None:
    """None when a CUDA driver with at least one device is present, else why not."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return f"no CUDA driver (libcuda.so.1 not loadable: {e})"
    if lib.cuInit(0) != 0:
        return "CUDA driver present but cuInit failed (no usable device)"
    count = ctypes.c_int(0)
    if lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
        return "CUDA driver present but no device"
    return None


def pytest_configure(config):
    installed = os.environ.get("UVM_SCHED_TEST_INSTALLED")
    if installed:
        import uvm_sched

        if not uvm_sched.__file__.startswith(os.path.join(installed, "")):
            raise pytest.UsageError(f"UVM_SCHED_TEST_INSTALLED={installed}, but uvm_sched is "
                                    f"imported from {uvm_sched.__file__} (the sources?)")


def pytest_report_header(config):
    import uvm_sched

    return f"uvm_sched from {os.path.dirname(uvm_sched.__file__)}"


def skip_without_compiler(env: str = "CC", default: str = "cc") -> str:
    """The compiler named by ``$env`` (else ``default``) as found on PATH; skips the calling
    test, with the reason, where there is none (the installed-wheel run has no compiler by
    design; the main CI job runs these tests)."""
    name = os.environ.get(env, default)
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"needs a compiler: no {name} on PATH (${env}); the installed-wheel check "
                    f"runs without one, the main test run has it")
    return path


def pytest_collection_modifyitems(config, items):
    reason = cuda_device_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"needs a GPU: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def shared_path() -> Path | None:
    """../shared beside the checkout (or $UVM_SCHED_SHARED), None where absent."""
    env = os.environ.get("UVM_SCHED_SHARED")
    p = Path(env) if env else REPO.parent / "shared"
    return p if (p / "workloads").is_dir() else None


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    p = shared_path()
    if p is None:
        pytest.skip("../shared/workloads is absent (published workloads are not shipped with the repo)")
    return p


@pytest.fixture(scope="session")
def g10_dir(shared_dir) -> Path:
    p = shared_dir / "workloads" / "g10"
    if not p.is_dir():
        pytest.skip(f"{p} is absent")
    return p
