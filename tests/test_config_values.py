"""Every bad value is refused when the config is read, before anything trains: one
message naming the file, the key, the value and what is allowed, and exit 2 - no traceback, no
training started, no run folder left behind."""
import pytest
import yaml

from atnat.experiments.cli.commands import main

RUN = {
    "name": "values",
    "task": {"name": "fertility", "vocab": 8, "min_len": 2, "max_len": 5, "n_train": 60, "n_valid": 8, "n_test": 8},
    "decoder": {"name": "at"},
    "model": {"d_model": 16, "n_heads": 2, "ffn_dim": 32, "encoder_layers": 1, "decoder_layers": 1},
    "train": {"max_steps": 4, "max_tokens": 96, "val_every_steps": 2, "progress_bar": False, "num_threads": 1},
    "eval": {"n_bootstrap": 10},
}

# (section, key, value, what the message must say is allowed)
BAD = [
    ("optim", "lr", -1, "lr must be > 0, got -1"),
    ("optim", "lr", float("nan"), "lr must be > 0, got nan"),
    ("optim", "lr", float("inf"), "lr must be > 0, got inf"),
    ("model", "d_model", 33, "d_model must be a multiple of n_heads (2)"),
    ("train", "val_every_steps", 0, "val_every_steps must be an integer from 1 to 1,000,000,000, got 0"),
    ("model", "dropout", 2.0, "dropout must be a number with 0 <= value < 1, got 2.0"),
    ("train", "num_threads", -3, "num_threads must be an integer from 1 to 1024 or null (torch's default), got -3"),
    ("task", "vocab", 1, "vocab must be an integer >= 2, got 1"),
    ("train", "max_steps", -1, "max_steps must be an integer from 1 to 1,000,000,000, got -1"),
    ("train", "max_steps", 0, "max_steps must be an integer from 1 to 1,000,000,000, got 0"),
    ("loss", "label_smoothing", 1.5, "label_smoothing must be a number with 0 <= value < 1, got 1.5"),
    ("optim", "warmup_steps", -5, "warmup_steps must be an integer >= 0, got -5"),
    ("train", "max_tokens", -5, "max_tokens must be an integer from 1 to 1,000,000,000, got -5"),
    ("train", "max_tokens", 1, "train.max_tokens: 1 is smaller than the longest sentence pair of the train split"),
    ("eval", "max_tokens", 2, "eval.max_tokens: 2 is smaller than the longest sentence pair of the valid split"),
    ("train", "divergence_factor", -1, "divergence_factor must be a number >= 2"),
    ("eval", "split", "val", "split must be one of train, valid, test (task fertility), got 'val'"),
    ("train", "accelerator", "gpuu", "accelerator must be one of auto, cpu, gpu, cuda, got"),
    ("train", "devices", "two", "devices must be an integer >= 1 (or -1: all), 'auto'"),
    ("loss", "guided_attention_layers", [1], "guided_attention_layers names layer 1 but the decoder has 1 layer (0 to 0"),
    ("loss", "guided_attention_heads", [-3], "guided_attention_heads names head -3 but the model has 2 heads"),
]


@pytest.mark.parametrize("section,key,value,allowed", BAD, ids=[f"{s}.{k}={v}" for s, k, v, _ in BAD])
def test_a_bad_value_is_refused_before_training(tmp_path, capsys, section, key, value, allowed):
    config = {**RUN, section: {**RUN.get(section, {}), key: value}}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    run_dir = tmp_path / "run"
    assert main(["train", str(path), "--output-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"atnat: error: {path}") or "max_tokens: " in err, err  # the file is named
    assert allowed in err and "Traceback" not in err, err
    assert key in err
    assert not (run_dir / "checkpoints").exists(), "training started before the value was refused"


def test_a_yaml_file_that_is_not_utf8_is_one_message(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_bytes(yaml.safe_dump(RUN).encode() + b"# caf\xe9\n")
    assert main(["train", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path} line " in err and "is not valid UTF-8" in err and "Traceback" not in err


def test_a_section_is_named_once_in_the_message(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({**RUN, "train": {**RUN["train"], "keep": 0}}))
    assert main(["train", str(path)]) == 2
    assert capsys.readouterr().err.strip() == f"atnat: error: {path}: train: keep must be an integer >= 1, got 0"


def test_an_override_adds_to_a_section_written_as_a_bare_name(tmp_path):
    """`decoder: ctc` with --set decoder.upsample=3 replaced the whole section by {upsample: 3}: refused as
    having no name."""
    from atnat.experiments.config.run import load_run_config, parse_override

    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({**RUN, "decoder": "ctc", "eval": {"strategies": ["ctc"]}}))
    cfg = load_run_config(path, parse_override("decoder.upsample=3"))
    assert cfg.decoder == {"name": "ctc", "upsample": 3}


def test_yaml_scalars_are_read_as_yaml_1_2_in_files_and_overrides(tmp_path, capsys):
    """YAML 1.1 (PyYAML's default) read `no` as false (Norwegian's language code), `on` as true, `1:30`
    as 90 and `017` as 15: a config or --set value meant as text or a decimal number silently became
    another value. Only true/false are booleans now, and numbers are decimal (or 0x hex)."""
    from atnat.experiments.config.run import load_yaml, parse_override

    path = tmp_path / "g.yaml"
    path.write_text("a: [en, no, on, off, yes, 1:30, 1:00:00, '017', 017, 0x1F, 1e-3, 2.5, .inf, true, False, ~, 1_000, 2026-11-29]\n")
    assert load_yaml(path)["a"] == ["en", "no", "on", "off", "yes", "1:30", "1:00:00", "017", "017", 31, 0.001, 2.5,
                                    float("inf"), True, False, None, 1000, "2026-11-29"]
    assert parse_override("train.max_steps=1:00") == {"train": {"max_steps": "1:00"}}
    assert parse_override("task.tgt=no") == {"task": {"tgt": "no"}}
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(RUN))
    assert main(["train", str(config), "--set", "train.max_steps=1:00", "--output-dir", str(tmp_path / "r")]) == 2
    assert "max_steps" in capsys.readouterr().err and not (tmp_path / "r").exists()


@pytest.mark.parametrize("module, cls, options, field", [
    ("beam", "Beam", {"beam_size": 10**9}, "beam_size"),  # allocated until killed for memory (12 GB)
    ("ctc_search", "CTC", {"beam_size": 10**6}, "beam_size"),
    ("parallel", "Parallel", {"length_beam": 10**6}, "length_beam"),
    ("mask_predict", "MaskPredict", {"iterations": 10**9}, "iterations"),
    ("mask_predict", "MaskPredict", {"length_beam": 5000}, "length_beam"),
    ("npd", "NoisyParallel", {"samples_per_length": 10**7}, "samples_per_length"),
    ("greedy", "Greedy", {"max_len_cap": 10**12}, "max_len_cap"),
    ("greedy", "Greedy", {"min_len": 10**12}, "min_len"),
    ("speculative", "Speculative", {"max_len_cap": 10**12}, "max_len_cap"),
])
def test_search_sizes_beyond_any_use_are_refused_when_built(module, cls, options, field):
    """A trial's leftover, probed: a beam of 10^9 allocated until the process was killed for memory; a beam of
    10^5 ran past two minutes on two test sentences. Widths, iterations and lengths now have a declared range."""
    import importlib

    from atnat.core.errors import AtnatError

    with pytest.raises(AtnatError, match=f"{field} must be an integer from"):
        getattr(importlib.import_module(f"atnat.decoding.{module}"), cls)(**options)


@pytest.mark.parametrize("where, change", [("speed", {"threads": 10**9}), ("train", {"num_threads": 10**9})])
def test_thread_counts_beyond_any_machine_are_refused_when_read(where, change):
    """torch.set_num_threads(10**9) is accepted, and the first operation then asks for a billion threads."""
    from atnat.core.errors import AtnatError
    from atnat.experiments.config.run import TrainSettings
    from atnat.experiments.config.speed import SpeedSettings

    make = SpeedSettings if where == "speed" else TrainSettings
    with pytest.raises(AtnatError, match="threads must be"):
        make(**change)
    make(**{k: 64 for k in change})  # a large machine's count stays allowed


@pytest.mark.parametrize("make, message", [
    (lambda: __import__("atnat.decoding.dag_walk", fromlist=["x"]).DAGLookahead(beta=1e39),
     r"strategy 'dag-lookahead': beta must be a finite number from 0 to 50"),  # hung: every choice -inf, walk looped
    (lambda: __import__("atnat.decoding.greedy", fromlist=["x"]).Greedy(max_len_a=1e20),
     r"strategy 'greedy': max_len_a must be a finite number from 0 to 1000"),  # gave one-token outputs, BLEU 0
    (lambda: __import__("atnat.decoding.greedy", fromlist=["x"]).Greedy(max_len_a=float("inf")), r"max_len_a must be"),
    (lambda: __import__("atnat.decoding.beam", fromlist=["x"]).Beam(max_len_b=10**30),
     r"strategy 'beam': max_len_b must be an integer from 0 to"),  # an OverflowError traceback
    (lambda: __import__("atnat.decoding.speculative", fromlist=["x"]).Speculative(max_len_a=1e300), r"max_len_a must be"),
    (lambda: __import__("atnat.decoding.parallel", fromlist=["x"]).Parallel(length="fixed", fixed_len_a=1e30),
     r"strategy 'parallel': fixed_len_a must be a finite number from 0 to 1000"),
    (lambda: __import__("atnat.decoding.parallel", fromlist=["x"]).Parallel(length="fixed", fixed_len_b=10**30),
     r"strategy 'parallel': fixed_len_b must be an integer from 0 to"),
    (lambda: __import__("atnat.models.decoders.nat", fromlist=["x"]).NATOptions(length="fixed", fixed_len_a=float("nan")),
     r"decoder options: fixed_len_a must be a finite number from 0 to 1000"),
    (lambda: __import__("atnat.models.decoders.nat", fromlist=["x"]).NATOptions(fixed_len_b=-3),
     r"decoder options: fixed_len_b must be an integer from 0 to"),
])
def test_option_values_that_overflowed_mid_decode_are_refused_when_built(make, message):
    """Found by a reliability trial: each was accepted, then hung, decoded one-token outputs reported as BLEU, or
    ended in a traceback."""
    from atnat.core.errors import AtnatError

    with pytest.raises(AtnatError, match=message):
        make()


@pytest.mark.parametrize("where, change, message", [
    ("grid", {"equivalence_margin": float("inf")}, "equivalence_margin must be a positive number"),
    ("grid", {"goals": [{"goal": "g", "system": "at / greedy", "within": float("nan"), "of": "at / beam2"}]},
     r"goals\[0\]\.within: expected a finite number"),
    ("cell", {"train": {"max_time_s": float("inf")}}, r"max_time_s must be a positive, finite number of seconds"),
])
def test_grid_values_that_failed_only_after_training_are_refused_when_read(tmp_path, where, change, message):
    """equivalence_margin .inf trained every cell and then left no report (and no command could write one); a goal
    bound of NaN reported a measured system as not measured; train.max_time_s .inf ended in a traceback."""
    from atnat.experiments.config.run import ConfigError
    from atnat.experiments.running.grid import load_grid
    from tests.test_grid import TINY, write_grid

    data = {**TINY, "cells": {k: dict(v) for k, v in TINY["cells"].items()}}
    if where == "grid":
        data.update(change)
    else:
        data["cells"]["at"].update(change)
    with pytest.raises(ConfigError, match=message):
        load_grid(write_grid(tmp_path, data))


def test_a_list_as_a_key_and_an_axis_into_a_value_are_one_message(tmp_path, capsys):
    """`? [1, 2]` as a key raised TypeError: unhashable type; an axis into a section written as a number
    (`optim: 5` with axes optim.lr) raised TypeError from dict(5): both tracebacks."""
    from tests.test_grid import TINY, write_grid

    (tmp_path / "r.yaml").write_text("name: r\ntask: copy\ndecoder: at\n? [1, 2]\n: 3\n")
    assert main(["train", str(tmp_path / "r.yaml")]) == 2
    assert "a key must be a name, not a list or a mapping" in capsys.readouterr().err
    data = {**TINY, "axes": {"optim.lr": [0.001, 0.002]},
            "cells": {**TINY["cells"], "at": {**TINY["cells"]["at"], "optim": 5}}}
    assert main(["run", str(write_grid(tmp_path, data)), "--dry-run"]) == 2
    assert "optim is 5, not a section, so axes.optim.lr cannot set a key in it" in capsys.readouterr().err
