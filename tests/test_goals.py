"""Goals set in a grid file: refused when malformed, judged from the results, shown in the report."""
import json
import statistics

import pandas as pd
import pytest
import yaml
from scipy.stats import norm as NORMAL
from scipy.stats import t as student

from atnat.experiments.config.run import ConfigError
from atnat.experiments.reporting.aggregate import aggregate_seeds
from atnat.experiments.reporting.goals import check_goals, parse_goals
from atnat.experiments.reporting.report import write_report
from atnat.experiments.reporting.results import notes_stamp
from atnat.experiments.running.grid import load_grid
from tests import fixtures_results as fx

GOALS = [
    {"system": "copy-at / beam5", "at_least": 38},  # 38.05: met
    {"system": "copy-cmlm-kd / mask-predict-4", "within": 2, "of": "copy-at / beam5"},  # 35.5 < 36.05: missed
    {"goal": "best single-pass NAT within 8 of AT beam 5",
     "system": ["copy-ctc / ctc", "copy-cmlm-kd / length-beam-3"], "within": 8, "of": "copy-at / beam5"},
    {"system": "copy-nat-guided / parallel", "at_least": 1},  # the failed cell: not measured
    {"system": "copy-ctc / ctc", "metric": "latency_ms_b1", "at_most": 2.0},  # 1.9: met
]


def judged():
    table = fx.results_frame()
    return check_goals(parse_goals(GOALS, "grid.yaml"), aggregate_seeds(table[table["status"] == "ok"]))


def test_each_goal_is_met_missed_or_not_measured_from_the_numbers():
    rows = judged()
    assert list(rows["Result"]) == ["met", "missed", "met", "not measured", "met"]
    assert rows.loc[1, "Value"] == pytest.approx(35.5) and rows.loc[1, "Target"] == pytest.approx(38.05 - 2)
    assert rows.loc[2, "System"] == "copy-cmlm-kd / length-beam-3"  # 35.2 beats ctc's 30.25
    assert rows.loc[2, "Speed-up vs AT greedy"] == pytest.approx(3.01)
    assert rows.loc[3, "System"] == "no result for copy-nat-guided / parallel"
    assert rows.loc[2, "Goal"] == "best single-pass NAT within 8 of AT beam 5"


@pytest.mark.parametrize("goal, message", [
    ({"system": "copy-at", "at_least": 3}, r"goals\[0\]\.system: expected '<family> / <strategy>'"),
    ({"system": "copy-at / greedy"}, r"goals\[0\]: give exactly one of at_least, at_most, within"),
    ({"system": "copy-at / greedy", "within": 3}, r"goals\[0\]: `within` needs `of:"),
    ({"system": "copy-at / greedy", "at_least": "30"}, r"goals\[0\]\.at_least: expected a finite number, got '30'"),
    ({"system": "copy-at / greedy", "at_least": 3, "beyond": 1}, r"goals\[0\]: unknown key 'beyond'"),
    ({"system": "copy-at / greedy", "at_least": 3, "metric": "bleuu"},
     r"goals\[0\]\.metric: 'bleuu' is no numeric column of results.csv"),
])
def test_a_malformed_goal_is_refused_when_the_grid_is_read(tmp_path, goal, message):
    grid = {"name": "g", "base": {"task": {"name": "copy"}, "decoder": {"name": "at"}}, "goals": [goal]}
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(grid))
    with pytest.raises(ConfigError, match=message):
        load_grid(tmp_path / "g.yaml")


def test_the_report_states_the_goals_and_the_authors_notes(tmp_path):
    root = fx.build_results(tmp_path)
    (root / "goals.json").write_text(json.dumps(GOALS))
    env = json.loads((root / "environment.json").read_text()) if (root / "environment.json").exists() else {}
    (root / "notes.md").write_text("\ufeff" + notes_stamp(root, env) + "\n"  # an editor's byte-order mark: still
                                   "CMLM missed its goal:\n- it trained for\n- **400 steps** only.\n\nSecond paragraph.\n")
    md_path, html_path = write_report(root, figures=False)
    md, html = md_path.read_text(encoding="utf-8"), html_path.read_text(encoding="utf-8")
    section = md.split("## Goals")[1].split("\n## ")[0]
    assert "Of the grid file's 5 goals, on one seed: 3 met (0 beyond noise), 1 missed (0 beyond noise), 1 not measured." in section
    line = next(row for row in section.splitlines() if "copy-cmlm-kd / mask-predict-4" in row)
    assert "35.50" in line and "36.05" in line and "missed" in line
    at = next(row for row in section.splitlines() if "| copy-at / beam5 |" in row)  # 38.05 against 38: inside its interval
    assert "| met on the mean, not beyond noise |" in at and "| no |" in at  # not a bare "met" (the deep grid's goal 1)
    assert "| not measured |" in section
    assert "## Notes (written by the authors, not generated)" in md
    assert "CMLM missed its goal:\n- it trained for\n- **400 steps** only." in md and "Second paragraph." in md  # a list
    assert "<p>CMLM missed its goal:<br>- it trained for<br>- <strong>400 steps</strong> only.</p>" in html
    (root / "goals.json").write_text(json.dumps([{"system": "copy-at / beam5"}]))
    with pytest.raises(ConfigError, match=r"goals.json: goals\[0\]: give exactly one of"):
        write_report(root)


@pytest.mark.slow
def test_notes_written_for_another_run_are_left_out_and_say_how_to_attach(tmp_path):
    """Trials: the quickstart grid run again from a fresh clone rewrote report.md with the committed notes.md,
    which quoted another commit's run (its wall time, its A/A floors) beside tables that said otherwise."""
    root = fx.build_results(tmp_path)
    env = json.loads((root / "environment.json").read_text())
    for first in ("<!-- notes for the run: started 2020-01-01 00:00:00 -->", "An unstamped note."):
        (root / "notes.md").write_text(first + "\nThe run took 13 min 23 s.\n")
        md = write_report(root)[0].read_text(encoding="utf-8")
        assert "13 min 23 s" not in md and "left out, since they quote that run's numbers" in md
        assert f"`{notes_stamp(root, env)}`" in md  # the line that would attach them, shown (not an HTML comment)
    env["started"] = "2026-01-02 03:04:05"
    (root / "environment.json").write_text(json.dumps(env))
    (root / "notes.md").write_text("<!-- notes for the run: started 2026-01-02 03:04:05 -->\nThe run took 13 min 23 s.\n")
    md = write_report(root)[0].read_text(encoding="utf-8")
    assert "The run took 13 min 23 s." in md and "<!-- notes" not in md


def test_each_goal_says_how_far_past_its_target_and_whether_beyond_noise():
    """A met goal is not a claim beyond noise: against a number, the 95% interval of the mean (one
    seed: its bootstrap interval; several: Student's t over the seeds, not their range) must clear the
    target; against a system, the paired interval of the difference."""
    table = fx.results_frame()
    ranking = pd.DataFrame([  # cmlm-kd minus AT beam 5, and ctc's pair stored the other way round
        {"test_set": "main", "system": "copy-cmlm-kd / mask-predict-4", "against": "copy-at / beam5",
         "bleu_diff": -2.55, "diff_ci_low": -3.5, "diff_ci_high": -1.6, "system_bleu": 35.5, "against_bleu": 38.05,
         "n_seeds": 1},
        {"test_set": "main", "system": "copy-at / beam5", "against": "copy-cmlm-kd / length-beam-3",
         "bleu_diff": 2.85, "diff_ci_low": 2.1, "diff_ci_high": 3.6, "system_bleu": 38.05, "against_bleu": 35.2,
         "n_seeds": 1}])
    rows = check_goals(parse_goals(GOALS, "grid.yaml"), aggregate_seeds(table[table["status"] == "ok"]), ranking)
    at = rows.loc[0]  # 38.05 >= 38 on the mean, one seed with 95% interval [36.7, 39.4]: not beyond noise
    assert at["Result"] == "met" and at["Interval"] == "95% (one seed)" and at["Beyond noise"] == "no"
    assert (at["Over target"], at["Over low"], at["Over high"]) == pytest.approx((0.05, -1.3, 1.4))
    cmlm = rows.loc[1]  # missed: -2.55 + 2 = -0.55 over target, interval [-1.5, +0.4] holds 0
    assert cmlm["Interval"] == "paired 95% (1 seed)" and cmlm["Beyond noise"] == "no"
    assert (cmlm["Over target"], cmlm["Over low"], cmlm["Over high"]) == pytest.approx((-0.55, -1.5, 0.4))
    best = rows.loc[2]  # length-beam-3 vs AT beam 5 read the other way round: -2.85 + 8, [4.4, 5.9] at 95%;
    # the best of 2: at 97.5% (Bonferroni), one seed's sides scaled by the normal quantiles
    ratio = NORMAL.ppf(1 - 0.05 / 4) / NORMAL.ppf(0.975)
    assert best["Beyond noise"] == "yes" and best["Over low"] == pytest.approx(5.15 - 0.75 * ratio)
    assert best["Interval"] == "paired 97.5% (simultaneous over 2 systems, Bonferroni) (1 seed)"
    assert rows.loc[4]["Interval"] == "none recorded" and rows.loc[4]["Beyond noise"] == ""  # latency: no interval
    assert check_goals(parse_goals(GOALS, "grid.yaml"),
                       aggregate_seeds(table[table["status"] == "ok"])).loc[1, "Interval"] == "no paired interval"
    several = aggregate_seeds(fx.with_seeds(table, {2: 1.0, 3: -0.2}).query("status == 'ok'"))
    spread = check_goals(parse_goals(GOALS[:1], "grid.yaml"), several).loc[0]  # seeds 38.05, 39.05, 37.85
    assert spread["Interval"] == "95% of the mean (3 seeds)" and spread["Result"] == "met"
    # mean 38.3167 +- sqrt((t_2 * sd / sqrt(3))^2 + (z * sqrt(v))^2), v from the seeds' interval width
    # 39.4 - 36.7 (not the seed range [37.85, 39.05], which the old check took for an interval: Over low -0.15)
    sd, v = statistics.stdev([38.05, 39.05, 37.85]), (2.7 / (2 * 1.959964)) ** 2
    half = ((student.ppf(0.975, 2) * sd / 3 ** 0.5) ** 2 + NORMAL.ppf(0.975) ** 2 * v) ** 0.5
    assert (spread["Over low"], spread["Over high"]) == pytest.approx((0.3167 - half, 0.3167 + half), abs=1e-3)
    assert spread["Over low"] < -1.0 and spread["Beyond noise"] == "no"


def test_a_goal_against_a_system_is_judged_on_the_seeds_its_interval_pairs():
    """Value and Target come from the same seeds as the paired difference, so Value - Target equals
    Over target; the all-seed means (38.3 vs 36.0 here) would have called it met."""
    table = fx.with_seeds(fx.results_frame(), {2: 1.0, 3: -0.2})
    goal = [{"system": "copy-at / beam5", "within": 0, "of": "copy-cmlm-kd / mask-predict-4"}]
    ranking = pd.DataFrame([{"test_set": "main", "system": "copy-at / beam5", "against": "copy-cmlm-kd / mask-predict-4",
                             "bleu_diff": -1.0, "diff_ci_low": -1.8, "diff_ci_high": -0.2, "system_bleu": 34.0,
                             "against_bleu": 35.0, "n_seeds": 2}])
    (row,) = check_goals(parse_goals(goal, "grid.yaml"), aggregate_seeds(table[table["status"] == "ok"]),
                         ranking).to_dict("records")
    assert (row["Value"], row["Target"], row["Over target"]) == pytest.approx((34.0, 35.0, -1.0))
    assert row["Result"] == "missed" and row["Beyond noise"] == "yes" and row["Interval"] == "paired 95% (2 seeds)"


def test_the_best_of_several_is_not_called_missed_while_one_of_them_has_no_result():
    table = fx.results_frame()
    agg = aggregate_seeds(table[table["status"] == "ok"])
    goal = [{"system": ["copy-cmlm-kd / mask-predict-4", "copy-ctc-big / ctc"], "at_least": 90}]
    (row,) = check_goals(parse_goals(goal, "grid.yaml"), agg).to_dict("records")
    assert row["Result"] == "not measured" and row["System"] == "copy-cmlm-kd / mask-predict-4 (no result for copy-ctc-big / ctc)"
    goal[0]["at_least"] = 10  # met by one that ran: the others cannot undo that
    assert check_goals(parse_goals(goal, "grid.yaml"), agg).loc[0, "Result"] == "met"


def test_the_best_of_several_is_judged_on_intervals_that_hold_together():
    """Picking the best of m noisy systems favours a lucky one: its interval is at 1 - 0.05/m
    (Bonferroni), and a miss is beyond noise only when each of the m misses beyond noise. The old
    check took the best one's 95% interval alone for both."""
    table = fx.results_frame()
    agg = aggregate_seeds(table[table["status"] == "ok"])
    alone = [{"system": "copy-at / beam5", "at_least": 36.6}]  # one seed, 38.05 [36.7, 39.4]
    both = [{"system": ["copy-at / beam5", "copy-ctc / ctc"], "at_least": 36.6}]
    assert check_goals(parse_goals(alone, "grid.yaml"), agg).loc[0, "Beyond noise"] == "yes"  # low 36.7 > 36.6
    (row,) = check_goals(parse_goals(both, "grid.yaml"), agg).to_dict("records")
    ratio = NORMAL.ppf(1 - 0.05 / 4) / NORMAL.ppf(0.975)
    assert row["Result"] == "met" and row["Over low"] == pytest.approx(38.05 - 1.35 * ratio - 36.6)
    assert row["Over low"] < 0 and row["Beyond noise"] == "no"
    assert row["Interval"] == "97.5% (simultaneous over 2 systems, Bonferroni) (one seed)"
    # a miss: the best (CMLM 35.5 [34.0, 36.9]) misses 37.5 beyond noise even at 97.5% ...
    miss = [{"system": ["copy-cmlm-kd / mask-predict-4", "copy-ctc / ctc"], "at_least": 37.5}]
    assert check_goals(parse_goals(miss, "grid.yaml"), agg).loc[0, "Beyond noise"] == "yes"
    # ... but when the other one's interval reaches the target, the goal is not missed beyond noise
    wide = table.assign(bleu_ci_high=table["bleu_ci_high"].where(table["cell"] != "copy-ctc-s1", 39.0))
    (row,) = check_goals(parse_goals(miss, "grid.yaml"), aggregate_seeds(wide[wide["status"] == "ok"])).to_dict("records")
    assert row["Result"] == "missed" and row["System"] == "copy-cmlm-kd / mask-predict-4"
    assert row["Over high"] < 0 and row["Beyond noise"] == "no"


def test_a_paired_interval_is_re_levelled_from_its_standard_errors():
    """ranking.csv keeps each difference's two standard errors (seeds, test sentences), so a goal's
    simultaneous interval is exact; a ranking.csv written without them is widened at k - 1 df."""
    table = fx.with_seeds(fx.results_frame(), {2: 1.0, 3: -0.2})
    agg = aggregate_seeds(table[table["status"] == "ok"])
    goal = [{"system": ["copy-ctc / ctc", "copy-cmlm-kd / mask-predict-4"], "within": 4, "of": "copy-at / beam5"}]
    # a sentence standard error that makes the stored 95% half-width 1.0 what combined_half gives
    sentence_se = (1 - (student.ppf(0.975, 2) * 0.15) ** 2) ** 0.5 / NORMAL.ppf(0.975)
    ranking = pd.DataFrame([
        {"test_set": "main", "system": "copy-cmlm-kd / mask-predict-4", "against": "copy-at / beam5",
         "bleu_diff": -2.5, "diff_ci_low": -3.5, "diff_ci_high": -1.5, "system_bleu": 35.5, "against_bleu": 38.0,
         "n_seeds": 3, "diff_seed_se": 0.15, "diff_sentence_se": sentence_se},
        {"test_set": "main", "system": "copy-ctc / ctc", "against": "copy-at / beam5",
         "bleu_diff": -7.8, "diff_ci_low": -8.8, "diff_ci_high": -6.8, "system_bleu": 30.2, "against_bleu": 38.0,
         "n_seeds": 3, "diff_seed_se": 0.15, "diff_sentence_se": sentence_se}])
    (row,) = check_goals(parse_goals(goal, "grid.yaml"), agg, ranking).to_dict("records")
    q = 1 - 0.05 / 4
    half = ((student.ppf(q, 2) * 0.15) ** 2 + (NORMAL.ppf(q) * sentence_se) ** 2) ** 0.5
    assert row["System"] == "copy-cmlm-kd / mask-predict-4" and row["Result"] == "met"
    assert (row["Over low"], row["Over high"]) == pytest.approx((1.5 - half, 1.5 + half))
    older = ranking.drop(columns=["diff_seed_se", "diff_sentence_se"])
    (old,) = check_goals(parse_goals(goal, "grid.yaml"), agg, older).to_dict("records")
    wider = student.ppf(q, 2) / student.ppf(0.975, 2)
    assert old["Over low"] == pytest.approx(1.5 - wider) and old["Over low"] < row["Over low"]


def test_a_ranking_csv_from_before_the_standard_errors_is_still_read(tmp_path):
    """diff_seed_se and diff_sentence_se are optional in ranking.csv: a committed results folder from
    before them re-renders."""
    from atnat.experiments.reporting.results import load_results

    root = fx.build_results(tmp_path)
    row = {"task": "copy", "test_set": "main", "split_name": "test", "relation": "goal", "system": "copy-ctc / ctc",
           "against": "copy-at / beam5", "system_bleu": 30.25, "against_bleu": 38.05, "n_seeds": 1,
           "bleu_diff": -7.8, "diff_ci_low": -9.0, "diff_ci_high": -6.6, "verdict": "behind"}
    pd.DataFrame([row]).to_csv(root / "ranking.csv", index=False)
    assert "diff_seed_se" not in load_results(root).ranking
    pd.DataFrame([row | {"diff_seed_se": "many"}]).to_csv(root / "ranking.csv", index=False)
    with pytest.raises(Exception, match="column diff_seed_se must be numeric"):
        load_results(root)


def test_the_goals_line_counts_the_seeds_of_the_systems_it_judges(tmp_path):
    """The deep grid's goals line said "on means over 1 to 3 seeds": the 1 was an untouched task's."""
    root = fx.build_results(tmp_path)
    table = fx.with_seeds(fx.results_frame(), {2: 1.0, 3: -0.2})
    table = table[(table["task"] == "copy") | (table["seed"] == 1)]  # dialect: one seed; copy: three
    table.to_csv(root / "results.csv", index=False)
    (root / "goals.json").write_text(json.dumps(GOALS[:1]))
    md = write_report(root, figures=False)[0].read_text(encoding="utf-8")
    section = md.split("## Goals")[1].split("\n## ")[0]
    assert "on means over 3 seeds:" in section, section[:300]
