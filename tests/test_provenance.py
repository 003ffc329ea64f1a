"""Which code made each result: a grid that runs for days is resumed across commits (the deep
grid's first run trained its teachers under one commit and its students under another), and a
report written later by newer code must say so, cell by cell."""
import json
from types import SimpleNamespace

import pandas as pd
import yaml

from atnat.experiments.cli.commands import main
from atnat.experiments.provenance import code_version
from atnat.experiments.reporting.report import _code

from tests import fixtures_results as fx
from tests.test_extra_tests import tiny_grid_dir


def test_a_cell_records_the_code_that_trained_and_evaluated_it(tmp_path, monkeypatch):
    _, spec = tiny_grid_dir(tmp_path, monkeypatch)
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", "g.yaml", "--results", "res", "--only", "at-s1"]) == 0
    run = tmp_path / "res" / "two-tests" / "runs" / "at-s1"
    version = code_version()
    commit = version["git_commit"] + ("*" if version["git_dirty"] else "")
    (attempt,) = json.loads((run / "train.json").read_text())["attempts"]
    assert attempt["git_commit"] == version["git_commit"] and attempt["resumed_from"] is None
    assert json.loads((run / "metrics.json").read_text())["written_by"]["git_commit"] == version["git_commit"]
    table = pd.read_csv(tmp_path / "res" / "two-tests" / "results.csv", keep_default_na=False)
    assert set(table["trained_with"]) == {commit} and set(table["evaluated_with"]) == {commit}
    report = (tmp_path / "res" / "two-tests" / "report.md").read_text()
    assert "ran under more than one version" not in report and "The cells ran under" not in report  # one version


def test_the_report_names_the_cells_that_ran_under_other_code():
    table = fx.results_frame().assign(trained_with="17f3ce4", evaluated_with="17f3ce4")
    students = table["cell"].isin(["copy-cmlm-kd-s1", "copy-ctc-s1"])
    table.loc[students, ["trained_with", "evaluated_with"]] = ["17f3ce4+3eb4ed6*", "3eb4ed6*"]
    g = SimpleNamespace(table=table, environment={"git_commit": "8d98348"})
    (note,) = _code(g)
    assert note.text.startswith("The cells ran under more than one version of the code (these tables were "
                                "written under 8d98348): ")
    assert "trained under 17f3ce4+3eb4ed6*, evaluated under 3eb4ed6*: `copy-cmlm-kd-s1`, `copy-ctc-s1`" in note.text
    assert "trained under 17f3ce4, evaluated under 17f3ce4: `copy-at-s1`, `dialect-at-s1`, `dialect-nat-s1`" in note.text
    one = SimpleNamespace(table=table.assign(trained_with="17f3ce4", evaluated_with="17f3ce4"),
                          environment={"git_commit": "8d98348"})
    assert _code(one)[0].text.startswith("The cells ran under 17f3ce4, but these tables were written under 8d98348: ")
    same = SimpleNamespace(table=table.assign(trained_with="8d98348", evaluated_with="8d98348"),
                           environment={"git_commit": "8d98348"})
    assert _code(same) == []
    older = SimpleNamespace(table=fx.results_frame(), environment={"git_commit": "8d98348"})  # no such columns
    assert _code(older) == []
