"""The calibration kernels compute the right thing (on numba's CUDA simulator in a
subprocess, since the simulator must be chosen before numba.cuda is imported)."""
import os
import subprocess
import sys

import pytest

from conftest import REPO

SCRIPT = r"""
import numpy as np
from numba import cuda
from kernels import chase_pages, touch_pages, read_pages
from kernels.calib import launch_shape

n, stride = 10_000, 1024
buf = cuda.to_device(np.zeros(n, np.float32))
touch_pages(buf, stride, 2.0)
host = buf.copy_to_host()
touched = np.flatnonzero(host)
assert touched.tolist() == list(range(0, n, stride)), touched
out = cuda.to_device(np.zeros(1, np.float32))
read_pages(buf, stride, out)
assert out.copy_to_host()[0] == 2.0 * len(range(0, n, stride)), out.copy_to_host()
chase_pages(buf, stride, out)  # out[0] = the sum again (stored, not added)
assert out.copy_to_host()[0] == 2.0 * len(range(0, n, stride)), out.copy_to_host()
buf2 = cuda.to_device(np.arange(n, dtype=np.float32))
chase_pages(buf2, 3000, out)
assert out.copy_to_host()[0] == float(sum(range(0, n, 3000))), out.copy_to_host()
assert launch_shape(n, stride) == (1, 256)
try:
    launch_shape(n, 0)
except ValueError as e:
    assert "stride" in str(e)
else:
    raise AssertionError("stride 0 accepted")
print("ok")
"""


def test_touch_and_read_kernels_on_the_cuda_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                       text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("ok")


PTX_SCRIPT = r"""
from numba import cuda, float32, int64, types
import kernels.calib as c
arr = types.Array(float32, 1, "C")
for k, sig in ((c._touch, (arr, int64, float32)), (c._read, (arr, int64, arr)),
               (c._chase, (arr, int64, arr))):
    try:
        ptx, _ = cuda.compile_ptx(k.py_func, sig, cc=(9, 0))
    except Exception as e:  # no NVVM here: say so, the caller skips
        if "NVVM" in str(e) or "nvvm" in str(e):
            print("NO-NVVM", e)
            raise SystemExit(0)
        raise
    assert ".entry" in ptx
print("ok")
"""


def test_kernels_compile_for_the_h200_with_the_types_the_kit_launches():
    # the simulator runs Python, not the CUDA compiler: typing errors show only here
    r = subprocess.run([sys.executable, "-c", PTX_SCRIPT], env=dict(os.environ, PYTHONPATH=str(REPO)),
                       capture_output=True, text=True, timeout=300, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    if r.stdout.startswith("NO-NVVM"):
        pytest.skip(f"numba cannot compile CUDA here: {r.stdout.strip()}")
    assert r.stdout.strip().endswith("ok")
