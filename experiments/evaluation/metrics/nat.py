"""NAT-specific failure metrics: token repetition, length prediction, and variant mixing.

Conditional independence lets a NAT decoder emit the same token at neighbouring positions, get
the target length wrong, and pick tokens from different valid translations (the multi-modality
problem); these metrics count each on token-id outputs (no BOS/EOS/pad).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from atnat.core.errors import AtnatError
from atnat.experiments.evaluation.metrics.quality import check_parallel


def repetition_rate(hyps: Sequence[Sequence[Hashable]]) -> float:
    """Fraction of tokens equal to their immediate predecessor, over all tokens that have one.

    0.0 when no hypothesis has two tokens.
    """
    repeats = sum(sum(a == b for a, b in zip(h, h[1:])) for h in hyps)
    pairs = sum(max(len(h) - 1, 0) for h in hyps)
    return repeats / pairs if pairs else 0.0


@dataclass(frozen=True)
class LengthAccuracy:
    """How well predicted target lengths match the reference lengths."""

    exact: float  # fraction with predicted length == reference length
    within_1: float  # fraction with |predicted - reference| <= 1
    mean_abs_error: float  # mean |predicted - reference| in tokens
    n: int  # number of sentences


def length_accuracy(pred_lengths: Sequence[int], ref_lengths: Sequence[int]) -> LengthAccuracy:
    """Exact / within-one / mean-absolute-error agreement of predicted and reference lengths."""
    check_parallel(pred_lengths, ref_lengths, "predicted lengths")
    err = np.abs(np.asarray(pred_lengths, dtype=np.int64) - np.asarray(ref_lengths, dtype=np.int64))
    return LengthAccuracy(
        exact=float(np.mean(err == 0)),
        within_1=float(np.mean(err <= 1)),
        mean_abs_error=float(err.mean()),
        n=len(err),
    )


def _variant_counts(hyp: Sequence[int], token_variant: Mapping[int, int]) -> Counter[int]:
    # Tokens outside the mapping (shared tokens, punctuation) belong to no variant.
    return Counter(token_variant[t] for t in hyp if t in token_variant)


def _check_hyps(hyps: Sequence[Sequence[int]]) -> None:
    if len(hyps) == 0:
        raise AtnatError("no hypotheses to score: got 0 hypotheses")


def variant_mixing_rate(hyps: Sequence[Sequence[int]], token_variant: Mapping[int, int]) -> float:
    """Fraction of hypotheses whose variant-specific tokens come from more than one variant.

    ``token_variant`` maps a token id to its variant (0..M-1); unmapped tokens are ignored, and a
    hypothesis with no mapped token counts as unmixed. An AT decoder commits to one variant,
    a NAT decoder may mix them inside one sentence.
    """
    _check_hyps(hyps)
    mixed = sum(len(_variant_counts(h, token_variant)) > 1 for h in hyps)
    return mixed / len(hyps)


def variant_mixing_tokens(hyps: Sequence[Sequence[int]], token_variant: Mapping[int, int]) -> float:
    """Share of mapped tokens not in their sentence's majority variant, pooled over sentences.

    Graded companion to variant_mixing_rate: one stray token in a long sentence counts little.
    0.0 when no token is mapped.
    """
    _check_hyps(hyps)
    minority = total = 0
    for h in hyps:
        counts = _variant_counts(h, token_variant)
        n = sum(counts.values())
        total += n
        minority += n - max(counts.values(), default=0)
    return minority / total if total else 0.0
