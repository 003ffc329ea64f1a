"""The report's ranking: each system against the next one down by a paired interval over
seeds and test sentences, and the pairs whose order differs between test sets, each called a real
flip only when its intervals exclude 0 on both sides (experiments/reporting/ranking.py)."""
import random

import pandas as pd
import pytest
import sacrebleu

from atnat.experiments.reporting.ranking import flips, rank_systems

N = 120


def sentences(seed):
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(400)]
    return [" ".join(rng.choice(words) for _ in range(12)) for _ in range(N)]


def damage(refs, share, seed):
    """The references with `share` of the sentences replaced by a wrong one (another sentence)."""
    rng = random.Random(seed)
    return [refs[(i + 7) % N] if rng.random() < share else r for i, r in enumerate(refs)]


def write(runs, cell, name, lines):
    path = runs / cell / "hyps" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def results(tmp_path):
    """Three systems x 3 seeds on the main set and on `t2`: `good` far ahead everywhere; `b` equals `a`
    on the main set (same outputs) but is clearly better on t2."""
    runs = tmp_path / "runs"
    main, t2 = sentences(1), sentences(2)
    rows, extra = [], []
    for seed in (1, 2, 3):
        outputs = {"good": (damage(main, 0.05, seed), damage(t2, 0.05, seed)),
                   "a": (damage(main, 0.5, 10 + seed), damage(t2, 0.7, 20 + seed)),
                   "b": (damage(main, 0.5, 10 + seed), damage(t2, 0.2, 30 + seed))}
        for family, (on_main, on_t2) in outputs.items():
            cell = f"{family}-s{seed}"
            write(runs, cell, "greedy.txt", on_main)
            write(runs, cell, "greedy@t2.txt", on_t2)
            (runs / cell / "references.txt").write_text("\n".join(main) + "\n")
            (runs / cell / "references@t2.txt").write_text("\n".join(t2) + "\n")
            rows.append({"cell": cell, "family": family, "task": "x", "seed": seed, "strategy": "greedy",
                         "status": "ok", "bleu_tokenize": "13a", "bleu": sacrebleu.corpus_bleu(on_main, [main]).score})
            extra.append({"cell": cell, "family": family, "task": "x", "seed": seed, "strategy": "greedy",
                          "test_set": "t2", "bleu": sacrebleu.corpus_bleu(on_t2, [t2]).score})
    return pd.DataFrame(rows), pd.DataFrame(extra), runs


def test_adjacent_systems_get_paired_intervals_and_verdicts(tmp_path):
    df, extra, runs = results(tmp_path)
    ranking = rank_systems(df, extra, runs, margin=1.0, n=200)
    main = ranking[(ranking.test_set == "main") & ranking.relation.str.contains("next")]
    assert main.system.iloc[0] == "good / greedy" and main.verdict.iloc[0] == "ahead"
    assert main.diff_ci_low.iloc[0] > 0 and main.n_seeds.iloc[0] == 3
    # a and b wrote the same outputs on the main set: difference 0, interval [0, 0] -> equivalent
    assert {main.system.iloc[1], main.against.iloc[1]} == {"a / greedy", "b / greedy"}
    assert main.verdict.iloc[1] == "equivalent" and main.bleu_diff.iloc[1] == 0
    t2 = ranking[(ranking.test_set == "t2") & ranking.relation.str.contains("next")]
    assert list(t2.system) == ["good / greedy", "b / greedy"] and list(t2.verdict) == ["ahead", "ahead"]


def test_a_flip_is_judged_on_both_test_sets(tmp_path):
    df, extra, runs = results(tmp_path)
    df.loc[df.family == "a", "bleu"] += 0.001  # a ranks above b on the main set by a hair: their order flips
    ranking = rank_systems(df, extra, runs, margin=1.0, n=200)
    flipped = ranking[ranking.relation.str.contains("flip")]
    assert set(flipped.test_set) == {"main", "t2"}
    ((kind, sentence),) = flips(ranking, "x")
    assert kind == "one test set"
    assert sentence.startswith("`a / greedy` minus `b / greedy`: main test set +0.00 [+0.00, +0.00]; t2 -")
    assert sentence.endswith("(beyond noise on t2 only)")


def test_not_resolved_when_the_interval_is_wider_than_the_margin(tmp_path):
    df, extra, runs = results(tmp_path)
    for seed in (1, 2, 3):  # b now damages other sentences than a, at the same rate: close, but not equal
        write(runs, f"b-s{seed}", "greedy.txt", damage(sentences(1), 0.5, 40 + seed))
    ranking = rank_systems(df, None, runs, margin=0.01, n=200)
    pair = ranking[(ranking.system != "good / greedy") & ranking.relation.str.contains("next")].iloc[0]
    assert pair.diff_ci_low < 0 < pair.diff_ci_high and pair.verdict == "not resolved"


def test_systems_without_hypotheses_on_disk_are_left_out(tmp_path):
    df, extra, runs = results(tmp_path)
    for seed in (1, 2, 3):
        (runs / f"a-s{seed}" / "hyps" / "greedy.txt").unlink()
    ranking = rank_systems(df, None, runs, margin=1.0, n=50)
    assert "a / greedy" not in set(ranking.system) | set(ranking.against)
    assert len(ranking) == 1


def test_the_report_table_keeps_every_system_of_the_chain(tmp_path):
    """A system with no pair below it (no common seed with the next one) still gets its own row."""
    from types import SimpleNamespace

    from atnat.experiments.reporting.report import _ranking_section

    def row(a, b, bleu_a, bleu_b, verdict):
        return {"task": "x", "test_set": "main", "split_name": "test", "relation": "next", "system": a, "against": b,
                "system_bleu": bleu_a, "against_bleu": bleu_b, "n_seeds": 3, "bleu_diff": bleu_a - bleu_b,
                "diff_ci_low": 0.5, "diff_ci_high": 1.5, "verdict": verdict}
    ranking = pd.DataFrame([row("A / s", "B / s", 40.0, 39.0, "ahead"), row("C / s", "D / s", 30.0, 29.0, "ahead")])
    blocks = _ranking_section(SimpleNamespace(ranking=ranking, equivalence_margin=1.0))
    frame = blocks[-1].frame
    assert list(frame["System"]) == ["A / s", "B / s", "C / s", "D / s"]
    assert list(frame["Verdict"]) == [">", "", ">", ""] and list(frame["Rank"]) == ["1", "2", "3", "4"]
    assert frame["Minus next down"].iloc[0] == "+1.00 [+0.50, +1.50]"


def test_the_best_nat_is_paired_with_every_other_nat_even_where_they_are_not_neighbours(tmp_path):
    """The summary's "within reach of the best NAT" needs the best NAT against each other NAT, paired.
    In the deep grid's interim report CTC and NPD-5 were not neighbours in the ranking, so no such pair
    existed and the summary fell back on their intervals against the AT (each carrying the AT's noise):
    NPD-5 was listed within reach of CTC while 2.1 BLEU behind it beyond noise when paired."""
    df, extra, runs = results(tmp_path)
    df["decoder"] = df["family"].map({"good": "ctc", "a": "at", "b": "ctc"})  # the AT sits between the two NATs
    ranking = rank_systems(df, extra, runs, margin=1.0, n=200)
    reach = ranking[ranking.relation.str.contains("reach")]
    assert list(zip(reach.test_set, reach.system, reach.against)) == [("main", "good / greedy", "b / greedy")]
    assert reach.verdict.iloc[0] == "ahead" and reach.diff_ci_low.iloc[0] > 0 and reach.n_seeds.iloc[0] == 3
    nexts = ranking[(ranking.test_set == "main") & ranking.relation.str.contains("next")]
    assert ("good / greedy", "b / greedy") not in set(zip(nexts.system, nexts.against))  # not neighbours


def test_pairs_the_grid_asks_for_are_compared_on_every_test_set(tmp_path):
    df, extra, runs = results(tmp_path)
    ranking = rank_systems(df, extra, runs, margin=1.0, n=100, compare=[("a / greedy", "good / greedy")])
    asked = ranking[ranking.relation.str.contains("compare")]
    assert list(asked.test_set) == ["main", "t2"] and (asked.system == "a / greedy").all()
    assert (asked.verdict == "behind").all() and (asked.diff_ci_high < 0).all()


def test_a_malformed_compare_entry_is_refused_when_the_grid_is_read(tmp_path):
    import pytest
    import yaml

    from atnat.experiments.config.run import ConfigError
    from atnat.experiments.running.grid import load_grid

    grid = {"name": "g", "base": {"task": {"name": "copy"}},
            "cells": {"at": {"decoder": {"name": "at"}},
                      "nat": {"decoder": {"name": "nat"}, "eval": {"strategies": ["parallel"]}}}}
    for compare, message in [([["at / greedy"]], r"compare\[0\]: expected a pair"),
                             ([["at / greedy", "at / greedy"]], r"compare\[0\]: a system compared with itself"),
                             ([["at / greedy", "nat / beam"]], r"compare\[0\]: no system 'nat / beam' in this grid")]:
        (tmp_path / "g.yaml").write_text(yaml.safe_dump(grid | {"compare": compare}))
        with pytest.raises(ConfigError, match=message):
            load_grid(tmp_path / "g.yaml")
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(grid | {"compare": [["nat / parallel", "at / greedy"]]}))
    assert load_grid(tmp_path / "g.yaml").compare == [("nat / parallel", "at / greedy")]


def test_the_report_shows_each_asked_pair_on_its_test_sets_together(tmp_path):
    from types import SimpleNamespace

    from atnat.experiments.reporting.report import _compare_section

    df, extra, runs = results(tmp_path)
    ranking = rank_systems(df, extra, runs, margin=1.0, n=100,
                           compare=[("a / greedy", "good / greedy"), ("b / greedy", "a / greedy")])
    heading, para, table = _compare_section(SimpleNamespace(ranking=ranking, equivalence_margin=1.0))
    assert heading.text == "Comparisons the grid asks for"
    # a pair the headline holds back (the Holm-corrected test) reads "behind" here: the paragraph says why
    assert "so a pair here may read ahead or behind where the headline says not resolved (with its Holm p)" in para.text
    frame = table.frame
    main = "main test set"  # these runs have no config.json naming their test split
    assert list(zip(frame["System"], frame["Test set"])) == [("a / greedy", main), ("a / greedy", "t2"),
                                                             ("b / greedy", main), ("b / greedy", "t2")]
    assert list(frame["Verdict"]) == ["behind", "behind", "equivalent", "ahead"]


def test_a_grid_whose_cells_all_failed_has_an_empty_ranking(tmp_path):
    failed = pd.DataFrame([{"cell": "a-s1", "family": "a", "task": "x", "seed": 1, "status": "failed", "error": "boom"}])
    assert rank_systems(failed, None, tmp_path, margin=1.0).empty


def test_outputs_without_a_score_on_that_test_set_are_left_out(tmp_path):
    """A hypothesis file left from an earlier evaluation (no score for it in extra_tests.csv now)."""
    df, extra, runs = results(tmp_path)
    ranking = rank_systems(df, extra[extra.family != "a"], runs, margin=1.0, n=50,
                           compare=[("a / greedy", "good / greedy")])
    assert list(ranking.loc[ranking.relation.str.contains("compare"), "test_set"]) == ["main"]
    t2 = ranking[ranking.test_set == "t2"]
    assert "a / greedy" not in set(t2.system) | set(t2.against) and not t2.empty


def test_both_means_of_a_pair_come_from_the_seeds_its_difference_pairs(tmp_path):
    """`good` lost its seed 3; `a`'s seed 3 scored far above everything (its mean over 3 seeds ranks
    it first), yet on the seeds both have it is far behind: the row says so with means on those seeds,
    its difference equal to theirs, and the verdict `behind`."""
    df, extra, runs = results(tmp_path)
    df = df[~((df.family == "good") & (df.seed == 3)) & (df.family != "b")].copy()
    df.loc[(df.family == "a") & (df.seed == 3), "bleu"] += 200.0
    ranking = rank_systems(df, None, runs, margin=1.0, n=200)
    (row,) = ranking[ranking.relation.str.contains("next")].itertuples()
    assert (row.system, row.against, row.n_seeds, row.verdict) == ("a / greedy", "good / greedy", 2, "behind")
    assert row.system_bleu == pytest.approx(df[(df.family == "a") & (df.seed < 3)].bleu.mean())
    assert row.system_bleu - row.against_bleu == pytest.approx(row.bleu_diff)


def test_an_order_that_holds_once_paired_is_not_called_a_flip():
    """Means over different seed sets can order a pair differently on two test sets while the paired
    differences agree beyond noise on both: the old rule called that 'beyond noise on one test set'."""
    rows = pd.DataFrame([
        {"task": "x", "test_set": "main", "split_name": "test2016", "relation": "flip", "system": "a", "against": "b",
         "bleu_diff": 2.0, "diff_ci_low": 1.0, "diff_ci_high": 3.0},
        {"task": "x", "test_set": "t2", "split_name": "test2017", "relation": "flip", "system": "b", "against": "a",
         "bleu_diff": -2.0, "diff_ci_low": -3.0, "diff_ci_high": -1.0}])
    ((kind, sentence),) = flips(rows, "x")
    assert kind == "same when paired" and sentence.endswith("the same order beyond noise on every test set)")


def flip_rows(n_seeds, main=(0.9, 0.2, 1.6), t2=(0.9, 0.1, 1.7)):
    """Two systems ahead of each other beyond their paired intervals, one on each test set."""
    return pd.DataFrame([
        {"task": "x", "test_set": "main", "split_name": "test2016", "relation": "next flip", "system": "a",
         "against": "b", "system_bleu": 31.0, "against_bleu": 30.1, "n_seeds": n_seeds, "bleu_diff": main[0],
         "diff_ci_low": main[1], "diff_ci_high": main[2], "verdict": "ahead"},
        {"task": "x", "test_set": "t2", "split_name": "test2017", "relation": "next flip", "system": "b",
         "against": "a", "system_bleu": 29.0, "against_bleu": 28.1, "n_seeds": n_seeds, "bleu_diff": t2[0],
         "diff_ci_low": t2[1], "diff_ci_high": t2[2], "verdict": "ahead"}])


def test_a_flip_over_one_seed_is_beyond_test_sentence_noise_only_not_real():
    """Review D6: with one seed (en-fr) an interval covers the choice of test sentences, not training
    noise; such a flip was called "a real flip: beyond noise on both sides"."""
    ((kind, sentence),) = flips(flip_rows(1), "x")
    assert kind == "one seed" and "real" not in sentence
    assert sentence.endswith("(a flip beyond test-sentence noise on both sides (one seed: training noise not covered))")
    ((kind, sentence),) = flips(flip_rows(3), "x")
    assert kind == "real" and sentence.endswith("(a real flip: beyond noise on both sides)")
    ((kind, sentence),) = flips(flip_rows(1, t2=(0.9, -0.1, 1.9)), "x")
    assert kind == "one test set"
    assert sentence.endswith("(beyond test-sentence noise on test2016 only (one seed: training noise not covered))")


def test_a_pair_paired_on_one_test_set_only_is_not_judged_on_every_test_set():
    """Review D10: a flip row on test2017 only (no common seeds or no references on test2016) was
    called "not a flip: ... the same order beyond noise on every test set"."""
    rows = flip_rows(3)
    rows = pd.concat([rows.iloc[[1]], rows.iloc[[0]].assign(relation="next", system="c", against="d")])
    ((kind, sentence),) = flips(rows, "x")
    assert kind == "one side" and "every test set" not in sentence
    assert sentence == ("`b` minus `a`: test2017 +0.90 [+0.10, +1.70] (compared on test2017 only: no paired result "
                        "on another test set, so not judged as a flip; beyond noise there)")


def test_the_report_names_every_kind_of_flip_and_the_one_seed_caveat_of_its_verdicts():
    """The Other test sets paragraph counts each kind of flips() (a one-seed flip is no real one, a
    one-sided pair no flip); the Ranking and Comparisons paragraphs say what one seed leaves out."""
    from types import SimpleNamespace

    from atnat.experiments.reporting.report import _compare_section, _other_tests, _ranking_section

    one_side = flip_rows(3).iloc[[1]].assign(system="c", against="d")
    ranking = pd.concat([flip_rows(1), one_side, flip_rows(1).assign(relation="compare")], ignore_index=True)
    table = pd.DataFrame([{"cell": f"{s}-s1", "family": s, "task": "x", "strategy": "greedy", "seed": 1,
                           "status": "ok", "bleu": 30.0} for s in "abcd"])
    extra = table.assign(test_set="t2")
    g = SimpleNamespace(table=table, extra_tests=extra, ranking=ranking, equivalence_margin=1.0)
    ranking["system"], ranking["against"] = ranking["system"] + " / greedy", ranking["against"] + " / greedy"
    text = _other_tests(g)[-1].text
    assert text.startswith("The order by mean BLEU differs between the test sets for 2 pair(s): 0 real flip(s)")
    assert "1 flip(s) beyond test-sentence noise on both test sets with one seed (training noise not covered)" in text
    assert "1 compared on one test set only" in text
    caveat = "the interval covers the choice of test sentences only"
    assert caveat in _ranking_section(g)[1].text and caveat in _compare_section(g)[1].text
    several = SimpleNamespace(ranking=ranking.assign(n_seeds=3), equivalence_margin=1.0)
    assert caveat not in _ranking_section(several)[1].text and caveat not in _compare_section(several)[1].text


def test_a_resolved_difference_smaller_than_the_margin_is_shown_as_small():
    """A smoke run's report read `+0.00 [+0.00, +0.00] | ahead`: beyond noise (the interval excludes
    0), yet the whole interval lies inside the ±1 equivalence margin; shown bare, a trivially small
    difference reads as a gap. The report now says both, in the Ranking, the Comparisons and the summary."""
    import pandas as pd

    from atnat.experiments.reporting.judging import _verdict
    from atnat.experiments.reporting.ranking import shown, verdict

    assert verdict(0.001, 0.004, 1.0) == "ahead"  # ranking.csv keeps its vocabulary
    assert shown("ahead", 0.001, 0.004, 1.0) == "ahead, by less than ±1"
    assert shown("ahead", 0.001, 0.004, 1.0, symbol=True) == "> ≈"
    assert shown("behind", -2.5, -0.4, 1.0) == "behind" and shown("behind", -2.5, -0.4, 1.0, symbol=True) == "<"
    assert shown("equivalent", -0.2, 0.3, 1.0, symbol=True) == "≈"
    nat = pd.Series({"family": "x-ctc", "strategy": "ctc", "n_seeds": 3, "bleu": 37.3, "p_baseline": ""})
    at = pd.Series({"family": "x-at", "strategy": "beam5", "n_seeds": 3, "bleu": 37.0})
    small = pd.Series({"bleu_diff": 0.3, "diff_ci_low": 0.1, "diff_ci_high": 0.5, "n_seeds": 3})
    assert _verdict(nat, at, small, 1.0).startswith("0.30 BLEU ahead of it, less than the ±1 equivalence margin: ")
    large = small.copy()
    large[["bleu_diff", "diff_ci_low", "diff_ci_high"]] = 1.6, 1.2, 2.0
    assert _verdict(nat, at, large, 1.0).startswith("1.60 BLEU ahead of it: ")
    none = small.copy()
    none[["diff_ci_low", "diff_ci_high"]] = float("nan"), float("nan")  # eval.n_bootstrap: 1
    assert _verdict(nat, at, none, 1.0) == ("not resolved: +0.30 BLEU, with no interval (fewer than 2 "
                                            "test-sentence resamples: eval.n_bootstrap)")


def test_a_difference_paired_on_fewer_seeds_shows_the_means_it_is_of():
    """The interim deep grid's ranking showed AT greedy (36.53, 3 seeds) "+0.00 [+0.00, +0.00] ≈" above its
    CTranslate2 twin (36.40, 2 seeds): right (the two are equal on the 2 seeds both have) but unreadable
    beside the means. Where the paired means differ from the shown ones, the difference names them."""
    from types import SimpleNamespace

    from atnat.experiments.reporting.report import _ranking_section

    table = pd.DataFrame([{"task": "x", "family": "at", "strategy": s, "status": "ok", "cell": f"at-s{seed}",
                           "seed": seed, "bleu": b} for s, bleus in (("greedy", {1: 36.8, 2: 36.2, 3: 36.6}),
                                                                     ("greedy-ct2", {2: 36.2, 3: 36.6}))
                          for seed, b in bleus.items()])
    rows = pd.DataFrame([{"task": "x", "test_set": "main", "split_name": "test", "relation": "next",
                          "system": "at / greedy", "against": "at / greedy-ct2", "system_bleu": 36.4,
                          "against_bleu": 36.4, "n_seeds": 2, "bleu_diff": 0.0, "diff_ci_low": 0.0, "diff_ci_high": 0.0,
                          "verdict": "equivalent"}])
    frame = _ranking_section(SimpleNamespace(ranking=rows, equivalence_margin=1.0, table=table))[-1].frame
    assert list(frame["BLEU"]) == ["36.53", "36.40"]
    assert frame["Minus next down"].iloc[0] == "+0.00 [+0.00, +0.00] (36.40 vs 36.40 on the 2 seeds paired)"
    same = _ranking_section(SimpleNamespace(ranking=rows.assign(n_seeds=3, system_bleu=36.53, against_bleu=36.40),
                                            equivalence_margin=1.0, table=table))[-1].frame
    assert same["Minus next down"].iloc[0] == "+0.00 [+0.00, +0.00]"  # the shown means: nothing to add


def test_a_system_without_a_score_on_another_test_set_is_named_under_its_table():
    """The interim deep grid said "The 12 systems scored on every test set rank the same" and never named
    the two CTranslate2 twins, scored on test2016 only: they were dropped before the sentence that names
    a system without a score could see them."""
    from types import SimpleNamespace

    from atnat.experiments.reporting.report import _other_tests

    table = pd.DataFrame([{"cell": "a-s1", "family": "a", "task": "x", "strategy": s, "seed": 1, "status": "ok",
                           "bleu": b} for s, b in (("greedy", 31.0), ("greedy-ct2", 30.9), ("beam5", 32.0))])
    extra = table[table["strategy"] != "greedy-ct2"].assign(test_set="t2")
    g = SimpleNamespace(table=table, extra_tests=extra, ranking=None, equivalence_margin=1.0)
    *_, frame_block, text = _other_tests(g)
    assert "a / greedy-ct2" in list(frame_block.frame["System"])
    assert "No score on t2 for `a / greedy-ct2`: left out of its order." in text.text



def written_outputs(root, outputs: dict, refs: list[str]):
    """Each (cell, strategy)'s hypotheses written under root/<cell>/hyps/, the AT cell "at"'s references beside
    them: their rows of a results table of one task and seed."""
    import pandas as pd

    for (cell, strategy), lines in outputs.items():
        (root / cell / "hyps").mkdir(parents=True, exist_ok=True)
        (root / cell / "hyps" / f"{strategy}.txt").write_text("".join(f"{x}\n" for x in lines))
    (root / "at" / "references.txt").write_text("".join(f"{x}\n" for x in refs))
    return pd.DataFrame([{"cell": c, "strategy": s, "task": "t", "seed": 1, "status": "ok", "decoder": c,
                          "variant": c, "bleu_tokenize": "13a"} for c, s in outputs])


def test_a_ctranslate2_twin_is_not_a_test_of_the_holm_family(tmp_path):
    """A twin runs another system's weights and search (its output was byte for byte that system's): counted
    as a test of its own, it raised every Holm p of its task and seed, so the timing phase (which adds the
    twins) could turn a system's 'behind' into 'not resolved'."""
    import random

    from atnat.experiments.evaluation.baseline import ENGINE_TWIN
    from atnat.experiments.reporting.table import add_significance

    rng = random.Random(0)
    words = "a b c d e f g h".split()
    refs = [" ".join(rng.choice(words) for _ in range(8)) for _ in range(120)]

    def noisy(p):
        return [" ".join(w if rng.random() > p else "z" for w in line.split()) for line in refs]

    outputs = {("at", "beam5"): noisy(0.1), ("at", "greedy"): noisy(0.13), ("nat", "parallel"): noisy(0.3)}
    outputs[("at", "greedy" + ENGINE_TWIN)] = outputs[("at", "greedy")]
    df = written_outputs(tmp_path, outputs, refs)
    with_twin = add_significance(df, tmp_path, n=200, baseline="at")
    without = add_significance(df[~df.strategy.str.endswith(ENGINE_TWIN)].reset_index(drop=True), tmp_path, n=200,
                               baseline="at")
    twin = with_twin.strategy.str.endswith(ENGINE_TWIN)
    assert with_twin[twin].bleu_p_holm.isna().all() and with_twin[twin].p_baseline.eq("").all()
    assert with_twin[~twin].bleu_p_holm.fillna(-1).tolist() == without.bleu_p_holm.fillna(-1).tolist()
    assert without.bleu_p_holm.notna().sum() == 2  # greedy and parallel against beam 5


def test_too_few_resamples_for_the_holm_test_to_call_anything_are_said(tmp_path, capsys):
    """With n resamples the smallest two-sided bootstrap p is 2/(n+1), and Holm multiplies the smallest by the m
    systems: at n=100 and m=3 no system could be called ahead or behind, in silence (every verdict 'not resolved')."""
    from atnat.experiments.reporting.table import add_significance

    refs = [f"w{i} x y z" for i in range(40)]
    outputs = {("at", "beam5"): refs, **{("nat", s): ["q q q q"] * 40 for s in ("a", "b", "c")}}
    df = written_outputs(tmp_path, outputs, refs)
    out = add_significance(df, tmp_path, n=100, baseline="at")
    assert (out.bleu_p_holm.dropna() >= 0.05).all()  # far behind, and still not below 0.05
    err = capsys.readouterr().err
    assert "no Holm-corrected p can fall below 0.059" in err and "eval.n_bootstrap >= 120 allows it" in err
    add_significance(df, tmp_path, n=1000, baseline="at")
    assert "no Holm-corrected p" not in capsys.readouterr().err
