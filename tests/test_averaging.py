"""Checkpoint selection and averaging, EMA weights, training loggers."""
import json

import pytest
import torch

from atnat.experiments.config.run import ConfigError, run_config_from_dict
from atnat.experiments.modelfiles.checkpoints import average_state_dicts
from atnat.experiments.modelfiles.loading import evaluation_checkpoint
from tests.test_resume import RUN, run_training, weights


def test_averaging_identical_checkpoints_gives_the_same_model():
    torch.manual_seed(0)
    state = {"w": torch.randn(7, 5), "b": torch.randn(5) * 1e-3, "steps": torch.tensor(3)}
    out = average_state_dicts([state, state, state])
    assert all(torch.equal(out[k], state[k]) for k in state)  # exact, not approximately


def test_the_average_of_two_known_weight_sets_is_exact():
    a = {"w": torch.tensor([1.0, -2.0, 0.5]), "n": torch.tensor([1])}
    b = {"w": torch.tensor([3.0, 4.0, 0.25]), "n": torch.tensor([2])}
    out = average_state_dicts([a, b])
    assert torch.equal(out["w"], torch.tensor([2.0, 1.0, 0.375]))
    assert torch.equal(out["n"], torch.tensor([2]))  # integer buffers come from the last checkpoint
    with pytest.raises(Exception, match="different parameters"):
        average_state_dicts([a, {"v": a["w"], "n": a["n"]}])


def test_average_last_writes_the_mean_of_the_last_checkpoints_and_evaluation_uses_it(tmp_path, monkeypatch):
    run = run_training(tmp_path, "avg", monkeypatch, keep=3, average="last", optim={"warmup_steps": 5})
    ckpts = run / "checkpoints"
    steps = sorted(ckpts.glob("step-*.ckpt"), key=lambda p: int(p.stem.split("-")[1]))
    assert [p.name for p in steps] == ["step-14.ckpt", "step-21.ckpt", "step-28.ckpt"]  # val every 7, keep 3
    expected = average_state_dicts([weights(p) for p in steps])
    got = weights(ckpts / "averaged.ckpt")
    assert all(torch.equal(expected[k], got[k]) for k in expected)
    assert evaluation_checkpoint(run) == ckpts / "averaged.ckpt"
    assert json.loads((run / "train.json").read_text())["evaluated_checkpoint"] == "averaged.ckpt"
    note = torch.load(ckpts / "averaged.ckpt", weights_only=False)["atnat_selection"]
    assert note["checkpoints"] == [p.name for p in steps]


def test_averaging_never_reaches_back_into_early_training(tmp_path, monkeypatch):
    """The GPU grid's file averaged its validations at steps 500 and 1,000 with an 800-step warm-up: weights
    from inside the warm-up with the final ones, ~1.4 BLEU below the final weights alone. Only checkpoints
    from the last average_window of training (default: half) and past the warm-up are averaged now, and the
    run records which steps."""
    from atnat.experiments.training.train import averaging_start

    assert averaging_start(1000, 0.5, 800) == 800 and averaging_start(2000, 0.5, 300) == 1000
    assert averaging_start(28, 0.25, 0) == 21
    run = run_training(tmp_path, "avg", monkeypatch, keep=4, average="last",  # checkpoints at 7, 14, 21, 28
                       optim={"warmup_steps": 5})
    note = torch.load(run / "checkpoints" / "averaged.ckpt", weights_only=False)["atnat_selection"]
    assert note["steps"] == [14, 21, 28] and note["left_out"] == [7] and note["left_out_before_step"] == 14
    assert json.loads((run / "train.json").read_text())["averaged_steps"] == [14, 21, 28]
    expected = average_state_dicts([weights(run / "checkpoints" / f"step-{s}.ckpt") for s in (14, 21, 28)])
    got = weights(run / "checkpoints" / "averaged.ckpt")
    assert all(torch.equal(expected[k], got[k]) for k in expected)


def test_average_best_by_bleu_keeps_the_best_checkpoints(tmp_path, monkeypatch):
    run = run_training(tmp_path, "best", monkeypatch, keep=2, average="best", checkpoint_metric="bleu",
                       average_window=1.0, optim={"warmup_steps": 0})
    tops = sorted(p.name for p in (run / "checkpoints").glob("top-*.ckpt"))
    assert len(tops) == 2 and (run / "checkpoints" / "averaged.ckpt").exists()
    state = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["callbacks"]
    monitors = {v["monitor"] for k, v in state.items() if k.startswith("ModelCheckpoint")}
    assert monitors == {"val/bleu"}
    note = torch.load(run / "checkpoints" / "averaged.ckpt", weights_only=False)["atnat_selection"]
    assert sorted(note["checkpoints"]) == tops and note["metric"] == "bleu"


def test_ema_weights_are_evaluated_and_resume_exactly(tmp_path, monkeypatch):
    whole = run_training(tmp_path, "whole", monkeypatch, ema=0.9)
    resumed = run_training(tmp_path, "resumed", monkeypatch, kill_at=17, ema=0.9)
    a = torch.load(whole / "checkpoints" / "last.ckpt", weights_only=False)
    b = torch.load(resumed / "checkpoints" / "last.ckpt", weights_only=False)
    for key in ("state_dict", "current_model_state"):  # the EMA weights and the raw ones
        assert all(torch.equal(a[key][k], b[key][k]) for k in a[key]), key
    assert not all(torch.equal(a["state_dict"][k], a["current_model_state"][k]) for k in a["state_dict"])


@pytest.mark.parametrize("change, message", [
    ({"average": "mean"}, "train: average must be one of none, best, last, got 'mean'"),
    ({"checkpoint_metric": "acc"}, "train: checkpoint_metric must be one of loss, bleu, got 'acc'"),
    ({"keep": 0}, "train: keep must be an integer >= 1, got 0"),
    ({"ema": 1.5}, "train: ema must be a decay between 0 and 1"),
    ({"loggers": ["wandb"]}, "train: loggers must be one of csv, tensorboard, got 'wandb'"),
])
def test_bad_selection_options_are_refused_when_read(change, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        run_config_from_dict({**RUN, "train": {**RUN["train"], **change}}, "x.yaml")


def test_tensorboard_logger_writes_event_files_beside_the_csv_log(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    run = run_training(tmp_path, "tb", monkeypatch, loggers=["csv", "tensorboard"])
    assert (run / "logs" / "metrics.csv").exists()
    assert list((run / "logs" / "tensorboard").glob("events.out.tfevents.*"))


def test_the_evaluated_weights_have_their_own_validation_score(tmp_path, monkeypatch):
    """The average of the last checkpoints is judged, so its validation score is recorded
    beside the validation curve (it used to be never measured)."""
    import json

    import pandas as pd

    from atnat.experiments.cli.commands import main
    from tests.test_grid import TINY, write_grid

    monkeypatch.chdir(tmp_path)
    base = {**TINY["base"], "train": {**TINY["base"]["train"], "keep": 2, "average": "last"}}
    grid = write_grid(tmp_path, {**TINY, "base": base, "cells": {"at": TINY["cells"]["at"]}})
    assert main(["run", str(grid), "--results", "res"]) == 0
    table = pd.read_csv(tmp_path / "res" / "tiny" / "results.csv")
    assert (table.evaluated_checkpoint == "averaged.ckpt").all()
    assert table.val_bleu_evaluated.notna().all() and (table.val_bleu_evaluated >= 0).all()
    rows = json.loads((tmp_path / "res" / "tiny" / "runs" / "at-s1" / "metrics.json").read_text())["rows"]
    assert rows[0]["val_bleu_evaluated"] == table.val_bleu_evaluated.iloc[0]


def test_averaging_falls_back_to_the_final_weights_never_to_an_early_checkpoint(tmp_path):
    """average: best whose best checkpoints all precede the averaging window (the metric peaked early, here
    inside the warm-up): the final weights are evaluated alone; and an average left from an earlier setting
    is removed when the run evaluates without one (evaluation would prefer it)."""
    import types

    from pytorch_lightning.callbacks import ModelCheckpoint

    from atnat.experiments.modelfiles.checkpoints import checkpoint_step
    from atnat.experiments.training.train import select_weights
    from tests.test_files_read_back import checkpoint

    ckpts = tmp_path / "run" / "checkpoints"
    for step in (2, 4):
        checkpoint(ckpts / f"top-{step}.ckpt", step=step)
    selector = ModelCheckpoint(monitor="val/loss", mode="min")
    selector.best_k_models = {str(ckpts / "top-2.ckpt"): torch.tensor(1.0), str(ckpts / "top-4.ckpt"): torch.tensor(2.0)}
    trainer = types.SimpleNamespace(callbacks=[selector], global_step=12,
                                    save_checkpoint=lambda path: checkpoint(path, step=12))
    settings = types.SimpleNamespace(average="best", average_window=0.5, checkpoint_metric="loss")
    chosen, steps, alone = select_weights(trainer, settings, ckpts, warmup=8)
    assert (chosen.name, steps, checkpoint_step(chosen), alone) == ("averaged.ckpt", [12], 12, True)
    selector.best_model_path = ""
    chosen, steps, alone = select_weights(trainer, types.SimpleNamespace(average="none"), ckpts)
    assert (chosen.name, steps, alone) == ("best.ckpt", [], False) and not (ckpts / "averaged.ckpt").exists()
    checkpoint(ckpts / "best.ckpt")
    assert evaluation_checkpoint(ckpts.parent) == ckpts / "best.ckpt"


def test_a_constant_learning_rate_has_no_warm_up_to_leave_out_of_an_average(tmp_path, monkeypatch):
    run = run_training(tmp_path, "constant", monkeypatch, keep=4, average="last",  # checkpoints at 7, 14, 21, 28
                       optim={"schedule": "constant"})  # warmup_steps keeps its default, 400: no meaning here
    assert json.loads((run / "train.json").read_text())["averaged_steps"] == [14, 21, 28]


def test_the_steps_after_the_last_validation_are_validated_and_can_be_evaluated(tmp_path, monkeypatch):
    """max_steps 25 with a validation every 7 steps: the final weights (step 25) are validated and
    saved too; before, steps 22-25 were trained and never seen by selection or averaging."""
    run = run_training(tmp_path, "tail", monkeypatch, max_steps=25, keep=4, average="last", optim={"warmup_steps": 5})
    steps = sorted(int(p.stem.split("-")[1]) for p in (run / "checkpoints").glob("step-*.ckpt"))
    assert steps == [7, 14, 21, 25]
    assert json.loads((run / "train.json").read_text())["averaged_steps"] == [14, 21, 25]
    best = run_training(tmp_path, "tail-best", monkeypatch, max_steps=25)
    logged = (best / "logs" / "metrics.csv").read_text().splitlines()
    header = logged[0].split(",")
    validated = {int(row.split(",")[header.index("step")]) for row in logged[1:]
                 if row.split(",")[header.index("val/loss")]}
    assert validated == {6, 13, 20, 24}  # Lightning logs the step before the increment: steps 7, 14, 21, 25


def test_a_run_ended_by_max_epochs_validates_its_final_weights(tmp_path, monkeypatch):
    run = run_training(tmp_path, "epochs", monkeypatch, max_steps=1000, max_epochs=2, val_every_steps=5, keep=4, average="last",
                       optim={"warmup_steps": 5})
    final = json.loads((run / "train.json").read_text())["global_step"]
    assert final % 5 != 0  # else this test shows nothing
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == final
    steps = sorted(int(p.stem.split("-")[1]) for p in (run / "checkpoints").glob("step-*.ckpt"))
    assert steps[-1] == final


@pytest.mark.parametrize("average", ["last", "best"])
def test_a_killed_or_moved_run_averages_what_an_uninterrupted_one_does(tmp_path, monkeypatch, average):
    """Killed at step 17: the resumed run's step-14 checkpoint was on disk but not in the callback's record
    (last.ckpt is written before the step checkpoint is recorded), so `average: last` averaged [21, 28] and
    counted step 7 among the last three. A run folder moved before its resume lost its `best` checkpoints'
    record the same way. The checkpoints are now found on disk."""
    import shutil

    from atnat.experiments.training import train as train_module
    from atnat.experiments.training.train import train
    from tests.test_resume import Kill, with_callbacks

    opts = dict(keep=3, average=average, average_window=1.0)
    whole = run_training(tmp_path, "whole", monkeypatch, optim={"warmup_steps": 0}, **opts)
    killed = run_training(tmp_path, "killed", monkeypatch, kill_at=17, optim={"warmup_steps": 0}, **opts)
    cfg = run_config_from_dict({**RUN, "train": {**RUN["train"], **opts}, "optim": {"warmup_steps": 0}}, "test")
    make = with_callbacks(monkeypatch, Kill(17))
    with pytest.raises(SystemError, match="killed"):
        train(cfg, tmp_path / "to-move")
    monkeypatch.setattr(train_module, "make_trainer", make)
    shutil.move(tmp_path / "to-move", tmp_path / "moved")
    train(cfg, tmp_path / "moved")
    steps = {run.name: json.loads((run / "train.json").read_text())["averaged_steps"]
             for run in (whole, killed, tmp_path / "moved")}
    assert steps["killed"] == steps["moved"] == steps["whole"] and len(steps["whole"]) == 3


def test_final_weights_alone_are_recorded_and_reported_as_such(tmp_path, monkeypatch):
    """28 steps inside a 400-step warm-up: no checkpoint is in the averaging window, so the final weights are
    evaluated alone. train.json said only averaged_steps [28], and the report called it a mean of checkpoints
    'past the warm-up'."""
    import pandas as pd

    from atnat.experiments.reporting.report import write_report
    from tests import fixtures_results as fx

    run = run_training(tmp_path, "warm", monkeypatch, keep=3, average="last", optim={"warmup_steps": 400})
    trained = json.loads((run / "train.json").read_text())
    assert trained["averaged_steps"] == [28] and trained["averaged_final_alone"] is True
    root = fx.build_results(tmp_path / "res")
    frame = pd.read_csv(root / "results.csv").assign(averaged_steps="")
    frame.loc[frame.cell == "copy-at-s1", "averaged_steps"] = "final 28"
    frame.loc[frame.cell == "copy-ctc-s1", "averaged_steps"] = "14+21+28"
    frame.to_csv(root / "results.csv", index=False)
    md = write_report(root, figures=False)[0].read_text(encoding="utf-8")
    assert "`copy-at-s1` its final weights alone (step 28: every checkpoint came before the window)" in md
    assert "`copy-ctc-s1` steps 14, 21, 28" in md


def test_the_averaging_window_keeps_its_boundary_step_despite_float_rounding():
    """(1 - 0.7) * 1000 is 300.00000000000006 in floats: the ceiling left out the step-300 checkpoint, which the
    documented rule (step >= (1 - window) x the last step) keeps."""
    from atnat.experiments.training.train import averaging_start

    assert averaging_start(1000, 0.7, 0) == 300 and averaging_start(2000, 0.7, 0) == 600
    assert averaging_start(1000, 0.7001, 0) == 300 and averaging_start(999, 0.5, 0) == 500
    assert averaging_start(1000, 0.7, 400) == 400 and averaging_start(28, 0.25, 0) == 21
