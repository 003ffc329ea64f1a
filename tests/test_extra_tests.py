"""A second test set (test2017 beside test2016): every strategy of a run scored on each
split of eval.extra_tests, tabulated in extra_tests.csv and compared in the report, where the
ranking is said to hold or the pairs that flip are named; a missing split is refused up front."""
import shutil

import pandas as pd
import yaml

from atnat.experiments.cli.commands import main
from tests.test_export import parallel_files


def grid(root, extra):
    return {"name": "two-tests", "base": {
        "task": {"name": "parallel", "data_dir": str(root), "src": "xx", "tgt": "yy", "valid": "valid",
                 "test": "test", "vocab_size": 60},
        "model": {"d_model": 16, "n_heads": 2, "ffn_dim": 32, "encoder_layers": 1, "decoder_layers": 1},
        "train": {"max_steps": 8, "max_tokens": 256, "val_every_steps": 4, "progress_bar": False, "num_threads": 1},
        "eval": {"n_bootstrap": 20, "probe_sentences": 0, "extra_tests": extra}},
        "cells": {"at": {"decoder": "at", "eval": {"strategies": ["greedy", {"name": "beam", "beam_size": 2}]}}},
        "goals": [{"system": "at / beam2", "within": 1, "of": "at / greedy"}],
        "compare": [["at / beam2", "at / greedy"]],
        "speed": {"latency_sentences": 2, "throughput_sentences": 4, "repeats": 1, "warmup": 0, "engine": "eager"}}


def tiny_grid_dir(tmp_path, monkeypatch, extra=()) -> tuple:
    """tmp_path made the working folder, with parallel text in data/: (data folder, `grid`'s spec)."""
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    parallel_files(data)
    return data, grid(data, list(extra))


def test_a_second_test_split_is_scored_tabulated_and_ranked(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    parallel_files(data)
    for side in ("xx", "yy"):
        shutil.copy(data / f"valid.{side}", data / f"test2.{side}")
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(grid(data, ["nope"])))
    assert main(["run", str(tmp_path / "g.yaml"), "--results", "res"]) == 2
    assert "eval.extra_tests: extra test split nope source: " in capsys.readouterr().err  # before training
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(grid(data, ["test2"])))
    assert main(["run", str(tmp_path / "g.yaml"), "--results", "res"]) == 0
    out = tmp_path / "res" / "two-tests"
    extra = pd.read_csv(out / "extra_tests.csv")
    assert set(extra.strategy) == {"greedy", "beam2"} and set(extra.test_set) == {"test2"}
    assert extra.bleu.between(0, 100).all() and (extra.sentences == 12).all()
    assert (out / "runs" / "at-s1" / "hyps" / "beam2@test2.txt").is_file()
    report = (out / "report.md").read_text()
    assert "## Other test sets" in report and "BLEU (test2)" in report
    assert "rank the same (by mean BLEU) on each" in report or "differs between the test sets" in report
    assert (out / "runs" / "at-s1" / "references@test2.txt").read_text().count("\n") == 12
    comparisons = pd.read_csv(out / "comparisons.csv")  # the other strategy minus the best AT, on each test set
    assert sorted(comparisons.test_set) == ["main", "test2"] and comparisons.system.nunique() == 1
    ranking = pd.read_csv(out / "ranking.csv")  # the two strategies against each other on both test sets
    assert set(ranking.test_set) == {"main", "test2"} and set(ranking.split_name) == {"test", "test2"}
    assert set(ranking.verdict) <= {"ahead", "behind", "equivalent", "not resolved"}
    assert ranking.diff_seed_se.isna().all() and (ranking.diff_sentence_se > 0).all()  # one seed: no seed part
    assert "## Ranking" in report and "### Task `parallel`, test2" in report
    # the grid's goal pair (main test set) and its compare pair (both test sets) reach ranking.csv and the report
    assert ranking.relation.str.contains("goal").sum() == 1 and ranking.relation.str.contains("compare").sum() == 2
    assert "## Comparisons the grid asks for" in report and "| paired 95% (1 seed) |" in report


def test_an_extra_test_name_that_would_write_outside_the_run_folder_is_refused(tmp_path):
    """Its name names the run's files (references@NAME.txt, hyps/LABEL@NAME.txt): a path is refused up front,
    even where files of that name exist."""
    import pytest

    from atnat.experiments.config.run import ConfigError, run_config_from_dict

    data = tmp_path / "a" / "data"
    data.mkdir(parents=True)
    parallel_files(data)
    (tmp_path / "leak").mkdir()
    for side in ("xx", "yy"):
        shutil.copy(data / f"valid.{side}", tmp_path / "leak" / f"t.{side}")
    spec = grid(data, ["../../leak/t"])["base"]
    with pytest.raises(ConfigError, match=r"eval.extra_tests: a name: '../../leak/t' cannot name a folder or file: it "
                                          "holds a path separator"):
        run_config_from_dict({**spec, "name": "r", "decoder": "at"}, "r")


def test_an_extra_test_of_a_task_that_names_its_files_is_read_from_a_data_dir_given(tmp_path, monkeypatch):
    """With task.files, an extra test split was read from the default data_dir (../shared/data/multi30k,
    relative to the working folder): another data set's test2017, silently, where that folder exists."""
    import pytest

    from atnat.experiments.config.run import ConfigError, extra_test_split, run_config_from_dict

    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    decoy = tmp_path / "shared" / "data" / "multi30k"
    decoy.mkdir(parents=True)
    mine = tmp_path / "mine"
    mine.mkdir()
    parallel_files(mine)
    for folder, text in ((decoy, "another data set"), (mine, "mine")):
        for side in ("xx", "yy"):
            (folder / f"test2.{side}").write_text(f"{text}\n", encoding="utf-8")
    files = {f"{split}_{side}": str(mine / f"{split}.{lang}")
             for split in ("train", "valid", "test") for side, lang in (("src", "xx"), ("tgt", "yy"))}
    spec = grid(mine, ["test2"])["base"]
    task = {k: v for k, v in spec["task"].items() if k != "data_dir"} | {"files": files}
    with pytest.raises(ConfigError, match="eval.extra_tests: extra test split test2: it is read from task.data_dir"):
        run_config_from_dict({**spec, "task": task, "name": "r", "decoder": "at"}, "r")
    given = run_config_from_dict({**spec, "task": task | {"data_dir": str(mine)}, "name": "r", "decoder": "at"}, "r")
    assert extra_test_split(given, "test2") == (["mine"], ["mine"])


def test_a_speculative_system_is_checked_lossless_on_every_test_set_and_a_miss_is_a_caution(tmp_path, monkeypatch):
    """The share of outputs equal to the verifier's greedy output was measured on the test split only, while the
    report gives speculative decoding's BLEU on the further test sets too."""
    from atnat.experiments.reporting.headline import cautions

    data, spec = tiny_grid_dir(tmp_path, monkeypatch, ["test2"])
    for side in ("xx", "yy"):
        shutil.copy(data / f"valid.{side}", data / f"test2.{side}")
    spec["cells"]["cmlm"] = {"decoder": "cmlm", "teacher": "at", "distill": {"targets": False},
                             "eval": {"strategies": [{"name": "speculative", "block": 3}]}}
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", str(tmp_path / "g.yaml"), "--results", "res"]) == 0
    extra = pd.read_csv(tmp_path / "res" / "two-tests" / "extra_tests.csv")
    spec_rows = extra[extra.strategy == "speculative-k3"]
    assert len(spec_rows) == 1 and (spec_rows.verifier_greedy_match == 1.0).all()
    assert extra[extra.strategy != "speculative-k3"].verifier_greedy_match.isna().all()
    said = cautions(pd.DataFrame(columns=["task", "family", "strategy", "seed"]),
                    extra.assign(verifier_greedy_match=[0.75 if s == "speculative-k3" else None for s in extra.strategy]))
    assert said == ["Caution (parallel, test2): `cmlm-s1 / speculative-k3` is not lossless: its output differs from its AT "
                    "verifier's greedy output in some test2 sentences (verifier_greedy_match 75.0%)."]
