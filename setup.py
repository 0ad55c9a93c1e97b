"""Build the native core: one plain-C shared library, loaded with ctypes (and by PyTorch's
CUDAPluggableAllocator by path).  It includes no Python header and needs no CUDA toolkit:
the CUDA driver is dlopen'd at run time.  Everything else is in pyproject.toml."""
from setuptools import Extension, setup

SOURCES = ["api.c", "pool.c", "ring.c", "exec.c", "prim_host.c", "prim_cuda.c"]

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
        )
    ]
)
