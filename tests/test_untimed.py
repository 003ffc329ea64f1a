"""A grid's `untimed:` cells (the deep grid's fp32 twins: precision controls, whose BLEU is the question,
not their speed): `atnat run`'s timing phase, `atnat time` and `atnat status` neither time them nor wait
for them, and the report says why their speed columns are empty. Before, only the deep grid's own
watcher knew: `atnat run` would have timed the twins at the grid's end, with their seeds' baselines timed
again in a new session beside them, while the students' speed-ups stayed measured beside the old rows."""
import json

import pandas as pd
import pytest
import yaml

from atnat.experiments.cli.commands import main
from atnat.experiments.config.run import ConfigError
from atnat.experiments.running.grid import load_grid
from tests.test_extra_tests import tiny_grid_dir


def control_grid(tmp_path, monkeypatch, **extra) -> dict:
    """The tiny two-test grid with a student and a control twin of its AT (the deep grid's shape)."""
    _, spec = tiny_grid_dir(tmp_path, monkeypatch)
    spec["cells"]["nat"] = {"decoder": "nat", "eval": {"strategies": ["parallel"]}}
    spec["cells"]["twin"] = {"decoder": "at", "train": {"max_steps": 6}, "eval": {"strategies": ["greedy"]}}
    spec |= {"baseline": "at", "untimed": ["twin"]} | extra
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    return spec


def test_untimed_names_cells_of_the_grid_and_never_its_baseline(tmp_path, monkeypatch):
    spec = control_grid(tmp_path, monkeypatch)
    grid = load_grid(tmp_path / "g.yaml")
    assert grid.untimed == ["twin"] and [c.name for c in grid.never_timed()] == ["twin-s1"]
    assert [c.name for c in grid.timed_cells()] == ["at-s1", "nat-s1"]
    for untimed, message in ((["twn"], "untimed: 'twn' is not a cell of this grid (cells: at, nat, twin)"),
                             (["at"], "untimed: at is its tasks' baseline"),
                             ("twin", "untimed: expected a list of cell names")):
        (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec | {"untimed": untimed}))
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
            load_grid(tmp_path / "g.yaml")
    # without `baseline:`, every plain AT cell is a baseline: the twin (a plain AT too) cannot be left out
    (tmp_path / "g.yaml").write_text(yaml.safe_dump({k: v for k, v in spec.items() if k != "baseline"}))
    with pytest.raises(ConfigError, match="untimed: twin is its tasks' baseline"):
        load_grid(tmp_path / "g.yaml")


@pytest.mark.slow
def test_untimed_cells_are_neither_timed_nor_waited_for(tmp_path, monkeypatch, capsys):
    control_grid(tmp_path, monkeypatch)
    out = tmp_path / "res" / "two-tests"
    for cell in ("at-s1", "nat-s1"):
        assert main(["cell", "g.yaml", cell, "--results", "res"]) == 0
    capsys.readouterr()
    assert main(["time", "g.yaml", "--results", "res"]) == 0  # whole without its control: no --partial needed
    assert "timed (or kept, unchanged): parallel seed 1\n" in capsys.readouterr().out
    first = pd.read_csv(out / "timing.csv")
    assert set(first.cell) == {"at-s1", "nat-s1"}
    assert main(["time", "g.yaml", "--results", "res", "--only", "twin-s1"]) == 2
    assert "--only twin-s1 names only cells the grid never times (untimed: twin): twin-s1" in capsys.readouterr().err

    assert main(["run", "g.yaml", "--results", "res"]) == 0  # trains the control; its timing phase keeps the seed's
    timing = pd.read_csv(out / "timing.csv")
    pd.testing.assert_frame_equal(timing, first)  # the control untimed, the seed's timing not taken again
    results = pd.read_csv(out / "results.csv")
    assert results.query("cell == 'twin-s1'").speedup_vs_at.isna().all() and results.query("cell == 'twin-s1'").bleu.notna().all()
    assert results.query("cell == 'nat-s1'").speedup_vs_at.notna().all()
    assert json.loads((out / "environment.json").read_text())["untimed"] == ["twin-s1"]
    assert "Never timed, as the grid asks (`untimed:`): `twin-s1`; their speed columns stay empty." in (
        (out / "report.md").read_text())
    capsys.readouterr()
    assert main(["status", "g.yaml", "--results", "res"]) == 0
    session = first.timing_session.iloc[0]
    assert (f"parallel seed 1: 3 of 3 cells done, timed {session}; never timed: twin-s1 (the grid's untimed)\n"
            in capsys.readouterr().out)

    # the grid's own report from collected copies: the control is never timed, not "no speed collected"
    assert main(["collect", "g.yaml", "--results", "res", "--to", "kept"]) == 0
    (tmp_path / "res").rename(tmp_path / "res-lost")
    assert main(["report", "g.yaml", "--results", "res", "--collected", "kept"]) == 0
    env = json.loads((out / "environment.json").read_text())
    assert "no speed was collected" not in env["collected_from"] and env["untimed"] == ["twin-s1"]
    assert "Never timed, as the grid asks (`untimed:`): `twin-s1`" in (out / "report.md").read_text()
