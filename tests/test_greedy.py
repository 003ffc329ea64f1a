"""Greedy decoding on hand tables: exact tokens, log-probs, scores, lengths and decoder passes."""
import math

import pytest
import torch

from atnat.core.errors import AtnatError
from atnat.core.special import SpecialTokens
from atnat.decoding.base import STRATEGIES
from atnat.decoding.greedy import Greedy
from tests.tables import (
    BOS,
    EOS,
    PAD,
    SPECIAL,
    A,
    B,
    C,
    TableModel,
    random_table,
    sequence_logprob,
)

MASK = SPECIAL.mask
# greedy: a (pad is likelier but forbidden), b (mask forbidden), then EOS (bos forbidden)
TABLE = {
    (): {PAD: 0.3, A: 0.4, B: 0.2, EOS: 0.1},
    (A,): {B: 0.5, MASK: 0.45, EOS: 0.05},
    (A, B): {C: 0.3, EOS: 0.6, BOS: 0.1},
}  # (A, B, C) is not listed: EOS for free


def logs(*probs: float) -> torch.Tensor:
    return torch.tensor([math.log(p) for p in probs], dtype=torch.float32)


def run(strategy, model: TableModel, src_lengths, sentences=None):
    src = torch.tensor(src_lengths)
    memory = sentences if sentences is not None else len(src_lengths)  # the tables' sentence ids
    return strategy.search(model, memory, src_lengths=src, special=SPECIAL)


def test_registered():
    assert STRATEGIES.get("greedy") is Greedy
    assert Greedy.requires == "step"


def test_exact_tokens_logprobs_score_and_eos():
    model = TableModel(TABLE)
    hyp = run(Greedy(), model, [5])
    assert hyp.tokens.tolist() == [[[A, B, EOS]]]
    assert torch.equal(hyp.positional_scores[0, 0], logs(0.4, 0.5, 0.6))
    assert hyp.scores.tolist() == [[sequence_logprob(model, 0, [A, B, EOS])]]
    assert hyp.scores[0, 0].item() == pytest.approx(math.log(0.4 * 0.5 * 0.6), abs=1e-6)
    assert hyp.lengths.tolist() == [[3]]
    assert hyp.n_steps == 3 == model.n_calls
    assert hyp.sequences(SPECIAL) == [[A, B]]
    assert model.inputs[0].tolist() == [BOS]
    assert model.untouched()


def test_max_length_truncates_without_eos_or_extra_pass():
    model = TableModel(TABLE)
    hyp = run(Greedy(max_len_a=0.0, max_len_b=2), model, [5])
    assert hyp.tokens.tolist() == [[[A, B]]]
    assert torch.equal(hyp.positional_scores[0, 0], logs(0.4, 0.5))
    assert hyp.lengths.tolist() == [[2]]
    assert hyp.n_steps == 2 == model.n_calls


def test_max_length_from_source_length_and_cap():
    model = TableModel(random_table([A, B]), vocab_size=10)
    hyp = run(Greedy(max_len_a=0.5, max_len_b=1, min_len=100), model, [4, 7])
    assert hyp.lengths.tolist() == [[3], [4]]  # floor(0.5 * S + 1) content tokens, no EOS
    assert (hyp.tokens != EOS).all()
    hyp = run(Greedy(max_len_a=0.5, max_len_b=1, max_len_cap=2, min_len=100), model, [4, 7])
    assert hyp.lengths.tolist() == [[2], [2]]


def test_min_length_forbids_early_eos():
    model = TableModel(TABLE)
    hyp = run(Greedy(min_len=3), model, [5])
    assert hyp.tokens.tolist() == [[[A, B, C, EOS]]]
    assert torch.equal(hyp.positional_scores[0, 0], logs(0.4, 0.5, 0.3, 1.0))
    assert hyp.lengths.tolist() == [[4]]
    assert hyp.n_steps == 4


def test_min_len_equal_max_len_gives_exactly_that_many_tokens_and_steps():
    model = TableModel(random_table([A, B, C]), vocab_size=10)
    hyp = run(Greedy(max_len_a=0.0, max_len_b=6, min_len=6), model, [3, 9, 1])
    assert hyp.lengths.tolist() == [[6]] * 3
    assert hyp.tokens.shape == (3, 1, 6)
    assert not ((hyp.tokens == EOS) | (hyp.tokens == PAD)).any()
    assert hyp.n_steps == 6 and model.batch_sizes == [3] * 6


def test_no_repeat_ngram():
    table = {(): {A: 0.6, B: 0.4}, (A,): {A: 0.7, B: 0.2, EOS: 0.1}}
    hyp = run(Greedy(no_repeat_ngram=1), TableModel(table), [5])
    assert hyp.tokens.tolist() == [[[A, B, EOS]]]
    assert torch.equal(hyp.positional_scores[0, 0], logs(0.6, 0.2, 1.0))
    assert run(Greedy(), TableModel(table), [5]).tokens.tolist() == [[[A, A, EOS]]]


def test_finished_rows_leave_the_batch_and_batch_equals_single():
    tables = [
        {(): {EOS: 0.9, A: 0.1}},  # EOS forbidden at step 0 (min_len), then free: a EOS
        TABLE,  # a b EOS
        random_table([A, B], eos=C, leak_mass=0.0),  # never EOS: truncated at its maximum
    ]
    strategy = Greedy(max_len_a=1.0, max_len_b=0, min_len=1)
    model = TableModel(tables)
    hyp = run(strategy, model, [4, 5, 6])
    assert model.batch_sizes == [3, 3, 2, 1, 1, 1]  # rows dropped once finished
    assert hyp.lengths[:, 0].tolist() == [2, 3, 6]
    assert hyp.tokens[0, 0, :2].tolist() == [A, EOS]
    assert hyp.n_steps == 6
    for i in range(3):
        alone = run(strategy, TableModel(tables), [[4, 5, 6][i]], sentences=[i])
        n = int(alone.lengths[0, 0])
        assert torch.equal(hyp.tokens[i, :, :n], alone.tokens[0])
        assert torch.equal(hyp.positional_scores[i, :, :n], alone.positional_scores[0])
        assert (hyp.tokens[i, 0, n:] == PAD).all() and (hyp.positional_scores[i, 0, n:] == 0).all()
        assert torch.equal(hyp.scores[i], alone.scores[0])
    assert model.untouched()


def test_custom_special_ids():
    special = SpecialTokens(pad=9, bos=8, eos=7, unk=6, mask=5, blank=4)
    model = TableModel({(): {9: 0.5, 0: 0.3, 7: 0.2}, (0,): {8: 0.6, 7: 0.4}}, eos=7)
    src = torch.tensor([3])
    hyp = Greedy().search(model, 1, src_lengths=src, special=special)
    assert hyp.tokens.tolist() == [[[0, 7]]]
    assert model.inputs[0].tolist() == [8]


@pytest.mark.parametrize("field,value", [("min_len", -1), ("max_len_cap", 0), ("max_len_a", -1.0)])
def test_bad_options(field, value):
    with pytest.raises(AtnatError, match=field):
        Greedy(**{field: value})


def test_a_row_with_no_allowed_token_ends_without_emitting_pad():
    """min_len and no-repeat n-grams can rule out every token: the arg-max of an all -inf row was token 0
    (pad), emitted and counted as content. The row ends there instead, score -inf, its companions untouched."""
    table = {(): {A: 0.6, EOS: 0.4}, (A,): {A: 0.5, EOS: 0.5}}  # after A: A repeats, EOS is too early
    hyp = run(Greedy(min_len=2, no_repeat_ngram=1), TableModel([table, TABLE]), [5, 5], sentences=[0, 1])
    assert hyp.sequences(SPECIAL)[0] == [A] and hyp.lengths[0].tolist() == [1]
    assert hyp.scores[0, 0].item() == float("-inf") and not (hyp.tokens[0, 0, :1] == PAD).any()
    assert hyp.sequences(SPECIAL)[1] == [A, B] and hyp.lengths[1].tolist() == [3]  # the other sentence
