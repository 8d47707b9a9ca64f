"""Dynamic int8 quantization of a model's linear layers, for CPU inference (``--quantize int8``).

Every ``nn.Linear`` becomes an :class:`Int8DynamicLinear`: symmetric per-output-channel int8 weights,
quantized once, and per-row int8 activations, quantized at each call ("dynamic" quantization, Jacob et
al. 2018, "Quantization and Training of Neural Networks for Efficient Integer-Arithmetic-Only
Inference", eq. 1-7 with zero points 0). The product is an exact int32 matrix multiply
(``torch._int_mm``, oneDNN on CPU), rescaled to float::

    s_w[j] = max_k |W[j, k]| / 127        Wq = round(W / s_w)      (int8, per output channel j)
    s_x[i] = max_k |X[i, k]| / 127        Xq = round(X / s_x)      (int8, per row i, each call)
    Y[i, j] = s_x[i] * s_w[j] * sum_k Xq[i, k] * Wq[j, k] + b[j]

so each output is within :func:`int8_error_bound` of the fp32 one. Embeddings, convolutions, layer norms
and the attention products stay fp32.

Why not a library call: ``torch.ao.quantization.quantize_dynamic`` and the ``qint8`` tensors under
``torch.ao.nn.quantized`` are deprecated in torch 2.13 (they warn, and are slated for removal);
their successor, torchao's ``quantize_(model, Int8DynamicActivationInt8WeightConfig())``, runs the same
``torch._int_mm`` but through a tensor subclass dispatched in Python at every call, a per-call cost that
weighs most on the one-row matrix products of a streaming decoder step. This module is that computation
without the dispatch.
"""

from __future__ import annotations

import torch
from torch import nn

#: ``--quantize`` choices: ``none`` (fp32) or ``int8`` (this module).
QUANTIZE_CHOICES = ("none", "int8")

_QMAX = 127.0


def _symmetric_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, scale)`` with ``q = round(x / scale)`` int8 in [-127, 127] and ``scale = max|x| / 127`` per
    row (last dim reduced; shape ``(R, 1)``); an all-zero row gets scale 1 (q = 0)."""
    amax = x.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax > 0, amax / _QMAX, torch.ones_like(amax))
    q = torch.round(x / scale).clamp_(-_QMAX, _QMAX).to(torch.int8)
    return q, scale


class Int8DynamicLinear(nn.Module):
    """``nn.Linear`` with int8 weights and per-call int8 activations (see the module docstring).

    Args:
        linear: the fp32 layer to quantize (its weight is copied; ``linear`` is not changed).

    Shapes: input ``(*, in_features)`` float32 -> output ``(*, out_features)`` float32.
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        q, scale = _symmetric_int8(linear.weight.detach().float())  # (out, in), (out, 1)
        self.register_buffer("weight_int8_t", q.t().contiguous())  # (in, out): _int_mm's right operand
        self.register_buffer("weight_scale", scale.reshape(-1))  # (out,)
        b = linear.bias
        self.register_buffer("bias", None if b is None else b.detach().float().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ W.T + b`` in int8 arithmetic with int32 accumulation."""
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features).float()  # (R, in)
        xq, xs = _symmetric_int8(x2)  # (R, in) int8, (R, 1)
        y = torch._int_mm(xq, self.weight_int8_t).float()  # (R, out) exact int32 sums
        y = y * xs * self.weight_scale
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features).to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def int8_error_bound(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Largest possible ``|Y_int8 - Y_fp32|`` of :class:`Int8DynamicLinear` per output, from rounding alone.

    With ``X = s_x Xq + e_x`` (``|e_x| <= s_x / 2``) and ``W = s_w Wq + e_w`` (``|e_w| <= s_w / 2``),
    ``XW^T - s_x s_w Xq Wq^T = e_x W^T + X e_w^T - e_x e_w^T``, so per output ``(i, j)``::

        |err| <= s_x[i] / 2 * sum_k |W[j, k]| + s_w[j] / 2 * sum_k |X[i, k]| + K s_x[i] s_w[j] / 4

    Args:
        x: input ``(R, in)``; weight: ``(out, in)``.

    Returns:
        ``(R, out)`` bounds (float rounding of the rescale is not included).
    """
    _, xs = _symmetric_int8(x.float())  # (R, 1)
    _, ws = _symmetric_int8(weight.float())  # (out, 1)
    k = x.shape[-1]
    return (xs / 2 * weight.abs().sum(-1) + ws.t() / 2 * x.abs().sum(-1, keepdim=True)
            + k * xs * ws.t() / 4)


def quantize_model(model: nn.Module, mode: str = "int8") -> nn.Module:
    """Replace the ``nn.Linear`` layers of mmst's own modules in ``model`` (in place) by
    :class:`Int8DynamicLinear`; returns ``model``.

    ``mode="none"`` returns ``model`` unchanged. A linear layer whose weight is shared with an embedding
    (a tied output projection) gets its own int8 copy; the embedding stays fp32. The layers inside a
    pretrained Hugging Face encoder (``encoder_type: hf``) stay fp32: its code may read their weights
    directly (WavLM's attention passes them to ``F.multi_head_attention_forward``).

    Raises:
        ValueError: ``mode`` is not one of :data:`QUANTIZE_CHOICES`, or the model is not on the CPU
            (int8 matrix products here are a CPU kernel).
    """
    if mode not in QUANTIZE_CHOICES:
        raise ValueError(f"quantize must be one of {', '.join(QUANTIZE_CHOICES)}, got {mode!r}")
    if mode == "none":
        return model
    devices = {p.device.type for p in model.parameters()}
    if devices - {"cpu"}:
        raise ValueError(f"--quantize int8 runs on the CPU; the model is on {', '.join(sorted(devices))}")
    for name, lin in [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear) and n]:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        if type(parent).__module__.split(".")[0] == "mmst":
            setattr(parent, attr, Int8DynamicLinear(lin))
    return model
