"""``NUMBA_CUDA_MEMORY_MANAGER=uvm_sched.numba``: Numba looks up
``_numba_memory_manager`` in this module (the EMM plugin protocol)."""
from __future__ import annotations

from .integrations.numba import UvmSchedMemoryManager

_numba_memory_manager = UvmSchedMemoryManager

__all__ = ["UvmSchedMemoryManager"]
