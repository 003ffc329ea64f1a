"""`npd`: noisy parallel decoding (Gu et al. 2018): many NAT candidates, re-ranked by an AT teacher.

Candidates are the argmax output for each of l lengths around the predicted one (argmax, -1, +1, ...), plus optional samples
drawn from the same pass's distributions; all come from ONE NAT pass. The teacher scores them all
in one teacher-forced batch through the `scorer` the caller passes.
n_steps counts NAT passes only (always 1); npd always adds exactly one teacher pass on top.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import torch
from torch import Tensor

from atnat.core.errors import AtnatError
from atnat.core.options import MAX_SEARCH, require_between, require_number_between
from atnat.core.special import SpecialTokens
from atnat.decoding.base import Hypotheses, Strategy, register_strategy
from atnat.decoding.candidates import (
    best_tokens,
    collect,
    expand_candidates,
    never_emitted,
    predicted_lengths,
)

# tokens (C, T), padding_mask (C, T), sentence_index (C,) -> (C,) total teacher log-prob incl. EOS
Scorer = Callable[[Tensor, Tensor, Tensor], Tensor]
MIN_TEMPERATURE, MAX_TEMPERATURE = 1e-6, 1e6  # near 0: the best token of each slot; large: near uniform


def sample_tokens(log_probs: Tensor, padding_mask: Tensor, n: int, *, temperature: float,
                  seeds: list[int], special: SpecialTokens) -> tuple[Tensor, Tensor]:
    """Draw n outputs per row from log_probs (C, T, V) / temperature, slots independent. Row c draws from its
    own generator seeded seeds[c], over its own slots only: what it draws does not depend on the other rows
    or the padded width (a sentence's samples are the same alone and in any batch).

    -> tokens (C, n, T) (pad at padding) and their log-probs under log_probs (C, n, T), 0 at pad.
    """
    C, T, V = log_probs.shape
    safe = log_probs.masked_fill(padding_mask[..., None], 0.0)  # (C, T, V) pad rows harmless
    banned = torch.tensor(never_emitted(special), device=log_probs.device)
    allowed = safe.index_fill(-1, banned, float("-inf"))  # (C, T, V) never a special
    # shifted by each slot's best before the division: a temperature near 0 then samples that best, not NaN
    probs = ((allowed - allowed.amax(-1, keepdim=True)) / temperature).softmax(dim=-1)
    ids = torch.full((C, T, n), special.pad, dtype=torch.long, device=log_probs.device)  # (C, T, n)
    for c in range(C):
        slots = ~padding_mask[c]  # (T,)
        generator = torch.Generator(device=log_probs.device).manual_seed(seeds[c])
        ids[c, slots] = torch.multinomial(probs[c, slots], n, replacement=True, generator=generator)
    scores = safe.gather(2, ids).transpose(1, 2)  # (C, n, T)
    pad = padding_mask[:, None, :]  # (C, 1, T)
    return ids.transpose(1, 2).masked_fill(pad, special.pad), scores.masked_fill(pad, 0.0)


@register_strategy("npd")
@dataclass(frozen=True)
class NoisyParallel(Strategy):
    """One NAT pass over several lengths (and samples), the teacher picks; N = candidates kept."""

    requires: ClassVar[str] = "parallel"
    needs_scorer: ClassVar[bool] = True
    label_options: ClassVar[tuple[str, ...]] = ("length_beam",)

    length_beam: int = 5  # predicted lengths tried per sentence (argmax, -1, +1, ...)
    samples_per_length: int = 0  # extra candidates per length, sampled from the same pass
    temperature: float = 1.0  # sampling temperature (divides the log-probs)
    seed: int = 0  # seed of the sampling generator (same seed, same candidates)
    normalize: bool = True  # rank by teacher score / (length + 1), the +1 being the EOS

    def __post_init__(self) -> None:
        owner = f"strategy {self.registered_name!r}"
        require_number_between(self.temperature, MIN_TEMPERATURE, MAX_TEMPERATURE, owner, "temperature",
                               "safe limits: at 0 in float32 the division gives NaN probabilities")
        require_between(self.length_beam, 1, MAX_SEARCH, owner, "length_beam")
        require_between(self.samples_per_length, 0, MAX_SEARCH, owner, "samples_per_length")
        require_between(self.seed, 0, 2**63 - 1, owner, "seed")

    @property
    def short_label(self) -> str:
        return f"{self.registered_name}-{self.length_beam}"

    def search(self, model: Any, memory_or_state: Any, *, src_lengths: Tensor,
               special: SpecialTokens, scorer: Scorer | None = None) -> Hypotheses:
        """-> Hypotheses (B, length_beam * (1 + samples_per_length), T) ranked by the teacher.

        positional_scores are the NAT pass's log-probs; scores are the teacher's.
        """
        if scorer is None:
            raise AtnatError("strategy 'npd' needs an AT teacher to re-rank its candidates: pass "
                             "scorer=(tokens, padding_mask, sentence_index) -> total log-probs")
        lengths = predicted_lengths(model, memory_or_state, self.length_beam)  # (B, l)
        tokens, padding_mask, memory = expand_candidates(model, memory_or_state, lengths, special)
        log_probs = model.forward_parallel(tokens, memory, padding_mask)  # (B*l, T, V)
        tokens, positional = best_tokens(log_probs, padding_mask, special)  # (B*l, T)
        m = 1 + self.samples_per_length
        if m > 1:
            # the j-th length of every sentence draws from the generator seeded (seed, j)
            seeds = [(self.seed + (c % self.length_beam) * 0x9E3779B97F4A7C15) % 2**63 for c in range(tokens.size(0))]
            drawn, drawn_scores = sample_tokens(
                log_probs, padding_mask, m - 1, temperature=self.temperature,
                seeds=seeds, special=special)  # (B*l, m-1, T)
            tokens = torch.cat([tokens[:, None], drawn], 1).flatten(0, 1)  # (B*l*m, T)
            positional = torch.cat([positional[:, None], drawn_scores], 1).flatten(0, 1)
            padding_mask = padding_mask.repeat_interleave(m, dim=0)  # (B*l*m, T)
        flat = lengths.reshape(-1).repeat_interleave(m)  # (B*l*m,)
        per_sentence = self.length_beam * m
        sentence = torch.arange(lengths.size(0), device=flat.device).repeat_interleave(per_sentence)
        scores = scorer(tokens, padding_mask, sentence)  # (B*l*m,)
        if scores.shape != flat.shape:
            raise ValueError(f"npd scorer returned shape {tuple(scores.shape)}, "
                             f"expected {tuple(flat.shape)}")
        if self.normalize:
            scores = scores / (flat + 1).to(scores.dtype)
        return collect(tokens, positional, flat, scores, per_sentence, n_steps=1)
