"""Where a trained model meets a search strategy: the one place that imports both models/ and
decoding/. Builds strategies from config specs, checks that a strategy can drive a decoder, and
hands a teacher's scorer to strategies that re-rank with one (npd)."""
from __future__ import annotations

from typing import Any

import torch

from atnat.core.errors import AtnatError
from atnat.decoding.base import Strategy
from atnat.models.seq2seq import Seq2SeqModule

from atnat.experiments.config.run import build_strategy


def check_compatible(decoder: Any, strategy: Strategy) -> None:
    """Refuse a strategy the decoder cannot drive, naming the ones it can."""
    problem = strategy.problem_with(decoder)
    if problem:
        raise AtnatError(problem)


def validation_search(decoder: Any) -> Strategy:
    """The cheap strategy validation decodes with: greedy (AT), one pass (NAT, CTC)."""
    return build_strategy(decoder.validation_strategy(decoder.options))[1]


def teacher_scorer(teacher: Seq2SeqModule | None, src: torch.Tensor) -> dict:
    """Keyword arguments for strategies that re-rank with an AT teacher (npd), else {}. The
    teacher's encoder runs here, once per batch (a cost that belongs to the strategy's time)."""
    if teacher is None:
        return {}
    memory = teacher.encode(src)

    def score(tokens, padding_mask, sentence_index):
        return teacher.decoder.score_sequences(memory.index_select(sentence_index), tokens, padding_mask)

    return {"scorer": score}


def needs_teacher(strategy: Strategy, teacher: Seq2SeqModule | None, src: torch.Tensor) -> dict:
    """The scorer keyword of a strategy that re-ranks with a teacher (`needs_scorer`); {} else."""
    if not strategy.needs_scorer:
        return {}
    if teacher is None:
        raise AtnatError(f"strategy {strategy.registered_name} re-ranks with an AT teacher: give the cell a "
                         "distill.teacher (grid: a teacher dependency) or pass --teacher")
    return teacher_scorer(teacher, src)
