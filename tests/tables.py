"""Hand-written probability tables behind a fake AT step model, for exact strategy tests.

A table maps a prefix (the tokens emitted so far, BOS excluded) to the next-token distribution,
written {token: probability}; unlisted tokens get probability 0 (log-prob -inf). A prefix missing
from the table ends the sentence for free: EOS with probability 1 (log-prob 0). Tables may also be
callables (sentence id, prefix) -> {token: p} or a full row of V probabilities.

The state is a `TableState`: the sentence id of every row and the inputs fed so far, so
`reorder_state` is indexing. The model records every call, so tests can count decoder passes,
check which rows were fed, and check that no returned tensor was modified by the strategy.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence, Union

import torch
from torch import Tensor

from atnat.core.special import SpecialTokens

SPECIAL = SpecialTokens()
V = 10  # 0..5 special (pad bos eos unk mask blank), then four words
A, B, C, D = 6, 7, 8, 9
EOS, BOS, PAD = SPECIAL.eos, SPECIAL.bos, SPECIAL.pad

Dist = Union[Mapping[int, float], Sequence[float]]
Prefix = tuple[int, ...]
Table = Union[Mapping[Prefix, Dist], Callable[[int, Prefix], Dist]]


def log_row(dist: Dist, size: int = V) -> list[float]:
    """{token: p} (others 0) or a full row of probabilities -> a row of log-probs (0 -> -inf)."""
    probs = [dist.get(v, 0.0) for v in range(size)] if isinstance(dist, Mapping) else list(dist)
    assert len(probs) == size, f"a distribution row needs {size} entries, got {len(probs)}"
    return [math.log(p) if p > 0 else float("-inf") for p in probs]


@dataclass
class TableState:
    """State of TableModel: sentence id of each row (B,) and the inputs fed so far (B, t+1)."""

    sentence: Tensor  # (B,) which table each row reads
    fed: Tensor  # (B, t+1) BOS then the emitted tokens, as fed to `step`


@dataclass
class TableModel:
    """A StepModel on tables: tables[sid] gives sentence sid's next-token distributions.

    One table serves every sentence when `tables` is a single mapping or callable.
    Log-probs are computed in float32 from the table's probabilities.
    """

    tables: Table | list[Table]
    vocab_size: int = V
    eos: int = EOS
    max_output_length: int | None = None  # tables have no position limit
    batch_sizes: list[int] = field(default_factory=list)  # rows fed per step call
    inputs: list[Tensor] = field(default_factory=list)  # prev_tokens of each call
    orders: list[Tensor] = field(default_factory=list)  # every reorder_state order
    returned: list[tuple[Tensor, Tensor]] = field(default_factory=list)  # (tensor, copy)

    @property
    def n_calls(self) -> int:
        """Decoder passes so far."""
        return len(self.batch_sizes)

    def init_state(self, sentences: Sequence[int] | int, *, window=None, max_steps=None) -> TableState:
        """Initial state for the given sentence ids (or sentences 0..n-1 for an int n): the
        "memory" a strategy hands to init_state is the list of sentence ids."""
        ids = list(range(sentences)) if isinstance(sentences, int) else list(sentences)
        return TableState(torch.tensor(ids, dtype=torch.long),
                          torch.empty(len(ids), 0, dtype=torch.long))

    def dist(self, sentence: int, prefix: Prefix) -> list[float]:
        """Log-prob row of the next token after `prefix` (BOS excluded) in sentence `sentence`."""
        table = self.tables[sentence] if isinstance(self.tables, list) else self.tables
        if callable(table):
            return log_row(table(sentence, prefix), self.vocab_size)
        if prefix in table:
            return log_row(table[prefix], self.vocab_size)
        return log_row({self.eos: 1.0}, self.vocab_size)

    def step(self, prev_tokens: Tensor, state: TableState) -> tuple[Tensor, TableState]:
        """prev_tokens (B,) -> log-probs (B, V) read from the tables, and the extended state."""
        assert prev_tokens.shape == state.sentence.shape, "one input token per state row"
        self.batch_sizes.append(prev_tokens.numel())
        self.inputs.append(prev_tokens.clone())
        fed = torch.cat([state.fed, prev_tokens.view(-1, 1)], 1)  # (B, t+1)
        sentences = state.sentence.tolist()
        rows = [self.dist(s, tuple(row[1:])) for s, row in zip(sentences, fed.tolist())]
        log_probs = torch.tensor(rows, dtype=torch.float32).view(-1, self.vocab_size)  # (B, V)
        self.returned.append((log_probs, log_probs.clone()))
        return log_probs, TableState(state.sentence, fed)

    def reorder_state(self, state: TableState, order: Tensor) -> TableState:
        self.orders.append(order.clone())
        return TableState(state.sentence[order], state.fed[order])

    def untouched(self) -> bool:
        """True when no log-prob tensor this model returned was modified afterwards."""
        return all(torch.equal(t, copy) for t, copy in self.returned)


def random_table(words: Sequence[int], *, eos: int = EOS, vocab_size: int = V, seed: int = 0,
                 leak: Sequence[int] = (SPECIAL.pad, SPECIAL.bos, SPECIAL.mask, SPECIAL.blank),
                 leak_mass: float = 0.2) -> Callable[[int, Prefix], list[float]]:
    """A deterministic random distribution for every (sentence, prefix) over `words` and EOS,
    plus `leak_mass` spread over the `leak` ids (which a search must never emit); 0 elsewhere."""
    allowed = sorted(set(words) | {eos})

    def table(sentence: int, prefix: Prefix) -> list[float]:
        key = zlib.crc32(repr((seed, sentence, prefix)).encode())
        gen = torch.Generator().manual_seed(key)
        weights = torch.rand(len(allowed), generator=gen, dtype=torch.float64) + 0.05
        weights = weights / weights.sum() * (1.0 - leak_mass)
        row = [0.0] * vocab_size
        for tok in leak:
            row[tok] = leak_mass / len(leak)
        for tok, w in zip(allowed, weights.tolist()):
            row[tok] = w
        return row

    return table


def sequence_logprob(model: TableModel, sentence: int, tokens: Sequence[int]) -> float:
    """Sum of the table's float32 log-probs of `tokens` (EOS included when present)."""
    total = torch.zeros((), dtype=torch.float32)
    for i, tok in enumerate(tokens):
        total = total + torch.tensor(model.dist(sentence, tuple(tokens[:i]))[tok],
                                     dtype=torch.float32)
    return float(total)
