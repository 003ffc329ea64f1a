"""atnat report --restat: a finished grid's tables recomputed from its run folders with this version's
statistics (for a results folder written by an older version), nothing trained, decoded or timed again,
the run's own record kept."""
import json

import pandas as pd
import yaml

from atnat.experiments.cli.commands import main
from tests.test_extra_tests import tiny_grid_dir


def test_restat_recomputes_the_tables_and_keeps_the_runs_record(tmp_path, monkeypatch, capsys):
    _, spec = tiny_grid_dir(tmp_path, monkeypatch)
    spec["seeds"] = [1, 2]
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    assert main(["report", "--restat", str(tmp_path / "g.yaml"), "--results", "res"]) == 2  # nothing ran yet
    assert "--restat needs a finished run's folder" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "g.yaml"), "--results", "res"]) == 0
    out = tmp_path / "res" / "two-tests"
    ranking = pd.read_csv(out / "ranking.csv")
    env = json.loads((out / "environment.json").read_text())
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "runs" / "at-s1").rglob("*") if p.is_file()}
    # as an older version would have left them: other intervals in ranking.csv, another margin
    pd.DataFrame(ranking.assign(diff_ci_low=-99.0, diff_ci_high=99.0, verdict="not resolved")).to_csv(
        out / "ranking.csv", index=False)
    assert main(["report", "--restat", str(tmp_path / "g.yaml"), "--results", "res"]) == 0
    again = pd.read_csv(out / "ranking.csv")
    pd.testing.assert_frame_equal(again, ranking)  # recomputed from the runs, the same as the run's
    after = json.loads((out / "environment.json").read_text())
    assert after["wall_time_s"] == env["wall_time_s"] and after["started"] == env["started"]  # the run's record
    assert after["restat"]["command"].startswith("atnat report --restat")
    assert {p.name: p.stat().st_mtime_ns for p in (out / "runs" / "at-s1").rglob("*") if p.is_file()} == stamps
    assert "recomputed the tables" in capsys.readouterr().out
    assert main(["report", "--restat", "--interim", str(tmp_path / "g.yaml"), "--results", "res"]) == 2


def test_a_damaged_results_record_is_named_by_restat_and_status_and_evaluated_again(tmp_path, monkeypatch, capsys):
    _, spec = tiny_grid_dir(tmp_path, monkeypatch)
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", str(tmp_path / "g.yaml"), "--results", "res"]) == 0
    record = tmp_path / "res" / "two-tests" / "runs" / "at-s1" / "metrics.json"
    good = json.loads(record.read_text())
    damages = {"no strategy name": lambda m: [r.pop("strategy") for r in m["rows"]],
               "wrong kind": lambda m: [r.update(bleu="high") for r in m["rows"]],
               "no strategy name ": lambda m: m.update(rows=[{"x": 1}]),
               # a path read as a name: the report read another cell's hypotheses (hyps/<strategy>.txt) for its p-value
               "cannot name a folder or file": lambda m: [r.update(strategy="../../other-s1/hyps/beam5") for r in m["rows"]]}
    for expected, damage in damages.items():
        meta = json.loads(json.dumps(good))
        damage(meta)
        record.write_text(json.dumps(meta))
        capsys.readouterr()
        assert main(["report", "--restat", str(tmp_path / "g.yaml"), "--results", "res"]) == 1  # no traceback
        err = capsys.readouterr().err
        assert "runs/at-s1/metrics.json: not a results record of atnat: row 0" in err and expected.strip() in err
        assert "the tables show the cell as failed" in err
        table = pd.read_csv(tmp_path / "res" / "two-tests" / "results.csv")
        assert table.status.tolist() == ["failed"] and expected.strip() in table.error[0]
    record.write_text(record.read_text()[:50])  # cut short
    assert main(["report", "--restat", str(tmp_path / "g.yaml"), "--results", "res"]) == 1
    assert "not a readable results record" in capsys.readouterr().err
    assert main(["report", "--interim", str(tmp_path / "g.yaml"), "--results", "res"]) == 1  # was 0, and silent
    assert "not a readable results record" in capsys.readouterr().err
    assert main(["status", str(tmp_path / "g.yaml"), "--results", "res"]) == 0
    out = capsys.readouterr().out
    assert "record damaged" in out and "interrupted" not in out and "the next run evaluates it again" in out
    steps = json.loads((record.parent / "train.json").read_text())
    assert main(["run", str(tmp_path / "g.yaml"), "--results", "res"]) == 0  # evaluated again, not trained again
    assert json.loads(record.read_text())["status"] == "ok"
    assert json.loads((record.parent / "train.json").read_text()) == steps


def test_a_record_written_with_numpy_values_and_nan_labels_reads_back(tmp_path):
    """A row's numpy integer was written as the string "4" (json's default=str) and a label column's NaN (no
    timing session) was refused on reading: a results record atnat itself wrote must read back as written."""
    import numpy as np

    from atnat.experiments.reporting.records import read_metrics, write_record

    write_record(tmp_path, "ok", [{"strategy": "greedy", "bleu": np.float64(30.5), "timing_threads": np.int64(4),
                                   "timing_session": float("nan")}])
    (row,) = read_metrics(tmp_path)["rows"]
    assert row["timing_threads"] == 4 and isinstance(row["timing_threads"], int) and row["bleu"] == 30.5


def test_restat_refuses_a_folder_whose_cell_has_no_results_and_changes_nothing(tmp_path, monkeypatch, capsys):
    """A run folder removed (or its metrics.json) after the run: --restat rewrote every table with the cell
    "not run" beside rows without BLEU and exited 0; it must refuse, naming the cell's folder, and keep the tables."""
    import shutil

    _, spec = tiny_grid_dir(tmp_path, monkeypatch)
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", str(tmp_path / "g.yaml"), "--results", "res"]) == 0
    out = tmp_path / "res" / "two-tests"
    tables = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    for remove in (lambda run: (run / "metrics.json").unlink(), lambda run: shutil.rmtree(run)):
        backup = tmp_path / "backup"
        shutil.copytree(out / "runs" / "at-s1", backup)
        remove(out / "runs" / "at-s1")
        capsys.readouterr()
        assert main(["report", "--restat", str(tmp_path / "g.yaml"), "--results", "res"]) == 2
        err = capsys.readouterr().err
        assert "runs/at-s1" in err and "no results" in err, err
        assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == tables
        shutil.rmtree(out / "runs" / "at-s1", ignore_errors=True)
        shutil.move(backup, out / "runs" / "at-s1")
