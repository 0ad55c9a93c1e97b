"""Mixed-precision emulation for the workload recorder (``record(amp=True)``): CUDA
autocast's semantics for ``meta`` tensors, which ``torch.autocast`` does not support (see
``_recorder``'s module docstring, "Mixed precision").
"""
from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from ._recorder_core import _LOW

_AMP_LOW = {
    "linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "addmm", "baddbmm",
    "addbmm", "addmv", "mv", "einsum", "prelu", "scaled_dot_product_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
}
_AMP_FP32 = {
    "softmax", "log_softmax", "layer_norm", "group_norm", "rms_norm", "cross_entropy",
    "cross_entropy_loss", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "kl_div",
    "binary_cross_entropy_with_logits", "exp", "log", "log1p", "pow", "rsqrt", "reciprocal",
    "logsumexp", "cosine_similarity", "cumsum", "cumprod", "norm", "dist", "cdist",
}


class _Autocast(TorchFunctionMode):
    """CUDA-autocast semantics for meta tensors (torch.autocast has no meta device type)."""

    def __init__(self, dtype=torch.bfloat16) -> None:
        super().__init__()
        self.dtype = dtype
        self.cache: dict[int, torch.Tensor] = {}

    def _cast(self, x, to):
        if isinstance(x, torch.Tensor):
            if x.is_floating_point() and x.dtype != to and x.dtype in (torch.float32, *_LOW):
                # autocast caches the low-precision copy of leaf tensors that need grad
                # (parameters) for the whole forward region.
                if to is self.dtype and x.is_leaf and x.requires_grad:
                    c = self.cache.get(id(x))
                    if c is None:
                        c = self.cache[id(x)] = x.to(to)
                    return c
                return x.to(to)
            return x
        if isinstance(x, (list, tuple)):
            return type(x)(self._cast(y, to) for y in x)
        return x

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in _AMP_LOW:
            to = self.dtype
        elif name in _AMP_FP32:
            to = torch.float32
        else:
            return func(*args, **kwargs)
        with torch._C.DisableTorchFunction():
            args = self._cast(args, to)
            kwargs = {k: self._cast(v, to) for k, v in kwargs.items()}
        return func(*args, **kwargs)
