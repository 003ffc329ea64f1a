"""A grid whose settings changed since its cells ran names the stale cells and stops, until told
to rerun or keep them: neither their numbers nor their runs are silently kept or lost."""
import json

from atnat.experiments.cli.commands import main
from tests.test_grid import TINY, write_grid


def edited(**cells):
    return {**TINY, "cells": {name: {**TINY["cells"][name], **cells.get(name, {})} for name in TINY["cells"]}}


def test_a_changed_training_setting_is_named_then_rerun_with_its_students(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path)
    assert main(["run", str(grid), "--results", "res"]) == 0
    runs = tmp_path / "res" / "tiny" / "runs"
    write_grid(tmp_path, edited(at={"optim": {"lr": 0.01}}))
    capsys.readouterr()
    assert main(["run", str(grid), "--results", "res"]) == 2
    err = capsys.readouterr().err
    assert "2 cell(s) were run with other settings" in err and "Nothing was run" in err
    assert "at-s1 (train again): optim.lr: 0.0005 -> 0.01" in err
    assert "cmlm-kd-s1 (train again): its teacher at-s1 is trained again" in err
    assert json.loads((runs / "at-s1" / "config.json").read_text())["optim"]["lr"] == 0.0005  # untouched
    assert main(["run", str(grid), "--results", "res", "--stale", "rerun"]) == 0
    assert json.loads((runs / "at-s1" / "config.json").read_text())["optim"]["lr"] == 0.01
    kept = sorted(p.name.split(".stale-")[0] for p in runs.glob("*.stale-*"))
    assert kept == ["at-s1", "cmlm-kd-s1"]  # the old runs and their numbers are kept aside
    assert main(["run", str(grid), "--results", "res"]) == 0  # nothing stale any more


def test_a_changed_eval_setting_is_kept_on_request_or_evaluated_again_without_training(tmp_path, monkeypatch,
                                                                                      capsys):
    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path)
    assert main(["run", str(grid), "--results", "res"]) == 0
    out = tmp_path / "res" / "tiny"
    trained = (out / "runs" / "at-s1" / "train.json").stat().st_mtime_ns
    write_grid(tmp_path, edited(at={"eval": {"strategies": ["greedy", {"name": "beam", "beam_size": 3}]}}))
    capsys.readouterr()
    assert main(["run", str(grid), "--results", "res"]) == 2
    assert "at-s1 (evaluate again): eval.strategies" in capsys.readouterr().err
    assert main(["run", str(grid), "--results", "res", "--stale", "keep"]) == 0
    assert "Kept on the user's word (`--stale keep`)" in (out / "report.md").read_text()
    assert main(["run", str(grid), "--results", "res", "--stale", "rerun"]) == 0
    assert (out / "runs" / "at-s1" / "train.json").stat().st_mtime_ns == trained  # not trained again
    labels = {r["strategy"] for r in json.loads((out / "runs" / "at-s1" / "metrics.json").read_text())["rows"]}
    assert labels == {"greedy", "beam3"}
    assert "Kept on the user's word" not in (out / "report.md").read_text()
    capsys.readouterr()
    assert main(["run", str(grid), "--results", "res"]) == 0  # evaluated under the new settings: not stale now
    assert "evaluate again" not in capsys.readouterr().err


def test_only_matches_cell_names_exactly_or_by_glob(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path)
    assert main(["run", str(grid), "--results", "res", "--only", "at", "--dry-run"]) == 2
    assert "--only 'at' matches no cell" in capsys.readouterr().err  # a substring is not a name
    assert main(["run", str(grid), "--results", "res", "--only", "at-s1", "--dry-run"]) == 0
    listed = capsys.readouterr().out
    assert "at-s1" in listed and "cmlm-kd-s1" not in listed
    assert main(["run", str(grid), "--results", "res", "--only", "*-s1", "--dry-run"]) == 0
    assert "cmlm-kd-s1" in capsys.readouterr().out
