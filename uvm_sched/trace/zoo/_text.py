"""Transformer models for the zoo, in plain torch (no transformers download): BERT-base
(Devlin et al. 2019, with its masked-LM head), GPT-2 (Radford et al. 2019: pre-LN blocks,
tied embeddings; small/medium/XL-sized), and a LLaMA-style decoder (RMSNorm, SwiGLU, rotary
embeddings). Layer for layer as the published configs, so parameter counts match."""
from __future__ import annotations

import torch
from torch import nn
import torch.nn.functional as F


def _attention(q, k, v, causal: bool):
    """Scaled dot-product attention over (batch, heads, seq, head_dim).

    On ``meta`` tensors ``F.scaled_dot_product_attention`` takes its math path, which
    materialises the seq x seq score matrix; a GPU picks a fused kernel instead (flash
    attention for bf16/fp16, memory-efficient attention for fp32), which saves only a
    logsumexp. Call those kernels directly on meta so the recorded memory is the GPU's."""
    if q.device.type != "meta":
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    if q.dtype in (torch.bfloat16, torch.float16) and q.shape[-1] <= 256:
        return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, is_causal=causal)[0]
    need_lse = q.requires_grad or k.requires_grad or v.requires_grad
    return torch.ops.aten._scaled_dot_product_efficient_attention(
        q, k, v, None, need_lse, is_causal=causal)[0]


class _SelfAttention(nn.Module):
    def __init__(self, d, heads, causal, bias=True) -> None:
        super().__init__()
        self.qkv = nn.Linear(d, 3 * d, bias=bias)
        self.proj = nn.Linear(d, d, bias=bias)
        self.heads, self.causal = heads, causal

    def forward(self, x, rope=None) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if rope is not None:
            q, k = _rotate(q, rope), _rotate(k, rope)
        a = _attention(q, k, v, self.causal)
        return self.proj(a.transpose(1, 2).reshape(b, n, d))


# -- BERT ----------------------------------------------------------------------------------------
class _BertLayer(nn.Module):
    def __init__(self, d, heads, ff, p) -> None:
        super().__init__()
        self.attn = _SelfAttention(d, heads, causal=False)
        self.ln1 = nn.LayerNorm(d, eps=1e-12)
        self.fc1 = nn.Linear(d, ff)
        self.fc2 = nn.Linear(ff, d)
        self.ln2 = nn.LayerNorm(d, eps=1e-12)
        self.drop = nn.Dropout(p)

    def forward(self, x) -> torch.Tensor:
        x = self.ln1(x + self.drop(self.attn(x)))
        return self.ln2(x + self.drop(self.fc2(F.gelu(self.fc1(x)))))


class Bert(nn.Module):
    """BERT encoder with the masked-LM head (decoder tied to the word embeddings)."""

    def __init__(self, vocab=30522, d=768, layers=12, heads=12, ff=3072, max_pos=512, p=0.1) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_pos, d)
        self.typ = nn.Embedding(2, d)
        self.ln = nn.LayerNorm(d, eps=1e-12)
        self.drop = nn.Dropout(p)
        self.layers = nn.Sequential(*[_BertLayer(d, heads, ff, p) for _ in range(layers)])
        self.head_fc = nn.Linear(d, d)
        self.head_ln = nn.LayerNorm(d, eps=1e-12)
        self.head_bias = nn.Parameter(torch.zeros(vocab))

    def forward(self, ids) -> torch.Tensor:
        n = ids.shape[1]
        pos = torch.arange(n, device=ids.device)
        x = self.tok(ids) + self.pos(pos) + self.typ(torch.zeros_like(ids))
        x = self.layers(self.drop(self.ln(x)))
        x = self.head_ln(F.gelu(self.head_fc(x)))
        return F.linear(x, self.tok.weight, self.head_bias)


# -- GPT-2 ---------------------------------------------------------------------------------------
class _GPTBlock(nn.Module):
    def __init__(self, d, heads, p) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = _SelfAttention(d, heads, causal=True)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.drop = nn.Dropout(p)

    def forward(self, x) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln1(x)))
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh")))


class GPT2(nn.Module):
    """GPT-2 language model (tied input/output embeddings)."""

    def __init__(self, d=768, layers=12, heads=12, vocab=50257, max_pos=1024, p=0.1) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(max_pos, d)
        self.drop = nn.Dropout(p)
        self.blocks = nn.Sequential(*[_GPTBlock(d, heads, p) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)

    def forward(self, ids) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.blocks(self.drop(self.wte(ids) + self.wpe(pos)))
        return F.linear(self.ln_f(x), self.wte.weight)


# -- LLaMA-style decoder -------------------------------------------------------------------------
def _rotate(x, rope):
    cos, sin = rope
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class _LlamaBlock(nn.Module):
    def __init__(self, d, heads, ff) -> None:
        super().__init__()
        self.n1 = nn.RMSNorm(d, eps=1e-5)
        self.attn = _SelfAttention(d, heads, causal=True, bias=False)
        self.n2 = nn.RMSNorm(d, eps=1e-5)
        self.gate = nn.Linear(d, ff, bias=False)
        self.up = nn.Linear(d, ff, bias=False)
        self.down = nn.Linear(ff, d, bias=False)

    def forward(self, x, rope) -> torch.Tensor:
        x = x + self.attn(self.n1(x), rope)
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, d=4096, layers=32, heads=32, ff=11008, vocab=32000) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList([_LlamaBlock(d, heads, ff) for _ in range(layers)])
        self.norm = nn.RMSNorm(d, eps=1e-5)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.hd = d // heads

    def forward(self, ids) -> torch.Tensor:
        n = ids.shape[1]
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2, device=ids.device) / self.hd))
        ang = torch.outer(torch.arange(n, device=ids.device, dtype=inv.dtype), inv)
        ang = torch.cat([ang, ang], dim=-1)
        rope = (ang.cos(), ang.sin())
        x = self.emb(ids)
        for blk in self.blocks:
            x = blk(x, rope)
        return self.lm_head(self.norm(x))
