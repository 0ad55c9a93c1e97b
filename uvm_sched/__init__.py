"""uvm_sched: train DNNs bigger than the GPU on CUDA Unified Memory, with learned
allocator-level prefetch/evict schedules.

Runtime (native allocator): ``allocator()`` (PyTorch), ``cupy_allocator()``,
``NUMBA_CUDA_MEMORY_MANAGER=uvm_sched.numba``, ``malloc``/``free``/``stats``/``step``/
``drain_events``/``backend``/``library_path``, ``Scheduler``. PyTorch's memory tools under
the pluggable allocator: ``memory_stats``, ``record_memory_history``, ``memory_snapshot``,
``dump_snapshot``; ``calibrate()`` (the device's link and fault path, measured).
Errors: ``Error`` (base of every exception class defined here), ``Warning``.
Offline advisor: ``uvm_sched.trace``, ``uvm_sched.pattern``, ``plan``/``Plan``,
``uvm_sched.sim``, ``uvm_sched.viz``, the ``uvm-sched`` command.

Names are resolved lazily so ``import uvm_sched`` loads neither the native library nor
any framework.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import logging

from ._errors import Error, Warning  # noqa: A004 -- uvm_sched.Warning, like numpy's

try:  # the version is written once, in pyproject.toml; installing records it
    __version__ = importlib.metadata.version("uvm_sched")
except importlib.metadata.PackageNotFoundError:  # sources on sys.path, never installed
    __version__ = "0+unknown"

# Log records go to the "uvm_sched.*" loggers (transitions at INFO, per-iteration detail at
# DEBUG); the library adds no handler but this one, so nothing reaches the terminal until
# the application configures logging (e.g. logging.basicConfig(level=logging.INFO)).
logging.getLogger(__name__).addHandler(logging.NullHandler())

# public name -> module that defines it
_EXPORTS = {
    "malloc": "uvm_sched._api",
    "free": "uvm_sched._api",
    "stats": "uvm_sched._api",
    "step": "uvm_sched._api",
    "drain_events": "uvm_sched._api",
    "backend": "uvm_sched._api",
    "library_path": "uvm_sched._api",
    "memory_stats": "uvm_sched._memory",
    "record_memory_history": "uvm_sched._memory",
    "memory_snapshot": "uvm_sched._memory",
    "dump_snapshot": "uvm_sched._memory",
    "allocator": "uvm_sched.integrations.torch",
    "cupy_allocator": "uvm_sched.integrations.cupy",
    "Plan": "uvm_sched.planner",
    "plan": "uvm_sched.planner",
    "Scheduler": "uvm_sched.runtime",
    "calibrate": "uvm_sched._calibrate",
}
_SUBMODULES = {"trace", "pattern", "planner", "sim", "hw", "viz", "native", "integrations"}

__all__ = sorted(_EXPORTS) + sorted(_SUBMODULES) + ["Error", "Warning", "__version__"]


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"uvm_sched.{name}")
    raise AttributeError(f"module 'uvm_sched' has no attribute {name!r}")


def __dir__():
    return __all__
