"""Glancing training (GLAT, Qian et al. 2021), shared by the vanilla NAT and the CTC decoders.

A first pass without gradient predicts every slot; the more of a sentence it gets wrong (Hamming
distance d to the reference), the more reference tokens the second pass is shown: N = floor(ratio
* d) random slots receive the reference token's embedding as input. For CTC the reference of each
slot comes from the best (Viterbi) CTC alignment of the target under the first pass.
Shapes: B batch, T slots, V vocabulary, L target length, Z = 2 L + 1 CTC states.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from atnat.core.options import require, require_at_least
from atnat.models.layers import TokenEmbedding
from atnat.core.special import NEG_INF



@dataclass(frozen=True)
class GlancingOptions:
    """The glancing options of a decoder (inherited by the NAT and CTC option classes)."""

    glat: bool = False  # glancing training (two passes per batch; the first without gradient)
    glat_ratio_start: float = 0.5  # glancing ratio at step 0: N = floor(ratio * Hamming distance)
    glat_ratio_end: float = 0.3  # ratio reached after glat_anneal_steps (linear decay), kept after
    glat_anneal_steps: int = 4000  # training steps of the linear decay (0: end ratio from the start)

    def __post_init__(self):
        for name in ("glat_ratio_start", "glat_ratio_end"):
            require(0.0 <= getattr(self, name) <= 1.0, "decoder options", name, "a ratio in [0, 1]", getattr(self, name))
        require_at_least(self.glat_anneal_steps, 0, "decoder options", "glat_anneal_steps")


def glancing_ratio(options: GlancingOptions, step: int) -> float:
    """The ratio at a training step: linear from start to end over glat_anneal_steps."""
    if options.glat_anneal_steps == 0:
        return options.glat_ratio_end
    progress = min(max(step, 0) / options.glat_anneal_steps, 1.0)
    return options.glat_ratio_start + (options.glat_ratio_end - options.glat_ratio_start) * progress


def hamming_distance(predicted: Tensor, reference: Tensor, padding_mask: Tensor) -> Tensor:
    """(B, T) ids, (B, T) ids, (B, T) True at pad -> (B,) slots where they differ (pad excluded)."""
    return ((predicted != reference) & ~padding_mask).sum(1)


def random_positions(counts: Tensor, padding_mask: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """(B,) counts, (B, T) True at pad -> (B, T) True at counts[b] distinct random non-pad slots.

    counts larger than a row's non-pad slots select all of them; padding is never selected.
    """
    noise = torch.rand(padding_mask.shape, device=padding_mask.device, generator=generator)  # (B, T)
    noise = noise.masked_fill(padding_mask, 2.0)  # pad sorts last
    rank = noise.argsort(1).argsort(1)  # (B, T) each slot's place in a random order
    return (rank < counts[:, None]) & ~padding_mask


def glance_positions(predicted: Tensor, reference: Tensor, padding_mask: Tensor, ratio: float,
                     generator: torch.Generator | None = None) -> Tensor:
    """-> (B, T) True at the floor(ratio * Hamming distance) random slots that receive the reference."""
    counts = torch.floor(ratio * hamming_distance(predicted, reference, padding_mask).float()).long()  # (B,)
    return random_positions(counts, padding_mask, generator)


def feed_tokens(vectors: Tensor, tokens: Tensor, where: Tensor, embed: TokenEmbedding) -> Tensor:
    """Decoder inputs (B, T, D) with the scaled embedding of tokens (B, T) at slots where (B, T)."""
    token_vectors = embed.tokens(tokens) * embed.scale  # (B, T, D)
    return torch.where(where.unsqueeze(-1), token_vectors, vectors)


def ctc_viterbi(log_probs: Tensor, input_lengths: Tensor, targets: Tensor, target_lengths: Tensor,
                blank: int) -> tuple[Tensor, Tensor]:
    """The most likely CTC alignment of each target.

    log_probs (B, T, V), input_lengths (B,), targets (B, L) padded, target_lengths (B,) ->
    alignment (B, T): the label (a target token or blank) each slot emits on the best path, blank
    beyond the input length; and the path's log-prob (B,), -inf when the target cannot fit in the
    slots. Ties prefer staying in a state over advancing.
    """
    B, T, _ = log_probs.shape
    ext = targets.new_full((B, 2 * targets.size(1) + 1), blank)  # (B, Z) blank y1 blank y2 ... blank
    ext[:, 1::2] = targets
    Z = ext.size(1)
    valid = torch.arange(Z, device=ext.device)[None, :] < (2 * target_lengths + 1)[:, None]  # (B, Z)
    skip = torch.zeros_like(valid)  # (B, Z) state s may be entered from s - 2
    skip[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])
    emit = log_probs.float().gather(2, ext[:, None, :].expand(B, T, Z))  # (B, T, Z)
    alpha = emit[:, 0].masked_fill(torch.arange(Z, device=ext.device) >= 2, NEG_INF).masked_fill(~valid, NEG_INF)
    back = torch.zeros(B, T, Z, dtype=torch.long, device=ext.device)  # (B, T, Z) states moved back
    for t in range(1, T):
        prev1 = torch.cat([alpha.new_full((B, 1), NEG_INF), alpha[:, :-1]], 1)  # (B, Z)
        prev2 = torch.cat([alpha.new_full((B, 2), NEG_INF), alpha[:, :-2]], 1).masked_fill(~skip, NEG_INF)
        best, arg = torch.stack([alpha, prev1, prev2], -1).max(-1)  # (B, Z)
        active = (t < input_lengths)[:, None]  # (B, 1) frozen after the input ends
        alpha = torch.where(active, (best + emit[:, t]).masked_fill(~valid, NEG_INF), alpha)
        back[:, t] = torch.where(active, arg, 0)
    last = (2 * target_lengths)[:, None]  # (B, 1) final blank state
    end_label = alpha.gather(1, (last - 1).clamp(min=0)).masked_fill(last == 0, NEG_INF)  # (B, 1)
    end_blank = alpha.gather(1, last)
    state = torch.where(end_label > end_blank, last - 1, last).squeeze(1)  # (B,)
    score = torch.maximum(end_label, end_blank).squeeze(1)  # (B,)
    path = torch.zeros(B, T, dtype=torch.long, device=ext.device)  # (B, T) state per slot
    for t in range(T - 1, -1, -1):
        path[:, t] = state
        state = state - back[:, t].gather(1, state[:, None]).squeeze(1)
    beyond = torch.arange(T, device=ext.device)[None, :] >= input_lengths[:, None]  # (B, T)
    return ext.gather(1, path).masked_fill(beyond, blank), score
