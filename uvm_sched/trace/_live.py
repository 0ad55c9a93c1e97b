"""Record one's own training loop as it is: ``recording()`` around the loop, or
``uvm-sched record -- python train.py ARGS`` around the whole script (unchanged).

Why not ``trace.record(model_fn, batch_fn)``: it runs its own forward/backward/step, so
gradient accumulation, clipping, a scaler, eval batches or an LR scheduler are not in its
trace. Here the user's code runs, and what it allocates is recorded.

Two routes, picked when the recording starts:

* **The uvm_sched allocator** (PyTorch's CUDA allocator is uvm_sched's:
  ``uvm_sched.integrations.torch.install()``; ``uvm-sched record`` installs it before the
  script when CUDA is available): the native event ring holds every allocation the caching
  allocator would make, compiled code and kernel workspaces included. The trace is the ring
  drained at the end; times are the host clock of the allocator calls
  (``meta["time_source"]``). Not exercised by the test suite (no GPU there).
* **The dispatcher** (everything else, e.g. CPU tensors): the workload recorder's
  ``TorchDispatchMode`` (``_recorder``) runs under the user's real tensors and records each
  new storage on ``device`` (ALLOC, exact ``nbytes``), its death (FREE) and the ops' reads
  and writes; device time per tick is the recorder's roofline over the recorded shapes for
  the ``hw`` profile -- a GPU estimate, not the CPU's wall clock. Storages made before the
  recording (a model built outside it) are allocated at their first use (``late_blocks``).
  Memory allocated inside kernels and by ``torch.compile``'d code does not pass the
  dispatcher, and dynamo runs eagerly under a dispatch mode, so a compiled module is refused
  (``RecordingError``) rather than recorded as the eager run it is not.

Steps. ``uvm_sched.step()`` calls mark iteration starts where the user puts them (start
semantics, as in a native trace). Without them, every ``torch.optim`` optimizer step ends an
iteration (a global step post-hook): iteration 1 starts at the first recorded op (its set-up
included, as a profiler's first step does), iteration k at the first op after step k-1; what
follows the last step folds into the last iteration, so iterations = optimizer steps.
"""
from __future__ import annotations

import os
import runpy
import sys
from typing import Any

from .._errors import Error
from ._model import EventKind, Trace

__all__ = ["recording", "Recording", "RecordingError"]

_MARK = int(EventKind.MARK)
_ACTIVE: list["Recording"] = []  # recordings in progress (uvm_sched.step() tells each)


class RecordingError(Error, RuntimeError):
    """A live recording cannot give a faithful trace (nothing recorded, a compiled module)."""


def _note_step() -> None:
    """Called by ``uvm_sched.step()``: an explicit iteration start in every active recording."""
    for r in _ACTIVE:
        r._explicit_step()


def _compiled_module_types() -> tuple[type, ...]:
    try:
        from torch._dynamo.eval_frame import OptimizedModule
    except ImportError:  # a torch without dynamo cannot compile either
        return ()
    return (OptimizedModule,)


class Recording:
    """A recording in progress (``with recording() as rec:``); after the block, ``trace``
    holds the Trace and ``steps`` the optimizer steps seen. See the module docstring."""

    def __init__(self, *, hw: Any = "h200-pcie5", device: str | None = None,
                 name: str | None = None, meta: dict | None = None) -> None:
        self.hw = hw
        self.device = device
        self.name = name
        self.meta = dict(meta or {})
        self.trace: Trace | None = None
        self.steps = 0
        self.route: str | None = None
        self._rec: Any = None
        self._mode: Any = None
        self._hooks: list = []
        self._hook_ends: list[int] = []  # ticks after each optimizer step (dispatcher route)
        self._explicit: list[int] = []  # ticks after each uvm_sched.step() (dispatcher route)
        self._compiled: str | None = None
        self._explicit_seen = False

    # -- the two routes ----------------------------------------------------------------------
    def __enter__(self) -> "Recording":
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook

        if self.trace is not None or self.route is not None:
            raise RecordingError("a Recording is used once; start a new recording()")
        from ..integrations import torch as tint

        # install(), or the README's change_current_allocator(uvm_sched.allocator()): the
        # allocator object exists only on a CUDA torch, before CUDA's first use
        if tint._INSTALLED or tint._ALLOCATOR is not None:
            from .. import native

            self.route = "allocator"
            native.drain_events()  # what came before the recording is not part of it
            self._hooks.append(register_optimizer_step_post_hook(self._ring_step))
        else:
            from ..hw import load_profile
            from ._recorder import _Mode
            from ._recorder_core import _Recorder

            self.route = "dispatcher"
            dev = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
            self.device = str(torch.device(dev))
            self._prof = load_profile(self.hw)
            self._rec = _Recorder(self.device, self._prof)
            self._hooks.append(register_optimizer_step_post_hook(self._hook_step))
            kinds = _compiled_module_types()
            if kinds:
                from torch.nn.modules.module import register_module_forward_pre_hook

                def pre(module, args):
                    # torch.compile(m) wraps m; m.compile() compiles it in place
                    compiled = (isinstance(module, kinds)
                                or getattr(module, "_compiled_call_impl", None) is not None)
                    if compiled and self._compiled is None:
                        self._compiled = type(getattr(module, "_orig_mod", module)).__name__
                        raise RecordingError(_compiled_message(self._compiled))

                self._hooks.append(register_module_forward_pre_hook(pre))
            self._mode = _Mode(self._rec, memo=False)
            self._mode.__enter__()
        _ACTIVE.append(self)
        return self

    def _hook_step(self, opt, args, kwargs) -> None:
        self.steps += 1
        self._hook_ends.append(self._rec.tick + 1)

    def _ring_step(self, opt, args, kwargs) -> None:
        from .. import native

        self.steps += 1
        if not self._explicit_seen:  # the user's uvm_sched.step() calls mark the ring
            native.step()

    def _explicit_step(self) -> None:
        self._explicit_seen = True
        if self._rec is not None:
            self._explicit.append(self._rec.tick + 1)

    def __exit__(self, exc_type, exc, tb) -> None:
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        if self._mode is not None:
            self._mode.__exit__(exc_type, exc, tb)
            self._mode = None
            self._rec.closed = True  # later frees (teardown) are not the workload's
        if exc_type is not None:
            return  # the loop's own error propagates; no trace from half a run
        self.trace = self._build_ring() if self.route == "allocator" else self._build_dispatch()

    # -- results -----------------------------------------------------------------------------
    def _base_meta(self) -> dict:
        m = {"source": "live-recording", "route": self.route, "optimizer_steps": self.steps,
             "name": self.name or _script_name()}
        m.update(self.meta)
        return m

    def _build_dispatch(self) -> Trace:
        from ._recorder_core import LAUNCH_OVERHEAD_NS

        rec = self._rec
        n_ticks = rec.tick + 1
        if n_ticks == 0 or not any(r[1] == int(EventKind.ALLOC) for r in rec.rows):
            raise RecordingError(
                f"nothing was allocated on {self.device} while recording ({rec.n_ops:,} ops "
                f"seen); put the training loop inside the recording and its tensors on "
                f"{self.device} (or pass device=)")
        if self._explicit:
            marks, signal = self._explicit, "uvm_sched.step() calls"
        elif self._hook_ends:
            # iteration 1 from the first op; the tail after the last step folds into the last
            marks, signal = [0, *self._hook_ends[:-1]], "optimizer steps (global post-hook)"
        else:
            marks, signal = [], "none (no optimizer step and no uvm_sched.step() was seen)"
        marks = sorted({t for t in marks if 0 <= t < n_ticks})
        rows = [r for r in rec.rows if r[1] != _MARK]
        rows += [(t, _MARK, -1, 0, 0, -1, -1) for t in marks]
        rows.sort(key=lambda r: (r[0], r[1] != _MARK))  # stable: a MARK opens its tick
        rec.rows = rows
        m = self._base_meta()
        m.update({
            "device": self.device,
            "recorded_device": self.device,
            "hw": self._prof.name,
            "steps_signal": signal,
            "ops": rec.n_ops,
            "flops": rec.total_flops,
            "flop_formula_failures": rec.flop_failures,
            "late_blocks": rec.late_blocks,
            "units": {"size": "bytes", "t_ns": "ns", "tick_ns": "ns"},
            "size_rounding": "exact storage nbytes (a CUDA caching allocator rounds up to 512 B)",
            "device_time": (f"roofline max(flops/peak, bytes/hbm_bw) + "
                            f"{LAUNCH_OVERHEAD_NS:.0f} ns launch"),
            "time_source": f"roofline from recorded shapes ({self._prof.name})",
            "launch_overhead_ns": LAUNCH_OVERHEAD_NS,
            "not_seen": "memory allocated inside kernels (cuDNN/cuBLAS workspaces)",
        })
        if self._hook_ends and not self._explicit:
            m["step_ends"] = {"signal": signal, "ends": [int(t) for t in self._hook_ends]}
        return rec.build(m)

    def _build_ring(self) -> Trace:
        from .. import native
        from ._native import trace_from_events

        ev = native.drain_events()
        m = self._base_meta()
        m.update({"steps_signal": "optimizer steps (global post-hook) and uvm_sched.step()",
                  "time_source": "host clock of the allocator calls (GPU run)"})
        tr = trace_from_events(ev, meta=m)
        if tr.n_ticks == 0:
            raise RecordingError("the uvm_sched allocator recorded no events during the "
                                 "recording; is the loop's memory on the GPU?")
        return tr


def recording(*, hw: Any = "h200-pcie5", device: str | None = None, name: str | None = None,
              meta: dict | None = None) -> Recording:
    """Record one's own training loop: ``with uvm_sched.trace.recording() as rec: <loop>``,
    then ``rec.trace.save("train.parquet")``.

    Iterations are marked by ``uvm_sched.step()`` calls where present, else by every
    ``torch.optim`` optimizer step. ``device``: the tensors' device to record ("cpu",
    "cuda"; default "cuda" when available); ``hw``: the hardware profile of the roofline
    device time (ns per tick) on the dispatcher route. With uvm_sched's allocator installed
    the allocator's own events are recorded instead. The module docstring says what each
    route sees. Raises ``RecordingError`` when nothing was allocated or a ``torch.compile``'d
    module runs on the dispatcher route.
    """
    return Recording(hw=hw, device=device, name=name, meta=meta)


def _compiled_message(what: str) -> str:
    return (f"a torch.compile'd module ({what}) ran while recording through the dispatcher: "
            "compiled code allocates outside it (and dynamo runs eagerly under the recorder), "
            "so the trace would show an eager run the script does not make. Record the "
            "compiled run with uvm_sched's allocator on a GPU (`uvm-sched record -- python "
            "train.py` installs it when CUDA is available), or profile it with "
            "torch.profiler(profile_memory=True) and read the JSON with "
            "`uvm-sched analyze trace.json --device cpu` (CPU wall-clock times); or record "
            "without torch.compile")


def _script_name() -> str:
    arg0 = sys.argv[0] if sys.argv and sys.argv[0] else "python"
    return os.path.splitext(os.path.basename(arg0))[0] or "python"


def run_script(out: str, argv: list[str], *, hw: Any = "h200-pcie5",
               device: str | None = None) -> Recording:
    """Run ``argv`` (``["train.py", ARGS...]`` or ``["-m", "module", ARGS...]``) in this
    process as ``python`` would, inside a recording, and save the trace to ``out``.
    A ``SystemExit`` with a non-zero code from the script propagates (no trace written)."""
    if not argv:
        raise ValueError("no script to run: expected SCRIPT [ARGS] or -m MODULE [ARGS]")
    as_module = argv[0] == "-m"
    if as_module and len(argv) < 2:
        raise ValueError("-m needs a module name")
    target = argv[1] if as_module else argv[0]
    sys.argv = list(argv[1:]) if as_module else list(argv)
    if not as_module:
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
    _maybe_install_allocator(device)
    with recording(hw=hw, device=device, name=os.path.splitext(os.path.basename(target))[0],
                   meta={"command": ["python", *argv]}) as rec:
        try:
            if as_module:
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(target, run_name="__main__")
        except SystemExit as e:
            if e.code not in (None, 0):
                raise
    if rec.trace is None:  # __exit__ builds it or raises: never reached
        raise RecordingError("the recording ended without a trace")
    rec.trace.save(out)
    return rec


def _maybe_install_allocator(device: str | None) -> None:
    """uvm_sched's allocator before the script, when it will run on CUDA (the ring route)."""
    if device is not None and not str(device).startswith("cuda"):
        return
    import torch

    if getattr(torch.version, "cuda", None) and torch.cuda.is_available():
        from ..integrations.torch import install

        install()


def _main(args: list[str]) -> int:
    """``python -m uvm_sched.trace._live OUT HW DEVICE|- -- SCRIPT [ARGS]`` (what
    ``uvm-sched record -- python ...`` runs)."""
    if len(args) < 4 or args[3] != "--":
        sys.stderr.write("usage: python -m uvm_sched.trace._live OUT HW DEVICE|- -- SCRIPT "
                         "[ARGS]\n")
        return 2
    out, hw, device = args[0], args[1], None if args[2] == "-" else args[2]
    try:
        rec = run_script(out, args[4:], hw=hw, device=device)
    except RecordingError as e:
        sys.stderr.write(f"uvm-sched record: error: {e}\n")
        return 2
    return 0 if rec.trace is not None else 1


if __name__ == "__main__":  # pragma: no cover - run by the CLI in a child process
    sys.exit(_main(sys.argv[1:]))
