"""Where the timing phase decodes and what its saved numbers are tied to: the first GPU of --devices,
the device's model (another GPU model times anew), CTranslate2 checked on that device before anything
trains, and no GPU memory claimed for the CTranslate2 twin that torch cannot see."""
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from atnat.experiments.cli.commands import main
from atnat.experiments.config.speed import SpeedSettings
from tests.test_grid import TINY, write_grid


def fake_cells(tmp_path, monkeypatch):
    from atnat.experiments.evaluation import timing
    from atnat.experiments.modelfiles import loading
    from atnat.experiments.modelfiles.loading import checkpoint_stamp

    # NAT cells: no CTranslate2 twin and no A/A control, so the fake grid_systems below is the whole set
    cells = [SimpleNamespace(name=n, variant=n, labels={"task": "t"}, config=SimpleNamespace(
        output_dir=str(tmp_path / n), task_name="t", eval=SimpleNamespace(strategies=["greedy"]),
        decoder={"name": "nat"}, decoder_name="nat", loss={}, distill=None)) for n in ("a", "b")]
    for c in cells:
        (tmp_path / c.name).mkdir()
        (tmp_path / c.name / "best.ckpt").write_text("w")
    monkeypatch.setattr(loading, "evaluation_checkpoint", lambda run: run / "best.ckpt")
    monkeypatch.setattr(timing, "evaluation_checkpoint", lambda run: run / "best.ckpt")
    timed = []
    monkeypatch.setattr(timing, "grid_systems", lambda alive, device, speed, baseline=None: (
        [SimpleNamespace(cell=c.name, strategy="greedy", fingerprint=checkpoint_stamp(Path(c.config.output_dir)))
         for c in alive], {}, {}))
    monkeypatch.setattr(timing, "time_systems", lambda systems, speed, baselines, references=None: timed.append(1) or
                        pd.DataFrame([{"cell": s.cell, "strategy": s.strategy, "fingerprint": s.fingerprint}
                                      for s in systems]).reindex(columns=timing.COLUMNS))
    return cells, timed


def test_saved_timings_hold_only_on_the_same_device_model(tmp_path, monkeypatch):
    from atnat.experiments.evaluation import timing

    cells, timed = fake_cells(tmp_path, monkeypatch)
    model = {"name": "NVIDIA A100-SXM4-80GB"}
    monkeypatch.setattr(timing, "device_name", lambda device: model["name"], raising=False)
    timing.time_grid(cells, tmp_path, SpeedSettings(repeats=1), "cuda")
    timing.time_grid(cells, tmp_path, SpeedSettings(repeats=1), "cuda")
    assert len(timed) == 1  # the same GPU model: kept
    model["name"] = "NVIDIA H100 80GB HBM3"  # "cuda" both times, another card: its own numbers
    timing.time_grid(cells, tmp_path, SpeedSettings(repeats=1), "cuda")
    assert len(timed) == 2
    assert pd.read_json(tmp_path / "timing.json", typ="series")["device_name"] == "NVIDIA H100 80GB HBM3"


def test_the_login_node_sees_whether_the_timing_holds_without_the_device(tmp_path, monkeypatch):
    from atnat.experiments.evaluation import timing
    from atnat.experiments.running import timing_phase

    cells, timed = fake_cells(tmp_path, monkeypatch)
    monkeypatch.setattr(timing, "device_name", lambda device: "NVIDIA H100 PCIe")  # known only on the GPU node
    grid = SimpleNamespace(cells=cells, speed={"repeats": 1}, baseline=None, timed_cells=lambda: cells)  # none `untimed:`
    monkeypatch.setattr(timing_phase, "cell_status", lambda run_dir: "ok")
    monkeypatch.setattr(timing_phase, "evaluation_checkpoint", lambda run: run / "best.ckpt")
    assert not timing_phase.timing_is_current(grid, tmp_path)  # never timed
    timing_phase.timing_phase(grid, tmp_path, "cuda:1")
    assert timing_phase.timing_is_current(grid, tmp_path)
    (tmp_path / "b" / "best.ckpt").write_text("retrained")
    assert not timing_phase.timing_is_current(grid, tmp_path)  # other weights: the timing job must run again
    assert not timing_phase.timing_is_current(SimpleNamespace(cells=cells, speed={"repeats": 2}, baseline=None,
                                                              timed_cells=lambda: cells), tmp_path)


def test_devices_reach_the_timing_phase(tmp_path, monkeypatch):
    from atnat.experiments.config import devices
    from atnat.experiments.running import scheduler, timing_phase

    grid = write_grid(tmp_path, {**TINY, "cells": {"at": TINY["cells"]["at"]}})
    seen = []
    monkeypatch.setattr(timing_phase, "inference_device", lambda accelerator: "cuda")  # as on a GPU machine
    monkeypatch.setattr(devices, "gpu_ids", lambda text, flag="--devices": text.split(","))  # GPU 3 is there
    monkeypatch.setattr(scheduler, "timing_phase", lambda grid, out, device=None: seen.append(device))
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(grid), "--results", "res", "--devices", "3"]) == 0  # one lane: cells run in this process
    assert seen == ["cuda:3"]  # not cuda:0, which another job may hold
    monkeypatch.setattr(timing_phase, "inference_device", lambda accelerator: "cpu")
    assert timing_phase.timing_device(SimpleNamespace(cells=[]), ["3"]) == "cpu"


def test_ctranslate2_is_checked_on_the_timing_device_before_anything_trains(tmp_path, monkeypatch, capsys):
    from atnat.experiments.modelfiles import ct2

    grid = write_grid(tmp_path, {**TINY, "speed": {**TINY["speed"], "ct2_baseline": True}})
    problem = "CTranslate2 9.9 sees 0 CUDA device(s), so it cannot decode on {}"
    monkeypatch.setattr(ct2, "device_problem", lambda device: problem.format(device), raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(grid), "--results", "res"]) == 2
    err = capsys.readouterr().err
    assert f"{grid}: speed.ct2_baseline: CTranslate2 9.9 sees 0 CUDA device(s), so it cannot decode on cpu" in err
    assert not (tmp_path / "res" / "tiny" / "runs").exists()


def test_ctranslate2_device_problems_and_indices(monkeypatch):
    ctranslate2 = pytest.importorskip("ctranslate2")
    from atnat.experiments.modelfiles import ct2

    assert ct2.split_device("cuda:2") == ("cuda", 2) and ct2.split_device("cpu") == ("cpu", 0)
    monkeypatch.setattr(ctranslate2, "get_cuda_device_count", lambda: 1)
    monkeypatch.setattr(ct2, "trial_decode", lambda kind, index: None)  # as where a decode works there
    assert ct2.device_problem("cpu") is None and ct2.device_problem("cuda") is None
    assert "sees 1 CUDA device(s), so it cannot decode on cuda:1" in ct2.device_problem("cuda:1")
    monkeypatch.setattr(ctranslate2, "get_cuda_device_count", lambda: 0)
    assert "a CPU-only build" in ct2.device_problem("cuda")


def test_a_gpu_that_ctranslate2_counts_but_cannot_decode_on_is_refused_before_training(monkeypatch):
    """Seen on an H100 with CUDA 13 alone: CTranslate2 4.8's wheel counted the GPU (its CUDA runtime is
    static) and failed only at its first decode, which it does in the timing phase after all training."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    from atnat.experiments.modelfiles import ct2

    assert ct2.trial_decode("cpu", 0) is None  # the trial itself decodes where CTranslate2 works
    real = ctranslate2.Translator

    class NoCublas:
        def __init__(self, path, device="cpu", **kw):
            self.inner, self.device = real(path, device="cpu", **kw), device

        def translate_batch(self, *args, **kw):
            if self.device == "cuda":
                raise RuntimeError("Library libcublas.so.12 is not found or cannot be loaded")
            return self.inner.translate_batch(*args, **kw)

    monkeypatch.setattr(ctranslate2, "Translator", NoCublas)
    monkeypatch.setattr(ctranslate2, "get_cuda_device_count", lambda: 1)
    ct2.trial_decode.cache_clear()
    try:
        problem = ct2.device_problem("cuda")
    finally:
        ct2.trial_decode.cache_clear()
    assert problem == (f"CTranslate2 {ctranslate2.__version__} sees the GPU but cannot decode on cuda: "
                       "RuntimeError: Library libcublas.so.12 is not found or cannot be loaded")


def test_the_ctranslate2_twins_gpu_memory_is_not_claimed():
    from atnat.experiments.evaluation.timing import ExportedSystem, System, memory_measured

    ours = System("at", "greedy", None, None, [])
    twin = ExportedSystem("at", "greedy-ct2", None, None, [])
    assert memory_measured(ours, torch.device("cuda")) and memory_measured(twin, torch.device("cpu"))
    assert not memory_measured(twin, torch.device("cuda"))  # outside torch's allocator: NaN, not ~0 MB
