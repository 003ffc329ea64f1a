"""atnat report --interim: a report of a grid whose cells are not all done (the deep grid ran for
days), written beside the runner's folder without touching it, cells not finished named as such."""
import json
import re

import pandas as pd
import pytest
import yaml

from atnat.experiments.cli.commands import main
from tests.test_extra_tests import tiny_grid_dir


@pytest.mark.slow
def test_an_interim_report_tabulates_the_finished_cells_only(tmp_path, monkeypatch, capsys):
    _, spec = tiny_grid_dir(tmp_path, monkeypatch)
    spec["cells"]["nat"] = {"decoder": "nat", "eval": {"strategies": ["parallel"]}}
    spec["compare"] = [["nat / parallel", "at / greedy"]]
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    assert main(["report", "--interim", str(tmp_path / "g.yaml"), "--results", "res"]) == 2  # nothing ran yet
    assert "no run folders yet" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "g.yaml"), "--results", "res", "--only", "at-s1"]) == 0
    out = tmp_path / "res" / "two-tests"
    (out / "results.csv").unlink()  # as while the grid still runs: the runner has written no table yet
    before = sorted(p.name for p in out.iterdir())
    assert main(["report", "--interim", str(tmp_path / "g.yaml"), "--results", "res"]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted([*before, "interim"])  # nothing else touched
    interim = out / "interim"
    table = pd.read_csv(interim / "results.csv")
    assert set(table.loc[table.status == "ok", "cell"]) == {"at-s1"}
    assert set(table.loc[table.status == "not run", "cell"]) == {"nat-s1"}
    env = json.loads((interim / "environment.json").read_text())
    assert env["interim"].startswith("1 of 2 cells finished when written") and "wall_time_s" not in env
    assert re.match(r"1 of 2 cells finished when written \(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \w+\)", env["interim"])  # its zone
    report = (interim / "report.md").read_text()
    assert report.startswith("# Grid report: two-tests (interim)\n\n> Note: Interim report of a grid still running")
    assert "1 of 2 cells finished; 1 not run yet (listed below)." in report and "`nat-s1`" in report
    # its pair has no finished NAT yet: named as not measured, not silently absent
    assert "## Comparisons the grid asks for" in report and "Not measured (1 of the 1 pairs: a side has no result, " \
           "or the two share no seed): `nat / parallel` against `at / greedy`." in report
    assert "no A/A control was timed" not in report  # no speed at all yet: no note about its noise floor
    assert "Run with other settings" not in report
    # the grid file changes under a finished cell (here: an eval setting): the interim report says so
    spec["base"]["eval"]["n_bootstrap"] = 30
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    assert main(["report", "--interim", str(tmp_path / "g.yaml"), "--results", "res"]) == 0
    report = (interim / "report.md").read_text()
    assert "> Note: Run with other settings than the grid file gives now" in report and "`at-s1` (" in report


def test_a_cell_timed_whose_run_folder_is_gone_is_not_run_not_a_row_without_bleu(tmp_path, monkeypatch, capsys):
    """The baseline cell's run folder gone but its rows still in timing.csv: the interim report crashed
    (AttributeError in the paired test) and the tables showed the cell's timed strategies as "ok" rows without BLEU."""
    from tests.test_grid import write_grid

    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path)
    out = tmp_path / "res" / "tiny"
    for cell, strategy in (("at-s1", "greedy"), ("cmlm-kd-s1", "mask-predict-2")):
        (out / "runs" / cell).mkdir(parents=True)
        (out / "runs" / cell / "metrics.json").write_text(json.dumps(
            {"status": "ok", "rows": [{"strategy": strategy, "strategy_name": strategy.split("-")[0], "bleu": 30.0}]}))
    pd.DataFrame([{"cell": "at-s1", "strategy": "greedy", "latency_ms_b1": 10.0, "speedup_vs_at": 1.0},
                  {"cell": "cmlm-kd-s1", "strategy": "mask-predict-2", "latency_ms_b1": 5.0, "speedup_vs_at": 2.0}]
                 ).to_csv(out / "timing.csv", index=False)
    import shutil
    shutil.rmtree(out / "runs" / "at-s1")
    assert main(["report", "--interim", str(grid), "--results", "res"]) == 0, capsys.readouterr().err
    table = pd.read_csv(out / "interim" / "results.csv")
    assert table.loc[table.cell == "at-s1", "status"].tolist() == ["not run"]
    assert table.loc[table.status == "ok", "bleu"].notna().all()


def test_a_regenerated_interim_report_shows_no_goals_the_grid_no_longer_sets(tmp_path, monkeypatch, capsys):
    """goals.json was written where the grid had goals and left where it had none: the report then judged goals
    the grid file no longer states."""
    from tests.test_grid import write_grid

    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path)  # a grid without goals
    out = tmp_path / "res" / "tiny"
    (out / "runs" / "at-s1").mkdir(parents=True)
    (out / "runs" / "at-s1" / "metrics.json").write_text(json.dumps(
        {"status": "ok", "rows": [{"strategy": "greedy", "strategy_name": "greedy", "bleu": 30.0}]}))
    (out / "interim").mkdir()
    (out / "interim" / "goals.json").write_text(json.dumps([{"goal": "AT greedy reaches 99", "system": "at / greedy",
                                                             "at_least": 99}]))
    assert main(["report", "--interim", str(grid), "--results", "res"]) == 0, capsys.readouterr().err
    assert not (out / "interim" / "goals.json").exists()
    assert "AT greedy reaches 99" not in (out / "interim" / "report.md").read_text()
