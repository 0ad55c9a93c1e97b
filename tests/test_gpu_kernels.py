"""The calibration kernels compute the right thing (on numba's CUDA simulator in a
subprocess, since the simulator must be chosen before numba.cuda is imported)."""
import subprocess
import sys
import os

from conftest import REPO

SCRIPT = r"""
import numpy as np
from numba import cuda
from kernels import touch_pages, read_pages
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
