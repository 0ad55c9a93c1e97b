"""Workload recorder: run real PyTorch training steps on ``meta`` tensors and record what a
GPU caching allocator would see.

How it works. ``model_fn()`` and ``batch_fn()`` are called under ``torch.device("meta")``,
so parameters and inputs carry shapes and dtypes but no data and any batch size costs
nothing. ``iters`` training steps (forward, loss, backward, ``optimizer.step()``,
``zero_grad(set_to_none=True)``) run under a ``TorchDispatchMode`` that sees every aten op
below autograd -- forward, backward and optimizer alike -- and records, per op:

* **ALLOC** for every output whose storage is new (size = the storage's ``nbytes``, which is
  what the CUDA caching allocator is asked for; a real allocator rounds requests up to
  512 B -- we keep the exact size, ``meta["size_rounding"]`` says so). Zero-byte storages
  are not recorded (the CUDA allocator returns a null pointer for them).
* **ACCESS** rows: READ for each input storage, WRITE for each new output storage,
  READ_WRITE for storages the op mutates (in-place ops and ``out=`` arguments, read from the
  op schema's alias annotations). One row per storage per op; a view that covers only part
  of its storage gives ``offset``/``length`` in bytes, a view of the whole storage gives -1.
* **FREE** when the storage dies: each recorded storage carries a weak reference whose
  callback fires when the last tensor/view/autograd-saved reference is gone (storages have
  a preserved Python object, so the callback runs exactly when the ``StorageImpl`` dies,
  not when one view dies). Views and ops returning aliases share the storage and allocate
  nothing.
* **MARK** at the first tick of every iteration.

Ticks. An op that allocates or touches device memory gets one tick -- except the foreach
ops of the optimizers, which get one tick per kernel that CUDA's ``multi_tensor_apply``
would launch (see ``_recorder_core._Recorder._foreach_launches``); ops that launch no
kernel and touch nothing (views, ``detach``, metadata, ops on host tensors such as the
optimizer's step counters) get no tick. Frees that happen between two ops belong to the
tick of the op before (after its accesses, as the trace contract orders a tick).
Allocating factories that launch no kernel (``empty``, ``empty_strided``, ``new_empty``...)
get a tick with their ALLOC rows, no ACCESS rows and 0 ns. Parameters and buffers built by
``model_fn`` are allocated at tick 0, before the first iteration; each iteration calls
``batch_fn()`` again, so the batch is a fresh allocation every iteration (as a data loader's
host-to-device copy is). Storages the recorder never saw created (e.g. a tensor captured by
the model from outside ``model_fn``) are allocated lazily at their first use and counted in
``meta["late_blocks"]``.

Device time per tick (``Trace.tick_ns``) is a roofline over the op's FLOPs (the formulas of
``torch.utils.flop_counter.flop_registry``: matmuls, convolutions, attention; other ops
count 0 FLOPs and are bound by bytes) and the bytes it touches (the view extents of its
tensor inputs and outputs), for the named hardware profile: ``max(flops / peak, bytes /
hbm_bandwidth) + LAUNCH_OVERHEAD_NS``, where the peak is ``peak_flops_bf16`` for bf16/fp16
operands and ``peak_flops_fp32`` otherwise. The roofline is optimistic (real kernels reach
50-80% of peak), so compute time is a lower bound and a schedule that hides transfers
behind it is judged conservatively.

Optimizers. An optimizer class gets ``foreach=True`` when it takes that option: that is
what a GPU run uses by default (on meta tensors PyTorch would fall back to the per-parameter
loop, whose allocations differ). Optimizer step counters are host tensors, as on a GPU, and
are not recorded.

Known gaps. Memory a kernel allocates internally through the caching allocator (cuDNN/cuBLAS
workspaces) is invisible at the dispatch level; comparing with the CPU allocator under
``torch.profiler`` (tests/test_recorder.py), every recorded event is real and in order, and
for a CNN about a third of the CPU allocator's events are such kernel-internal buffers.

Mixed precision (``amp=True``). ``torch.autocast`` has no ``meta`` device type (it raises
"unsupported autocast device_type 'meta'", and CPU/CUDA autocast ignore meta tensors), so
the recorder emulates CUDA autocast one level up, with a ``TorchFunctionMode`` (above
autograd, so the casts get their backward ops like real autocast): matmul/convolution/
attention functions run on bf16 copies of their float32 arguments (parameter copies are
cached per forward, as autocast's weight cache does), and the functions CUDA autocast runs in
float32 (softmax, log_softmax, layer/group norm, losses, exp/log/pow...) get float32 copies.
Parameters, gradients and optimizer state stay float32, as with real AMP.

Where the parts live: this module holds ``record`` (as its steps: build the model, train
under the dispatch mode, the metadata) and the shape memo of the dispatch mode;
``_recorder_core`` the event log that turns each op into rows (``_Recorder``);
``_recorder_amp`` the autocast emulation.
"""
from __future__ import annotations

import inspect
import time
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .._errors import Error
from ._model import Trace
from ._recorder_amp import _Autocast
from ._recorder_core import LAUNCH_OVERHEAD_NS, _block_names, _Recorder, _tensors

__all__ = ["record", "LAUNCH_OVERHEAD_NS"]


# Shape memo. On meta tensors most of the recording time is spent in torch's own meta
# functions, and some are Python decompositions costing milliseconds per call (batch norm
# and its backward, the foreach optimizer ops: ~60% of a SENet-154 recording). Their output
# metadata depends only on the inputs' metadata, so once an op is seen to be slow its
# outputs are rebuilt from a template keyed by the arguments' shapes, strides, dtypes and
# scalar values. Only two kinds of ops qualify, decided from the schema: functional ops
# whose outputs are all fresh storages (rebuilt with ``empty_strided``), and in-place ops
# returning nothing (the foreach optimizer updates: a no-op on meta once their arguments are
# known to be valid). The recorded events are identical with and without the memo (tested).
_MEMO_AFTER_NS = 150_000  # an op qualifies once its mean meta time exceeds this


class _NoKey(Error):
    """An argument the memo cannot key on (it is then not used for this call)."""


def _key_of(x):
    if isinstance(x, torch.Tensor):
        return (tuple(x.shape), x.stride(), x.storage_offset(), x.dtype, x.device.type)
    if isinstance(x, (list, tuple)):
        return tuple(_key_of(y) for y in x)
    if x is None or isinstance(x, (bool, int, float, str, torch.dtype, torch.device,
                                   torch.memory_format, torch.layout)):
        # type too: 1 and 1.0 and True hash alike but may give different outputs
        return (type(x), x)
    raise _NoKey


def _memo_kind(func) -> str | None:
    """"functional", "void" or None (not memoizable), from the op's schema."""
    sch = func._schema
    if any(a.alias_info is not None for a in sch.arguments):
        if sch.returns or any(a.alias_info is not None and not a.alias_info.is_write
                              for a in sch.arguments):
            return None
        return "void"
    if not sch.returns or any(r.alias_info is not None for r in sch.returns):
        return None
    if any(str(r.type) not in ("Tensor", "Tensor[]", "List[Tensor]") for r in sch.returns):
        return None
    return "functional"


def _template(out, ins) -> tuple | None:
    """How to rebuild ``out`` (a tensor, or a tuple/list of them) with fresh storages."""
    seq = isinstance(out, (tuple, list))
    outs = list(out) if seq else [out]
    seen = {t.untyped_storage()._cdata for t in ins}
    specs = []
    for t in outs:
        if not isinstance(t, torch.Tensor) or t.device.type != "meta":
            return None
        st = t.untyped_storage()
        if st._cdata in seen or t.storage_offset() != 0:
            return None
        seen.add(st._cdata)
        spec = (tuple(t.shape), t.stride(), t.dtype)
        probe = torch.empty_strided(spec[0], spec[1], dtype=spec[2], device="meta")
        if probe.untyped_storage().nbytes() != st.nbytes():
            return None
        specs.append(spec)
    return (type(out) if seq else None, tuple(specs))


class _Mode(TorchDispatchMode):
    def __init__(self, rec: _Recorder, memo: bool = True) -> None:
        super().__init__()
        self.rec = rec
        self.memo = memo
        self.kind: dict[Any, str | None] = {}  # op -> memo kind once it qualifies
        self.cost: dict[Any, list] = {}  # op -> [calls, ns]
        self.cache: dict[tuple, Any] = {}
        self.hits = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = self.kind.get(func) if self.memo else None
        key = None
        if kind is not None:
            try:
                key = (func, _key_of(args), tuple((k, _key_of(v)) for k, v in kwargs.items()))
            except _NoKey:
                key = None
            if key is not None:
                tmpl = self.cache.get(key)
                if tmpl is not None:
                    self.hits += 1
                    out = _rebuild(tmpl)
                    self.rec.op(func, args, kwargs, out)
                    return out
        if self.memo and kind is None and func not in self.kind:
            t0 = time.perf_counter_ns()
            out = func(*args, **kwargs)
            c = self.cost.setdefault(func, [0, 0])
            c[0] += 1
            c[1] += time.perf_counter_ns() - t0
            if c[0] >= 2 and c[1] / c[0] > _MEMO_AFTER_NS:
                self.kind[func] = _memo_kind(func)
        else:
            out = func(*args, **kwargs)
            if key is not None:
                if kind == "void":
                    self.cache[key] = ("void",)
                else:
                    ins: list = []
                    for a in args:
                        _tensors(a, ins)
                    for a in kwargs.values():
                        _tensors(a, ins)
                    tmpl = _template(out, ins)
                    if tmpl is None:
                        self.kind[func] = None  # outputs alias or reuse: never memoize it
                    else:
                        self.cache[key] = tmpl
        self.rec.op(func, args, kwargs, out)
        return out


def _rebuild(tmpl):
    if tmpl[0] == "void":
        return None
    cls, specs = tmpl
    outs = [torch.empty_strided(sh, st, dtype=dt, device="meta") for sh, st, dt in specs]
    return outs[0] if cls is None else cls(outs)



# -- the public entry -----------------------------------------------------------------------------
def _as_tuple(batch) -> tuple:
    return batch if isinstance(batch, tuple) else (batch,)


def _default_loss(output, batch) -> torch.Tensor:
    outs: list = []
    if isinstance(output, dict):
        output = tuple(output.values())
    _tensors(output, outs)
    outs = [o for o in outs if o.is_floating_point()]
    if not outs:
        raise TypeError("the model returned no floating-point tensor; pass loss_fn=")
    loss = outs[0].mean()
    for o in outs[1:]:
        loss = loss + o.mean()
    return loss


def _loss_caller(loss_fn):
    if loss_fn is None:
        return _default_loss
    try:
        n = len([p for p in inspect.signature(loss_fn).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)])
    except (TypeError, ValueError):
        n = 2
    if n == 1:
        return lambda out, batch: loss_fn(out)
    return loss_fn


def _make_optimizer(optimizer, params):
    kw = {}
    if isinstance(optimizer, type) and issubclass(optimizer, torch.optim.Optimizer):
        # On a GPU the built-in optimizers default to their multi-tensor (foreach)
        # implementation; on meta they would fall back to the per-parameter loop, whose
        # allocations differ. Ask for what a GPU run gets.
        if "foreach" in inspect.signature(optimizer.__init__).parameters:
            kw["foreach"] = True
    return optimizer(params, **kw)


def _dims(batch) -> tuple[int | None, int | None]:
    """(batch, seq) read off the first input tensor: dim 0, and dim 1 of an integer (token)
    input; None where there is no such dimension."""
    for t in _as_tuple(batch):
        if isinstance(t, torch.Tensor) and t.dim() >= 1:
            seq = int(t.shape[1]) if t.dim() >= 2 and not t.is_floating_point() else None
            return int(t.shape[0]), seq
    return None, None


def record(
    model_fn: Callable[[], torch.nn.Module],
    batch_fn: Callable[[], Any],
    *,
    iters: int = 3,
    hw: Any = "h200-pcie5",
    optimizer: Any = torch.optim.AdamW,
    loss_fn: Callable | None = None,
    amp: bool = False,
    name: str | None = None,
    meta: dict | None = None,
    _device: str = "meta",
    _memo: bool = True,
) -> Trace:
    """Record ``iters`` training steps of ``model_fn()`` on ``batch_fn()`` as a Trace.

    ``model_fn()`` builds an ``nn.Module`` and ``batch_fn()`` its inputs (a tensor or a
    tuple, passed as ``model(*batch)``); both run under ``torch.device("meta")``, so any
    size is free. ``loss_fn(output, batch)`` (or ``loss_fn(output)``) returns the scalar
    loss; the default is the mean of the output. ``optimizer``: an optimizer class (its
    foreach implementation is requested, as a GPU run would get) or any callable taking the
    parameters. ``hw``: a hardware profile name/path/``HardwareProfile`` for the per-tick
    device time (ns). ``amp``: bf16 autocast emulation (see module docstring). ``name`` and
    ``meta`` add to the trace metadata.

    Returns a Trace with ALLOC/FREE (bytes, exact storage sizes), ACCESS (READ/WRITE/
    READ_WRITE, bytes offsets) and MARK rows, and ``tick_ns`` from a roofline.
    """
    from ..hw import load_profile

    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")
    prof = load_profile(hw)
    rec = _Recorder(_device, prof)
    compute_loss = _loss_caller(loss_fn)
    model, state = _build_model(model_fn, rec, _device)
    params = [p for p in model.parameters() if p.requires_grad]
    n_params = sum(p.numel() for p in model.parameters())  # before a lazy module materializes
    opt = _make_optimizer(optimizer, params)
    # Parameters and buffers: tick 0, before the first iteration; no kernel, 0 ns.
    rec.open_tick()
    rec.alloc_existing(state)
    mode = _Mode(rec, memo=_memo and _device == "meta")
    first_batch = _train(rec, mode, model, opt, batch_fn, compute_loss, iters=iters, amp=amp,
                         device=_device)
    rec.closed = True
    m = _trace_meta(rec, mode, model, opt, prof, optimizer=optimizer, n_params=n_params,
                    first_batch=first_batch, iters=iters, amp=amp, name=name, device=_device)
    if meta:
        m.update(meta)
    # Drop the mode's references before building so nothing outlives the recording.
    del model, opt, params, state
    return rec.build(m)


def _build_model(model_fn: Callable[[], torch.nn.Module], rec: _Recorder, device: str
                 ) -> tuple[torch.nn.Module, list]:
    """``model_fn()`` under ``torch.device(device)``, in training mode, and its parameters
    and buffers; errors for what the recorder cannot record faithfully."""
    with torch.device(device):
        model = model_fn()
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model_fn() must return an nn.Module, got {type(model).__name__}")
    from ._live import RecordingError, _compiled_module_types

    if isinstance(model, _compiled_module_types()):
        raise RecordingError(
            "model_fn() returned a torch.compile'd module: on meta tensors dynamo runs it "
            "eagerly, and a compiled run allocates differently, so this recorder would record "
            "a run the script does not make. Record the real run instead: `uvm-sched record "
            "-- python train.py` (uvm_sched's allocator on a GPU sees the compiled "
            "allocations), or pass the module before torch.compile to record its eager run")
    model.train()
    state = list(model.parameters()) + list(model.buffers())
    if not any(t.device == rec.device for t in state):
        raise ValueError(
            f"model_fn() built no parameters or buffers on {device!r}; build them with the "
            "default device (the recorder sets it) rather than an explicit device="
        )
    return model, state


def _train(rec: _Recorder, mode: _Mode, model: torch.nn.Module, opt, batch_fn, compute_loss, *,
           iters: int, amp: bool, device: str) -> tuple[int | None, int | None] | None:
    """Run ``iters`` training steps under the dispatch ``mode`` (forward and loss -- under
    the autocast emulation when ``amp`` --, backward, ``opt.step()``,
    ``zero_grad(set_to_none=True)``), a MARK at each; returns (batch, seq) of the first
    batch (``_dims``)."""
    first_batch = None
    autocast = _Autocast() if amp else None
    with mode:
        for _ in range(iters):
            rec.pending_mark = True
            with torch.device(device):
                batch = batch_fn()
            if first_batch is None:
                first_batch = _dims(batch)
            if autocast is not None:
                with autocast:
                    out = model(*_as_tuple(batch))
                    loss = compute_loss(out, batch)
                autocast.cache.clear()  # autocast drops its weight cache on exit
            else:
                out = model(*_as_tuple(batch))
                loss = compute_loss(out, batch)
            if not (isinstance(loss, torch.Tensor) and loss.numel() == 1):
                raise TypeError(f"the loss must be a one-element tensor, got {loss!r}")
            del out
            loss.backward()
            del loss
            opt.step()
            opt.zero_grad(set_to_none=True)
            del batch
    return first_batch


def _trace_meta(rec: _Recorder, mode: _Mode, model: torch.nn.Module, opt, prof, *, optimizer,
                n_params: int, first_batch, iters: int, amp: bool, name: str | None,
                device: str) -> dict:
    """The recorded trace's metadata (units, the roofline, the model, the block names)."""
    names = _block_names(rec, model, opt)
    dtypes = sorted({str(p.dtype).replace("torch.", "") for p in model.parameters()})
    b, s = first_batch or (None, None)
    return {
        "source": "recorder",
        "name": name or type(model).__name__,
        "model": type(model).__name__,
        "batch": b,
        "seq": s,
        "hw": prof.name,
        "amp": bool(amp),
        "amp_emulation": "function-mode autocast (bf16)" if amp else None,
        "dtype": dtypes[0] if len(dtypes) == 1 else dtypes,
        "param_count": int(n_params),
        "param_bytes": int(sum(p.numel() * p.element_size() for p in model.parameters())),
        "optimizer": getattr(optimizer, "__name__", type(opt).__name__),
        "iters": int(iters),
        "ops": rec.n_ops,
        "flops": rec.total_flops,
        "flop_formula_failures": rec.flop_failures,
        "late_blocks": rec.late_blocks,
        "units": {"size": "bytes", "t_ns": "ns", "tick_ns": "ns"},
        "size_rounding": "exact storage nbytes (a CUDA caching allocator rounds up to 512 B)",
        "device_time": (
            f"roofline max(flops/peak, bytes/hbm_bw) + {LAUNCH_OVERHEAD_NS:.0f} ns launch"
        ),
        "time_source": f"roofline from recorded shapes ({prof.name})",
        "launch_overhead_ns": LAUNCH_OVERHEAD_NS,
        "recorded_device": device,
        "memo_hits": mode.hits,
        # tensor names of the blocks that have one (parameters, buffers, optimizer state):
        # hovers and reports name them; block id (as a string: JSON keys) -> name
        "block_names": names,
    }
