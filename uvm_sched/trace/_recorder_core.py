"""The workload recorder's event log: what ``record`` (``_recorder``) and the live recording
(``_live``) keep while aten ops run -- live storages with the weak references that say when
they die, the ticks, the ALLOC/ACCESS/FREE/MARK rows of each op, the kernels a foreach
op launches, and each tick's roofline device time. The rules are in ``_recorder``'s module
docstring; this module carries them out, one op at a time (``_Recorder.op``).
"""
from __future__ import annotations

import functools
import weakref
from typing import Any, cast

import numpy as np
import torch

from ._model import COLUMNS, AccessMode, EventKind, Trace

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
        """Record one aten op that has run: the storages it writes in place, its tensors'
        storages (``_touch``), then -- when it allocates or writes -- one tick (or one per
        multi_tensor_apply launch of a foreach op) with its ALLOC and ACCESS rows and its
        roofline device time."""
        info = self.infos.get(func)
        if info is None:
            info = self.infos[func] = _OpInfo(func)
        self.op_name = info.name
        ins: list = []
        for a in args:
            _tensors(a, ins)
        if kwargs:
            for a in kwargs.values():
                _tensors(a, ins)
        outs: list = []
        _tensors(out, outs)
        mutated = self._mutated(info, args, kwargs)
        touched, new, nbytes, low = self._touch(ins, outs, mutated)
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
        self._roofline(info, args, kwargs, out, nbytes, low, tick)

    def _mutated(self, info: _OpInfo, args, kwargs) -> set[int]:
        """Storage keys the op writes in place: its schema's write-annotated arguments, and
        batch norm's running statistics in training."""
        dev = self.device
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
        return mutated

    def _touch(self, ins: list, outs: list, mutated: set[int]
               ) -> tuple[dict[int, list], list, float, bool]:
        """The storages of the op's device tensors: (storage key -> [entry, mode,
        offset_lo, offset_hi] in order of first sight, the entries of storages new to the
        recording, the bytes the views span, whether any is bf16/fp16). Inputs are READ
        (READ_WRITE when mutated); outputs are WRITE when new, READ_WRITE when mutated, and
        otherwise aliases of what is already counted. An input never seen before is a late
        block; a mutated input whose storage was resized is freed and allocated again."""
        dev = self.device
        live = self.live
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
        return touched, new, nbytes, low

    def _roofline(self, info: _OpInfo, args, kwargs, out, nbytes: float, low: bool,
                  tick: int) -> None:
        """Device ns of ``tick``: max(FLOPs / peak, bytes / HBM bandwidth) + the launch
        overhead (the module docstring's roofline)."""
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
        dev, rows = self.device, self.rows
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
