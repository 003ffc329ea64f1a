"""Beam search over a step function, batched as B sentences x K beams in one (B*K) step call.

Lengths follow greedy.py: max/min lengths count content tokens (EOS excluded); EOS, when emitted,
is kept and counted in `lengths`; a beam reaching the maximum is finished without EOS and without
an extra pass. |Y| below is the hypothesis length with EOS (when present).

Per step, the top 2K candidates over (K*V) are ranked; EOS candidates ranked among the top K join
the sentence's finished list (fairseq's rule: with K = 1 and length_norm "none", or stopping "fairseq",
this is exactly greedy; a length-normalised K = 1 search may go on past EOS and pick longer), and the best K
non-EOS candidates continue. The finished list keeps the K best by normalised score, so a finished
hypothesis is only ever displaced by a better one. Ranking score: "none" raw log-prob, "length"
log-prob / |Y|, "gnmt" log-prob / ((5 + |Y|) / 6) ** alpha.

A sentence stops at its maximum length, when no beam is live, or by `stopping`:
- "heuristic" (default): when its n_best-th finished score >= best live log-prob / lp(t + 2),
  i.e. no live beam would enter the n-best if it ended at the next step. Exact for "none"
  (log-probs only fall; the output is what running on would give), a heuristic otherwise (as
  Hugging Face's early_stopping=False).
- "exact": the same with lp(max length), the largest the normaliser can reach: the n-best list is
  final (slower: normalised runs rarely stop before the maximum).
- "fairseq": as soon as it has K finished hypotheses (fast; misses late good endings when EOS
  ranks high early, e.g. on peaked models).
Stopped sentences leave the batch at the next `reorder_state`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from atnat.core.options import MAX_SEARCH, require, require_between, require_choice, require_number_between
from atnat.core.special import NEG_INF, SpecialTokens
from atnat.decoding.base import Hypotheses, StepModel, Strategy, register_strategy
from atnat.decoding.lengths import LengthLimits, step_budget
from atnat.decoding.processors import apply_processors_, at_processors

LENGTH_NORMS = ("none", "length", "gnmt")
STOPPING = ("heuristic", "exact", "fairseq")
MAX_ALPHA = 10.0  # ((5 + 1024) / 6) ** 10 ~ 2e22, well inside float32 (it overflows near 17; GNMT uses 0.6-1)


@dataclass
class _Pool:
    """The K best finished hypotheses of each live sentence, best first."""

    score: Tensor  # (Bc, K) normalised scores, -inf where empty
    tok: Tensor  # (Bc, K, T) tokens, padded (pad is never emitted: lengths = non-pad count)
    lp: Tensor  # (Bc, K, T) per-token log-probs, 0 at padding

    @classmethod
    def empty(cls, B: int, K: int, T: int, pad: int, device: torch.device) -> "_Pool":
        return cls(torch.full((B, K), NEG_INF, device=device),
                   torch.full((B, K, T), pad, dtype=torch.long, device=device),
                   torch.zeros(B, K, T, device=device))

    def merge(self, score: Tensor, tok: Tensor, lp: Tensor) -> "_Pool":
        """Add candidates score (Bc, C) (-inf: not finished) with tok, lp (Bc, C, T)."""
        K, T = self.score.size(1), self.tok.size(2)
        best, pick = torch.cat([self.score, score], 1).topk(K, dim=1)  # (Bc, K) of K+C
        pick = pick.unsqueeze(2).expand(-1, -1, T)  # (Bc, K, T)
        return _Pool(best, torch.cat([self.tok, tok], 1).gather(1, pick),
                     torch.cat([self.lp, lp], 1).gather(1, pick))

    def rows(self, index: Tensor) -> "_Pool":
        return _Pool(self.score[index], self.tok[index], self.lp[index])


@register_strategy("beam")
@dataclass(frozen=True)
class Beam(LengthLimits, Strategy):
    """Beam search with length normalisation; returns the n_best hypotheses, best first."""

    requires = "step"
    label_options: ClassVar[tuple[str, ...]] = ("beam_size",)

    beam_size: int = 5  # K: live hypotheses per sentence and size of the finished list
    n_best: int = 1  # hypotheses returned per sentence (<= beam_size)
    length_norm: str = "gnmt"  # ranking of finished hypotheses: "none", "length" or "gnmt"
    alpha: float = 1.0  # GNMT length-penalty exponent: lp = ((5 + |Y|) / 6) ** alpha
    stopping: str = "heuristic"  # when a sentence stops: "heuristic", "exact" or "fairseq"

    def __post_init__(self) -> None:
        super().__post_init__()
        owner = f"strategy {self.registered_name!r}"
        require_choice(self.length_norm, LENGTH_NORMS, owner, "length_norm")
        require_choice(self.stopping, STOPPING, owner, "stopping")
        require_number_between(self.alpha, 0, MAX_ALPHA, owner, "alpha",  # a negative one shrinks lp with length:
                               "a safe limit: far beyond, the GNMT normaliser leaves float32 range and every "
                               "score ties at 0")  # "exact"'s bound fails
        require_between(self.beam_size, 1, MAX_SEARCH, owner, "beam_size")
        require(isinstance(self.n_best, int) and 1 <= self.n_best <= self.beam_size, owner, "n_best",
                f"an integer in 1..beam_size ({self.beam_size})", self.n_best)

    @property
    def short_label(self) -> str:
        return f"beam{self.beam_size}"

    def normaliser(self, length: int | Tensor) -> float | Tensor:
        """Divisor of the log-prob of a hypothesis of `length` tokens (EOS included)."""
        if self.length_norm == "length":
            return 1.0 * length
        if self.length_norm == "gnmt":
            return ((5.0 + length) / 6.0) ** self.alpha
        return 1.0

    def search(self, model: StepModel, memory: Any, *, src_lengths: Tensor,
               special: SpecialTokens) -> Hypotheses:
        """memory: the encoder output of B sentences; src_lengths (B,) on the model's device."""
        K, dev, pad = self.beam_size, src_lengths.device, special.pad
        max_len, T, last_steps = step_budget(self, src_lengths, model.max_output_length)
        B = max_len.numel()
        state = model.init_state(memory, window=self.attention_window, max_steps=T)
        procs = at_processors(special, self.min_len, self.no_repeat_ngram)
        if K > 1:  # K copies of each row, beams of a sentence contiguous
            state = model.reorder_state(state, torch.arange(B, device=dev).repeat_interleave(K))
        prev = torch.full((B, K), special.bos, dtype=torch.long, device=dev)  # (Bc, K) inputs
        cum = torch.zeros(B, K, device=dev)  # (Bc, K) running log-prob of each live beam
        cum[:, 1:] = NEG_INF  # step 0: only beam 0 is live, no K copies of one prefix
        seq = torch.full((B * K, T), pad, dtype=torch.long, device=dev)  # (Bc*K, T) tokens
        seq_lp = torch.zeros(B * K, T, device=dev)  # (Bc*K, T) their log-probs
        pool, out = _Pool.empty(B, K, T, pad, dev), _Pool.empty(B, self.n_best, T, pad, dev)
        alive = torch.arange(B, device=dev)  # (Bc,) sentence id of each live sentence
        base = torch.arange(0, B * K, K, device=dev).unsqueeze(1)  # (Bc, 1) first row of each
        for t in range(T):
            logp, state = model.step(prev.view(-1), state)  # (Bc*K, V)
            cand = logp + cum.view(-1, 1)  # (Bc*K, V) a new tensor: masked in place below
            apply_processors_(procs, seq[:, :t], cand, t)
            top, idx, is_eos, cum, sel_idx, prev = self._select(cand, special.eos)
            order = sel_idx // logp.size(-1) + base  # (Bc, K) input rows the live beams extend
            old = (seq, seq_lp)  # the prefixes this step's finished candidates extend
            seq, seq_lp = seq[order.view(-1)], seq_lp[order.view(-1)]  # (Bc*K, T)
            seq[:, t] = prev.view(-1)
            seq_lp[:, t] = logp.reshape(cum.size(0), -1).gather(1, sel_idx).view(-1)
            last = max_len <= t + 1 if t + 1 in last_steps else None  # (Bc,)
            if last is None and not bool(is_eos[:, :K].any()  # nothing ends: one sync
                                         | self._stop(cum, pool, t, max_len).any()):
                state = model.reorder_state(state, order.view(-1))
                continue
            pool = self._finish(pool, (top, idx, is_eos), logp, old, (seq, seq_lp), cum, last,
                                t, special.eos)
            done = self._stop(cum, pool, t, max_len, last)  # (Bc,)
            n_done = int(done.sum())
            if n_done:
                rows = done.nonzero().squeeze(1)  # (n_done,)
                _write(out, alive[rows], pool.rows(rows))
                if n_done == done.numel():
                    break
                keep = (~done).nonzero().squeeze(1)  # (Bc',)
                alive, max_len, cum, prev, order, pool = (
                    alive[keep], max_len[keep], cum[keep], prev[keep], order[keep], pool.rows(keep))
                seq, seq_lp = (x.view(-1, K, T)[keep].view(-1, T) for x in (seq, seq_lp))
                base = base[: keep.numel()]  # (Bc', 1)
            state = model.reorder_state(state, order.view(-1))
        return _hypotheses(out, t + 1, pad)

    def _select(self, cand: Tensor, eos: int) -> tuple[Tensor, ...]:
        """cand (Bc*K, V) scores of every extension -> top, idx, is_eos (Bc, C): the 2K best over
        K*V (flat ids), best first; cum, sel_idx, prev (Bc, K): the K best non-EOS among them."""
        K, V = self.beam_size, cand.size(-1)
        top, idx = cand.reshape(-1, K * V).topk(min(2 * K, K * V), dim=1)  # (Bc, C)
        tok = idx % V  # (Bc, C)
        is_eos = tok == eos
        cum, sel = top.masked_fill(is_eos, NEG_INF).topk(K, dim=1)  # (Bc, K)
        return top, idx, is_eos, cum, idx.gather(1, sel), tok.gather(1, sel)

    def _finish(self, pool: _Pool, ranked: tuple[Tensor, Tensor, Tensor], logp: Tensor,
                old: tuple[Tensor, Tensor], new: tuple[Tensor, Tensor], cum: Tensor,
                last: Tensor | None, t: int, eos: int) -> _Pool:
        """Merge the hypotheses finishing at step t into the pool: EOS candidates ranked in the
        top K, and for sentences at their last step (last (Bc,)) the K live beams, without EOS."""
        top, idx, is_eos = ranked  # (Bc, C)
        Bc, K = cum.shape
        T, V = old[0].size(1), logp.size(-1)
        rows = (idx[:, :K] // V + torch.arange(0, Bc * K, K, device=cum.device)[:, None]).view(-1)
        tok, lp = old[0][rows], old[1][rows]  # (Bc*K, T) prefixes of the top-K candidates
        tok[:, t] = eos
        lp[:, t] = logp.reshape(Bc, K * V).gather(1, idx[:, :K]).view(-1)
        score = top[:, :K].masked_fill(~is_eos[:, :K], NEG_INF)  # (Bc, K)
        tok, lp = tok.view(Bc, K, T), lp.view(Bc, K, T)
        if last is not None:
            score = torch.cat([score, cum.masked_fill(~last.unsqueeze(1), NEG_INF)], 1)  # (Bc, 2K)
            tok = torch.cat([tok, new[0].view(Bc, K, T)], 1)  # (Bc, 2K, T)
            lp = torch.cat([lp, new[1].view(Bc, K, T)], 1)  # (Bc, 2K, T)
        div = self.normaliser(t + 1)  # every hypothesis finishing now has t + 1 tokens
        return pool.merge(score if div == 1.0 else score / div, tok, lp)

    def _stop(self, cum: Tensor, pool: _Pool, t: int, max_len: Tensor,
              last: Tensor | None = None) -> Tensor:
        """(Bc,) sentences that stop after step t (see `stopping` in the module docstring)."""
        if self.stopping == "fairseq":
            done = (cum[:, 0] == NEG_INF) | (pool.score[:, -1] > NEG_INF)
        else:  # the best a live beam could still score vs the n-th best finished one
            ends = max_len if self.stopping == "exact" else t + 2  # |Y| giving the highest bound
            div = self.normaliser(ends)
            bound = cum[:, 0] if self.length_norm == "none" else cum[:, 0] / div  # (Bc,)
            done = pool.score[:, self.n_best - 1] >= bound  # also true when no beam is live
        return done if last is None else done | last


def _write(out: _Pool, ids: Tensor, done: _Pool) -> None:
    """Copy the n best of finished sentences into the output rows `ids` (B-indexed)."""
    n = out.score.size(1)
    out.score[ids] = done.score[:, :n]
    out.tok[ids] = done.tok[:, :n]
    out.lp[ids] = done.lp[:, :n]


def _hypotheses(out: _Pool, n_steps: int, pad: int) -> Hypotheses:
    """Hypotheses from the output pool; slots without a finite hypothesis are empty (-inf)."""
    empty = (out.score == NEG_INF).unsqueeze(2)  # (B, N, 1)
    tok = out.tok.masked_fill(empty, pad)  # (B, N, T)
    length = (tok != pad).sum(2)  # (B, N): pad is never emitted
    width = int(length.max()) if length.numel() else 0
    return Hypotheses(
        tokens=tok[:, :, :width],  # (B, N, T)
        positional_scores=out.lp[:, :, :width].masked_fill(empty, 0.0),  # (B, N, T)
        scores=out.score,  # (B, N)
        lengths=length,  # (B, N)
        n_steps=n_steps,
    )
