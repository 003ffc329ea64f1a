"""A diverging run fails its cell with the step and the loss instead of being recorded "ok"
(issue 16.8): lr 1000 on a tiny copy task, and a loss forced to NaN."""
import json
import math

import pandas as pd
import pytest

from atnat.experiments.cli import main
from atnat.experiments.config import run_config_from_dict
from atnat.experiments.divergence import REFERENCE_STEPS, DivergenceError, DivergenceGuard
from atnat.experiments.train import train
from atnat.models.seq2seq import Seq2SeqModule

from tests.test_grid import TINY, write_grid


def test_lr_1000_fails_the_cell_with_step_and_loss_and_the_grid_goes_on(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = {**TINY["base"], "train": {**TINY["base"]["train"], "max_steps": 40, "val_every_steps": 20}}
    grid = write_grid(tmp_path, {**TINY, "base": base, "cells": {
        "at": {"decoder": {"name": "at"}, "optim": {"lr": 1000}},
        "at-ok": {"decoder": {"name": "at"}, "optim": {"lr": 0.003}}}})
    assert main(["run", str(grid), "--results", "res"]) == 1  # a failed cell: exit 1, after the table and report
    out = tmp_path / "res" / "tiny"
    meta = json.loads((out / "runs" / "at-s1" / "metrics.json").read_text())
    assert meta["status"] == "failed"
    assert meta["error"].startswith("training diverged at step ") and "times the loss of the first steps" in meta["error"]
    step = int(meta["error"].split("step ")[1].split(":")[0])
    assert REFERENCE_STEPS < step <= 40
    table = pd.read_csv(out / "results.csv")
    assert table.set_index("cell").loc["at-s1", "status"] == "failed"
    assert table.set_index("cell").loc["at-ok-s1", "status"] == "ok"  # a healthy lr is not stopped


def test_a_nan_loss_stops_training_at_its_step(tmp_path, monkeypatch):
    raw = {**TINY["base"], "name": "nan", "decoder": {"name": "at"}}
    raw["train"] = {**raw["train"], "max_steps": 30, "val_every_steps": 100}
    original = Seq2SeqModule.training_step

    def poisoned(self, batch, batch_idx):
        loss = original(self, batch, batch_idx)
        return loss * float("nan") if self.global_step == 6 else loss  # the 7th optimizer step

    monkeypatch.setattr(Seq2SeqModule, "training_step", poisoned)
    with pytest.raises(DivergenceError, match=r"^training diverged at step 7: the loss is nan"):
        train(run_config_from_dict(raw, "test"), tmp_path / "run")


def test_reference_is_the_first_steps_and_the_factor_is_configurable():
    guard = DivergenceGuard(10.0)
    assert guard.problem([1, 2, 3, 4], [2.0, 5.0, 3.0, 49.0]) is None  # reference 5: 49 < 50
    assert "step 5: loss 51 is over 10 times the loss of the first steps (5)" in guard.problem([5], [51.0])
    lenient = DivergenceGuard(None)
    assert lenient.problem([1, 2, 3, 4], [2.0, 2.0, 2.0, 1e12]) is None
    assert "the loss is inf" in lenient.problem([5], [math.inf])
    resumed = DivergenceGuard(10.0)
    resumed.load_state_dict(guard.state_dict())  # kept in checkpoints: a resumed run keeps its reference
    assert resumed.problem([400], [0.1]) is None and "step 401" in resumed.problem([401], [60.0])
    assert run_config_from_dict({"name": "x", "task": "copy", "decoder": "at", "train": {"divergence_factor": None}},
                                "t").train.divergence_factor is None
