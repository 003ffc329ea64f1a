"""Length candidates and one-pass helpers shared by the NAT strategies (parallel, length-beam,
mask-predict, npd; CTC reuses the special-symbol rule).

Every sentence tries l lengths, the predicted one and its neighbours (argmax, -1, +1, ...); the
C = B * l candidates (sentence-major: rows b*l .. b*l+l-1 belong to sentence b) go through the
decoder together, one batch per pass. NAT outputs never contain special symbols: an arg-max that
lands on one (pad, bos, eos, mask, blank) takes the best ordinary token instead.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from atnat.core.errors import AtnatError
from atnat.core.special import SpecialTokens
from atnat.decoding.base import Hypotheses


def top_lengths(length_log_probs: Tensor, l: int, max_len: int | Tensor) -> Tensor:
    """(B, Lmax+1) log-probs over lengths -> (B, l) length candidates: the most likely length and
    its neighbours in the order argmax, -1, +1, -2, +2, ... (fairseq's length beam), skipping
    lengths below 1 or above max_len (int or (B,)).

    Neighbours rather than the l most likely classes: a peaked predictor's runner-up classes can be
    absurd (a 70-token candidate for an 8-token source); candidates are then ranked by the output's
    mean token log-prob. When fewer than l lengths are valid, the best one fills the rest.
    """
    B, width = length_log_probs.shape
    if width < 2:
        raise AtnatError(f"the length predictor covers no length >= 1 (it returned {width} column)")
    cap = torch.as_tensor(max_len, device=length_log_probs.device).reshape(-1, 1)  # (B or 1, 1)
    best = length_log_probs[:, 1:].argmax(dim=1, keepdim=True) + 1  # (B, 1), never length 0
    best = best.minimum(cap).clamp(min=1)
    steps = torch.arange(1, l + 1, device=best.device)
    offsets = torch.stack([-steps, steps], dim=1).flatten()  # -1, +1, -2, +2, ...
    offsets = torch.cat([offsets.new_zeros(1), offsets])  # (2l+1,)
    cand = best + offsets[None, :]  # (B, 2l+1)
    valid = (cand >= 1) & (cand <= cap)
    order = (~valid).long().argsort(dim=1, stable=True)  # valid candidates first, in offset order
    cand = cand.gather(1, order)[:, :l]  # (B, l)
    enough = valid.sum(dim=1, keepdim=True) > torch.arange(l, device=best.device)[None, :]  # (B, l)
    return torch.where(enough, cand, best)


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


def never_emitted(special: SpecialTokens, *, allow_eos: bool = False, allow_blank: bool = False) -> list[int]:
    """Special ids a NAT output may not contain: pad, bos, mask, and eos/blank unless allowed."""
    ids = [special.pad, special.bos, special.mask]
    return ids + ([] if allow_eos else [special.eos]) + ([] if allow_blank else [special.blank])


def argmax_ordinary(log_probs: Tensor, banned: list[int]) -> tuple[Tensor, Tensor]:
    """(..., T, V) -> best scores and tokens (..., T) among the ids not in `banned` (special ids, all
    small). One max over the ids above the highest banned one (a view: nothing copied), then each
    allowed id below it in turn (a tie goes to the lower id, as in a max over every id). A model whose
    arg-max is often a banned id (random weights, an EOS at every graph's last vertex) costs no more."""
    first = max(banned) + 1 if banned else 0
    scores, tokens = log_probs[..., first:].max(dim=-1)  # (..., T)
    tokens = tokens + first
    for i in sorted(set(range(first)) - set(banned), reverse=True):
        better = log_probs[..., i] >= scores
        scores, tokens = torch.where(better, log_probs[..., i], scores), tokens.masked_fill(better, i)
    return scores, tokens


def best_tokens(log_probs: Tensor, padding_mask: Tensor, special: SpecialTokens, *,
                allow_eos: bool = False) -> tuple[Tensor, Tensor]:
    """log_probs (C, T, V) -> argmax tokens (C, T) (pad at padding) and their log-probs (0 at pad);
    never a special symbol (eos only with `allow_eos`: fixed-length decoding ends at it)."""
    scores, tokens = argmax_ordinary(log_probs, never_emitted(special, allow_eos=allow_eos))
    return tokens.masked_fill(padding_mask, special.pad), scores.masked_fill(padding_mask, 0.0)


def argmax_pass(model: Any, tokens: Tensor, memory: Any, padding_mask: Tensor,
                special: SpecialTokens, *, allow_eos: bool = False) -> tuple[Tensor, Tensor]:
    """One decoder pass on inputs (C, T) -> argmax tokens (C, T) and their log-probs (C, T)."""
    return best_tokens(model.forward_parallel(tokens, memory, padding_mask), padding_mask, special,
                       allow_eos=allow_eos)


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
    """l length candidates per sentence around the model's predicted length: (B, l) (see top_lengths),
    none beyond the longest the predictor gives this sentence (a finite log-prob): the table's width
    follows the batch's longest source, and a sentence's candidates must not depend on its batch."""
    length_log_probs = model.predict_length(memory)  # (B, Lmax+1)
    lengths = torch.arange(length_log_probs.size(1), device=length_log_probs.device)  # (Lmax+1,)
    longest = torch.where(torch.isfinite(length_log_probs), lengths, 0).amax(dim=1)  # (B,)
    return top_lengths(length_log_probs, l, longest.clamp(min=1))
