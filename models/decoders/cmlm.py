"""Conditional masked language model (CMLM, Ghazvininejad et al. 2019), decoded by mask-predict.

Training hides a uniformly drawn number n in 1..L of the L target tokens (random slots) behind
`mask` and grades only those; at inference the strategy feeds partially masked outputs to
`forward_parallel` (inherited from ParallelDecoder, mask inputs). Shapes: B batch, T target length.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from atnat.models.batch import Batch
from atnat.models.decoders.base import register_decoder
from atnat.models.decoders.glancing import random_positions
from atnat.models.decoders.nat import ParallelDecoder
from atnat.models.encoder import EncoderOut, lengths_to_padding_mask
from atnat.models.length import LengthOptions
from atnat.models.losses import Loss


@dataclass(frozen=True)
class CMLMOptions(LengthOptions):
    """Options of the CMLM (the length predictor's, from LengthOptions)."""


def training_mask(tgt_lengths: Tensor, padding_mask: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """(B,) lengths L, (B, T) True at pad -> (B, T) True at n ~ Uniform{1..L} random slots per row."""
    u = torch.rand(tgt_lengths.shape, device=tgt_lengths.device, generator=generator)  # (B,)
    counts = (u * tgt_lengths.float()).floor().long() + 1  # (B,) in 1..L
    return random_positions(counts.minimum(tgt_lengths), padding_mask, generator)


@register_decoder("cmlm")
class CMLMDecoder(ParallelDecoder):
    """Mask-token inputs, a length predictor, loss on the masked slots only."""

    Options = CMLMOptions
    input_mode = "mask"

    def loss(self, batch: Batch, memory: EncoderOut, *, step: int = 0) -> dict[str, Loss]:
        padding_mask = lengths_to_padding_mask(batch.tgt_lengths, batch.tgt.size(1))  # (B, T)
        masked = training_mask(batch.tgt_lengths, padding_mask)  # (B, T)
        inputs = batch.tgt.masked_fill(masked, self.special.mask).masked_fill(padding_mask, self.special.pad)
        return self.finish(inputs, batch.tgt, masked, padding_mask, memory, batch.tgt_lengths)
