"""Corpus translation quality: BLEU and chrF with bootstrap CIs, paired significance, exact match.

All BLEU/chrF numbers come from sacrebleu so they match what its CLI prints and carry its
reproducibility signatures. sacrebleu seeds its resampling from the environment variable
``SACREBLEU_SEED`` (read when a bootstrap or a ``PairedTest`` starts); we set it for the
duration of each call and restore it afterwards, so results depend only on the ``seed`` argument.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.significance import PairedTest

from atnat.core.errors import AtnatError

_SEED_ENV = "SACREBLEU_SEED"


@dataclass(frozen=True)
class Quality:
    """Corpus-level quality of one system on one test set."""

    bleu: float  # corpus BLEU, 0..100
    chrf: float  # corpus chrF2, 0..100
    bleu_ci_low: float | None  # lower end of sacrebleu's 95% bootstrap CI; None without bootstrap
    bleu_ci_high: float | None  # upper end of that CI; None without bootstrap
    bleu_signature: str  # sacrebleu signature, e.g. "nrefs:1|bs:1000|seed:12345|case:mixed|..."
    chrf_signature: str  # sacrebleu chrF signature
    n_sentences: int  # number of hypothesis/reference pairs scored


def check_parallel(hyps: Sequence[object], refs: Sequence[object], what: str = "hypotheses") -> None:
    """Raise AtnatError unless hyps and refs are non-empty and equally many (one ref per hyp)."""
    if len(hyps) != len(refs):
        raise AtnatError(
            f"{what} and references differ in count: {len(hyps)} {what} vs {len(refs)} references; "
            "expected one reference per hypothesis"
        )
    if len(hyps) == 0:
        raise AtnatError(f"no {what} to score: got 0 {what} and 0 references")


def _check_seed(seed: int) -> None:
    # sacrebleu's PairedTest treats a seed of 0 as "unseeded" and numpy rejects negatives.
    if not isinstance(seed, int) or seed < 1:
        raise AtnatError(
            f"seed must be a positive integer (sacrebleu treats 0 as unseeded), got {seed!r}"
        )


@contextlib.contextmanager
def _sacrebleu_seed(seed: int) -> Iterator[None]:
    """Temporarily set SACREBLEU_SEED, which sacrebleu reads when it starts resampling."""
    old = os.environ.get(_SEED_ENV)
    os.environ[_SEED_ENV] = str(seed)
    try:
        yield
    finally:
        if old is None:
            del os.environ[_SEED_ENV]
        else:
            os.environ[_SEED_ENV] = old


def bleu_metric(tokenize: str) -> BLEU:
    """The sacrebleu BLEU scorer used throughout (default settings, chosen tokeniser)."""
    # force=True: with tokenize="none" the input is tokenised on purpose; skip sacrebleu's warning.
    return BLEU(tokenize=tokenize, force=tokenize == "none")


def reference_streams(refs: Sequence[str] | Sequence[Sequence[str]]) -> list[list[str]]:
    """One list of references, or several reference streams (each one string per sentence), as
    sacrebleu's list of streams."""
    if not len(refs) or isinstance(refs[0], str):
        return [list(refs)]
    return [list(stream) for stream in refs]


def corpus_quality(
    hyps: list[str],
    refs: list[str] | list[list[str]],
    *,
    tokenize: str = "13a",
    n_bootstrap: int = 1000,
    seed: int = 12345,
) -> Quality:
    """Corpus BLEU and chrF of detokenised hyps against one reference each (or several reference
    streams), with a BLEU CI.

    The CI is sacrebleu's: bootstrap mean +/- half the width of the 2.5..97.5 percentile range
    over ``n_bootstrap`` resamples (None when n_bootstrap <= 1). Use tokenize="none" for synthetic
    tasks whose tokens are space-separated symbols.
    """
    streams = reference_streams(refs)
    for stream in streams:
        check_parallel(hyps, stream)
    _check_seed(seed)
    bleu, chrf = bleu_metric(tokenize), CHRF()
    with _sacrebleu_seed(seed):
        b = bleu.corpus_score(hyps, streams, n_bootstrap=max(n_bootstrap, 1))
    c = chrf.corpus_score(hyps, streams)
    low = high = None
    if n_bootstrap > 1:
        # sacrebleu stores the bootstrap estimate on the score as _mean / _ci (see Score.estimate_ci).
        low, high = float(b._mean - b._ci), float(b._mean + b._ci)
    return Quality(
        bleu=float(b.score),
        chrf=float(c.score),
        bleu_ci_low=low,
        bleu_ci_high=high,
        bleu_signature=str(bleu.get_signature()),
        chrf_signature=str(chrf.get_signature()),
        n_sentences=len(hyps),
    )


def paired_significance(
    baseline: list[str],
    systems: Mapping[str, list[str]],
    refs: list[str] | list[list[str]],
    *,
    method: Literal["bs", "ar"] = "bs",
    n: int = 1000,
    tokenize: str = "13a",
    seed: int = 12345,
) -> dict[str, float]:
    """Two-sided p-value of the BLEU difference between each system and the baseline (sacrebleu PairedTest).

    method "bs" is paired bootstrap resampling (Koehn 2004), "ar" approximate randomisation;
    n is the number of resamples / trials. sacrebleu's bootstrap p counts one tail (the resampled
    |differences|, centred on their mean, above the observed one): for a clear difference that is the
    one-sided p, so at p < 0.05 it rejected about 10% of pairs of equal systems. It is doubled here (capped
    at 1) into the two-sided p that approximate randomisation gives. A system whose corpus BLEU equals the
    baseline's gets p = 1.0: sacrebleu counts only resampled differences strictly greater than the
    observed one, which would report p = 1/(n+1) for two identical systems.
    """
    if method not in ("bs", "ar"):
        raise AtnatError(f"paired test method must be 'bs' or 'ar', got {method!r}")
    if n < 1:
        raise AtnatError(f"number of paired-test samples must be >= 1, got {n}")
    if not systems:
        raise AtnatError("paired_significance needs at least one system besides the baseline")
    _check_seed(seed)
    streams = reference_streams(refs)
    check_parallel(baseline, streams[0], "baseline hypotheses")
    for name, hyps in systems.items():
        check_parallel(hyps, streams[0], f"hypotheses of system {name!r}")
    names = list(systems)
    named = [("__baseline__", baseline)] + [(name, systems[name]) for name in names]
    with _sacrebleu_seed(seed):
        test = PairedTest(named, {"BLEU": bleu_metric(tokenize)}, streams, test_type=method, n_samples=n)
        _, scores = test()
    base, results = scores["BLEU"][0], scores["BLEU"][1:]
    sides = 2.0 if method == "bs" else 1.0  # sacrebleu's bootstrap p is one tail's
    return {
        name: 1.0 if res.score == base.score else min(1.0, sides * float(res.p_value))
        for name, res in zip(names, results)
    }


def holm(pvalues: Mapping[str, float]) -> dict[str, float]:
    """Holm-Bonferroni adjusted p-values (step-down, monotone, capped at 1) of a family of tests;
    NaN entries are left out of the family and stay NaN."""
    valid = sorted(((p, k) for k, p in pvalues.items() if p == p), key=lambda x: x[0])
    m, running, out = len(valid), 0.0, {k: float("nan") for k in pvalues}
    for i, (p, k) in enumerate(valid):
        running = max(running, min(1.0, (m - i) * p))
        out[k] = running
    return out


def exact_match(hyps: Sequence[str | Sequence[int]], refs: Sequence[str | Sequence[int]]) -> float:
    """Fraction of hypotheses identical to their reference (strings or token-id lists)."""
    check_parallel(hyps, refs)
    same = sum(tuple(h) == tuple(r) for h, r in zip(hyps, refs))
    return same / len(hyps)


_COMPOUND = __import__("re").compile(r"(\S)-(\S)")


_SPLIT_MARK = __import__("re").compile(r" ?##AT##-##AT## ?")


def moses_tokenize(lines: Sequence[str], lang: str, *, compound_split: bool = False) -> list[str]:
    """Moses-tokenised lines (sacremoses, no escaping); with `compound_split`, hyphenated compounds
    are split as in the WMT en-de evaluations of NAT papers (`a-b` -> `a ##AT##-##AT## b`). Text tokenised
    so already (a corpus released that way: HTML-escaped, compounds split) is first taken back to its
    hyphens and characters, so that it is tokenised once, not twice."""
    import html

    from sacremoses import MosesTokenizer

    tok = MosesTokenizer(lang=lang)
    out = [tok.tokenize(html.unescape(_SPLIT_MARK.sub("-", line)), escape=False, return_str=True) for line in lines]
    if compound_split:
        out = [_COMPOUND.sub(r"\1 ##AT##-##AT## \2", line) for line in out]  # one pass, as the papers' script
    return out


def tokenized_bleu(hyps: list[str], refs: Sequence[list[str]] | list[str], *, lang: str,
                   compound_split: bool = False) -> float:
    """BLEU on Moses-tokenised text, as NAT papers report it (multi-bleu.perl on tokenised output):
    comparable with their tables, NOT with sacreBLEU, and always labelled as such. `refs`: one list
    of references, or several reference streams."""
    streams = [refs] if refs and isinstance(refs[0], str) else list(refs)
    for stream in streams:
        check_parallel(hyps, stream)
    tokenised = [moses_tokenize(s, lang, compound_split=compound_split) for s in streams]
    hyp_tok = moses_tokenize(hyps, lang, compound_split=compound_split)
    return float(bleu_metric("none").corpus_score(hyp_tok, tokenised).score)


@dataclass(frozen=True)
class Difference:
    """BLEU of system a minus system b, averaged over seeds, with its 95% interval."""

    diff: float
    low: float
    high: float
    n_seeds: int
    method: str  # what the interval covers
    seed_se: float = float("nan")  # s / sqrt(k) of the per-seed differences (NaN with one seed)
    sentence_se: float = float("nan")  # sd of the test-sentence draws of the mean difference


def seed_interval(per_seed: Sequence[float], sentence_draws: Sequence[float], level: float = 0.95
                  ) -> tuple[float, float, str]:
    """A `level` interval for the mean over seeds of a per-seed quantity (a BLEU score, or a paired
    BLEU difference) measured on one test set. Two sources of noise: the choice of test sentences
    (`sentence_draws`: the mean over seeds recomputed on resampled test sentences, the same sentences
    for every seed) and the training seed. With one seed: the percentile interval of the draws (test
    sentences only). With k >= 2 seeds: t_interval, s the sd of the k per-seed values and v the
    variance of the draws. A bootstrap over 2 or 3 seeds would come out as about [min, max] of the
    seeds, which covers the mean far less often than 95%. -> (low, high, what it covers)."""
    values, draws = np.asarray(per_seed, dtype=float), np.asarray(sentence_draws, dtype=float)
    tail = 100 * (1 - level) / 2
    if len(values) == 1:
        return (float(np.percentile(draws, tail)), float(np.percentile(draws, 100 - tail)),
                "test sentences resampled (one seed: training noise not covered)")
    return t_interval(float(np.mean(values)), float(np.std(values, ddof=1)), len(values),
                      float(np.var(draws, ddof=1)), level)


def t_interval(mean: float, sd: float, k: int, sentence_var: float, level: float = 0.95
               ) -> tuple[float, float, str]:
    """The `level` interval of the mean of k >= 2 per-seed values with standard deviation `sd`, measured
    on one test set whose sentence noise has variance `sentence_var` (shared by the seeds):
    mean +- combined_half. -> (low, high, what it covers)."""
    half = combined_half(sd / k ** 0.5, k, sentence_var ** 0.5, level)
    if half == 0:
        return mean, mean, f"{k} seeds: no variation over seeds or test sentences"
    return (mean - half, mean + half,
            f"{k} seeds: t at {k - 1} df on the seed part (sd/sqrt({k})), normal on the test-sentence part, "
            "added in quadrature")


def combined_half(seed_se: float, k: int, sentence_se: float, level: float = 0.95) -> float:
    """Half the width of a `level` interval for a mean over k >= 2 seeds with two independent noises:
    sqrt((t_{k-1} * seed_se)^2 + (z * sentence_se)^2), each part at its own quantile - Student's t
    at k - 1 degrees of freedom for the seeds' standard error, the normal one for the test-sentence
    part (estimated from 1000 resamples: as good as known). One t for the sum, at Welch-Satterthwaite
    degrees of freedom, grows those df into the hundreds whenever 2-3 seeds happen to agree and then
    covers only 88-95% (simulated: seed sd 0.5-2 BLEU, sentence sd 0.37, 2-3 seeds; this
    rule 96-98%; results/interval-coverage/coverage.csv)."""
    from scipy.stats import norm
    from scipy.stats import t as student

    q = 1 - (1 - level) / 2
    return float(((student.ppf(q, k - 1) * seed_se) ** 2 + (norm.ppf(q) * sentence_se) ** 2) ** 0.5)


def relevel(point: float, low: float, high: float, level: float, *, k: int = 1,
            seed_se: float = float("nan"), sentence_se: float = float("nan")) -> tuple[float, float]:
    """A 95% interval around `point` at another `level` - for simultaneous intervals over m systems
    (Bonferroni: 1 - 0.05/m). k >= 2 seeds with both standard errors: point +- combined_half, exact.
    k >= 2 without them (a table written before they were kept): each side scaled by the ratio of
    t quantiles at k - 1 df, the widest the parts could need. One seed (a percentile interval of
    resampled test sentences): each side scaled by the ratio of normal quantiles, the usual
    approximation of its tails."""
    from scipy.stats import t as student

    if level == 0.95:
        return low, high
    if k >= 2 and not (np.isnan(seed_se) or np.isnan(sentence_se)):
        half = combined_half(seed_se, k, sentence_se, level)
        return point - half, point + half
    df = k - 1 if k >= 2 else float("inf")
    ratio = float(student.ppf(1 - (1 - level) / 2, df) / student.ppf(0.975, df))
    return point - (point - low) * ratio, point + (high - point) * ratio


def bleu_difference(a: Sequence[Sequence[str]], b: Sequence[Sequence[str]], refs: Sequence[str] | Sequence[Sequence[str]],
                    *, tokenize: str = "13a", n: int = 1000, seed: int = 12345) -> Difference:
    """Mean over seeds of BLEU(a_s) - BLEU(b_s), pairing seed s of a with seed s of b (a[s], b[s]: the
    outputs of seed s on the same test sentences, `refs` their reference streams), with the 95%
    interval of `seed_interval`: the test sentences resampled `n` times (the same sentences for every
    seed and both systems; corpus BLEU recomputed from summed statistics), and the seeds' own spread.
    With n < 2 there is no interval (NaN)."""
    if len(a) != len(b) or not a:
        raise AtnatError(f"bleu_difference: {len(a)} and {len(b)} seeds; pair the same seeds of both systems")
    streams = reference_streams(refs)
    for outputs in (*a, *b):
        check_parallel(outputs, streams[0])
    bleu = bleu_metric(tokenize)
    stats_a = [np.array(bleu._extract_corpus_statistics(list(h), streams), dtype=np.int64) for h in a]  # (N, 10)
    stats_b = [np.array(bleu._extract_corpus_statistics(list(h), streams), dtype=np.int64) for h in b]

    def score(stats: np.ndarray) -> float:
        return bleu._compute_score_from_stats(stats.sum(axis=0).tolist()).score

    per_seed = [score(sa) - score(sb) for sa, sb in zip(stats_a, stats_b)]
    seed_se = float(np.std(per_seed, ddof=1)) / len(a) ** 0.5 if len(a) > 1 else float("nan")
    if n < 2:  # one resample is no interval (as corpus_quality's): NaN, so no verdict rests on it
        return Difference(float(np.mean(per_seed)), float("nan"), float("nan"), len(a),
                          f"no interval: {n} test-sentence resample (eval.n_bootstrap < 2)", seed_se)
    rng = np.random.default_rng(seed)
    n_sents = len(streams[0])
    draws = []
    for _ in range(n):
        rows = rng.integers(0, n_sents, size=n_sents)
        draws.append(np.mean([score(sa[rows]) - score(sb[rows]) for sa, sb in zip(stats_a, stats_b)]))
    low, high, method = seed_interval(per_seed, draws)
    return Difference(float(np.mean(per_seed)), low, high, len(a), method, seed_se, float(np.std(draws, ddof=1)))
