"""Length candidates shared by the NAT strategies, and the one-pass `length-beam` strategy.

Every sentence tries its l most likely lengths; the C = B * l candidates (sentence-major: rows
b*l .. b*l+l-1 belong to sentence b) go through the decoder together, one batch per pass.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from atnat.decoding.base import Hypotheses, SpecialTokens, Strategy, register_strategy
from atnat.models.errors import AtnatError


def check_positive(strategy: str, **fields: int | float) -> None:
    """Refuse a non-positive option value, naming the strategy and the field."""
    for name, value in fields.items():
        if not value > 0:
            raise AtnatError(f"strategy {strategy!r}: {name} must be > 0, got {value!r}")


def top_lengths(length_log_probs: Tensor, l: int, max_len: int | Tensor) -> Tensor:
    """(B, Lmax+1) log-probs over lengths -> (B, l) the l most likely lengths, best first.

    Length 0 is never chosen; lengths above max_len (int or (B,)) are clamped to it. When l
    exceeds the Lmax non-zero lengths, the best length fills the remaining columns.
    """
    B, width = length_log_probs.shape
    if width < 2:
        raise AtnatError(f"the length predictor covers no length >= 1 (it returned {width} column)")
    never_zero = torch.full_like(length_log_probs[:, :1], float("-inf"))
    scores = torch.cat([never_zero, length_log_probs[:, 1:]], dim=1)  # (B, Lmax+1)
    k = min(l, width - 1)
    top = scores.sort(dim=1, descending=True, stable=True).indices[:, :k]  # (B, k)
    if k < l:
        top = torch.cat([top, top[:, :1].expand(B, l - k)], dim=1)  # (B, l)
    cap = torch.as_tensor(max_len, device=top.device).reshape(-1, 1)  # (B or 1, 1)
    return top.clamp(min=1).minimum(cap)


def all_mask_inputs(lengths: Tensor, special: SpecialTokens) -> tuple[Tensor, Tensor]:
    """(C,) lengths -> decoder inputs (C, T) all `mask` up to each length then `pad`, and the
    padding mask (C, T) True at pad; T = the longest length."""
    T = int(lengths.max())
    padding_mask = torch.arange(T, device=lengths.device)[None, :] >= lengths[:, None]  # (C, T)
    tokens = torch.full(padding_mask.shape, special.mask, dtype=torch.long, device=lengths.device)
    return tokens.masked_fill(padding_mask, special.pad), padding_mask


def expand_candidates(model: Any, memory: Any, lengths: Tensor,
                      special: SpecialTokens) -> tuple[Tensor, Tensor, Any]:
    """lengths (B, l) -> all-mask inputs (B*l, T), padding mask (B*l, T), and the memory with
    each sentence's rows repeated l times (reorder_memory is skipped when l == 1)."""
    B, l = lengths.shape
    tokens, padding_mask = all_mask_inputs(lengths.reshape(-1), special)  # (B*l, T)
    if l > 1:
        order = torch.arange(B, device=lengths.device).repeat_interleave(l)  # (B*l,)
        memory = model.reorder_memory(memory, order)
    return tokens, padding_mask, memory


def best_tokens(log_probs: Tensor, padding_mask: Tensor,
                special: SpecialTokens) -> tuple[Tensor, Tensor]:
    """log_probs (C, T, V) -> argmax tokens (C, T) (pad at padding) and their log-probs (0 at pad)."""
    scores, tokens = log_probs.max(dim=-1)  # (C, T)
    return tokens.masked_fill(padding_mask, special.pad), scores.masked_fill(padding_mask, 0.0)


def argmax_pass(model: Any, tokens: Tensor, memory: Any, padding_mask: Tensor,
                special: SpecialTokens) -> tuple[Tensor, Tensor]:
    """One decoder pass on inputs (C, T) -> argmax tokens (C, T) and their log-probs (C, T)."""
    return best_tokens(model.forward_parallel(tokens, memory, padding_mask), padding_mask, special)


def mean_log_prob(positional_scores: Tensor, lengths: Tensor) -> Tensor:
    """(C, T) per-token log-probs (0 at pad), (C,) lengths -> (C,) mean log-prob per token."""
    return positional_scores.sum(dim=1) / lengths.clamp(min=1).to(positional_scores.dtype)


def rank_candidates(candidate_scores: Tensor, l: int) -> Tensor:
    """(B*l,) scores -> (B, l) row indices into the B*l candidates, best first per sentence;
    ties keep candidate order (the more likely length first)."""
    per_sentence = candidate_scores.reshape(-1, l)  # (B, l)
    order = per_sentence.sort(dim=1, descending=True, stable=True).indices  # (B, l)
    offsets = torch.arange(per_sentence.size(0), device=order.device)[:, None] * l  # (B, 1)
    return order + offsets


def pick_best(candidate_scores: Tensor, l: int) -> Tensor:
    """(B*l,) scores -> (B,) row index of each sentence's best candidate."""
    return rank_candidates(candidate_scores, l)[:, 0]


def collect(tokens: Tensor, positional_scores: Tensor, lengths: Tensor, scores: Tensor, l: int,
            *, n_steps: int, history: list[Tensor] | None = None) -> Hypotheses:
    """Candidates (B*l, T) with lengths and scores (B*l,) -> Hypotheses with N = l, best first.

    history: per-iteration candidate tokens, each (B*l, T); the best candidate's rows are kept.
    """
    order = rank_candidates(scores, l)  # (B, l)
    B, T = order.size(0), tokens.size(1)
    rows = order.reshape(-1)  # (B*l,)
    best = order[:, 0]  # (B,)
    return Hypotheses(
        tokens=tokens[rows].reshape(B, l, T),  # (B, l, T)
        positional_scores=positional_scores[rows].reshape(B, l, T),  # (B, l, T)
        scores=scores[rows].reshape(B, l),  # (B, l)
        lengths=lengths[rows].reshape(B, l),  # (B, l)
        n_steps=n_steps,
        history=None if history is None else [h[best] for h in history],
    )


def decode_lengths(model: Any, memory: Any, lengths: Tensor, special: SpecialTokens) -> Hypotheses:
    """One argmax pass over all length candidates (B, l); ranked by mean token log-prob."""
    tokens, padding_mask, memory = expand_candidates(model, memory, lengths, special)
    tokens, positional = argmax_pass(model, tokens, memory, padding_mask, special)
    flat = lengths.reshape(-1)  # (B*l,)
    return collect(tokens, positional, flat, mean_log_prob(positional, flat), lengths.size(1),
                   n_steps=1)


def predicted_lengths(model: Any, memory: Any, l: int) -> Tensor:
    """The model's l most likely lengths per sentence: (B, l), within its predictor's range."""
    length_log_probs = model.predict_length(memory)  # (B, Lmax+1)
    return top_lengths(length_log_probs, l, length_log_probs.size(1) - 1)


@register_strategy("length-beam")
@dataclass(frozen=True)
class LengthBeam(Strategy):
    """One parallel pass over the l most likely lengths; each sentence keeps all l candidates,
    ranked by mean token log-prob (Gu et al. 2018's length beam without a teacher)."""

    requires: ClassVar[str] = "parallel"

    length_beam: int = 3  # lengths tried per sentence (the predictor's top-l, never 0)

    def __post_init__(self) -> None:
        check_positive("length-beam", length_beam=self.length_beam)

    def search(self, model: Any, memory_or_state: Any, *, src_lengths: Tensor,
               special: SpecialTokens) -> Hypotheses:
        """-> Hypotheses (B, length_beam, T), n_steps = 1."""
        lengths = predicted_lengths(model, memory_or_state, self.length_beam)
        return decode_lengths(model, memory_or_state, lengths, special)
