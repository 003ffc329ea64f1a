"""Progress of running cells: progress.json, a line per validation, the lines `atnat run` shows."""
import json

import pytest

from atnat.experiments.progress import describe, eta_seconds, read_progress

from tests.test_resume import run_training


def test_a_run_reports_its_step_loss_validation_and_eta(tmp_path, monkeypatch, capsys):
    run = run_training(tmp_path, "run", monkeypatch)
    state = read_progress(run)
    assert state["phase"] == "evaluating" and state["step"] == 28  # training ended; evaluation comes next
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("run: training step ")]
    assert [line.split("step ")[1].split("/")[0] for line in lines] == ["7", "14", "21", "28"]  # each validation
    assert "val loss" in lines[0] and "val BLEU" in lines[0] and "ETA" in lines[0]


def test_eta_uses_this_attempts_pace_and_the_time_budget():
    assert eta_seconds(50, 150, elapsed=100.0, max_time=None) == pytest.approx(200.0)
    assert eta_seconds(150, 200, elapsed=100.0, max_time=None, start_step=100) == pytest.approx(100.0)  # resumed
    assert eta_seconds(50, 150, elapsed=100.0, max_time=160.0) == pytest.approx(60.0)  # the budget ends first
    assert describe({"phase": "training", "step": 5, "max_steps": 10, "loss": 4.123, "val_bleu": 12.34,
                     "eta_s": 600}) == "training step 5/10, loss 4.12, val BLEU 12.3, ETA 10 min"
    assert describe(None) == "starting" and describe({"phase": "evaluating"}) == "evaluating"


def test_the_pool_polls_the_running_cells(tmp_path, monkeypatch):
    from atnat.experiments.cli import main
    from atnat.experiments.launchers import local

    seen = []
    original = local.run_parallel

    def spy(*args, **kwargs):
        poll = kwargs["on_poll"]
        kwargs["on_poll"] = lambda running: (seen.append([c.name for c in running]), poll(running))
        return original(*args, **kwargs)

    monkeypatch.setattr(local, "run_parallel", spy)
    from tests.test_grid import TINY, write_grid

    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path, {**TINY, "cells": {"at": TINY["cells"]["at"]}})
    assert main(["run", str(grid), "--results", "res", "--workers", "2"]) == 0
    assert ["at-s1"] in seen
    state = json.loads((tmp_path / "res" / "tiny" / "runs" / "at-s1" / "progress.json").read_text())
    assert state["step"] == 8
