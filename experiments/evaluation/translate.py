"""`atnat translate`: stream lines through a trained model, one window at a time.

Lines are read in windows (sorted by length inside a window for batching) and each window's
translations are written in input order and flushed before the next is read, so a killed run
loses at most one window. A line longer than the model can take (its decoder's
`max_source_length`) gets an empty output line and one message, or is cut to the limit with a
warning; the other lines are translated either way. An empty line (no tokens) gives an empty line.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, TextIO

import torch

from atnat.core.errors import AtnatError
from atnat.experiments.data.batching import collate
from atnat.experiments.evaluation.assemble import needs_teacher

WINDOW = 256  # lines read (and written) at a time; at least one batch


@dataclass
class StreamReport:
    """What a translation stream did: lines written, lines refused, lines cut."""

    lines: int = 0
    refused: int = 0
    truncated: int = 0


def translate_stream(module, tokenizer, strategy, lines: Iterable[str], out: TextIO, err: TextIO, *,
                     batch_size: int, long_lines: str = "error", teacher=None) -> StreamReport:
    """Translate `lines` to `out` (one line each, input order, flushed per window); messages to `err`."""
    report = StreamReport()
    limit, by = source_limit(module, teacher)
    whose = "the model's" if by is module else "its teacher's"
    source = iter(lines)
    while True:
        window, failed = _window(source, max(WINDOW, batch_size))
        if window:
            ids = [_encode(tokenizer, line.rstrip("\n"), report.lines + i + 1, (limit, whose), long_lines, err, report)
                   for i, line in enumerate(window)]
            out.write("".join(line + "\n" for line in _translate(module, tokenizer, strategy, ids, batch_size, teacher)))
            out.flush()
            report.lines += len(window)
        if failed is not None:  # an unreadable line: the lines before it are translated and written first
            raise failed
        if not window:
            return report


def _window(source, size: int) -> tuple[list[str], AtnatError | None]:
    """Up to `size` lines of `source`, and the error a line raised when read (the lines before it kept)."""
    window: list[str] = []
    try:
        for line in source:
            window.append(line)
            if len(window) == size:
                break
    except AtnatError as err:
        return window, err
    return window, None


def source_limit(module, teacher=None) -> tuple[int, object]:
    """The longest source a model (`max_source_length`: its positional table, or its decoder's slots over
    the source) and the teacher it decodes with can both read, and which of the two sets it."""
    if teacher is not None and teacher.decoder.max_source_length < module.decoder.max_source_length:
        return teacher.decoder.max_source_length, teacher
    return module.decoder.max_source_length, module


def check_source_lengths(module, sources, what: str, teacher=None) -> None:
    """One AtnatError naming the first of `sources` (token id lists) longer than the model, or the teacher
    it decodes with, can read."""
    limit, by = source_limit(module, teacher)
    for number, source in enumerate(sources, 1):
        if len(source) > limit:
            whose = "this model" if by is module else "its teacher"
            raise AtnatError(f"{what} line {number}: {len(source)} tokens, more than the {limit} {whose} reads (decoder "
                             f"{by.hparams.decoder}, model.max_positions {by.model_cfg.max_positions}); shorten "
                             "or leave out that line")


def _encode(tokenizer, line: str, number: int, limit_of: tuple[int, str], long_lines: str, err: TextIO,
            report: StreamReport) -> list[int] | None:
    """The line's ids, cut to the limit ("truncate") or None (refused) when longer; `limit_of`: the limit
    and whose it is."""
    limit, whose = limit_of
    ids = tokenizer.encode(line)
    if len(ids) <= limit:
        return ids
    if long_lines == "truncate":
        report.truncated += 1
        err.write(f"atnat translate: warning: line {number}: {len(ids)} tokens, cut to {whose} limit of {limit}\n")
        return ids[:limit]
    report.refused += 1
    err.write(f"atnat translate: line {number}: {len(ids)} tokens, longer than {whose} limit of {limit}; "
              "left empty (--long-lines truncate cuts it instead)\n")
    return None


def _translate(module, tokenizer, strategy, ids: list[list[int] | None], batch_size: int, teacher) -> list[str]:
    """Translations of one window in input order; a refused line (None) and an empty one (no tokens: nothing
    to translate) stay empty."""
    out = [""] * len(ids)
    order = sorted((i for i, x in enumerate(ids) if x), key=lambda i: len(ids[i]))
    with torch.no_grad():
        for start in range(0, len(order), batch_size):
            chunk = order[start: start + batch_size]
            batch = collate([(i, ids[i], []) for i in chunk]).to(module.device)
            hyps = module.decode(batch.src, batch.src_lengths, strategy, **needs_teacher(strategy, teacher, batch.src))
            for i, h in zip(chunk, hyps.sequences(module.special)):
                out[i] = tokenizer.decode(h)
    return out
