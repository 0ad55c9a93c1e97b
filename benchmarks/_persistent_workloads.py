"""Generated LLM training traces where persistent state dominates, for bench_persistent.py.

Built on ``uvm_sched.trace._llm`` (decoder-only, mixed-precision AdamW, gradient
accumulation; ACCESS rows included, so the simulator judges plans by the real uses) with
three variants of what is held across iterations:

* ``ema``: an fp32 exponential moving average of every weight, updated after each AdamW
  step (reads the master weight, read-modify-writes the EMA copy): 4 more bytes per
  parameter, touched once per iteration;
* ``teacher``: a frozen bf16 teacher of the same shape (distillation): per micro-batch a
  teacher forward reads each teacher weight once, layer by layer, its activations dying in
  the next tick; the teacher is never written;
* ``frozen``: a frozen backbone: the embedding and the first ``frozen`` layers hold only
  their bf16 weights (no master copy, moments or gradient accumulator) and get no weight
  gradient; the rest trains as usual.

Sizes in bytes; tick times from the same FLOP model as ``llm_trace``.
"""
from __future__ import annotations

from uvm_sched.trace._llm import _R, _RW, _W, _Model, _train
from uvm_sched.trace._model import Trace, TraceBuilder

__all__ = ["persistent_trace", "WORKLOADS"]


class _Variant(_Model):
    """``_Model`` with an EMA copy, a frozen teacher or a frozen backbone (module doc)."""

    def __init__(self, tb: TraceBuilder, *, ema: bool, teacher: bool, frozen: int,
                 **shape) -> None:
        super().__init__(tb, **shape)
        self.ema_on, self.teacher_on = ema, teacher
        # frozen parameters: the embedding and every weight of the first `frozen` layers
        self.frozen = ({0} | {self.lw(layer, j) for layer in range(frozen) for j in range(6)}
                       if frozen else set())
        self.ema: list[int] = []
        self.teacher: list[int] = []

    def acc(self, block: int, mode=_R) -> None:
        if block >= 0:  # -1: a frozen weight's master, moment or accumulator (none exists)
            super().acc(block, mode)

    def weights(self) -> None:
        tb, acc = self.tb, self.acc
        for i, n in enumerate(self.params):
            self.work.append(tb.alloc(2 * n))
            acc(self.work[-1], _W)
            if i in self.frozen:  # bf16 weights only: nothing to train
                self.master.append(-1)
                self.moments.append((-1, -1))
                self.gacc.append(-1)
            else:
                self.master.append(tb.alloc(4 * n))
                self.moments.append((tb.alloc(4 * n), tb.alloc(4 * n)))
                self.gacc.append(tb.alloc(4 * n))
                acc(self.master[-1], _W)
            if self.ema_on:
                self.ema.append(tb.alloc(4 * n))
                acc(self.ema[-1], _W)
            if self.teacher_on:
                self.teacher.append(tb.alloc(2 * n))
                acc(self.teacher[-1], _W)
            self.tick(4 * n)

    def micro_batch(self) -> None:
        if self.teacher_on:
            self.teacher_forward()
        super().micro_batch()

    def teacher_forward(self) -> None:
        """The teacher's forward pass: each layer reads its weights once; one activation
        alive at a time (no backward through the teacher)."""
        tb, acc = self.tb, self.acc
        x = tb.alloc(self.act)
        acc(self.teacher[0])
        acc(x, _W)
        self.tick(2 * self.tok * self.h)
        for layer in range(self.layers):
            y = tb.alloc(self.act)
            acc(x)
            for j in range(6):
                acc(self.teacher[self.lw(layer, j)])
            acc(y, _W)
            tb.free(x)
            self.tick(2 * self.tok * sum(self.params[self.lw(layer, j)] for j in range(6)))
            x = y
        logits = tb.alloc(2 * self.tok * self.vocab)
        acc(x)
        acc(self.teacher[-1])
        acc(logits, _W)
        tb.free(x)
        self.tick(2 * self.tok * self.h * self.vocab)
        tb.free(logits)  # (its soft targets folded into the student's loss: one tick)
        self.tick(4 * self.tok * self.vocab)

    def accumulate(self, gw: int, i: int) -> None:
        if i in self.frozen:  # no weight gradient for a frozen weight: only the buffer dies
            self.tb.free(gw)
            return
        super().accumulate(gw, i)

    def adamw(self) -> None:
        acc = self.acc
        trained = [i for i in range(len(self.params)) if i not in self.frozen]
        for i in trained:
            acc(self.gacc[i])
            acc(self.moments[i][0], _RW)
            acc(self.moments[i][1], _RW)
            acc(self.master[i], _RW)
            acc(self.work[i], _W)
            self.tick(12 * self.params[i])
        for i in trained:
            acc(self.gacc[i], _W)  # zero_grad
        self.tick(len(self.params))
        if self.ema_on:  # ema = d * ema + (1 - d) * weight, after the step
            for i, n in enumerate(self.params):
                acc(self.master[i] if i not in self.frozen else self.work[i], _R)
                acc(self.ema[i], _RW)
                self.tick(3 * n)


def persistent_trace(*, layers: int, micro_batches: int, hidden: int, seq: int,
                     ema: bool = False, teacher: bool = False, frozen: int = 0,
                     iters: int = 3, vocab: int = 32000, heads: int = 16, batch: int = 1,
                     tflops: float = 400.0, name: str) -> Trace:
    """A training trace with ACCESS rows (module doc); ``frozen``: layers frozen from the
    bottom (with the embedding)."""
    if not 0 <= frozen <= layers:
        raise ValueError(f"frozen must be 0..{layers} layers, got {frozen}")
    tb = TraceBuilder(source="synthetic", name=name, batch=batch)
    m = _Variant(tb, ema=ema, teacher=teacher, frozen=frozen, layers=layers, hidden=hidden,
                 seq=seq, batch=batch, vocab=vocab, heads=heads, accesses=True, tflops=tflops)
    return _train(tb, m, iters, micro_batches)


# name -> shape: mixed-precision AdamW at 1, 4 and 16 accumulation steps, an EMA copy, a
# distillation teacher and a frozen backbone; shapes differ so no constant fits one model
WORKLOADS = {
    "adamw-mb1": dict(layers=12, micro_batches=1, hidden=1024, seq=1024, batch=1),
    "adamw-mb4": dict(layers=8, micro_batches=4, hidden=1024, seq=1024, batch=2),
    "adamw-mb16": dict(layers=4, micro_batches=16, hidden=1536, seq=512, batch=2),
    "ema-mb4": dict(layers=8, micro_batches=4, hidden=1024, seq=1024, batch=2, ema=True),
    "teacher-mb2": dict(layers=6, micro_batches=2, hidden=1024, seq=1024, batch=2,
                        teacher=True),
    "frozen-mb4": dict(layers=12, micro_batches=4, hidden=1024, seq=1024, batch=2, frozen=6),
}
