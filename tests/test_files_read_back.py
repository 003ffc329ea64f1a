"""Model files and run records read back are untrusted: a checkpoint or export whose contents do not fit
what they claim is one AtnatError naming the file, never a bare traceback, a silent cast or broadcast, or
a file read or written outside its folder."""
from __future__ import annotations

import json
import os
import types
from pathlib import Path

import pytest
import torch

from atnat.core.errors import AtnatError
from atnat.experiments.data.tokenize import SymbolTokenizer
from atnat.experiments.modelfiles.checkpoints import (
    CheckpointDamaged,
    average_checkpoints,
    save_checkpoint_file,
    write_checksum,
)
from atnat.experiments.modelfiles.loading import checkpoint_stamp, load_module
from atnat.experiments.running import collect
from atnat.experiments.training.resume import resume_point
from atnat.models.seq2seq import Seq2SeqModule

TOKENS = SymbolTokenizer(["a", "b"])


def checkpoint(path: Path, step: int = 5, **changed) -> dict:
    torch.manual_seed(0)
    module = Seq2SeqModule(vocab_size=TOKENS.vocab_size, decoder="at",
                           model={"d_model": 8, "n_heads": 1, "ffn_dim": 8, "encoder_layers": 1, "decoder_layers": 1})
    content = {"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams), "global_step": step,
               "atnat_tokenizer": TOKENS.to_state(), "atnat_bleu_tokenize": "13a", "atnat_plugins": [], **changed}
    path.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint_file(content, path)
    return content


@pytest.mark.parametrize("change", ["shape", "dtype", "no weights"])
def test_averaging_refuses_checkpoints_of_another_model_by_name(tmp_path, change):
    good = checkpoint(tmp_path / "a.ckpt")
    key = "encoder.layers.0.attn.in_bias" if "encoder.layers.0.attn.in_bias" in good["state_dict"] else \
        next(k for k, v in good["state_dict"].items() if v.dim() == 1)
    other = dict(good["state_dict"])
    other[key] = torch.zeros(1) if change == "shape" else other[key].to(torch.int64)
    checkpoint(tmp_path / "b.ckpt", **({"state_dict": other} if change != "no weights" else {"state_dict": None}))
    said = "b.ckpt: it holds no state_dict" if change == "no weights" else f"{key} is .*: not checkpoints of one model"
    for order in ([tmp_path / "a.ckpt", tmp_path / "b.ckpt"], [tmp_path / "b.ckpt", tmp_path / "a.ckpt"]):
        with pytest.raises(AtnatError, match=said) as raised:
            average_checkpoints(order, tmp_path / "avg.ckpt", {})
        assert "b.ckpt" in str(raised.value)
    assert not (tmp_path / "avg.ckpt").exists()


def test_resuming_passes_over_a_checkpoint_without_weights_whatever_its_step(tmp_path, capsys):
    checkpoint(tmp_path / "ckpts" / "last.ckpt", step=10)
    checkpoint(tmp_path / "ckpts" / "step-99.ckpt", step=10**15, state_dict=None)
    assert resume_point(tmp_path / "ckpts") == tmp_path / "ckpts" / "last.ckpt"
    assert "step-99.ckpt: it holds no state_dict" in capsys.readouterr().err


@pytest.mark.parametrize("state,said", [(["x"], "its tokenizer cannot be read"),
                                        ({"symbols": ["a"]}, "its tokenizer cannot be read"),
                                        ({"kind": "sentencepiece", "model_proto": b"garbage"}, "its tokenizer cannot be read"),
                                        ({"kind": "symbols", "symbols": []}, "its tokenizer has 6 symbols, its model 8")])
def test_a_checkpoints_tokenizer_that_is_not_its_models_is_named(tmp_path, state, said):
    checkpoint(tmp_path / "c.ckpt", atnat_tokenizer=state)
    with pytest.raises(AtnatError, match=f"c.ckpt: {said}"):
        load_module(tmp_path / "c.ckpt")


def test_a_checkpoint_altered_after_its_checksum_has_no_stamp(tmp_path):
    path = tmp_path / "t.ckpt"
    checkpoint(path)
    write_checksum(path)
    assert checkpoint_stamp(path).startswith("sha256-")
    path.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(CheckpointDamaged, match="does not match the sha256"):
        checkpoint_stamp(path)
    (tmp_path / "t.ckpt.sha256").write_text("")
    with pytest.raises(CheckpointDamaged, match="its checksum file t.ckpt.sha256 is unreadable"):
        checkpoint_stamp(path)


def export(tmp_path: Path) -> Path:
    from atnat.experiments.cli.commands import main

    checkpoint(tmp_path / "run" / "checkpoints" / "best.ckpt")
    assert main(["export", str(tmp_path / "run" / "checkpoints" / "best.ckpt"), str(tmp_path / "out")]) == 0
    return tmp_path / "out"


def test_an_export_names_only_files_inside_itself_and_of_its_models_dtypes(tmp_path):
    from safetensors.torch import load_file, save_file

    from atnat.experiments.files import sha256

    out = export(tmp_path)
    config = json.loads((out / "config.json").read_text())
    weights = out / config["weights"]["file"]
    outside = tmp_path / "elsewhere.safetensors"
    outside.write_bytes(weights.read_bytes())
    (out / "config.json").write_text(json.dumps({**config, "weights": {**config["weights"], "file": str(outside)}}))
    with pytest.raises(AtnatError, match="the weights file: .* cannot name a folder or file"):
        load_module(out)
    tensors = load_file(weights)
    name = next(iter(tensors))
    tensors[name] = tensors[name].to(torch.int32)
    save_file(tensors, weights, metadata=__import__("safetensors").safe_open(str(outside), "pt").metadata())
    (out / "config.json").write_text(json.dumps({**config, "weights": {**config["weights"], "sha256": sha256(weights)}}))
    with pytest.raises(AtnatError, match=f"{name} is stored as I32, the model holds it as torch.float32"):
        load_module(out)


def test_collect_writes_nothing_through_a_link_and_reads_no_label_as_a_path(tmp_path, monkeypatch):
    run = tmp_path / "res" / "g" / "runs" / "c1"
    (run / "hyps").mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"status": "ok", "rows": [{"strategy": "greedy", "bleu": 1.0}]}))
    (run / "hyps" / "greedy.txt").write_text("hello\n")
    cell = types.SimpleNamespace(name="c1", teacher=None, config=types.SimpleNamespace(output_dir=str(run)))
    monkeypatch.setattr(collect, "load_grid_into", lambda *_: (types.SimpleNamespace(cells=[cell], never_timed=lambda: []),
                                                                  run.parent.parent))
    dest, outside = tmp_path / "dest", tmp_path / "outside"
    (dest / "c1").mkdir(parents=True)
    outside.mkdir()
    os.symlink(outside, dest / "c1" / "hyps")
    with pytest.raises(AtnatError, match=f"{dest / 'c1' / 'hyps'} is a symbolic link"):
        collect.collect("g.yaml", results_root=tmp_path / "res", dest=dest)
    assert not list(outside.iterdir())
    staged = tmp_path / "stage"
    (staged / "hyps").mkdir(parents=True)
    (tmp_path / "secret.txt").write_text("a secret\n")
    (staged / "metrics.json").write_text(json.dumps({"status": "ok", "rows": [{"strategy": "../../secret"}]}))
    task = types.SimpleNamespace(splits={"test": (["s"], ["r"])}, references=lambda split: [["r"]])
    with pytest.raises(AtnatError, match="a scored strategy's label: '../../secret' cannot name a folder or file"):
        collect.stage_samples(staged, types.SimpleNamespace(eval=types.SimpleNamespace(split="test")), task, staged)
    assert not (staged / "samples.csv").exists()


def test_a_run_record_that_names_a_checkpoint_outside_its_run_is_not_a_finished_run(tmp_path, monkeypatch):
    from atnat.experiments.training import train

    checkpoint(tmp_path / "planted" / "x.ckpt")
    (tmp_path / "r" / "checkpoints").mkdir(parents=True)
    (tmp_path / "r" / "train.json").write_text(json.dumps({"evaluated_checkpoint": str(tmp_path / "planted" / "x.ckpt")}))
    monkeypatch.setattr(train, "settings_change", lambda run_dir, cfg: types.SimpleNamespace(training=[]))
    assert train.finished_training(tmp_path / "r", None) is None


@pytest.mark.parametrize("record", ['{"global_step": 1', "[1]", '{"global_step": NaN}', '{"global_step": "10"}'])
def test_a_damaged_run_record_is_named_by_status_and_progress_is_shown_only_as_numbers(tmp_path, record):
    from atnat.experiments.running.status import last_step
    from atnat.experiments.training.progress import describe, read_progress

    (tmp_path / "train.json").write_text(record)
    with pytest.raises(AtnatError, match=f"{tmp_path / 'train.json'}: not a finished run's record"):
        last_step(tmp_path)
    for progress in ("[1, 2]", '{"phase": "training", "step": 7, "loss": "x", "eta_s": Infinity}'):
        (tmp_path / "progress.json").write_text(progress)
        assert describe(read_progress(tmp_path)) in ("starting", "training step 7/?, ETA ?")


@pytest.mark.parametrize("environment,said", [(b'{"a": "\xff"}', "environment.json line 1 is not valid UTF-8"),
                                              (b'{"equivalence_margin": [1]}', "equivalence_margin is \\[1\\]"),
                                              (b'{"equivalence_margin": NaN}', "equivalence_margin is nan")])
def test_a_damaged_results_environment_is_named(tmp_path, environment, said):
    from atnat.experiments.reporting.results import load_results
    from tests import fixtures_results as fx

    root = fx.build_results(tmp_path)
    (root / "environment.json").write_bytes(environment)
    with pytest.raises(AtnatError, match=said):
        load_results(root).equivalence_margin


def test_an_export_never_replaces_a_folder_that_holds_more_than_an_export(tmp_path, capsys):
    """A run folder (checkpoints, logs) or a project with its own config.json would be deleted by the rename
    that puts an export in place; only a folder of an export's own files is replaced."""
    from atnat.experiments.cli.commands import main

    out = export(tmp_path)  # a new folder: written
    ckpt = tmp_path / "run" / "checkpoints" / "best.ckpt"
    assert main(["export", str(ckpt), str(out)]) == 0  # an export's own folder: replaced
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "config.json").write_text("{}")
    (project / "src" / "main.py").write_text("print(1)\n")
    capsys.readouterr()
    for target in (project, tmp_path / "run"):
        before = sorted(str(p) for p in target.rglob("*"))
        assert main(["export", str(ckpt), str(target)]) == 2
        assert "holds other things than an export" in capsys.readouterr().err
        assert sorted(str(p) for p in target.rglob("*")) == before


def test_a_line_holding_a_carriage_return_reads_back_as_one_line(tmp_path):
    """read_lines keeps a "\\r" inside a line, but references, hypotheses and distilled targets were read back with
    universal newlines, which split that line in two: hypotheses and references then no longer paired up (every
    paired p-value NaN, or "80 hypotheses vs 81 references")."""
    from atnat.experiments.evaluation.references import read_references, write_references
    from atnat.experiments.files import write_lines_atomic, written_lines

    write_references(tmp_path, [["a\rb", "c d"], ["x", "y\r z"]])
    assert read_references(tmp_path) == [["a\rb", "c d"], ["x", "y\r z"]]
    write_lines_atomic(tmp_path / "hyps.txt", ["one\rtwo", "three"])
    assert written_lines(tmp_path / "hyps.txt") == ["one\rtwo", "three"]


def test_resuming_passes_over_a_folder_named_like_a_checkpoint_and_names_an_empty_file_as_empty(tmp_path, capsys):
    """A review's findings: a folder named step-5.ckpt stopped the resume with IsADirectoryError, and a zero-byte
    last.ckpt was described as beginning with "binary data (b'')"."""
    checkpoint(tmp_path / "ckpts" / "best.ckpt", step=10)
    (tmp_path / "ckpts" / "step-5.ckpt").mkdir()
    (tmp_path / "ckpts" / "last.ckpt").write_bytes(b"")
    assert resume_point(tmp_path / "ckpts") == tmp_path / "ckpts" / "best.ckpt"
    err = capsys.readouterr().err
    assert "last.ckpt is not a PyTorch checkpoint: it is empty (0 bytes" in err and "binary data" not in err
    assert (tmp_path / "ckpts" / "step-5.ckpt").is_dir()  # not set aside: not ours to move
