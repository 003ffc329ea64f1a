"""Names that become paths (grids, cells, axis labels, runs, strategy labels) never leave their folder,
a grid cannot move a cell out of its results folder, and a second `atnat train` into a folder in use
is refused."""
from __future__ import annotations

import pytest
import yaml

from atnat.core.errors import AtnatError
from atnat.experiments.cli.commands import main
from atnat.experiments.config.run import ConfigError
from atnat.experiments.files import path_part
from atnat.experiments.locks import cell_lock, held
from atnat.experiments.running.grid import load_grid
from tests.test_grid import TINY, write_grid


@pytest.mark.parametrize("name", ["", " ", ".", "..", "../../ESCGRID", "/tmp/ESC", "a/b", "a\\b", "bell\x07",
                                  "tab\tname", "nul\x00"])
def test_a_name_that_would_leave_its_folder_is_refused_naming_the_key(name):
    with pytest.raises(AtnatError, match="^grid name: "):
        path_part(name, "grid name")


@pytest.mark.parametrize("name", ["en-de-at-s1", "beam5-alpha=0.6", "mask-predict-10-lb3", "x.y_z", "ünïcode"])
def test_ordinary_names_pass(name):
    assert path_part(name, "k") == name


@pytest.mark.parametrize("change, key", [
    ({"name": "../../ESCGRID"}, r"name: '\.\./\.\./ESCGRID' cannot name a folder"),
    ({"name": "/tmp/ESCGRID"}, r"name: '/tmp/ESCGRID' cannot name a folder"),
    ({"cells": {"../../../ESCCELL": {"decoder": {"name": "at"}}}}, r"cells: '\.\./\.\./\.\./ESCCELL' cannot"),
    ({"axes": {"task.vocab": {"../x": 5}}}, r"axes.task.vocab: '\.\./x' cannot name a folder"),
    ({"base": {**TINY["base"], "output_dir": "/tmp/elsewhere"}}, r"base.output_dir: a grid writes every cell under"),
    ({"cells": {"at": {"decoder": {"name": "at"}, "output_dir": "../out"}}}, r"cells.at.output_dir: a grid writes"),
])
def test_a_grid_cannot_write_outside_its_results_folder(tmp_path, change, key):
    """Trials: a grid named "../../ESCGRID" or an absolute path, a cell "../../../ESCCELL", or an output_dir
    in the grid file wrote results outside --results and exited 0. Now one error names the key."""
    path = write_grid(tmp_path, {**TINY, **change})
    with pytest.raises(ConfigError, match=key):
        load_grid(path)
    assert main(["run", str(path), "--results", str(tmp_path / "results")]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.yaml"]  # nothing written anywhere


def test_a_second_train_into_a_folder_in_use_is_refused(tmp_path, capsys):
    """Trials: two `atnat train` into one --output-dir 0.5 s apart both ran, mixing their metrics."""
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"name": "r", **TINY["base"], "decoder": {"name": "at"}}))
    out = tmp_path / "out"
    with held(cell_lock(out), "the first train"):
        assert main(["train", str(config), "--output-dir", str(out)]) == 2
    assert "is in use by" in capsys.readouterr().err
    assert not (out / "config.json").exists()
    config.write_text(yaml.safe_dump({"name": "../up", **TINY["base"], "decoder": {"name": "at"}}))
    assert main(["train", str(config)]) == 2  # a run name is a folder under runs/
    assert "cannot name a folder" in capsys.readouterr().err
