"""Test helper: build the fake CUPTI library (fake_cupti.c) once per process and drive
it (the faults a GPU would have). Imported by tests/test_cupti_faults.py."""
from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

from .fakecuda import build_fake



def fake_cupti_path() -> str:
    """Path of a freshly built fake libcupti (gcc, once per process), or the one
    $UVM_SCHED_FAKE_CUPTI names."""
    return build_fake("fake_cupti.c", "libcupti.so", "UVM_SCHED_FAKE_CUPTI", "CUPTI")


def private_copy(tmp_path) -> str:
    """A copy of the fake under another name: dlopen gives it its own state (for tests of
    what the fake refuses before anything is set up)."""
    dst = Path(tmp_path) / "libcupti_private.so"
    shutil.copy(fake_cupti_path(), dst)
    return str(dst)


class FakeCupti:
    """The loaded fake (the same instance the native library dlopen'd when loaded by path)."""

    def __init__(self, path: str) -> None:
        lib = self.lib = ctypes.CDLL(path)
        lib.fake_cupti_log.restype = ctypes.c_char_p
        lib.fake_cupti_fault.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint32,
                                         ctypes.c_uint32]
        lib.fake_cupti_counter.argtypes = [ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint64,
                                           ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint32]
        lib.fake_cupti_clock_offset.argtypes = [ctypes.c_int64]
        lib.cuptiGetTimestamp.argtypes = [ctypes.POINTER(ctypes.c_uint64)]

    def now(self) -> int:
        """The fake's clock (CUPTI ns)."""
        t = ctypes.c_uint64()
        assert self.lib.cuptiGetTimestamp(ctypes.byref(t)) == 0
        return t.value

    def fault(self, address: int, t: int | None = None, flags: int = 1, device: int = 0) -> bool:
        """A GPU page fault at ``address`` (now by default); True when CUPTI collects it."""
        return bool(self.lib.fake_cupti_fault(address, self.now() if t is None else t, flags,
                                              device))

    def log(self) -> list[str]:
        return self.lib.fake_cupti_log().decode().splitlines()
