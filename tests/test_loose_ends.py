"""Smaller silent failures: an empty teacher output, the steps trained, the
distillation signature, a blank-only training file, and `atnat list | head -1`."""
import json
import os
import subprocess
import sys
import types

import pytest

from atnat.core.errors import AtnatError
from atnat.experiments.config.run import run_config_from_dict
from atnat.experiments.data.tasks import ParallelOptions, ParallelTask
from atnat.experiments.running.cell import run_cell
from atnat.experiments.training import distill
from tests.test_grid import TINY


@pytest.fixture
def teacher(tmp_path, monkeypatch):
    """A teacher run folder whose decoding is replaced by `outputs` (no model is trained)."""
    module = types.SimpleNamespace(bleu_tokenize="13a", decoder=types.SimpleNamespace(max_source_length=100))
    monkeypatch.setattr(distill, "load_module", lambda path, map_location: (module, types.SimpleNamespace(encode=str.split)))
    run = tmp_path / "teacher"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "best.ckpt").write_bytes(b"weights")
    (run / "config.json").write_text("{}")

    def with_outputs(outputs):
        monkeypatch.setattr(distill, "distill_sources", lambda module, tok, sources, spec, **_: list(outputs))
        return run

    return with_outputs


def test_a_teacher_that_outputs_only_empty_lines_is_named_as_the_cause(teacher):
    run = teacher(["", " ", ""])
    with pytest.raises(AtnatError, match=rf"distillation: the teacher {run} produced only empty lines for the 3 "
                                         r"training sources \(strategy greedy"):
        distill.distilled_targets(run, ["a b", "c", "d"], ["a b", "c", "d"], {"name": "greedy"})


def test_distillation_meta_keeps_the_score_and_the_signature_apart(teacher):
    refs = ["a b c d e f", "g h i j k", "l m n o p"]
    run = teacher(refs[:2] + ["l m n x y"])
    lines, meta = distill.distilled_targets(run, refs, refs, {"name": "greedy"})
    assert lines == refs[:2] + ["l m n x y"]
    assert meta["bleu_signature"].startswith("nrefs:1|") and "tok:13a" in meta["bleu_signature"]
    assert "=" not in meta["bleu_signature"] and "BLEU" not in meta["bleu_signature"]
    assert 0 < meta["bleu_vs_references"] < 100
    assert json.loads((distill.cache_dir(run, {"name": "greedy"}) / "meta.json").read_text()) == meta


def test_distilled_targets_of_strategies_that_differ_only_in_an_unlabelled_option_are_kept_apart(teacher):
    """beam5 with alpha 0.6 and beam5 with alpha 1.0 share a label; a student asking for one must
    never be handed the other's cached targets (nor targets of other sources)."""
    src = ["a b", "c d", "e f"]
    run = teacher(["x 0.6", "y 0.6", "z 0.6"])
    short = {"name": "beam", "beam_size": 5, "alpha": 0.6}
    assert distill.distilled_targets(run, src, src, short)[0] == ["x 0.6", "y 0.6", "z 0.6"]
    teacher(["x 1.0", "y 1.0", "z 1.0"])
    lines, meta = distill.distilled_targets(run, src, src, {"name": "beam", "beam_size": 5, "alpha": 1.0})
    assert lines == ["x 1.0", "y 1.0", "z 1.0"] and meta["options"]["alpha"] == 1.0
    assert distill.distilled_targets(run, src, src, short)[0] == ["x 0.6", "y 0.6", "z 0.6"]  # both kept
    assert distill.distilled_targets(run, ["g h", "i j", "k l"], src, short)[0] == ["x 1.0", "y 1.0", "z 1.0"]


def test_train_steps_counts_the_steps_trained_not_the_best_checkpoints(tmp_path):
    raw = {**TINY["base"], "name": "steps", "decoder": {"name": "at"}, "eval": {"n_bootstrap": 10}}
    raw["train"] = {**raw["train"], "max_steps": 10, "val_every_steps": 4}  # validated (and best) at 4 or 8
    result = run_cell(run_config_from_dict(raw, "test"), tmp_path / "run")
    assert json.loads((tmp_path / "run" / "train.json").read_text())["global_step"] == 10
    assert [row["train_steps"] for row in result.rows] == [10]


def test_a_blank_only_training_file_names_the_split_and_files(tmp_path):
    for name, text in {"train.en": "\n \n\n", "train.de": "\n\n\n", "val.en": "a b\n", "val.de": "a b\n",
                       "test2016.en": "c\n", "test2016.de": "c\n"}.items():
        (tmp_path / name).write_text(text)
    task = ParallelTask(ParallelOptions(data_dir=str(tmp_path), vocab_size=20), cache_dir=tmp_path / "spm")
    with pytest.raises(AtnatError, match=rf"train split \({tmp_path}/train.en, {tmp_path}/train.de\): only blank "
                                         r"lines, no text to train the sentencepiece vocabulary on"):
        task.load()


@pytest.mark.slow
def test_atnat_list_into_a_closed_pipe_exits_quietly_like_a_unix_filter():
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "atnat.experiments.cli", "list"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    proc.stdout.close()  # the reader is gone before anything is written (`| head -0`)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and err == ""  # 128 + SIGPIPE, what `seq 1e9 | head -1` gives


def test_a_cache_written_under_an_older_label_of_the_same_options_is_reused(teacher, monkeypatch):
    """Labels grow as strategies show more options (beam5 became beam5-alpha=0.6); the hash of every
    option names the cache, so a teacher's targets decoded under the old label are not decoded again."""
    src = ["a b", "c d", "e f"]
    run = teacher(["x", "y", "z"])
    spec = {"name": "beam", "beam_size": 5, "alpha": 0.6}
    distill.distilled_targets(run, src, src, spec)
    written = distill.cache_dir(run, spec)
    older = written.with_name("beam5-" + written.name.rsplit("-", 1)[1])
    written.rename(older)

    def decode_again(*_, **__):
        raise AssertionError("decoded again although the targets are cached")

    monkeypatch.setattr(distill, "distill_sources", decode_again)
    assert distill.distilled_targets(run, src, src, spec)[0] == ["x", "y", "z"]
    assert distill.cache_dir(run, spec) == older and not written.exists()


def test_a_cache_stamped_by_size_and_time_before_checksums_is_reused_for_the_same_file(teacher, monkeypatch):
    """Older versions stamped a teacher's weights by size and mtime; with a checksum beside the file
    the stamp is its sha256. The same untouched file keeps its cache; a rewritten one does not."""
    from atnat.experiments.modelfiles.checkpoints import write_checksum

    src = ["a b", "c d", "e f"]
    run = teacher(["x", "y", "z"])
    _, meta = distill.distilled_targets(run, src, src, {"name": "greedy"})
    assert not meta["checkpoint"].startswith("sha256-")  # stamped as before checksums
    write_checksum(run / "checkpoints" / "best.ckpt")
    teacher(["decoded", "again", "!"])
    assert distill.distilled_targets(run, src, src, {"name": "greedy"})[0] == ["x", "y", "z"]
    weights = run / "checkpoints" / "best.ckpt"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))  # rewritten since
    assert distill.distilled_targets(run, src, src, {"name": "greedy"})[0] == ["decoded", "again", "!"]


def loose_teachers(folder, tmp_path, monkeypatch) -> list:
    """Two checkpoint files a.ckpt and b.ckpt in `folder`, the atnat cache under tmp_path, and decoding counted:
    -> the list that gets an entry per decode."""
    monkeypatch.setattr(distill, "CACHE_DIR", tmp_path / "cache")
    folder.mkdir(parents=True)
    (folder / "a.ckpt").write_bytes(b"A")
    (folder / "b.ckpt").write_bytes(b"BB")
    decoded = []
    monkeypatch.setattr(distill, "distill_sources", lambda module, tok, sources, spec, **_: decoded.append(1) or ["x", "y"])
    return decoded


def test_a_teacher_checkpoint_outside_a_run_keeps_its_cache_in_the_atnat_cache(teacher, tmp_path, monkeypatch):
    """Two checkpoint files side by side in a data folder: each gets its own cache, in the atnat cache,
    and nothing is written beside them."""
    teacher(["x", "y"])
    folder = tmp_path / "data" / "teachers"
    decoded = loose_teachers(folder, tmp_path, monkeypatch)
    for weights in ("a", "b", "a", "b"):
        distill.distilled_targets(folder / f"{weights}.ckpt", ["s", "t"], ["x", "y"], {"name": "greedy"})
    assert len(decoded) == 2  # each teacher once
    assert sorted(p.name for p in (tmp_path / "data").rglob("*")) == ["a.ckpt", "b.ckpt", "teachers"]
    caches = {distill.cache_dir(folder / f"{w}.ckpt", {"name": "greedy"}) for w in "ab"}
    assert len(caches) == 2 and all(tmp_path / "cache" in c.parents for c in caches)
    run = teacher(["x", "y"])  # a checkpoint inside a run: the run's folder, as before
    assert distill.teacher_dir(run / "checkpoints" / "best.ckpt") == run == distill.teacher_dir(run)


def test_checkpoints_in_a_folder_named_checkpoints_or_of_one_run_keep_caches_of_their_own(teacher, tmp_path, monkeypatch):
    """models/checkpoints/{a,b}.ckpt (no run) shared one cache beside them, and a run and its last.ckpt shared the
    run's: used in turns, each teacher threw the other's targets away and decoded again."""
    run = teacher(["x", "y"])
    (run / "checkpoints" / "last.ckpt").write_bytes(b"other weights")
    loose = tmp_path / "models" / "checkpoints"
    decoded = loose_teachers(loose, tmp_path, monkeypatch)
    for pair in ((loose / "a.ckpt", loose / "b.ckpt"), (run, run / "checkpoints" / "last.ckpt")):
        decoded.clear()
        for weights in pair * 2:
            distill.distilled_targets(weights, ["s", "t"], ["x", "y"], {"name": "greedy"})
        assert len(decoded) == 2  # each teacher once
    assert not (tmp_path / "models" / "distill").exists()  # nothing written beside the loose checkpoints


@pytest.mark.parametrize("damage", [("meta.json", b'{"checkpoint": '), ("meta.json", b"\xff\xfe"), ("train.txt", b"\xff\n\xff\n"),
                                    ("train.txt", b"x\nz\n"), ("meta.json", b'{"checkpoint": ["a list"]}')])
def test_a_damaged_distillation_cache_is_decoded_again_and_named(teacher, capsys, damage):
    run = teacher(["x", "y"])
    distill.distilled_targets(run, ["s", "t"], ["x", "y"], {"name": "greedy"})
    cache = distill.cache_dir(run, {"name": "greedy"})
    (cache / damage[0]).write_bytes(damage[1])
    teacher(["again", "!"])
    assert distill.distilled_targets(run, ["s", "t"], ["x", "y"], {"name": "greedy"})[0] == ["again", "!"]
    assert f"the distillation cache {cache} is damaged" in capsys.readouterr().err
    assert distill.distilled_targets(run, ["s", "t"], ["x", "y"], {"name": "greedy"})[0] == ["again", "!"]  # written anew


@pytest.mark.parametrize("teacher_decoder, vocab, expected", [
    ("cmlm", 6, r"a teacher is an AT \(capability 'step'.*'cmlm'"),
    ("at", 7, r"its vocabulary is not the model's"),
])
def test_a_run_whose_teacher_cannot_verify_is_refused_before_it_trains(tmp_path, monkeypatch, teacher_decoder, vocab,
                                                                       expected):
    """A run evaluating speculative decoding with distill.teacher a non-AT run, or an AT of another vocabulary,
    trained to the end and only then failed (an IndexError for the vocabulary): refused before training."""
    from atnat.experiments.running import cell as cell_module

    base = TINY["base"]
    strategies = ["greedy"] if teacher_decoder == "at" else [{"name": "mask-predict", "iterations": 1}]
    teacher_raw = {**base, "name": "teacher", "decoder": {"name": teacher_decoder},
                   "eval": {"n_bootstrap": 10, "strategies": strategies},
                   "task": {**base["task"], "vocab": vocab}, "train": {**base["train"], "max_steps": 2, "val_every_steps": 2}}
    run_cell(run_config_from_dict(teacher_raw, "test"), tmp_path / "teacher")
    student = {**base, "name": "student", "decoder": {"name": "cmlm"}, "distill": {"teacher": str(tmp_path / "teacher"),
               "targets": False}, "eval": {"n_bootstrap": 10, "strategies": [{"name": "speculative", "block": 2}]}}
    monkeypatch.setattr(cell_module, "train", lambda *a, **k: pytest.fail("trained before refusing the teacher"))
    with pytest.raises(AtnatError, match=expected):
        run_cell(run_config_from_dict(student, "test"), tmp_path / "student")
