"""Encoded datasets, token-budget batching with length bucketing, and collation into `Batch`."""
from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Sampler

from atnat.core.errors import AtnatError
from atnat.experiments.data.prepared import PreparedSplit, cut_targets_note, say_once
from atnat.experiments.data.tokenize import SPECIAL
from atnat.models.batch import Batch


@dataclass
class EncodedSplit:
    """One split as id lists: src[i], tgt[i] without BOS/EOS."""

    src: list[list[int]]
    tgt: list[list[int]]

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, i: int) -> tuple[int, list[int], list[int]]:
        return i, self.src[i], self.tgt[i]

    @property
    def src_lengths(self) -> np.ndarray:
        return np.fromiter(map(len, self.src), dtype=np.int64, count=len(self.src))

    @property
    def tgt_lengths(self) -> np.ndarray:
        return np.fromiter(map(len, self.tgt), dtype=np.int64, count=len(self.tgt))


def encode_split(tokenizer, sources: list[str], targets: list[str], *, name: str,
                 max_len: int | None = None, drop_long: bool = False) -> EncodedSplit:
    """Encode a split; with `drop_long` (training) pairs longer than max_len are dropped, else cut."""
    src = [tokenizer.encode(s) for s in sources]
    tgt = [tokenizer.encode(t) for t in targets]
    if max_len is not None:
        if drop_long:
            keep = [i for i in range(len(src)) if 0 < len(src[i]) <= max_len and 0 < len(tgt[i]) <= max_len]
            long = sum(1 for s, t in zip(src, tgt) if len(s) > max_len or len(t) > max_len)
            say_once(f"split {name!r}: {long} of {len(src)} pairs longer than max_len={max_len} tokens on a side "
                      "were left out (train.max_len)", long)
            empty = len(src) - long - len(keep)
            say_once(f"split {name!r}: {empty} of {len(src)} pairs empty on a side were left out", empty)
            src, tgt = [src[i] for i in keep], [tgt[i] for i in keep]
        else:
            long = sum(1 for s in src if len(s) > max_len)
            say_once(f"split {name!r}: {long} of {len(src)} sources longer than max_len={max_len} tokens were cut to "
                      "it (train.max_len); their outputs see only the cut source", long)
            say_once(cut_targets_note(name, sum(1 for t in tgt if len(t) > max_len), len(tgt), max_len),
                     sum(1 for t in tgt if len(t) > max_len))
            src, tgt = [s[:max_len] for s in src], [t[:max_len] for t in tgt]
    if not src:
        raise AtnatError(f"split {name!r} has no usable sentence pairs: all {len(sources)} are empty on one side"
                         + (f" or longer than max_len={max_len} tokens" if max_len else ""))
    return EncodedSplit(src, tgt)




def longest_pair(split: EncodedSplit | PreparedSplit) -> int:
    """Tokens of the split's longest pair in a batch (the longer side; the target with its end symbol)."""
    return int(np.maximum(split.src_lengths, split.tgt_lengths + 1).max())


def check_budget(split: EncodedSplit | PreparedSplit, max_tokens: int, *, setting: str, name: str) -> None:
    """A batch must hold at least one sentence: `max_tokens` (named `setting` in the config) is
    refused when the longest pair of split `name` does not fit into it."""
    longest = longest_pair(split)
    if max_tokens < longest:
        raise AtnatError(f"{setting}: {max_tokens} is smaller than the longest sentence pair of the {name} split "
                         f"({longest} tokens with its end symbol): a batch must hold at least one sentence; "
                         f"{setting} must be >= {longest} (or lower train.max_len, which drops longer training pairs)")


def collate(items: list[tuple[int, list[int], list[int]]] | Batch, pad: int = SPECIAL.pad) -> Batch:
    """Pad a list of (id, src, tgt) into a Batch (B, S) / (B, T); a Batch (a PreparedSplit's) passes through."""
    if isinstance(items, Batch):
        return items
    ids = torch.tensor([i for i, _, _ in items])
    sl = torch.tensor([max(len(s), 1) for _, s, _ in items])
    tl = torch.tensor([len(t) for _, _, t in items])
    src = torch.full((len(items), int(sl.max())), pad, dtype=torch.long)
    tgt = torch.full((len(items), max(int(tl.max()), 1)), pad, dtype=torch.long)
    for row, (_, s, t) in enumerate(items):
        src[row, : len(s)] = torch.tensor(s, dtype=torch.long)
        tgt[row, : len(t)] = torch.tensor(t, dtype=torch.long)
    return Batch(src, tgt, sl, tl, ids)


class TokenBudgetSampler(Sampler[list[int]]):
    """Batches of similar length whose padded size stays within `max_tokens` (source or target).

    Sentences are sorted by length (with a little noise when shuffling), cut into batches, and
    the batches are shuffled per epoch (seeded by seed + epoch; the trainer's ResumeState callback
    calls `set_epoch`, since Lightning only sets the epoch of a loader's plain sampler);
    evaluation keeps a fixed order. With `distributed`, each DDP rank takes every world-th batch of
    the same shuffled list (equal counts on all ranks). Resumable: `state_dict` records the epoch
    and how many of its batches were trained (`trained`, kept up to date by the trainer's
    ResumeState callback); after `load_state_dict` the next pass over that epoch skips them.
    """

    def __init__(self, split: EncodedSplit | PreparedSplit, max_tokens: int, *, shuffle: bool, seed: int = 0,
                 max_sentences: int | None = None, distributed: bool = False):
        self.split, self.max_tokens, self.shuffle, self.seed = split, max_tokens, shuffle, seed
        self.max_sentences, self.distributed = max_sentences, distributed
        self._sizes: np.ndarray | None = None
        self._made: tuple[int, list[np.ndarray]] | None = None
        self.epoch = 0
        self.trained = 0  # batches of the current epoch already trained on
        self._skip: tuple[int, int] | None = None  # (epoch, batches) to skip after a resume
        self._batches = self._make(random.Random(seed)) if not shuffle else None

    def _make(self, rng: random.Random) -> list[np.ndarray]:
        """Sort by size (noise in [0, 1) orders equal sizes at random when shuffling; ties by index) and cut
        the order greedily into batches: a batch takes the next sentence while its padded size (longest x
        count) stays within max_tokens (and its count within max_sentences); one sentence always fits. In
        numpy, so a corpus of millions takes seconds and little memory."""
        if self._sizes is None:  # from the lengths arrays: no Python object per sentence is read
            self._sizes = np.maximum(self.split.src_lengths, self.split.tgt_lengths + 1).astype(np.int64)
        sizes, n = self._sizes, len(self._sizes)
        keys = sizes + np.fromiter((rng.random() for _ in range(n)), dtype=np.float64, count=n) \
            if self.shuffle else sizes
        order = np.argsort(keys, kind="stable")
        ordered = sizes[order]
        cap = self.max_sentences or n
        batches, start = [], 0
        if n > 1 and bool((np.diff(ordered) < 0).any()):  # only where float noise tied two sizes
            return self._cut_one_by_one(order, ordered, rng)
        while start < n:  # the padded size of the first c sentences, ordered[start + c - 1] * c, grows with c
            lo, hi = 1, min(cap, n - start)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if int(ordered[start + mid - 1]) * mid <= self.max_tokens:
                    lo = mid
                else:
                    hi = mid - 1
            batches.append(order[start: start + lo])
            start += lo
        if self.shuffle:
            rng.shuffle(batches)
        return batches

    def _cut_one_by_one(self, order: np.ndarray, ordered: np.ndarray, rng: random.Random) -> list[np.ndarray]:
        batches, cur, longest = [], [], 0
        for i, size in zip(order.tolist(), ordered.tolist()):
            longest_new = max(longest, size)
            full = self.max_sentences is not None and len(cur) >= self.max_sentences
            if cur and (longest_new * (len(cur) + 1) > self.max_tokens or full):
                batches.append(np.array(cur))
                cur, longest_new = [], size
            cur.append(i)
            longest = longest_new
        if cur:
            batches.append(np.array(cur))
        if self.shuffle:
            rng.shuffle(batches)
        return batches

    def _of_seed(self, seed: int) -> list[np.ndarray]:
        """The batches of one shuffled epoch, the last ones made kept (the loader asks for its length too)."""
        if self._made is None or self._made[0] != seed:
            self._made = seed, self._make(random.Random(seed))
        return self._made[1]

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "trained": self.trained}

    def load_state_dict(self, state: dict) -> None:
        self.epoch = int(state["epoch"])
        self._skip = (self.epoch, int(state["trained"]))

    def __iter__(self):
        return self._iterate()

    def _iterate(self):
        """A generator: the skip after a resume is applied when iteration really starts (Lightning
        creates an iterator it may discard before the epoch begins)."""
        batches = self._batches if self._batches is not None else self._of_seed(self.seed + self.epoch)
        rank, world = shard() if self.distributed else (0, 1)
        if world > 1:  # DDP: every rank takes its own share of the same shuffled batches
            batches = batches[rank::world][: len(batches) // world]
        if self._skip is not None and self._skip[0] == self.epoch:
            batches = batches[self._skip[1]:]
            self._skip = None
        yield from (batch.tolist() for batch in batches)

    def __len__(self) -> int:
        n = len(self._batches if self._batches is not None else self._of_seed(self.seed + self.epoch))
        world = shard()[1] if self.distributed else 1
        return n // world if world > 1 else n


class ResumableLoader(torch.utils.data.DataLoader):
    """A DataLoader whose position Lightning saves in checkpoints (its `_Stateful` protocol)."""

    def state_dict(self) -> dict:
        return self.batch_sampler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.batch_sampler.load_state_dict(state)


def shard() -> tuple[int, int]:
    """(rank, world size) of the running distributed job, (0, 1) outside one."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def make_loader(split: EncodedSplit | PreparedSplit, max_tokens: int, *, shuffle: bool, seed: int = 0,
                max_sentences: int | None = None, distributed: bool = False, pin_memory: bool = False):
    """A loader of token-budget batches; `pin_memory` (training on a GPU) collates them into
    page-locked memory, so their copy to the device overlaps the step before (Batch.to is non-blocking)."""
    sampler = TokenBudgetSampler(split, max_tokens, shuffle=shuffle, seed=seed, max_sentences=max_sentences,
                                 distributed=distributed)
    # its own generator: creating an iterator draws a seed, which must not move the global torch RNG
    # (dropout, masking), or a resumed run would draw different numbers than an uninterrupted one
    return ResumableLoader(split, batch_sampler=sampler, collate_fn=collate, num_workers=0, pin_memory=pin_memory,
                           generator=torch.Generator().manual_seed(seed))
