"""Error-propagation metrics: where errors happen and whether one error breeds the next.

Token inputs are id lists ``list[list[int]]`` without BOS/EOS/pad (any sequences of hashable,
comparable items work, e.g. strings as character lists). AT decoders conditioned on their own
errors should show falling accuracy with position, a positive conditional-error delta and a
strong prefix-corruption effect; NAT decoders should not.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from atnat.core.errors import AtnatError
from atnat.experiments.evaluation.metrics.quality import bleu_metric, check_parallel, reference_streams

Tokens = Sequence[Hashable]


def accuracy_by_position(preds: Sequence[Tokens], refs: Sequence[Tokens]) -> pd.DataFrame:
    """Token accuracy at each reference position, for teacher-forced or free-running outputs.

    Position t counts every sentence whose reference has a token t; it is correct iff the
    prediction has a token t equal to it. Columns: position (0-based), accuracy, count.
    """
    check_parallel(preds, refs, "predictions")
    max_len = max(len(r) for r in refs)
    correct = np.zeros(max_len, dtype=np.int64)
    count = np.zeros(max_len, dtype=np.int64)
    for pred, ref in zip(preds, refs):
        count[: len(ref)] += 1
        for t in range(min(len(pred), len(ref))):
            correct[t] += pred[t] == ref[t]
    return pd.DataFrame(
        {"position": np.arange(max_len), "accuracy": correct / np.maximum(count, 1), "count": count}
    )


def _first_error(hyp: Tokens, ref: Tokens) -> int | None:
    for t, (h, r) in enumerate(zip(hyp, ref)):
        if h != r:
            return t
    return None if len(hyp) == len(ref) else min(len(hyp), len(ref))


def first_error_positions(hyps: Sequence[Tokens], refs: Sequence[Tokens]) -> list[int | None]:
    """First position where hyp and ref differ (a length difference counts); None if identical."""
    check_parallel(hyps, refs)
    return [_first_error(h, r) for h, r in zip(hyps, refs)]


def first_error_distribution(
    hyps: Sequence[Tokens], refs: Sequence[Tokens], bins: int = 10
) -> pd.DataFrame:
    """Histogram of the relative first-error position first_error / len(ref) over [0, 1].

    Only sentences with an error enter (fraction sums to 1 when any does); a hyp that is a longer
    extension of its ref scores 1.0, an empty ref 0.0. Bins are equal-width and the last one
    includes 1.0. Columns: bin (label like "0-0.1"), low, high, count, fraction.
    """
    if bins < 1:
        raise AtnatError(f"bins must be >= 1, got {bins}")
    rel = [
        pos / max(len(ref), 1)
        for pos, ref in zip(first_error_positions(hyps, refs), refs)
        if pos is not None
    ]
    counts, edges = np.histogram(np.asarray(rel, dtype=float), bins=bins, range=(0.0, 1.0))
    return pd.DataFrame(
        {
            "bin": [f"{lo:.2g}-{hi:.2g}" for lo, hi in zip(edges[:-1], edges[1:])],
            "low": edges[:-1],
            "high": edges[1:],
            "count": counts,
            "fraction": counts / max(len(rel), 1),
        }
    )


def align(hyp: Tokens, ref: Tokens) -> list[str]:
    """Levenshtein alignment: column ops "M" match, "S" substitution, "I" (hyp only), "D" (ref only).

    Tie-break: the backtrace runs from the end and prefers the diagonal (M/S), then D, then I.
    So a substitution beats an insertion+deletion pair and gaps land as early as possible,
    e.g. align([1, 1], [1]) == ["I", "M"].
    """
    n, m = len(hyp), len(ref)
    # dist[i][j]: edit distance between hyp[:i] and ref[:j]
    dist = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n + 1):
        dist[i][0] = i
    for j in range(m + 1):
        dist[0][j] = j
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            diag = dist[i - 1][j - 1] + (hyp[i - 1] != ref[j - 1])
            dist[i][j] = min(diag, dist[i][j - 1] + 1, dist[i - 1][j] + 1)
    ops: list[str] = []
    i, j = n, m
    while i > 0 or j > 0:
        if i > 0 and j > 0 and dist[i][j] == dist[i - 1][j - 1] + (hyp[i - 1] != ref[j - 1]):
            ops.append("M" if hyp[i - 1] == ref[j - 1] else "S")
            i, j = i - 1, j - 1
        elif j > 0 and dist[i][j] == dist[i][j - 1] + 1:
            ops.append("D")
            j -= 1
        else:
            ops.append("I")
            i -= 1
    return ops[::-1]


@dataclass(frozen=True)
class ConditionalError:
    """Error rate of an alignment column given whether the previous column was an error, observed
    and as expected if every sentence's errors stood in a random order (within-sentence shuffle)."""

    p_err_given_err: float  # P(column t is an error | column t-1 is an error); nan if never
    p_err_given_ok: float  # P(column t is an error | column t-1 is a match); nan if never
    delta: float  # p_err_given_err - p_err_given_ok, observed
    shuffled_delta: float  # the same difference expected under a within-sentence shuffle (exact)
    excess: float  # delta - shuffled_delta: > 0 means errors follow errors beyond what each
    # sentence's error count explains (propagation); ~0 for a whole-sentence choice or random errors
    n_pairs: int  # consecutive column pairs pooled over all sentences


def _ratio(num: float, den: float) -> float:
    return num / den if den else float("nan")


def conditional_error_rate(hyps: Sequence[Tokens], refs: Sequence[Tokens]) -> ConditionalError:
    """Pooled P(err | previous err) vs P(err | previous ok) over consecutive columns of align(),
    against the exact expectation when each sentence's k errors among its n columns are placed at
    random: E[err,err] = k(k-1)/n, E[err,ok] = E[ok,err] = k(n-k)/n, E[ok,ok] = (n-k)(n-k-1)/n.

    A sentence that is all errors (a whole-sentence choice against one reference, a length shift
    that misaligns everything) or all matches adds the same counts to both sides, so it cannot
    make a decoder look as if its errors propagate."""
    check_parallel(hyps, refs)
    pairs = np.zeros((2, 2), dtype=np.int64)  # pairs[prev_err][cur_err], observed
    expected = np.zeros((2, 2), dtype=np.float64)  # the same under a within-sentence shuffle
    for hyp, ref in zip(hyps, refs):
        err = [op != "M" for op in align(hyp, ref)]
        for prev, cur in zip(err, err[1:]):
            pairs[int(prev), int(cur)] += 1
        n, k = len(err), sum(err)
        if n > 1:
            expected += np.array([[(n - k) * (n - k - 1), k * (n - k)], [k * (n - k), k * (k - 1)]]) / n
    delta = _ratio(pairs[1, 1], pairs[1].sum()) - _ratio(pairs[0, 1], pairs[0].sum())
    shuffled = _ratio(expected[1, 1], expected[1].sum()) - _ratio(expected[0, 1], expected[0].sum())
    return ConditionalError(float(_ratio(pairs[1, 1], pairs[1].sum())), float(_ratio(pairs[0, 1], pairs[0].sum())),
                            float(delta), float(shuffled), float(delta - shuffled), int(pairs.sum()))


def edit_distance(hyp: Tokens, ref: Tokens) -> int:
    """Levenshtein distance (unit costs)."""
    previous = list(range(len(ref) + 1))
    for i, h in enumerate(hyp, 1):
        current = [i]
        for j, r in enumerate(ref, 1):
            current.append(min(previous[j - 1] + (h != r), previous[j] + 1, current[j - 1] + 1))
        previous = current
    return previous[-1]


def closest_references(hyps: Sequence[Tokens], streams: Sequence[Sequence[Tokens]]) -> list[Tokens]:
    """Per hypothesis, the reference of the streams closest to it in edit distance (first on ties):
    with several correct outputs, errors are counted against the one the system chose."""
    for stream in streams:
        check_parallel(hyps, stream)
    if len(streams) == 1:
        return list(streams[0])
    return [min((s[i] for s in streams), key=lambda r: edit_distance(h, r)) for i, h in enumerate(hyps)]


def corruption_effect(
    clean_correct: np.ndarray, corrupt_correct: np.ndarray, valid: np.ndarray | None = None
) -> np.ndarray:
    """Accuracy at distance d after a corrupted prefix divided by the accuracy after the clean prefix.

    Expected input, shape (N, D) bool: row n is one probe (a sentence and a cut point k whose
    prefix ref[:k] is fed intact, or with tokens replaced); column d says whether the model's
    prediction of ref[k + d] was correct (d = 0 is the first token after the prefix). Both arrays
    come from the same probes. ``valid`` (N, D) bool marks cells that exist (ref long enough);
    None means all. Returns (D,) ratios: 1 = no effect, < 1 = the corruption propagates;
    nan where the clean accuracy is 0 or no probe reaches distance d.
    """
    clean, corrupt = np.asarray(clean_correct, dtype=bool), np.asarray(corrupt_correct, dtype=bool)
    mask = np.ones_like(clean) if valid is None else np.asarray(valid, dtype=bool)
    if clean.ndim != 2 or clean.shape != corrupt.shape or mask.shape != clean.shape:
        raise AtnatError(
            "corruption_effect expects equal (N, D) arrays: got clean "
            f"{clean.shape}, corrupt {corrupt.shape}, valid {mask.shape}"
        )
    n = mask.sum(axis=0)  # (D,)
    with np.errstate(divide="ignore", invalid="ignore"):
        acc_clean = (clean & mask).sum(axis=0) / n  # (D,)
        acc_corrupt = (corrupt & mask).sum(axis=0) / n  # (D,)
        ratio = acc_corrupt / acc_clean  # (D,)
    ratio[~(acc_clean > 0)] = np.nan
    return ratio


def _default_edges(lengths: np.ndarray) -> list[int]:
    # Reference-length quartiles (so all systems on one test set share buckets), the last = max.
    return sorted({max(1, int(np.ceil(q))) for q in np.quantile(lengths, [0.25, 0.5, 0.75, 1.0])})


def bleu_by_length(
    hyps: list[str],
    refs: list[str] | list[list[str]],
    *,
    bucket_edges: list[int] | None = None,
    tokenize: str = "13a",
) -> pd.DataFrame:
    """Corpus BLEU per reference-length bucket (length = whitespace tokens of the reference; with several
    reference streams, of the first, and BLEU against all of them, as the run's BLEU).

    ``bucket_edges`` are inclusive upper bounds, e.g. [10, 20] gives "1-10", "11-20", "21+"
    (a length-0 reference joins the first bucket). Default: the reference-length quartiles,
    rounded up and deduplicated, ending at the maximum length. Empty buckets are left out.
    Columns: bucket, n, bleu.
    """
    streams = reference_streams(refs)
    for stream in streams:
        check_parallel(hyps, stream)
    lengths = np.array([len(r.split()) for r in streams[0]])
    edges = _default_edges(lengths) if bucket_edges is None else list(bucket_edges)
    if not edges or any(b <= a for a, b in zip(edges, edges[1:])) or edges[0] < 1:
        raise AtnatError(f"bucket_edges must be positive and strictly increasing, got {bucket_edges}")
    bucket_of = np.searchsorted(edges, lengths, side="left")  # (N,) index of first edge >= length
    labels = [f"{lo + 1}-{hi}" for lo, hi in zip([0] + edges[:-1], edges)] + [f"{edges[-1] + 1}+"]
    rows = []
    metric = bleu_metric(tokenize)
    for b, label in enumerate(labels):
        idx = np.flatnonzero(bucket_of == b)
        if len(idx) == 0:
            continue
        score = metric.corpus_score([hyps[i] for i in idx], [[stream[i] for i in idx] for stream in streams])
        rows.append({"bucket": label, "n": len(idx), "bleu": float(score.score)})
    return pd.DataFrame(rows, columns=["bucket", "n", "bleu"])
