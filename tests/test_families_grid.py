"""The families grid (DA-Transformer, speculative decoding, the deep-shallow AT) and every other grid file
shipped in experiments/grids: valid as written, so that none stops only after hours of training."""
from pathlib import Path

import pandas as pd
import pytest

from atnat.experiments.cli.commands import main
from atnat.experiments.config.run import ConfigError
from atnat.experiments.running.grid import load_grid, run_order

ROOT = Path(__file__).resolve().parent.parent
GRIDS = sorted((ROOT / "experiments" / "grids").glob("*.yaml"))
FAMILIES = ROOT / "experiments" / "grids" / "multi30k-families.yaml"


@pytest.mark.parametrize("path", GRIDS, ids=[p.stem for p in GRIDS])
def test_every_shipped_grid_loads_as_written_and_at_smoke_size(path, monkeypatch):
    monkeypatch.chdir(ROOT)  # data_dir entries are relative to the repo root
    for smoke in (False, True):
        try:
            grid = load_grid(path, smoke=smoke)
        except ConfigError as error:  # a data set fetched on request (WMT14: 4.5 M pairs) is not here
            if "does not exist; fetch the data set there first" in str(error):
                pytest.skip(str(error))
            raise
        assert grid.cells and [c.name for c in run_order(grid)]


def test_the_families_grid_pairs_each_student_with_its_seeds_teacher_and_times_against_both_ats():
    grid = load_grid(FAMILIES)
    by = grid.by_name()
    assert len(by) == 18 and {c.seed for c in grid.cells} == {1, 2, 3}
    order = [c.name for c in run_order(grid)]
    for cell in grid.cells:
        if cell.variant in ("at", "at-deep"):
            assert cell.teacher is None and cell.config.decoder == {"name": "at"}
        else:
            assert cell.teacher == f"en-de-at-s{cell.seed}" and order.index(cell.teacher) < order.index(cell.name)
            assert cell.config.train.init_from == "teacher"
    deep = by["en-de-at-deep-s1"].config.model
    assert (deep["encoder_layers"], deep["decoder_layers"]) == (5, 1)  # the 3+3 AT's depth, moved to the encoder
    smoke = load_grid(FAMILIES, smoke=True).by_name()  # the smoke run's deep-shallow AT was a copy of the 3+3 one
    assert [(smoke[c].config.model["encoder_layers"], smoke[c].config.model["decoder_layers"])
            for c in ("en-de-at-s1", "en-de-at-deep-s1")] == [(3, 3), (5, 1)]
    assert smoke["en-de-at-s1"].config.model["d_model"] == 64
    assert load_grid(FAMILIES, smoke=True).speed["throughput_batch"] < 60  # throughput timed in several batches
    assert grid.baseline == "at" and grid.speed["reference_at"] == "at-deep"
    assert by["en-de-dat-s1"].config.distill.targets is False  # DA-Transformer on the references
    assert by["en-de-dat-kd-s1"].config.decoder == {"name": "dag", "upsample": 4}
    strategies = by["en-de-cmlm-kd-s1"].config.eval.strategies
    for block in (4, 8):  # the CMLM drafts, its teacher verifies
        assert {"name": "speculative", "block": block} in strategies
    assert {g["system"] for g in grid.goals} >= {"en-de-dat-kd / dag-lookahead", "en-de-cmlm-kd / speculative-k4"}


@pytest.mark.slow
@pytest.mark.skipif(not (ROOT.parent / "shared" / "data" / "multi30k").is_dir(),
                    reason="../shared/data/multi30k is not beside this checkout")
def test_the_families_grids_first_seed_runs_end_to_end_at_smoke_size(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the grid's data_dir is relative to the repo root
    assert main(["run", str(FAMILIES), "--smoke", "--only", "*-s1", "--results", str(tmp_path)]) == 0
    out = tmp_path / "multi30k-families-smoke"
    table = pd.read_csv(out / "results.csv")
    df = table[table.status != "not run"]  # the other seeds' cells are listed as not run
    assert (df.status == "ok").all() and set(df.cell) == {c.name for c in load_grid(FAMILIES).cells if c.seed == 1}
    speculative = df[df.strategy.str.startswith("speculative")]
    assert len(speculative) == 2 and (speculative.verifier_greedy_match == 1.0).all()  # lossless: the AT's greedy
    assert df.latency_ms_b1.notna().all()  # every system timed, the deep-shallow AT's greedy as a second reference
    report = (out / "report.md").read_text()
    assert report.startswith("# Grid report") and report.index("## Verdict") < report.index("## Goals")
    assert "vs en-de-at-deep greedy" in report and report.count("| met |") + report.count("| missed |") == 5
