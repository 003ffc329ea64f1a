"""Every config value is checked against its declared type when the config is read:
a wrong type fails before training with the file, the key path and the expected type, and the
numbers PyYAML leaves as strings (`5e-4`, `1e-1`) are taken as the numbers users mean."""
import dataclasses

import pytest
import yaml

from atnat.core.options import build_config
from atnat.experiments.cli.commands import main
from atnat.experiments.config.run import ConfigError, load_run_config, run_config_from_dict
from atnat.experiments.running.grid import load_grid
from atnat.models.optim import OptimConfig
from atnat.models.seq2seq import Seq2SeqModule
from atnat.models.sizes import ModelConfig
from tests.test_grid import TINY, write_grid

BASE = {"name": "x", "task": {"name": "copy"}, "decoder": {"name": "at"}}


def config(**upd):
    return run_config_from_dict({**BASE, **upd}, "grid.yaml")


def test_yaml_reads_5e_4_as_a_string_and_the_config_turns_it_into_the_number():
    assert yaml.safe_load("lr: 5e-4") == {"lr": "5e-4"}  # the PyYAML behaviour this guards against
    cfg = config(optim={"lr": "5e-4"}, model={"dropout": "1e-1"}, train={"max_steps": "1e3"})
    assert cfg.optim["lr"] == 0.0005 and cfg.model["dropout"] == 0.1 and cfg.train.max_steps == 1000
    assert build_config(OptimConfig, cfg.optim).lr == 0.0005
    module = Seq2SeqModule(vocab_size=12, decoder="at", model=cfg.model, optim=cfg.optim)
    assert module.optim_cfg.lr == 0.0005 and module.model_cfg.dropout == 0.1


def test_numeric_strings_in_decoder_strategy_and_task_options_become_numbers():
    cfg = config(decoder={"name": "ctc", "glat_ratio_end": "1e-1"}, task={"name": "copy", "vocab": "1e1"},
                 eval={"strategies": [{"name": "ctc", "beam_size": "2"}]})
    assert cfg.decoder == {"name": "ctc", "glat_ratio_end": 0.1}
    assert cfg.task == {"name": "copy", "vocab": 10} and cfg.eval.strategies[0]["beam_size"] == 2


@pytest.mark.parametrize("upd, message", [
    ({"train": {"max_steps": "abc"}}, r"grid.yaml: train.max_steps: expected an integer, got 'abc'"),
    ({"train": {"max_steps": 2.5}}, r"train.max_steps: expected an integer, got 2.5"),
    ({"train": {"max_steps": True}}, r"train.max_steps: expected an integer, got True"),
    ({"eval": {"n_bootstrap": "ten"}}, r"grid.yaml: eval.n_bootstrap: expected an integer, got 'ten'"),
    ({"model": {"dropout": "high"}}, r"grid.yaml: model.dropout: expected a number, got 'high'"),
    ({"model": {"pre_ln": "yes please"}}, r"model.pre_ln: expected true or false, got 'yes please'"),
    ({"optim": {"betas": [0.9]}}, r"optim.betas: expected a list of 2 numbers, got \[0.9\]"),
    ({"optim": {"betas": [0.9, "x"]}}, r"optim.betas\[1\]: expected a number, got 'x'"),
    ({"loss": {"guided_attention_heads": "all"}}, r"loss.guided_attention_heads: expected a list of integers or null"),
    ({"train": {"max_time_s": "soon"}}, r"train.max_time_s: expected a number or null, got 'soon'"),
    ({"train": {"accelerator": 1}}, r"train.accelerator: expected a string, got 1"),
    ({"seed": "one"}, r"grid.yaml: seed: expected an integer, got 'one'"),
    ({"decoder": {"name": "ctc", "upsample": "three"}}, r"decoder \(ctc\): upsample: expected an integer"),
    ({"task": {"name": "copy", "n_train": []}}, r"task \(copy\): n_train: expected an integer, got \[\]"),
    ({"eval": {"strategies": [{"name": "beam", "alpha": "much"}]}},
     r"eval.strategies\[0\] \(beam\): alpha: expected a number, got 'much'"),
    ({"eval": {"strategies": [{"name": "greedy", "attention_window": [1, 2, 3]}]}},
     r"attention_window: expected a list of 2 integers or null"),
])  # fmt: skip
def test_a_value_of_the_wrong_type_names_file_key_path_and_expected_type(upd, message):
    with pytest.raises(ConfigError, match=message):
        config(**upd)


def test_set_overrides_are_checked_too(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(BASE))
    with pytest.raises(ConfigError, match=r"run.yaml: train.max_steps: expected an integer, got 'abc'"):
        load_run_config(path, {"train": {"max_steps": "abc"}})
    assert main(["train", str(path), "--set", "train.max_steps=abc"]) == 2
    assert "train.max_steps: expected an integer, got 'abc'" in capsys.readouterr().err


def test_grid_cells_and_speed_are_checked_before_anything_trains(tmp_path):
    bad = {**TINY, "cells": {"at": {"decoder": {"name": "at"}, "eval": {"n_bootstrap": "ten"}}}}
    path = write_grid(tmp_path, bad)
    with pytest.raises(ConfigError, match=r"tiny.yaml: cell at-s1: eval.n_bootstrap: expected an integer, got 'ten'"):
        load_grid(path)
    with pytest.raises(ConfigError, match=r"tiny.yaml: speed.repeats: expected an integer, got 'many'"):
        load_grid(write_grid(tmp_path, {**TINY, "speed": {"repeats": "many"}}))
    grid = load_grid(write_grid(tmp_path, {**TINY, "speed": {"repeats": "3", "warmup": 0}}))
    assert grid.speed == {"repeats": 3, "warmup": 0}  # what the runner builds SpeedSettings from


def test_every_config_dataclass_annotation_is_understood():
    """Each field type of every registered option class is one the checker supports (a new field
    with an unsupported annotation would otherwise pass unchecked)."""
    import typing

    import atnat.decoding  # noqa: F401
    import atnat.models.decoders  # noqa: F401
    from atnat.core.options import describe
    from atnat.decoding.base import STRATEGIES
    from atnat.experiments.config import run as config_module
    from atnat.experiments.config.speed import SpeedSettings
    from atnat.experiments.data.tasks import TASKS
    from atnat.models.decoders.base import DECODERS, LossConfig

    classes = [ModelConfig, LossConfig, OptimConfig, SpeedSettings, config_module.TrainSettings,
               config_module.EvalSettings, config_module.DistillSettings, config_module.RunConfig]
    classes += [DECODERS.get(n).Options for n in DECODERS.names()]
    classes += [STRATEGIES.get(n) for n in STRATEGIES.names()] + [TASKS.get(n).Options for n in TASKS.names()]
    for cls in classes:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            assert not describe(hints[f.name]).startswith("a typing"), (cls, f.name, hints[f.name])
