"""Every user mistake gets one clear error naming what and where (and nothing is lost)."""
import re

import pytest

import atnat.decoding  # noqa: F401
import atnat.models.decoders  # noqa: F401
from atnat.core.errors import AtnatError
from atnat.core.registry import Registry, RegistryError
from atnat.decoding.base import STRATEGIES
from atnat.experiments.config.run import ConfigError, run_config_from_dict
from atnat.experiments.data.tasks import TASKS, ParallelOptions, ParallelTask

BASE = {"name": "x", "task": {"name": "copy"}, "decoder": {"name": "at"}}


def config(**upd):
    return run_config_from_dict({**BASE, **upd}, "grid.yaml")


def test_unknown_top_level_key_names_file_key_and_valid_keys():
    with pytest.raises(ConfigError, match=r"grid.yaml: unknown key 'trian' \(did you mean 'train'\?\); valid keys: name, task"):
        config(trian={})


def test_unknown_nested_key():
    with pytest.raises(ConfigError, match=r"grid.yaml: train: unknown key 'max_step' \(did you mean 'max_steps'\?\); "
                                         r"valid keys: .*max_steps"):
        config(train={"max_step": 3})


def test_unknown_decoder_lists_known_ones():
    with pytest.raises(ConfigError, match=r"decoder.name: unknown decoder 'transformr'; known decoders: .*at"):
        config(decoder={"name": "transformr"})


def test_unknown_task_and_strategy():
    with pytest.raises(ConfigError, match=r"unknown task 'cpy'; known tasks: .*copy.*reverse"):
        config(task={"name": "cpy"})
    with pytest.raises(ConfigError, match=r"eval.strategies\[1\].name: unknown strategy 'bean'; known strategies: .*beam"):
        config(eval={"strategies": ["greedy", {"name": "bean"}]})


def test_unknown_option_of_a_decoder_task_and_strategy():
    with pytest.raises(ConfigError, match=r"decoder \(at\): unknown key 'beam'; valid keys: input_noise"):
        config(decoder={"name": "at", "beam": 3})
    with pytest.raises(ConfigError, match=r"task \(copy\): unknown key 'length'; valid keys: vocab"):
        config(task={"name": "copy", "length": 3})
    with pytest.raises(ConfigError, match=r"strategies\[0\] \(beam\): unknown key 'beam' \(did you mean 'beam_size'\?\); valid keys: .*beam_size"):
        config(eval={"strategies": [{"name": "beam", "beam": 3}]})


def test_bad_option_value_is_named():
    with pytest.raises(ConfigError, match=r"decoder options: scheduled_sampling must be one of none, linear, exponential, inverse_sigmoid, got 'sometimes'"):
        config(decoder={"name": "at", "scheduled_sampling": "sometimes"})


def test_strategy_that_cannot_drive_the_decoder_is_refused_at_config_time():
    with pytest.raises(ConfigError, match=r"strategy 'mask-predict' cannot drive decoder 'at'.*usable: beam, greedy"):
        config(eval={"strategies": ["mask-predict"]})


def test_registry_rejects_duplicates_and_wrong_base():
    class Base:
        pass

    reg = Registry("widget", Base)

    @reg.register("a")
    class A(Base):
        pass

    with pytest.raises(RegistryError, match="widget 'a' is already registered"):
        @reg.register("a")
        class B(Base):
            pass

    with pytest.raises(RegistryError, match="must be a subclass of Base"):
        reg.register("c")(int)
    with pytest.raises(RegistryError, match="unknown widget 'z'; known widgets: a"):
        reg.get("z")


def parallel_task(tmp_path, **files):
    paths = {}
    for key, content in files.items():
        p = tmp_path / key
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
        paths[key] = str(p)
    return ParallelTask(ParallelOptions(files=paths, vocab_size=30), cache_dir=tmp_path / "spm")


GOOD = "a b c\nd e f\n"


def all_files(**override):
    files = {f"{s}_{side}": GOOD for s in ("train", "valid", "test") for side in ("src", "tgt")}
    files.update(override)
    return files


def test_unequal_line_counts_name_both_files_and_counts(tmp_path):
    task = parallel_task(tmp_path, **all_files(valid_tgt="x\ny\nz\n"))
    with pytest.raises(AtnatError, match=r"valid: .*valid_src has 2 lines but .*valid_tgt has 3"):
        task.load()


def test_missing_and_empty_files(tmp_path):
    task = parallel_task(tmp_path, **all_files(test_src=""))
    with pytest.raises(AtnatError, match=r"test source: .*test_src is empty"):
        task.load()
    task = ParallelTask(ParallelOptions(data_dir=str(tmp_path / "nowhere")), cache_dir=tmp_path)
    with pytest.raises(AtnatError, match=r"train source: .*nowhere/train.en does not exist$"):
        task.load()


def test_a_missing_data_set_that_atnat_can_fetch_says_how(tmp_path):
    task = ParallelTask(ParallelOptions(data_dir="../elsewhere/multi30k", src="en", tgt="de"), cache_dir=tmp_path)
    with pytest.raises(AtnatError, match=r"train.en does not exist; fetch the data set there first: "
                                         r"atnat data multi30k \.\./elsewhere/multi30k$"):
        task.check_files()


def test_a_folder_a_fifo_and_a_device_are_named_for_what_they_are(tmp_path):
    """Trials: a directory, a FIFO and /dev/zero were each reported as "does not exist"."""
    import os

    from atnat.experiments.data.tasks import read_lines

    os.mkfifo(tmp_path / "fifo")
    for path, said in ((tmp_path, "is a folder, not a file"), (tmp_path / "fifo", "is a FIFO, not a regular file"),
                       ("/dev/zero", "is a device or socket, not a regular file")):
        with pytest.raises(AtnatError, match=f"train source: {path} {said}"):
            read_lines(path, "train source")


def test_a_missing_data_file_is_refused_when_the_config_is_read(tmp_path, capsys):
    """Trials: `atnat run --dry-run` accepted a grid whose training file was missing; every cell then failed
    after ~11 s with only "failed" on the terminal. Now the config check names the file."""
    import yaml

    from atnat.experiments.cli.commands import main

    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "val", "test2016"):
        for lang in ("en", "de"):
            (data / f"{split}.{lang}").write_text("a b\n")
    (data / "train.de").unlink()
    grid = {"name": "g", "base": {"task": {"name": "parallel", "data_dir": str(data), "vocab_size": 20}},
            "cells": {"at": {"decoder": {"name": "at"}}}}
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(grid))
    assert main(["run", str(tmp_path / "g.yaml"), "--dry-run", "--results", str(tmp_path / "res")]) == 2
    assert f"task: train target: {data / 'train.de'} does not exist" in capsys.readouterr().err


def test_the_dry_run_refuses_an_accelerator_atnat_cannot_use_and_a_missing_init_from(tmp_path, monkeypatch, capsys):
    """Trials: `--dry-run` passed `train.accelerator: tpu` (Lightning's, but atnat decodes and times on the CPU
    or a CUDA GPU only) and a `train.init_from` naming no file: that cell failed when it started, after its teacher."""
    import yaml

    from atnat.experiments.cli.commands import main
    from tests.test_extra_tests import tiny_grid_dir

    _, spec = tiny_grid_dir(tmp_path, monkeypatch)
    spec["cells"] = {"at": spec["cells"]["at"], "nat": {"decoder": {"name": "nat"}, "teacher": "at",
                                                        "eval": {"strategies": [{"name": "parallel"}]}}}
    for train, said in (({"accelerator": "tpu"}, "cell nat-s1: train: accelerator must be one of auto, cpu, gpu, cuda, got 'tpu'"),
                        ({"init_from": "gone.ckpt"}, "g.yaml: cell nat-s1: train.init_from gone.ckpt: no such file")):
        cells = yaml.safe_load(yaml.safe_dump(spec))
        cells["cells"]["nat"]["train"] = train
        (tmp_path / "g.yaml").write_text(yaml.safe_dump(cells))
        for dry in (["--dry-run"], []):
            assert main(["run", "g.yaml", *dry, "--results", "res"]) == 2
            assert said in capsys.readouterr().err
        assert not (tmp_path / "res" / spec["name"] / "runs").exists()  # refused before the teacher trained
    cells["cells"]["nat"]["train"] = {"init_from": f"res/{spec['name']}/runs/at-s1"}  # what an earlier cell writes
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(cells))
    assert main(["run", "g.yaml", "--dry-run", "--results", "res"]) == 0


def test_a_dry_run_and_a_run_refuse_parallel_files_of_unequal_lengths(tmp_path, monkeypatch, capsys):
    """A trial's finding: `atnat run --dry-run` said nothing (exit 0) of a training target one line short, which
    fails every cell of the task when it starts. Now both refuse it before anything runs, naming both files."""
    import yaml

    from atnat.experiments.cli.commands import main
    from tests.test_extra_tests import tiny_grid_dir

    data, spec = tiny_grid_dir(tmp_path, monkeypatch)
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", "g.yaml", "--dry-run", "--results", "res"]) == 0
    for split in ("train", "valid"):
        target = data / f"{split}.yy"
        kept = target.read_text()
        target.write_text("".join(kept.splitlines(keepends=True)[:-1]))
        for dry in (["--dry-run"], []):
            assert main(["run", "g.yaml", *dry, "--results", "res"]) == 2
            err = capsys.readouterr().err
            assert f"{split}: {data / f'{split}.xx'} has" in err and f"{target} has" in err and "nothing has run" in err
        assert not (tmp_path / "res" / spec["name"] / "runs").exists()
        target.write_text(kept)


def test_non_utf8_names_the_line(tmp_path):
    task = parallel_task(tmp_path, **all_files(train_tgt=b"fine\nbad \xff byte\n"))
    with pytest.raises(AtnatError, match=r"train target: .*train_tgt line 2 is not valid UTF-8"):
        task.load()


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_sentence(tmp_path):
    """A trial's finding: a reference file saved with a byte-order mark (as some editors do) scored its first
    sentence against "\ufeffA man ...": BLEU 98.91 for a hypothesis equal to the reference, nothing said."""
    import sacrebleu

    from atnat.experiments.data.tasks import read_lines

    marked = b"\xef\xbb\xbf" + GOOD.encode()
    task = parallel_task(tmp_path, **all_files(test_tgt=marked, valid_src=marked))
    data = task.load()
    assert data.splits["test"][1] == data.splits["valid"][0] == ["a b c", "d e f"]
    (tmp_path / "ref").write_bytes(b"\xef\xbb\xbfA man walks .\r\nTwo dogs play .\r\n")
    refs = read_lines(tmp_path / "ref", "--ref")
    assert refs == ["A man walks .", "Two dogs play ."]
    assert sacrebleu.corpus_bleu(["A man walks .", "Two dogs play ."], [refs]).score == pytest.approx(100.0)


def test_unknown_file_key(tmp_path):
    with pytest.raises(AtnatError, match=r"task.files: unknown key\(s\) \['training_src'\]; valid: train_src"):
        ParallelOptions(files={"training_src": "x"})


def test_files_that_leave_out_a_split_are_refused_unless_a_data_dir_is_given(tmp_path):
    """task.files naming the training and validation files only read the test split from the default data_dir
    (Multi30k) without a word: a run on the user's data scored on another data set."""
    named = {k: str(tmp_path / k) for k in ("train_src", "train_tgt", "valid_src", "valid_tgt")}
    with pytest.raises(AtnatError, match=r"task.files names some split files but not test_src, test_tgt: name every "
                                         r"file, or give task.data_dir"):
        ParallelOptions(files=named)
    task = ParallelTask(ParallelOptions(files=named, data_dir=str(tmp_path / "mine"), test="t"), cache_dir=tmp_path)
    assert task.path("test", "src") == tmp_path / "mine" / "t.en"  # a data_dir given: the others read from there
    assert ParallelOptions(files={}).files == {}  # an empty mapping names nothing: as none, not refused


@pytest.mark.parametrize("value", [None, 5, "", "  "])
def test_a_file_that_is_not_a_path_is_named(value):
    """A null or a number in task.files gave a bare TypeError from Path()."""
    files = {f"{s}_{side}": "x" for s in ("train", "valid", "test") for side in ("src", "tgt")} | {"valid_tgt": value}
    with pytest.raises(AtnatError, match=rf"task.files.valid_tgt: expected a file path, got {re.escape(repr(value))}"):
        ParallelOptions(files=files)


def test_a_missing_named_file_gets_no_hint_to_fetch_the_default_data_set(tmp_path):
    """A file named in task.files that does not exist was told to fetch Multi30k into the default data_dir."""
    task = parallel_task(tmp_path, **all_files())
    (tmp_path / "test_src").unlink()
    with pytest.raises(AtnatError, match=r"test source: .*test_src does not exist$"):
        task.check_files()


def test_registries_list_builtins():
    assert {"copy", "reverse", "sort", "fertility", "dialect", "parallel"} <= set(TASKS.names())
    assert {"greedy", "beam", "parallel", "mask-predict", "length-beam", "npd", "ctc"} <= set(STRATEGIES.names())


def test_fixed_length_nat_and_strategy_length_mode_must_agree():
    with pytest.raises(ConfigError, match=r"strategies\[0\] \(mask-predict\): nat with length: fixed has no length predictor"):
        config(decoder={"name": "nat", "length": "fixed"}, eval={"strategies": ["mask-predict"]})
    with pytest.raises(ConfigError, match=r"needs a nat trained with length: fixed"):
        config(decoder={"name": "nat"}, eval={"strategies": [{"name": "parallel", "length": "fixed"}]})
    with pytest.raises(ConfigError, match=r"fixed_len_a/b = 2.0/10 but the decoder was trained with 1.0/2"):
        config(decoder={"name": "nat", "length": "fixed", "fixed_len_a": 1.0, "fixed_len_b": 2},
               eval={"strategies": [{"name": "parallel", "length": "fixed"}]})
    config(decoder={"name": "nat", "length": "fixed"}, eval={"strategies": [{"name": "parallel", "length": "fixed"}]})


def test_cut_sources_and_dropped_training_pairs_are_said(capsys):
    """Trials: test sources longer than train.max_len were cut, and long training pairs dropped, without a word."""
    from atnat.experiments.data.batching import encode_split
    from atnat.experiments.data.tokenize import SymbolTokenizer

    tok = SymbolTokenizer(["a", "b"])
    train = encode_split(tok, ["a b a b", "a", "b"], ["a", "a b a b a", "a"], name="train-x", max_len=3, drop_long=True)
    test = encode_split(tok, ["a b a b", "a"], ["a", "b a b a b"], name="test-x", max_len=3)
    assert len(train.src) == 1 and [len(s) for s in test.src] == [3, 1] and [len(t) for t in test.tgt] == [1, 3]
    err = capsys.readouterr().err
    assert "split 'train-x': 2 of 3 pairs longer than max_len=3 tokens on a side were left out (train.max_len)" in err
    assert "split 'test-x': 1 of 2 sources longer than max_len=3 tokens were cut to it" in err
    assert "split 'test-x': 1 of 2 targets longer than max_len=3 tokens were cut to it (train.max_len): its loss and " \
        "the metrics over token ids see the cut target; BLEU and chrF score the whole reference text" in err  # was unsaid
    encode_split(tok, ["a b a b", "a"], ["a", "b a b a b"], name="test-x", max_len=3)  # said once per process
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("precision", ["bf16-true", "16-true"])
def test_a_half_precision_at_is_refused_when_its_config_is_read(precision):
    """bf16-true and 16-true were accepted for an AT, whose first validation decode then died on a dtype mismatch
    (after training steps had run), with a bare traceback."""
    with pytest.raises(ConfigError, match=rf"train.precision {precision}: an autoregressive decoder's search keeps"):
        run_config_from_dict({"name": "x", "task": "copy", "decoder": "at", "train": {"precision": precision}}, "t")
    run_config_from_dict({"name": "x", "task": "copy", "decoder": "nat", "train": {"precision": precision}}, "t")


@pytest.mark.parametrize("decoder, options, field", [
    ("at", {"scheduled_sampling": "inverse_sigmoid", "sampling_k": 0}, "sampling_k"),  # ZeroDivisionError at step 1
    ("at", {"input_noise": float("nan")}, "input_noise"),  # trained silently
    ("at", {"sampling_max": 7}, "sampling_max"),
    ("ctc", {"upsample": 10**9}, "upsample"),  # a bare allocation error of terabytes
    ("nat", {"length_max_offset": 10**9}, "length_max_offset"),
])
def test_decoder_options_out_of_range_are_refused_when_the_config_is_read(decoder, options, field):
    with pytest.raises(ConfigError, match=field):
        run_config_from_dict({"name": "x", "task": "copy", "decoder": {"name": decoder, **options}}, "t")
