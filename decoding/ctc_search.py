"""`ctc`: decoding a CTC NAT (Libovicky & Helcl 2018): one pass over T' upsampled slots.

beam_size 1 is best-path decoding (argmax per slot, merge repeats, drop blanks), scored by the
path's log-prob. beam_size > 1 is CTC prefix beam search, scored by the log-prob of the output
summed over all its alignments. Both run one decoder pass (n_steps = 1).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import torch
from torch import Tensor

from atnat.core.options import MAX_SEARCH, require_between
from atnat.core.special import NEG_INF, SpecialTokens
from atnat.decoding.base import Hypotheses, Strategy, register_strategy
from atnat.decoding.candidates import argmax_ordinary, never_emitted


def kept_slots(ids: Tensor, padding_mask: Tensor, blank: int) -> Tensor:
    """Alignment ids (B, T') -> (B, T') True at the first slot of each run of a non-blank token."""
    previous = torch.cat([torch.full_like(ids[:, :1], -1), ids[:, :-1]], dim=1)  # (B, T')
    return (ids != blank) & (ids != previous) & ~padding_mask


def compact(values: Tensor, keep: Tensor, fill: float | int) -> tuple[Tensor, Tensor]:
    """Move the kept entries of each row (B, T') to the front, in order -> (B, T) with T the most
    kept in a row (at least 1), `fill` after; and the counts (B,)."""
    lengths = keep.sum(dim=1)  # (B,)
    order = (~keep).long().argsort(dim=1, stable=True)  # (B, T') kept slots first
    T = max(1, int(lengths.max())) if lengths.numel() else 1
    out = values.gather(1, order)[:, :T]  # (B, T)
    beyond = torch.arange(T, device=values.device)[None, :] >= lengths[:, None]  # (B, T)
    return out.masked_fill(beyond, fill), lengths


def ctc_collapse(ids: Tensor, padding_mask: Tensor, blank: int,
                 slot_log_probs: Tensor | None = None) -> tuple[list[list[int]], list[list[float]]]:
    """Best-path collapse of alignments (B, T'): merge repeats, then drop blanks; pad ignored.

    -> the outputs as id lists, and per token the log-prob of the first slot of its run, taken
    from slot_log_probs (B, T') (zeros when not given).
    """
    keep = kept_slots(ids, padding_mask, blank)  # (B, T')
    tokens, lengths = compact(ids, keep, 0)
    scores = torch.zeros(ids.shape, device=ids.device) if slot_log_probs is None else slot_log_probs
    scores, _ = compact(scores, keep, 0.0)
    n = lengths.tolist()
    return ([row[:k] for row, k in zip(tokens.tolist(), n)],
            [row[:k] for row, k in zip(scores.tolist(), n)])


def best_path(log_probs: Tensor, padding_mask: Tensor, special: SpecialTokens) -> Hypotheses:
    """log_probs (B, T', V) -> Hypotheses (B, 1, T); score = log-prob of the best path (over
    blank and ordinary tokens: a slot never emits pad, bos, eos or mask)."""
    slot_scores, ids = argmax_ordinary(log_probs, never_emitted(special, allow_blank=True))  # (B, T')
    slot_scores = slot_scores.masked_fill(padding_mask, 0.0)
    keep = kept_slots(ids, padding_mask, special.blank)  # (B, T')
    tokens, lengths = compact(ids, keep, special.pad)  # (B, T)
    positional, _ = compact(slot_scores, keep, 0.0)  # (B, T)
    return Hypotheses(tokens=tokens[:, None], positional_scores=positional[:, None],
                      scores=slot_scores.sum(dim=1)[:, None], lengths=lengths[:, None], n_steps=1)


class Beams(NamedTuple):
    """Prefix beam state: K distinct output prefixes per sentence."""

    prefix: Tensor  # (B, K, T') output ids so far (0 beyond length)
    positional: Tensor  # (B, K, T') log-prob of the slot where each token was emitted
    length: Tensor  # (B, K) tokens in the prefix
    last: Tensor  # (B, K) last token of the prefix, -1 when empty
    blank: Tensor  # (B, K) log-prob of the prefix over alignments ending in blank
    nonblank: Tensor  # (B, K) log-prob of the prefix over alignments ending in its last token


def child_of(beams: Beams) -> Tensor:
    """-> (B, K', K) True where alive prefix k' is alive prefix k plus one token."""
    T = beams.prefix.size(2)
    same = beams.prefix[:, :, None, :] == beams.prefix[:, None, :, :]  # (B, K', K, T')
    inside = torch.arange(T, device=same.device) < beams.length[:, None, :, None]  # (B, 1, K, T')
    one_longer = beams.length[:, :, None] == beams.length[:, None, :] + 1  # (B, K', K)
    alive = torch.logaddexp(beams.blank, beams.nonblank) > NEG_INF  # (B, K)
    return (same | ~inside).all(dim=3) & one_longer & alive[:, :, None] & alive[:, None, :]


def beam_step(beams: Beams, lp: Tensor, blank: int, banned: Tensor | None = None) -> Beams:
    """Advance by one slot with its log-probs lp (B, V); keep the K best distinct prefixes.
    `banned` (n,) ids are never appended (pad, bos, eos, mask)."""
    (B, K), V = beams.length.shape, lp.size(1)
    total = torch.logaddexp(beams.blank, beams.nonblank)  # (B, K)
    last = beams.last.clamp(min=0)  # (B, K)
    stay_blank = lp[:, blank, None] + total
    stay_nonblank = torch.where(beams.length > 0, lp.gather(1, last) + beams.nonblank, NEG_INF)
    repeat = torch.arange(V, device=lp.device) == beams.last[:, :, None]  # (B, K, V)
    ext = lp[:, None, :] + torch.where(repeat, beams.blank[..., None], total[..., None])  # (B,K,V)
    ext[:, :, blank] = NEG_INF  # ext is a fresh tensor
    if banned is not None:
        ext[:, :, banned] = NEG_INF
    child = child_of(beams)  # (B, K', K)
    gained = ext.gather(2, last[:, None, :].expand(B, K, K)).transpose(1, 2)  # (B, K', K)
    stay_nonblank = torch.logaddexp(stay_nonblank, gained.masked_fill(~child, NEG_INF).logsumexp(2))
    one_hot = torch.nn.functional.one_hot(last, V).to(lp.dtype)  # (B, K', V)
    merged = child.transpose(1, 2).to(lp.dtype) @ one_hot > 0  # (B, K, V) now a stay candidate
    cand_blank = torch.cat([stay_blank, torch.full((B, K * V), NEG_INF, device=lp.device)], 1)
    cand_nonblank = torch.cat([stay_nonblank, ext.masked_fill(merged, NEG_INF).flatten(1)], 1)
    pick = torch.logaddexp(cand_blank, cand_nonblank).topk(K, dim=1).indices  # (B, K)
    is_ext = pick >= K  # picks index K stays, then K*V extensions
    parent = torch.where(is_ext, (pick - K) // V, pick)  # (B, K)
    token = (pick - K).clamp(min=0) % V  # (B, K)
    rows = parent[..., None].expand(B, K, beams.prefix.size(2))  # (B, K, T')
    length = beams.length.gather(1, parent)  # (B, K)
    slots = torch.arange(rows.size(2), device=lp.device)  # (T',)
    write = is_ext[..., None] & (slots == length[..., None])  # (B, K, T') where the token goes
    return Beams(
        prefix=torch.where(write, token[..., None], beams.prefix.gather(1, rows)),
        positional=torch.where(write, lp.gather(1, token)[..., None],
                               beams.positional.gather(1, rows)),
        length=length + is_ext.long(),
        last=torch.where(is_ext, token, beams.last.gather(1, parent)),
        blank=cand_blank.gather(1, pick),
        nonblank=cand_nonblank.gather(1, pick),
    )


def prefix_beam_search(log_probs: Tensor, padding_mask: Tensor, special: SpecialTokens,
                       beam_size: int) -> Hypotheses:
    """log_probs (B, T', V) -> Hypotheses (B, K, T'), scores = log-prob summed over alignments.

    Beams still empty-handed at the end (fewer than K prefixes possible) score -inf.
    """
    B, T, _ = log_probs.shape
    K, dev = beam_size, log_probs.device
    dead = torch.full((B, K), NEG_INF, device=dev)
    alive_first = torch.cat([torch.zeros(B, 1, device=dev), dead[:, 1:]], dim=1)  # (B, K)
    beams = Beams(prefix=torch.zeros(B, K, T, dtype=torch.long, device=dev),
                  positional=torch.zeros(B, K, T, device=dev),
                  length=torch.zeros(B, K, dtype=torch.long, device=dev),
                  last=torch.full((B, K), -1, dtype=torch.long, device=dev),
                  blank=alive_first, nonblank=dead)  # one alive beam: the empty prefix
    banned = torch.tensor(never_emitted(special, allow_blank=True), device=dev)
    for t in range(T):
        moved = beam_step(beams, log_probs[:, t], special.blank, banned)
        active = ~padding_mask[:, t]  # (B,)
        beams = Beams(*(torch.where(active.view(B, *[1] * (new.dim() - 1)), new, old)
                        for new, old in zip(moved, beams)))
    scores = torch.logaddexp(beams.blank, beams.nonblank)  # (B, K)
    order = scores.sort(dim=1, descending=True, stable=True).indices  # (B, K)
    beyond = torch.arange(T, device=dev) >= beams.length[..., None]  # (B, K, T')
    rows = order[..., None].expand(B, K, T)  # (B, K, T')
    return Hypotheses(tokens=beams.prefix.masked_fill(beyond, special.pad).gather(1, rows),
                      positional_scores=beams.positional.masked_fill(beyond, 0.0).gather(1, rows),
                      scores=scores.gather(1, order), lengths=beams.length.gather(1, order),
                      n_steps=1)


@register_strategy("ctc")
@dataclass(frozen=True)
class CTC(Strategy):
    """Best-path (beam_size 1) or prefix beam search over a CTC NAT's single pass."""

    requires: ClassVar[str] = "ctc"
    label_options: ClassVar[tuple[str, ...]] = ("beam_size",)

    beam_size: int = 1  # 1: best path; > 1: prefix beam search keeping this many prefixes

    def __post_init__(self) -> None:
        require_between(self.beam_size, 1, MAX_SEARCH, f"strategy {self.registered_name!r}", "beam_size")

    @property
    def short_label(self) -> str:
        return "ctc" if self.beam_size == 1 else f"ctc-beam{self.beam_size}"

    def search(self, model: Any, memory_or_state: Any, *, src_lengths: Tensor,
               special: SpecialTokens) -> Hypotheses:
        """-> Hypotheses (B, beam_size, T); n_steps = 1."""
        log_probs, padding_mask = model.forward_ctc(memory_or_state)  # (B, T', V), (B, T')
        if self.beam_size == 1:
            return best_path(log_probs, padding_mask, special)
        return prefix_beam_search(log_probs, padding_mask, special, self.beam_size)
