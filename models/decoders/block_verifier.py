"""An AT decoder checking blocks of proposed tokens (speculative decoding): one cached pass gives the
next-token distribution after each prefix of the block, for every row at its own position.

Rows advance by different numbers of tokens, so each keeps its own length: a block of J tokens for
a row that has accepted n tokens sits at positions n .. n + J - 1, its keys and values are written
there, and query j sees the positions up to n + j. Whatever a row wrote past what it accepted is
overwritten by its next block before anything reads it. Shapes: R rows, J block, C cache capacity,
L layers, H heads, Dh head width, S source length, V vocabulary.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from atnat.models.encoder import EncoderOut


def block_verify_problem(decoder) -> str | None:
    """Why BlockVerifier would not compute what the decoder's own `step` computes after each prefix, or
    None. It is written against atnat's own parts (as the static step is: static_cache.foreign_part), so a
    decoder with its own `step`, or overriding a method its step calls (its cross-attention, say), or with a
    plugin's embedding, layer or attention, would be verified by other arithmetic; and int8 layers that
    scale their activations per call would make a kept position depend on the rejected draft tokens of its
    block. A decoder that knows the block pass is exact for it declares `block_verify_exact = True`."""
    from atnat.models.decoders.autoregressive import AutoregressiveDecoder
    from atnat.models.decoders.static_cache import EAGER_STEP_PARTS, foreign_part

    cls = type(decoder)
    if getattr(cls, "block_verify_exact", False):
        return None
    if not isinstance(decoder, AutoregressiveDecoder) or cls.step is not AutoregressiveDecoder.step:
        return f"{cls.__module__}.{cls.__qualname__} has its own step"
    for name in (*EAGER_STEP_PARTS, "init_state"):  # what its own step calls and the block pass does not
        if getattr(cls, name) is not getattr(AutoregressiveDecoder, name):
            return f"{cls.__module__}.{cls.__qualname__} overrides {name}, which the block pass does not call"
    foreign = foreign_part(decoder)
    if foreign:
        return foreign
    per_call = next((name for name, m in decoder.named_modules() if type(m).__module__.startswith(
        "torch.ao.nn.quantized.dynamic") or getattr(type(m), "scales_activations_per_call", False)), None)
    return None if per_call is None else (f"{per_call or 'the decoder'} is int8 with activations scaled per call (a "
                                          "block's kept positions would depend on its rejected tokens)")


class BlockVerifier:
    """The BlockVerifier protocol of decoding/base.py for a decoder of the `at` family (its layers,
    embedding and output projection): the cross-attention keys and values of the memory are computed
    once, the self-attention cache grows by doubling."""

    def __init__(self, decoder, memory: EncoderOut, capacity: int = 16):
        self.decoder = decoder
        self.max_output_length = decoder.max_output_length
        kv = [layer.cross_attn.project_kv(memory.states) for layer in decoder.layers]
        self.cross_k = torch.stack([k for k, _ in kv])  # (L, R, H, S, Dh)
        self.cross_v = torch.stack([v for _, v in kv])
        self.memory_mask = memory.attn_mask  # (R, 1, 1, S)
        n_layers, r, h, _, dh = self.cross_k.shape
        self.self_k = self.cross_k.new_zeros(n_layers, r, h, capacity, dh)  # (L, R, H, C, Dh)
        self.self_v = torch.zeros_like(self.self_k)

    def _reserve(self, positions: int) -> None:
        while self.self_k.size(3) < positions:
            self.self_k = torch.cat([self.self_k, torch.zeros_like(self.self_k)], 3)
            self.self_v = torch.cat([self.self_v, torch.zeros_like(self.self_v)], 3)

    def keep(self, rows: Tensor) -> None:
        """Keep only rows `rows` (R',) of the batch, in that order."""
        self.cross_k, self.cross_v = self.cross_k.index_select(1, rows), self.cross_v.index_select(1, rows)
        self.self_k, self.self_v = self.self_k.index_select(1, rows), self.self_v.index_select(1, rows)
        self.memory_mask = self.memory_mask.index_select(0, rows)

    def step_block(self, tokens: Tensor, start: Tensor) -> Tensor:
        """tokens (R, J) at positions start (R,) .. start + J - 1 -> log-probs (R, J, V) of the token
        after each of them (the first is the last accepted token, or BOS)."""
        dec = self.decoder
        R, J = tokens.shape
        pos = start[:, None] + torch.arange(J, device=tokens.device)  # (R, J)
        self._reserve(int(pos.max()) + 1)
        C = self.self_k.size(3)
        # a row's last round may read past the positional table (its output capped by the table); those
        # columns are never kept and no kept column attends to them: any position embeds them
        table = dec.embed.positions[pos.clamp(max=dec.embed.positions.size(0) - 1)]
        x = dec.embed.dropout(dec.embed.tokens(tokens) * dec.embed.scale + table)  # (R, J, D)
        seen = (torch.arange(C, device=tokens.device)[None, None, :] <= pos[:, :, None])[:, None]  # (R, 1, J, C)
        where = pos[:, None, :, None].expand(R, self.self_k.size(2), J, self.self_k.size(4))  # (R, H, J, Dh)
        for i, layer in enumerate(dec.layers):
            def self_block(h, i=i, attn=layer.self_attn):
                q, k, v = attn.project_qkv(h)  # (R, H, J, Dh)
                self.self_k[i].scatter_(2, where, k)
                self.self_v[i].scatter_(2, where, v)
                return attn.attend(q, self.self_k[i], self.self_v[i], mask=seen)

            def cross_block(h, i=i, attn=layer.cross_attn):
                return attn.attend(attn.project_q(h), self.cross_k[i], self.cross_v[i], mask=self.memory_mask)
            x, _ = layer.res_self(x, self_block)
            x, _ = layer.res_cross(x, cross_block)
            x, _ = layer.res_ffn(x, lambda h, layer=layer: (layer.ffn(h), None))
        return F.log_softmax(dec.output(dec.final_norm(x)).float(), -1)  # (R, J, V)
