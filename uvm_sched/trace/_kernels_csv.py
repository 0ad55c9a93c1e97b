"""Import a kernel-level workload folder (``kernels.csv`` + ``tensors.csv``, the format of
the G10 artifact's workloads; see ``../shared/workloads/g10/README.md``).

* ``kernels.csv``: ``kernel_id,duration_us,inputs,outputs`` -- one training iteration in
  execution order, ``;``-separated tensor ids.
* ``tensors.csv``: ``tensor_id,bytes,is_global``.

Mapping to a Trace: each kernel is one tick whose device time is its duration; the tick's
rows are: a MARK when an iteration starts (then, at tick 0, the global tensors'
allocations), the allocations of the tensors it touches first, one ACCESS per tensor it
touches (inputs READ, outputs WRITE, both READ_WRITE), then the frees of the tensors it
touches last. Global tensors (weights, and constants that live
across iterations) are allocated at tick 0 and never freed; every other tensor lives from
the kernel of its first access to the kernel of its last, afresh in each iteration.
``iterations`` repeats the iteration (a MARK at each start) so a planner or runtime can see
a steady state. ``t_ns`` is the device timeline: the sum of the durations of the earlier
ticks (frees are stamped at the end of their tick).

The files are read strictly (exact header, every field, every referenced tensor present,
every tensor used, last line complete): a truncated or corrupt file raises TraceError.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from ._model import COLUMNS, AccessMode, EventKind, Trace, TraceError

__all__ = ["is_workload_folder", "load_kernels_csv"]

_KERNELS_HEADER = "kernel_id,duration_us,inputs,outputs"
_TENSORS_HEADER = "tensor_id,bytes,is_global"
_HW = "a100-40gb-g10"  # the artifact's kernel times were measured on an A100-40GB


def is_workload_folder(p: Path) -> bool:
    return (p / "kernels.csv").is_file() or (p / "tensors.csv").is_file()


def _lines(path: Path, header: str) -> list[list[str]]:
    """The data rows of a CSV without quoting, split on commas; TraceError when the file is
    not that CSV (wrong header, not UTF-8, last line cut off)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise TraceError(f"{path}: not UTF-8 text ({e})") from None
    if not text.endswith("\n"):
        raise TraceError(
            f"{path}: the last line is incomplete (no newline at the end of the file); truncated?"
        )
    lines = text.splitlines()
    if not lines or lines[0].strip().lstrip("\ufeff") != header:
        got = lines[0][:80] if lines else ""
        raise TraceError(f"{path}: header is {got!r}, expected {header!r}")
    width = header.count(",") + 1
    rows = []
    for i, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        f = line.rstrip("\r").split(",")
        if len(f) != width:
            raise TraceError(f"{path}:{i}: {len(f)} fields, expected {width} ({header}): {line[:80]!r}")
        rows.append([x.strip() for x in f] + [str(i)])
    return rows


def _int(s: str, what: str, where: str) -> int:
    if not re.fullmatch(r"[0-9]+", s):
        raise TraceError(f"{where}: {what} is {s!r}, expected a non-negative integer")
    return int(s)


def _ids(s: str, where: str, what: str) -> list[int]:
    if not s:
        return []
    return [_int(x, what, where) for x in s.split(";")]


def _meta_from_name(name: str) -> dict:
    m = re.fullmatch(r"(.+?)_(\d+)", name)
    return {"model": m.group(1), "batch": int(m.group(2))} if m else {"model": name, "batch": None}


def load_kernels_csv(folder, *, iterations: int = 2) -> Trace:
    """Read the workload folder ``folder``; ``iterations`` (>= 1) copies of its iteration.
    Device times in ns (``tick_ns`` = ``duration_us`` * 1000), sizes in bytes."""
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"iterations must be an integer >= 1, got {iterations!r}")
    folder = Path(folder)
    kp, tp = folder / "kernels.csv", folder / "tensors.csv"
    for p in (kp, tp):
        if not p.is_file():
            raise TraceError(
                f"{folder}: a workload folder needs kernels.csv and tensors.csv; {p.name} is missing"
            )
    sizes, is_global = _read_tensors(tp)
    durations, touches = _read_kernels(kp, sizes)
    born, dies, glob = _lifetimes(folder, sizes, is_global, touches)
    cols = _rows(sizes, touches, born, dies, glob, durations, iterations)
    tick_ns = np.tile(np.asarray(durations) * 1000.0, iterations)
    meta = {
        "source": "g10",
        "name": folder.name,
        **_meta_from_name(folder.name),
        "hw": _HW,
        "units": {"t_ns": "ns (device timeline)", "size": "bytes", "tick": "kernel"},
        "iterations": iterations,
        "kernels_per_iteration": len(durations),
        "tensors": len(sizes),
        "global_tensors": len(glob),
    }
    return Trace(cols, tick_ns=tick_ns, meta=meta)


def _read_tensors(tp: Path) -> tuple[dict[int, int], dict[int, bool]]:
    """tensors.csv: (tensor id -> bytes, tensor id -> is global)."""
    sizes: dict[int, int] = {}
    is_global: dict[int, bool] = {}
    for f in _lines(tp, _TENSORS_HEADER):
        where = f"{tp}:{f[3]}"
        tid = _int(f[0], "tensor_id", where)
        if tid in sizes:
            raise TraceError(f"{where}: tensor {tid} is listed twice")
        sizes[tid] = _int(f[1], "bytes", where)
        g = f[2]
        if g not in ("0", "1"):
            raise TraceError(f"{where}: is_global is {g!r}, expected 0 or 1")
        is_global[tid] = g == "1"
    if not sizes:
        raise TraceError(f"{tp}: no tensors")
    return sizes, is_global


def _read_kernels(kp: Path, sizes: dict[int, int]
                  ) -> tuple[list[float], list[list[tuple[int, int]]]]:
    """kernels.csv: (duration of each kernel in us, per kernel the (tensor, AccessMode) it
    touches in file order); every tensor named must be in ``sizes``."""
    durations: list[float] = []
    touches: list[list[tuple[int, int]]] = []
    for f in _lines(kp, _KERNELS_HEADER):
        where = f"{kp}:{f[4]}"
        kid = _int(f[0], "kernel_id", where)
        if kid != len(durations):
            raise TraceError(f"{where}: kernel_id {kid}, expected {len(durations)} (kernels in order)")
        try:
            dur = float(f[1])
        except ValueError:
            raise TraceError(f"{where}: duration_us is {f[1]!r}, expected a number") from None
        if not (math.isfinite(dur) and dur >= 0):
            raise TraceError(f"{where}: duration_us is {f[1]!r}, expected a finite number >= 0")
        ins = _ids(f[2], where, "an input tensor id")
        outs = _ids(f[3], where, "an output tensor id")
        mode: dict[int, int] = {}
        for t in ins:
            mode[t] = mode.get(t, 0) | AccessMode.READ
        for t in outs:
            mode[t] = mode.get(t, 0) | AccessMode.WRITE
        for t in mode:
            if t not in sizes:
                raise TraceError(f"{where}: tensor {t} is not in tensors.csv")
        durations.append(dur)
        touches.append(list(mode.items()))
    if not durations:
        raise TraceError(f"{kp}: no kernels")
    return durations, touches


def _lifetimes(folder: Path, sizes: dict[int, int], is_global: dict[int, bool],
               touches: list[list[tuple[int, int]]]
               ) -> tuple[list[list[int]], list[list[int]], list[int]]:
    """(per kernel the non-global tensors it touches first, those it touches last, the
    global tensors), each in tensor id order; a tensor no kernel uses means a truncated
    kernels.csv."""
    n = len(touches)
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for k, tl in enumerate(touches):
        for t, _ in tl:
            first.setdefault(t, k)
            last[t] = k
    unused = [t for t in sizes if t not in first]
    if unused:
        raise TraceError(
            f"{folder}: {len(unused):,} tensor(s) of tensors.csv (first: {unused[0]}, "
            f"{sizes[unused[0]]:,} bytes) are used by no kernel of kernels.csv ({n:,} kernels); "
            "is kernels.csv truncated?"
        )
    born: list[list[int]] = [[] for _ in range(n)]
    dies: list[list[int]] = [[] for _ in range(n)]
    for t in sorted(sizes):
        if not is_global[t]:
            born[first[t]].append(t)
            dies[last[t]].append(t)
    glob = sorted(t for t in sizes if is_global[t])
    return born, dies, glob


def _rows(sizes: dict[int, int], touches: list[list[tuple[int, int]]],
          born: list[list[int]], dies: list[list[int]], glob: list[int],
          durations: list[float], iterations: int) -> dict[str, np.ndarray]:
    """The event columns, one tick per kernel in each of ``iterations`` copies (the row
    order of the module docstring)."""
    n = len(durations)
    dur_ns = [int(round(d * 1000.0)) for d in durations]
    per_it = sum(2 * len(b) for b in born) + sum(len(tl) for tl in touches) + 1
    rows = len(glob) + iterations * per_it
    cols = {k: np.empty(rows, COLUMNS[k]) for k in ("tick", "t_ns", "kind", "block", "size", "mode")}
    r = 0
    block_of: dict[int, int] = {}
    next_block = 0

    def put(tick, t_ns, kind, block, size, mode=0):
        nonlocal r
        cols["tick"][r] = tick
        cols["t_ns"][r] = t_ns
        cols["kind"][r] = kind
        cols["block"][r] = block
        cols["size"][r] = size
        cols["mode"][r] = mode
        r += 1

    now = 0
    for it in range(iterations):
        for k in range(n):
            tick = it * n + k
            if k == 0:
                # MARK first in its tick, so row order and tick agree on where the
                # iteration starts (the global tensors' allocations belong to iteration 0)
                put(tick, now, EventKind.MARK, -1, 0)
                if it == 0:
                    for t in glob:
                        block_of[t] = next_block
                        put(0, 0, EventKind.ALLOC, next_block, sizes[t])
                        next_block += 1
            for t in born[k]:
                block_of[t] = next_block
                put(tick, now, EventKind.ALLOC, next_block, sizes[t])
                next_block += 1
            for t, m in touches[k]:
                put(tick, now, EventKind.ACCESS, block_of[t], sizes[t], m)
            end = now + dur_ns[k]
            for t in dies[k]:
                put(tick, end, EventKind.FREE, block_of[t], sizes[t])
            now = end
    assert r == rows  # the row count above is exact
    return cols
