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
would launch (see ``_Recorder._foreach_launches``); ops that launch no
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
"""
from __future__ import annotations

import functools
import inspect
import math
import time
import weakref
from typing import Any, Callable, cast

import numpy as np
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from .._errors import Error
from ._model import COLUMNS, AccessMode, EventKind, Trace

__all__ = ["record", "LAUNCH_OVERHEAD_NS"]

#: Fixed device time added to every tick that launches a kernel, in ns. Back-to-back CUDA
#: kernels on Hopper/Ampere are spaced by ~1-3 us (launch latency and tail of the previous
#: grid; the floor of an empty kernel measured by nsys is ~2 us); 2 us is that floor. It
#: keeps tiny elementwise ops from costing ~0 ns, which the roofline alone would give them.
LAUNCH_OVERHEAD_NS = 2_000.0

_ALLOC, _FREE, _ACCESS, _MARK = (int(EventKind.ALLOC), int(EventKind.FREE),
                                 int(EventKind.ACCESS), int(EventKind.MARK))
_R, _W, _RW = int(AccessMode.READ), int(AccessMode.WRITE), int(AccessMode.READ_WRITE)

# Factories that allocate but launch no kernel (the memory is not touched).
_NO_KERNEL_ALLOC = {
    "empty", "empty_strided", "new_empty", "new_empty_strided", "empty_like",
}
_LOW = (torch.bfloat16, torch.float16)
# CUDA's multi_tensor_apply (ATen/native/cuda/MultiTensorApply.cuh): elements per chunk,
# chunks per launch, and tensors per launch by list depth 1..5.
_MTA_CHUNK = 65_536
_MTA_MAX_BLOCKS = 320
_MTA_MAX_TENSORS = (110, 64, 48, 36, 30)


class _OpInfo:
    """What the recorder needs to know about one aten overload, computed once."""

    __slots__ = ("mut_pos", "mut_kw", "no_kernel_alloc", "flop_fn", "name", "bn_train",
                 "foreach")

    def __init__(self, func) -> None:
        from torch.utils.flop_counter import flop_registry

        mut_pos: list[int] = []
        mut_kw: list[str] = []
        for i, a in enumerate(func._schema.arguments):
            if a.alias_info is not None and a.alias_info.is_write:
                if a.kwarg_only:
                    mut_kw.append(a.name)
                else:
                    mut_pos.append(i)
        self.mut_pos = tuple(mut_pos)
        self.mut_kw = tuple(mut_kw)
        self.name = func.overloadpacket.__name__
        self.no_kernel_alloc = self.name in _NO_KERNEL_ALLOC
        self.flop_fn = flop_registry.get(func.overloadpacket)
        # Batch norm in training updates running_mean/var (args 3, 4) in place, but these
        # overloads' schemas carry no write annotation for them.
        self.foreach = self.name.startswith("_foreach_")
        self.bn_train = self.name in ("native_batch_norm", "cudnn_batch_norm",
                                      "miopen_batch_norm")


def _tensors(x, out: list) -> None:
    """Append the tensors in ``x`` (a tensor, or a list/tuple of tensors and others)."""
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for y in x:
            if isinstance(y, torch.Tensor):
                out.append(y)
            elif isinstance(y, (list, tuple)):
                _tensors(y, out)


class _Recorder:
    """Event rows and live storages; the dispatch mode calls ``op`` after every aten op."""

    def __init__(self, device: str, hw) -> None:
        self.device = torch.device(device)
        self.rows: list[tuple] = []  # (tick, kind, block, size, mode, offset, length)
        self.tick_ns: list[float] = []
        self.tick = -1  # the tick last opened
        self.live: dict[int, list] = {}  # storage cdata -> [block, size, weakref]
        self.next_block = 0
        self.pending_mark = False
        self.closed = False
        self.late_blocks = 0
        self.flop_failures: dict[str, int] = {}
        self.n_ops = 0
        self.op_name = "parameters"  # the op whose kernel(s) the next opened tick is
        self.tick_op: list[str] = []  # per tick: the op's name (hovers name the op)
        self.total_flops = 0.0
        self.infos: dict[Any, _OpInfo] = {}
        self.peak32 = float(hw.peak_flops_fp32)
        self.peak16 = float(hw.peak_flops_bf16)
        self.bw = float(hw.hbm_bandwidth_Bps)

    # -- storages ------------------------------------------------------------------------
    def _dead(self, key: int, wr) -> None:
        if self.closed:
            return  # after the recording: the model's teardown is not part of the workload
        entry = self.live.get(key)
        if entry is not None and entry[2] is wr:
            del self.live[key]
            self.rows.append((max(self.tick, 0), _FREE, entry[0], entry[1], 0, -1, -1))

    def _new(self, st, key: int) -> list:
        # A weakref callback (not polling) so a free costs nothing until it happens.
        wr = weakref.ref(st, functools.partial(self._dead, key))
        entry = [self.next_block, st.nbytes(), wr]
        self.next_block += 1
        self.live[key] = entry
        return entry

    def open_tick(self) -> None:
        self.tick += 1
        self.tick_ns.append(0.0)
        self.tick_op.append(self.op_name)
        if self.pending_mark:
            self.rows.append((self.tick, _MARK, -1, 0, 0, -1, -1))
            self.pending_mark = False

    def alloc_existing(self, tensors) -> None:
        """ALLOC rows (in the current tick) for the storages of ``tensors`` not yet live."""
        for t in tensors:
            if t.device != self.device:
                continue
            st = t.untyped_storage()
            key = st._cdata
            if key not in self.live and st.nbytes() > 0:
                e = self._new(st, key)
                self.rows.append((self.tick, _ALLOC, e[0], e[1], 0, -1, -1))

    # -- the hot path ----------------------------------------------------------------------
    def op(self, func, args, kwargs, out) -> None:
        info = self.infos.get(func)
        if info is None:
            info = self.infos[func] = _OpInfo(func)
        self.op_name = info.name
        dev = self.device
        live = self.live
        ins: list = []
        for a in args:
            _tensors(a, ins)
        if kwargs:
            for a in kwargs.values():
                _tensors(a, ins)
        outs: list = []
        _tensors(out, outs)

        mutated: set[int] = set()
        if info.mut_pos or info.mut_kw:
            m: list = []
            for i in info.mut_pos:
                if i < len(args):
                    _tensors(args[i], m)
            for k in info.mut_kw:
                if k in kwargs:
                    _tensors(kwargs[k], m)
            for t in m:
                if t.device == dev:
                    mutated.add(t.untyped_storage()._cdata)
        if info.bn_train and len(args) > 5 and args[5]:
            for t in (args[3], args[4]):
                if isinstance(t, torch.Tensor) and t.device == dev:
                    mutated.add(t.untyped_storage()._cdata)

        # storage key -> [entry, mode, offset_lo, offset_hi] ; in order of first sight
        touched: dict[int, list] = {}
        new: list = []
        nbytes = 0.0
        low = False
        for t in ins:
            if t.device != dev:
                continue
            st = t.untyped_storage()
            key = st._cdata
            e = live.get(key)
            if e is None:
                if st.nbytes() == 0:
                    continue
                e = self._new(st, key)
                new.append(e)
                self.late_blocks += 1
            elif key in mutated and st.nbytes() != e[1]:
                # resize_ on an out= argument: the allocator frees and allocates again.
                self.rows.append((max(self.tick, 0), _FREE, e[0], e[1], 0, -1, -1))
                del live[key]
                e = self._new(st, key)
                new.append(e)
            n, lo, hi = _extent(t)
            nbytes += n
            if t.dtype in _LOW:
                low = True
            mode = _RW if key in mutated else _R
            rec = touched.get(key)
            if rec is None:
                touched[key] = [e, mode, lo, hi]
            else:
                rec[1] |= mode
                rec[2] = min(rec[2], lo)
                rec[3] = max(rec[3], hi)
        for t in outs:
            if t.device != dev:
                continue
            st = t.untyped_storage()
            key = st._cdata
            e = live.get(key)
            if e is None:
                if st.nbytes() == 0:
                    continue
                e = self._new(st, key)
                new.append(e)
                mode = _W
            elif key in touched:
                continue  # an input returned (in-place result or alias): already counted
            elif key in mutated:
                mode = _RW
            else:
                continue  # an alias of a storage that is live already: no write
            n, lo, hi = _extent(t)
            nbytes += n
            if t.dtype in _LOW:
                low = True
            touched[key] = [e, mode, lo, hi]
        if not new and not mutated:
            return  # views, metadata, host-only ops: no kernel, no tick
        self.n_ops += 1
        self.open_tick()
        tick = self.tick
        rows = self.rows
        for e in new:
            rows.append((tick, _ALLOC, e[0], e[1], 0, -1, -1))
        if info.no_kernel_alloc:
            return  # allocates only: 0 ns, nothing touched
        if info.foreach and self._foreach_launches(args, out, touched):
            return
        for rec in touched.values():
            e = rec[0]
            lo, hi = rec[2], rec[3]
            if lo <= 0 and hi >= e[1]:
                rows.append((tick, _ACCESS, e[0], e[1], rec[1], -1, -1))
            else:
                rows.append((tick, _ACCESS, e[0], e[1], rec[1], lo, hi - lo))
        flops = 0.0
        if info.flop_fn is not None:
            try:
                flops = float(info.flop_fn(*args, **(kwargs or {}), out_val=out))
            except Exception:  # a formula that does not cover this overload's arguments
                self.flop_failures[info.name] = self.flop_failures.get(info.name, 0) + 1
        self.total_flops += flops
        peak = self.peak16 if low else self.peak32
        self.tick_ns[tick] = max(flops / peak, nbytes / self.bw) * 1e9 + LAUNCH_OVERHEAD_NS

    def _foreach_launches(self, args, out, touched) -> bool:
        """Split a foreach op into the kernels CUDA's multi_tensor_apply launches.

        A foreach op is not one kernel on a GPU: ``multi_tensor_apply`` walks the tensor
        lists in 65,536-element chunks and launches a kernel whenever it holds 320 chunks or
        its per-depth tensor limit (110, 64, 48, 36, 30 tensors for 1..5 lists), splitting
        big tensors across launches. One tick per launch, each touching only its tensors'
        chunk ranges (``offset``/``length``), keeps the working set of an optimizer step as
        small as the GPU's instead of "every parameter at once". Returns False (one tick for
        the op) when the lists do not line up.
        """
        lists = [a for a in args if isinstance(a, (list, tuple)) and a
                 and all(isinstance(t, torch.Tensor) for t in a)]
        if isinstance(out, (list, tuple)) and out and isinstance(out[0], torch.Tensor):
            lists.append(out)
        if not lists or any(len(x) != len(lists[0]) for x in lists):
            return False
        extras = [a for a in args if isinstance(a, torch.Tensor) and a.device == self.device]
        max_tensors = _MTA_MAX_TENSORS[min(len(lists), 5) - 1]
        launches: list[list[tuple[int, int, int]]] = []
        cur: list[tuple[int, int, int]] = []
        n_t = n_b = 0
        for i, t in enumerate(lists[0]):
            numel = t.numel()
            if numel == 0:
                continue
            n_t += 1
            chunks = -(-numel // _MTA_CHUNK)
            start = 0
            for c in range(chunks):
                n_b += 1
                last = c == chunks - 1
                if (n_t == max_tensors and last) or n_b == _MTA_MAX_BLOCKS:
                    cur.append((i, start * _MTA_CHUNK, min(numel, (c + 1) * _MTA_CHUNK)))
                    launches.append(cur)
                    cur, n_b, start = [], 0, c + 1
                    n_t = 0 if last else 1
            if start < chunks:
                cur.append((i, start * _MTA_CHUNK, numel))
        if cur:
            launches.append(cur)
        if not launches:
            return False
        dev, rows, live = self.device, self.rows, self.live
        for k, launch in enumerate(launches):
            if k:
                self.open_tick()
            tick = self.tick
            acc: dict[int, list] = {}
            nbytes = 0
            for i, lo, hi in launch:
                for lst in lists:
                    t = lst[i]
                    if t.device != dev:
                        continue
                    key = t.untyped_storage()._cdata
                    rec = touched.get(key)
                    if rec is None:
                        continue  # a zero-byte storage
                    item = t.element_size()
                    nbytes += (hi - lo) * item
                    if t.is_contiguous():
                        b0 = (t.storage_offset() + lo) * item
                        b1 = (t.storage_offset() + hi) * item
                    else:
                        _, b0, b1 = _extent(t)
                    a = acc.get(key)
                    if a is None:
                        acc[key] = [rec[0], rec[1], b0, b1]
                    else:
                        a[2], a[3] = min(a[2], b0), max(a[3], b1)
            for t in extras:
                key = t.untyped_storage()._cdata
                rec = touched.get(key)
                if rec is not None and key not in acc:
                    acc[key] = rec
                    nbytes += _extent(t)[0]
            for e, mode, b0, b1 in acc.values():
                if b0 <= 0 and b1 >= e[1]:
                    rows.append((tick, _ACCESS, e[0], e[1], mode, -1, -1))
                else:
                    rows.append((tick, _ACCESS, e[0], e[1], mode, b0, b1 - b0))
            self.tick_ns[tick] = nbytes / self.bw * 1e9 + LAUNCH_OVERHEAD_NS
        self.n_ops += len(launches) - 1
        return True

    # -- result ------------------------------------------------------------------------------
    def build(self, meta: dict) -> Trace:
        n_ticks = self.tick + 1
        tick_ns = np.asarray(self.tick_ns, dtype=np.float64)
        start_ns = np.zeros(n_ticks + 1, dtype=np.float64)
        np.cumsum(tick_ns, out=start_ns[1:])
        if self.rows:
            arr = np.asarray(self.rows, dtype=np.int64)
        else:
            arr = np.zeros((0, 7), dtype=np.int64)
        tick = arr[:, 0]
        cols: dict[str, np.ndarray | None] = {
            "tick": tick,
            "t_ns": np.rint(start_ns[tick]).astype(np.int64),
            "kind": arr[:, 1],
            "block": arr[:, 2],
            "size": arr[:, 3],
            "mode": arr[:, 4],
            "offset": arr[:, 5],
            "length": arr[:, 6],
        }
        cols = {k: cols.get(k) for k in COLUMNS}
        # the op of each tick, interned (a few distinct names over thousands of ticks)
        names = list(dict.fromkeys(self.tick_op))
        code = {n: i for i, n in enumerate(names)}
        meta = {**meta, "tick_ops": {"names": names, "index": [code[n] for n in self.tick_op]}}
        return Trace(cols, tick_ns=tick_ns, meta=meta)


def _block_names(rec: _Recorder, model, opt) -> dict[str, str]:
    """Block id -> tensor name for the blocks still live that have one: parameters and
    buffers by their module path, optimizer state as ``<param>.<state key>``."""
    out: dict[str, str] = {}

    def put(t, name: str) -> None:
        if isinstance(t, torch.Tensor) and t.device == rec.device:
            e = rec.live.get(t.untyped_storage()._cdata)
            if e is not None:
                out.setdefault(str(e[0]), name)

    pname = {}
    for name, p in model.named_parameters():
        put(p, name)
        pname[id(p)] = name
    for name, b in model.named_buffers():
        put(b, name)
    for p, st in getattr(opt, "state", {}).items():
        for k, v in st.items():
            put(v, f"{pname.get(id(p), 'param')}.{k}")
    return out


def _extent(t: torch.Tensor) -> tuple[int, int, int]:
    """(bytes the view spans once, lowest byte offset, one past the highest) in its storage."""
    itemsize = t.element_size()
    numel = t.numel()
    # int | SymInt in torch's stubs: SymInt only under symbolic shapes, which a recording
    # (eager or meta tensors of concrete shape) never has
    lo = cast(int, t.storage_offset()) * itemsize
    if numel == 0:
        return 0, lo, lo
    span = 1
    for s, st in zip(t.shape, t.stride()):
        span += (s - 1) * abs(st)
    hi = lo + span * itemsize
    # An expanded (stride 0) view reads each element once, not once per broadcast copy.
    return min(numel, span) * itemsize, lo, hi


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


# -- autocast emulation (see the module docstring) ---------------------------------------------
_AMP_LOW = {
    "linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "addmm", "baddbmm",
    "addbmm", "addmv", "mv", "einsum", "prelu", "scaled_dot_product_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
}
_AMP_FP32 = {
    "softmax", "log_softmax", "layer_norm", "group_norm", "rms_norm", "cross_entropy",
    "cross_entropy_loss", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "kl_div",
    "binary_cross_entropy_with_logits", "exp", "log", "log1p", "pow", "rsqrt", "reciprocal",
    "logsumexp", "cosine_similarity", "cumsum", "cumprod", "norm", "dist", "cdist",
}


class _Autocast(TorchFunctionMode):
    """CUDA-autocast semantics for meta tensors (torch.autocast has no meta device type)."""

    def __init__(self, dtype=torch.bfloat16) -> None:
        super().__init__()
        self.dtype = dtype
        self.cache: dict[int, torch.Tensor] = {}

    def _cast(self, x, to):
        if isinstance(x, torch.Tensor):
            if x.is_floating_point() and x.dtype != to and x.dtype in (torch.float32, *_LOW):
                # autocast caches the low-precision copy of leaf tensors that need grad
                # (parameters) for the whole forward region.
                if to is self.dtype and x.is_leaf and x.requires_grad:
                    c = self.cache.get(id(x))
                    if c is None:
                        c = self.cache[id(x)] = x.to(to)
                    return c
                return x.to(to)
            return x
        if isinstance(x, (list, tuple)):
            return type(x)(self._cast(y, to) for y in x)
        return x

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in _AMP_LOW:
            to = self.dtype
        elif name in _AMP_FP32:
            to = torch.float32
        else:
            return func(*args, **kwargs)
        with torch._C.DisableTorchFunction():
            args = self._cast(args, to)
            kwargs = {k: self._cast(v, to) for k, v in kwargs.items()}
        return func(*args, **kwargs)


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
    with torch.device(_device):
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
    on_dev = [t for t in state if t.device == rec.device]
    if not on_dev:
        raise ValueError(
            f"model_fn() built no parameters or buffers on {_device!r}; build them with the "
            "default device (the recorder sets it) rather than an explicit device="
        )
    params = [p for p in model.parameters() if p.requires_grad]
    n_params = sum(p.numel() for p in model.parameters())
    opt = _make_optimizer(optimizer, params)
    # Parameters and buffers: tick 0, before the first iteration; no kernel, 0 ns.
    rec.open_tick()
    rec.alloc_existing(state)
    first_batch = None
    mode = _Mode(rec, memo=_memo and _device == "meta")
    autocast = _Autocast() if amp else None
    with mode:
        for _ in range(iters):
            rec.pending_mark = True
            with torch.device(_device):
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
    rec.closed = True
    names = _block_names(rec, model, opt)
    dtypes = sorted({str(p.dtype).replace("torch.", "") for p in model.parameters()})
    b, s = first_batch or (None, None)
    m = {
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
        "recorded_device": _device,
        "memo_hits": mode.hits,
        # tensor names of the blocks that have one (parameters, buffers, optimizer state):
        # hovers and reports name them; block id (as a string: JSON keys) -> name
        "block_names": names,
    }
    if meta:
        m.update(meta)
    # Drop the mode's references before building so nothing outlives the recording.
    del model, opt, params, state, on_dev
    return rec.build(m)
