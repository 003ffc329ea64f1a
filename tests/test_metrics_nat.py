"""NAT failure metrics on hand-made token lists with hand-computed answers."""

import pytest

from atnat.core.errors import AtnatError
from atnat.experiments.evaluation.metrics import (
    length_accuracy,
    repetition_rate,
    variant_mixing_rate,
    variant_mixing_tokens,
)


def test_repetition_rate_counts_consecutive_duplicates():
    # pairs: (1,1)* (1,2) (2,2)* (2,2)* | none | (4,5) -> 3 repeats of 5 pairs
    assert repetition_rate([[1, 1, 2, 2, 2], [3], [4, 5]]) == pytest.approx(3 / 5)
    assert repetition_rate([[1, 2, 1, 2]]) == 0.0  # non-adjacent repeats do not count
    assert repetition_rate([[7], []]) == 0.0
    assert repetition_rate([]) == 0.0


def test_length_accuracy():
    acc = length_accuracy([5, 6, 8, 4], [5, 5, 5, 4])  # abs errors 0, 1, 3, 0
    assert acc.exact == pytest.approx(0.5)
    assert acc.within_1 == pytest.approx(0.75)
    assert acc.mean_abs_error == pytest.approx(1.0)
    assert acc.n == 4
    with pytest.raises(AtnatError, match="3 predicted lengths vs 2 references"):
        length_accuracy([1, 2, 3], [1, 2])


TOKEN_VARIANT = {10: 0, 11: 0, 20: 1, 21: 1}
HYPS = [
    [10, 11, 1],  # variant 0 only (1 is shared)
    [10, 20, 21],  # mixed: {0: 1, 1: 2} -> 1 minority token
    [1, 2],  # no variant tokens: unmixed
    [21, 20, 11, 10, 10],  # mixed: {1: 2, 0: 3} -> 2 minority tokens
]


def test_variant_mixing_rate():
    assert variant_mixing_rate(HYPS, TOKEN_VARIANT) == pytest.approx(2 / 4)
    assert variant_mixing_rate([[20, 21, 21]], TOKEN_VARIANT) == 0.0


def test_variant_mixing_tokens():
    # mapped tokens: 2 + 3 + 0 + 5 = 10, minority tokens 0 + 1 + 0 + 2 = 3
    assert variant_mixing_tokens(HYPS, TOKEN_VARIANT) == pytest.approx(3 / 10)
    assert variant_mixing_tokens([[1, 2]], TOKEN_VARIANT) == 0.0
    with pytest.raises(AtnatError, match="0 hypotheses"):
        variant_mixing_tokens([], TOKEN_VARIANT)
