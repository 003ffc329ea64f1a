"""Hand-written probability tables behind fake NAT models, for exact strategy tests.

A distribution is written as {token: probability}; the remaining mass is spread evenly over the
other tokens (exactly 0 when the listed probabilities sum to 1). Memory is a (B,) tensor of
sentence ids, so reordering memory is indexing it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from atnat.core.special import SpecialTokens

SPECIAL = SpecialTokens()
V = 10  # 0..5 special (pad bos eos unk mask blank), then four words
A, B, C, D = 6, 7, 8, 9
MASK, PAD, EOS, BLANK = SPECIAL.mask, SPECIAL.pad, SPECIAL.eos, SPECIAL.blank
GARBAGE = -20.0  # log-prob the fakes put at padding slots (on token D), to catch misuse

Dist = dict[int, float]


def log_dist(dist: Dist, size: int = V) -> list[float]:
    """{token: p} -> a full row of log-probs; the rest of the mass spread over the other tokens."""
    rest = (1.0 - sum(dist.values())) / (size - len(dist))
    probs = [dist.get(v, rest) for v in range(size)]
    return [math.log(p) if p > 1e-12 else float("-inf") for p in probs]


@dataclass(frozen=True)
class Slot:
    """One output position: its distribution depends on the decoder input at other positions."""

    base: Dist  # used when no condition matches (e.g. everything masked)
    when: tuple[tuple[int, int, Dist], ...] = ()  # (position j, input token at j, dist); first wins


@dataclass
class FakeParallel:
    """A ParallelModel on tables: lengths[sid] = {length: p}, tables[(sid, L)] = [Slot] * L.

    Records every forward_parallel input and keeps a copy of every tensor it returned.
    """

    lengths: dict[int, Dist]
    tables: dict[tuple[int, int], list[Slot]]
    max_len: int = 6
    calls: list[dict[str, Tensor]] = field(default_factory=list)
    orders: list[Tensor] = field(default_factory=list)
    length_calls: int = 0
    returned: list[tuple[Tensor, Tensor]] = field(default_factory=list)

    def _hand_out(self, t: Tensor) -> Tensor:
        self.returned.append((t, t.clone()))
        return t

    def predict_length(self, memory: Tensor) -> Tensor:
        self.length_calls += 1
        rows = [log_dist(self.lengths[int(s)], self.max_len + 1) for s in memory]
        return self._hand_out(torch.tensor(rows))  # (B, Lmax+1)

    def reorder_memory(self, memory: Tensor, order: Tensor) -> Tensor:
        self.orders.append(order.clone())
        return memory[order]

    def forward_parallel(self, tokens: Tensor, memory: Tensor, padding_mask: Tensor) -> Tensor:
        assert tokens.shape == padding_mask.shape and tokens.size(0) == memory.size(0)
        assert bool((tokens[padding_mask] == PAD).all()), "padding slots must hold pad"
        self.calls.append({"tokens": tokens.clone(), "padding_mask": padding_mask.clone(),
                           "memory": memory.clone()})
        out = torch.full((*tokens.shape, V), GARBAGE)  # (B, T, V)
        for row, (sid, toks, pad) in enumerate(zip(memory.tolist(), tokens.tolist(),
                                                   padding_mask.tolist())):
            L = pad.count(False)
            for i, slot in enumerate(self.tables[(sid, L)]):
                dist = next((d for j, tok, d in slot.when if toks[j] == tok), slot.base)
                out[row, i] = torch.tensor(log_dist(dist))
        return self._hand_out(out)

    def mask_counts(self) -> list[list[int]]:
        """Masked slots per row in each forward_parallel call."""
        return [(c["tokens"] == MASK).sum(1).tolist() for c in self.calls]

    def untouched(self) -> bool:
        """True when no tensor this model returned was modified afterwards."""
        return all(torch.equal(t, copy) for t, copy in self.returned)


@dataclass
class FakeCTC:
    """A CTCModel on tables: rows[sid] = [Dist] * T'_sid over the vocabulary incl. blank."""

    rows: dict[int, list[Dist]]
    returned: list[tuple[Tensor, Tensor]] = field(default_factory=list)

    def forward_ctc(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        T = max(len(self.rows[int(s)]) for s in memory)
        log_probs = torch.full((memory.size(0), T, V), GARBAGE)  # (B, T', V)
        log_probs[:, :, A] = 0.0  # padding slots: a sure A, to catch a strategy reading them
        padding_mask = torch.ones(memory.size(0), T, dtype=torch.bool)
        for b, sid in enumerate(memory.tolist()):
            for t, dist in enumerate(self.rows[sid]):
                log_probs[b, t] = torch.tensor(log_dist(dist))
                padding_mask[b, t] = False
        for t in (log_probs, padding_mask):
            self.returned.append((t, t.clone()))
        return log_probs, padding_mask

    def untouched(self) -> bool:
        return all(torch.equal(t, copy) for t, copy in self.returned)


# Sentence 0, length 4: the all-mask pass says "a c c d"; refinement turns it into "a b c d".
# Slot 0 would flip to d if it were re-predicted while slot 1 holds b: it never is re-masked.
REFINE_4 = [
    Slot({A: 0.9}, ((1, B, {D: 0.99}),)),
    Slot({C: 0.5, B: 0.4}, ((0, A, {B: 0.8}),)),
    Slot({C: 0.6}, ((1, B, {C: 0.95}),)),
    Slot({D: 0.7}, ((2, C, {D: 0.85}), (1, B, {A: 0.75}))),
]
# Sentence 1: one pass; length 3 wins on mean log-prob, length 2 would win on summed log-prob.
# Slot 2 of length 3 turns into b once slot 1 holds d (only mask-predict sees that).
SENT1 = {
    (1, 1): [Slot({D: 0.3})],
    (1, 2): [Slot({A: 0.5}), Slot({B: 0.6})],
    (1, 3): [Slot({C: 0.9}), Slot({D: 0.8}), Slot({A: 0.4}, ((1, D, {B: 0.7}),))],
}


def nat_model() -> FakeParallel:
    """Sentences 0 and 1 (length predictions: 0 is the most likely length of sentence 1), and
    sentences 2, 3 for fixed-length decoding (EOS inside sentence 2's slots)."""
    tables = {
        (0, 4): REFINE_4,
        (0, 3): [Slot({C: 0.97})] * 3,
        (0, 5): [Slot({A: 0.5})] * 5,
        **SENT1,
        (2, 3): [Slot({A: 0.7}), Slot({EOS: 0.6}), Slot({B: 0.9})],
        (3, 2): [Slot({B: 0.8}), Slot({C: 0.7})],
    }
    lengths = {0: {0: 0.3, 4: 0.35, 3: 0.2, 5: 0.1}, 1: {0: 0.4, 2: 0.3, 3: 0.2, 1: 0.06}}
    return FakeParallel(lengths=lengths, tables=tables)


def sampling_model() -> FakeParallel:
    """Sentence 4: length 2 surely; slot 0 is a or b, slot 1 is c or d, nothing else possible."""
    tables = {(4, 2): [Slot({A: 0.55, B: 0.45}), Slot({C: 0.6, D: 0.4})]}
    return FakeParallel(lengths={4: {2: 1.0}}, tables=tables)


def ids(*sentences: int) -> Tensor:
    """Memory of the fakes: the sentence ids, (B,)."""
    return torch.tensor(sentences)
