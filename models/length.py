"""The target-length predictor shared by the NAT decoders (Gu et al. 2018; Ghazvininejad et al. 2019).

It classifies the length OFFSET (target length minus source length), clamped to
[-max_offset, max_offset], from the mean of the non-padding encoder states. Predicting an offset
rather than an absolute length keeps the classes few and lets one class mean "same length as the
source" for every sentence. Shapes: B batch, S source length, D model width, O = 2 * max_offset + 1.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from atnat.core.options import require_between
from atnat.models.encoder import EncoderOut

DEFAULT_MAX_OFFSET = 64  # covers targets up to 64 tokens longer/shorter than the source


@dataclass(frozen=True)
class LengthOptions:
    """Options every decoder with a length predictor has (the base of ParallelDecoder options;
    a NAT decoder's own options class subclasses it and adds its fields)."""

    length_max_offset: int = DEFAULT_MAX_OFFSET  # length offsets |T - S| beyond this are clamped

    def __post_init__(self):
        require_between(self.length_max_offset, 1, MAX_OFFSET, "decoder options", "length_max_offset")


MAX_OFFSET = 4096  # length offsets the predictor's classifier may have (2 x offset + 1 classes)


class LengthPredictor(nn.Module):
    """Linear classifier over O length offsets from mean-pooled (padding-masked) encoder states."""

    def __init__(self, d_model: int, max_offset: int = DEFAULT_MAX_OFFSET):
        super().__init__()
        if max_offset < 0:
            raise ValueError(f"max_offset must be >= 0, got {max_offset}")
        self.max_offset = max_offset
        self.proj = nn.Linear(d_model, 2 * max_offset + 1)

    def offset_logits(self, memory: EncoderOut) -> Tensor:
        """memory states (B, S, D) -> logits (B, O); class k means offset k - max_offset."""
        keep = (~memory.padding_mask).unsqueeze(-1).to(memory.states.dtype)  # (B, S, 1)
        pooled = (memory.states * keep).sum(1) / keep.sum(1).clamp(min=1)  # (B, D)
        return self.proj(pooled)

    def offsets(self, device: torch.device) -> Tensor:
        """(O,) the offset each class stands for: -max_offset .. max_offset."""
        return torch.arange(-self.max_offset, self.max_offset + 1, device=device)

    def loss(self, memory: EncoderOut, tgt_lengths: Tensor) -> tuple[Tensor, Tensor]:
        """-> (mean cross-entropy over the clamped offset, exact-length accuracy), both scalars.

        The accuracy compares the argmax length with the true (unclamped) length, so a target
        outside the offset range always counts as wrong.
        """
        logits = self.offset_logits(memory)  # (B, O)
        src_lengths = memory.lengths
        offset = (tgt_lengths - src_lengths).clamp(-self.max_offset, self.max_offset)  # (B,)
        ce = F.cross_entropy(logits.float(), offset + self.max_offset)
        predicted = src_lengths + logits.argmax(-1) - self.max_offset  # (B,)
        accuracy = (predicted == tgt_lengths).float().mean()
        return ce, accuracy.detach()

    def log_probs_absolute(self, memory: EncoderOut) -> Tensor:
        """-> (B, Lmax+1) log-probs over absolute lengths 0..Lmax, Lmax = S (padded width) + max_offset.

        Offsets that would give a length < 1 are removed and the rest renormalised, so length 0
        (and every length below 1 - offset range) has log-prob -inf and each row sums to 1.
        """
        logits = self.offset_logits(memory).float()  # (B, O)
        src_lengths = memory.lengths  # (B,)
        absolute = src_lengths[:, None] + self.offsets(logits.device)[None, :]  # (B, O)
        valid = absolute >= 1
        log_probs = logits.masked_fill(~valid, float("-inf")).log_softmax(-1)  # (B, O)
        width = memory.padding_mask.size(1) + self.max_offset + 1
        out = log_probs.new_full((logits.size(0), width), float("-inf"))  # (B, Lmax+1)
        index = absolute.masked_fill(~valid, 0)  # removed classes (all -inf) land on column 0
        return out.scatter(1, index, log_probs)
