"""Greedy AT decoding: the arg-max token at every step, batched, with finished rows dropped.

Length convention (shared with beam.py): max and min lengths count CONTENT tokens, EOS excluded.
A sentence with source length S may emit up to floor(a * S + b) content tokens (lengths.py).
- A hypothesis that emits EOS is finished; EOS is kept in `tokens` and counted in `lengths`.
- A hypothesis that reaches the maximum is finished WITHOUT EOS and without an extra decoder pass.
- EOS is forbidden while fewer than `min_len` content tokens were emitted.
So with min_len == max_len == L every output has exactly L tokens and the search runs L steps.
pad, bos, mask and blank are never emitted. Scores are the model's log-probs after the processors
(masked entries -inf, no renormalisation). A row whose processors rule out every token (min_len with
no-repeat n-grams) ends with the tokens it has and score -inf.

Finished rows leave the batch: when some rows finish, the state is shrunk with one
`model.reorder_state(state, kept_rows)` call, so later steps only pay for live rows (a model may
keep them as masked rows instead: the AT decoder's static-cache step does, to keep its shapes).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from atnat.core.special import SpecialTokens
from atnat.decoding.base import Hypotheses, StepModel, Strategy, register_strategy
from atnat.decoding.lengths import LengthLimits, step_budget
from atnat.decoding.processors import apply_processors_, at_processors


@register_strategy("greedy")
@dataclass(frozen=True)
class Greedy(LengthLimits, Strategy):
    """Arg-max decoding over a step function; N = 1 hypothesis per sentence."""

    requires = "step"

    def search(self, model: StepModel, memory: Any, *, src_lengths: Tensor,
               special: SpecialTokens) -> Hypotheses:
        """memory: the encoder output of B sentences; src_lengths (B,) on the model's device."""
        dev = src_lengths.device
        max_len, T, last_steps = step_budget(self, src_lengths, model.max_output_length)
        B = max_len.numel()
        state = model.init_state(memory, window=self.attention_window, max_steps=T)
        procs = at_processors(special, self.min_len, self.no_repeat_ngram)
        out_tok = torch.full((B, T), special.pad, dtype=torch.long, device=dev)
        out_lp = torch.zeros(B, T, device=dev)
        out_score = torch.zeros(B, device=dev)
        out_len = torch.zeros(B, dtype=torch.long, device=dev)
        tok = out_tok.clone()  # (Bc, T) live rows' tokens so far
        lp = out_lp.clone()  # (Bc, T) their log-probs
        cum = out_score.clone()  # (Bc,) their running scores
        alive = torch.arange(B, device=dev)  # (Bc,) sentence id of each live row
        prev = torch.full((B,), special.bos, dtype=torch.long, device=dev)
        n_steps = 0
        for t in range(T):
            logp, state = model.step(prev, state)  # (Bc, V)
            n_steps += 1
            scores = apply_processors_(procs, tok[:, :t], logp.clone(), t)  # (Bc, V) our copy
            best, prev = scores.max(dim=-1)  # (Bc,)
            stuck = best == float("-inf")  # no token allowed (min_len with no-repeat n-grams): the row ends here
            prev = prev.masked_fill(stuck, special.pad)
            tok[:, t] = prev
            lp[:, t] = best.masked_fill(stuck, 0.0)  # a slot past the row's end, as padding
            cum = cum + best
            done = (prev == special.eos) | stuck
            if t + 1 in last_steps:
                done = done | (max_len <= t + 1)
            n_done = int(done.sum())  # the one sync per step
            if n_done == 0:
                continue
            rows = done.nonzero().squeeze(1)  # (n_done,)
            ids = alive[rows]
            out_tok[ids], out_lp[ids], out_score[ids] = tok[rows], lp[rows], cum[rows]
            out_len[ids] = t + 1 - stuck[rows].long()
            if n_done == done.numel():
                break
            keep = (~done).nonzero().squeeze(1)  # (Bc',)
            state = model.reorder_state(state, keep)
            tok, lp, cum, prev, alive, max_len = (
                x[keep] for x in (tok, lp, cum, prev, alive, max_len))
        width = int(out_len.max())
        return Hypotheses(
            tokens=out_tok[:, None, :width],  # (B, 1, T)
            positional_scores=out_lp[:, None, :width],  # (B, 1, T)
            scores=out_score[:, None],  # (B, 1)
            lengths=out_len[:, None],  # (B, 1)
            n_steps=n_steps,
        )
