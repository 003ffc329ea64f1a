"""Which code made each result: a grid that runs for days is resumed across commits (the deep
grid's first run trained its teachers under one commit and its students under another), and a
report written later by newer code must say so, cell by cell. What a cell records is checked where
a tiny grid runs anyway: tests/test_collect.py (one grid run), tests/test_resume.py (two attempts)."""
from types import SimpleNamespace

import pandas as pd

from atnat.experiments.reporting.report import _code
from tests import fixtures_results as fx


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
    assert "`*`: tracked files were edited since that commit;" in note.text
    one = SimpleNamespace(table=table.assign(trained_with="17f3ce4", evaluated_with="17f3ce4"),
                          environment={"git_commit": "8d98348"})
    assert _code(one)[0].text.startswith("The cells ran under 17f3ce4, but these tables were written under 8d98348: ")
    assert "`*`" not in _code(one)[0].text  # the legend of a mark no commit carries
    same = SimpleNamespace(table=table.assign(trained_with="8d98348", evaluated_with="8d98348"),
                           environment={"git_commit": "8d98348"})
    assert _code(same) == []
    older = SimpleNamespace(table=fx.results_frame(), environment={"git_commit": "8d98348"})  # no such columns
    assert _code(older) == []


def test_a_commit_of_digits_only_is_read_back_as_text(tmp_path):
    """The commit 9945357 came back from results.csv as the number 9945357.0, and the report then said
    the cells ran under other code than its own (found when main's HEAD had that hash)."""
    from atnat.experiments.reporting.results import load_results

    root = fx.build_results(tmp_path)
    table = pd.read_csv(root / "results.csv").assign(trained_with="9945357", evaluated_with="9945357")
    table.loc[table["status"] != "ok", ["trained_with", "evaluated_with"]] = ""  # a cell not run: empty
    assert (table["status"] != "ok").any()
    table.to_csv(root / "results.csv", index=False)
    g = load_results(root)
    assert set(g.table.loc[g.table["status"] == "ok", "trained_with"]) == {"9945357"}
    assert _code(SimpleNamespace(table=g.table, environment={"git_commit": "9945357"})) == []


def test_a_run_rewriting_its_own_committed_results_is_not_dirty(tmp_path, monkeypatch):
    """Trials: the quickstart run from a fresh clone recorded git_dirty: true (`0d5d4ed*`) because its own
    outputs, results/quickstart/, are tracked files. Code edits still count."""
    import subprocess

    from atnat.experiments import provenance

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)
    (tmp_path / "results" / "grid").mkdir(parents=True)
    (tmp_path / "results" / "grid" / "report.md").write_text("old\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("init", "-q")
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qam", "x", "--allow-empty")
    git("add", "-A")
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "y")
    monkeypatch.setattr(provenance, "REPO", tmp_path)
    (tmp_path / "results" / "grid" / "report.md").write_text("new\n")
    assert provenance.code_version()["git_dirty"] is False
    (tmp_path / "code.py").write_text("x = 2\n")
    assert provenance.code_version()["git_dirty"] is True


def test_the_report_names_the_code_that_timed_each_cell():
    """A seed timed again by newer code than trained it (a grid's timing redone after a fix to an engine): the
    note says which code timed which cells, a cell never timed says so, and one timed before the timing recorded
    its code is said to be unrecorded."""
    table = fx.results_frame().assign(trained_with="17f3ce4", evaluated_with="17f3ce4", timed_with="3eb4ed6",
                                      timing_session="2026-11-30 12:00:00 UTC")
    table.loc[table["cell"] == "copy-ctc-s1", ["timed_with", "timing_session"]] = ["", ""]
    table.loc[table["cell"] == "copy-cmlm-kd-s1", "timed_with"] = ""
    (note,) = _code(SimpleNamespace(table=table, environment={"git_commit": "3eb4ed6"}))
    assert note.text.startswith("The cells ran under more than one version of the code (these tables were "
                                "written under 3eb4ed6): ")
    assert ("trained under 17f3ce4, evaluated under 17f3ce4, timed under 3eb4ed6: `copy-at-s1`, `dialect-at-s1`, "
            "`dialect-nat-s1`") in note.text
    assert "trained under 17f3ce4, evaluated under 17f3ce4, not timed: `copy-ctc-s1`" in note.text
    assert "timed under unrecorded code: `copy-cmlm-kd-s1`" in note.text
    assert note.text.endswith("results.csv (trained_with, evaluated_with, timed_with).")
    same = table.assign(timed_with="17f3ce4")
    same.loc[same["cell"] == "copy-cmlm-kd-s1", "timed_with"] = ""
    (note,) = _code(SimpleNamespace(table=same, environment={"git_commit": "8d98348"}))
    assert note.text.startswith("The cells ran under 17f3ce4, but these tables were written under 8d98348: ")
    parts = table.copy()  # a cell whose rows were timed by two commits names both
    first = parts.index[parts["cell"] == "copy-at-s1"][0]
    parts.loc[first, "timed_with"] = "8d98348"
    (note,) = _code(SimpleNamespace(table=parts, environment={"git_commit": "3eb4ed6"}))
    assert "timed under 8d98348+3eb4ed6: `copy-at-s1`" in note.text  # in the order of its rows
    untimed = table.assign(timed_with="", timing_session="")  # a grid with no timing (or an older one): as before
    (note,) = _code(SimpleNamespace(table=untimed, environment={"git_commit": "8d98348"}))
    assert "timed" not in note.text
