"""A grid meant for a GPU says `train.accelerator: gpu` and stops with one message where no GPU is
usable, before anything trains (instead of training on the CPU, or failing inside Lightning)."""
import json

import pytest
import torch

from atnat.core.errors import AtnatError
from atnat.experiments.cli.commands import main
from atnat.experiments.config.devices import gpu_problem, require_gpu
from tests.test_grid import TINY, write_grid

GPU_GRID = {**TINY, "base": {**TINY["base"], "train": {**TINY["base"]["train"], "accelerator": "gpu"}}}


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


def test_a_gpu_grid_stops_before_anything_runs_without_a_gpu(tmp_path, monkeypatch, capsys, no_gpu):
    grid = write_grid(tmp_path, GPU_GRID)
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(grid), "--results", "res"]) == 2
    err = capsys.readouterr().err
    assert f"atnat: error: {grid}: cell at-s1: train.accelerator is gpu, but no GPU is usable here" in err
    assert err.count("error") == 1 and not (tmp_path / "res" / "tiny" / "runs").exists()  # nothing ran
    assert main(["run", str(grid), "--results", "res", "--dry-run"]) == 0  # listing the cells needs no GPU
    err = capsys.readouterr().err  # but it says which cells this machine's `atnat run` would refuse
    assert "atnat: cell at-s1: train.accelerator is gpu, but no GPU is usable here" in err and "refuses it here" in err
    assert main(["run", str(grid), "--results", "res", "--dry-run", "--launcher", "slurm"]) == 0
    assert "no GPU is usable here" not in capsys.readouterr().err  # a cluster job's node checks its own


def test_a_gpu_cell_run_alone_fails_with_that_message_before_distilling_or_training(tmp_path, monkeypatch, capsys,
                                                                                   no_gpu):
    grid = write_grid(tmp_path, GPU_GRID)
    monkeypatch.chdir(tmp_path)
    assert main(["cell", str(grid), "cmlm-kd-s1", "--results", "res"]) == 1  # what a cluster job runs
    run = tmp_path / "res" / "tiny" / "runs" / "cmlm-kd-s1"
    record = json.loads((run / "metrics.json").read_text())
    assert record["status"] == "failed"
    assert record["error"].startswith("run cmlm-kd-s1: train.accelerator is gpu, but no GPU is usable here")
    assert not (run / "checkpoints").exists() and not (run / "distill.json").exists()


def test_the_reason_names_what_is_missing(monkeypatch, no_gpu):
    monkeypatch.setattr(torch.version, "cuda", None)
    assert gpu_problem().startswith("this torch (") and "built without CUDA" in gpu_problem()
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpu_problem() == "torch sees no CUDA device (CUDA_VISIBLE_DEVICES='')"
    require_gpu("cpu", "x") and require_gpu("auto", "x")  # only a run that asks for a GPU is checked
    with pytest.raises(AtnatError, match="^grid.yaml: cell c: train.accelerator is gpu, but no GPU"):
        require_gpu("gpu", "grid.yaml: cell c")


def test_decoding_asked_to_run_on_a_gpu_is_refused_where_none_is_usable(no_gpu):
    """translate/evaluate/distill --device gpu decoded (and timed) on the CPU without a word."""
    from atnat.experiments.config.devices import decode_device

    with pytest.raises(AtnatError, match="^--device gpu: no GPU is usable here: .*give --device cpu"):
        decode_device("gpu")
    assert decode_device("auto") == decode_device("cpu") == "cpu"
