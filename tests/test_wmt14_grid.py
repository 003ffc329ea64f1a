"""The WMT14 en-de grid file: valid as written (over stand-in files under its data_dir), sized for a cluster,
and its smoke version trains and reports every cell on the CPU."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from atnat.experiments.running.grid import load_grid

GRID = Path(__file__).resolve().parents[1] / "experiments" / "grids" / "wmt14-en-de.yaml"


def stand_in_data(root: Path, pairs: int = 400) -> None:
    rng = random.Random(0)
    folder = root / "data" / "wmt14-en-de"
    folder.mkdir(parents=True)
    for split, n in (("train", pairs), ("newstest2013", 40), ("newstest2014", 40)):
        src = [" ".join(f"w{rng.randrange(60)}" for _ in range(rng.randint(3, 12))) for _ in range(n)]
        (folder / f"{split}.en").write_text("\n".join(src) + "\n")
        (folder / f"{split}.de").write_text("\n".join(" ".join(reversed(s.split())) for s in src) + "\n")


def test_the_grid_file_is_valid_and_sized_for_a_cluster(tmp_path, monkeypatch):
    stand_in_data(tmp_path)
    monkeypatch.chdir(tmp_path)
    cells = {c.variant: c.config for c in load_grid(GRID).cells}
    assert sorted(cells) == ["at", "at-deep", "cmlm-kd", "ctc-glat-kd", "dat", "dat-kd"]
    at = cells["at"]
    assert (at.model["d_model"], at.model["encoder_layers"], at.model["decoder_layers"]) == (512, 6, 6)
    assert at.train.devices == 4 and at.train.accelerator == "gpu" and at.eval.compound_split
    assert (cells["at-deep"].model["encoder_layers"], cells["at-deep"].model["decoder_layers"]) == (12, 1)
    assert cells["dat-kd"].decoder["upsample"] == 8
    smoke = {c.variant: c.config for c in load_grid(GRID, smoke=True).cells}
    assert smoke["at"].train.accelerator == "cpu" and smoke["at"].train.devices == 1


@pytest.mark.slow
def test_the_smoke_grid_trains_and_reports_every_cell(tmp_path, monkeypatch):
    from tests.test_grid import run_cli

    stand_in_data(tmp_path)
    proc = run_cli(["run", str(GRID), "--smoke", "--results", "res"], tmp_path)
    out = proc.communicate(timeout=900)[0].decode()
    assert proc.returncode == 0, out[-3000:]
    assert (tmp_path / "res" / "wmt14-en-de-smoke" / "report.md").is_file()
