"""A results.csv cut short is refused, never reported as if whole: `atnat report` says
what happened and how to rebuild the table (`atnat run GRID` re-reads the run folders)."""
import json

import pandas as pd
import pytest

from atnat.core.errors import AtnatError
from atnat.experiments.cli.commands import main
from atnat.experiments.reporting.report import write_report
from atnat.experiments.reporting.results import load_results
from tests import fixtures_results as fx
from tests.test_grid import write_grid

N_ROWS = len(fx.ROWS)


def cut(path, keep: float) -> None:
    """Keep the first `keep` fraction of the file's bytes, as a process killed mid-write would."""
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def test_a_csv_cut_mid_row_is_refused_not_read_as_a_failed_cell(tmp_path):
    root = fx.build_results(tmp_path)
    cut(root / "results.csv", 0.5)
    assert len(pd.read_csv(root / "results.csv")) < N_ROWS  # what pandas alone would report
    with pytest.raises(AtnatError, match=r"results\.csv: the file is cut short: it does not end with a "
                                         r"newline.*atnat run"):
        write_report(root)
    assert not (root / "report.md").exists()


def test_a_row_with_missing_fields_is_refused(tmp_path):
    root = fx.build_results(tmp_path)
    lines = (root / "results.csv").read_text().splitlines(keepends=True)
    lines[3] = ",".join(lines[3].split(",")[:7]) + "\n"  # ends cleanly, but 7 fields
    (root / "results.csv").write_text("".join(lines))
    with pytest.raises(AtnatError, match=r"results\.csv: line 4 has 7 fields but the header has \d+"):
        load_results(root)


def test_a_csv_cut_at_a_row_boundary_is_caught_by_the_row_count_of_environment_json(tmp_path):
    root = fx.build_results(tmp_path)
    env = json.loads((root / "environment.json").read_text())
    (root / "environment.json").write_text(json.dumps({**env, "results_rows": N_ROWS, "grid": "g.yaml"}))
    load_results(root)  # whole: fine
    lines = (root / "results.csv").read_text().splitlines(keepends=True)
    (root / "results.csv").write_text("".join(lines[:4]))
    with pytest.raises(AtnatError, match=rf"results\.csv has 3 rows, but environment\.json records {N_ROWS}.*"
                                         r"`atnat run g\.yaml`"):
        load_results(root)


def test_optional_csv_files_are_checked_the_same_way(tmp_path):
    root = fx.build_results(tmp_path)
    cut(root / "samples.csv", 0.7)
    with pytest.raises(AtnatError, match=r"samples\.csv: the file is cut short"):
        load_results(root)


def finished_tiny_grid(tmp_path, monkeypatch, rows: dict):
    """The tiny grid in tmp_path (the working folder) with each cell's metrics.json holding `rows`, tabulated by
    `atnat run` into res/tiny without training anything -> the grid file."""
    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path)
    runs = tmp_path / "res" / "tiny" / "runs"
    for cell, cell_rows in rows.items():
        (runs / cell).mkdir(parents=True)
        (runs / cell / "metrics.json").write_text(json.dumps({"status": "ok", "rows": cell_rows}))
    monkeypatch.setattr("atnat.experiments.running.scheduler.run_one", lambda *a: pytest.fail("a finished cell was rerun"))
    # nothing to time (no weights): the timing phase would rightly fail the run for cells left without speed
    monkeypatch.setattr("atnat.experiments.running.scheduler.timing_phase", lambda *a, **k: "")
    assert main(["run", str(grid), "--results", "res"]) == 0
    return grid


def test_atnat_run_records_the_row_count_and_rebuilds_a_cut_table_without_training(tmp_path, monkeypatch, capsys):
    """Finished cells (metrics.json "ok") are tabulated again; nothing trains (no data, no model)."""
    grid = finished_tiny_grid(tmp_path, monkeypatch, {
        "at-s1": [{"strategy": f"beam{k}", "strategy_name": "beam", "bleu": 10.0 + k} for k in range(1, 24)],
        "cmlm-kd-s1": [{"strategy": "mask-predict-2", "strategy_name": "mask-predict", "bleu": 9.0}]})
    out = tmp_path / "res" / "tiny"
    assert json.loads((out / "environment.json").read_text())["results_rows"] == 24
    cut(out / "results.csv", 0.4)
    capsys.readouterr()
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    assert "results.csv: the file is cut short" in err and f"atnat run {grid}" in err
    assert main(["run", str(grid), "--results", "res"]) == 0  # the rebuild the message names
    table = pd.read_csv(out / "results.csv")
    assert len(table) == 24 and (table.status == "ok").all()


def test_an_authors_own_csv_in_the_folder_does_not_block_the_report(tmp_path):
    """Every *.csv of the folder was checked: a hand-made analysis without a final newline (the deep grid keeps
    several beside its tables) stopped the report as 'cut short'."""
    root = fx.build_results(tmp_path)
    (root / "my_side_analysis.csv").write_text("step,loss\n1,2.0\n2,1.5")
    load_results(root)


@pytest.mark.parametrize("table", ["comparisons.csv", "ranking.csv", "extra_tests.csv"])
def test_a_table_the_runner_wrote_and_that_is_gone_is_refused(tmp_path, monkeypatch, capsys, table):
    """comparisons.csv or ranking.csv deleted after the run: the report exited 0, judged the NATs without the
    paired intervals (stronger verdicts than the pairs allow) and dropped its ranking section without a word."""
    grid = finished_tiny_grid(tmp_path, monkeypatch, {
        "at-s1": [{"strategy": "greedy", "strategy_name": "greedy", "bleu": 30.0}],
        "cmlm-kd-s1": [{"strategy": "mask-predict-2", "strategy_name": "mask-predict", "bleu": 29.0}]})
    out = tmp_path / "res" / "tiny"
    assert main(["report", str(out)]) == 0
    (out / table).unlink()
    (out / "report.md").unlink()
    capsys.readouterr()
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{table}: missing" in err and f"atnat run {grid}" in err, err
    assert not (out / "report.md").exists()
    assert main(["run", str(grid), "--results", "res"]) == 0  # the rebuild the message names
    assert (out / table).is_file() and main(["report", str(out)]) == 0


@pytest.mark.parametrize("value, message", [("inf", "must be a finite number from 0 to 100"),
                                            ("-50", "must be a finite number from 0 to 100"),
                                            ("100.5", "must be a finite number from 0 to 100")])
def test_a_bleu_no_run_can_write_is_refused(tmp_path, value, message):
    """A results.csv edited to BLEU inf or -50 was reported (headline `inf [0.07, 0.32]`, an overview of -50.00
    beside a paired comparison of 0.23 against 0.23); text there was already refused."""
    root = fx.build_results(tmp_path)
    table = pd.read_csv(root / "results.csv")
    table.loc[0, "bleu"] = float(value)
    table.to_csv(root / "results.csv", index=False)
    with pytest.raises(AtnatError, match=rf"results\.csv: column bleu {message}; data row 1"):
        load_results(root)
    table.loc[0, "bleu"] = 100.00000000000004  # what sacreBLEU gives a perfect output
    table.to_csv(root / "results.csv", index=False)
    load_results(root)


def test_atnat_run_fails_when_finished_cells_are_left_without_speed(tmp_path, monkeypatch, capsys):
    """Finished cells whose weights are gone, never timed: the run's timing phase leaves them without speed, which
    the run names, records and exits 1 for (it exited 0)."""
    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path)
    runs = tmp_path / "res" / "tiny" / "runs"
    for cell in ("at-s1", "cmlm-kd-s1"):
        (runs / cell).mkdir(parents=True)
        (runs / cell / "metrics.json").write_text(json.dumps({"status": "ok", "rows": [
            {"strategy": "greedy", "strategy_name": "greedy", "bleu": 10.0}]}))
    monkeypatch.setattr("atnat.experiments.running.scheduler.run_one", lambda *a: pytest.fail("a finished cell was rerun"))
    assert main(["run", str(grid), "--results", "res"]) == 1
    assert "no speed for at-s1, cmlm-kd-s1" in capsys.readouterr().err
    env = json.loads((tmp_path / "res" / "tiny" / "environment.json").read_text())
    assert env["timing"].startswith("failed: no speed for at-s1, cmlm-kd-s1")
