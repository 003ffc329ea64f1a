"""Corpus quality metrics: values agree with sacrebleu, CIs and p-values are seeded and sane."""

import math
import os

import pytest
import sacrebleu
from sacrebleu.metrics import BLEU

from atnat.core.errors import AtnatError
from atnat.experiments.evaluation.metrics import corpus_quality, exact_match, paired_significance

REFS = [
    "the cat sat on the mat",
    "a quick brown fox jumps over the lazy dog",
    "we went to the market yesterday",
    "it is raining again today",
]
HYPS = [
    "the cat sat on a mat",
    "the quick brown fox jumped over a lazy dog",
    "we went to market yesterday",
    "it rains again today",
]


def _corpus(n_copies: int = 10) -> tuple[list[str], list[str], list[str]]:
    """A test set where `good` is much closer to the references than `bad`."""
    refs = [f"{r} number {i}" for i in range(n_copies) for r in REFS]
    good = [f"{h} number {i}" for i in range(n_copies) for h in HYPS]
    bad = [f"sorry no idea {i}" for i in range(n_copies) for _ in REFS]
    return refs, good, bad


def test_identical_text_scores_100():
    q = corpus_quality(REFS, REFS, n_bootstrap=1)
    assert q.bleu == pytest.approx(100.0)
    assert q.chrf == pytest.approx(100.0)
    assert q.n_sentences == 4


def test_scores_equal_sacrebleu_computed_directly():
    q = corpus_quality(HYPS, REFS, n_bootstrap=1)
    assert q.bleu == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score)
    assert q.chrf == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score)
    assert 0 < q.bleu < 100
    assert "tok:13a" in q.bleu_signature and "nc:6" in q.chrf_signature
    assert q.bleu_ci_low is None and q.bleu_ci_high is None


def test_tokenize_none_keeps_symbols_whole():
    hyps, refs = ["x y z w."], ["x y z w ."]
    assert corpus_quality(hyps, refs, n_bootstrap=1).bleu == pytest.approx(100.0)  # 13a splits "."
    q = corpus_quality(hyps, refs, tokenize="none", n_bootstrap=1)
    assert q.bleu == pytest.approx(BLEU(tokenize="none").corpus_score(hyps, [refs]).score)
    assert q.bleu < 100 and "tok:none" in q.bleu_signature


def test_bootstrap_ci_brackets_score_and_is_seeded():
    refs, good, _ = _corpus()
    old = os.environ.get("SACREBLEU_SEED")
    a = corpus_quality(good, refs, n_bootstrap=200, seed=7)
    b = corpus_quality(good, refs, n_bootstrap=200, seed=7)
    c = corpus_quality(good, refs, n_bootstrap=200, seed=8)
    assert a.bleu_ci_low < a.bleu < a.bleu_ci_high
    assert (a.bleu_ci_low, a.bleu_ci_high) == (b.bleu_ci_low, b.bleu_ci_high)
    assert (a.bleu_ci_low, a.bleu_ci_high) != (c.bleu_ci_low, c.bleu_ci_high)
    assert "bs:200" in a.bleu_signature and "seed:7" in a.bleu_signature
    assert os.environ.get("SACREBLEU_SEED") == old  # the seed is not left behind


@pytest.mark.parametrize("method", ["bs", "ar"])
def test_paired_significance(method):
    refs, good, bad = _corpus()
    p = paired_significance(bad, {"same": list(bad), "better": good}, refs, method=method, n=200)
    assert p["same"] == 1.0
    assert p["better"] < 0.01
    again = paired_significance(bad, {"same": list(bad), "better": good}, refs, method=method, n=200)
    assert again == p


def test_the_bootstrap_p_is_two_sided_and_agrees_with_the_paired_interval():
    """Two systems that differ only by chance (the same corruption of the same references): sacrebleu's paired
    bootstrap gave p = 0.039, one tail's p, while the paired 95% interval of their difference held 0 (at p <
    0.05 its test rejected about 10% of such pairs)."""
    import numpy as np

    from atnat.experiments.evaluation.metrics.quality import bleu_difference

    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(300)]
    corrupt = lambda ref, p: " ".join(t if rng.random() > p else words[rng.integers(300)] for t in ref)  # noqa: E731
    for _ in range(9):  # the ninth such pair
        refs = [[words[j] for j in rng.integers(0, 300, rng.integers(5, 25))] for _ in range(300)]
        rates = rng.uniform(0.05, 0.6, 300)
        a, b = [corrupt(x, p) for x, p in zip(refs, rates)], [corrupt(x, p) for x, p in zip(refs, rates)]
    refs = [" ".join(x) for x in refs]
    difference = bleu_difference([a], [b], refs, tokenize="none", seed=9)
    assert difference.low < 0 < difference.high  # their paired 95% interval holds 0 ...
    assert paired_significance(b, {"a": a}, refs, tokenize="none", seed=9)["a"] >= 0.05  # ... and the test agrees


def test_paired_significance_rejects_bad_input():
    with pytest.raises(AtnatError, match="'sys'.*3 .* 4 references"):
        paired_significance(HYPS, {"sys": HYPS[:3]}, REFS, n=10)
    with pytest.raises(AtnatError, match="method"):
        paired_significance(HYPS, {"sys": HYPS}, REFS, method="t-test", n=10)
    with pytest.raises(AtnatError, match="seed"):
        paired_significance(HYPS, {"sys": HYPS}, REFS, n=10, seed=0)


def test_mismatched_counts_raise_naming_counts():
    with pytest.raises(AtnatError, match="3 hypotheses vs 4 references"):
        corpus_quality(HYPS[:3], REFS)
    with pytest.raises(AtnatError, match="0 hypotheses"):
        corpus_quality([], [])


def test_exact_match_on_strings_and_ids():
    assert exact_match(["a b", "c", "d"], ["a b", "c ", "d"]) == pytest.approx(2 / 3)
    assert exact_match([[1, 2], [3], []], [[1, 2], [3, 4], []]) == pytest.approx(2 / 3)
    assert exact_match([(1, 2)], [[1, 2]]) == 1.0
    with pytest.raises(AtnatError, match="2 hypotheses vs 1 references"):
        exact_match([[1], [2]], [[1]])


def test_holm_adjusts_step_down_monotone_and_leaves_missing_p_out():
    from atnat.experiments.evaluation.metrics.quality import holm

    # sorted: a .01 (x3 = .03), c .03 (x2 = .06), b .04 (x1 = .04, raised to .06: monotone); d not tested
    out = holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": float("nan")})
    assert out["a"] == pytest.approx(0.03) and out["c"] == pytest.approx(0.06) and out["b"] == pytest.approx(0.06)
    assert out["d"] != out["d"]
    assert holm({"x": 0.6, "y": 0.7}) == {"x": 1.0, "y": 1.0}  # capped at 1


def test_moses_tokenised_bleu_splits_punctuation_and_optionally_compounds():
    from atnat.experiments.evaluation.metrics.quality import bleu_metric, moses_tokenize, tokenized_bleu

    assert moses_tokenize(["Ein Auto-Rennen, schnell."], "de") == ["Ein Auto-Rennen , schnell ."]
    assert moses_tokenize(["Ein Auto-Rennen, schnell."], "de", compound_split=True) == [
        "Ein Auto ##AT##-##AT## Rennen , schnell ."]
    hyp, ref = ["Das ist ein gutes Auto-Rennen."], ["Das ist ein gutes Auto-Rennen ."]
    assert tokenized_bleu(hyp, ref, lang="de") == pytest.approx(100.0)  # equal once tokenised
    assert bleu_metric("none").corpus_score(hyp, [ref]).score < 100.0  # raw strings differ
    two_streams = tokenized_bleu(hyp, [["Etwas anderes hier ganz ."], ref], lang="de")
    assert two_streams == pytest.approx(100.0)  # the closest of several references counts


def test_bleu_difference_pools_sentences_and_seeds_and_pairs_by_seed():
    import random

    from atnat.experiments.evaluation.metrics.quality import bleu_difference

    rng = random.Random(0)
    refs = [" ".join(rng.choice("abcdefgh") for _ in range(8)) for _ in range(150)]

    def noisy(p, seed):
        r = random.Random(seed)
        return [" ".join(w if r.random() > p else "z" for w in line.split()) for line in refs]

    same = bleu_difference([noisy(0.2, s) for s in (1, 2, 3)], [noisy(0.2, s) for s in (1, 2, 3)], refs,
                           tokenize="none", n=200)
    assert same.diff == 0 and same.low == 0 and same.high == 0 and same.n_seeds == 3  # paired by seed
    better = bleu_difference([noisy(0.1, s) for s in (1, 2)], [noisy(0.3, s + 10) for s in (1, 2)], refs,
                             tokenize="none", n=200)
    assert better.low > 0 and better.low < better.diff < better.high and "2 seeds: t at 1 df" in better.method
    one = bleu_difference([noisy(0.2, 1)], [noisy(0.2, 2)], refs, tokenize="none", n=200)
    assert one.low < one.diff < one.high and "one seed" in one.method
    from atnat.experiments.reporting.ranking import verdict

    for seeds in ([1], [1, 2]):  # one resample (eval.n_bootstrap: 1) is no interval, and so no verdict
        d = bleu_difference([noisy(0.1, s) for s in seeds], [noisy(0.3, s + 10) for s in seeds], refs,
                            tokenize="none", n=1)
        assert d.diff > 0 and math.isnan(d.low) and math.isnan(d.high) and "no interval" in d.method
        assert verdict(d.low, d.high, 1.0) == "not resolved"


def test_two_or_three_seeds_give_a_t_interval_not_the_seed_range():
    """A bootstrap over 2-3 seeds comes out as about [min, max] of the seeds (it covered a true
    difference of 0 in about half of simulated 2-seed cases, not 95%). With per-seed differences
    +0.5 and +3.0 on many sentences, the old interval was about [+0.5, +3.0], "ahead"; 2 seeds cannot
    show that."""
    import random

    from scipy.stats import t as student

    from atnat.experiments.evaluation.metrics.quality import bleu_difference, seed_interval

    rng = random.Random(0)
    refs = [" ".join(rng.choice("abcdefgh") for _ in range(8)) for _ in range(1500)]

    def noisy(p, seed):
        r = random.Random(seed)
        return [" ".join(w if r.random() > p else "z" for w in line.split()) for line in refs]

    base = [noisy(0.2, 1), noisy(0.2, 2)]
    ours = [noisy(0.195, 1), noisy(0.16, 2)]  # a little better with seed 1, much better with seed 2
    d = bleu_difference(ours, base, refs, tokenize="none", n=100)
    per_seed = [bleu_difference([o], [b], refs, tokenize="none", n=10).diff for o, b in zip(ours, base)]
    assert 0 < per_seed[0] < 1.5 < per_seed[1] and d.diff == pytest.approx(sum(per_seed) / 2)
    assert d.low < 0 < d.diff < d.high and "2 seeds: t at 1 df" in d.method
    # the arithmetic: mean +- t(df) * sqrt(s^2/k + v); with no sentence noise, df = k - 1
    low, high, _ = seed_interval([0.2, 0.8, 1.4], [0.8] * 50)
    half = student.ppf(0.975, 2) * (0.36 / 3) ** 0.5
    assert (low, high) == pytest.approx((0.8 - half, 0.8 + half))
    low, high, what = seed_interval([1.0], [0.5, 1.0, 1.5] * 20)  # one seed: the draws' percentiles
    assert low == pytest.approx(0.5) and high == pytest.approx(1.5) and "one seed" in what


def test_an_interval_re_levelled_from_its_standard_errors_is_the_interval_at_that_level():
    """relevel (simultaneous intervals for the best of several) gives exactly t_interval at the other
    level from the two standard errors bleu_difference records (no seed part with one seed)."""
    import random

    from atnat.experiments.evaluation.metrics.quality import bleu_difference, combined_half, relevel, t_interval

    low, high, _ = t_interval(1.0, 0.6, 3, 0.04)
    parts = {"k": 3, "seed_se": 0.6 / 3 ** 0.5, "sentence_se": 0.2}
    assert relevel(1.0, low, high, 0.99, **parts) == pytest.approx(t_interval(1.0, 0.6, 3, 0.04, 0.99)[:2])
    assert relevel(1.0, low, high, 0.95, **parts) == (low, high)
    assert relevel(1.0, 0.0, 3.0, 0.99) == pytest.approx((1 - 2.5758 / 1.96, 1 + 2 * 2.5758 / 1.96),
                                                          abs=1e-4)  # one seed: asymmetric sides kept
    from scipy.stats import t as student
    ratio = student.ppf(0.995, 2) / student.ppf(0.975, 2)  # without the parts: widened at k - 1 df
    assert relevel(1.0, low, high, 0.99, k=3) == pytest.approx((1 - (1 - low) * ratio, 1 + (high - 1) * ratio))
    rng = random.Random(1)
    refs = [" ".join(rng.choice("abcdef") for _ in range(6)) for _ in range(200)]
    hyp = lambda seed, p: [" ".join(w if random.Random(seed * 1000 + i).random() > p else "z" for w in line.split())
                           for i, line in enumerate(refs)]  # noqa: E731
    two = bleu_difference([hyp(1, 0.1), hyp(2, 0.15)], [hyp(3, 0.2), hyp(4, 0.2)], refs, tokenize="none", n=50)
    assert two.seed_se > 0 and two.sentence_se > 0
    half = combined_half(two.seed_se, 2, two.sentence_se)
    assert (two.low, two.high) == pytest.approx((two.diff - half, two.diff + half))
    one = bleu_difference([hyp(1, 0.1)], [hyp(3, 0.2)], refs, tokenize="none", n=50)
    assert math.isnan(one.seed_se) and one.sentence_se > 0


def test_the_interval_over_two_or_three_seeds_covers_95_percent():
    """Simulated: per-seed differences = truth + test-set noise shared by the seeds (sd 0.37, its
    variance known from the bootstrap) + seed noise (sd 0.5-2). One t for the sum at
    Welch-Satterthwaite df (the rule before) covered 88-95% here; each part at its own quantile
    covers at least 95%."""
    import numpy as np

    from atnat.experiments.evaluation.metrics.quality import t_interval

    rng = np.random.default_rng(0)
    for k in (2, 3):
        for seed_sd in (0.5, 2.0):
            hits = 0
            for _ in range(3000):
                values = rng.normal(0, 0.37) + rng.normal(0, seed_sd, k)
                low, high, _ = t_interval(values.mean(), values.std(ddof=1), k, 0.37 ** 2)
                hits += low <= 0 <= high
            assert hits / 3000 >= 0.945, (k, seed_sd, hits / 3000)


def test_tokenised_bleu_of_text_already_tokenised_and_compound_split_is_that_of_the_raw_text():
    """A review's finding: the WMT14 release atnat fetches is Moses-tokenised, HTML-escaped and compound-split
    already; tokenising it again made each `##AT##-##AT##` nine tokens and `&apos;` three, easy matches that
    raised BLEU (52.87 against 50.92 on three lines). The papers' recipe applied to such text now gives the
    score of the raw text it came from."""
    from atnat.experiments.evaluation.metrics.quality import moses_tokenize, tokenized_bleu

    raw_ref = ["Das ist ein Rich-Text-Beispiel , das wir lieben .", "Er sagt : \"Das geht's nicht\" heute ."]
    raw_hyp = ["Das ist ein Rich-Text-Beispiel , das sie hassen .", "Er sagt : \"Das geht nicht\" morgen ."]
    stanford = lambda lines: [line.replace("Rich-Text-Beispiel", "Rich ##AT##-##AT## Text ##AT##-##AT## Beispiel")
                              .replace('"', "&quot;").replace("'", "&apos;") for line in lines]
    assert moses_tokenize(stanford(raw_ref), "de", compound_split=True) == moses_tokenize(raw_ref, "de", compound_split=True)
    assert tokenized_bleu(stanford(raw_hyp), stanford(raw_ref), lang="de", compound_split=True) == pytest.approx(
        tokenized_bleu(raw_hyp, raw_ref, lang="de", compound_split=True))
