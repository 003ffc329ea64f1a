"""Linear layers with their weights laid out once for the CPU's GEMM kernels (the `packed` engine and
the bf16 option of every engine; see engines.py).

PackedLinear keeps one pre-packed copy of a weight: MKL's packed sgemm (`torch.ops.mkl._mkl_linear`,
what inductor's freezing uses for float32) or oneDNN's blocked layout (`torch.ops.mkldnn.
_linear_pointwise`, float32 or bfloat16). Bf16Linear stores a bfloat16 weight and multiplies in
bfloat16 (half the bytes per GEMV; oneDNN uses avx512_bf16/AMX where the CPU has them), activations
around it stay float32. `replace_linears` swaps every linear map of a model, including the
attention's fused q|k|v parameter and the vocabulary projection; embeddings are left as they are.

Whether a packed float32 product pays depends on the CPU and the weight's shape (results/bench/README.md has
CPUs where it does and where it never does), so a `measured` layer (the auto engine's) compares the two
products for its weight's shape on this CPU, once per process and thread count, and takes the packed one
only from the row count where it measured faster (`packed_from_rows`); it packs its weight at its first
packed product, so a shape where packing never pays holds no second copy.
"""
from __future__ import annotations

import math
import threading
import time
from typing import Callable, ClassVar

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from atnat.core.errors import AtnatError
from atnat.models.layers import MultiHeadAttention, OutputProjection

BACKENDS = ("mkl", "onednn")


# below this many rows (an AT step of a few sentences, a speculative block) a float32 product on the packed
# weight is slower than the plain one: 1.0-2.7x the time at 1 to 8 rows for every layer shape of the bench's
# model, 1 thread (results/bench/packed_small_rows.csv, made by results/bench/packed_small_rows.py)
PLAIN_ROWS = 16
CALIBRATION_ROWS = (16, 64, 256)  # a measured layer compares the two products at these row counts ...
CALIBRATION_REPEATS = 7  # ... each this many times, in turn, after one untimed call of each, keeping the fastest ...
PACKED_SHARE = 0.95  # ... and packs from the fewest rows where the packed product took at most this share of
# the plain one's time, there and at every larger count measured (beyond the largest: as there)
_MEASURED: dict[tuple[int, int, str, int], float] = {}  # (in, out, backend, threads) -> packed from rows
_MEASURING = threading.Lock()  # threads making their first product of a shape at once: one measures, all wait


def packed_from_rows(fan_in: int, fan_out: int, backend: str) -> float:
    """The fewest rows (of CALIBRATION_ROWS) from which the packed float32 product of a (fan_out, fan_in) weight
    measured faster than the plain one on this CPU at this process's thread count; math.inf: at none of them.
    Measured once per process and thread count, on random tensors of a private generator (the global one is
    left as it is), without autocast."""
    key = (fan_in, fan_out, backend, torch.get_num_threads())
    found = _MEASURED.get(key)
    if found is not None:
        return found
    with _MEASURING:
        if key not in _MEASURED:
            _MEASURED[key] = _measure(fan_in, fan_out, backend)
        return _MEASURED[key]


def _measure(fan_in: int, fan_out: int, backend: str) -> float:
    """packed_from_rows' measurement, made afresh."""
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(fan_out, fan_in, generator=gen) / fan_in ** 0.5
    layer = PackedLinear(weight, torch.randn(fan_out, generator=gen), backend=backend)
    pays = []
    with torch.inference_mode(), torch.autocast("cpu", enabled=False):
        for rows in CALIBRATION_ROWS:
            plain, packed = compare_products(layer, torch.randn(rows, fan_in, generator=gen))
            pays.append(packed <= PACKED_SHARE * plain)
    from_rows = math.inf
    for rows, paid in reversed(list(zip(CALIBRATION_ROWS, pays))):
        if not paid:
            break
        from_rows = rows
    return from_rows


def forget_measurements() -> None:
    """Measure every shape again at its next use (tests)."""
    _MEASURED.clear()


def packing_summary(module: nn.Module) -> str:
    """Which weight shapes of `module`'s measured layers take the packed product in this process at this thread
    count: "IN->OUT from N rows" for each; "none" where none measured faster or none was measured (no product
    of PLAIN_ROWS rows or more ran); "" where `module` has no measured layer."""
    shapes = sorted({(m.in_features, m.out_features, m.backend) for m in module.modules()
                     if isinstance(m, PackedLinear) and m.measured})
    if not shapes:
        return ""
    threads = torch.get_num_threads()
    packed = [f"{i}->{o} from {int(_MEASURED[i, o, b, threads])} rows" for i, o, b in shapes
              if _MEASURED.get((i, o, b, threads), math.inf) < math.inf]
    return "; ".join(packed) or "none"


def compare_products(layer: PackedLinear, x: Tensor) -> tuple[float, float]:
    """The fastest of CALIBRATION_REPEATS timings (seconds) of the plain and of the packed product of `layer` on
    x (N, in), timed in turn (the fastest: another process's load only ever adds time)."""
    calls = (lambda: F.linear(x, layer.weight, layer.bias), lambda: layer.packed_product(x))
    for call in calls:
        call()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(CALIBRATION_REPEATS):
        for call, spent in zip(calls, times):
            began = time.perf_counter()
            call()
            spent.append(time.perf_counter() - began)
    return min(times[0]), min(times[1])


class PackedLinear(nn.Module):
    """y = x W^T + b on a weight packed once for the CPU kernels: `backend` "mkl" (float32 only)
    or "onednn" (float32 or bfloat16: `dtype`; a bfloat16 product returns float32). A float32 product of
    fewer than PLAIN_ROWS rows is the plain one; `measured`: fewer than packed_from_rows' count for its shape."""

    def __init__(self, weight: Tensor, bias: Tensor | None, *, backend: str = "mkl",
                 dtype: torch.dtype = torch.float32, measured: bool = False):
        super().__init__()
        self.measured = measured and dtype == torch.float32
        if weight.device.type != "cpu":
            raise AtnatError(f"packed linear layers run on the CPU only; the weight is on {weight.device}")
        if backend not in BACKENDS or (backend == "mkl" and dtype != torch.float32):
            raise AtnatError(f"packed linear: backend {backend!r} with {dtype}; valid: mkl (float32), onednn "
                             "(float32, bfloat16)")
        self.backend, self.dtype = backend, dtype
        self.out_features, self.in_features = weight.shape
        w = weight.detach().to(dtype).contiguous()
        self.register_buffer("weight", w, persistent=False)  # MKL's kernel reads the plain weight too
        self.register_buffer("bias", None if bias is None else bias.detach().to(dtype).clone(), persistent=False)
        # a measured layer packs its weight at its first packed product (never, where packing never pays)
        self.packed: Tensor | None = None if self.measured else self._pack()

    def _pack(self) -> Tensor:
        """The weight laid out for the backend's kernel (an opaque tensor)."""
        with torch.no_grad():
            if self.backend == "mkl":
                return torch.ops.mkl._mkl_reorder_linear_weight(self.weight, 1)
            try:
                return torch.ops.mkldnn._reorder_linear_weight(self.weight, 1)
            except RuntimeError as err:  # oneDNN's bf16 kernels need avx512bw/vl/dq or avx_ne_convert
                raise AtnatError(f"packed linear ({self.dtype}, oneDNN): this CPU cannot run it ({err}); use an "
                                 "engine without +bf16") from None

    def __getstate__(self) -> dict:
        """A copy (copy.deepcopy, pickle) without the packed weight, an opaque tensor that cannot be copied: the
        copy packs its own at its first packed product."""
        return {**super().__getstate__(), "packed": None}

    def forward(self, x: Tensor) -> Tensor:
        if self.dtype == torch.float32 and (torch.compiler.is_exporting() or torch.compiler.is_compiling()):
            # traced for a compiled step (the auto engine's): the plain product, which inductor's
            # weight freezing packs its own way; the packed handle is not a tensor a graph can hold
            return F.linear(x, self.weight, self.bias)
        flat = x.reshape(-1, self.in_features)  # (N, in)
        rows = flat.size(0)
        if self.dtype == torch.float32 and (rows < PLAIN_ROWS or (  # the plain product is faster there
                self.measured and rows < packed_from_rows(self.in_features, self.out_features, self.backend))):
            return F.linear(x, self.weight, self.bias)
        return self.packed_product(flat).to(x.dtype).view(*x.shape[:-1], self.out_features)  # (..., out)

    def packed_product(self, flat: Tensor) -> Tensor:
        """flat (N, in) -> (N, out) on the packed weight (float32, or bfloat16's product)."""
        packed = self.packed
        if packed is None:
            packed = self.packed = self._pack()
        if self.backend == "mkl":
            return torch.ops.mkl._mkl_linear(flat, packed, self.weight, self.bias, 1)
        return torch.ops.mkldnn._linear_pointwise(flat.to(self.dtype), packed, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return (f"in={self.in_features}, out={self.out_features}, backend={self.backend}, dtype={self.dtype}"
                + (", measured" if self.measured else ""))


class Bf16Linear(nn.Module):
    """y = x W^T + b with W (and b) stored in bfloat16 and the product taken in bfloat16; x and y
    stay float32. Plain ops, so a compiler (inductor freezing, AOTInductor) packs W for its kernels."""

    def __init__(self, weight: Tensor, bias: Tensor | None):
        super().__init__()
        self.register_buffer("weight", weight.detach().to(torch.bfloat16).contiguous(), persistent=False)
        self.register_buffer("bias", None if bias is None else bias.detach().to(torch.bfloat16).clone(),
                             persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        return nn.functional.linear(x.to(torch.bfloat16), self.weight, self.bias).to(x.dtype)


class MappedAttention(MultiHeadAttention):
    """MultiHeadAttention whose projections are given linear maps (attend() is inherited): q|k|v for
    self-attention, q and k|v for cross-attention, and the output projection."""

    static_step_exact: ClassVar[bool] = True  # attend and attend_fused are MultiHeadAttention's own

    def __init__(self, attn: MultiHeadAttention, make: Callable[[Tensor, Tensor | None], nn.Module]):
        nn.Module.__init__(self)
        self.h, self.dh, self.dropout, self.d = attn.h, attn.dh, attn.dropout, attn.d
        w, b, d = attn.in_weight.detach(), attn.in_bias.detach(), attn.d
        self.qkv, self.q, self.kv = make(w, b), make(w[:d], b[:d]), make(w[d:], b[d:])
        out = attn.out_proj
        self.out_proj = out if not isinstance(out, nn.Linear) else make(out.weight.detach(), _bias(out))
        self.training = attn.training

    def project_q(self, x: Tensor) -> Tensor:
        return self.split_heads(self.q(x))  # (B, H, T, Dh)

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        k, v = self.kv(x).chunk(2, dim=-1)
        return self.split_heads(k), self.split_heads(v)  # 2 x (B, H, S, Dh)

    def project_qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return self.split_heads(q), self.split_heads(k), self.split_heads(v)


def _bias(linear: nn.Linear) -> Tensor | None:
    return None if linear.bias is None else linear.bias.detach()


def replace_linears(module: nn.Module, make: Callable[[Tensor, Tensor | None], nn.Module]) -> int:
    """Swap, in place, every nn.Linear below `module` (the vocabulary projection included) for
    make(weight, bias), and every attention for a MappedAttention over such maps; -> maps swapped.
    Only atnat's own classes are swapped: a subclass may compute otherwise, and keeps its own forward.
    Dynamic int8 layers (not nn.Linear; packed by their own kernels) are left alone."""
    swapped = 0
    for name, child in list(module.named_children()):
        if type(child) is MultiHeadAttention:  # a subclass (a plugin's own attention) keeps its own code
            setattr(module, name, MappedAttention(child, make))
            swapped += 4
        elif type(child) in (nn.Linear, OutputProjection):  # likewise a plugin's own linear map
            setattr(module, name, make(child.weight.detach(), _bias(child)))
            swapped += 1
        else:
            swapped += replace_linears(child, make)
    return swapped
