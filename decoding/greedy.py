"""Greedy AT decoding: the arg-max token at every step, batched, with finished rows dropped.

Length convention (shared with beam.py): max and min lengths count CONTENT tokens, EOS excluded.
A sentence with source length S may emit up to `max_lengths(S, a, b, cap)` content tokens.
- A hypothesis that emits EOS is finished; EOS is kept in `tokens` and counted in `lengths`.
- A hypothesis that reaches the maximum is finished WITHOUT EOS and without an extra decoder pass.
- EOS is forbidden while fewer than `min_len` content tokens were emitted.
So with min_len == max_len == L every output has exactly L tokens and the search runs L steps.
pad, bos, mask and blank are never emitted. Scores are the model's log-probs after the processors
(masked entries -inf, no renormalisation).

Finished rows leave the batch: when some rows finish, the state is shrunk with one
`model.reorder_state(state, kept_rows)` call, so later steps only pay for live rows.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from atnat.decoding.base import (
    Hypotheses, SpecialTokens, StepModel, Strategy, max_lengths, register_strategy,
)
from atnat.decoding.processors import apply_processors_, at_processors
from atnat.models.errors import AtnatError


def check_lengths(cfg: Any) -> None:
    """Validate the length options shared by the AT strategies (greedy, beam)."""
    for name, low in (("max_len_cap", 1), ("min_len", 0), ("no_repeat_ngram", 0)):
        value = getattr(cfg, name)
        if not isinstance(value, int) or value < low:
            raise AtnatError(f"{type(cfg).__name__}.{name} must be an integer >= {low}, "
                             f"got {value!r}")
    if cfg.max_len_a < 0:
        raise AtnatError(f"{type(cfg).__name__}.max_len_a must be >= 0, got {cfg.max_len_a!r}")


def length_budget(cfg: Any, src_lengths: Tensor) -> tuple[Tensor, int, set[int]]:
    """-> max content tokens per sentence (B,) on src_lengths' device, their maximum T, and the
    set of step counts after which some sentence reaches its maximum (known on the host)."""
    max_len = max_lengths(src_lengths, cfg.max_len_a, cfg.max_len_b, cfg.max_len_cap)
    max_len = max_len.to(src_lengths.device)
    return max_len, int(max_len.max()), set(max_len.tolist())


@dataclass(frozen=True)
class LengthLimits:
    """Length options shared by the AT strategies (greedy, beam)."""

    max_len_a: float = 2.0  # max content tokens = floor(a * source length + b) ...
    max_len_b: int = 10  # ... (see max_len_a) ...
    max_len_cap: int = 1024  # ... and never more than this
    min_len: int = 0  # EOS forbidden before this many content tokens
    no_repeat_ngram: int = 0  # forbid repeating any n-gram of this order (0: off)
    attention_window: tuple[int, int] | None = None  # decode-time monotonic cross-attention window
    # (back, forward) around the source position attended last; handed to the model's init_state

    def max_steps(self, src_lengths: Tensor) -> int:
        """The most steps the search can run for these sources (one host sync)."""
        return int(max_lengths(src_lengths, self.max_len_a, self.max_len_b, self.max_len_cap).max())

    def __post_init__(self) -> None:
        check_lengths(self)
        w = self.attention_window
        if w is not None and not (len(w) == 2 and all(isinstance(x, int) and x >= 0 for x in w)):
            raise AtnatError(f"{type(self).__name__}.attention_window must be [back, forward] (integers >= 0), got {w!r}")


@register_strategy("greedy")
@dataclass(frozen=True)
class Greedy(LengthLimits, Strategy):
    """Arg-max decoding over a step function; N = 1 hypothesis per sentence."""

    requires = "step"

    def search(self, model: StepModel, state: Any, *, src_lengths: Tensor,
               special: SpecialTokens) -> Hypotheses:
        """state: the model's initial state for B rows; src_lengths (B,) on the model's device."""
        dev = src_lengths.device
        max_len, T, last_steps = length_budget(self, src_lengths)  # (B,), max, host set
        B = max_len.numel()
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
            tok[:, t] = prev
            lp[:, t] = best
            cum = cum + best
            done = prev == special.eos
            if t + 1 in last_steps:
                done = done | (max_len <= t + 1)
            n_done = int(done.sum())  # the one sync per step
            if n_done == 0:
                continue
            rows = done.nonzero().squeeze(1)  # (n_done,)
            ids = alive[rows]
            out_tok[ids], out_lp[ids], out_score[ids] = tok[rows], lp[rows], cum[rows]
            out_len[ids] = t + 1
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
