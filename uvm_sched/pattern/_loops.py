"""Training-loop shapes with known iterations, for tests and benchmarks (issue 22).

What a user's loop looks like to the allocator, one shape at a time, each with and without
step markers, so that iteration finding, planning and the runtime are checked on loops
that vary the way real ones do:

* ``fixed`` -- every step the same (the twin ``dynamic_padding`` is measured against);
* ``dynamic_padding`` -- the batch's sequence length changes per step: the same events in
  the same order, other sizes (the most common fine-tuning set-up);
* ``partial_last`` -- ``drop_last=False``: the last batch is smaller, and its kernels need
  no workspace in two layers (4 events fewer);
* ``missing_events`` -- one step in the middle lacks a temporary in one layer (2 events
  fewer: the framework's caching allocator served it);
* ``eval_every`` -- a forward-only eval batch after every ``k``-th train step, a step of
  its own (its own marker);
* ``grad_accum`` -- an optimizer step over ``k`` micro-steps: the first backward allocates
  the gradients, the later ones a temporary gradient each that is added and freed;
* ``checkpointing`` -- activation checkpointing of segments of 2 layers: the forward pass
  keeps only each segment's input, the backward pass recomputes the segment first;
* ``compiled`` -- ``torch.compile``: fused kernels, so fewer temporaries (no workspace, no
  temporary per layer; one fused buffer per 2 layers).

The network is ``_synth``'s MLP trained with Adam (ground-truth accesses included, so the
simulator can judge plans); a tick's device time scales with the rows of its batch, as a
kernel's does. ``truth`` is what an analysis must find: with markers, ``marked`` spans
(each a step: a train step, an eval batch, an optimizer step over its micro-steps); the
step boundaries (allocator-event positions) let a check tell a learned period that groups
whole steps from a sub-period that cuts one.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..trace._model import AccessMode, Trace, TraceBuilder
from ._synth import _Mlp

__all__ = ["SHAPES", "LoopTruth", "loop_trace", "judge", "steps_found"]

SHAPES = ("fixed", "dynamic_padding", "partial_last", "missing_events", "eval_every",
          "grad_accum", "checkpointing", "compiled")

_R, _W, _RW = AccessMode.READ, AccessMode.WRITE, AccessMode.READ_WRITE


@dataclass
class LoopTruth:
    """What the loop did: ``steps`` (marked spans: train steps, eval batches), ``kinds``
    (one label per step: "train", "eval", "partial", "missing"), ``rows`` (each step's
    batch rows), ``bounds`` (allocator-event position where each step starts, then the
    end)."""

    shape: str
    markers: bool
    kinds: list[str] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    bounds: list[int] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return len(self.kinds)


class _Loop(_Mlp):
    """``_Mlp`` with the loop shapes' variants of the forward and backward passes."""

    def __init__(self, tb: TraceBuilder, *, layers: int, width: int, tick_ns: float,
                 batch: int) -> None:
        super().__init__(tb, layers=layers, width=width, accesses=True, tick_ns=tick_ns)
        self.batch = batch
        self.rows = batch  # rows of the current batch: a tick's device time scales with it
        self.events = 0  # allocator events so far

    def tick(self) -> None:
        self.tb.next_tick(self.tick_ns * self.rows / self.batch)

    def alloc(self, size: int, mode=_W) -> int:
        b = self.tb.alloc(int(size))
        self.events += 1
        self.acc(b, mode)
        return b

    def free(self, b: int) -> None:
        self.tb.free(b)
        self.events += 1

    def forward(self, b: int, *, ws_skip: frozenset = frozenset(), tmp_skip: frozenset =
                frozenset(), fused: bool = False, keep_every: int = 1) -> list[int]:
        """The input, then per layer an output (kept for backward when ``l % keep_every ==
        0``, else freed once the next layer used it), a 1 MiB workspace (not in
        ``ws_skip``, none when ``fused``) and a temporary (not in ``tmp_skip``; when
        ``fused``, one buffer per 2 layers). Returns the activations kept, input first
        (None where freed)."""
        x = self.alloc(4 * b * self.widths[0])
        self.tick()
        acts: list = [x]
        h = x
        for l in range(self.layers):
            out = self.alloc(4 * b * self.widths[l + 1])
            self.acc(h)
            self.acc(self.weight[l])
            if not fused and l not in ws_skip:
                self.free(self.alloc(1 << 20, _RW))
            tmp = None
            if (not fused and l not in tmp_skip) or (fused and l % 2 == 0):
                tmp = self.alloc(4 * b * self.widths[l + 1])
            self.tick()
            if tmp is not None:
                self.acc(tmp)
                self.free(tmp)
            if keep_every > 1 and l % keep_every != 0 and acts[-1] is not None:
                self.free(acts[-1])  # checkpointing: inside a segment nothing is kept
                acts[-1] = None
            acts.append(out)
            h = out
            self.tick()
        return acts

    def backward(self, acts: list, gout: int, b: int, *, grads: bool = True,
                 keep_every: int = 1) -> None:
        """Per layer (reversed) the input gradient and the weight gradient: kept until the
        next ``zero_grad`` when ``grads`` (the first backward of a step), else added to it
        and freed (gradient accumulation). With checkpointing, a layer whose input was not
        kept recomputes it first (an allocation freed after its backward op)."""
        for l in reversed(range(self.layers)):
            a_in = acts[l]
            if a_in is None:  # recompute the segment's activation from its kept input
                a_in = self.alloc(4 * b * self.widths[l])
                self.acc(acts[l - 1])
                self.acc(self.weight[l - 1])
                self.tick()
            gin = self.alloc(4 * b * self.widths[l])
            gw = self.alloc(self.wsize[l])
            for blk in (gout, a_in, self.weight[l]):
                self.acc(blk)
            self.free(gout)
            self.free(acts[l + 1])
            if acts[l] is None:
                acts[l] = a_in
            if grads:
                self.grads.append(gw)
            else:
                self.acc(self.grads[self.layers - 1 - l], _RW)
                self.free(gw)
            gout = gin
            self.tick()
        self.free(gout)
        self.free(acts[0])
        self.tick()

    def loss_grad(self, acts: list, b: int) -> int:
        """The loss (freed) and the output gradient (returned)."""
        loss = self.alloc(512)
        self.acc(acts[-1])
        self.tick()
        gout = self.alloc(4 * b * self.widths[self.layers])
        self.acc(loss)
        self.free(loss)
        self.tick()
        return gout

    def eval_batch(self, b: int) -> None:
        """A forward-only (no_grad) batch: each layer's input freed once its output exists."""
        h = self.alloc(4 * b * self.widths[0])
        self.tick()
        for l in range(self.layers):
            out = self.alloc(4 * b * self.widths[l + 1])
            self.acc(h)
            self.acc(self.weight[l])
            self.free(h)
            h = out
            self.tick()
        self.free(h)
        self.tick()

    def zero_grad(self) -> None:
        for g in self.grads:
            self.free(g)
        self.grads = []
        self.tick()


def loop_trace(shape: str, *, markers: bool = True, steps: int = 8, layers: int = 6,
               width: int = 1024, batch: int = 1024, k: int | None = None, seed: int = 0,
               tick_ns: float = 200_000.0, rows: int | None = None
               ) -> tuple[Trace, LoopTruth]:
    """A training loop of ``shape`` (``SHAPES``; module docstring) running ``steps`` optimizer
    steps, as a trace (bytes, ns) and its truth. ``markers``: a MARK starts each step (an
    eval batch is a step). ``k``: micro-steps per optimizer step (``grad_accum``, default
    3), train steps between eval batches (``eval_every``, default 5). ``seed``: the sequence
    lengths of ``dynamic_padding`` (rows drawn from 0.5..1.5 ``batch``, multiples of 64).
    ``tick_ns``: device ns of a tick at ``batch`` rows. ``rows``: the rows of every step of
    ``fixed`` (default ``batch``): the fixed-shape twin of a ``dynamic_padding`` step.
    """
    if shape not in SHAPES:
        raise ValueError(f"unknown loop shape {shape!r}; one of: {', '.join(SHAPES)}")
    k = k if k is not None else 5 if shape == "eval_every" else 3
    if steps < 2 or k < 1:
        raise ValueError(f"steps must be >= 2 and k >= 1, got steps={steps}, k={k}")
    tb = TraceBuilder(source="synthetic", name=f"loop {shape}{'' if markers else ' (no markers)'}",
                      batch=batch)
    m = _Loop(tb, layers=layers, width=width, tick_ns=tick_ns, batch=batch)
    m.weights()
    m.adam_state()
    m.events = 3 * layers  # the weights and Adam's two moments, allocated once
    truth = LoopTruth(shape, markers)
    rng = np.random.default_rng(seed)
    lo, hi = max(1, batch // 128), max(2, 3 * batch // 128)
    rows_of = [64 * int(r) for r in rng.integers(lo, hi + 1, steps)] \
        if shape == "dynamic_padding" else [rows or batch] * steps

    def start(kind: str) -> None:
        truth.kinds.append(kind)
        truth.rows.append(m.rows)
        truth.bounds.append(m.events)
        if markers:
            tb.mark()

    for s in range(steps):
        b = rows_of[s]
        kind = "train"
        ws_skip: frozenset = frozenset()
        tmp_skip: frozenset = frozenset()
        if shape == "partial_last" and s == steps - 1:
            b, kind, ws_skip = max(64, batch // 3), "partial", frozenset({0, 1})
        elif shape == "missing_events" and s == steps // 2:
            kind, tmp_skip = "missing", frozenset({layers // 2})
        m.rows = b
        start(kind)
        m.zero_grad()
        micro = k if shape == "grad_accum" else 1
        keep = 2 if shape == "checkpointing" else 1
        for j in range(micro):
            acts = m.forward(b, ws_skip=ws_skip, tmp_skip=tmp_skip,
                             fused=shape == "compiled", keep_every=keep)
            gout = m.loss_grad(acts, b)
            m.backward(acts, gout, b, grads=j == 0, keep_every=keep)
        m.adam()
        if shape == "eval_every" and s % k == k - 1 and s < steps - 1:
            m.rows = batch
            start("eval")
            m.eval_batch(batch)
    truth.bounds.append(m.events)
    return tb.build(), truth


def steps_found(pat) -> int:
    """The steps ``analyze`` found: its iterations, and the stretches of another kind it
    found inserted into iterations (an eval batch between two train steps, without
    markers: ``kinds[...]["inserted"]``), each a step of its own."""
    return len(pat.iterations) + sum(len(kd["iterations"]) for kd in pat.kinds
                                     if "inserted" in kd)


def judge(pat, truth: LoopTruth) -> str:
    """What ``analyze`` found on a loop, against its truth: ``"steps"`` (the iterations
    are the marked steps, with markers; without, the period is one step: a learned phase or
    a cut-short step at an end may leave a step or two out, an odd step is a gap),
    ``"groups of steps"`` (a period of whole steps: eval cycles), ``"no period"`` (one
    iteration, and a note that says why), ``"sub-period"`` (a period shorter than a step:
    what must never be) or ``"wrong"`` (anything else: with markers, other iterations than
    the steps)."""
    n = len(pat.iterations)
    if truth.markers:
        return "steps" if n == truth.steps else "wrong"
    if n == 1 and any(s.startswith("no period") for s in pat.notes):
        return "no period"
    lengths = np.diff(np.asarray(truth.bounds))
    vals, counts = np.unique(lengths, return_counts=True)
    step = int(vals[np.argmax(counts)])  # the most common step, in allocator events
    p = int(pat.period_events)
    if p < step:
        return "sub-period"
    if p == step:
        return "steps"
    return "groups of steps" if n >= 2 else "wrong"
