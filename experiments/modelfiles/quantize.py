"""Dynamic int8 quantization of a trained module for CPU inference (`--quantize int8`): the
like-for-like peer of CTranslate2's int8 mode.

Every linear map becomes `torch.ao.nn.quantized.dynamic.Linear` (int8 weights, per-tensor scale;
activations quantized on the fly per call): the FFNs, attention output projections, the length
predictor and other nn.Linear layers through `quantize_dynamic`, plus what it cannot see: our
attention's fused q|k|v parameter (three quantized maps: q|k|v for self-attention, q and k|v for
cross-attention) and the vocabulary projection (a subclass of nn.Linear, tied to the embeddings,
which stay float32). CPU only: PyTorch has no quantized dynamic kernels for CUDA.
"""
from __future__ import annotations

import copy
import warnings

import torch
from torch import Tensor, nn

from atnat.core.errors import AtnatError
from atnat.models.layers import MultiHeadAttention

from atnat.experiments.modelfiles.packed import MappedAttention

QUANTIZE_CHOICES = ("none", "int8")


def _dynamic():
    with warnings.catch_warnings():  # torch.ao.quantization is deprecated in favour of torchao
        warnings.simplefilter("ignore")
        import torch.ao.nn.quantized.dynamic as nnqd
        from torch.ao.quantization import default_dynamic_qconfig, quantize_dynamic
    return nnqd, default_dynamic_qconfig, quantize_dynamic


def _int8_linear(weight: Tensor, bias: Tensor | None) -> nn.Module:
    """A dynamic int8 Linear holding a quantized copy of weight (out, in) and bias."""
    nnqd, qconfig, _ = _dynamic()
    plain = nn.Linear(weight.size(1), weight.size(0), bias=bias is not None)
    with torch.no_grad():
        plain.weight.copy_(weight)
        if bias is not None:
            plain.bias.copy_(bias)
    plain.qconfig = qconfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return nnqd.Linear.from_float(plain)


class Int8Attention(MappedAttention):
    """MultiHeadAttention whose projections are dynamic int8 maps (attend() is inherited)."""

    def __init__(self, float_attn: MultiHeadAttention):
        super().__init__(float_attn, _int8_linear)


def quantize_int8(module):
    """A copy of `module` (eval mode, on the CPU) with every linear map in dynamic int8; the
    original is left untouched. Decoding runs as before (`module.decode`)."""
    if module.device.type != "cpu":
        raise AtnatError(f"--quantize int8 runs on the CPU only (PyTorch's dynamic int8 kernels); "
                         f"the model is on {module.device}")
    _, _, quantize_dynamic = _dynamic()
    q = copy.deepcopy(module).eval()
    for parent in list(q.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, MultiHeadAttention) and not isinstance(child, MappedAttention):
                setattr(parent, name, Int8Attention(child))
    out = q.decoder.output
    q.decoder.output = _int8_linear(out.weight.detach(), None if out.bias is None else out.bias.detach())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_dynamic(q, {nn.Linear}, dtype=torch.qint8, inplace=True)
    q.quantized = "int8"
    return q


def maybe_quantize(module, quantize: str | None):
    """`--quantize` applied: none/None -> the module itself; int8 -> quantize_int8(module)."""
    if quantize in (None, "none"):
        return module
    if quantize != "int8":
        raise AtnatError(f"--quantize {quantize!r}; valid: {', '.join(QUANTIZE_CHOICES)}")
    return quantize_int8(module)
