"""Decoding a whole split with one strategy: token-budget batches, outputs in the split's order,
decoder passes counted, mask-predict's per-iteration history kept."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np
import torch

from atnat.decoding.base import Strategy
from atnat.experiments.data.batching import EncodedSplit, make_loader
from atnat.experiments.evaluation.assemble import check_compatible, needs_teacher

if TYPE_CHECKING:  # for annotations only: importing it imports Lightning
    from atnat.models.seq2seq import Seq2SeqModule


@dataclass
class Decoded:
    hyps: list[list[int]]
    passes: int  # decoder passes over all batches
    history: list[list[list[int]]] | None = None  # per sentence, per iteration (mask-predict)


def decode_split(module: Seq2SeqModule, split: EncodedSplit, strategy: Strategy, *, max_tokens: int,
                 teacher: Seq2SeqModule | None = None, max_sentences: int | None = None,
                 on_batch: Callable[[int], None] | None = None) -> Decoded:
    """Decode every sentence of a split (token-budget batches); outputs in the split's order.
    `on_batch(sentences decoded so far)` is called after each batch (progress of long decodes).
    An empty source (no tokens) has nothing to translate: its output is empty, and it is not decoded."""
    check_compatible(module.decoder, strategy)
    empty = np.flatnonzero(split.src_lengths == 0)
    if len(empty):
        return _with_empty_sources(module, split, strategy, set(empty.tolist()), max_tokens=max_tokens,
                                   teacher=teacher, max_sentences=max_sentences, on_batch=on_batch)
    hyps: list = [None] * len(split)
    hist: list | None = None
    passes = done = 0
    dev = module.device
    with torch.inference_mode():
        for batch in make_loader(split, max_tokens, shuffle=False, max_sentences=max_sentences):
            src, lengths = batch.src.to(dev), batch.src_lengths.to(dev)
            out = module.decode(src, lengths, strategy, **needs_teacher(strategy, teacher, src))
            passes += out.n_steps
            for i, h in zip(batch.ids.tolist(), out.sequences(module.special)):
                hyps[i] = h
            done += len(batch.ids)
            if on_batch is not None:
                on_batch(done)
            if out.history is not None:
                hist = hist if hist is not None else [None] * len(split)
                n = out.lengths[:, 0].tolist()
                for row, i in enumerate(batch.ids.tolist()):
                    hist[i] = [h[row, : n[row]].tolist() for h in out.history]
    return Decoded(hyps, passes, hist)


def _with_empty_sources(module, split: EncodedSplit, strategy: Strategy, empty: set[int], **options) -> Decoded:
    """decode_split over the non-empty sources, with an empty output (and one empty iteration) at each empty one."""
    keep = [i for i in range(len(split)) if i not in empty]
    if options.get("on_batch") is not None:  # the empty sources count as done from the start
        options["on_batch"] = lambda done, report=options["on_batch"]: report(done + len(empty))
    part = decode_split(module, EncodedSplit([split.src[i] for i in keep], [split.tgt[i] for i in keep]), strategy,
                        **options)
    hyps: list = [[] for _ in range(len(split))]
    hist = None if part.history is None else [[[]] for _ in range(len(split))]
    for j, i in enumerate(keep):
        hyps[i] = part.hyps[j]
        if hist is not None:
            hist[i] = part.history[j]
    return Decoded(hyps, part.passes, hist)
