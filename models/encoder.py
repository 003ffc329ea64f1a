"""The shared Transformer encoder (Vaswani et al. 2017) and the memory object decoders read."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from atnat.models.layers import FeedForward, MultiHeadAttention, Residual, TokenEmbedding
from atnat.models.sizes import ModelConfig


@dataclass
class EncoderOut:
    """Encoder output. states (B, S, D); padding_mask (B, S) True at padding."""

    states: Tensor
    padding_mask: Tensor

    @property
    def lengths(self) -> Tensor:
        return (~self.padding_mask).sum(1)  # (B,)

    @property
    def attn_mask(self) -> Tensor:
        return ~self.padding_mask[:, None, None, :]  # (B, 1, 1, S), True where attendable

    def index_select(self, order: Tensor) -> "EncoderOut":
        """Rows `order` (B',) of the batch (length beams, beam expansion)."""
        return EncoderOut(self.states.index_select(0, order), self.padding_mask.index_select(0, order))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.ffn_dim, cfg.dropout)
        self.res_attn = Residual(cfg.d_model, cfg.dropout, cfg.pre_ln)
        self.res_ffn = Residual(cfg.d_model, cfg.dropout, cfg.pre_ln)

    def forward(self, x: Tensor, attn_mask: Tensor) -> Tensor:
        x, _ = self.res_attn(x, lambda h: self.attn(h, h, mask=attn_mask))
        x, _ = self.res_ffn(x, lambda h: (self.ffn(h), None))
        return x


class TransformerEncoder(nn.Module):
    """Token embedding + positions -> N self-attention layers (-> final LayerNorm when pre-LN)."""

    def __init__(self, cfg: ModelConfig, embed: TokenEmbedding):
        super().__init__()
        self.embed = embed
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.final_norm = nn.LayerNorm(cfg.d_model) if cfg.pre_ln else nn.Identity()

    def forward(self, src: Tensor, padding_mask: Tensor) -> EncoderOut:
        """src (B, S) ids, padding_mask (B, S) True at pad -> EncoderOut."""
        x = self.embed(src)  # (B, S, D)
        attn_mask = ~padding_mask[:, None, None, :]  # (B, 1, 1, S)
        for layer in self.layers:
            x = layer(x, attn_mask)
        x = self.final_norm(x)
        return EncoderOut(x.masked_fill(padding_mask.unsqueeze(-1), 0.0), padding_mask)


def padding_mask(tokens: Tensor, pad: int) -> Tensor:
    """(B, T) -> (B, T) True where tokens == pad."""
    return tokens.eq(pad)


def lengths_to_padding_mask(lengths: Tensor, max_len: int | None = None) -> Tensor:
    """(B,) -> (B, T) True at positions >= length."""
    t = int(lengths.max()) if max_len is None else max_len
    return torch.arange(t, device=lengths.device)[None, :] >= lengths[:, None]
