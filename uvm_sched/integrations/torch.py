"""PyTorch: put every CUDA tensor in CUDA Unified Memory through uvm_sched.

    import torch, uvm_sched
    torch.cuda.memory.change_current_allocator(uvm_sched.allocator())   # before any CUDA use
    # or: uvm_sched.integrations.torch.install()

PyTorch's own memory statistics raise under a pluggable allocator; read
``uvm_sched.stats()`` instead.
"""
from __future__ import annotations

import threading

from ..native import library_path, step

__all__ = ["allocator", "install", "mark_optimizer_steps"]

_lock = threading.Lock()
# Process-wide singleton, on purpose: PyTorch keeps calling the functions of the
# allocator it was given for as long as any tensor allocated through it is alive, and
# it can swap allocators only once, before CUDA is initialised. A second
# CUDAPluggableAllocator could never be installed, and letting the first one be
# garbage-collected while tensors still hold its memory would leave their later frees
# calling through a dead object. Keeping one for the life of the process avoids both.
_ALLOCATOR = None
_INSTALLED = False


def _torch_with_cuda():
    try:
        import torch
    except ImportError as e:
        raise RuntimeError("uvm_sched.allocator() needs PyTorch (pip install torch)") from e
    if not getattr(torch.version, "cuda", None):
        raise RuntimeError(
            f"this PyTorch ({torch.__version__}) is built without CUDA, so it has no CUDA "
            "allocator to replace; install a CUDA build of torch to use uvm_sched.allocator()")
    return torch


def allocator():
    """The ``torch.cuda.memory.CUDAPluggableAllocator`` over the uvm_sched library
    (``uvm_sched_malloc`` / ``uvm_sched_free``), created once per process. Raises
    ``RuntimeError`` on a CPU-only torch, or when CUDA is already initialised with
    PyTorch's own allocator (it can no longer be swapped)."""
    global _ALLOCATOR
    torch = _torch_with_cuda()
    with _lock:
        if torch.cuda.is_initialized() and not _INSTALLED:
            raise RuntimeError(
                "CUDA is already initialised in this process with PyTorch's own allocator, "
                "which cannot be swapped any more; install uvm_sched's allocator before the "
                "first CUDA tensor or call (e.g. at the top of the script)")
        if _ALLOCATOR is None:
            _ALLOCATOR = torch.cuda.memory.CUDAPluggableAllocator(
                library_path(), "uvm_sched_malloc", "uvm_sched_free")
        return _ALLOCATOR


def install():
    """Make uvm_sched PyTorch's CUDA allocator for this process (idempotent); returns it."""
    global _INSTALLED
    alloc = allocator()
    torch = _torch_with_cuda()
    with _lock:
        if not _INSTALLED:
            torch.cuda.memory.change_current_allocator(alloc)
            _INSTALLED = True
    return alloc


def mark_optimizer_steps():
    """Call ``uvm_sched.step()`` after every ``torch.optim`` optimizer step (iteration
    markers for the executor and the tracer); returns the hook handle (``.remove()``)."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    return register_optimizer_step_post_hook(lambda opt, args, kwargs: step())
