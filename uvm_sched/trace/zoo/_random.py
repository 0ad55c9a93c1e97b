"""Random training workloads for property tests: the planner must hold on inputs nobody
fitted it to, so these families are drawn at random -- depth, width, batch, sequence length,
dtype -- and recorded through the public recorder (meta tensors, any size is free).

Families (``FAMILIES``), chosen to cover shapes the zoo's eleven models do not:

* ``lstm`` / ``gru``: a recurrent language model (embedding, stacked LSTM/GRU over the time
  steps, a large-vocabulary softmax): the output logits dwarf every other activation and
  the recurrent weights are read at every step.
* ``moe``: a transformer whose feed-forward layer is a mixture of experts with top-k routing
  (expert-choice dispatch with a static capacity, so shapes do not depend on data).
* ``encdec``: encoder/decoder attention (cross attention reads the encoder output in every
  decoder layer: a long-lived activation read far from where it was written).
* ``cnn_skip``: a CNN with long skip and concat chains (DenseNet-like: each layer reads all
  earlier outputs of its stage).
* ``unet``: an encoder/decoder CNN whose skips are read by the mirrored decoder stage.
* ``mlp``: plain stacked linear layers.
* ``finetune``: a wide decoder at batch 1 and a short sequence: the AdamW state dominates.

``random_model(seed)`` draws one (same seed, same model); ``record_random(seed)`` records
it; ``allocator_only(trace)`` keeps what a runtime's event ring or a torch memory snapshot
sees (allocations, frees and step markers) while the full trace keeps the ground-truth
accesses for the simulator to judge a plan made from the stripped one.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

__all__ = ["FAMILIES", "RandomModel", "random_model", "record_random", "allocator_only"]

FAMILIES = ("lstm", "gru", "moe", "encdec", "cnn_skip", "unet", "mlp", "finetune")


@dataclasses.dataclass(frozen=True)
class RandomModel:
    """One drawn workload: ``family``, the drawn ``params`` and the three callables
    ``uvm_sched.trace.record`` takes."""

    name: str
    family: str
    seed: int
    params: dict
    model_fn: Callable[[], Any]
    batch_fn: Callable[[], Any]
    loss_fn: Callable[..., Any]


def _pick(rng, xs):
    return xs[int(rng.integers(len(xs)))]


def random_model(seed: int, family: str | None = None) -> RandomModel:
    """Draw a workload from ``seed`` (an int; the same seed gives the same model), from
    ``family`` (one of ``FAMILIES``) or, by default, a family drawn by the seed too."""
    import torch

    rng = np.random.default_rng([int(seed), 12])
    fam = family if family is not None else _pick(rng, FAMILIES)
    if fam not in FAMILIES:
        raise ValueError(f"unknown family {fam!r}; known: {', '.join(FAMILIES)}")
    dtype = _pick(rng, ("float32", "bfloat16"))
    build = {"lstm": _recurrent, "gru": _recurrent, "moe": _moe, "encdec": _encdec,
             "cnn_skip": _cnn_skip, "unet": _unet, "mlp": _mlp, "finetune": _finetune}[fam]
    params, model_fn, batch_fn, loss_fn = build(rng, fam)
    params["dtype"] = dtype
    dt = getattr(torch, dtype)

    def typed_model():
        m = model_fn()
        return m.to(dt) if dt != torch.float32 else m

    def typed_batch():
        b = batch_fn()  # token ids (or a tuple of them) stay integers
        if isinstance(b, torch.Tensor) and b.is_floating_point() and dt != torch.float32:
            return b.to(dt)
        return b

    name = f"{fam}-s{int(seed)}"
    return RandomModel(name, fam, int(seed), params, typed_model, typed_batch, loss_fn)


def record_random(seed: int, family: str | None = None, *, iters: int = 3,
                  hw: Any = "h200-pcie5"):
    """Record ``iters`` AdamW steps of ``random_model(seed, family)`` as a Trace (its meta
    names the family, seed and drawn parameters)."""
    from .._recorder import record

    m = random_model(seed, family)
    meta = {"family": m.family, "seed": m.seed, "params": m.params}
    return record(m.model_fn, m.batch_fn, iters=iters, hw=hw, loss_fn=m.loss_fn,
                  name=m.name, meta=meta)


def allocator_only(trace):
    """``trace`` without its ACCESS rows: the allocations, frees and step markers a
    runtime's event ring (or, without the markers, a torch memory snapshot) records. Ticks
    and device times are kept, so a plan made from it names the same blocks at the same
    allocator events as the full trace, which the simulator then judges by its accesses."""
    from .._model import EventKind, Trace

    c = trace.columns
    keep = c["kind"] != EventKind.ACCESS
    meta = dict(trace.meta)
    meta["allocator_only"] = True
    return Trace({k: v[keep] for k, v in c.items()}, tick_ns=trace.tick_ns, meta=meta)


# -- families ------------------------------------------------------------------------------
def _lm_loss(vocab):
    import torch
    import torch.nn.functional as F

    def loss_fn(out, batch):
        y = torch.randint(vocab, out.shape[:-1], device=out.device)
        return F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))

    return loss_fn


def _class_loss(classes):
    import torch
    import torch.nn.functional as F

    def loss_fn(out, batch):
        y = torch.randint(classes, (out.shape[0], *out.shape[2:]), device=out.device)
        return F.cross_entropy(out.float(), y)

    return loss_fn


def _tokens(vocab, batch, seq):
    import torch

    return lambda: torch.randint(vocab, (batch, seq))


def _recurrent(rng, fam):
    from torch import nn

    p = {"layers": int(rng.integers(1, 4)), "hidden": int(_pick(rng, (256, 512, 1024, 1536))),
         "vocab": int(_pick(rng, (16384, 32768, 50257, 100000))),
         "batch": int(_pick(rng, (8, 16, 32, 64))), "seq": int(_pick(rng, (16, 35, 64, 128)))}
    cell = nn.LSTM if fam == "lstm" else nn.GRU

    class RNNLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(p["vocab"], p["hidden"])
            self.rnn = cell(p["hidden"], p["hidden"], p["layers"], batch_first=True)
            self.out = nn.Linear(p["hidden"], p["vocab"])

        def forward(self, ids):
            h, _ = self.rnn(self.emb(ids))
            return self.out(h)

    return p, RNNLM, _tokens(p["vocab"], p["batch"], p["seq"]), _lm_loss(p["vocab"])


class _Attn:
    """Attention blocks shared by the transformer families (the zoo's meta-aware kernel)."""

    @staticmethod
    def make(d, heads):
        from torch import nn

        from ._text import _attention

        class Attn(nn.Module):
            def __init__(self):
                super().__init__()
                self.q = nn.Linear(d, d)
                self.kv = nn.Linear(d, 2 * d)
                self.o = nn.Linear(d, d)

            def forward(self, x, mem=None, causal=False):
                b, n, _ = x.shape
                src = x if mem is None else mem
                m = src.shape[1]
                q = self.q(x).view(b, n, heads, d // heads).transpose(1, 2)
                k, v = self.kv(src).view(b, m, 2, heads, d // heads).unbind(2)
                a = _attention(q, k.transpose(1, 2), v.transpose(1, 2), causal)
                return self.o(a.transpose(1, 2).reshape(b, n, d))

        return Attn()


def _moe(rng, fam):
    import torch
    from torch import nn
    import torch.nn.functional as F

    p = {"layers": int(rng.integers(2, 6)), "d": int(_pick(rng, (256, 512, 768))),
         "experts": int(_pick(rng, (4, 8, 16))), "top_k": int(_pick(rng, (1, 2))),
         "vocab": int(_pick(rng, (8192, 32000))), "batch": int(_pick(rng, (2, 4, 8))),
         "seq": int(_pick(rng, (64, 128, 256)))}
    d, E, k = p["d"], p["experts"], p["top_k"]

    class MoE(nn.Module):
        def __init__(self):
            super().__init__()
            self.router = nn.Linear(d, E, bias=False)
            self.w1 = nn.ModuleList([nn.Linear(d, 4 * d) for _ in range(E)])
            self.w2 = nn.ModuleList([nn.Linear(4 * d, d) for _ in range(E)])

        def forward(self, x):
            b, n, _ = x.shape
            t = x.reshape(b * n, d)
            gate = F.softmax(self.router(t).float(), -1).to(t.dtype)
            # top-k per token, then each expert takes its `cap` highest-gated tokens
            # (expert-choice dispatch: static shapes, as capacity-based MoE layers have)
            topv, topi = gate.topk(k, -1)
            keep = torch.zeros_like(gate).scatter(-1, topi, topv)
            cap = max(1, (k * b * n) // E)
            out = torch.zeros_like(t)
            for e in range(E):
                w, idx = keep[:, e].topk(cap)
                y = self.w2[e](F.gelu(self.w1[e](t.index_select(0, idx))))
                out = out.index_add(0, idx, y * w.unsqueeze(1))
            return out.view(b, n, d)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(p["vocab"], d)
            self.attn = nn.ModuleList([_Attn.make(d, 8) for _ in range(p["layers"])])
            self.moe = nn.ModuleList([MoE() for _ in range(p["layers"])])
            self.ln = nn.ModuleList([nn.LayerNorm(d) for _ in range(2 * p["layers"])])
            self.head = nn.Linear(d, p["vocab"], bias=False)

        def forward(self, ids):
            x = self.emb(ids)
            for i, (a, m) in enumerate(zip(self.attn, self.moe)):
                x = x + a(self.ln[2 * i](x), causal=True)
                x = x + m(self.ln[2 * i + 1](x))
            return self.head(x)

    return p, Model, _tokens(p["vocab"], p["batch"], p["seq"]), _lm_loss(p["vocab"])


def _encdec(rng, fam):
    import torch
    from torch import nn
    import torch.nn.functional as F

    p = {"enc_layers": int(rng.integers(1, 5)), "dec_layers": int(rng.integers(1, 5)),
         "d": int(_pick(rng, (256, 512, 768, 1024))), "vocab": int(_pick(rng, (8192, 32000))),
         "batch": int(_pick(rng, (2, 4, 8, 16))), "seq": int(_pick(rng, (64, 128, 256)))}
    d = p["d"]

    class Layer(nn.Module):
        def __init__(self, cross):
            super().__init__()
            self.sa = _Attn.make(d, 8)
            self.ca = _Attn.make(d, 8) if cross else None
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.ln = nn.ModuleList([nn.LayerNorm(d) for _ in range(3)])

        def forward(self, x, mem=None):
            x = x + self.sa(self.ln[0](x), causal=mem is not None)
            if self.ca is not None:
                x = x + self.ca(self.ln[1](x), mem)
            return x + self.fc2(F.gelu(self.fc1(self.ln[2](x))))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(p["vocab"], d)
            self.enc = nn.ModuleList([Layer(False) for _ in range(p["enc_layers"])])
            self.dec = nn.ModuleList([Layer(True) for _ in range(p["dec_layers"])])
            self.head = nn.Linear(d, p["vocab"], bias=False)

        def forward(self, src, tgt):
            m = self.emb(src)
            for lyr in self.enc:
                m = lyr(m)
            x = self.emb(tgt)
            for lyr in self.dec:
                x = lyr(x, m)
            return self.head(x)

    def batch_fn():
        return (torch.randint(p["vocab"], (p["batch"], p["seq"])),
                torch.randint(p["vocab"], (p["batch"], p["seq"] // 2)))

    return p, Model, batch_fn, _lm_loss(p["vocab"])


def _conv_bn(cin, cout, k=3, stride=1):
    from torch import nn

    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU())


def _images(batch, side):
    import torch

    return lambda: torch.randn(batch, 3, side, side)


def _cnn_skip(rng, fam):
    import torch
    from torch import nn
    import torch.nn.functional as F

    p = {"stages": int(rng.integers(2, 5)), "layers_per_stage": int(rng.integers(3, 9)),
         "growth": int(_pick(rng, (16, 32, 48))), "width": int(_pick(rng, (32, 64, 96))),
         "batch": int(_pick(rng, (4, 8, 16, 32))), "image": int(_pick(rng, (64, 96, 128)))}

    class Dense(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = _conv_bn(3, p["width"], 3, 2)
            stages, trans = [], []
            c = p["width"]
            for s in range(p["stages"]):
                layers = nn.ModuleList()
                for i in range(p["layers_per_stage"]):
                    layers.append(_conv_bn(c + i * p["growth"], p["growth"]))
                stages.append(layers)
                c = c + p["layers_per_stage"] * p["growth"]
                trans.append(_conv_bn(c, c // 2, 1))
                c //= 2
            self.stages, self.trans = nn.ModuleList(stages), nn.ModuleList(trans)
            self.head = nn.Linear(c, 100)

        def forward(self, x):
            x = self.stem(x)
            for layers, tr in zip(self.stages, self.trans):
                feats = [x]
                for lyr in layers:  # every layer reads every earlier output of the stage
                    feats.append(lyr(torch.cat(feats, 1)))
                x = F.avg_pool2d(tr(torch.cat(feats, 1)), 2)
            return self.head(x.mean((2, 3)))

    return p, Dense, _images(p["batch"], p["image"]), _class_loss(100)


def _unet(rng, fam):
    import torch
    from torch import nn
    import torch.nn.functional as F

    p = {"depth": int(rng.integers(2, 5)), "base": int(_pick(rng, (16, 32, 64))),
         "batch": int(_pick(rng, (2, 4, 8))), "image": int(_pick(rng, (64, 128, 192)))}
    ch = [p["base"] * 2 ** i for i in range(p["depth"] + 1)]

    def double(a, b):
        return nn.Sequential(_conv_bn(a, b), _conv_bn(b, b))

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.downs = nn.ModuleList([double(3, ch[0])] + [double(ch[i], ch[i + 1])
                                                             for i in range(p["depth"])])
            self.ups = nn.ModuleList([nn.ConvTranspose2d(ch[i + 1], ch[i], 2, 2)
                                      for i in reversed(range(p["depth"]))])
            self.convs = nn.ModuleList([double(2 * ch[i], ch[i])
                                        for i in reversed(range(p["depth"]))])
            self.head = nn.Conv2d(ch[0], 3, 1)

        def forward(self, x):
            skips = []
            for i, dn in enumerate(self.downs):
                x = dn(x if i == 0 else F.max_pool2d(x, 2))
                skips.append(x)
            x = skips.pop()
            for up, conv in zip(self.ups, self.convs):
                x = conv(torch.cat([skips.pop(), up(x)], 1))
            return self.head(x)

    side = p["image"] // 2 ** p["depth"] * 2 ** p["depth"]
    return p, UNet, _images(p["batch"], side), _class_loss(3)


def _mlp(rng, fam):
    import torch
    from torch import nn

    p = {"layers": int(rng.integers(2, 9)), "width": int(_pick(rng, (1024, 2048, 4096, 8192))),
         "batch": int(_pick(rng, (64, 256, 1024, 4096)))}

    def model():
        w = p["width"]
        mods = [nn.Linear(1024, w), nn.ReLU()]
        for _ in range(p["layers"] - 1):
            mods += [nn.Linear(w, w), nn.ReLU()]
        return nn.Sequential(*mods, nn.Linear(w, 10))

    def batch_fn():
        return torch.randn(p["batch"], 1024)

    return p, model, batch_fn, _class_loss(10)


def _finetune(rng, fam):
    from torch import nn
    import torch.nn.functional as F

    p = {"layers": int(rng.integers(4, 13)), "d": int(_pick(rng, (1024, 1536, 2048))),
         "vocab": int(_pick(rng, (32000, 50257))), "batch": 1,
         "seq": int(_pick(rng, (32, 64, 128)))}
    d = p["d"]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = _Attn.make(d, 16)
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            x = x + self.a(self.ln1(x), causal=True)
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(p["vocab"], d)
            self.blocks = nn.Sequential(*[Block() for _ in range(p["layers"])])
            self.head = nn.Linear(d, p["vocab"], bias=False)

        def forward(self, ids):
            return self.head(self.blocks(self.emb(ids)))

    return p, Model, _tokens(p["vocab"], p["batch"], p["seq"]), _lm_loss(p["vocab"])
