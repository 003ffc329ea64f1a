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
