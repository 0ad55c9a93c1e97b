"""Framework adapters (thin, no policy): PyTorch (``torch``), CuPy (``cupy``) and Numba
(``numba``; or ``NUMBA_CUDA_MEMORY_MANAGER=uvm_sched.numba``). Each imports its framework
only when used."""
from __future__ import annotations

__all__ = ["torch", "cupy", "numba"]
