"""CUDA kernels (numba.cuda) for the calibration microbenchmarks of the GPU kit.

They run on a real GPU and, for correctness only, on numba's CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1``), which is how CI exercises them.
"""
from .calib import chase_pages, read_pages, touch_pages  # noqa: F401

__all__ = ["touch_pages", "read_pages", "chase_pages"]
