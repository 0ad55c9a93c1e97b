"""Build the native core: one plain-C shared library, loaded with ctypes, and a small C++
one that PyTorch's CUDAPluggableAllocator loads by path (it throws where torch would take a
NULL).  They include no Python header and need no CUDA toolkit: the CUDA driver is
dlopen'd at run time.  Everything else is in pyproject.toml."""
from setuptools import Extension, setup

SOURCES = ["api.c", "pool.c", "ring.c", "exec.c", "prim_host.c", "prim_cuda.c", "torch_abi.c"]

setup(
    ext_modules=[
        Extension(
            "uvm_sched._native._uvm_sched",
            sources=[f"uvm_sched/_native/{s}" for s in SOURCES],
            depends=["uvm_sched/_native/uvm_sched.h", "uvm_sched/_native/internal.h"],
            extra_compile_args=["-Wall", "-Wextra", "-Werror", "-O2", "-std=c11", "-pthread",
                                "-fvisibility=hidden"],
            extra_link_args=["-pthread"],
            libraries=["dl"],
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
