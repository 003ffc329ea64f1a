"""Each failure is one message naming what and where, and loses nothing: a
damaged sentencepiece cache, a full disk, a file given as --results, Ctrl-C in every mode, a
results record of the wrong shape, an export config with a bad value, a closed pipe, file modes."""
import json
import os
import subprocess
import sys

import pytest
import yaml

from atnat.core.errors import AtnatError
from atnat.experiments import files
from atnat.experiments.cli.commands import main
from atnat.experiments.data.tokenize import SentencePieceTokenizer
from atnat.experiments.training import train as train_module
from tests.test_config_values import RUN
from tests.test_grid import TINY, write_grid

TEXT = ["the cat sees a dog", "a red house", "the dog likes the tree", "a small blue cat runs"] * 20


@pytest.mark.parametrize("damage", [b"", b"\x0a\x05trunc"])
@pytest.mark.parametrize("record", ["kept", "removed", "matching"])
def test_a_damaged_sentencepiece_cache_is_named_set_aside_and_rebuilt(tmp_path, capsys, damage, record):
    """Its recorded sha256 kept (a mismatch), gone, or rewritten to match the damage: trials found an empty
    model with no or a matching .sha256 loaded, then failed every run at its first encode."""
    import hashlib

    first = SentencePieceTokenizer.train(TEXT, vocab_size=30, cache_dir=tmp_path)
    (cached,) = tmp_path.glob("spm-*.model")
    cached.write_bytes(damage)
    sha = cached.with_name(cached.name + ".sha256")
    if record == "removed":
        sha.unlink()
    elif record == "matching":
        sha.write_text(f"{hashlib.sha256(damage).hexdigest()}  {cached.name}\n")
    again = SentencePieceTokenizer.train(TEXT, vocab_size=30, cache_dir=tmp_path)
    err = capsys.readouterr().err
    assert f"the cached sentencepiece model {cached} is damaged" in err and "trained again" in err
    assert again.encode("the cat") == first.encode("the cat")
    assert list(tmp_path.glob("spm-*.model.damaged-*"))


def test_a_cached_sentencepiece_model_without_its_recorded_sha256_is_not_trusted(tmp_path, capsys):
    """A whole model of other text in its place, its .sha256 gone: loaded as if it were this text's."""
    first = SentencePieceTokenizer.train(TEXT, vocab_size=30, cache_dir=tmp_path / "a")
    other = SentencePieceTokenizer.train([t.upper() for t in TEXT], vocab_size=30, cache_dir=tmp_path / "b")
    (cached,) = (tmp_path / "a").glob("spm-*.model")
    cached.write_bytes(other.proto)
    cached.with_name(cached.name + ".sha256").unlink()
    again = SentencePieceTokenizer.train(TEXT, vocab_size=30, cache_dir=tmp_path / "a")
    assert "no sha256 recorded" in capsys.readouterr().err
    assert again.proto == first.proto


def test_a_full_disk_names_the_file_and_keeps_the_old_one(tmp_path, monkeypatch):
    target = tmp_path / "results.csv"
    target.write_text("old\n")

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(files.UnwritableError, match=f"cannot write {target}: the disk is full: free space"):
        files.write_text_atomic(target, "new\n")
    assert target.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["results.csv"]
    with pytest.raises(files.UnwritableError, match="a part of the path is a file"):
        files.write_text_atomic(target / "inside.txt", "x")


def test_results_naming_a_file_is_one_message(tmp_path, capsys):
    grid = write_grid(tmp_path)
    (tmp_path / "afile").write_text("")
    for command in (["run", str(grid)], ["status", str(grid)], ["cell", str(grid), "at-s1"]):
        assert main([*command, "--results", str(tmp_path / "afile")]) == 2
        assert "this is a file; give a folder" in capsys.readouterr().err


class CtrlC:
    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step >= 2:
            raise KeyboardInterrupt


def with_ctrl_c(monkeypatch):
    import pytorch_lightning as pl

    make = train_module.make_trainer

    def interrupted(*args, **kwargs):
        trainer = make(*args, **kwargs)
        trainer.callbacks.insert(0, type("CtrlC", (CtrlC, pl.Callback), {})())
        return trainer

    monkeypatch.setattr(train_module, "make_trainer", interrupted)


def test_ctrl_c_in_train_and_in_a_serial_grid_exits_130_with_the_resume_hint(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with_ctrl_c(monkeypatch)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(RUN))
    assert main(["train", str(config), "--output-dir", str(tmp_path / "run")]) == 130
    err = capsys.readouterr().err
    assert "interrupted; finished work is kept (run the same command to resume)" in err
    assert f"{tmp_path / 'run'} starts again from step 0 (no checkpoint saved yet)" in err
    phase = json.loads((tmp_path / "run" / "progress.json").read_text())["phase"]
    assert phase == "stopped at step 2 while training (interrupted)"  # not "training" for a stopped run
    assert main(["run", str(write_grid(tmp_path)), "--results", "res"]) == 130
    err = capsys.readouterr().err
    assert "run the same command to resume" in err
    # which cells lose their training: interrupted at step 2, before the first checkpoint (step 4)
    assert "starting again from step 0 (no checkpoint saved yet): at-s1" in err


def test_results_records_of_the_wrong_shape_are_named_not_a_crash(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path, {**TINY, "cells": {"at": TINY["cells"]["at"]}})
    assert main(["run", str(grid), "--results", "res"]) == 0
    record = tmp_path / "res" / "tiny" / "runs" / "at-s1" / "metrics.json"
    record.write_text("[]")
    assert main(["status", str(grid), "--results", "res"]) == 0
    shown = record.relative_to(tmp_path)
    out = capsys.readouterr().out
    assert "record damaged" in out and "metrics.json: not a results record of atnat: expected a JSON object" in out
    record.write_text(json.dumps({"status": "ok"}))
    assert main(["run", str(grid), "--results", "res"]) == 0  # counted unfinished: evaluated again, not retrained
    assert f"{shown}: not a results record of atnat: rows is not a list" in capsys.readouterr().err
    assert json.loads(record.read_text())["rows"]


def test_an_export_config_with_a_bad_value_is_one_message(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(RUN))
    assert main(["train", str(config), "--output-dir", str(tmp_path / "run")]) == 0
    assert json.loads((tmp_path / "run" / "progress.json").read_text())["phase"] == "done"
    out = tmp_path / "export"
    assert main(["export", str(tmp_path / "run"), str(out)]) == 0
    assert os.stat(out / "model.safetensors").st_mode & 0o777 == files.FILE_MODE
    exported = json.loads((out / "config.json").read_text())
    exported["hyper_parameters"]["model"]["d_model"] = -4
    (out / "config.json").write_text(json.dumps(exported))
    with pytest.raises(AtnatError, match=rf"{out / 'config.json'}: hyper_parameters: model: d_model must be"):
        from atnat.experiments.modelfiles.export import load_export

        load_export(out)


@pytest.mark.slow
def test_status_into_a_closed_pipe_exits_141(tmp_path):
    """`atnat status | head -1`: the reader is gone before the table is written (its read end closed
    first, so the outcome does not depend on who is faster)."""
    grid = write_grid(tmp_path)
    read, write = os.pipe()
    os.close(read)
    code = ("import sys; from atnat.experiments.cli.commands import main; "
            f"sys.exit(main(['status', {str(grid)!r}, '--results', {str(tmp_path)!r}]))")
    try:
        proc = subprocess.run([sys.executable, "-c", code], stdout=write, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write)
    assert proc.returncode == 141 and proc.stderr == "", proc.stderr


def test_a_cache_folder_that_is_a_file_is_named_as_the_cache(tmp_path):
    """A trial's finding: ATNAT_CACHE naming a file gave a bare `.../spm: Not a directory`."""
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(RUN))
    (tmp_path / "cachefile").write_text("")
    done = subprocess.run([sys.executable, "-m", "atnat.experiments.cli", "train", str(config), "--output-dir",
                           str(tmp_path / "run")], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "ATNAT_CACHE": str(tmp_path / "cachefile"), "OMP_NUM_THREADS": "1"})
    assert done.returncode == 1, done.stderr
    assert f"the cache folder ($ATNAT_CACHE, else ~/.cache/atnat; here {tmp_path / 'cachefile'}) must be a folder " \
           "this process can write" in done.stderr
