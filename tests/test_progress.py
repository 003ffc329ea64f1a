"""Progress of running cells: progress.json, a line per validation, the lines `atnat run` shows."""
import json

import pytest

from atnat.experiments.training.progress import describe, eta_seconds, read_progress
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


@pytest.mark.slow
def test_the_pool_polls_the_running_cells(tmp_path, monkeypatch):
    from atnat.experiments.cli.commands import main
    from atnat.experiments.running import scheduler

    seen = []
    original = scheduler.run_parallel

    def spy(*args, **kwargs):
        poll = kwargs["on_poll"]
        kwargs["on_poll"] = lambda running: (seen.append([c.name for c in running]), poll(running))
        return original(*args, **kwargs)

    monkeypatch.setattr(scheduler, "run_parallel", spy)
    from tests.test_grid import TINY, write_grid

    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path, {**TINY, "cells": {"at": TINY["cells"]["at"]}})
    assert main(["run", str(grid), "--results", "res", "--workers", "2"]) == 0
    assert ["at-s1"] in seen
    state = json.loads((tmp_path / "res" / "tiny" / "runs" / "at-s1" / "progress.json").read_text())
    assert state["step"] == 8


def test_a_long_distillation_shows_how_far_it_is(tmp_path, monkeypatch):
    """The teacher decoding tens of thousands of sentences reports done/total and an ETA as it goes."""
    from atnat.experiments.training import progress

    now = [100.0]
    monkeypatch.setattr(progress.time, "time", lambda: now[0])
    follow = progress.counting_phase(tmp_path, "distilling training sentences", 400, every_s=5.0)
    assert read_progress(tmp_path)["phase"] == "distilling training sentences: 0/400"
    now[0] = 110.0
    follow(100)  # 10 s after the start: written, 300 left at 10 s per 100
    assert read_progress(tmp_path)["phase"] == "distilling training sentences: 100/400, ETA 30 s"
    now[0] = 112.0
    follow(120)  # 2 s later: not written again yet
    assert read_progress(tmp_path)["phase"].startswith("distilling training sentences: 100/400")
    now[0] = 113.0
    follow(400)  # the end is always written
    assert read_progress(tmp_path)["phase"] == "distilling training sentences: 400/400, ETA 0 s"


def test_decoding_a_split_reports_each_batch():
    from atnat.decoding.greedy import Greedy
    from atnat.experiments.data.batching import encode_split
    from atnat.experiments.evaluation.evaluate import decode_split
    from tests.training import fit

    module, task = fit("at", "copy", steps=1)
    split = encode_split(task.tokenizer, *task.splits["test"], name="test")
    seen = []
    out = decode_split(module, split, Greedy(), max_tokens=60, on_batch=seen.append)
    assert len(out.hyps) == len(split) and len(seen) > 1 and seen == sorted(seen) and seen[-1] == len(split)
