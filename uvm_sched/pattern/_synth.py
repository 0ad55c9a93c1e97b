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
    # layer l maps width_l -> width_{l+1}; widths vary so layers are distinguishable.
    widths = [width * (1 + (l % 3)) for l in range(layers + 1)]

    def tick():
        tb.next_tick(tick_ns)

    def acc(block, mode=_R):
        if accesses:
            tb.access(block, mode)

    weights = []
    wsize = [4 * widths[l] * widths[l + 1] for l in range(layers)]
    for l in range(layers):
        w = tb.alloc(wsize[l])
        acc(w, _W)
        weights.append(w)
        tick()
    adam: list[tuple[int, int]] = []
    if not warmup_adam:
        for l in range(layers):
            m, v = tb.alloc(wsize[l]), tb.alloc(wsize[l])
            acc(m, _W)
            acc(v, _W)
            adam.append((m, v))
        tick()
    grads: list[int] = []
    for it in range(iters):
        b = last_batch if (last_batch is not None and it == iters - 1) else batch
        if markers and (marker_iters is None or it in marker_iters):
            tb.mark()
        # zero_grad(set_to_none=True)
        for g in grads:
            tb.free(g)
        grads = []
        tick()
        x = tb.alloc(4 * b * widths[0])
        acc(x, _W)
        tick()
        acts = [x]
        for l in range(layers):
            out = tb.alloc(4 * b * widths[l + 1])
            ws = tb.alloc(1 << 20)
            tmp = tb.alloc(4 * b * widths[l + 1])
            acc(acts[-1])
            acc(weights[l])
            acc(ws, _RW)
            acc(tmp, _W)
            acc(out, _W)
            tb.free(ws)
            tick()
            acc(tmp)
            tb.free(tmp)
            tick()
            acts.append(out)
        loss = tb.alloc(512)
        acc(acts[-1])
        acc(loss, _W)
        tick()
        gout = tb.alloc(4 * b * widths[layers])
        acc(loss)
        acc(gout, _W)
        if not leak:
            tb.free(loss)
        tick()
        for l in reversed(range(layers)):
            gin = tb.alloc(4 * b * widths[l])
            gw = tb.alloc(wsize[l])
            acc(gout)
            acc(acts[l])
            acc(weights[l])
            acc(gin, _W)
            acc(gw, _W)
            tb.free(gout)
            tb.free(acts[l + 1])
            grads.append(gw)
            gout = gin
            tick()
        tb.free(gout)
        tb.free(acts[0])
        tick()
        for l in range(layers):
            if warmup_adam and len(adam) <= l:
                m, v = tb.alloc(wsize[l]), tb.alloc(wsize[l])
                adam.append((m, v))
            m, v = adam[l]
            acc(weights[l], _RW)
            acc(grads[layers - 1 - l])
            acc(m, _RW)
            acc(v, _RW)
            tick()
        if eval_after and it in eval_after:
            h = tb.alloc(4 * batch * widths[0])
            acc(h, _W)
            tick()
            for l in range(layers):
                out = tb.alloc(4 * batch * widths[l + 1])
                acc(h)
                acc(weights[l])
                acc(out, _W)
                tb.free(h)
                h = out
                tick()
            tb.free(h)
            tick()
    return tb.build()


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
    d = width
    log = phases if phases is not None else []

    def alloc(size, phase):
        log.append(phase)
        return tb.alloc(int(size))

    def free(b, phase):
        log.append(phase)
        tb.free(b)

    def tick():
        tb.next_tick(tick_ns)

    def scale(l):
        return 1 if identical_layers else 1 + l

    p_sizes = []
    for l in range(layers):
        k = scale(l)
        p_sizes += [4 * d * 3 * d * k, 4 * d * d * k, 4 * d * 4 * d * k, 4 * 4 * d * d * k,
                    4 * d, 4 * d]
    params = [alloc(s, "setup") for s in p_sizes]
    tick()
    grads = [alloc(s, "setup") for s in p_sizes]
    tick()
    state = []
    if state_in_setup:
        state = [(alloc(s, "setup"), alloc(s, "setup")) for s in p_sizes]
        tick()
    for step in range(steps):
        seq = seqs[step % len(seqs)]
        S = 4 * batch * seq * d
        if markers:
            tb.mark()
        if autotune and step == 0:
            for _ in range(2):
                scratch = alloc(64 * S, "autotune")
                h = alloc(S, "autotune")
                for l in range(layers):
                    for c in range(autotune):
                        free(alloc(S * scale(l) + 512 * c, "autotune"), "autotune")
                    out = alloc(S * scale(l), "autotune")
                    tmp = alloc(2 * S * scale(l), "autotune")
                    free(tmp, "autotune")
                    free(h, "autotune")
                    h = out
                    tick()
                free(h, "autotune")
                free(scratch, "autotune")
                tick()
        x = alloc(S, "forward")
        tick()
        acts = []
        for l in range(layers):
            k = scale(l)
            a = [alloc(3 * S * k, "forward"), alloc(4 * batch * seq * seq * k, "forward"),
                 alloc(S * k, "forward"), alloc(4 * S * k, "forward"), alloc(S * k, "forward")]
            tmp = alloc(4 * S * k, "forward")
            free(tmp, "forward")
            acts.append(a)
            tick()
        loss = alloc(512, "forward")
        tick()
        if not backward:
            continue
        gout = alloc(S, "backward")
        free(loss, "backward")
        tick()
        for l in reversed(range(layers)):
            k = scale(l)
            gin = alloc(S * k, "backward")
            tmp = alloc(4 * S * k, "backward")
            free(tmp, "backward")
            if free_activations == "in_backward":
                for a in acts[l]:
                    free(a, "backward")
            free(gout, "backward")
            gout = gin
            tick()
        free(gout, "backward")
        free(x, "backward")
        if free_activations != "in_backward":
            for a in acts:
                for b in a:
                    free(b, "backward")
        tick()
        if not state:
            state = [(alloc(s, "optimizer"), alloc(s, "optimizer")) for s in p_sizes]
        if optimizer == "per_param":
            for s in p_sizes:
                ts = [alloc(s, "optimizer") for _ in range(opt_temps)]
                for t in ts:
                    free(t, "optimizer")
                tick()
        else:
            total = sum(p_sizes)
            t1 = alloc(total, "optimizer")
            t2 = alloc(total, "optimizer")
            free(t1, "optimizer")
            free(t2, "optimizer")
            tick()
    del params, grads
    return tb.build()
