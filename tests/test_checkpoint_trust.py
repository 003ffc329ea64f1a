"""Nothing planted runs, nothing damaged is trusted, nothing changed is filed under the old name
a checkpoint carrying a pickled callable runs nothing through any
command; a checkpoint whose bytes changed since it was written is set aside (resume) or refused
(translate); resuming under other settings is refused, or recorded and applied when asked for."""
import json
import os
import pickle
import shutil

import pytest
import torch
import yaml

from atnat.experiments.cli.commands import main
from atnat.experiments.modelfiles.checkpoints import (
    CheckpointRefused,
    average_checkpoints,
    checksum_path,
    read_checkpoint,
    write_checksum,
)
from atnat.experiments.training.resume import resume_point

RUN = {
    "name": "trust",
    "task": {"name": "copy", "vocab": 6, "min_len": 2, "max_len": 4, "n_train": 120, "n_valid": 6, "n_test": 6},
    "decoder": {"name": "at"},
    "model": {"d_model": 16, "n_heads": 2, "ffn_dim": 32, "encoder_layers": 1, "decoder_layers": 1, "dropout": 0.0},
    "optim": {"lr": 0.003, "warmup_steps": 4},
    "train": {"max_steps": 8, "max_tokens": 96, "val_every_steps": 4, "progress_bar": False, "num_threads": 1,
              "keep": 2, "average": "last"},
    "eval": {"n_bootstrap": 5},
}


class Planted:
    """Unpickling this creates the marker file: the stand-in for `os.system(...)`."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("trust")
    config = root / "run.yaml"
    config.write_text(yaml.safe_dump(RUN))
    assert main(["train", str(config), "--output-dir", str(root / "run")]) == 0
    return root


@pytest.fixture
def run(trained, tmp_path):
    shutil.copytree(trained / "run", tmp_path / "run")
    shutil.copy(trained / "run.yaml", tmp_path / "run.yaml")
    return tmp_path / "run"


class PlantedShell:
    """Unpickling this runs a shell command (os.system), which creates the marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def plant(path, marker, *, with_checksum=True, payload=Planted):
    """A checkpoint-shaped file whose unpickling would run code; by default with a matching sha256
    beside it, as a careful attacker would write."""
    torch.save({"global_step": 10**6, "state_dict": {}, "hyper_parameters": {}, "payload": payload(marker)}, path)
    if with_checksum:
        write_checksum(path)


@pytest.mark.parametrize("payload, named", [(PlantedShell, "posix.system"), (None, "pickle opcode")])
def test_what_tensors_only_loading_refuses_is_named_without_torchs_advice_to_load_it_anyway(tmp_path, capsys,
                                                                                           payload, named):
    """Trials: a checkpoint planting os.system was called "truncated or corrupt" and quoted torch's advice to
    load it with weights_only=False (torch words that refusal differently from one of builtins.open)."""
    marker, evil = tmp_path / "PLANTED_CODE_RAN", tmp_path / "evil.ckpt"
    if payload is None:  # a bare pickle stream with an opcode the tensors-only unpickler does not take
        evil.write_bytes(pickle.dumps({"payload": PlantedShell(marker)}, protocol=4))
    else:
        plant(evil, marker, payload=payload)
    assert main(["translate", "--checkpoint", str(evil)]) == 2
    assert not marker.exists()
    err = capsys.readouterr().err
    assert f"checkpoint {evil} holds " in err and named in err and "nothing in it was run" in err
    assert "weights_only" not in err and "trusted source" not in err and "file an issue" not in err


def test_a_planted_last_checkpoint_runs_nothing_on_resume(tmp_path, capsys):
    marker = tmp_path / "PLANTED_CODE_RAN"
    config, run = tmp_path / "run.yaml", tmp_path / "run"
    config.write_text(yaml.safe_dump(RUN))
    assert main(["train", str(config), "--output-dir", str(run)]) == 0
    last = run / "checkpoints" / "last.ckpt"
    plant(last, marker)
    (run / "metrics.json").unlink()
    (run / "train.json").unlink()  # training is not finished: `atnat train` resumes
    assert main(["train", str(config), "--output-dir", str(run)]) == 0
    assert not marker.exists(), "code planted in last.ckpt ran on resume"
    err = capsys.readouterr().err
    assert f"checkpoint {last} holds a pickled object" in err and "set aside as last.ckpt.damaged-" in err


@pytest.mark.parametrize("command", ["translate", "evaluate", "export", "distill", "train-init"])
def test_a_planted_checkpoint_runs_nothing_through_any_command(run, tmp_path, capsys, monkeypatch, command):
    marker = tmp_path / "PLANTED_CODE_RAN"
    evil = tmp_path / "evil.ckpt"
    plant(evil, marker)
    src = tmp_path / "src.txt"
    src.write_text("w1 w2\n")
    monkeypatch.setattr("sys.stdin", open(src))
    argv = {"translate": ["translate", "--checkpoint", str(evil)],
            "evaluate": ["evaluate", "--checkpoint", str(evil), "--src", str(src), "--ref", str(src), "--no-speed"],
            "export": ["export", str(evil), str(tmp_path / "out")],
            "distill": ["distill", "--teacher", str(evil), "--input", str(src), "--output", str(tmp_path / "d.txt")],
            "train-init": ["train", str(tmp_path / "run.yaml"), "--output-dir", str(tmp_path / "new"),
                           "--set", f"train.init_from={evil}"]}[command]
    assert main(argv) == 2
    assert not marker.exists(), f"code planted in a checkpoint ran through atnat {command}"
    err = capsys.readouterr().err
    assert f"checkpoint {evil} holds a pickled object (" in err and ") that tensors-only loading refuses" in err
    assert "weights_only" not in err and "add_safe_globals" not in err  # torch's advice to load it anyway is not ours


@pytest.mark.parametrize("content, said", [
    (b"cell,strategy,bleu\nat-s1,greedy,30.1\n", "it begins with text"),
    (b"3f2a9c  best.ckpt\n", "it begins with text"),
    (b"\x00\x01\x02\x03rest", "it begins with binary data"),
])
def test_a_file_that_is_no_checkpoint_is_named_as_such_not_as_planted(tmp_path, capsys, content, said):
    """Trials: translate given a CSV or a .sha256 file said it "holds pickled objects ... planted?"."""
    wrong = tmp_path / "given.ckpt"
    wrong.write_bytes(content)
    assert main(["translate", "--checkpoint", str(wrong)]) == 2
    err = capsys.readouterr().err
    assert f"checkpoint {wrong} is not a PyTorch checkpoint: {said}" in err and "planted" not in err
    for path, problem in ((tmp_path, "does not exist"), ("/dev/zero", "is a device or socket, not a regular file")):
        assert main(["translate", "--checkpoint", str(path)]) == 2
        assert problem in capsys.readouterr().err


def test_averaging_refuses_a_planted_checkpoint(run, tmp_path):
    marker = tmp_path / "PLANTED_CODE_RAN"
    steps = sorted((run / "checkpoints").glob("step-*.ckpt"))
    plant(steps[0], marker)
    with pytest.raises(CheckpointRefused, match=str(steps[0])):
        average_checkpoints(steps, run / "checkpoints" / "averaged.ckpt", {})
    assert not marker.exists()


def flip(path, at: int, count: int = 400) -> None:
    data = bytearray(path.read_bytes())
    for i in range(at, min(at + count, len(data))):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


def test_flipped_bytes_in_last_checkpoint_are_set_aside_and_resume_falls_back(run, capsys):
    ckpts = run / "checkpoints"
    last = ckpts / "last.ckpt"
    flip(last, len(last.read_bytes()) // 2)  # lands in the optimizer state: torch would load it silently
    chosen = resume_point(ckpts)
    err = capsys.readouterr().err
    assert chosen is not None and chosen.name != "last.ckpt"
    assert f"checkpoint {last} does not match the sha256 recorded in last.ckpt.sha256" in err
    assert list(ckpts.glob("last.ckpt.damaged-*")) and list(ckpts.glob("last.ckpt.damaged-*.sha256"))


def test_flipped_bytes_in_the_evaluated_checkpoint_stop_translate(run, tmp_path, capsys, monkeypatch):
    best = json.loads((run / "train.json").read_text())["evaluated_checkpoint"]
    target = run / "checkpoints" / best
    flip(target, 2000, 50)
    src = tmp_path / "src.txt"
    src.write_text("w1 w2\n")
    monkeypatch.setattr("sys.stdin", open(src))
    assert main(["translate", "--checkpoint", str(run)]) == 2
    assert f"checkpoint {target} does not match the sha256" in capsys.readouterr().err


def test_a_checkpoint_without_its_checksum_is_refused_until_one_is_recorded(run, tmp_path, capsys, monkeypatch):
    """A trial's finding: deleting a checkpoint's .sha256 turned its verification off (a warning, then a damaged
    checkpoint decoded with exit code 0); and a text file given as a checkpoint was first said to be "loaded"
    before being refused. A checkpoint without its record is refused (what to do if you trust it: said); one
    killed before its record was written is set aside on resume, as a damaged one is."""
    best = json.loads((run / "train.json").read_text())["evaluated_checkpoint"]
    target = run / "checkpoints" / best
    checksum_path(target).unlink()
    flip(target, len(target.read_bytes()) // 2, 8)
    src = tmp_path / "src.txt"
    src.write_text("w1 w2\n")
    for _ in range(2):
        monkeypatch.setattr("sys.stdin", open(src))
        assert main(["translate", "--checkpoint", str(run)]) == 2
        err = capsys.readouterr().err
        assert f"checkpoint {target} has no {target.name}.sha256 beside it" in err and "sha256sum" in err, err
    write_checksum(target)  # the user's own decision: trust the file as it is
    monkeypatch.setattr("sys.stdin", open(src))
    main(["translate", "--checkpoint", str(run)])
    assert "sha256" not in capsys.readouterr().err
    text = tmp_path / "train.en"
    text.write_text("a man .\n")
    assert main(["translate", "--checkpoint", str(text)]) == 2
    err = capsys.readouterr().err
    assert err.count("atnat") == 1 and "is not a PyTorch checkpoint: it begins with text" in err and "loaded" not in err
    last = run / "checkpoints" / "last.ckpt"
    checksum_path(last).unlink()  # killed between the checkpoint's rename and its record
    chosen = resume_point(run / "checkpoints")
    assert chosen is not None and chosen.name != "last.ckpt" and list((run / "checkpoints").glob("last.ckpt.damaged-*"))
    assert f"checkpoint {last} has no last.ckpt.sha256 beside it" in capsys.readouterr().err


def test_checkpoints_carry_a_checksum_that_sha256sum_reads(run):
    for ckpt in (run / "checkpoints").glob("*.ckpt"):
        digest, name = checksum_path(ckpt).read_text().split()
        assert name == ckpt.name and len(digest) == 64
        read_checkpoint(ckpt)  # verified


def test_resuming_under_other_settings_is_refused_then_recorded_and_applied_on_request(run, tmp_path, capsys):
    config = tmp_path / "run.yaml"
    (run / "metrics.json").unlink()
    (run / "train.json").unlink()  # interrupted at step 8; now asked to go on to 12 with another lr
    args = ["train", str(config), "--output-dir", str(run), "--set", "train.max_steps=12", "--set", "optim.lr=0.0001",
            "--set", "model.dropout=0.1"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "was trained with other settings" in err
    assert "`atnat run GRID --stale rerun` trains it anew" in err  # a grid's cell: not a flag `atnat run` lacks
    assert "optim.lr: 0.003 -> 0.0001" in err and "model.dropout: 0.0 -> 0.1" in err and "train.max_steps: 8 -> 12" in err
    assert not (run / "settings_changes.json").exists()
    assert json.loads((run / "config.json").read_text())["optim"]["lr"] == 0.003  # the record is untouched
    assert main(args + ["--allow-settings-change"]) == 0
    history = json.loads((run / "settings_changes.json").read_text())
    assert history[0]["step"] == 8 and {c["key"] for c in history[0]["changes"]} == {
        "optim.lr", "model.dropout", "train.max_steps"}
    recorded = json.loads((run / "config.json").read_text())
    assert recorded["optim"]["lr"] == 0.0001 and recorded["train"]["max_steps"] == 12
    state = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert state["global_step"] == 12
    lr = state["optimizer_states"][0]["param_groups"][0]["lr"]
    assert lr == pytest.approx(0.0001 * (4 / 13) ** 0.5)  # the next step's lr on the new peak, not 0.003's


def test_a_settings_change_that_changes_the_models_shape_is_refused_and_records_nothing(run, tmp_path, capsys):
    """Trials: --allow-settings-change with another d_model crashed on a size mismatch after config.json and
    settings_changes.json had recorded the new shape, so that resuming with the original config was refused."""
    config = tmp_path / "run.yaml"
    (run / "metrics.json").unlink(missing_ok=True)
    (run / "train.json").unlink(missing_ok=True)
    before = {name: (run / name).read_bytes() for name in ("config.json",) if (run / name).exists()}
    changes = (run / "settings_changes.json").read_bytes() if (run / "settings_changes.json").exists() else None
    args = ["train", str(config), "--output-dir", str(run), "--set", "model.ffn_dim=24", "--allow-settings-change"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "cannot change the model's shape" in err and "model.ffn_dim" in err and "Traceback" not in err
    assert {name: (run / name).read_bytes() for name in before} == before
    assert ((run / "settings_changes.json").read_bytes() if (run / "settings_changes.json").exists() else None) == changes
    assert main(args[:-1]) == 2  # without the flag: it said to resume with --allow-settings-change, which cannot
    err = capsys.readouterr().err
    assert "cannot change the model's shape (not even with --allow-settings-change)" in err, err


def test_a_run_records_every_setting_with_its_default(run):
    recorded = json.loads((run / "config.json").read_text())
    assert recorded["model"]["pre_ln"] is False and recorded["loss"]["label_smoothing"] == 0.1
    assert recorded["eval"]["strategies"][0]["name"] == "greedy" and "max_len_a" in recorded["eval"]["strategies"][0]
    assert recorded["decoder"]["input_noise"] == 0.0 and recorded["train"]["divergence_factor"] == 10.0
    assert os.stat(run / "config.json").st_mode & 0o777 == 0o644 or os.umask(0o022) != 0o022


def test_weights_that_do_not_fit_their_model_are_named(run, capsys):
    """Trials: a checkpoint lacking one tensor said only "Error(s) in loading state_dict for Seq2SeqModule"."""
    best = run / "checkpoints" / "last.ckpt"
    state = torch.load(best, weights_only=True)
    legacy = {}  # as written before the fused attention projection (q_proj + kv_proj): still loads
    for key, value in state["state_dict"].items():
        head, _, kind = key.rpartition(".in_")
        if kind in ("weight", "bias") and head:
            d = value.shape[0] // 3
            legacy |= {f"{head}.q_proj.{kind}": value[:d], f"{head}.kv_proj.{kind}": value[d:]}
        else:
            legacy[key] = value
    assert len(legacy) > len(state["state_dict"])
    torch.save({**state, "state_dict": legacy}, best)
    write_checksum(best)
    assert main(["export", str(best), str(run.parent / "exported")]) == 0, capsys.readouterr().err
    name = sorted(state["state_dict"])[0]
    for change, said in ((lambda sd: sd.pop(name), f"missing {name}"),
                         (lambda sd: sd.update(extra_tensor=torch.zeros(2)), "no such parameter: extra_tensor"),
                         (lambda sd: sd.update({name: torch.zeros(3, 1)}), f"{name} is (3, 1), the model's")):
        changed = {**state, "state_dict": dict(state["state_dict"])}
        change(changed["state_dict"])
        torch.save(changed, best)
        write_checksum(best)
        assert main(["translate", "--checkpoint", str(best)]) == 2
        err = capsys.readouterr().err
        assert f"checkpoint {best}: its weights do not fit the model its hyper-parameters describe ({said}" in err
