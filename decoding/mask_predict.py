"""`mask-predict`: iterative refinement of a conditional masked LM (Ghazvininejad et al. 2019).

Iteration 0 predicts every slot; iteration t re-masks the floor(L (T - t) / T) least confident
tokens of each candidate and re-predicts only those. All length candidates of all sentences go
through one decoder pass per iteration. A candidate with nothing left to re-mask is frozen and
leaves the batch; the loop ends when every candidate is frozen. Freezing per candidate keeps each
sentence's output independent of the rest of the batch.

By default every candidate runs the whole schedule, as the paper's algorithm does (and fairseq with
--iter-decode-force-max-iter). `early_stop: true` freezes a candidate after a pass that changed
none of its re-masked tokens (fairseq's adaptive stop): fewer passes, but such a pass is no fixed
point - the next pass masks fewer slots and sees more context - so it can freeze sentences too
early (what it cost: results/quickstart/notes.md and results/multi30k-deep/).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor

from atnat.core.options import MAX_SEARCH, require_between
from atnat.core.special import SpecialTokens
from atnat.decoding.base import Hypotheses, Strategy, register_strategy
from atnat.decoding.candidates import (
    argmax_pass,
    collect,
    expand_candidates,
    mean_log_prob,
    predicted_lengths,
)


def remask_schedule(lengths: Tensor, iterations: int) -> Tensor:
    """(C,) candidate lengths -> (iterations, C) slots masked at iteration t: floor(L (T - t) / T).

    Row 0 is L (everything masked); the count decreases linearly and never exceeds L - 1 after.
    """
    steps_left = iterations - torch.arange(iterations, device=lengths.device)  # (T,)
    return lengths[None, :] * steps_left[:, None] // iterations  # (T, C)


def lowest_slots(log_probs: Tensor, padding_mask: Tensor, counts: Tensor) -> Tensor:
    """(C, T) token log-probs -> (C, T) True at each row's counts[c] least likely non-pad slots.

    Ties go to the earlier slot; padding is never selected (counts <= length).
    """
    key = log_probs.masked_fill(padding_mask, float("inf"))  # (C, T) pad sorts last
    order = key.argsort(dim=1, stable=True)  # (C, T) slots, least likely first
    rank = order.argsort(dim=1)  # (C, T) each slot's place in that order
    return rank < counts[:, None]


def repredict(model: Any, memory: Any, tokens: Tensor, remask: Tensor, padding_mask: Tensor,
              rows: Tensor, special: SpecialTokens) -> tuple[Tensor, Tensor]:
    """Mask the `remask` slots of tokens (C, T) and run one pass on the candidates `rows` (C',)
    only -> argmax tokens and log-probs (C, T), left as they were outside `rows`."""
    inputs = tokens.masked_fill(remask, special.mask)[rows]  # (C', T)
    if rows.numel() < tokens.size(0):
        memory = model.reorder_memory(memory, rows)
    new_tokens, new_probs = argmax_pass(model, inputs, memory, padding_mask[rows], special)
    probs = new_probs.new_zeros(tokens.shape).index_copy(0, rows, new_probs)  # (C, T)
    return tokens.index_copy(0, rows, new_tokens), probs


@register_strategy("mask-predict")
@dataclass(frozen=True)
class MaskPredict(Strategy):
    """Mask-predict over a length beam; candidates ranked by mean token log-prob.

    n_steps counts the decoder passes actually run for the batch (fewer than `iterations` once
    every candidate is frozen: with no slot left to re-mask, or converged under early_stop).
    """

    requires: ClassVar[str] = "parallel"
    label_options: ClassVar[tuple[str, ...]] = ("iterations", "length_beam")

    iterations: int = 10  # T: decoder passes at most, the first one included
    length_beam: int = 1  # predicted lengths tried per sentence (argmax, -1, +1, ...)
    early_stop: bool = False  # freeze a candidate after a pass that changed none of its tokens (fairseq's
    # adaptive stop; off: every candidate runs all `iterations`, the paper's procedure)
    record_history: bool = field(default=False, metadata={"in_label": False})  # keep the winner's tokens
    # after every pass, each (B, T) (what is recorded, not how it decodes: not in the label)

    def __post_init__(self) -> None:
        for name in ("iterations", "length_beam"):
            require_between(getattr(self, name), 1, MAX_SEARCH, f"strategy {self.registered_name!r}", name)

    @property
    def short_label(self) -> str:
        return f"mask-predict-{self.iterations}" + (f"-lb{self.length_beam}" if self.length_beam > 1 else "")

    def search(self, model: Any, memory_or_state: Any, *, src_lengths: Tensor,
               special: SpecialTokens) -> Hypotheses:
        """-> Hypotheses (B, length_beam, T), best first; history of the best candidate."""
        lengths = predicted_lengths(model, memory_or_state, self.length_beam)  # (B, l)
        tokens, padding_mask, memory = expand_candidates(model, memory_or_state, lengths, special)
        flat = lengths.reshape(-1)  # (B*l,)
        counts = remask_schedule(flat, self.iterations)  # (T, B*l)
        tokens, probs = argmax_pass(model, tokens, memory, padding_mask, special)  # (B*l, T)
        done = torch.zeros_like(flat, dtype=torch.bool)  # (B*l,) candidates no longer refined
        history = [tokens]
        for t in range(1, self.iterations):
            remask = lowest_slots(probs, padding_mask, counts[t]) & ~done[:, None]  # (B*l, T)
            done = done | ~remask.any(dim=1)  # nothing to re-mask: counts only decrease
            if bool(done.all()):
                break
            new_tokens, new_probs = repredict(model, memory, tokens, remask, padding_mask,
                                              torch.nonzero(~done).squeeze(1), special)
            if self.early_stop:
                done = done | ~((new_tokens != tokens) & remask).any(dim=1)
            tokens = torch.where(remask, new_tokens, tokens)
            probs = torch.where(remask, new_probs, probs)
            history.append(tokens)
            if bool(done.all()):
                break
        return collect(tokens, probs, flat, mean_log_prob(probs, flat), self.length_beam,
                       n_steps=len(history), history=history if self.record_history else None)
