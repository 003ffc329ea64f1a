"""Dynamic int8 quantization of a trained module for CPU inference (`--quantize int8`): the
like-for-like peer of CTranslate2's int8 mode.

Every linear map becomes `torch.ao.nn.quantized.dynamic.Linear` (int8 weights, per-tensor scale;
activations quantized on the fly per call): the FFNs, attention output projections, the length
predictor and other nn.Linear layers through `quantize_dynamic`, plus what it cannot see: our
attention's fused q|k|v parameter (three quantized maps: q|k|v for self-attention, q and k|v for
cross-attention) and the vocabulary projection (a subclass of nn.Linear, tied to the embeddings,
which stay float32). CPU only: PyTorch has no quantized dynamic kernels for CUDA.

A compiled engine (aoti, auto) cannot trace those layers (their packed weights are opaque objects),
so `compilable_int8` wraps each in a CompilableInt8Linear: eager it calls the layer as before; traced
for a package it spells the layer's own arithmetic as plain tensors and decomposed quantization ops
(activation range, quantize, dequantize, linear), which inductor's weight freezing lowers to oneDNN's
int8 GEMM: the same integer products, so the same outputs up to float rounding
(tests/test_quantize.py), without Python between the ops.
"""
from __future__ import annotations

import copy
import warnings

import torch
from torch import Tensor, nn

from atnat.core.errors import AtnatError
from atnat.experiments.modelfiles.packed import MappedAttention
from atnat.models.layers import MultiHeadAttention

QUANTIZE_CHOICES = ("none", "int8")


def _dynamic():
    with warnings.catch_warnings():  # torch.ao.quantization is deprecated in favour of torchao
        warnings.simplefilter("ignore")
        import torch.ao.nn.quantized.dynamic as nnqd
        from torch.ao.quantization import default_dynamic_qconfig, quantize_dynamic
    return nnqd, default_dynamic_qconfig, quantize_dynamic


def _int8_linear(weight: Tensor, bias: Tensor | None, qconfig=None) -> nn.Module:
    """A dynamic int8 Linear holding a quantized copy of weight (out, in) and bias (`qconfig`:
    torch's default dynamic one, per-tensor weights, unless given)."""
    nnqd, default_qconfig, _ = _dynamic()
    plain = nn.Linear(weight.size(1), weight.size(0), bias=bias is not None)
    with torch.no_grad():
        plain.weight.copy_(weight)
        if bias is not None:
            plain.bias.copy_(bias)
    plain.qconfig = qconfig or default_qconfig
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
            if type(child) is MultiHeadAttention:  # a plugin's own attention keeps its own code (float)
                setattr(parent, name, Int8Attention(child))
    out = q.decoder.output
    q.decoder.output = _int8_linear(out.weight.detach(), None if out.bias is None else out.bias.detach())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_dynamic(q, {nn.Linear}, dtype=torch.qint8, inplace=True)
    q.quantized = "int8"
    return q


class CompilableInt8Linear(nn.Module):
    """A dynamic int8 Linear a compiler can trace. Eager: the wrapped layer (FBGEMM). Under
    torch.export / torch.compile: its arithmetic written out: the activations' per-call range
    (uint8, 0..127 with the layer's reduce_range, 0..255 without), quantized and dequantized,
    times the int8 weight dequantized per output channel (a per-tensor scale repeated), plus the
    bias; inductor's freezing turns that pattern into oneDNN's int8 GEMM (qlinear)."""

    scales_activations_per_call = True  # one row's outputs depend on the other rows of the call

    def __init__(self, layer: nn.Module):
        super().__init__()
        weight = layer.weight()  # quantized (out, in)
        n = weight.size(0)
        if weight.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric):
            scales = torch.full((n,), weight.q_scale(), dtype=torch.float32)
            zeros = torch.full((n,), weight.q_zero_point(), dtype=torch.long)
        elif weight.q_per_channel_axis() == 0:
            scales = weight.q_per_channel_scales().float()
            zeros = weight.q_per_channel_zero_points().long()
        else:
            raise AtnatError(f"int8 linear layer quantized along axis {weight.q_per_channel_axis()}: "
                             "only per-tensor and per-output-channel weights compile")
        # not a submodule: export fakes every object a traced module holds, and the layer's packed
        # weights (a TorchBind object) cannot be faked; eager calls reach it here
        self.__dict__["layer"] = layer
        self.in_features, self.out_features = weight.size(1), n
        # the layer's own rule (torch.ao.nn.quantized.dynamic.Linear.forward): version 4 on reduces the range
        self.act_max = 127 if getattr(layer, "version", None) is not None and layer.version >= 4 else 255
        self.register_buffer("weight_int8", weight.int_repr().contiguous(), persistent=False)
        self.register_buffer("weight_scale", scales, persistent=False)
        self.register_buffer("weight_zero", zeros, persistent=False)
        bias = layer.bias()
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone(), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        if not (torch.compiler.is_exporting() or torch.compiler.is_compiling()):
            return self.layer(x)
        ops = _decomposed()
        flat = x.reshape(-1, self.in_features)  # (N, in)
        lo, hi = 0, self.act_max
        scale, zero = ops.choose_qparams.tensor(flat, lo, hi, torch.finfo(torch.float32).eps, torch.uint8)
        xq = ops.dequantize_per_tensor.tensor(ops.quantize_per_tensor.tensor(flat, scale, zero, lo, hi, torch.uint8),
                                              scale, zero, lo, hi, torch.uint8)
        w = ops.dequantize_per_channel(self.weight_int8, self.weight_scale, self.weight_zero, 0, -128, 127, torch.int8)
        out = torch.nn.functional.linear(xq, w, self.bias)
        return out.to(x.dtype).view(*x.shape[:-1], self.out_features)  # (..., out)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, activations uint8 0..{self.act_max}"


def _decomposed():
    """torch's decomposed quantization ops (quantized_decomposed::*), registered on import."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch.ao.quantization.fx._decomposed  # noqa: F401
    return torch.ops.quantized_decomposed


def is_int8_layer(module: nn.Module) -> bool:
    """A dynamic int8 layer (torch.ao.nn.quantized.*), which only its own kernels run."""
    return type(module).__module__.startswith("torch.ao.nn.quantized")


def is_quantized(module: nn.Module) -> bool:
    return any(is_int8_layer(m) or isinstance(m, CompilableInt8Linear) for m in module.modules())


def compilable_int8(module: nn.Module) -> int:
    """Wrap, in place, every dynamic int8 Linear below `module` in a CompilableInt8Linear; -> layers wrapped."""
    nnqd, _, _ = _dynamic()
    wrapped = 0
    for name, child in list(module.named_children()):
        if isinstance(child, nnqd.Linear):
            setattr(module, name, CompilableInt8Linear(child))
            wrapped += 1
        elif not isinstance(child, CompilableInt8Linear):
            wrapped += compilable_int8(child)
    return wrapped


def maybe_quantize(module, quantize: str | None):
    """`--quantize` applied: none/None -> the module itself; int8 -> quantize_int8(module)."""
    if quantize in (None, "none"):
        return module
    if quantize != "int8":
        raise AtnatError(f"--quantize {quantize!r}; valid: {', '.join(QUANTIZE_CHOICES)}")
    return quantize_int8(module)
