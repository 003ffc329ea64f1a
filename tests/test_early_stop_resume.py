"""A run whose early stopping had decided, stopped before its end was recorded (SIGTERM inside that validation, or
a kill between the end of training and train.json), stays stopped at its resume: Lightning restores the stopping
rule's counters but not its decision, and the run trained on past its stop (step 14 -> 21), another best.ckpt."""
import json

import pytest

from atnat.core.errors import AtnatError
from atnat.experiments.config.run import run_config_from_dict
from atnat.experiments.training import train as train_module

RAW = {"name": "es", "task": {"name": "fertility", "vocab": 8, "min_len": 2, "max_len": 5, "n_train": 160,
                              "n_valid": 8, "n_test": 8},
       "decoder": {"name": "at"},
       "model": {"d_model": 16, "n_heads": 2, "ffn_dim": 32, "encoder_layers": 1, "decoder_layers": 1, "dropout": 0.1},
       "train": {"max_steps": 56, "max_tokens": 96, "val_every_steps": 7, "progress_bar": False, "num_threads": 1,
                 "early_stop_patience": 1, "early_stop_min_delta": 0.05},
       "eval": {"n_bootstrap": 10}}


def test_an_early_stopped_run_killed_before_its_record_resumes_stopped(tmp_path, monkeypatch):
    cfg = run_config_from_dict(json.loads(json.dumps(RAW)), "test")
    whole = tmp_path / "whole"
    train_module.train(cfg, whole)
    stopped_at = json.loads((whole / "train.json").read_text())["global_step"]
    assert stopped_at < 56  # the rule stopped it

    cut = tmp_path / "cut"
    real = train_module.select_weights

    def killed(*args, **kwargs):
        raise KeyboardInterrupt("killed after training, before train.json")

    monkeypatch.setattr(train_module, "select_weights", killed)
    with pytest.raises(KeyboardInterrupt):
        train_module.train(cfg, cut)
    monkeypatch.setattr(train_module, "select_weights", real)
    assert not (cut / "train.json").exists()
    train_module.train(cfg, cut)  # resumed from last.ckpt
    resumed = json.loads((cut / "train.json").read_text())
    assert resumed["global_step"] == stopped_at
    assert resumed["evaluated_checkpoint"] == json.loads((whole / "train.json").read_text())["evaluated_checkpoint"]


def test_a_patience_changed_at_a_resume_is_the_one_applied(tmp_path):
    """Lightning restored the checkpoint's patience: a run resumed with patience 1 (the change recorded in
    settings_changes.json) trained on to its step budget under the old patience of 100."""
    raw = json.loads(json.dumps(RAW))
    raw["train"].update(early_stop_patience=100, max_steps=14)
    run = tmp_path / "run"
    train_module.train(run_config_from_dict(raw, "test"), run)
    (run / "train.json").unlink()  # not finished: the next start resumes from last.ckpt
    raw["train"].update(early_stop_patience=1, early_stop_min_delta=10.0, max_steps=56)
    train_module.train(run_config_from_dict(raw, "test"), run, allow_changes=True)
    # stopped at once (its validations had already not improved once) or at the first validation after it
    assert json.loads((run / "train.json").read_text())["global_step"] <= 21


def test_a_start_given_only_at_a_resume_is_not_recorded_as_the_runs_start(tmp_path):
    """train.init_from added when resuming a run that started from scratch: the source's weights were copied (then
    overwritten by the checkpoint) and train.json said the run was initialised from them."""
    raw = json.loads(json.dumps(RAW))
    raw["train"].update(max_steps=7, early_stop_patience=None)
    source, run = tmp_path / "source", tmp_path / "run"
    train_module.train(run_config_from_dict(raw, "test"), source)
    train_module.train(run_config_from_dict(raw, "test"), run)
    (run / "train.json").unlink()  # not finished: resumed, now told to start from `source`
    raw["train"].update(max_steps=14, init_from=str(source))
    train_module.train(run_config_from_dict(raw, "test"), run, allow_changes=True)
    assert "initialised_from" not in json.loads((run / "train.json").read_text())
    assert not (run / "init.json").exists()


def test_a_bad_start_is_refused_before_the_run_records_an_attempt_and_a_fresh_start_drops_a_stale_record(tmp_path):
    """A train.init_from that names nothing was refused only after config.json and attempts.json were written (a
    later train.json listed an attempt that never trained); and an init.json left by a start killed before its
    first checkpoint survived a fresh start without init_from, the folder still claiming another model's weights."""
    raw = json.loads(json.dumps(RAW))
    raw["train"].update(max_steps=7, early_stop_patience=None, init_from=str(tmp_path / "no-such-model"))
    run = tmp_path / "run"
    with pytest.raises(AtnatError, match="no-such-model"):
        train_module.train(run_config_from_dict(raw, "test"), run)
    assert not (run / "attempts.json").exists() and not (run / "config.json").exists()
    run.mkdir(exist_ok=True)
    (run / "init.json").write_text(json.dumps({"from": "another model"}))  # a start killed before its first step
    raw["train"]["init_from"] = None
    train_module.train(run_config_from_dict(raw, "test"), run)
    assert not (run / "init.json").exists()
    assert len(json.loads((run / "attempts.json").read_text())) == 1
