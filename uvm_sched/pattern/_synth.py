"""A synthetic training trace with known structure, for tests and benchmarks.

It follows what a framework's allocator sees for an MLP-like network trained with Adam:
weights allocated once; per iteration ``zero_grad`` (frees last iteration's gradients),
the input batch, per layer a forward op (output activation kept for backward, a cuDNN-like
workspace freed in the same tick, a temporary freed one tick later), a loss, per layer a
backward op (input-gradient, weight-gradient; the activation is freed), per layer an Adam
update. Ground-truth ACCESS rows, when asked for, name what each op reads and writes.
Everything is a parameter so tests can inject noise (a warm-up iteration that allocates
the Adam state, an eval pass, a different last batch, markers placed anywhere).
"""
from __future__ import annotations

from ..trace._model import AccessMode, Trace, TraceBuilder

__all__ = ["training_trace", "step_trace"]

_R, _W, _RW = AccessMode.READ, AccessMode.WRITE, AccessMode.READ_WRITE


def training_trace(
    *,
    layers: int = 4,
    iters: int = 4,
    batch: int = 8,
    width: int = 1024,
    accesses: bool = True,
    markers: bool = False,
    marker_iters: "set[int] | None" = None,
    warmup_adam: bool = False,
    eval_after: "set[int] | None" = None,
    last_batch: int | None = None,
    leak: bool = False,
    tick_ns: float = 1000.0,
    name: str = "synthetic",
) -> Trace:
    """Build the trace. Sizes in bytes (fp32). ``marker_iters``: iterations that get a MARK
    (default: all when ``markers``). ``eval_after``: iterations followed by a forward-only
    eval pass. ``last_batch``: batch of the last iteration. ``leak``: the loss is never freed
    (a training loop that keeps every loss). ``tick_ns``: device ns per tick.
    """
    m = _Mlp(TraceBuilder(source="synthetic", name=name, batch=batch), layers, width,
             accesses, tick_ns)
    m.setup(warmup_adam)
    for it in range(iters):
        b = last_batch if (last_batch is not None and it == iters - 1) else batch
        if markers and (marker_iters is None or it in marker_iters):
            m.tb.mark()
        m.zero_grad()
        acts = m.forward(b)
        m.backward(acts, b, leak)
        m.adam_step(warmup_adam)
        if eval_after and it in eval_after:
            m.evaluate(batch)
    return m.tb.build()


class _Mlp:
    """``training_trace``'s network, one method per phase of a step (in trace order)."""

    def __init__(self, tb: TraceBuilder, layers: int, width: int, accesses: bool,
                 tick_ns: float) -> None:
        self.tb, self.layers, self.accesses, self.tick_ns = tb, layers, accesses, tick_ns
        # layer l maps width_l -> width_{l+1}; widths vary so layers are distinguishable.
        self.widths = [width * (1 + (l % 3)) for l in range(layers + 1)]
        self.wsize = [4 * self.widths[l] * self.widths[l + 1] for l in range(layers)]
        self.weights: list[int] = []
        self.adam: list[tuple[int, int]] = []
        self.grads: list[int] = []

    def tick(self) -> None:
        self.tb.next_tick(self.tick_ns)

    def acc(self, block: int, mode=_R) -> None:
        if self.accesses:
            self.tb.access(block, mode)

    def setup(self, warmup_adam: bool) -> None:
        tb, acc = self.tb, self.acc
        for l in range(self.layers):
            w = tb.alloc(self.wsize[l])
            acc(w, _W)
            self.weights.append(w)
            self.tick()
        if not warmup_adam:
            for l in range(self.layers):
                m, v = tb.alloc(self.wsize[l]), tb.alloc(self.wsize[l])
                acc(m, _W)
                acc(v, _W)
                self.adam.append((m, v))
            self.tick()

    def zero_grad(self) -> None:  # set_to_none=True
        for g in self.grads:
            self.tb.free(g)
        self.grads = []
        self.tick()

    def forward(self, b: int) -> list[int]:
        tb, acc, widths = self.tb, self.acc, self.widths
        x = tb.alloc(4 * b * widths[0])
        acc(x, _W)
        self.tick()
        acts = [x]
        for l in range(self.layers):
            out = tb.alloc(4 * b * widths[l + 1])
            ws = tb.alloc(1 << 20)
            tmp = tb.alloc(4 * b * widths[l + 1])
            acc(acts[-1])
            acc(self.weights[l])
            acc(ws, _RW)
            acc(tmp, _W)
            acc(out, _W)
            tb.free(ws)
            self.tick()
            acc(tmp)
            tb.free(tmp)
            self.tick()
            acts.append(out)
        return acts

    def backward(self, acts: list[int], b: int, leak: bool) -> None:
        tb, acc, layers = self.tb, self.acc, self.layers
        loss = tb.alloc(512)
        acc(acts[-1])
        acc(loss, _W)
        self.tick()
        gout = tb.alloc(4 * b * self.widths[layers])
        acc(loss)
        acc(gout, _W)
        if not leak:
            tb.free(loss)
        self.tick()
        for l in reversed(range(layers)):
            gin = tb.alloc(4 * b * self.widths[l])
            gw = tb.alloc(self.wsize[l])
            acc(gout)
            acc(acts[l])
            acc(self.weights[l])
            acc(gin, _W)
            acc(gw, _W)
            tb.free(gout)
            tb.free(acts[l + 1])
            self.grads.append(gw)
            gout = gin
            self.tick()
        tb.free(gout)
        tb.free(acts[0])
        self.tick()

    def adam_step(self, warmup_adam: bool) -> None:
        acc, layers = self.acc, self.layers
        for l in range(layers):
            if warmup_adam and len(self.adam) <= l:
                m, v = self.tb.alloc(self.wsize[l]), self.tb.alloc(self.wsize[l])
                self.adam.append((m, v))
            m, v = self.adam[l]
            acc(self.weights[l], _RW)
            acc(self.grads[layers - 1 - l])
            acc(m, _RW)
            acc(v, _RW)
            self.tick()

    def evaluate(self, batch: int) -> None:  # a forward-only pass
        tb, acc, widths = self.tb, self.acc, self.widths
        h = tb.alloc(4 * batch * widths[0])
        acc(h, _W)
        self.tick()
        for l in range(self.layers):
            out = tb.alloc(4 * batch * widths[l + 1])
            acc(h)
            acc(self.weights[l])
            acc(out, _W)
            tb.free(h)
            h = out
            self.tick()
        tb.free(h)
        self.tick()


def step_trace(
    *,
    steps: int = 1,
    layers: int = 12,
    width: int = 64,
    seqs: tuple[int, ...] = (32,),
    batch: int = 4,
    identical_layers: bool = True,
    optimizer: str = "per_param",
    opt_temps: int = 2,
    state_in_setup: bool = True,
    free_activations: str = "in_backward",
    backward: bool = True,
    autotune: int = 0,
    markers: bool = False,
    phases: "list[str] | None" = None,
    tick_ns: float = 1000.0,
    name: str = "steps",
) -> Trace:
    """A transformer-like training run with the shapes that fool a period detector.

    Set-up allocates per layer four weights and two norms (identical across layers when
    ``identical_layers``) and their gradients (kept across steps: ``zero_grad`` without
    ``set_to_none``), plus Adam's state when ``state_in_setup`` (else the first step does).
    Each step: an input batch of ``seqs[step % len(seqs)]`` tokens, a forward pass keeping
    five activations per layer (plus a temporary), a loss, then when ``backward`` the
    backward pass per layer (a gradient input and a temporary; the layer's activations freed
    there when ``free_activations == "in_backward"``, else all after the pass), then Adam
    over every parameter: ``"per_param"`` (``opt_temps`` temporaries per parameter: the loop
    of identical layers repeats, balanced) or ``"foreach"`` (two temporaries per step).
    ``autotune``: before the first forward, an autotuner benchmarks the forward graph by
    running it twice, trying ``autotune`` configurations (an output each) per layer and
    freeing everything (a balanced string repeated exactly twice).
    ``phases``: when a list, one entry is appended per allocator event: "setup", "forward",
    "backward", "optimizer" or "autotune" (for tests that attach Python frames).
    """
    st = _Steps(TraceBuilder(source="synthetic", name=name),
                phases if phases is not None else [], tick_ns, identical_layers, layers, width)
    p_sizes = st.parameters(state_in_setup)
    for step in range(steps):
        seq = seqs[step % len(seqs)]
        S = 4 * batch * seq * width
        if markers:
            st.tb.mark()
        if autotune and step == 0:
            st.autotune(S, autotune)
        x = st.alloc(S, "forward")
        st.tick()
        acts = st.forward(S, 4 * batch * seq * seq)
        loss = st.alloc(512, "forward")
        st.tick()
        if not backward:
            continue
        st.backward(S, x, loss, acts, free_activations == "in_backward")
        if not st.state:
            st.state = [(st.alloc(s, "optimizer"), st.alloc(s, "optimizer")) for s in p_sizes]
        st.optimizer(p_sizes, optimizer, opt_temps)
    return st.tb.build()


class _Steps:
    """``step_trace``'s model, one method per phase (in trace order); every allocator
    event is logged with its phase."""

    def __init__(self, tb: TraceBuilder, log: list[str], tick_ns: float,
                 identical_layers: bool, layers: int, d: int) -> None:
        self.tb, self.log, self.tick_ns = tb, log, tick_ns
        self.identical_layers, self.layers, self.d = identical_layers, layers, d
        self.state: list[tuple[int, int]] = []

    def alloc(self, size, phase: str) -> int:
        self.log.append(phase)
        return self.tb.alloc(int(size))

    def free(self, b: int, phase: str) -> None:
        self.log.append(phase)
        self.tb.free(b)

    def tick(self) -> None:
        self.tb.next_tick(self.tick_ns)

    def scale(self, l: int) -> int:
        return 1 if self.identical_layers else 1 + l

    def parameters(self, state_in_setup: bool) -> list[int]:
        """Weights and gradients (and Adam's state when ``state_in_setup``); their sizes."""
        d = self.d
        p_sizes = []
        for l in range(self.layers):
            k = self.scale(l)
            p_sizes += [4 * d * 3 * d * k, 4 * d * d * k, 4 * d * 4 * d * k, 4 * 4 * d * d * k,
                        4 * d, 4 * d]
        for _ in range(2):  # the parameters, then their gradients (kept across steps)
            for s in p_sizes:
                self.alloc(s, "setup")
            self.tick()
        if state_in_setup:
            self.state = [(self.alloc(s, "setup"), self.alloc(s, "setup")) for s in p_sizes]
            self.tick()
        return p_sizes

    def autotune(self, S: int, configs: int) -> None:
        for _ in range(2):
            scratch = self.alloc(64 * S, "autotune")
            h = self.alloc(S, "autotune")
            for l in range(self.layers):
                for c in range(configs):
                    self.free(self.alloc(S * self.scale(l) + 512 * c, "autotune"), "autotune")
                out = self.alloc(S * self.scale(l), "autotune")
                tmp = self.alloc(2 * S * self.scale(l), "autotune")
                self.free(tmp, "autotune")
                self.free(h, "autotune")
                h = out
                self.tick()
            self.free(h, "autotune")
            self.free(scratch, "autotune")
            self.tick()

    def forward(self, S: int, scores: int) -> list[list[int]]:
        acts = []
        for l in range(self.layers):
            k = self.scale(l)
            a = [self.alloc(3 * S * k, "forward"), self.alloc(scores * k, "forward"),
                 self.alloc(S * k, "forward"), self.alloc(4 * S * k, "forward"),
                 self.alloc(S * k, "forward")]
            tmp = self.alloc(4 * S * k, "forward")
            self.free(tmp, "forward")
            acts.append(a)
            self.tick()
        return acts

    def backward(self, S: int, x: int, loss: int, acts: list[list[int]],
                 in_backward: bool) -> None:
        gout = self.alloc(S, "backward")
        self.free(loss, "backward")
        self.tick()
        for l in reversed(range(self.layers)):
            k = self.scale(l)
            gin = self.alloc(S * k, "backward")
            tmp = self.alloc(4 * S * k, "backward")
            self.free(tmp, "backward")
            if in_backward:
                for a in acts[l]:
                    self.free(a, "backward")
            self.free(gout, "backward")
            gout = gin
            self.tick()
        self.free(gout, "backward")
        self.free(x, "backward")
        if not in_backward:
            for layer_acts in acts:
                for b in layer_acts:
                    self.free(b, "backward")
        self.tick()

    def optimizer(self, p_sizes: list[int], optimizer: str, opt_temps: int) -> None:
        if optimizer == "per_param":
            for s in p_sizes:
                ts = [self.alloc(s, "optimizer") for _ in range(opt_temps)]
                for t in ts:
                    self.free(t, "optimizer")
                self.tick()
        else:
            total = sum(p_sizes)
            t1 = self.alloc(total, "optimizer")
            t2 = self.alloc(total, "optimizer")
            self.free(t1, "optimizer")
            self.free(t2, "optimizer")
            self.tick()
