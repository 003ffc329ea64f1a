"""The Multi30k grid: valid as written, and runnable end to end on CPU at smoke size."""
from pathlib import Path

import pandas as pd
import pytest

from atnat.experiments.cli.commands import main
from atnat.experiments.running.grid import load_grid, run_order

ROOT = Path(__file__).resolve().parent.parent
GRID = ROOT / "experiments" / "grids" / "multi30k.yaml"
DATA = ROOT.parent / "shared" / "data" / "multi30k"


@pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data/multi30k is not beside this checkout")
def test_multi30k_grid_is_valid_and_orders_the_teacher_first():
    grid = load_grid(GRID)
    names = [c.name for c in run_order(grid)]
    assert names[0] == "at-s1" and {"nat-kd-s1", "cmlm-kd-s1", "cmlm-s1", "ctc-glat-kd-s1", "at-ga-s1",
                                     "at-ss-s1"} <= set(names)
    by = grid.by_name()
    assert by["cmlm-kd-s1"].teacher == "at-s1" and by["cmlm-s1"].teacher == "at-s1"
    assert by["cmlm-s1"].config.distill.targets is False  # the no-distillation control: the teacher's weights only
    assert by["at-s1"].config.train.precision == "bf16-mixed"
    assert {c.config.train.accelerator for c in grid.cells} == {"gpu"}  # a GPU grid says so (and stops without one)
    students = [c for c in grid.cells if c.teacher]
    assert len(students) == 4 and all(c.config.train.init_from == "teacher" for c in students)
    assert all(c.config.train.max_time_s for c in grid.cells)  # a slower GPU trains fewer steps, not for an hour
    smoke = load_grid(GRID, smoke=True).by_name()
    assert {c.config.train.accelerator for c in smoke.values()} == {"cpu"}  # --smoke runs here
    assert smoke["at-s1"].config.train.precision == "32-true" and smoke["at-s1"].config.task["max_train"] == 1500
    assert all(c.config.train.max_time_s is None and c.config.train.max_steps == 40 for c in smoke.values())


@pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data/multi30k is not beside this checkout")
def test_multi30k_budgets_are_the_step_counts_its_first_gpu_run_reached():
    """The grid was sized from a FLOP estimate until its first GPU run (results/multi30k/), where
    every cell stopped at its time cap; its step budgets are now the steps that run reached (rounded
    to 100), and each time cap a guard at about twice that cell's measured training time."""
    header = GRID.read_text().split("\nname:")[0]
    assert "FROM THE FIRST GPU RUN" in header and "ESTIMATE" not in header
    run = pd.read_csv(ROOT / "results" / "multi30k" / "results.csv").drop_duplicates("cell").set_index("cell")
    assert run.train_steps.notna().all() and len(run) == 7
    for cell in load_grid(GRID).cells:
        measured = run.loc[cell.name]
        assert cell.config.train.max_steps == round(measured.train_steps, -2), cell.name
        assert 1.8 <= cell.config.train.max_time_s / measured.train_time_s <= 2.2, cell.name


@pytest.mark.slow
@pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data/multi30k is not beside this checkout")
def test_multi30k_smoke_grid_runs_on_cpu(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the grid's data_dir is relative to the repo root
    assert main(["run", str(GRID), "--smoke", "--results", str(tmp_path)]) == 0
    df = pd.read_csv(tmp_path / "multi30k-smoke" / "results.csv")
    assert (df.status == "ok").all() and len(df) == 17  # 15 systems + the AT cell's 2 CTranslate2 twins
    assert set(df[df.strategy.str.endswith("-ct2")].strategy) == {"greedy-ct2", "beam5-alpha=0.6-ct2"}
    assert (tmp_path / "multi30k-smoke" / "report.md").exists()


@pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data/multi30k is not beside this checkout")
def test_multi30k_cpu_steps_are_the_fp32_budgets_times_the_measured_bf16_speedups():
    """multi30k-cpu.yaml trains in bf16 where the CPU has it, its step budgets (no time caps) the fp32
    ones that filled ~150 minutes times the speed-ups `atnat bench train` measured at the thread count
    each cell uses (the teacher 2 threads, the students 1), rounded."""
    grid = load_grid(ROOT / "experiments" / "grids" / "multi30k-cpu.yaml")
    bench = {t: pd.read_csv(ROOT / "results" / "bench" / f"train_cpu_bf16_t{t}.csv") for t in (1, 2)}

    def speedup(threads, decoder):
        rows = bench[threads]
        return rows[(rows.decoder == decoder) & (rows.precision == "bf16")].speedup_vs_fp32.iloc[0]

    expected = {"at": 1600 * speedup(2, "at"), "cmlm-kd": 800 * speedup(1, "cmlm"), "cmlm": 800 * speedup(1, "cmlm"),
                "nat-kd": 620 * speedup(1, "nat"), "ctc-glat-kd": 340 * speedup(1, "ctc")}
    for cell in grid.cells:
        train = cell.config.train
        assert abs(train.max_steps - expected[cell.variant]) <= 0.02 * expected[cell.variant], cell.variant
        assert train.max_time_s is None and train.precision == "auto"
        assert train.max_steps / train.val_every_steps in (10, pytest.approx(15.9, abs=0.1))
        assert train.num_threads == (2 if cell.variant == "at" else 1)
