"""Seed aggregation and the rules behind the report's claims: mean and range per system, a system
off the front only when another beats it beyond the spread."""
import pandas as pd
import pytest

from atnat.experiments.reporting.aggregate import aggregate_seeds, beyond_spread, robust_front


def rows(family: str, bleus: list[float], speeds: list[float]) -> list[dict]:
    return [{"task": "t", "family": family, "strategy": "s", "cell": f"{family}-s{i + 1}", "bleu": b,
             "speedup_vs_at": v} for i, (b, v) in enumerate(zip(bleus, speeds))]


def test_mean_and_range_over_seeds_per_system():
    agg = aggregate_seeds(pd.DataFrame(rows("a", [30.0, 31.0, 32.0], [1.0, 1.1, 1.2])))
    (row,) = agg.to_dict("records")
    assert row["n_seeds"] == 3 and row["bleu"] == pytest.approx(31.0) and row["bleu_sd"] == pytest.approx(1.0)
    assert (row["bleu_min"], row["bleu_max"]) == (30.0, 32.0)


def test_the_front_drops_only_systems_beaten_beyond_the_seed_spread():
    table = pd.DataFrame(rows("fast", [30.0, 31.0, 32.0], [5.0, 5.2, 5.4])  # best speed
                         + rows("close", [29.0, 30.5, 32.0], [4.9, 5.1, 5.3])  # lower means, ranges overlap
                         + rows("beaten", [20.0, 21.0, 22.0], [2.0, 2.1, 2.2])  # behind beyond the spread
                         + rows("good", [35.0, 36.0, 37.0], [1.0, 1.1, 1.2]))  # best BLEU, slow
    agg = aggregate_seeds(table)
    front = robust_front(agg, "speedup_vs_at", "bleu")
    assert sorted(front["family"]) == ["close", "fast", "good"]
    by = agg.set_index("family")
    assert beyond_spread(by.loc["fast"], by.loc["beaten"], "bleu")
    assert not beyond_spread(by.loc["fast"], by.loc["close"], "bleu")


def test_a_seed_without_a_paired_test_leaves_no_claim_of_agreement_in_every_seed():
    """bleu_p_holm_max is the least significant seed's p; a seed without a test (its baseline failed,
    its outputs gone) used to be skipped, so p [0.01, 0.02, none] read as "agrees in every seed"."""
    from atnat.experiments.reporting.aggregate import significant

    table = pd.DataFrame(rows("nat", [30.0, 31.0, 32.0], [5.0, 5.0, 5.0])).assign(bleu_p_holm=[0.01, 0.02, None])
    (row,) = aggregate_seeds(table).to_dict("records")
    assert pd.isna(row["bleu_p_holm_max"]) and not significant(pd.Series(row))
    complete = aggregate_seeds(table.assign(bleu_p_holm=[0.01, 0.02, 0.03])).iloc[0]
    assert complete["bleu_p_holm_max"] == pytest.approx(0.03) and significant(complete)


def test_the_summary_cites_the_paired_test_only_against_the_system_it_tested():
    """p-values are against the plain AT cell's beam (here `x-at`); when the best AT is its fp32 twin
    `x-at-fp32` with the same strategy name, the summary must not say the test agrees."""
    from atnat.experiments.reporting.judging import _verdict

    nat = pd.Series({"family": "x-nat", "strategy": "parallel", "n_seeds": 3, "bleu": 30.0,
                     "p_baseline": "x-at-s1 / beam5", "bleu_p_holm_max": 0.001})
    comparison = pd.Series({"bleu_diff": -7.0, "diff_ci_low": -9.0, "diff_ci_high": -5.0, "n_seeds": 3})
    family_of = {"x-at-s1": "x-at", "x-at-fp32-s1": "x-at-fp32"}
    twin = pd.Series({"family": "x-at-fp32", "strategy": "beam5", "n_seeds": 3, "bleu": 37.0})
    text = _verdict(nat, twin, comparison, 1.0, family_of)
    assert text.startswith("7.00 BLEU behind it") and "paired test" not in text
    at = twin.copy()
    at["family"] = "x-at"
    assert "the paired test agrees (Holm p < 0.05 in every seed)" in _verdict(nat, at, comparison, 1.0, family_of)


def test_the_front_compares_intervals_of_the_means_not_seed_ranges():
    """Three seeds' ranges [30, 32] and [32.5, 34.5] do not overlap, but 3 seeds cannot tell these
    means apart at 95% (t with 2 degrees of freedom): neither is beyond the other."""
    table = pd.DataFrame(rows("a", [30.0, 31.0, 32.0], [1.0, 1.0, 1.0]) + rows("b", [32.5, 33.5, 34.5], [1.0, 1.0, 1.0]))
    by = aggregate_seeds(table).set_index("family")
    assert by.loc["a", "bleu_max"] < by.loc["b", "bleu_min"]  # what the old rule called beyond the spread
    assert not beyond_spread(by.loc["a"], by.loc["b"], "bleu")


def test_the_best_at_is_ours_not_its_ctranslate2_twin():
    """With speed.ct2_baseline the plain AT's CTranslate2 twin is an AT row too (`beam5-ct2`, the same
    weights run by another engine); it may score a hair higher, but the summary's best AT, that
    comparisons are against, is our own system."""
    from atnat.experiments.reporting.judging import _task_summary
    from tests import fixtures_results as fx

    table = fx.results_frame()
    twin = table[(table.cell == "copy-at-s1") & (table.strategy == "beam5")].assign(strategy="beam5-ct2")
    twin["bleu"] += 0.5
    part = pd.concat([table, twin], ignore_index=True).query("task == 'copy' and status == 'ok'")
    assert "the best AT system is `copy-at / beam5` (AT beam 5; 38.05 BLEU)" in _task_summary("copy", part)


def test_each_speed_ratio_is_widened_by_the_noise_floor_of_its_own_kind():
    """Review D7: the A/A floor measured on batch-1 latency widened the throughput ratios too; each
    ratio now takes its own kind's floor, and a results.csv from before the throughput floor falls back
    to the latency one, as every ratio did then."""
    from atnat.experiments.reporting.aggregate import interval

    row = pd.Series({"n_seeds": 1, "speedup_vs_at": 2.0, "throughput_speedup_vs_at": 4.0, "speedup_vs_ct2": 1.0,
                     "throughput_speedup_vs_ct2": 3.0, "speed_noise_low": 0.99, "speed_noise_high": 1.01,
                     "throughput_noise_low": 0.9, "throughput_noise_high": 1.1})
    assert interval(row, "speedup_vs_at") == pytest.approx((1.98, 2.02))
    assert interval(row, "speedup_vs_ct2") == pytest.approx((0.99, 1.01))
    assert interval(row, "throughput_speedup_vs_at") == pytest.approx((3.6, 4.4))
    assert interval(row, "throughput_speedup_vs_ct2") == pytest.approx((2.7, 3.3))
    older = row.drop(["throughput_noise_low", "throughput_noise_high"])
    assert interval(older, "throughput_speedup_vs_at") == pytest.approx((3.96, 4.04))


def test_the_speed_baselines_own_ratio_keeps_1_inside_its_interval_when_the_aa_control_excludes_it():
    """A trial's finding: a timing whose A/A control came out at [1.02, 1.06] (a bias: the baseline beside
    itself) showed the baseline's own ratio as "1.00× [1.02, 1.06]" in the headline, an interval without
    its value; the old results.csv recorded the A/A interval as the baseline's spread."""
    from atnat.experiments.reporting.aggregate import interval, span
    from atnat.experiments.reporting.headline import _interval_text

    floor = {"speed_noise_low": 1.02, "speed_noise_high": 1.06}
    one = pd.Series({"n_seeds": 1, "speedup_vs_at": 1.0, "speedup_ci_low": 1.02, "speedup_ci_high": 1.06, **floor})
    assert interval(one, "speedup_vs_at") == pytest.approx((1.0, 1.06)) and span(one, "speedup_vs_at")[0] == 1.0
    assert _interval_text(one, "speedup_vs_at", suffix="×") == "1.00× [1.00, 1.06]"
    nat = one.copy()
    nat[["speedup_vs_at", "speedup_ci_low", "speedup_ci_high"]] = [2.0, 1.9, 2.2]  # a measured ratio: as before
    assert interval(nat, "speedup_vs_at") == pytest.approx((1.9, 2.2))


def test_a_bleu_interval_over_seeds_stays_inside_0_to_100():
    """A trial's finding: three seeds near 0 BLEU (a failed system) gave a mean interval reaching below 0."""
    from atnat.experiments.reporting.aggregate import interval

    (low_row,) = aggregate_seeds(pd.DataFrame(rows("a", [0.1, 0.5, 2.0], [1.0, 1.0, 1.0]))).to_dict("records")
    low, high = interval(pd.Series(low_row), "bleu")
    assert low == 0.0 and high > 2.0
    (high_row,) = aggregate_seeds(pd.DataFrame(rows("b", [99.9, 99.5, 98.0], [1.0, 1.0, 1.0]))).to_dict("records")
    low, high = interval(pd.Series(high_row), "bleu")
    assert high == 100.0 and low < 98.0
    (mid,) = aggregate_seeds(pd.DataFrame(rows("c", [30.0, 31.0, 32.0], [1.0, 1.0, 1.0]))).to_dict("records")
    assert interval(pd.Series(mid), "bleu") == pytest.approx((31.0 - 4.303 * 1.0 / 3 ** 0.5, 31.0 + 4.303 / 3 ** 0.5),
                                                             abs=1e-3)  # t(2) 97.5%: unchanged away from the ends


def test_the_noise_floor_over_seeds_is_their_union_not_their_mean():
    """Review D7: the front used the mean of the seeds' floors, narrower than the union the speed note states."""
    table = pd.DataFrame(rows("a", [30.0, 31.0, 32.0], [1.0, 1.0, 1.0])).assign(
        speed_noise_low=[0.98, 0.99, 1.0], speed_noise_high=[1.01, 1.03, 1.02],
        throughput_noise_low=[0.95, 0.97, 0.99], throughput_noise_high=[1.06, 1.0, 1.01])
    (row,) = aggregate_seeds(table).to_dict("records")
    assert (row["speed_noise_low"], row["speed_noise_high"]) == (0.98, 1.03)
    assert (row["throughput_noise_low"], row["throughput_noise_high"]) == (0.95, 1.06)


def test_the_declared_baseline_is_the_reference_even_when_its_precision_twin_scores_higher(tmp_path):
    """Review D8: with `baseline: at` in the grid, the summary and comparisons.csv took the best AT by
    mean BLEU, which an fp32 twin (a precision control) may be by a hair: the best NAT was then judged
    against the control, not against the baseline its paired tests and speed-ups use."""
    from atnat.experiments.reporting.judging import _task_summary
    from atnat.experiments.reporting.table import compare_systems
    from tests import fixtures_results as fx

    table = fx.results_frame().query("task == 'copy' and status == 'ok'")
    table = table.assign(variant=table["cell"].str.removeprefix("copy-").str.removesuffix("-s1"))
    twin = table[table.cell == "copy-at-s1"].assign(cell="copy-at-fp32-s1", family="copy-at-fp32", variant="at-fp32")
    twin["bleu"] += 0.3
    part = pd.concat([table, twin], ignore_index=True)
    assert "the best AT system is `copy-at-fp32 / beam5` (AT beam 5 (at-fp32); 38.35 BLEU)" in _task_summary("copy", part)  # undeclared
    text = _task_summary("copy", part, baseline="at")
    assert "the AT baseline (`baseline: at`) is `copy-at / beam5` (AT beam 5 (at); 38.05 BLEU)" in text
    assert _task_summary("copy", part, baseline="gone").count("the best AT system is `copy-at-fp32") == 1

    runs = tmp_path / "runs"  # comparisons.csv, paired by seed on the hypotheses, against the same system
    refs = [f"sentence number {i} of the test" for i in range(12)]
    for cell in part["cell"].unique():
        (runs / cell / "hyps").mkdir(parents=True)
        (runs / cell / "references.txt").write_text("\n".join(refs) + "\n")
        for strategy in part[part.cell == cell]["strategy"]:
            (runs / cell / "hyps" / f"{strategy}.txt").write_text("\n".join(refs) + "\n")
    against = set(compare_systems(part, runs, n=20, baseline="at")["against"])
    assert against == {"copy-at / beam5"}
    assert set(compare_systems(part, runs, n=20)["against"]) == {"copy-at-fp32 / beam5"}


def test_a_noisy_speed_ratio_over_seeds_has_an_interval_above_zero():
    """A smoke run of the deep grid printed `2.25× [-0.22, 4.73]`: the t interval of three noisy
    per-seed ratios, taken on the linear scale, reached below 0x. A ratio's noise is multiplicative:
    the interval is taken on the log scale, so it stays above 0 and is symmetric around the mean there."""
    import math

    from atnat.experiments.reporting.aggregate import interval

    table = pd.DataFrame(rows("nat", [30.0, 31.0, 32.0], [1.0, 2.0, 3.75]))
    (row,) = aggregate_seeds(table).to_dict("records")
    low, high = interval(pd.Series(row), "speedup_vs_at")
    assert row["speedup_vs_at"] == pytest.approx(2.25)
    assert 0 < low < 1.0 < 2.25 < high
    assert math.log(row["speedup_vs_at"]) - math.log(low) == pytest.approx(math.log(high) - math.log(row["speedup_vs_at"]))
    bleu_low, bleu_high = interval(pd.Series(row), "bleu")  # BLEU stays on its own scale: symmetric
    assert row["bleu"] - bleu_low == pytest.approx(bleu_high - row["bleu"])


def test_a_speed_timed_on_fewer_seeds_than_the_bleu_says_how_many_and_keeps_its_interval():
    """The deep grid's interim report: BLEU over 2 seeds, but only seed 2 timed (seed 1's weights were lost
    before it could be timed). The overview printed `1.85 ± nan`, the front and the summary found no interval
    (the t interval of 2 seeds with one value), and the summary said "(2 seeds, ...)" of a speed-up one seed
    measured. A speed column now counts the seeds it stands on: its interval is that one seed's recorded one,
    and the table and the summary say "1 of 2 seeds"."""
    from atnat.experiments.reporting.aggregate import interval, seeds_of, span
    from atnat.experiments.reporting.judging import _speed
    from atnat.experiments.reporting.report import _spread

    table = pd.DataFrame(rows("nat", [28.36, 28.72], [float("nan"), 1.85])).assign(
        seed=[1, 2], speedup_ci_low=[float("nan"), 1.76], speedup_ci_high=[float("nan"), 1.94],
        error_propagation=[0.1, 0.2], error_propagation_n=[40, 40])  # a results.csv column named like a count
    row = aggregate_seeds(table).iloc[0]
    assert row["n_seeds"] == 2 and seeds_of(row, "bleu") == 2 and seeds_of(row, "speedup_vs_at") == 1
    assert seeds_of(row, "error_propagation") == 2 and row["error_propagation_n"] == 40
    assert interval(row, "speedup_vs_at") == pytest.approx((1.76, 1.94))
    assert span(row, "speedup_vs_at") == pytest.approx((1.76, 1.94))
    assert _spread(row, "speedup_vs_at", 2) == "1.85 [1.76, 1.94] (1 of 2 seeds)"
    assert _spread(row, "bleu", 2) == "28.54 ± 0.25"
    text = _speed(row, "1 CPU thread")
    assert "1.85× [1.76, 1.94]" in text and "(timed on 1 of its 2 seeds, 1 CPU thread;" in text
    three = pd.DataFrame(rows("nat", [28.0, 28.5, 29.0], [float("nan"), 1.8, 1.9])).assign(seed=[1, 2, 3])
    row = aggregate_seeds(three).iloc[0]
    assert _spread(row, "speedup_vs_at", 2) == "1.85 ± 0.07 (2 of 3 seeds)"
    low, high = interval(row, "speedup_vs_at")
    assert 0 < low < 1.8 and 1.9 < high < 20  # t with 1 df over the 2 timed seeds: wide, but an interval
    assert "(timed on 2 of its 3 seeds" in _speed(row, "")


def test_a_task_never_timed_gets_no_speed_note_claiming_a_timing():
    """The interim report's en-fr table had no speed column, yet its note read "Speed: timing phase after
    training: ... on cpu (Intel ...)" from the grid's environment, and "no A/A control was timed"."""
    from atnat.experiments.reporting.report import speed_note

    part = pd.DataFrame(rows("fr-at", [57.6], [float("nan")])).assign(latency_ms_b1=[float("nan")])
    timing = "timing phase after training: every system of a task and seed side by side in one process, on cpu"
    assert speed_note(part, timing) == "No system of this task was timed."
    timed = part.assign(speedup_vs_at=[1.0], latency_ms_b1=[20.0])
    assert speed_note(timed, timing).startswith("Speed: timing phase after training")


def test_a_speculative_systems_acceptance_length_is_pooled_over_seeds():
    """The mean of the seeds' ratios (2.47) beside their mean verifier passes (33.5) implied 83 tokens a sentence
    where every seed emitted 54.5; pooled, tokens over passes: 163.7 / 100.5 = 1.63."""
    import pandas as pd

    from atnat.experiments.reporting.aggregate import aggregate_seeds

    rows = pd.DataFrame([{"task": "t", "family": "f", "cell": f"f-s{s}", "strategy": "speculative-k4", "seed": s,
                          "verifier_passes": v, "acceptance_length": 54.5 / v, "bleu": 30.0}
                         for s, v in ((1, 54.5), (2, 34.7), (3, 11.3))])
    out = aggregate_seeds(rows).iloc[0]
    assert out["acceptance_length"] == pytest.approx(3 * 54.5 / (54.5 + 34.7 + 11.3))
    assert out["acceptance_length"] * out["verifier_passes"] == pytest.approx(54.5)


def test_one_seed_without_a_recorded_interval_has_none_not_a_zero_width_one():
    """One seed and no recorded interval (eval.n_bootstrap: 1): the interval was the value twice, so a NAT at 52.00
    and an AT at 52.40 were "0.40 BLEU behind it, beyond both systems' 95% intervals"."""
    from atnat.experiments.reporting.aggregate import interval

    nat = pd.Series({"bleu": 52.0, "n_seeds": 1, "bleu_ci_low": float("nan"), "bleu_ci_high": float("nan")})
    at = pd.Series({"bleu": 52.4, "n_seeds": 1, "bleu_ci_low": float("nan"), "bleu_ci_high": float("nan")})
    low, high = interval(nat, "bleu")
    assert pd.isna(low) and pd.isna(high)
    assert not beyond_spread(nat, at, "bleu")


def test_a_speed_interval_wider_than_float_range_is_infinite_not_an_error():
    """A tiny grid timed over two batches (t at 1 df): its seeds' throughput intervals were so wide that the log-scale
    interval over seeds overflowed exp() and the whole report failed to draw."""
    from atnat.experiments.reporting.aggregate import interval

    row = pd.Series({"n_seeds": 2, "throughput_speedup_vs_at": 2.0, "throughput_speedup_vs_at_sd": 0.5,
                     "throughput_speedup_ci_low": 1e-12, "throughput_speedup_ci_high": 1e12})
    low, high = interval(row, "throughput_speedup_vs_at")
    assert low >= 0 and high == float("inf")

