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
    tb = TraceBuilder(source="synthetic", name=name, batch=batch)
    mlp = _Mlp(tb, layers=layers, width=width, accesses=accesses, tick_ns=tick_ns)
    mlp.weights()
    if not warmup_adam:
        mlp.adam_state()
    for it in range(iters):
        b = last_batch if (last_batch is not None and it == iters - 1) else batch
        if markers and (marker_iters is None or it in marker_iters):
            tb.mark()
        mlp.zero_grad()
        acts = mlp.forward(b)
        gout = mlp.loss(acts, b, keep=leak)
        mlp.backward(acts, gout, b)
        mlp.adam()
        if eval_after and it in eval_after:
            mlp.eval_pass(batch)
    return tb.build()


class _Mlp:
    """``training_trace``'s steps (module docstring), one method each, over one
    ``TraceBuilder``: the weights, Adam's state and the gradients of the last backward
    pass are kept here; a pass's activations are handed from step to step."""

    def __init__(self, tb: TraceBuilder, *, layers: int, width: int, accesses: bool,
                 tick_ns: float) -> None:
        self.tb, self.layers, self.accesses, self.tick_ns = tb, layers, accesses, tick_ns
        # layer l maps width_l -> width_{l+1}; widths vary so layers are distinguishable.
        self.widths = [width * (1 + (l % 3)) for l in range(layers + 1)]
        self.wsize = [4 * self.widths[l] * self.widths[l + 1] for l in range(layers)]
        self.weight: list[int] = []
        self.adam_mv: list[tuple[int, int]] = []
        self.grads: list[int] = []

    def tick(self) -> None:
        self.tb.next_tick(self.tick_ns)

    def acc(self, block: int, mode=_R) -> None:
        if self.accesses:
            self.tb.access(block, mode)

    def weights(self) -> None:
        """The weights, allocated once, one layer per tick."""
        for l in range(self.layers):
            w = self.tb.alloc(self.wsize[l])
            self.acc(w, _W)
            self.weight.append(w)
            self.tick()

    def adam_state(self) -> None:
        """Adam's moments for every layer, in one tick (before the first iteration)."""
        for l in range(self.layers):
            m, v = self.tb.alloc(self.wsize[l]), self.tb.alloc(self.wsize[l])
            self.acc(m, _W)
            self.acc(v, _W)
            self.adam_mv.append((m, v))
        self.tick()

    def zero_grad(self) -> None:
        """``zero_grad(set_to_none=True)``: last iteration's gradients are freed."""
        for g in self.grads:
            self.tb.free(g)
        self.grads = []
        self.tick()

    def forward(self, b: int) -> list[int]:
        """The input batch (``b`` rows), then per layer a forward op: its output is kept
        for backward, a workspace dies in the op's tick, a temporary one tick later.
        Returns the activations, the input first."""
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
            acc(self.weight[l])
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

    def loss(self, acts: list[int], b: int, *, keep: bool) -> int:
        """The loss, then the gradient of the output (returned); the loss is freed unless
        ``keep`` (a loop that keeps every loss)."""
        tb, acc = self.tb, self.acc
        loss = tb.alloc(512)
        acc(acts[-1])
        acc(loss, _W)
        self.tick()
        gout = tb.alloc(4 * b * self.widths[self.layers])
        acc(loss)
        acc(gout, _W)
        if not keep:
            tb.free(loss)
        self.tick()
        return gout

    def backward(self, acts: list[int], gout: int, b: int) -> None:
        """Per layer (reversed) a backward op: the input gradient and the weight gradient
        (kept until the next ``zero_grad``); the layer's output activation is freed."""
        tb, acc = self.tb, self.acc
        for l in reversed(range(self.layers)):
            gin = tb.alloc(4 * b * self.widths[l])
            gw = tb.alloc(self.wsize[l])
            acc(gout)
            acc(acts[l])
            acc(self.weight[l])
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

    def adam(self) -> None:
        """Per layer an Adam update (one tick each); without state from the set-up
        (``warmup_adam``), the first update allocates it."""
        for l in range(self.layers):
            if len(self.adam_mv) <= l:
                self.adam_mv.append((self.tb.alloc(self.wsize[l]), self.tb.alloc(self.wsize[l])))
            m, v = self.adam_mv[l]
            self.acc(self.weight[l], _RW)
            self.acc(self.grads[self.layers - 1 - l])
            self.acc(m, _RW)
            self.acc(v, _RW)
            self.tick()

    def eval_pass(self, batch: int) -> None:
        """A forward-only pass: each layer's input is freed once its output exists."""
        tb, acc = self.tb, self.acc
        h = tb.alloc(4 * batch * self.widths[0])
        acc(h, _W)
        self.tick()
        for l in range(self.layers):
            out = tb.alloc(4 * batch * self.widths[l + 1])
            acc(h)
            acc(self.weight[l])
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
    tb = TraceBuilder(source="synthetic", name=name)
    run = _Steps(tb, layers=layers, width=width, identical_layers=identical_layers,
                 phases=phases if phases is not None else [], tick_ns=tick_ns)
    run.setup(state=state_in_setup)
    for step in range(steps):
        seq = seqs[step % len(seqs)]
        S = 4 * batch * seq * width  # bytes of one fp32 activation of the step
        if markers:
            tb.mark()
        if autotune and step == 0:
            run.autotune(S, autotune)
        x, acts, loss = run.forward(S, batch, seq)
        if not backward:
            continue
        run.backward(S, x, acts, loss, in_backward=free_activations == "in_backward")
        run.optimizer(optimizer, opt_temps)
    return tb.build()


class _Steps:
    """``step_trace``'s phases, one method each, over one ``TraceBuilder``; every
    allocator event is logged with its phase in ``log``."""

    def __init__(self, tb: TraceBuilder, *, layers: int, width: int, identical_layers: bool,
                 phases: list[str], tick_ns: float) -> None:
        self.tb, self.layers, self.d = tb, layers, width
        self.identical_layers, self.log, self.tick_ns = identical_layers, phases, tick_ns
        self.p_sizes: list[int] = []
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

    def setup(self, *, state: bool) -> None:
        """Per layer four weights and two norms, then their gradients (each set in one
        tick), then Adam's state when ``state``. Parameters and gradients are never
        freed."""
        d = self.d
        for l in range(self.layers):
            k = self.scale(l)
            self.p_sizes += [4 * d * 3 * d * k, 4 * d * d * k, 4 * d * 4 * d * k,
                             4 * 4 * d * d * k, 4 * d, 4 * d]
        for s in self.p_sizes:  # the parameters
            self.alloc(s, "setup")
        self.tick()
        for s in self.p_sizes:  # their gradients
            self.alloc(s, "setup")
        self.tick()
        if state:
            self.state = [(self.alloc(s, "setup"), self.alloc(s, "setup")) for s in self.p_sizes]
            self.tick()

    def autotune(self, S: int, configs: int) -> None:
        """The forward graph run twice by an autotuner trying ``configs`` configurations
        (an output each) per layer; everything it allocates is freed."""
        alloc, free = self.alloc, self.free
        for _ in range(2):
            scratch = alloc(64 * S, "autotune")
            h = alloc(S, "autotune")
            for l in range(self.layers):
                for c in range(configs):
                    free(alloc(S * self.scale(l) + 512 * c, "autotune"), "autotune")
                out = alloc(S * self.scale(l), "autotune")
                tmp = alloc(2 * S * self.scale(l), "autotune")
                free(tmp, "autotune")
                free(h, "autotune")
                h = out
                self.tick()
            free(h, "autotune")
            free(scratch, "autotune")
            self.tick()

    def forward(self, S: int, batch: int, seq: int) -> tuple[int, list[list[int]], int]:
        """The input batch, per layer five kept activations (the attention scores are
        ``seq`` x ``seq`` per sequence) and a temporary, then the loss: (input, activations
        per layer, loss)."""
        alloc, free = self.alloc, self.free
        x = alloc(S, "forward")
        self.tick()
        acts = []
        for l in range(self.layers):
            k = self.scale(l)
            a = [alloc(3 * S * k, "forward"), alloc(4 * batch * seq * seq * k, "forward"),
                 alloc(S * k, "forward"), alloc(4 * S * k, "forward"), alloc(S * k, "forward")]
            tmp = alloc(4 * S * k, "forward")
            free(tmp, "forward")
            acts.append(a)
            self.tick()
        loss = alloc(512, "forward")
        self.tick()
        return x, acts, loss

    def backward(self, S: int, x: int, acts: list[list[int]], loss: int, *,
                 in_backward: bool) -> None:
        """The output gradient (the loss is freed), per layer (reversed) an input gradient
        and a temporary; each layer's activations are freed in its backward op when
        ``in_backward``, else all after the pass."""
        alloc, free = self.alloc, self.free
        gout = alloc(S, "backward")
        free(loss, "backward")
        self.tick()
        for l in reversed(range(self.layers)):
            k = self.scale(l)
            gin = alloc(S * k, "backward")
            tmp = alloc(4 * S * k, "backward")
            free(tmp, "backward")
            if in_backward:
                for a in acts[l]:
                    free(a, "backward")
            free(gout, "backward")
            gout = gin
            self.tick()
        free(gout, "backward")
        free(x, "backward")
        if not in_backward:
            for layer_acts in acts:
                for b in layer_acts:
                    free(b, "backward")
        self.tick()

    def optimizer(self, kind: str, temps: int) -> None:
        """Adam over every parameter (its state allocated by the first step when the set-up
        did not): ``"per_param"``, ``temps`` temporaries per parameter, one tick each; else
        ``"foreach"``, two temporaries over all parameters in one tick."""
        alloc, free = self.alloc, self.free
        if not self.state:
            self.state = [(alloc(s, "optimizer"), alloc(s, "optimizer")) for s in self.p_sizes]
        if kind == "per_param":
            for s in self.p_sizes:
                ts = [alloc(s, "optimizer") for _ in range(temps)]
                for t in ts:
                    free(t, "optimizer")
                self.tick()
        else:
            total = sum(self.p_sizes)
            t1 = alloc(total, "optimizer")
            t2 = alloc(total, "optimizer")
            free(t1, "optimizer")
            free(t2, "optimizer")
            self.tick()
