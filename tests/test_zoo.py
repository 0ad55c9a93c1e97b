"""The model zoo: every model records a valid, regular training trace at a small size, has
its published parameter count, and scales activations (not weights) with batch and size."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from uvm_sched.trace import EventKind, Trace, zoo  # noqa: E402

A, F = int(EventKind.ALLOC), int(EventKind.FREE)

REQUIRED = ["resnet50", "resnet152", "inception_v3", "senet154", "bert_base", "gpt2_small",
            "gpt2_medium", "vit_b16", "unet", "gpt_1b5"]

# Published parameter counts (torchvision / Cadene pretrainedmodels / Hugging Face configs /
# the U-Net and LLaMA papers); the zoo builds them layer for layer.
PUBLISHED_PARAMS = {
    "resnet50": 25_557_032, "resnet152": 60_192_808, "inception_v3": 27_161_264,
    "senet154": 115_088_984, "vit_b16": 86_567_656, "bert_base": 109_514_298,
    "gpt2_small": 124_439_808, "gpt2_medium": 354_823_168, "gpt_1b5": 1_557_611_200,
    "unet": 31_037_698, "llama_7b": 6_738_415_616,
}


def iteration_sequences(tr: Trace) -> list[list[int]]:
    s = list(tr.iteration_starts) + [tr.n_ticks]
    out = []
    for lo, hi in zip(s[:-1], s[1:]):
        m = (tr.tick >= lo) & (tr.tick < hi) & (tr.kind <= F)
        out.append([int(x) if k == A else -int(x) for k, x in zip(tr.kind[m], tr.size[m])])
    return out


def test_names_cover_the_required_models():
    assert set(REQUIRED) <= set(zoo.names())
    for n in zoo.names():
        assert zoo.info(n)["about"]


@pytest.fixture(scope="module")
def recorded():
    """Every zoo model at its default (small) size, 3 iterations, recorded once."""
    return {n: zoo.record(n, iters=3) for n in zoo.names()}


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_model_records_a_valid_regular_balanced_trace(recorded, name):
    tr = recorded[name]
    tr.validate()
    assert tr.meta["source"] == "recorder" and tr.meta["model"] == name
    assert tr.meta["late_blocks"] == 0 and not tr.meta["flop_formula_failures"]
    # published parameter count, within 0.5% (the zoo is layer-for-layer)
    assert tr.meta["param_count"] == pytest.approx(PUBLISHED_PARAMS[name], rel=0.005)
    assert tr.meta["flops"] > 0 and np.all(np.isfinite(tr.tick_ns))
    assert len(tr.iteration_starts) == 3
    seqs = iteration_sequences(tr)
    assert seqs[1] == seqs[2], "iterations after the first must repeat exactly"
    # every block an iteration allocates after the first is freed within it; the first
    # leaves only AdamW's two state tensors per parameter
    bt = tr.block_table()
    s = list(tr.iteration_starts) + [tr.n_ticks]
    n_params = int((bt.alloc_tick == 0).sum()) - n_buffers(name)
    for i, (lo, hi) in enumerate(zip(s[:-1], s[1:])):
        born = bt[(bt.alloc_tick >= lo) & (bt.alloc_tick < hi)]
        left = born[(born.free_tick < 0) | (born.free_tick >= hi)]
        assert len(left) == (2 * n_params if i == 0 else 0), (i, len(left))


def n_buffers(name: str) -> int:
    model_fn, _, _ = zoo.build(name)
    with torch.device("meta"):
        m = model_fn()
    return sum(1 for b in m.buffers() if b.numel())


def test_batch_scales_activations_not_weights():
    trs = {b: zoo.record("unet", batch=b, image=32, iters=2) for b in (1, 2, 4)}
    weights = {b: int(tr.size[tr.tick == 0].sum()) for b, tr in trs.items()}
    assert len(set(weights.values())) == 1
    # bytes allocated per steady iteration = weight-sized part (gradients, optimizer
    # temporaries) + a part linear in the batch (activations)
    per_iter = {b: sum(x for x in iteration_sequences(tr)[-1] if x > 0) for b, tr in trs.items()}
    d1, d2 = per_iter[2] - per_iter[1], per_iter[4] - per_iter[2]
    assert d1 > 0
    assert d2 == pytest.approx(2 * d1, rel=0.02)
    assert trs[1].peak_bytes < trs[2].peak_bytes < trs[4].peak_bytes
    assert trs[4].meta["batch"] == 4 and trs[4].meta["image"] == 32


def test_sequence_length_scales_transformer_activations():
    short = zoo.record("gpt2_small", batch=1, seq=16, iters=2)
    long = zoo.record("gpt2_small", batch=1, seq=64, iters=2)
    assert np.array_equal(short.size[short.tick == 0], long.size[long.tick == 0])
    assert long.peak_bytes > short.peak_bytes
    vocab = 50257
    # the logits (batch x seq x vocab float32) are allocated each iteration
    assert 16 * vocab * 4 in iteration_sequences(short)[-1]
    assert 64 * vocab * 4 in iteration_sequences(long)[-1]
    assert 64 * vocab * 4 not in iteration_sequences(short)[-1]
    assert long.meta["seq"] == 64


def test_amp_records_every_kind_of_model():
    for name in ("resnet50", "gpt2_small"):
        tr = zoo.record(name, iters=3, amp=True)
        seqs = iteration_sequences(tr)
        assert seqs[1] == seqs[2]
        assert tr.meta["amp"] is True


def test_gpt_1b5_fine_tuning_is_dominated_by_optimizer_state(recorded):
    tr = recorded["gpt_1b5"]
    params = tr.meta["param_bytes"]
    assert params > 6e9  # 1.56 B float32 parameters
    # parameters + gradients + AdamW's two moments: >= 4x the parameter bytes at the peak
    assert tr.peak_bytes >= 4 * params
    bt = tr.block_table()
    persistent = int(bt[bt.free_tick < 0]["size"].sum())
    assert persistent == 3 * params  # weights + exp_avg + exp_avg_sq


def test_build_returns_functions_usable_with_record_and_for_real_cpu_runs():
    model_fn, batch_fn, loss_fn = zoo.build("unet", batch=2, image=16)
    torch.manual_seed(0)
    model = model_fn()
    x = batch_fn()
    loss = loss_fn(model(x), x)
    loss.backward()
    assert x.device.type == "cpu" and loss.ndim == 0 and torch.isfinite(loss)
    assert model.head.weight.grad is not None


def test_bad_sizes_and_names_raise_clear_errors():
    with pytest.raises(KeyError, match="unknown zoo model"):
        zoo.build("resnet9000")
    with pytest.raises(ValueError, match="vision model"):
        zoo.build("resnet50", seq=128)
    with pytest.raises(ValueError, match="text model"):
        zoo.build("bert_base", image=224)
    with pytest.raises(ValueError, match="exceeds its 1,024 positions"):
        zoo.build("gpt2_small", seq=2048)
    with pytest.raises(ValueError, match="multiple of 16"):
        zoo.build("vit_b16", image=100)
    with pytest.raises(ValueError, match="minimum"):
        zoo.build("inception_v3", image=64)
    with pytest.raises(ValueError, match="batch"):
        zoo.build("unet", batch=0)


@pytest.mark.slow
def test_resnet152_at_batch_1280_records():
    tr = zoo.record("resnet152", batch=1280, image=224, iters=2)
    assert tr.peak_bytes > 100 * 2**30
    seqs = iteration_sequences(tr)
    assert len(seqs) == 2


def test_a_size_left_out_is_the_models_training_size_not_a_tiny_one():
    # zoo.record("resnet50", batch=64) once meant 64 images of 64 px; the defaults are now
    # the training sizes the benchmark tables use, and one given size leaves the others be
    tr = zoo.record("resnet50", batch=2, iters=1)
    assert tr.meta["batch"] == 2 and tr.meta["image"] == zoo.info("resnet50")["image"] == 224
    assert zoo.info("gpt2_small")["seq"] == 1024 and zoo.info("gpt2_small")["batch"] == 8
