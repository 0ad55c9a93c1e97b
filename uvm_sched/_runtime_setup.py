"""What the Scheduler checks and looks up before it runs: its options, the device and
rank it serves, and why a loop that steps allocates nothing through it.

Rule: every option is checked when the Scheduler is made (``TypeError``/``ValueError``
naming the option, ``ProfileError`` for ``hw``). Why: the Scheduler runs inside the
optimizer hook; a bad option found there would surface four steps into training, as an
error far from the line that caused it.
"""
from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np


def check_options(*, budget: Any, hw: Any, mode: str, hook: Any, strict: Any,
                  plan_opts: Any, device: Any, worker: Any, tune: tuple,
                  counts: dict[str, Any], sampler: str = "auto") -> dict:
    """Check the Scheduler's options (``counts``: name -> an integer option) in the order
    a user reads them; returns ``plan_opts`` as a dict."""
    for name, v in counts.items():
        lo = 0 if name == "watchdog_iters" else 1
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an integer, got {v!r}")
        if v < lo:
            raise ValueError(f"{name} must be >= {lo}"
                             f"{' (0: no watchdog)' if name == 'watchdog_iters' else ''}, got {v}")
    if not isinstance(strict, bool):
        raise TypeError(f"strict must be True or False, got {strict!r}")
    if hook not in ("auto", True, False, None):
        raise ValueError(f"hook must be 'auto', True or False, got {hook!r}")
    check_budget(budget)
    from .hw import load_profile

    load_profile(hw)  # ProfileError (a ValueError) now, not at the first plan
    opts = check_plan_opts(plan_opts)
    if device is not None and (isinstance(device, bool) or
                               not isinstance(device, (int, np.integer)) or device < 0):
        raise ValueError(f"device must be a CUDA device ordinal >= 0, got {device!r}")
    if worker not in ("process", "thread"):
        raise ValueError(f"worker must be 'process' or 'thread', got {worker!r}")
    from .planner import MODES, tuning_candidates

    if tune:
        tuning_candidates(tune, mode, dict(opts))  # checks them now
    if mode not in MODES:
        raise ValueError(f"unknown planning mode {mode!r}; known: {', '.join(MODES)}")
    from ._runtime_faults import SAMPLERS

    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {', '.join(map(repr, SAMPLERS))}, got "
                         f"{sampler!r}")
    if mode == "sampled" and opts.get("samples") is None and sampler == "torch":
        # the allocator's ring records allocations, not accesses: the samples come from
        # PyTorch's dispatcher during the warm-up iterations (or CUPTI's fault records)
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            raise ValueError(
                "Scheduler(mode='sampled', sampler='torch') needs PyTorch to record access "
                "samples (a dispatch-mode tracer); without it use sampler='cupti' (GPU page "
                "faults), pass plan_opts={'samples': frame} (one row per touch: block, "
                "persistent, tick; see uvm_sched.planner.draw_samples for the format), or "
                "use mode='oblivious'")
    return opts


def touch_source(mode: str, opts: dict, device_type: str, sampler: str = "auto",
                 device: int | None = None) -> tuple[Any, str]:
    """Where a Scheduler in ``mode`` gets its access samples: ``(sampler or None, why)``.
    Samples given: none needed. CUPTI's GPU page faults (``FaultSampler``) where
    ``sampler="cupti"``, or in sampled mode with ``"auto"`` and PyTorch not installed. Else
    the dispatch tracer (``TouchRecorder``) in sampled mode, and in auto mode when PyTorch
    is loaded (a loop that runs PyTorch ops has imported it by now; importing it here would
    cost a CuPy or Numba loop seconds for nothing). Auto never starts CUPTI's warm-up probes
    unasked: they move persistent blocks to the host. Else no source: oblivious."""
    if opts.get("samples") is not None:
        return None, ("auto: sampled, access samples were given in plan_opts" if mode == "auto"
                      else f"{mode}, as requested")
    if mode == "oblivious":
        return None, "oblivious, as requested"
    import importlib.util

    if sampler == "cupti" or (mode == "sampled" and sampler == "auto"
                              and importlib.util.find_spec("torch") is None):
        from ._runtime_faults import FaultSampler

        return FaultSampler(device or 0), (
            "sampled, as requested" if mode == "sampled" else
            "auto: sampled, CUPTI's GPU page-fault records (sampler='cupti')")
    if mode == "sampled" or "torch" in sys.modules:
        from .integrations.torch import TouchRecorder

        return TouchRecorder(device_type), (
            "sampled, as requested" if mode == "sampled" else
            "auto: sampled, PyTorch's dispatch tracer records the warm-up's touches")
    return None, ("auto: oblivious, no access source: PyTorch is not loaded (its dispatch "
                  "tracer is the runtime's source), plan_opts has no samples and "
                  "sampler='cupti' was not asked for")


def start_tracer(touches, mode: str, why: str) -> tuple[Any, str]:
    """Start the dispatch tracer ``touches``: ``(touches, why)``, or in auto mode, where it
    cannot start (a PyTorch without dispatch modes), ``(None, why oblivious)``."""
    try:
        touches.start()
    except Exception as e:  # sampled mode has no other source: the error is the user's to see
        if mode != "auto":
            raise
        return None, (f"auto: oblivious, no access source: the access sampler did not "
                      f"start ({type(e).__name__}: {e})")
    return touches, why


def install_hook(pref: Any, step) -> Any:
    """Install ``step`` as PyTorch's global optimizer step hook as ``hook=pref`` asks
    (``"auto"``: when torch is imported); the handle, or None when none was installed."""
    if pref is False or pref is None:
        return None
    if pref == "auto" and "torch" not in sys.modules:
        return None
    try:
        from torch.optim.optimizer import register_optimizer_step_post_hook
    except Exception as e:  # torch absent or too old: markers must come from step()
        if pref is True:
            raise RuntimeError(f"cannot install the optimizer step hook: {e}") from None
        return None
    return register_optimizer_step_post_hook(step)


def check_budget(budget: Any) -> None:
    """A budget ``resolve_budget`` reads (checked against a stand-in peak of 1 GiB)."""
    if budget is None:
        return
    from ._budget import resolve_budget

    try:
        resolve_budget(budget, 1 << 30)
    except (TypeError, ValueError) as e:
        raise type(e)(f"Scheduler budget {budget!r}: {e}") from None


def check_plan_opts(plan_opts: Any) -> dict:
    """``plan_opts`` as a dict of options ``planner.plan`` takes (``pattern`` is the
    Scheduler's own); TypeError/ValueError naming the first bad one."""
    if plan_opts is None:
        return {}
    if not isinstance(plan_opts, dict):
        raise TypeError("plan_opts must be a dict of planner options, got "
                        f"{type(plan_opts).__name__}")
    from .planner import PLAN_OPTIONS

    allowed = PLAN_OPTIONS - {"pattern"}
    bad = sorted(map(str, set(plan_opts) - allowed))
    if bad:
        raise TypeError(f"plan_opts has unknown option(s) {bad}; known: {sorted(allowed)}")
    g = plan_opts.get("guard", "auto")
    if g != "auto" and (isinstance(g, bool) or not isinstance(g, (int, np.integer)) or g < 0):
        raise ValueError(f"plan_opts guard must be ticks >= 0 or 'auto', got {g!r}")
    for k in ("discard", "populate", "complete_touches"):
        if k in plan_opts and not isinstance(plan_opts[k], (bool, np.bool_)):
            raise TypeError(f"plan_opts {k} must be True or False, got {plan_opts[k]!r}")
    if plan_opts.get("remote_fallback", "auto") not in (True, False, "auto"):
        raise ValueError(f"plan_opts remote_fallback must be True, False or 'auto', got "
                         f"{plan_opts['remote_fallback']!r}")
    lo: float  # ints here, floats in the range checks below
    for k, lo in (("rounds", 1), ("discard_min_bytes", 0), ("seed", 0)):
        v = plan_opts.get(k, lo)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"plan_opts {k} must be an integer >= {lo}, got {v!r}")
    for k, lo, hi in (("sample_rate", 0.0, 1.0), ("noise", 0.0, float("inf"))):
        v = plan_opts.get(k, hi if k == "sample_rate" else lo)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (
                (lo < v <= hi) if k == "sample_rate" else (lo <= v < hi)):
            raise ValueError(f"plan_opts {k} out of range, got {v!r}")
    return dict(plan_opts)


def current_device() -> int:
    """torch's current CUDA device when torch is loaded and sees CUDA, else 0."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return int(torch.cuda.current_device())
    return 0


def rank() -> int:
    """This process's rank: torch.distributed's when initialised, else $RANK (torchrun
    sets it), else 0."""
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    if dist is not None and dist.is_available() and dist.is_initialized():
        return int(dist.get_rank())
    return int(os.environ.get("RANK", "0") or 0)


def silent_message(steps: int) -> str:
    """Why a Scheduler that sees steps sees no allocation, and what to do about it."""
    torch = sys.modules.get("torch")
    if torch is None:
        cause = ("no allocation was made through uvm_sched (uvm_sched.malloc, its "
                 "PyTorch/CuPy/Numba allocators)")
    elif not getattr(torch.version, "cuda", None) or not torch.cuda.is_available():
        cause = ("there is no CUDA here: this PyTorch's tensors live in CPU memory, which "
                 "uvm_sched's allocator never serves")
    else:
        from .integrations import torch as tint

        cause = ("uvm_sched's allocator is not PyTorch's CUDA allocator" if tint._ALLOCATOR is None
                 else "no CUDA allocation went through uvm_sched's allocator")
    return (f"uvm_sched.Scheduler saw {steps} steps but no allocation: {cause}, so it has "
            "nothing to learn or plan. Fix: on a GPU, call torch.cuda.memory."
            "change_current_allocator(uvm_sched.allocator()) before the first CUDA tensor; "
            "to study a CPU loop, record it (`uvm-sched record -- python train.py`, or "
            "`with uvm_sched.trace.recording() as rec:`) and plan offline")
