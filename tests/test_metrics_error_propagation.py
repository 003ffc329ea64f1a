"""Error-propagation metrics on hand-made inputs with hand-computed answers."""

import math

import numpy as np
import pytest
from sacrebleu.metrics import BLEU

from atnat.core.errors import AtnatError
from atnat.experiments.evaluation.metrics import (
    accuracy_by_position,
    align,
    bleu_by_length,
    conditional_error_rate,
    corruption_effect,
    first_error_distribution,
    first_error_positions,
)


def test_accuracy_by_position_with_short_predictions_and_varying_refs():
    preds = [[1, 2, 3], [1, 5], [7]]
    refs = [[1, 2, 4, 5], [1, 5, 6], [7, 8]]
    df = accuracy_by_position(preds, refs)
    assert list(df.columns) == ["position", "accuracy", "count"]
    assert df["position"].tolist() == [0, 1, 2, 3]
    assert df["count"].tolist() == [3, 3, 2, 1]
    assert df["accuracy"].tolist() == pytest.approx([1.0, 2 / 3, 0.0, 0.0])


def test_accuracy_by_position_ignores_extra_predicted_tokens():
    df = accuracy_by_position([[1, 2, 4, 5, 9]], [[1, 2, 4, 5]])
    assert df["accuracy"].tolist() == [1.0] * 4
    with pytest.raises(AtnatError, match="2 predictions vs 1 references"):
        accuracy_by_position([[1], [2]], [[1]])


def test_first_error_positions():
    hyps = [[1, 2, 3], [1, 2], [1, 2, 3, 4], [9, 2], [1, 5, 3], [], [5]]
    refs = [[1, 2, 3], [1, 2, 3], [1, 2, 3], [1, 2], [1, 2, 3], [], []]
    assert first_error_positions(hyps, refs) == [None, 2, 3, 0, 1, None, 0]


def test_first_error_distribution():
    ref = [1, 2, 3, 4]
    hyps = [[9, 2, 3, 4], [1, 9, 3, 4], [1, 2, 9, 4], [1, 2, 3, 9]]
    hyps += [[1, 2, 3, 4, 5], [1, 2, 3, 4], [1, 2, 3]]
    # relative first errors: 0, .25, .5, .75, 1.0 (longer hyp), none, .75 (shorter hyp)
    df = first_error_distribution(hyps, [ref] * len(hyps), bins=4)
    assert df["count"].tolist() == [1, 1, 1, 3]
    assert df["fraction"].tolist() == pytest.approx([1 / 6, 1 / 6, 1 / 6, 1 / 2])
    assert df["low"].tolist() == pytest.approx([0, 0.25, 0.5, 0.75])
    assert df["bin"].tolist() == ["0-0.25", "0.25-0.5", "0.5-0.75", "0.75-1"]


# kitten / sitting as ids: k=1 i=2 t=3 e=4 n=5 s=6 g=7
KITTEN, SITTING = [1, 2, 3, 3, 4, 5], [6, 2, 3, 3, 2, 5, 7]


def test_align_kitten_sitting():
    ops = align(KITTEN, SITTING)
    assert ops == ["S", "M", "M", "M", "S", "M", "D"]
    assert sum(op != "M" for op in ops) == 3
    assert align(SITTING, KITTEN) == ["S", "M", "M", "M", "S", "M", "I"]


def test_align_tie_break_and_edges():
    # documented tie-break: backtrace from the end prefers diagonal, then D, then I
    assert align([1, 2], [2, 1]) == ["S", "S"]  # not I M D / D M I (also distance 2)
    assert align([1, 1], [1]) == ["I", "M"]  # gap as early as possible
    assert align([1], [1, 1]) == ["D", "M"]
    assert align([1, 2, 3], [2, 3, 4]) == ["I", "M", "M", "D"]  # distance 2 beats S S S
    assert align([], [1, 2]) == ["D", "D"]
    assert align([3], []) == ["I"]
    assert align([], []) == []


def test_conditional_error_rate_hand_counts():
    hyps = [[1, 2, 3, 4], [5, 6, 7], [1, 2]]
    refs = [[1, 9, 9, 4], [5, 6, 7], [1, 2, 3]]
    # columns: M S S M | M M M | M M D
    # after an error: S->S err, S->M ok             -> 1/2
    # after a match:  M->S, M->D err; M->M x3 ok    -> 2/5
    ce = conditional_error_rate(hyps, refs)
    assert ce.p_err_given_err == pytest.approx(1 / 2)
    assert ce.p_err_given_ok == pytest.approx(2 / 5)
    assert ce.delta == pytest.approx(0.1)
    assert ce.n_pairs == 7


def test_conditional_error_rate_without_errors_is_nan_given_err():
    ce = conditional_error_rate([[1, 2, 3]], [[1, 2, 3]])
    assert math.isnan(ce.p_err_given_err) and math.isnan(ce.delta)
    assert ce.p_err_given_ok == 0.0 and ce.n_pairs == 2


def test_corruption_effect():
    clean = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0]], dtype=bool)
    corrupt = np.array([[1, 0, 1, 1], [0, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=bool)
    # clean acc 1, .75, .25, 0; corrupt acc .5, .25, .25, .25
    ratio = corruption_effect(clean, corrupt)
    assert ratio[:3] == pytest.approx([0.5, 1 / 3, 1.0])
    assert np.isnan(ratio[3])


def test_corruption_effect_with_valid_mask_and_bad_shapes():
    clean = np.array([[1, 1], [1, 0]], dtype=bool)
    corrupt = np.array([[0, 1], [1, 1]], dtype=bool)
    valid = np.array([[1, 1], [1, 0]], dtype=bool)  # probe 2 has no token at distance 1
    # d=0: clean 2/2, corrupt 1/2; d=1: clean 1/1, corrupt 1/1
    assert corruption_effect(clean, corrupt, valid).tolist() == pytest.approx([0.5, 1.0])
    with pytest.raises(AtnatError, match=r"\(2, 2\).*\(2, 1\)"):
        corruption_effect(clean, corrupt[:, :1])


def test_bleu_by_length_explicit_edges():
    refs = ["a b c", "a b c d e", " ".join("x" * 12), " ".join("y" * 25)]
    hyps = ["a b c", "a b c d e", " ".join("x" * 10), " ".join("y" * 25)]
    df = bleu_by_length(hyps, refs, bucket_edges=[5, 10, 20])
    assert df["bucket"].tolist() == ["1-5", "11-20", "21+"]  # empty "6-10" left out
    assert df["n"].tolist() == [2, 1, 1]
    expected = [BLEU().corpus_score(hyps[i:j], [refs[i:j]]).score for i, j in [(0, 2), (2, 3)]]
    assert df["bleu"].tolist()[:2] == pytest.approx(expected)
    assert df["bleu"].iloc[2] == pytest.approx(100.0)
    assert df["bleu"].iloc[1] < 100.0


def test_bleu_by_length_scores_against_every_reference_stream():
    """The run's BLEU uses every reference stream; its length curve used the first only."""
    refs = ["a b c", "a b c d e", " ".join("x" * 12), " ".join("y" * 25)]
    hyps = ["c b a", "e d c b a", " ".join("z" * 12), " ".join("q" * 25)]
    df = bleu_by_length(hyps, [refs, hyps], bucket_edges=[5, 10, 20])  # the second stream is the output itself
    assert df["bucket"].tolist() == ["1-5", "11-20", "21+"] and df["bleu"].tolist() == pytest.approx([100.0] * 3)


def test_bleu_by_length_default_quartile_edges():
    refs = [" ".join(["w"] * n) for n in range(1, 9)]  # lengths 1..8 -> edges 3, 5, 7, 8
    df = bleu_by_length(refs, refs)
    assert df["bucket"].tolist() == ["1-3", "4-5", "6-7", "8-8"]
    assert df["n"].tolist() == [3, 2, 2, 1]
    with pytest.raises(AtnatError, match="strictly increasing"):
        bleu_by_length(refs, refs, bucket_edges=[5, 5])


def test_whole_sentence_errors_are_not_propagation():
    # dialect-like: a sentence written entirely in the other variant is all errors against one
    # reference; the old delta called that maximal propagation (1.0), the excess does not
    hyps = [[1, 2, 3, 4]] * 5 + [[5, 6, 7, 8]] * 5
    refs = [[1, 2, 3, 4]] * 5 + [[15, 16, 17, 18]] * 5
    ce = conditional_error_rate(hyps, refs)
    assert ce.delta == pytest.approx(1.0)
    assert ce.shuffled_delta == pytest.approx(1.0) and ce.excess == pytest.approx(0.0)


def test_errors_that_follow_errors_give_a_positive_excess_and_scattered_ones_a_negative_one():
    refs = [[1, 2, 3, 4, 5, 6, 7, 8]] * 4
    clustered = [[1, 2, 3, 4, 5, 0, 0, 0]] * 4  # M M M M M S S S: the errors come together
    scattered = [[1, 0, 3, 0, 5, 0, 7, 8]] * 4  # M S M S M S M M: never two in a row
    assert conditional_error_rate(clustered, refs).excess > 0.5
    assert conditional_error_rate(scattered, refs).excess < -0.3
    # hand count for one clustered sentence: n = 8, k = 3 -> E[err,err] = 3*2/8, E[err,ok] = 3*5/8,
    # E[ok,err] = 5*3/8, E[ok,ok] = 5*4/8: shuffled delta = (6/21) - (15/35)
    assert conditional_error_rate(clustered[:1], refs[:1]).shuffled_delta == pytest.approx(6 / 21 - 15 / 35)


def test_closest_reference_is_the_variant_the_system_chose():
    from atnat.experiments.evaluation.metrics import closest_references

    hyps = [[11, 12, 13], [1, 2, 9]]
    streams = [[[1, 2, 3], [1, 2, 3]], [[11, 12, 13], [11, 12, 13]]]
    assert closest_references(hyps, streams) == [[11, 12, 13], [1, 2, 3]]
