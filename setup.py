"""Build the native core: one plain-C shared library, loaded with ctypes, and a small C++
one that PyTorch's CUDAPluggableAllocator loads by path (it throws where torch would take a
NULL).  They include no Python header and need no CUDA toolkit:
the CUDA driver is dlopen'd at run time.  Everything else is in pyproject.toml.

Since the libraries link no Python symbol, one wheel serves every Python 3: they are named
``_uvm_sched.so`` and ``_uvm_sched_torch.so`` (no ``cpython-311-...`` ABI tag) and the wheel is tagged ``py3-none-<plat>``.
The platform tag is the builder's (``linux_x86_64``); ``auditwheel repair`` then gives it the
manylinux tag its glibc symbols honestly allow (``auditwheel show`` says which; .ci/run).
"""
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

try:  # setuptools >= 70.1 carries bdist_wheel; older ones take it from the wheel package
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # pragma: no cover
    from wheel.bdist_wheel import bdist_wheel

SOURCES = ["api.c", "api_direct.c", "pool.c", "pool_pages.c", "pool_streams.c", "pool_check.c",
           "ring.c", "exec.c", "prim_host.c", "prim_cuda.c", "torch_abi.c", "calib.c",
           "cupti.c", "probe.c"]


class BuildExt(build_ext):
    def get_ext_filename(self, fullname: str) -> str:
        # a ctypes library, not an extension module: no Python ABI tag in its name
        return os.path.join(*fullname.split(".")) + ".so"


class BdistWheel(bdist_wheel):
    def finalize_options(self) -> None:
        super().finalize_options()
        self.root_is_pure = False  # it holds a native library: a platform wheel

    def get_tag(self) -> tuple[str, str, str]:
        _, _, plat = super().get_tag()
        return "py3", "none", plat


setup(
    cmdclass={"build_ext": BuildExt, "bdist_wheel": BdistWheel},
    ext_modules=[
        Extension(
            "uvm_sched._native._uvm_sched",
            sources=[f"uvm_sched/_native/{s}" for s in SOURCES],
            depends=["uvm_sched/_native/uvm_sched.h", "uvm_sched/_native/internal.h",
                     "uvm_sched/_native/pool.h", "uvm_sched/_native/glibc_compat.h"],
            extra_compile_args=["-Wall", "-Wextra", "-Werror", "-O2", "-std=c11", "-pthread",
                                "-fvisibility=hidden"],
            # libdl.so.2 by name and kept (--no-as-needed): on glibc < 2.34 it holds the
            # dlopen@GLIBC_2.2.5 that glibc_compat.h binds to (libc holds it from 2.34 on)
            extra_link_args=["-pthread", "-Wl,--no-as-needed", "-l:libdl.so.2"],
        ),
        # the library PyTorch's CUDAPluggableAllocator loads: turns a refused allocation
        # into a C++ exception (torch checks no NULL); see torch_shim.cpp
        Extension(
            "uvm_sched._native._uvm_sched_torch",
            sources=["uvm_sched/_native/torch_shim.cpp"],
            language="c++",
            extra_compile_args=["-Wall", "-Wextra", "-Werror", "-O2", "-std=c++17",
                                "-fvisibility=hidden"],
        ),
    ]
)
