"""Exact resume, atomic checkpoints, damaged checkpoints set aside, appended training logs."""
import csv
import json
import math
import signal
import time
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Checkpoint

from atnat.core.errors import AtnatError
from atnat.experiments.config.run import run_config_from_dict
from atnat.experiments.modelfiles.checkpoints import verify_checksum
from atnat.experiments.training import resume as resume_module
from atnat.experiments.training import train as train_module
from atnat.experiments.training.resume import resume_point
from atnat.experiments.training.train import train

RUN = {
    "name": "resume",
    "task": {"name": "fertility", "vocab": 8, "min_len": 2, "max_len": 5, "n_train": 160, "n_valid": 8, "n_test": 8},
    "decoder": {"name": "at", "input_noise": 0.1},  # input noise: the torch RNG matters
    "model": {"d_model": 16, "n_heads": 2, "ffn_dim": 32, "encoder_layers": 1, "decoder_layers": 1, "dropout": 0.1},
    "train": {"max_steps": 28, "max_tokens": 96, "val_every_steps": 7, "progress_bar": False, "num_threads": 1},
    "eval": {"n_bootstrap": 10},
}


class Kill(pl.Callback):
    """Stops training with an error a few steps after the first last.ckpt (as a kill would)."""

    def __init__(self, at_step: int):
        self.at_step = at_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step >= self.at_step:
            raise SystemError("killed")


class Term(pl.Callback):
    """Sends this process SIGTERM once (a scheduler preempting the run): at the end of step `at_step`, or of
    the first epoch's last batch (`at_step` None), or inside the validation after `at_step`."""

    def __init__(self, at_step: int | None, in_validation: bool = False):
        self.at_step, self.in_validation, self.sent = at_step, in_validation, False

    def send(self, trainer) -> None:
        """What Lightning's SIGTERM handler does, done here: a real signal's Python handler runs in the main
        thread whenever that thread next runs Python (under pytest-xdist the test may not be that thread), so
        the step it lands on would vary; the signal's own path is tests/test_workers.py's."""
        self.sent = True
        trainer._signal_connector.received_sigterm = True

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        last = trainer.fit_loop.epoch_loop.batch_progress.is_last_batch
        if not (self.sent or self.in_validation) and (trainer.global_step == self.at_step
                                                       or (self.at_step is None and last)):
            self.send(trainer)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        if self.in_validation and trainer.global_step == self.at_step and not self.sent:
            self.send(trainer)


def validated_steps(run: Path) -> list[str]:
    with open(run / "logs" / "metrics.csv", newline="") as f:
        return [r["step"] for r in csv.DictReader(f) if r.get("val/loss")]


def weights(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)["state_dict"]


def with_callbacks(monkeypatch, *first, last=()):
    """make_trainer gives each trainer `first` before its own callbacks and `last` after them (after SaveLast:
    checkpoint callbacks keep their order) -> the make_trainer it replaced, to put back."""
    make = train_module.make_trainer

    def made(*args, **kwargs):
        trainer = make(*args, **kwargs)
        trainer.callbacks[:0] = first
        trainer.callbacks.extend(last)
        return trainer

    monkeypatch.setattr(train_module, "make_trainer", made)
    return make


def run_training(tmp_path: Path, name: str, monkeypatch, kill_at: int | None = None, optim: dict | None = None,
                 **train_opts) -> Path:
    cfg = run_config_from_dict({**RUN, "train": {**RUN["train"], **train_opts}, **({"optim": optim} if optim else {})},
                               "test")
    run_dir = tmp_path / name
    if kill_at is not None:
        make = with_callbacks(monkeypatch, Kill(kill_at))
        with pytest.raises(SystemError, match="killed"):
            train(cfg, run_dir)
        monkeypatch.setattr(train_module, "make_trainer", make)
    train(cfg, run_dir)
    return run_dir


def test_a_resumed_run_trains_exactly_like_an_uninterrupted_one(tmp_path, monkeypatch):
    # 160 pairs in batches of <= 96 padded tokens: about 12 batches an epoch, so the kill at step 17
    # falls mid-epoch in the second epoch, after the checkpoint of step 14
    whole = run_training(tmp_path, "whole", monkeypatch)
    resumed = run_training(tmp_path, "resumed", monkeypatch, kill_at=17)
    a, b = weights(whole / "checkpoints" / "last.ckpt"), weights(resumed / "checkpoints" / "last.ckpt")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ from the uninterrupted run"
    assert torch.load(resumed / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 28


def stop_with_sigterm(tmp_path, monkeypatch, name: str, term: Term, run: dict = RUN) -> Path:
    """Train until `term` sends SIGTERM (the run stops as interrupted)."""
    cfg = run_config_from_dict(run, "test")
    make = with_callbacks(monkeypatch, term)
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / name)
    monkeypatch.setattr(train_module, "make_trainer", make)
    return tmp_path / name


@pytest.mark.parametrize("at_step,saved,val_every,steps,n_valid", [
    (17, 17, 7, 28, None), (7, 7, 7, 28, None), (None, 14, 5, 30, None), (14, 7, 7, 28, 48)],
    ids=["mid-epoch", "at-a-validation", "end-of-epoch", "at-a-long-validation"])
def test_a_run_stopped_by_sigterm_saves_the_step_it_reached_and_resumes_exactly(tmp_path, monkeypatch, capfd,
                                                                                at_step, saved, val_every, steps,
                                                                                n_valid):
    """Preemption (SIGTERM) after a step between validations (17: the validation checkpoint is at 14), at a
    validation step (one validation batch: it ends before Lightning looks, and writes the checkpoint), after
    the last batch of the first epoch (14 batches), and at a validation step whose validation takes several
    batches (Lightning stops inside it: nothing is saved at that step, whose checkpoint Lightning would resume
    as validated; the checkpoint of step 7 stands): the resumed run ends with the uninterrupted run's weights
    and validates at the same steps."""
    run_dict = {**RUN, "train": {**RUN["train"], "val_every_steps": val_every, "max_steps": steps}}
    if n_valid:  # validation in several batches (of train.max_tokens): more validation sentences
        run_dict["task"] = {**RUN["task"], "n_valid": n_valid}
    run = stop_with_sigterm(tmp_path, monkeypatch, "stopped", Term(at_step), run_dict)
    last = run / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=False)["global_step"] == saved and verify_checksum(last)
    err = capfd.readouterr().err
    assert f"stopping (SIGTERM) after step {at_step or saved}; " + (
        "its validation is due" if at_step in (7, 14) else f"saved {last}") in err
    train(run_config_from_dict(run_dict, "test"), run)
    whole = run_training(tmp_path, "whole", monkeypatch, val_every_steps=val_every, max_steps=steps)
    a, b = weights(whole / "checkpoints" / "last.ckpt"), weights(last)
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ from the uninterrupted run"
    assert torch.load(last, weights_only=False)["global_step"] == steps  # the last step is a validation step
    assert validated_steps(run) == validated_steps(whole)


class Clock:
    """A wall clock that reads `per_step` seconds for every training step done (set at each step's end,
    before SaveLast looks at it)."""

    def __init__(self, per_step: float):
        self.per_step, self.now = per_step, 0.0

    def __call__(self) -> float:
        return self.now


class Tick(pl.Callback):
    def __init__(self, clock: Clock):
        self.clock = clock

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.clock.now = trainer.global_step * self.clock.per_step


def test_a_run_killed_without_warning_resumes_from_its_timed_save_and_trains_exactly(tmp_path, monkeypatch):
    """save_every_s: 300 with a step of 60 s and validations every 7 steps: last.ckpt at step 5 (300 s after
    the start), at the validation of step 7, then at step 12 (300 s after it); a kill at step 13 (a lost
    machine) resumes from step 12, not from the validation's step 7, and ends where the uninterrupted run does."""
    clock = Clock(per_step=60.0)
    monkeypatch.setattr(resume_module, "monotonic", clock)
    run_dict = {**RUN, "train": {**RUN["train"], "save_every_s": 300}}
    make = with_callbacks(monkeypatch, Kill(13), Tick(clock))
    with pytest.raises(SystemError, match="killed"):
        train(run_config_from_dict(run_dict, "test"), tmp_path / "killed")
    last = tmp_path / "killed" / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=False)["global_step"] == 12 and verify_checksum(last)
    monkeypatch.setattr(train_module, "make_trainer", make)
    with_callbacks(monkeypatch, Tick(clock))
    train(run_config_from_dict(run_dict, "test"), tmp_path / "killed")
    whole = run_training(tmp_path, "whole", monkeypatch, save_every_s=None)
    a, b = weights(whole / "checkpoints" / "last.ckpt"), weights(last)
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ from the uninterrupted run"
    assert torch.load(last, weights_only=False)["global_step"] == 28
    assert validated_steps(tmp_path / "killed") == validated_steps(whole)


class KillInValidation(pl.Callback):
    def __init__(self, at_step: int):
        self.at_step = at_step

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        if trainer.global_step == self.at_step:
            raise SystemError("killed")


def test_a_timed_save_never_lands_on_a_step_whose_validation_is_due(tmp_path, monkeypatch):
    """Due at step 14 (420 s after step 7's validation) when step 14 validates: a save there, then a kill inside
    that validation, would resume with the validation of step 14 counted as done and never run; nothing is
    saved there, the resume starts from step 7 and validates where the uninterrupted run does."""
    clock = Clock(per_step=60.0)
    monkeypatch.setattr(resume_module, "monotonic", clock)
    several = {**RUN, "train": {**RUN["train"], "save_every_s": 420}, "eval": {**RUN["eval"], "max_tokens": 12}}
    make = with_callbacks(monkeypatch, Tick(clock), KillInValidation(14))
    with pytest.raises(SystemError, match="killed"):
        train(run_config_from_dict(several, "test"), tmp_path / "killed")
    last = tmp_path / "killed" / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=False)["global_step"] == 7
    monkeypatch.setattr(train_module, "make_trainer", make)
    train(run_config_from_dict(several, "test"), tmp_path / "killed")
    whole = tmp_path / "whole"
    train(run_config_from_dict(several, "test"), whole)
    assert validated_steps(tmp_path / "killed") == validated_steps(whole)
    a, b = weights(whole / "checkpoints" / "last.ckpt"), weights(last)
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_save_every_s_is_checked_and_does_not_make_a_run_stale():
    from atnat.experiments.config.settings import resolved, training_settings

    for bad in (0, -5, True, float("inf"), "soon"):
        with pytest.raises(AtnatError, match="save_every_s"):
            run_config_from_dict({**RUN, "train": {**RUN["train"], "save_every_s": bad}}, "test")
    a = training_settings(resolved(run_config_from_dict(RUN, "test")))
    b = training_settings(resolved(run_config_from_dict({**RUN, "train": {**RUN["train"], "save_every_s": 60}}, "t")))
    assert a == b


class LateTerm(Checkpoint):
    """SIGTERM noted after SaveLast looked at the step's end (a Checkpoint after it): at the end of step `at_step`,
    or at the first epoch's end (`at_step` None)."""

    def __init__(self, at_step: int | None):
        self.at_step, self.sent = at_step, False

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.at_step is not None and trainer.global_step == self.at_step and not self.sent:
            self.sent = True
            trainer._signal_connector.received_sigterm = True

    def on_train_epoch_end(self, trainer, pl_module):
        if self.at_step is None and not self.sent:
            self.sent = True
            trainer._signal_connector.received_sigterm = True


@pytest.mark.parametrize("at_step,saved", [(17, 17), (None, 10)], ids=["after-the-look", "at-an-epoch-end"])
def test_a_sigterm_noted_after_the_steps_look_is_saved_as_lightning_stops(tmp_path, monkeypatch, capfd, at_step, saved):
    """The moment between SaveLast's look at a step's end and Lightning's own: Lightning stops with SIGTERMException
    between steps, SaveLast saves the step there. At an epoch's end (14 batches) nothing is saved (a checkpoint
    taken there does not resume exactly): the validation checkpoint of step 10 stands. Either way the resume is
    exact."""
    run_dict = {**RUN, "train": {**RUN["train"], "val_every_steps": 5, "max_steps": 30}}
    cfg = run_config_from_dict(run_dict, "test")
    make = with_callbacks(monkeypatch, last=[LateTerm(at_step)])
    with pytest.raises(KeyboardInterrupt):
        train(cfg, tmp_path / "stopped")
    monkeypatch.setattr(train_module, "make_trainer", make)
    last = tmp_path / "stopped" / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=False)["global_step"] == saved
    assert (f"stopping (SIGTERM) after step {saved}; saved {last}" in capfd.readouterr().err) == (at_step is not None)
    train(cfg, tmp_path / "stopped")
    whole = run_training(tmp_path, "whole", monkeypatch, val_every_steps=5, max_steps=30)
    a, b = weights(whole / "checkpoints" / "last.ckpt"), weights(last)
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ from the uninterrupted run"
    assert validated_steps(tmp_path / "stopped") == validated_steps(whole)


def test_a_sigterm_save_holds_the_steps_ema_update_and_resumes_exactly(tmp_path, monkeypatch):
    """With train.ema the averaged weights move at every step's end: the save made on SIGTERM comes after that
    update, so the resumed run ends with the uninterrupted run's averaged weights."""
    run_dict = {**RUN, "train": {**RUN["train"], "ema": 0.9}}
    run = stop_with_sigterm(tmp_path, monkeypatch, "stopped", Term(17), run_dict)
    train(run_config_from_dict(run_dict, "test"), run)
    whole = run_training(tmp_path, "whole", monkeypatch, ema=0.9)
    a, b = weights(whole / "checkpoints" / "last.ckpt"), weights(run / "checkpoints" / "last.ckpt")
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed EMA weights differ from the uninterrupted run"


def test_a_run_stopped_by_sigterm_inside_a_validation_keeps_its_last_checkpoint(tmp_path, monkeypatch):
    several = {**RUN, "task": {**RUN["task"], "n_valid": 48}}  # validation in several batches
    run = stop_with_sigterm(tmp_path, monkeypatch, "stopped", Term(14, in_validation=True), several)
    last = run / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=False)["global_step"] == 7  # the validation of step 14 never ended
    train(run_config_from_dict(several, "test"), run)
    assert torch.load(last, weights_only=False)["global_step"] == 28


def test_the_training_log_is_appended_across_a_resume(tmp_path, monkeypatch):
    run = run_training(tmp_path, "resumed", monkeypatch, kill_at=17)
    with open(run / "logs" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    first = [r for r in rows if r["attempt"] == "1"]
    second = [r for r in rows if r["attempt"] == "2"]
    assert first and second, "the first attempt's rows were lost on resume"
    val_steps = sorted({int(r["step"]) for r in first if r.get("val/loss")})
    assert val_steps and val_steps[0] < 14  # early validations of the first attempt survive
    assert max(int(r["step"]) for r in second) >= 25


def test_a_damaged_last_checkpoint_is_set_aside_and_the_previous_one_resumes(tmp_path, monkeypatch, capsys):
    run = run_training(tmp_path, "run", monkeypatch, kill_at=17)  # trained to the end: last.ckpt at step 28
    ckpts = run / "checkpoints"
    last = ckpts / "last.ckpt"
    last.write_bytes(last.read_bytes()[:1000])  # truncated, as after a full disk
    chosen = resume_point(ckpts)
    err = capsys.readouterr().err
    assert chosen == ckpts / "best.ckpt"
    assert f"checkpoint {last} does not match the sha256 recorded in last.ckpt.sha256" in err and "resuming from" in err
    assert not last.exists() and list(ckpts.glob("last.ckpt.damaged-*"))
    (ckpts / "best.ckpt").write_bytes(b"not a zip")
    assert resume_point(ckpts) is None  # nothing loadable: a fresh start, with a message
    assert "training starts afresh" in capsys.readouterr().err


def test_checkpoints_are_written_through_a_temporary_file(tmp_path, monkeypatch):
    from atnat.experiments.training.resume import AtomicCheckpointIO

    target = tmp_path / "x.ckpt"
    AtomicCheckpointIO().save_checkpoint({"a": torch.ones(2)}, target)
    original = target.read_bytes()

    def fail(obj, f, *a, **k):
        f.write(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", fail)
    with pytest.raises(AtnatError, match=f"cannot write {target}: the disk is full"):
        AtomicCheckpointIO().save_checkpoint({"a": torch.zeros(2)}, target)
    assert target.read_bytes() == original  # the old file is whole, and still matches its checksum
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.ckpt", "x.ckpt.sha256"]  # no temporary left behind
    assert verify_checksum(target)


@pytest.mark.slow
def test_a_cell_killed_mid_training_resumes_to_the_same_metrics(tmp_path):
    """The scenario through the CLI: kill -9 after the first last.ckpt, run again."""
    import json
    import signal
    import time

    import pandas as pd

    from tests.test_grid import TINY, run_cli, write_grid

    data = {**TINY, "cells": {"at": TINY["cells"]["at"]},
            "base": {**TINY["base"], "train": {**TINY["base"]["train"], "max_steps": 400, "val_every_steps": 25},
                     "model": {**TINY["base"]["model"], "dropout": 0.1}}}
    grid = write_grid(tmp_path, data)
    proc = run_cli(["run", str(grid), "--results", "res"], tmp_path)
    run = tmp_path / "res" / "tiny" / "runs" / "at-s1"
    deadline = time.time() + 240
    while not (run / "checkpoints" / "last.ckpt").exists() and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (run / "metrics.json").exists(), "the kill came too late to test a mid-training resume"
    resumed = run_cli(["run", str(grid), "--results", "res"], tmp_path)
    assert resumed.communicate(timeout=600)[0] is not None and resumed.returncode == 0
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    whole = run_cli(["run", str(grid), "--results", "res"], fresh)
    assert whole.communicate(timeout=600)[0] is not None and whole.returncode == 0
    cols = ["cell", "strategy", "bleu", "chrf", "exact_match", "repetition_rate", "length_exact"]
    a = pd.read_csv(tmp_path / "res" / "tiny" / "results.csv")[cols]
    b = pd.read_csv(fresh / "res" / "tiny" / "results.csv")[cols]
    pd.testing.assert_frame_equal(a, b)
    assert json.loads((run / "train.json").read_text())["global_step"] == 400


class Slow(pl.Callback):
    """Sleeps after each of the first `steps` training steps: time the first attempt spends before its checkpoint."""

    def __init__(self, steps: int, seconds: float):
        self.steps, self.seconds = steps, seconds

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step <= self.steps:
            time.sleep(self.seconds)


def test_train_time_counts_every_attempt_of_a_resumed_run(tmp_path, monkeypatch):
    """train.json's train_time_s is the whole training time (kept in the checkpoint by Lightning's
    Timer), not only the last attempt's: the compute a grid took is summed from it."""
    from atnat.experiments import provenance

    cfg = run_config_from_dict(RUN, "test")
    make = with_callbacks(monkeypatch, Slow(14, 0.3), Kill(17))  # 4.2 s before the checkpoint of step 14
    monkeypatch.setattr(provenance, "code_version", lambda: {"git_commit": "aaaaaaa", "git_dirty": False})
    with pytest.raises(SystemError, match="killed"):
        train(cfg, tmp_path / "run")
    monkeypatch.setattr(train_module, "make_trainer", make)
    monkeypatch.setattr(provenance, "code_version", lambda: {"git_commit": "bbbbbbb", "git_dirty": True})
    train(cfg, tmp_path / "run")
    info = json.loads((tmp_path / "run" / "train.json").read_text())
    assert info["global_step"] == 28
    assert info["train_time_s"] >= 4.2, info  # the first attempt's time up to its checkpoint is counted
    assert info["train_time_this_attempt_s"] < info["train_time_s"] - 3, info
    # the code of each attempt: a run resumed across a code change names both commits
    assert [(a["git_commit"], a["git_dirty"], a["resumed_from"]) for a in info["attempts"]] == \
        [("aaaaaaa", False, None), ("bbbbbbb", True, "last.ckpt")]


def test_an_older_resumed_runs_partial_train_time_is_not_reported_as_whole(tmp_path):
    """train.json written before the Timer held the last attempt's time only: a results row takes it
    only where the run trained in one attempt (logs/attempts), else leaves it empty."""
    from atnat.experiments.reporting.records import whole_train_time

    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "attempts").write_text("3")
    assert math.isnan(whole_train_time(tmp_path, {"train_time_s": 700.0}, 5.0))
    assert whole_train_time(tmp_path, {"train_time_s": 900.0, "train_time_this_attempt_s": 700.0}, 5.0) == 900.0
    (tmp_path / "logs" / "attempts").write_text("1")
    assert whole_train_time(tmp_path, {"train_time_s": 700.0}, 5.0) == 700.0
    assert whole_train_time(tmp_path, {}, 5.0) == 5.0


def test_a_real_sigterm_to_atnat_train_saves_the_step_it_reached(tmp_path):
    """The signal's own path, in a process of its own: `atnat train` gets SIGTERM between validations, says the
    step it saved, and last.ckpt holds that step."""
    import subprocess
    import sys

    config = tmp_path / "run.yaml"
    config.write_text(json.dumps({**RUN, "train": {**RUN["train"], "max_steps": 100000, "val_every_steps": 50000}}))
    proc = subprocess.Popen([sys.executable, "-m", "atnat.experiments.cli", "train", str(config), "--output-dir",
                             str(tmp_path / "run")], stderr=subprocess.PIPE, text=True)
    progress = tmp_path / "run" / "progress.json"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if json.loads(progress.read_text()).get("step", 0) >= 20:
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=120)[1]
    assert proc.returncode != 0
    said = [line for line in err.splitlines() if "stopping (SIGTERM) after step" in line]
    assert said, err[-2000:]
    step = int(said[0].split("after step ")[1].split(";")[0])
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    assert step >= 20 and torch.load(last, weights_only=False)["global_step"] == step and verify_checksum(last)


def test_the_validation_loss_does_not_depend_on_eval_max_tokens(tmp_path):
    """eval.max_tokens is an evaluation setting (changing it keeps the weights), but validation batched by it, and
    the validation loss (a mean of batch means) picks checkpoints: 6000 and 40 gave 3.474 and 3.508."""
    import pandas as pd

    losses = []
    for budget in (6000, 40):
        cfg = run_config_from_dict({**RUN, "train": {**RUN["train"], "max_steps": 7}, "eval": {**RUN["eval"],
                                                                                              "max_tokens": budget}}, "test")
        train(cfg, tmp_path / str(budget))
        log = pd.read_csv(tmp_path / str(budget) / "logs" / "metrics.csv")
        losses.append(log["val/loss"].dropna().tolist())
    assert losses[0] == losses[1] and len(losses[0]) == 1


def test_only_the_first_process_of_a_multi_device_run_counts_the_attempt(tmp_path, monkeypatch):
    """Every process builds the loggers; the extra ones of a DDP run must not count an attempt of their own."""
    from atnat.experiments.training import logs

    first = logs.AppendingCSVLogger(tmp_path)
    monkeypatch.setattr(logs, "helper_rank", lambda: True)
    logs.AppendingCSVLogger(tmp_path)  # its count is its own: an extra process logs nothing
    assert first.attempt == 1 and (tmp_path / "logs" / "attempts").read_text() == "1"


def test_a_garbled_attempt_count_or_settings_record_is_one_error_naming_the_file(tmp_path):
    from types import SimpleNamespace

    from atnat.experiments.training import logs

    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "attempts").write_text("x")
    with pytest.raises(AtnatError, match=r"logs/attempts holds 'x', not a count"):
        logs.AppendingCSVLogger(tmp_path)
    (tmp_path / "settings_changes.json").write_text("{}")
    with pytest.raises(AtnatError, match=r"settings_changes.json holds a dict, not the run's list"):
        train_module.record_change(tmp_path, SimpleNamespace(training=[("optim.lr", 1, 2)]), 7)
    (tmp_path / "settings_changes.json").write_text("[")
    with pytest.raises(AtnatError, match=r"settings_changes.json cannot be read"):
        train_module.record_change(tmp_path, SimpleNamespace(training=[("optim.lr", 1, 2)]), 7)
    (tmp_path / "settings_changes.json").write_text("[]")
    train_module.record_change(tmp_path, SimpleNamespace(training=[("optim.lr", 1, 2)]), 7)
    assert json.loads((tmp_path / "settings_changes.json").read_text())[0]["changes"] == [
        {"key": "optim.lr", "was": 1, "now": 2}]


@pytest.mark.parametrize("seconds", ["3600", True, None, -1.0, float("inf"), [1]])
def test_a_train_time_read_back_that_is_no_number_of_seconds_is_no_time(tmp_path, seconds):
    from atnat.experiments.reporting.records import whole_train_time

    assert math.isnan(whole_train_time(tmp_path, {"train_time_s": seconds, "train_time_this_attempt_s": 1.0}, 5.0))
