"""`parallel`: one NAT pass, argmax at every slot (Gu et al. 2018 without refinement).

The output length comes either from the length predictor ("predicted", optionally a length beam)
or from a fixed budget a * S + b of mask slots cut at the first EOS the model emits ("fixed": the
classic alternative to a length predictor).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from atnat.core.options import MAX_SEARCH, require, require_between, require_choice
from atnat.core.special import SpecialTokens, check_length_rule, length_budget
from atnat.decoding.base import Hypotheses, Strategy, register_strategy
from atnat.decoding.candidates import (
    all_mask_inputs,
    argmax_pass,
    collect,
    decode_lengths,
    mean_log_prob,
    predicted_lengths,
)

LENGTH_MODES = ("predicted", "fixed")


def cut_at_eos(tokens: Tensor, positional_scores: Tensor, slots: Tensor,
               special: SpecialTokens) -> tuple[Tensor, Tensor, Tensor]:
    """Cut each row (C, T) before its first EOS (EOS excluded; no EOS: keep all its slots (C,)).

    -> tokens (C, T) padded after the cut, their log-probs (0 after the cut), lengths (C,).
    """
    positions = torch.arange(tokens.size(1), device=tokens.device)[None, :]  # (1, T)
    is_eos = (tokens == special.eos) & (positions < slots[:, None])  # (C, T)
    first_eos = is_eos.long().argmax(dim=1)  # (C,) first True, 0 when none
    lengths = torch.where(is_eos.any(dim=1), first_eos, slots)  # (C,)
    cut = positions >= lengths[:, None]  # (C, T)
    return tokens.masked_fill(cut, special.pad), positional_scores.masked_fill(cut, 0.0), lengths


@register_strategy("parallel")
@dataclass(frozen=True)
class Parallel(Strategy):
    """A single parallel pass with argmax at every slot; n_steps = 1."""

    requires: ClassVar[str] = "parallel"
    label_options: ClassVar[tuple[str, ...]] = ("length", "length_beam")

    length_beam: int = 1  # predicted lengths tried per sentence (winner: mean token log-prob)
    length: str = "predicted"  # "predicted" (length predictor) or "fixed" (a*S+b slots, cut at EOS)
    fixed_len_a: float = 2.0  # "fixed": slots = floor(a * S + b), at least 1
    fixed_len_b: int = 10  # "fixed": see fixed_len_a

    def __post_init__(self) -> None:
        owner = f"strategy {self.registered_name!r}"
        require_choice(self.length, LENGTH_MODES, owner, "length")
        require_between(self.length_beam, 1, MAX_SEARCH, owner, "length_beam")
        check_length_rule(self.fixed_len_a, self.fixed_len_b, owner, "fixed_len", "slots per source token")
        require(self.length != "fixed" or self.length_beam == 1, owner, "length_beam",
                "1 with length 'fixed' (a fixed budget gives one candidate)", self.length_beam)

    @property
    def short_label(self) -> str:
        return "parallel" + ("-fixed" if self.length == "fixed" else "") + (
            f"-lb{self.length_beam}" if self.length_beam > 1 else "")

    def search(self, model: Any, memory_or_state: Any, *, src_lengths: Tensor,
               special: SpecialTokens) -> Hypotheses:
        """-> Hypotheses (B, length_beam, T) ("predicted") or (B, 1, slots) ("fixed")."""
        if self.length == "predicted":
            lengths = predicted_lengths(model, memory_or_state, self.length_beam)
            return decode_lengths(model, memory_or_state, lengths, special)
        slots = length_budget(src_lengths, self.fixed_len_a, self.fixed_len_b)  # (B,)
        tokens, padding_mask = all_mask_inputs(slots, special)  # (B, T)
        tokens, positional = argmax_pass(model, tokens, memory_or_state, padding_mask, special, allow_eos=True)
        tokens, positional, lengths = cut_at_eos(tokens, positional, slots, special)
        return collect(tokens, positional, lengths, mean_log_prob(positional, lengths), 1,
                       n_steps=1)
