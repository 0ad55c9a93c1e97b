"""A synthetic decoder-only LLM training trace (allocator events), for scale tests and
benchmarks.

What a framework's caching allocator sees for a GPT-like model trained with mixed-precision
AdamW and gradient accumulation, built with ``TraceBuilder``:

* once, one parameter per tick: fp32 master weights, bf16 working weights, fp32 AdamW
  moments (m, v) and fp32 accumulated gradients, per layer (QKV, attention output, MLP up,
  MLP down, two norms) plus the embedding and the LM head;
* per micro-batch, forward: per layer the saved activations (norm output, QKV, attention
  probabilities, attention output, residual, MLP up, GELU output, MLP down), a workspace
  and temporaries freed in the same or the next tick; the logits and the loss;
* per micro-batch, backward: per layer (reversed) activation gradients, a bf16 weight
  gradient per weight that is added into the fp32 accumulator and freed, the layer's saved
  activations freed;
* per iteration, after the last micro-batch: AdamW over every weight (reads the accumulated
  gradient, m, v, master weight; writes the bf16 copy), then ``zero_grad``.

Only allocator events (ALLOC, FREE, MARK at each iteration) unless ``accesses=True``: the
runtime and oblivious planner see exactly these. Tick durations follow a simple FLOP model
(``tflops`` sustained) so the compute time scales with the shapes. Sizes in bytes.
"""
from __future__ import annotations

from ._model import AccessMode, Trace, TraceBuilder

__all__ = ["llm_trace", "llm_trace_for_events"]

_R, _W, _RW = AccessMode.READ, AccessMode.WRITE, AccessMode.READ_WRITE


def llm_trace(*, layers: int = 8, micro_batches: int = 4, iters: int = 3, hidden: int = 1024,
              seq: int = 1024, batch: int = 1, vocab: int = 32000, heads: int = 16,
              accesses: bool = False, tflops: float = 400.0, name: str | None = None) -> Trace:
    """Build the trace (see the module docstring). ``hidden``/``seq``/``batch``/``vocab``/
    ``heads`` give the shapes (bf16 activations, 2 bytes per element); ``tflops``: the
    sustained compute rate that sets each tick's device ns. About
    ``layers * (52 * iters * micro_batches + 24)`` allocator events."""
    if min(layers, micro_batches, iters, hidden, seq, batch, vocab, heads) < 1:
        raise ValueError("llm_trace: layers, micro_batches, iters and every shape must be >= 1")
    tb = TraceBuilder(source="synthetic", name=name or f"llm-L{layers}-mb{micro_batches}",
                      batch=batch)
    m = _Model(tb, layers=layers, hidden=hidden, seq=seq, batch=batch, vocab=vocab,
               heads=heads, accesses=accesses, tflops=tflops)
    return _train(tb, m, iters, micro_batches)


def _train(tb: TraceBuilder, m: "_Model", iters: int, micro_batches: int) -> Trace:
    """The training loop over model ``m`` (a ``_Model`` or a variant of it): weights, then
    per iteration a marker, ``micro_batches`` forward/backward passes and one AdamW step."""
    m.weights()
    for _ in range(iters):
        tb.mark()
        for _mb in range(micro_batches):
            m.micro_batch()
        m.adamw()
    return tb.build()


class _Model:
    """The steps of the module docstring, one method each, over one ``TraceBuilder``:
    ``weights`` once, ``micro_batch`` (forward, then backward) and ``adamw`` per
    iteration. Block ids of the parameters' state live here; a micro-batch's activations
    pass from forward to backward as each layer's ``saved`` list (``forward_layer``)."""

    def __init__(self, tb: TraceBuilder, *, layers: int, hidden: int, seq: int, batch: int,
                 vocab: int, heads: int, accesses: bool, tflops: float) -> None:
        self.tb = tb
        self.layers, self.h, self.s, self.b = layers, hidden, seq, batch
        self.vocab, self.heads = vocab, heads
        self.accesses, self.tflops = accesses, tflops
        self.tok = batch * seq
        self.act = 2 * self.tok * hidden  # one bf16 activation (bytes)
        h = hidden
        # weights per layer: qkv, out, up, down, two norms
        shapes = [3 * h * h, h * h, 4 * h * h, 4 * h * h, h, h]
        self.params = [vocab * h] + [n for _ in range(layers) for n in shapes] + [vocab * h]
        self.master: list[int] = []
        self.work: list[int] = []
        self.moments: list[tuple[int, int]] = []
        self.gacc: list[int] = []

    def tick(self, flops: float) -> None:
        self.tb.next_tick(max(1000.0, flops / (self.tflops * 1e3)))  # ns; a launch costs >= 1 us

    def acc(self, block: int, mode=_R) -> None:
        if self.accesses:
            self.tb.access(block, mode)

    @staticmethod
    def lw(layer: int, j: int) -> int:  # index of weight j of a layer in `params`
        return 1 + 6 * layer + j

    # -- once -----------------------------------------------------------------------------
    def weights(self) -> None:
        """Each parameter's fp32 master, bf16 working copy, AdamW moments and fp32
        gradient accumulator, one parameter per tick (as a model's init creates them)."""
        tb, acc = self.tb, self.acc
        for n in self.params:
            self.master.append(tb.alloc(4 * n))
            self.work.append(tb.alloc(2 * n))
            self.moments.append((tb.alloc(4 * n), tb.alloc(4 * n)))
            self.gacc.append(tb.alloc(4 * n))
            acc(self.master[-1], _W)
            acc(self.work[-1], _W)
            self.tick(4 * n)

    # -- per micro-batch --------------------------------------------------------------------
    def micro_batch(self) -> None:
        """Embedding, the layers' forward, logits and loss; then the backward pass."""
        tb, acc, tok, h = self.tb, self.acc, self.tok, self.h
        ids = tb.alloc(8 * tok)
        x = tb.alloc(self.act)
        acc(ids)
        acc(self.work[0])
        acc(x, _W)
        self.tick(2 * tok * h)
        saved: list[list[int]] = []
        for layer in range(self.layers):
            out, kept = self.forward_layer(layer, x)
            saved.append(kept)
            x = out
        logits, loss = self.head_forward(x)
        g = self.head_backward(x, logits, loss)
        for layer in reversed(range(self.layers)):
            g = self.backward_layer(layer, g, saved[layer])
        self.embedding_backward(g, ids)

    def forward_layer(self, layer: int, x: int) -> tuple[int, list[int]]:
        """One transformer layer on input ``x``: (its output, the activations it saves for
        the backward pass). The attention workspace dies in its tick, the bias-add
        temporary a tick later."""
        tb, acc, tick, work, lw = self.tb, self.acc, self.tick, self.work, self.lw
        act, tok, h, s = self.act, self.tok, self.h, self.s
        ln1 = tb.alloc(act)
        acc(x)
        acc(ln1, _W)
        tick(8 * tok * h)
        qkv = tb.alloc(3 * act)
        acc(ln1)
        acc(work[lw(layer, 0)])
        acc(qkv, _W)
        tick(2 * tok * 3 * h * h)
        probs = tb.alloc(2 * self.b * self.heads * s * s)
        ws = tb.alloc(1 << 22)  # attention workspace, freed in the same tick
        attn = tb.alloc(act)
        acc(qkv)
        acc(ws, _RW)
        acc(probs, _W)
        acc(attn, _W)
        tb.free(ws)
        tick(4 * tok * s * h)
        proj = tb.alloc(act)
        acc(attn)
        acc(work[lw(layer, 1)])
        acc(proj, _W)
        tick(2 * tok * h * h)
        res1 = tb.alloc(act)
        ln2 = tb.alloc(act)
        acc(x)
        acc(proj)
        acc(res1, _W)
        acc(ln2, _W)
        tick(12 * tok * h)
        up = tb.alloc(4 * act)
        acc(ln2)
        acc(work[lw(layer, 2)])
        acc(up, _W)
        tick(2 * tok * 4 * h * h)
        gelu = tb.alloc(4 * act)
        acc(up)
        acc(gelu, _W)
        tick(16 * tok * h)
        down = tb.alloc(act)
        tmp = tb.alloc(act)  # bias-add temporary, freed a tick later
        acc(gelu)
        acc(work[lw(layer, 3)])
        acc(down, _W)
        acc(tmp, _W)
        tick(2 * tok * 4 * h * h)
        out = tb.alloc(act)
        acc(res1)
        acc(tmp)
        acc(out, _W)
        tb.free(tmp)
        tick(4 * tok * h)
        return out, [x, ln1, qkv, probs, attn, proj, res1, ln2, up, gelu, down]

    def head_forward(self, x: int) -> tuple[int, int]:
        """The LM head's logits and the loss: (logits, loss)."""
        tb, acc, tok = self.tb, self.acc, self.tok
        logits = tb.alloc(2 * tok * self.vocab)
        acc(x)
        acc(self.work[-1])
        acc(logits, _W)
        self.tick(2 * tok * self.h * self.vocab)
        loss = tb.alloc(512)
        acc(logits)
        acc(loss, _W)
        self.tick(4 * tok * self.vocab)
        return logits, loss

    def head_backward(self, x: int, logits: int, loss: int) -> int:
        """The loss's and LM head's backward (its weight gradient accumulated in fp32);
        returns the gradient flowing into the last layer."""
        tb, acc, tok = self.tb, self.acc, self.tok
        glogits = tb.alloc(2 * tok * self.vocab)
        acc(loss)
        acc(glogits, _W)
        tb.free(loss)
        self.tick(4 * tok * self.vocab)
        g = tb.alloc(self.act)
        gw = tb.alloc(2 * self.params[-1])
        acc(glogits)
        acc(logits)
        acc(x)
        acc(self.work[-1])
        acc(g, _W)
        acc(gw, _W)
        tb.free(logits)
        tb.free(glogits)
        tb.free(x)
        self.tick(4 * tok * self.h * self.vocab)
        self.accumulate(gw, len(self.params) - 1)
        return g

    def accumulate(self, gw: int, i: int) -> None:
        """Add the bf16 weight gradient ``gw`` into parameter ``i``'s fp32 accumulator and
        free it (one tick)."""
        self.acc(gw)
        self.acc(self.gacc[i], _RW)
        self.tb.free(gw)
        self.tick(self.params[i])

    def backward_layer(self, layer: int, g: int, saved: list[int]) -> int:
        """One layer's backward from gradient ``g``: MLP (down, GELU, up), norm 2 and the
        residual, attention output projection, attention core, QKV, norm 1; the layer's
        saved activations are freed as they are used last. Returns the input gradient."""
        tb, acc, tick, work, lw = self.tb, self.acc, self.tick, self.work, self.lw
        act, tok, h, s, params = self.act, self.tok, self.h, self.s, self.params
        x_in, ln1, qkv, probs, attn, proj, res1, ln2, up, gelu, down = saved
        # MLP backward: down, gelu, up (a weight gradient each, accumulated in fp32)
        for j, (inp, n_in) in ((3, (gelu, 4)), (2, (ln2, 1))):
            gi = tb.alloc(n_in * act if j == 3 else act)
            gwj = tb.alloc(2 * params[lw(layer, j)])
            acc(g)
            acc(inp)
            acc(work[lw(layer, j)])
            acc(gi, _W)
            acc(gwj, _W)
            tb.free(g)
            tick(4 * tok * params[lw(layer, j)])
            self.accumulate(gwj, lw(layer, j))
            if j == 3:
                gg = tb.alloc(4 * act)
                acc(gi)
                acc(up)
                acc(gg, _W)
                tb.free(gi)
                tb.free(gelu)
                tb.free(down)
                tick(16 * tok * h)
                g = gg
            else:
                g = gi
                tb.free(up)
        # norm 2 + residual
        gn = tb.alloc(act)
        acc(g)
        acc(res1)
        acc(gn, _W)
        tb.free(g)
        tb.free(ln2)
        tick(12 * tok * h)
        # attention output projection, attention core, QKV
        gp = tb.alloc(act)
        gwo = tb.alloc(2 * params[lw(layer, 1)])
        acc(gn)
        acc(attn)
        acc(gp, _W)
        acc(gwo, _W)
        tick(4 * tok * h * h)
        acc(gwo)
        acc(self.gacc[lw(layer, 1)], _RW)
        tb.free(gwo)
        tb.free(proj)
        tick(params[lw(layer, 1)])
        gqkv = tb.alloc(3 * act)
        ws = tb.alloc(1 << 22)
        acc(gp)
        acc(probs)
        acc(qkv)
        acc(ws, _RW)
        acc(gqkv, _W)
        tb.free(ws)
        tb.free(gp)
        tb.free(probs)
        tb.free(attn)
        tick(8 * tok * s * h)
        gl = tb.alloc(act)
        gwq = tb.alloc(2 * params[lw(layer, 0)])
        acc(gqkv)
        acc(ln1)
        acc(gl, _W)
        acc(gwq, _W)
        tb.free(gqkv)
        tb.free(qkv)
        tick(4 * tok * 3 * h * h)
        self.accumulate(gwq, lw(layer, 0))
        gx = tb.alloc(act)
        acc(gl)
        acc(gn)
        acc(x_in)
        acc(gx, _W)
        tb.free(gl)
        tb.free(gn)
        tb.free(ln1)
        tb.free(res1)
        tb.free(x_in)
        tick(12 * tok * h)
        return gx

    def embedding_backward(self, g: int, ids: int) -> None:
        """The embedding's weight gradient (accumulated in fp32); the micro-batch's last
        gradient and its token ids are freed."""
        tb, acc = self.tb, self.acc
        gwe = tb.alloc(2 * self.params[0])
        acc(g)
        acc(ids)
        acc(gwe, _W)
        tb.free(g)
        tb.free(ids)
        self.tick(2 * self.tok * self.h)
        self.accumulate(gwe, 0)

    # -- per iteration ------------------------------------------------------------------------
    def adamw(self) -> None:
        """AdamW: fp32 update of the master weights, then the bf16 copy; then ``zero_grad``
        into the accumulators (kept allocated)."""
        acc = self.acc
        for i, n in enumerate(self.params):
            acc(self.gacc[i])
            acc(self.moments[i][0], _RW)
            acc(self.moments[i][1], _RW)
            acc(self.master[i], _RW)
            acc(self.work[i], _W)
            self.tick(12 * n)
        for i in range(len(self.params)):
            acc(self.gacc[i], _W)  # zero_grad into the accumulators (kept allocated)
        self.tick(len(self.params))


def llm_trace_for_events(n_events: int, *, iters: int = 3, **kw) -> Trace:
    """An ``llm_trace`` with about ``n_events`` allocator events in ``iters`` iterations:
    micro-batches grow with the size (1 to 16) and layers make up the rest."""
    per_layer = 52  # allocator events per layer per micro-batch (counted in llm_trace)
    per_iter = max(1, n_events // iters)
    mb = int(min(16, max(1, round((per_iter / (per_layer * 8)) ** 0.5))))
    layers = max(1, round(n_events / (per_layer * iters * mb + 24)))  # + 24: the weights
    return llm_trace(layers=layers, micro_batches=mb, iters=iters, **kw)
