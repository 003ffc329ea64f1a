"""Where a trained model meets a search strategy: the one place that imports both models/ and
decoding/. Builds strategies from config specs, checks that a strategy can drive a decoder, and
hands an AT teacher to strategies that run one beside the decoder: npd re-ranks with its scores,
speculative drafts for it to verify."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from atnat.core.errors import AtnatError
from atnat.core.special import NEG_INF
from atnat.decoding.base import Strategy
from atnat.experiments.config.run import build_strategy
from atnat.models.decoders.block_verifier import BlockVerifier, block_verify_problem

if TYPE_CHECKING:  # for annotations only: importing it imports Lightning
    from atnat.models.seq2seq import Seq2SeqModule


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
    teacher's encoder runs here, once per batch (a cost that belongs to the strategy's time). A candidate
    longer than the teacher can write scores -inf: ranked after every one it can score."""
    if teacher is None:
        return {}
    memory = teacher.encode(src)
    limit = teacher.decoder.max_output_length  # a longer candidate (and its EOS) has no teacher positions

    def score(tokens, padding_mask, sentence_index):
        fits = (~padding_mask).sum(1) <= limit  # (N,) the others are ranked last, unscored
        scores = torch.full(fits.shape, NEG_INF, device=tokens.device)
        if bool(fits.any()):
            rows = fits.nonzero().squeeze(1)
            scores[rows] = teacher.decoder.score_sequences(memory.index_select(sentence_index[rows]),
                                                           tokens[rows, :limit], padding_mask[rows, :limit]).float()
        return scores

    return {"scorer": score}


def check_teacher(teacher: Seq2SeqModule, teacher_tokenizer, tokenizer, what: str, verifies: bool = False) -> None:
    """AtnatError unless `teacher` (named `what`: "--teacher PATH", a run's distill.teacher) can run beside a model
    of `tokenizer` (npd's scorer, speculative's verifier): an AT reading and writing the same tokens; checked
    before anything is decoded or trained, since its ids would index another vocabulary (an IndexError mid-way,
    or silently other words); `verifies`: it verifies speculative drafts, so its block pass must be exact."""
    if "step" not in teacher.decoder.capabilities:
        raise AtnatError(f"{what}: a teacher is an AT (capability 'step': it re-ranks npd's candidates or "
                         f"verifies speculative drafts); this one's decoder is {teacher.decoder.registered_name!r}")
    if teacher_tokenizer.to_state() != tokenizer.to_state():
        sizes = f"{teacher_tokenizer.vocab_size} and {tokenizer.vocab_size} tokens"
        raise AtnatError(f"{what}: its vocabulary is not the model's ({sizes}"
                         f"{', other pieces' if teacher_tokenizer.vocab_size == tokenizer.vocab_size else ''}): "
                         "a teacher must be trained on the same tokenizer (the same task) as the model")
    problem = block_verify_problem(teacher.decoder) if verifies else None
    if problem:
        raise AtnatError(f"{what}: speculative decoding cannot verify with this AT teacher in one block pass: {problem}")


def teacher_verifier(teacher: Seq2SeqModule, src: torch.Tensor) -> dict:
    """The verifier keyword of speculative decoding: a function that builds, for one search, the
    teacher's decoder over its own encoding of the batch (the teacher's encoder runs then: part of the
    strategy's time)."""
    if "step" not in teacher.decoder.capabilities:
        raise AtnatError(f"a verifier must be an AT (capability 'step'); the teacher's decoder is "
                         f"{teacher.decoder.registered_name!r}")
    problem = block_verify_problem(teacher.decoder)
    if problem:  # its output would not be the AT's greedy output: refused rather than reported as lossless
        raise AtnatError(f"speculative decoding cannot verify with this AT teacher in one block pass: {problem}; "
                         "decode it with greedy instead (or declare block_verify_exact = True on its decoder if "
                         "the block pass is exact for it)")
    return {"verifier": lambda: BlockVerifier(teacher.decoder, teacher.encode(src))}


def needs_teacher(strategy: Strategy, teacher: Seq2SeqModule | None, src: torch.Tensor) -> dict:
    """The keyword a strategy that runs an AT teacher takes: `scorer` (npd), `verifier` (speculative);
    {} for the others."""
    if not strategy.uses_teacher:
        return {}
    if teacher is None:
        role = "re-ranks with" if strategy.needs_scorer else "drafts for"
        raise AtnatError(f"strategy {strategy.registered_name} {role} an AT teacher: give the cell a teacher "
                         "(grid: teacher: CELL; a run: distill.teacher) or pass --teacher")
    return teacher_scorer(teacher, src) if strategy.needs_scorer else teacher_verifier(teacher, src)
