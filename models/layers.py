"""Transformer building blocks: multi-head attention, feed-forward, positional encodings, layers.

Shapes: B batch, S source length, T target length, D model width, H heads, Dh = D / H.
Attention masks are boolean with True where a query may attend (the SDPA convention).
"""
from __future__ import annotations

import math
import weakref

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_is_compiling = getattr(torch.compiler, "is_compiling", None) or (lambda: torch._dynamo.is_compiling())  # torch < 2.3

class OutputProjection(nn.Linear):
    """The vocabulary projection: nn.Linear (same parameters, state dict and training path) that, at
    inference on CPU, multiplies by a cached (in, out) copy of its weight: for the few rows of step-wise
    decoding that layout is faster with the CPU BLAS (measured: results/bench/ab_output_projection.py).
    The copy is dropped whenever the module switches between training and evaluation (a fused optimizer
    step edits the weight without a trace the copy could check), and rebuilt when the weight changes in
    evaluation (load_state_dict, in-place edits, `.to()`, a new parameter, `.data` assignment), so it never
    serves stale weights to a training loop's validation or to decoding."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._cache: tuple | None = None  # (weight ref, data_ptr, version, (in, out) copy)

    def train(self, mode: bool = True):
        self._cache = None
        return super().train(mode)

    def _load_from_state_dict(self, *args, **kwargs):
        self._cache = None  # inference tensors (a model built under inference_mode) have no version to compare
        return super()._load_from_state_dict(*args, **kwargs)

    def forward(self, x: Tensor) -> Tensor:
        w = self.weight
        if (self.training or torch.is_grad_enabled() or x.device.type != "cpu" or x.dtype != w.dtype
                or _is_compiling()):  # a compiled step picks its own layout
            return F.linear(x, w, self.bias)
        version = -1 if w.is_inference() else w._version  # inference tensors have no version counter
        c = self._cache
        if c is None or c[0]() is not w or c[1:3] != (w.data_ptr(), version):  # same tensor, storage, edits
            self._cache = c = (weakref.ref(w), w.data_ptr(), version, w.detach().t().contiguous())
        flat = x.reshape(-1, x.size(-1))  # (N, D)
        out = torch.addmm(self.bias, flat, c[3]) if self.bias is not None else flat @ c[3]
        return out.view(*x.shape[:-1], out.size(-1))  # (..., V)


def masked_softmax(scores: Tensor, mask: Tensor | None) -> Tensor:
    """Attention weights over the last axis where `mask` is True; a query whose keys are all masked (an empty
    source) gets all-zero weights, as SDPA's attention gives it a zero context, never NaN."""
    if mask is None:
        return scores.softmax(-1)
    return scores.masked_fill(~mask, float("-inf")).softmax(-1).masked_fill(~mask.any(-1, keepdim=True), 0.0)


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention over H heads (Vaswani et al. 2017, section 3.2.2).

    The fast path is `F.scaled_dot_product_attention`; `need_weights=True` takes an explicit
    softmax path that also returns the (B, H, T, S) weights (guided-attention loss, figures).
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.h, self.dh, self.dropout, self.d = n_heads, d_model // n_heads, dropout, d_model
        # one (3D, D) projection, rows q | k | v: self-attention projects all three in one matmul,
        # cross-attention uses row slices (views, no copy) for the query and the memory
        self.in_weight = nn.Parameter(torch.empty(3 * d_model, d_model))
        self.in_bias = nn.Parameter(torch.empty(3 * d_model))
        for rows in (slice(0, d_model), slice(d_model, 3 * d_model)):  # nn.Linear's init, per part
            nn.init.kaiming_uniform_(self.in_weight[rows], a=math.sqrt(5))
            nn.init.uniform_(self.in_bias[rows], -d_model**-0.5, d_model**-0.5)
        self.out_proj = nn.Linear(d_model, d_model)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        """Read checkpoints written before the fused projection (q_proj + kv_proj)."""
        if prefix + "q_proj.weight" in state_dict:
            for kind in ("weight", "bias"):
                state_dict[prefix + f"in_{kind}"] = torch.cat([state_dict.pop(prefix + f"q_proj.{kind}"),
                                                               state_dict.pop(prefix + f"kv_proj.{kind}")])
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def split_heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, self.h, self.dh).transpose(1, 2)  # (B, H, T, Dh)

    def project_q(self, x: Tensor) -> Tensor:
        d = self.d
        return self.split_heads(F.linear(x, self.in_weight[:d], self.in_bias[:d]))  # (B, H, T, Dh)

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        d = self.d
        k, v = F.linear(x, self.in_weight[d:], self.in_bias[d:]).chunk(2, dim=-1)
        return self.split_heads(k), self.split_heads(v)  # 2 x (B, H, S, Dh)

    def project_qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention: q, k, v of x (B, T, D) in one matmul -> 3 x (B, H, T, Dh)."""
        q, k, v = F.linear(x, self.in_weight, self.in_bias).chunk(3, dim=-1)
        return self.split_heads(q), self.split_heads(k), self.split_heads(v)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | None = None,
               is_causal: bool = False, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """q (B, H, T, Dh), k/v (B, H, S, Dh), mask broadcastable to (B, H, T, S) -> (B, T, D)."""
        p = self.dropout if self.training else 0.0
        if not need_weights:
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=is_causal)
            weights = None
        else:
            scores = q @ k.transpose(-1, -2) / math.sqrt(self.dh)  # (B, H, T, S)
            if is_causal:
                t, s = scores.shape[-2:]
                causal = torch.ones(t, s, dtype=torch.bool, device=q.device).tril(s - t)
                mask = causal if mask is None else mask & causal
            weights = masked_softmax(scores, mask)
            ctx = F.dropout(weights, p, self.training) @ v  # (B, H, T, Dh)
        b, _, t, _ = ctx.shape
        out = ctx.transpose(1, 2).reshape(b, t, self.h * self.dh)  # (B, T, D)
        return self.out_proj(out), weights

    def attend_fused(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
        """attend() for a few queries over a short cache, written as broadcast products and
        reductions instead of SDPA: a compiler (inductor) fuses q.K, the masked softmax and p.V into
        loops over the cache with no GEMM call per head (eager, it is slower than SDPA).
        q (B, H, T, Dh), k/v (B, H, S, Dh), mask broadcastable to (B, H, T, S) -> (B, T, D)."""
        scores = (q.unsqueeze(-2) * k.unsqueeze(-3)).sum(-1) * self.dh**-0.5  # (B, H, T, S)
        weights = masked_softmax(scores, mask)  # (B, H, T, S)
        ctx = (weights.unsqueeze(-1) * v.unsqueeze(-3)).sum(-2)  # (B, H, T, Dh)
        b, _, t, _ = ctx.shape
        return self.out_proj(ctx.transpose(1, 2).reshape(b, t, self.h * self.dh))  # (B, T, D)

    def forward(self, query: Tensor, key_value: Tensor, *, mask: Tensor | None = None,
                is_causal: bool = False, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        if query is key_value:
            q, k, v = self.project_qkv(query)
        else:
            q, (k, v) = self.project_q(query), self.project_kv(key_value)
        return self.attend(q, k, v, mask=mask, is_causal=is_causal, need_weights=need_weights)


class FeedForward(nn.Module):
    """Position-wise FFN: Linear -> ReLU -> dropout -> Linear."""

    def __init__(self, d_model: int, ffn_dim: int, dropout: float):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, ffn_dim), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(ffn_dim, d_model))

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


def sinusoidal_table(n_positions: int, d_model: int) -> Tensor:
    """The fixed sin/cos table of the paper (section 3.5): (n_positions, D)."""
    pos = torch.arange(n_positions, dtype=torch.float).unsqueeze(1)  # (P, 1)
    freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float) * (-math.log(10000.0) / d_model))
    table = torch.zeros(n_positions, d_model)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq[: d_model // 2])
    return table


class TokenEmbedding(nn.Module):
    """Token embedding scaled by sqrt(D) plus positional encoding (sinusoidal or learned), dropout."""

    def __init__(self, vocab_size: int, d_model: int, *, max_positions: int, learned_pos: bool,
                 dropout: float, pad: int):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, d_model, padding_idx=pad)
        nn.init.normal_(self.tokens.weight, std=d_model**-0.5)
        nn.init.zeros_(self.tokens.weight[pad])
        self.scale = math.sqrt(d_model)
        self.max_positions = max_positions
        if learned_pos:
            self.positions = nn.Parameter(torch.randn(max_positions, d_model) * 0.02)
        else:
            self.register_buffer("positions", sinusoidal_table(max_positions, d_model), persistent=False)
        self.dropout = nn.Dropout(dropout)

    def add_positions(self, x: Tensor, offset: int = 0) -> Tensor:
        """x (B, T, D) of already-scaled vectors -> x + positions[offset:offset+T], dropout."""
        t = x.size(1)
        if offset + t > self.max_positions:
            raise ValueError(f"sequence of {offset + t} positions exceeds max_positions={self.max_positions}")
        return self.dropout(x + self.positions[offset: offset + t])

    def add_positions_at(self, x: Tensor, positions: Tensor) -> Tensor:
        """x (B, T, D) + the encodings of positions (T,) given as a device tensor (no host sync)."""
        return self.dropout(x + self.positions.index_select(0, positions))

    def forward(self, tokens: Tensor, offset: int = 0) -> Tensor:
        """tokens (B, T) -> (B, T, D)."""
        return self.add_positions(self.tokens(tokens) * self.scale, offset)


class Residual(nn.Module):
    """Residual + LayerNorm around a sublayer: post-LN (paper) or pre-LN."""

    def __init__(self, d_model: int, dropout: float, pre_ln: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.pre_ln = pre_ln

    def forward(self, x: Tensor, sublayer) -> tuple[Tensor, Tensor | None]:
        """`sublayer(h) -> (out, extra)`; returns (new x, extra)."""
        if self.pre_ln:
            out, extra = sublayer(self.norm(x))
            return x + self.dropout(out), extra
        out, extra = sublayer(x)
        return self.norm(x + self.dropout(out)), extra
