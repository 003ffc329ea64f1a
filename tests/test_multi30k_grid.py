"""The Multi30k grid: valid as written, and runnable end to end on CPU at smoke size."""
from pathlib import Path

import pandas as pd
import pytest

from atnat.experiments.cli.commands import main
from atnat.experiments.running.grid import load_grid, run_order

ROOT = Path(__file__).resolve().parent.parent
GRID = ROOT / "experiments" / "grids" / "multi30k.yaml"
DATA = ROOT.parent / "shared" / "data" / "multi30k"


def test_multi30k_grid_is_valid_and_orders_the_teacher_first():
    grid = load_grid(GRID)
    names = [c.name for c in run_order(grid)]
    assert names[0] == "at-s1" and {"nat-kd-s1", "cmlm-kd-s1", "cmlm-s1", "ctc-glat-kd-s1", "at-ga-s1",
                                     "at-ss-s1"} <= set(names)
    by = grid.by_name()
    assert by["cmlm-kd-s1"].teacher == "at-s1" and by["cmlm-s1"].teacher is None
    assert by["at-s1"].config.train.precision == "bf16-mixed"
    smoke = load_grid(GRID, smoke=True).by_name()["at-s1"].config
    assert smoke.train.precision == "32-true" and smoke.task["max_train"] == 1500


@pytest.mark.slow
@pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data/multi30k is not beside this checkout")
def test_multi30k_smoke_grid_runs_on_cpu(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the grid's data_dir is relative to the repo root
    assert main(["run", str(GRID), "--smoke", "--results", str(tmp_path)]) == 0
    df = pd.read_csv(tmp_path / "multi30k-smoke" / "results.csv")
    assert (df.status == "ok").all() and len(df) == 15
    assert (tmp_path / "multi30k-smoke" / "report.md").exists()
