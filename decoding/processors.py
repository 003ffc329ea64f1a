"""Score processors: (prefix, scores, step) -> scores, applied to log-probs before a search picks.

Called, a processor never edits its input: it returns a new tensor, or the input itself when it
has nothing to mask at this step. Strategies use `mask_` / `apply_processors_` instead, in place
on candidate scores they own, to save a full (B, V) copy per step. Masked entries become -inf;
the others are left as they are (no renormalisation), so a hypothesis score is the sum of the
model's log-probs of its tokens.
Shapes: B rows (sentences or sentences x beams), t tokens emitted so far, V vocabulary.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import torch
from torch import Tensor

from atnat.core.special import NEG_INF, SpecialTokens


class ScoreProcessor(ABC):
    """One rule over next-token scores: `__call__` returns a new tensor, `mask_` edits in place."""

    def idle(self, prefix: Tensor, step: int) -> bool:
        """True when the rule masks nothing at this step (lets callers skip a copy)."""
        return False

    @abstractmethod
    def mask_(self, prefix: Tensor, scores: Tensor, step: int) -> Tensor:
        """Set the forbidden entries of `scores` (B, V) to -inf IN PLACE and return it; only for a
        tensor the caller owns (search strategies mask their own candidate scores this way)."""

    def __call__(self, prefix: Tensor, scores: Tensor, step: int) -> Tensor:
        """prefix (B, t) tokens emitted so far (BOS excluded), scores (B, V) log-probs, step == t
        -> (B, V) scores with the forbidden entries at -inf; never modifies `scores`."""
        return scores if self.idle(prefix, step) else self.mask_(prefix, scores.clone(), step)


def apply_processors(processors: Sequence[ScoreProcessor], prefix: Tensor, scores: Tensor,
                     step: int) -> Tensor:
    """Run processors in order on a copy (at most one); the input `scores` is left untouched."""
    busy = [p for p in processors if not p.idle(prefix, step)]
    return apply_processors_(busy, prefix, scores.clone(), step) if busy else scores


def apply_processors_(processors: Sequence[ScoreProcessor], prefix: Tensor, scores: Tensor,
                      step: int) -> Tensor:
    """Run processors in order IN PLACE on `scores`, a tensor the caller owns; returns it."""
    for processor in processors:
        if not processor.idle(prefix, step):
            processor.mask_(prefix, scores, step)
    return scores


def _index(cache: dict, ids: tuple[int, ...], vocab: int, device: torch.device) -> Tensor:
    """The ids below `vocab` as a long tensor on `device`, built once per (device, vocab)."""
    key = (device, vocab)
    index = cache.get(key)
    if index is None:
        index = torch.tensor([i for i in ids if 0 <= i < vocab], dtype=torch.long, device=device)
        cache[key] = index
    return index


@dataclass(frozen=True)
class ForbidTokens(ScoreProcessor):
    """Tokens that must never be emitted (pad, bos, mask, blank for AT search)."""

    ids: Iterable[int]  # forbidden ids (kept as a sorted tuple); ids >= V are ignored
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ids", tuple(sorted({int(i) for i in self.ids})))

    def idle(self, prefix: Tensor, step: int) -> bool:
        return not self.ids

    def mask_(self, prefix: Tensor, scores: Tensor, step: int) -> Tensor:
        index = _index(self._cache, self.ids, scores.size(-1), scores.device)
        return scores.index_fill_(-1, index, NEG_INF)


@dataclass(frozen=True)
class MinLength(ScoreProcessor):
    """Forbid EOS while fewer than `min_len` content tokens were emitted (step < min_len)."""

    min_len: Tensor | int  # content tokens required before EOS: one int, or (B,) one per row
    eos: int  # id of the end-of-sentence token
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        top = self.min_len if isinstance(self.min_len, int) else int(self.min_len.max())
        object.__setattr__(self, "_longest", top)  # host copy: no device sync per step

    def idle(self, prefix: Tensor, step: int) -> bool:
        return step >= self._longest

    def mask_(self, prefix: Tensor, scores: Tensor, step: int) -> Tensor:
        if isinstance(self.min_len, int):
            index = _index(self._cache, (self.eos,), scores.size(-1), scores.device)
            return scores.index_fill_(-1, index, NEG_INF)
        scores.select(-1, self.eos).masked_fill_(step < self.min_len, NEG_INF)  # (B,) view
        return scores


@dataclass(frozen=True)
class NoRepeatNGram(ScoreProcessor):
    """Forbid every token that would complete an n-gram already present in the prefix."""

    n: int  # n-gram order; n <= 0 disables the rule

    def idle(self, prefix: Tensor, step: int) -> bool:
        return self.n <= 0 or prefix.size(1) < self.n  # no complete n-gram yet

    def mask_(self, prefix: Tensor, scores: Tensor, step: int) -> Tensor:
        n, t = self.n, prefix.size(1)
        rows, vocab = scores.shape
        grams = prefix.unfold(1, n, 1)  # (B, t-n+1, n)
        tail = prefix[:, t - n + 1:]  # (B, n-1) the n-1 last tokens
        hit = (grams[:, :, :-1] == tail.unsqueeze(1)).all(-1)  # (B, t-n+1)
        banned = grams[:, :, -1].masked_fill(~hit, vocab)  # (B, t-n+1); misses -> spare column
        mask = torch.zeros(rows, vocab + 1, dtype=torch.bool, device=scores.device)
        mask.scatter_(1, banned, True)  # (B, V+1)
        return scores.masked_fill_(mask[:, :vocab], NEG_INF)


def at_processors(special: SpecialTokens, min_len: int = 0,
                  no_repeat_ngram: int = 0) -> list[ScoreProcessor]:
    """The processors of AT search: never emit pad/bos/mask/blank, then min length, n-gram rule."""
    procs: list[ScoreProcessor] = [ForbidTokens(forbidden_ids(special))]
    if min_len > 0:
        procs.append(MinLength(min_len, special.eos))
    if no_repeat_ngram > 0:
        procs.append(NoRepeatNGram(no_repeat_ngram))
    return procs


def forbidden_ids(special: SpecialTokens) -> Iterable[int]:
    """The ids AT search never emits."""
    return (special.pad, special.bos, special.mask, special.blank)
