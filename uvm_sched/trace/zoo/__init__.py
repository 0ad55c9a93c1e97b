"""Model zoo for the workload recorder: well-known training workloads built offline in plain
torch (no downloads), at any batch size, sequence length or image size.

``names()`` lists them; ``build(name, ...)`` returns ``(model_fn, batch_fn, loss_fn)`` for
``uvm_sched.trace.record``; ``record(name, ...)`` records a training trace in one call.
``random_model(seed)`` / ``record_random(seed)`` draw workloads of random families and sizes
for property tests, and ``allocator_only(trace)`` strips a trace to what a runtime's event
ring or a memory snapshot sees (see ``_random``).
Each model has one set of default sizes, the batch and image side or sequence length such a
model is trained at on one GPU in fp32 (``info(name)`` says them): ``uvm-sched record``, the
demo, the notebooks and the benchmark tables all use them, so a figure from one reproduces
in the others. A size left out keeps its default even when another is given
(``record("resnet50", batch=8)`` is 8 images of 224 px). Tiny sizes are not a cheaper stand-in:
at a batch of 2 the optimizer step's working set alone exceeds half the peak, so every
policy looks far worse than at a real size. On meta tensors the recording time does not
depend on the sizes; smaller ones only make the traces' bytes smaller.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from .._model import Trace

from ._random import FAMILIES, RandomModel, allocator_only, random_model, record_random

__all__ = ["names", "build", "record", "info", "FAMILIES", "RandomModel", "random_model",
           "record_random", "allocator_only"]


@dataclasses.dataclass(frozen=True)
class _Spec:
    kind: str  # "image" (classification), "segment", "mlm", "lm"
    factory: Callable[..., Any]
    batch: int  # default batch: what the model is trained at on one GPU (fp32)
    size: int  # default image side (px) or sequence length (tokens), likewise
    max_size: int | None = None  # longest sequence (positional table) / None
    min_size: int = 1  # smallest image side / sequence
    multiple: int = 1  # image side must be a multiple of this
    classes: int = 1000
    vocab: int = 0
    about: str = ""


def _specs() -> dict[str, _Spec]:
    from . import _text as T
    from . import _vision as V

    return {
        "resnet50": _Spec("image", lambda **k: V.ResNet([3, 4, 6, 3]), 64, 224, min_size=32,
                          about="ResNet-50 (25.6M params), ImageNet head"),
        "resnet152": _Spec("image", lambda **k: V.ResNet([3, 8, 36, 3]), 64, 224, min_size=32,
                           about="ResNet-152 (60.2M params)"),
        "inception_v3": _Spec("image", lambda **k: V.InceptionV3(), 64, 299, min_size=75,
                              about="Inception-v3 with its auxiliary head (27.2M params)"),
        "senet154": _Spec("image", lambda **k: V.SENet154(), 32, 224, min_size=32,
                          about="SENet-154 (115M params)"),
        "unet": _Spec("segment", lambda **k: V.UNet(), 16, 256, min_size=16, multiple=16,
                      classes=2, about="U-Net, 64..1024 channels, 2 classes (31M params)"),
        "vit_b16": _Spec("image", lambda image, **k: V.ViT(image=image), 64, 224, min_size=16,
                         multiple=16, about="ViT-B/16 (86M params)"),
        "bert_base": _Spec("mlm", lambda **k: T.Bert(), 32, 512, max_size=512, vocab=30522,
                           about="BERT-base with the masked-LM head (110M params)"),
        "gpt2_small": _Spec("lm", lambda **k: T.GPT2(768, 12, 12), 8, 1024, max_size=1024,
                            vocab=50257, about="GPT-2 small (124M params)"),
        "gpt2_medium": _Spec("lm", lambda **k: T.GPT2(1024, 24, 16), 8, 1024, max_size=1024,
                             vocab=50257, about="GPT-2 medium (355M params)"),
        "gpt_1b5": _Spec("lm", lambda **k: T.GPT2(1600, 48, 25), 4, 1024, max_size=1024,
                         vocab=50257,
                         about="GPT-2 XL-sized decoder (1.56B params): fine-tuning with Adam, "
                               "where the optimizer state dominates"),
        "llama_7b": _Spec("lm", lambda **k: T.Llama(), 1, 2048, max_size=None, vocab=32000,
                          about="LLaMA-7B-style decoder (6.7B params)"),
    }


_SPECS: dict[str, _Spec] | None = None


def _get(name: str) -> _Spec:
    global _SPECS
    if _SPECS is None:
        _SPECS = _specs()
    if name not in _SPECS:
        raise KeyError(f"unknown zoo model {name!r}; known: {', '.join(_SPECS)}")
    return _SPECS[name]


def names() -> list[str]:
    """Names of the zoo models."""
    _get("resnet50")
    return list(_SPECS or ())


def info(name: str) -> dict:
    """What ``name`` is and its default sizes: ``batch``, and ``seq`` (tokens) for a text
    model or ``image`` (side in px) for a vision one."""
    s = _get(name)
    key = "seq" if s.kind in ("lm", "mlm") else "image"
    return {"name": name, "about": s.about, "kind": s.kind, "batch": s.batch, key: s.size}


def build(name: str, *, batch: int | None = None, seq: int | None = None,
          image: int | None = None) -> tuple[Any, Any, Any]:
    """``(model_fn, batch_fn, loss_fn)`` for zoo model ``name``.

    ``batch``: samples per step; ``seq``: tokens per sample (text models); ``image``: image
    side in px (vision models); each one left out takes the model's default (``info``). ``batch_fn`` creates tensors on the default device (the
    recorder makes it ``meta``); ``loss_fn(output, batch)`` draws its random targets on the
    output's device.
    """
    import torch
    import torch.nn.functional as F

    s = _get(name)
    text = s.kind in ("lm", "mlm")
    if text and image is not None:
        raise ValueError(f"{name} is a text model: give seq= (tokens), not image=")
    if not text and seq is not None:
        raise ValueError(f"{name} is a vision model: give image= (pixels), not seq=")
    b = s.batch if batch is None else int(batch)
    given = seq if text else image
    n = s.size if given is None else int(given)
    if b < 1:
        raise ValueError(f"batch must be >= 1, got {b}")
    if n < max(s.min_size, 2 if s.kind == "lm" else 1):
        what = "seq" if text else "image"
        raise ValueError(f"{name}: {what}={n} is below its minimum {max(s.min_size, 2)}")
    if s.max_size is not None and n > s.max_size:
        raise ValueError(f"{name}: seq={n:,} exceeds its {s.max_size:,} positions")
    if n % s.multiple:
        raise ValueError(f"{name}: image={n} must be a multiple of {s.multiple}")

    def model_fn():
        return s.factory(image=n)

    if text:
        def batch_fn():
            return torch.randint(s.vocab, (b, n))
    else:
        def batch_fn():
            return torch.randn(b, 3, n, n)

    if s.kind == "image":
        def loss_fn(out, batch):
            main, aux = out if isinstance(out, tuple) else (out, None)
            y = torch.randint(s.classes, (main.shape[0],), device=main.device)
            loss = F.cross_entropy(main, y)
            if aux is not None:  # Inception-v3 trains its auxiliary head at weight 0.4
                loss = loss + 0.4 * F.cross_entropy(aux, y)
            return loss
    elif s.kind == "segment":
        def loss_fn(out, batch):
            y = torch.randint(s.classes, (out.shape[0], *out.shape[2:]), device=out.device)
            return F.cross_entropy(out, y)
    elif s.kind == "mlm":
        def loss_fn(out, batch):
            y = torch.randint(s.vocab, out.shape[:2], device=out.device)
            return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
    else:
        def loss_fn(out, batch):
            # next-token loss as Hugging Face computes it (the shifted logits are a copy)
            logits = out[:, :-1, :].contiguous()
            y = torch.randint(s.vocab, logits.shape[:2], device=out.device)
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    return model_fn, batch_fn, loss_fn


def record(name: str, *, batch: int | None = None, seq: int | None = None, iters: int = 3,
           hw: Any = "h200-pcie5", amp: bool = False, image: int | None = None) -> Trace:
    """Record ``iters`` AdamW training steps of zoo model ``name`` as a Trace (see
    ``uvm_sched.trace.record``); ``batch``/``seq``/``image`` as in ``build``."""
    from .._recorder import record as _record

    s = _get(name)
    model_fn, batch_fn, loss_fn = build(name, batch=batch, seq=seq, image=image)
    text = s.kind in ("lm", "mlm")
    size = (seq if text else image) or s.size
    meta = {"model": name, "batch": batch or s.batch, "seq": size if text else None,
            "image": None if text else size}
    return _record(model_fn, batch_fn, iters=iters, hw=hw, amp=amp, loss_fn=loss_fn,
                   name=name, meta=meta)
