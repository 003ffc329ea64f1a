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
from atnat.core.special import NEG_INF
from atnat.models.layers import TokenEmbedding


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
    noise = torch.rand(padding_mask.shape, device=padding_mask.device, generator=generator) if generator is not None \
        else torch.rand_like(padding_mask, dtype=torch.float)  # (B, T); the same draw (rand_like compiles)
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


@torch.compiler.disable  # a loop over the slots: compiled, every new length would compile it again
def ctc_viterbi(log_probs: Tensor, input_lengths: Tensor, targets: Tensor, target_lengths: Tensor,
                blank: int) -> tuple[Tensor, Tensor]:
    """The most likely CTC alignment of each target.

    log_probs (B, T, V), input_lengths (B,), targets (B, L) padded, target_lengths (B,) ->
    alignment (B, T): the label (a target token or blank) each slot emits on the best path, blank
    beyond the input length; and the path's log-prob (B,), -inf when the target cannot fit in the
    slots. Ties prefer staying in a state over advancing. No gradient flows (an alignment).
    The max-plus recursion over slots stays a loop, of three operations per slot into
    preallocated buffers (no per-slot allocation, no host sync); the backtrace takes O(log T).
    """
    B, T, _ = log_probs.shape
    ext = targets.new_full((B, 2 * targets.size(1) + 1), blank)  # (B, Z) blank y1 blank y2 ... blank
    ext[:, 1::2] = targets
    Z = ext.size(1)
    states = torch.arange(Z, device=ext.device)
    valid = states[None, :] < (2 * target_lengths + 1)[:, None]  # (B, Z)
    skip = torch.zeros_like(valid)  # (B, Z) state s may be entered from s - 2
    skip[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])
    emit = log_probs.detach().float().gather(2, ext[:, None, :].expand(B, T, Z))  # (B, T, Z)
    emit = emit.masked_fill(~valid[:, None, :], NEG_INF)
    score_t, back = _viterbi_forward(emit, skip)  # (T, B, Z) each
    last_slot = (input_lengths - 1).clamp(min=0)  # (B,) rows are frozen after their input ends
    alpha = score_t[last_slot, torch.arange(B, device=ext.device)]  # (B, Z)
    last = (2 * target_lengths)[:, None]  # (B, 1) final blank state
    end_label = alpha.gather(1, (last - 1).clamp(min=0)).masked_fill(last == 0, NEG_INF)  # (B, 1)
    end_blank = alpha.gather(1, last)
    state = torch.where(end_label > end_blank, last - 1, last).squeeze(1)  # (B,)
    score = torch.maximum(end_label, end_blank).squeeze(1)  # (B,)
    beyond = torch.arange(T, device=ext.device)[None, :] >= input_lengths[:, None]  # (B, T)
    back.masked_fill_(beyond.t()[:, :, None], 0)  # past its input a row stays where it ended
    path = _backtrace(back, state)  # (B, T) state per slot
    return ext.gather(1, path).masked_fill(beyond, blank), score


def _viterbi_forward(emit: Tensor, skip: Tensor) -> tuple[Tensor, Tensor]:
    """Best-path scores and moves over all T slots: emit (B, T, Z) with -inf at invalid states,
    skip (B, Z) -> scores (T, B, Z), back (T, B, Z) in {0 stay, 1, 2 states moved}.
    States are kept reversed behind two -inf columns, so that one unfold window per state reads
    (stay, from s - 1, from s - 2) in the order whose first maximum wins ties as the loop did."""
    B, T, Z = emit.shape
    emit = emit.flip(2).transpose(0, 1).contiguous()  # (T, B, Z) reversed states
    bias = emit.new_zeros(B, Z, 3)  # (B, Z, 3) added to the three predecessors
    bias[:, :, 2] = torch.zeros_like(skip, dtype=emit.dtype).masked_fill(~skip, NEG_INF).flip(1)
    scores = emit.new_full((T, B, Z + 2), NEG_INF)  # (T, B, Z + 2) reversed states, then 2 pads
    scores[0, :, :Z] = emit[0]
    scores[0, :, : max(Z - 2, 0)] = NEG_INF  # a path starts in state 0 or 1
    back = torch.zeros(T, B, Z, dtype=torch.long, device=emit.device)
    cand, best = emit.new_empty(B, Z, 3), emit.new_empty(B, Z)
    for t in range(1, T):
        torch.add(scores[t - 1].unfold(1, 3, 1), bias, out=cand)  # (B, Z, 3) stay, s - 1, s - 2
        torch.max(cand, 2, out=(best, back[t]))
        torch.add(best, emit[t], out=scores[t, :, :Z])
    return scores[:, :, :Z].flip(2), back.flip(2)


def _backtrace(back: Tensor, final: Tensor) -> Tensor:
    """States of the best path: back (T, B, Z) moves, final (B,) state at slot T - 1 -> (B, T).
    Pointer doubling: step[t] maps a state at slot t + 1 to its predecessor at t; composing
    neighbours log2(T) times maps the final state to every slot at once."""
    T, B, Z = back.shape
    states = torch.arange(Z, device=back.device)
    step = torch.cat([states - back[1:], states.expand(1, B, Z)])  # (T, B, Z); the last: identity
    span = 1
    while span < T - 1:  # step[t] maps slot min(t + 2 span, T - 1) to t
        step[: T - span] = step[: T - span].gather(2, step[span:])
        span *= 2
    return step.gather(2, final.view(1, B, 1).expand(T, B, 1)).squeeze(2).t()  # (B, T)
