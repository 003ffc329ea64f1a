"""Scoring against several references, and `atnat evaluate` on any test files."""
import io
import json
import sys

import pytest

from atnat.experiments.cli.commands import main
from atnat.experiments.evaluation.evaluate import score_outputs
from tests.test_grid import TINY, write_grid
from tests.training import make_task


def test_dialect_is_scored_against_every_variant():
    task = make_task("dialect", vocab=5, variants=2, min_len=3, max_len=5, n_train=10, n_test=40)
    src, tgt = task.splits["test"]
    refs_txt = task.references("test")
    assert len(refs_txt) == 3 and refs_txt[0] == tgt  # the sampled targets, then one stream per variant
    consistent = [line.replace("v0x", "v1x") for line in refs_txt[1]]  # always variant 1, never mixed
    refs_ids = [[task.tokenizer.encode(r) for r in stream] for stream in refs_txt]
    hyps = [task.tokenizer.encode(h) for h in consistent]
    row, _ = score_outputs(hyps, refs_ids, refs_txt, task, n_bootstrap=1, detok=task.tokenizer.decode)
    assert row["bleu"] == pytest.approx(100.0) and row["exact_match"] == 1.0 and row["n_refs"] == 3
    assert row["mixing_rate"] == 0.0 and row["cond_error_excess"] != row["cond_error_excess"]  # nan: no error
    one_ref, _ = score_outputs(hyps, refs_ids[:1], refs_txt[:1], task, n_bootstrap=1, detok=task.tokenizer.decode)
    assert one_ref["bleu"] < 80  # against the sampled variant alone it is a coin flip per sentence


def test_atnat_evaluate_scores_any_files(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path, {**TINY, "cells": {"at": TINY["cells"]["at"]}})
    assert main(["run", str(grid), "--results", "res"]) == 0
    run = tmp_path / "res" / "tiny" / "runs" / "at-s1"
    refs = (run / "references.txt").read_text().split("\n")[:-1]
    (tmp_path / "src.txt").write_text("\n".join(refs) + "\n")  # copy task: source = reference
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n")
    args = ["evaluate", "--checkpoint", str(run), "--src", "src.txt", "--ref", "ref.txt", "--ref", "ref.txt",
            "--also", "beam:beam_size=2", "--json", "scores.json", "--hyps", "hyps.txt", "--repeats", "1",
            "--latency-sentences", "3", "--engine", "eager"]
    capsys.readouterr()
    assert main(args) == 0
    err = capsys.readouterr().err
    assert f"atnat evaluate: greedy: {len(refs)} of {len(refs)} sentences decoded" in err  # progress, not silence
    assert "atnat evaluate: timing 2 strategies side by side" in err and "1 thread)" in err
    scores = json.loads((tmp_path / "scores.json").read_text())
    assert scores["threads"] == 1 and scores["engine"] == "eager"  # what the speed was measured with
    assert scores["quantize"] == "none" and scores["rows"][0]["quantize"] == "none"  # int8 rows read "int8"
    rows = {r["strategy"]: r for r in scores["rows"]}
    assert rows["greedy"]["threads"] == 1 and rows["greedy"]["timing_threads"] == 1
    assert set(rows) == {"greedy", "beam2"} and rows["greedy"]["n_refs"] == 2
    metrics = json.loads((run / "metrics.json").read_text())["rows"]
    assert rows["greedy"]["bleu"] == pytest.approx(metrics[0]["bleu"])  # the grid scored the same test set
    assert rows["greedy"]["latency_ms_b1"] > 0 and "bleu_tok" in rows["greedy"]
    assert len((tmp_path / "hyps.txt").read_text().split("\n")[:-1]) == len(refs)
    assert rows["greedy"]["engine"] == "eager"
    # the default engine (auto; without timing it compiles nothing): the same translations and scores, recorded
    assert main(args[:-6] + ["--no-speed", "--json", "auto.json", "--hyps", "auto.txt"]) == 0
    auto = {r["strategy"]: r for r in json.loads((tmp_path / "auto.json").read_text())["rows"]}
    assert auto["greedy"]["engine"] == "auto" and auto["beam2"]["bleu"] == rows["beam2"]["bleu"]
    assert main(args[:-6] + ["--no-speed", "--json", "int8.json", "--quantize", "int8"]) == 0  # recorded as int8
    int8 = json.loads((tmp_path / "int8.json").read_text())
    assert int8["quantize"] == "int8" and {r["quantize"] for r in int8["rows"]} == {"int8"}
    assert (tmp_path / "auto.txt").read_text() == (tmp_path / "hyps.txt").read_text()
    outs = []
    for extra in (["--engine", "eager"], [], ["--engine", "static"], ["--engine", "packed"]):
        monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(refs[:5]) + "\n"))
        capsys.readouterr()
        assert main(["translate", "--checkpoint", str(run), "--strategy", "beam", "--beam", "2", *extra]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] == outs[2] == outs[3] and len(outs[0].split("\n")) == 6
    capsys.readouterr()
    assert main(["translate", "--checkpoint", str(tmp_path / "no-such-run"), "--engine", "turbo"]) == 2
    assert "--engine 'turbo': unknown engine 'turbo'; valid: engines eager, static" in capsys.readouterr().err
    assert main(["translate", "--checkpoint", str(run), "--engine", "aoti", "--compile", "default"]) == 2
    assert "--compile and --engine aoti: give one" in capsys.readouterr().err
    (tmp_path / "short.txt").write_text("w1\n")
    assert main(["evaluate", "--checkpoint", str(run), "--src", "src.txt", "--ref", "short.txt", "--no-speed"]) == 2
    assert "--ref short.txt has 1 lines but --src src.txt has" in capsys.readouterr().err  # it named neither file
    with pytest.raises(SystemExit) as refused:  # by argparse, before the model loads, naming its flag
        main(["evaluate", "--checkpoint", str(run), "--src", "src.txt", "--ref", "src.txt", "--latency-sentences", "-3"])
    assert refused.value.code == 2 and "--latency-sentences" in capsys.readouterr().err
    # --json records the engine that ran, not the one asked for (here the static step refused for a stated reason)
    monkeypatch.setattr("atnat.experiments.modelfiles.engines.static_step_problem", lambda decoder: "a reason")
    assert main(args[:-6] + ["--no-speed", "--json", "static.json", "--engine", "static"]) == 0
    ran = json.loads((tmp_path / "static.json").read_text())
    assert ran["engine"] == ran["rows"][0]["engine"] == "static (AT step eager: a reason)"  # it said "static"


def test_translate_and_evaluate_default_to_the_models_own_strategy(tmp_path, monkeypatch, capsys):
    """Trials: translate/evaluate defaulted to greedy and failed on a CTC checkpoint without naming --strategy ctc."""
    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path, {**TINY, "cells": {"ctc": {"decoder": {"name": "ctc"}, "eval": {"strategies": ["ctc"]}}}})
    assert main(["run", str(grid), "--results", "res"]) == 0
    run = tmp_path / "res" / "tiny" / "runs" / "ctc-s1"
    refs = (run / "references.txt").read_text()
    (tmp_path / "src.txt").write_text(refs)
    monkeypatch.setattr("sys.stdin", io.StringIO(refs))
    capsys.readouterr()
    assert main(["translate", "--checkpoint", str(run), "--engine", "eager"]) == 0
    captured = capsys.readouterr()
    assert "decoding with strategy 'ctc', this ctc model's own" in captured.err
    assert captured.out == (run / "hyps" / "ctc.txt").read_text()
    assert main(["evaluate", "--checkpoint", str(run), "--src", "src.txt", "--ref", "src.txt", "--no-speed",
                 "--engine", "eager", "--strategy", "greedy"]) == 2
    err = capsys.readouterr().err
    assert "--strategy: strategy 'greedy' cannot drive decoder 'ctc'" in err and "usable: ctc" in err


def test_an_output_that_is_an_input_file_is_refused_before_anything_is_written(tmp_path, capsys):
    from atnat.experiments.cli.commands import main

    src = tmp_path / "s.txt"
    src.write_text("a b\n")
    assert main(["evaluate", "--checkpoint", str(tmp_path / "none"), "--src", str(src), "--ref", str(src),
                 "--hyps", str(src)]) == 2
    assert "--hyps " + str(src) + " is the file given to --src" in capsys.readouterr().err and src.read_text() == "a b\n"
    assert main(["distill", "--teacher", str(tmp_path / "none"), "--input", str(src), "--output", str(src)]) == 2
    assert "--output " + str(src) + " is the file given to --input" in capsys.readouterr().err
    assert src.read_text() == "a b\n"


def test_an_at_target_that_needs_more_positions_than_the_model_has_is_named_before_training(tmp_path, monkeypatch,
                                                                                            capsys):
    """Only sources were checked: an AT teacher-forces its BOS and target (a target of max_positions tokens needs
    one position more), so a run whose train.max_len let such a pair in - the limit the sources' own message
    advised - failed at the batch holding it (ValueError: sequence of 7 positions exceeds max_positions=6)."""
    import yaml

    monkeypatch.chdir(tmp_path)
    at = {"name": "reach", "task": {"name": "copy", "vocab": 6, "min_len": 6, "max_len": 6, "n_train": 20,
                                    "n_valid": 4, "n_test": 4},
          "decoder": {"name": "at"},
          "model": {"d_model": 16, "n_heads": 2, "ffn_dim": 32, "encoder_layers": 1, "decoder_layers": 1,
                    "max_positions": 6},
          "train": {"max_steps": 2, "max_tokens": 256, "val_every_steps": 2, "progress_bar": False, "num_threads": 1},
          "eval": {"strategies": ["greedy"], "n_bootstrap": 10, "probe_sentences": 0}}
    (tmp_path / "at.yaml").write_text(yaml.safe_dump(at))
    assert main(["train", "at.yaml", "--output-dir", "at"]) == 2
    assert "split train: targets of up to 6 tokens (train.max_len 256), but this model writes at most 5 (decoder at, " \
           "model.max_positions 6): set train.max_len to at most 5, or raise model.max_positions" in capsys.readouterr().err
    assert not (tmp_path / "at" / "checkpoints").exists()


def test_a_source_longer_than_the_model_reads_is_named_before_anything_is_decoded_or_trained(tmp_path, monkeypatch,
                                                                                             capsys):
    """Only translate checked the model's reach: evaluate and distill failed with a traceback mid-way, and a
    DAG (lambda x source vertices) whose train.max_len lets longer sources in failed at the batch holding one."""
    import yaml

    from atnat.experiments.modelfiles.loading import load_module

    monkeypatch.chdir(tmp_path)
    dag = {"name": "reach", "task": {"name": "copy", "vocab": 6, "min_len": 2, "max_len": 6, "n_train": 40,
                                     "n_valid": 4, "n_test": 4},
           "decoder": {"name": "dag", "upsample": 8},
           "model": {"d_model": 16, "n_heads": 2, "ffn_dim": 32, "encoder_layers": 1, "decoder_layers": 1,
                     "max_positions": 40},
           "train": {"max_steps": 2, "max_tokens": 256, "val_every_steps": 2, "progress_bar": False, "num_threads": 1},
           "eval": {"strategies": ["dag-greedy"], "n_bootstrap": 10}}
    (tmp_path / "dag.yaml").write_text(yaml.safe_dump(dag))
    assert main(["train", "dag.yaml", "--output-dir", "dag"]) == 2
    assert "split train: sources of up to 6 tokens (train.max_len 256), but this model reads at most 4 (decoder dag, " \
           "model.max_positions 40, decoder.upsample 8): set train.max_len to at most 4, lower decoder.upsample" \
           in capsys.readouterr().err
    assert not (tmp_path / "dag" / "checkpoints").exists()
    (tmp_path / "dag.yaml").write_text(yaml.safe_dump({**dag, "train": {**dag["train"], "max_len": 4}}))
    assert main(["train", "dag.yaml", "--output-dir", "dag"]) == 0
    (tmp_path / "src.txt").write_text("a b\n" + " ".join("abcde") + "\n")
    (tmp_path / "ref.txt").write_text("a b\na b\n")
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", "dag", "--src", "src.txt", "--ref", "ref.txt", "--no-speed"]) == 2
    assert "--src src.txt line 2: 5 tokens, more than the 4 this model reads" in capsys.readouterr().err
    from atnat.experiments.training.distill import distill_sources
    module, tokenizer = load_module("dag")
    with pytest.raises(Exception, match="distillation input line 2: 5 tokens"):
        distill_sources(module, tokenizer, ["a b", "a b c d e"], {"name": "dag-greedy"})


def test_a_teacher_of_another_vocabulary_is_refused(tmp_path, monkeypatch, capsys):
    import yaml

    monkeypatch.chdir(tmp_path)
    base = {"model": {"d_model": 16, "n_heads": 2, "ffn_dim": 32, "encoder_layers": 1, "decoder_layers": 1},
            "train": {"max_steps": 2, "max_tokens": 256, "val_every_steps": 2, "progress_bar": False, "num_threads": 1},
            "eval": {"n_bootstrap": 10}}
    for name, vocab, decoder, strategy in (("at", 6, "at", "greedy"), ("cmlm", 7, "cmlm", "mask-predict")):
        task = {"name": "copy", "vocab": vocab, "min_len": 2, "max_len": 4, "n_train": 40, "n_valid": 4, "n_test": 4}
        spec = {**base, "name": name, "task": task, "decoder": {"name": decoder}, "eval": {**base["eval"],
                                                                                        "strategies": [strategy]}}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(spec))
        assert main(["train", f"{name}.yaml", "--output-dir", name]) == 0
    monkeypatch.setattr("sys.stdin", io.StringIO("a b\n"))
    capsys.readouterr()
    assert main(["translate", "--checkpoint", "cmlm", "--strategy", "speculative", "--teacher", "at"]) == 2
    assert "--teacher at: its vocabulary is not the model's" in capsys.readouterr().err


def trained_at(tmp_path, monkeypatch):
    """The tiny grid's AT trained in tmp_path (the working folder), a one-line src.txt, and the base argv of
    `atnat evaluate` on it -> (grid, run folder, argv)."""
    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path)
    assert main(["run", str(grid), "--results", "res", "--only", "at-s1"]) == 0
    run = tmp_path / "res" / "tiny" / "runs" / "at-s1"
    (tmp_path / "src.txt").write_text("a b\n")
    return grid, run, ["evaluate", "--checkpoint", str(run), "--src", "src.txt", "--ref", "src.txt", "--no-speed"]


def test_evaluate_refuses_a_strategy_asked_twice_or_one_without_its_teacher_before_decoding(tmp_path, monkeypatch,
                                                                                          capsys):
    grid, run, base = trained_at(tmp_path, monkeypatch)
    capsys.readouterr()
    assert main([*base, "--also", "greedy", "--json", "out.json"]) == 2
    assert "--also greedy: strategy greedy is asked for twice (also by --strategy)" in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()
    cmlm = tmp_path / "res" / "tiny" / "runs" / "cmlm-kd-s1"
    assert main(["run", str(grid), "--results", "res"]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(cmlm), "--src", "src.txt", "--ref", "src.txt", "--no-speed",
                 "--also", "speculative"]) == 2
    assert "--also speculative: strategy speculative-k5 runs an AT teacher: give --teacher RUN" in capsys.readouterr().err
    # translate: refused before any input is read, in the same words (it said "give the cell a teacher (grid: ...)"
    # once decoding had started); a teacher that is no AT is named with its flag and path
    monkeypatch.setattr("sys.stdin", io.StringIO("a b\n"))
    assert main(["translate", "--checkpoint", str(cmlm), "--strategy", "speculative"]) == 2
    out = capsys.readouterr()
    assert "--strategy: strategy speculative-k5 runs an AT teacher: give --teacher RUN" in out.err and out.out == ""
    assert sys.stdin.read() == "a b\n"  # not read
    # a teacher that cannot verify in one block pass: refused before any strategy decodes (it was refused at the
    # speculative strategy's first batch, after --strategy's whole decode)
    import atnat.experiments.evaluation.assemble as assemble
    import atnat.experiments.evaluation.evaluate as evaluate

    with monkeypatch.context() as patched:
        patched.setattr(assemble, "block_verify_problem", lambda decoder: "its own reasons")
        patched.setattr(evaluate, "decode_split", lambda *a, **k: pytest.fail("decoded before the teacher was checked"))
        assert main(["evaluate", "--checkpoint", str(cmlm), "--src", "src.txt", "--ref", "src.txt", "--no-speed",
                     "--also", "speculative", "--teacher", str(run)]) == 2
        assert (f"--teacher {run}: speculative decoding cannot verify with this AT teacher in one block pass: its own "
                "reasons") in capsys.readouterr().err
    for command in (["translate", "--checkpoint", str(cmlm), "--strategy", "speculative"],
                    ["translate", "--checkpoint", str(cmlm), "--strategy", "npd"],
                    ["evaluate", "--checkpoint", str(cmlm), "--src", "src.txt", "--ref", "src.txt", "--no-speed",
                     "--strategy", "npd"]):
        assert main([*command, "--teacher", str(cmlm)]) == 2
        assert (f"--teacher {cmlm}: a teacher is an AT (capability 'step': it re-ranks npd's candidates or verifies "
                "speculative drafts); this one's decoder is 'cmlm'") in capsys.readouterr().err


def test_flags_that_contradict_each_other_or_do_nothing_are_refused(tmp_path, monkeypatch, capsys):
    """Trials: `--beam 4 --option beam_size=8` decoded with 8 without a word; `--teacher` beside greedy was loaded
    and ignored; `--partition` without a cluster launcher and `--devices 0` on a machine without GPU were ignored
    (the cells trained on the CPU)."""
    import torch

    grid, run, evaluate = trained_at(tmp_path, monkeypatch)
    capsys.readouterr()
    for argv, said in (
            (["--strategy", "beam", "--beam", "4", "--option", "beam_size=8"],
             "--beam 4 and --option beam_size=8 both set beam_size: give one of them"),
            (["--strategy", "beam", "--option", "beam_size=2", "--option", "beam_size=3"],
             "--option 'beam_size=3': beam_size is set twice; give it once"),
            (["--teacher", str(run)], f"--teacher {run}: no strategy asked for runs a teacher (greedy)")):
        assert main([*evaluate, *argv]) == 2
        assert said in capsys.readouterr().err
        monkeypatch.setattr("sys.stdin", io.StringIO("a b\n"))
        assert main(["translate", "--checkpoint", str(run), *argv]) == 2
        out = capsys.readouterr()
        assert said in out.err and out.out == ""
    assert main(["run", str(grid), "--results", "res", "--partition", "gpu", "--time", "30"]) == 2
    assert "--partition, --time: settings of a cluster job, but --launcher is local" in capsys.readouterr().err
    assert main(["run", str(grid), "--results", "res", "--time", "0", "--mem-gb", "0"]) == 2  # a zero is given too
    assert "--mem-gb, --time: settings of a cluster job" in capsys.readouterr().err
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for command in (["run", str(grid), "--results", "res", "--devices", "0"],
                    ["time", str(grid), "--results", "res", "--devices", "0"]):
        assert main(command) == 2
        assert "--devices 0: GPU ids, but no GPU is usable here" in capsys.readouterr().err
    assert main(["run", str(grid), "--results", "res", "--devices", "a,b"]) == 2
    assert "--devices a,b: expected comma-separated GPU ids" in capsys.readouterr().err
    from atnat.core.errors import AtnatError
    from atnat.experiments.config import devices

    monkeypatch.setattr(devices, "gpu_problem", lambda: None)  # a machine whose GPUs 2 and 3 are this job's
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert devices.gpu_ids("2,3") == ["2", "3"]  # each worker is given its id as CUDA_VISIBLE_DEVICES
    with pytest.raises(AtnatError, match=r"--devices 0: GPU 0 is not among this process's \(CUDA_VISIBLE_DEVICES=2,3\)"):
        devices.gpu_ids("0")


def test_train_refuses_a_folder_that_is_not_a_run(tmp_path, monkeypatch, capsys):
    """--output-dir into a project folder or an export replaced its config.json and metrics.json."""
    import yaml

    from tests.test_config_values import RUN

    monkeypatch.chdir(tmp_path)
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(RUN))
    mine = tmp_path / "proj"
    mine.mkdir()
    (mine / "config.json").write_text('{"my": "settings"}')
    assert main(["train", "run.yaml", "--output-dir", "proj"]) == 2
    assert "its config.json is not a run's" in capsys.readouterr().err
    assert (mine / "config.json").read_text() == '{"my": "settings"}'
    (mine / "config.json").unlink()
    (mine / "notes.txt").write_text("mine")
    assert main(["train", "run.yaml", "--output-dir", "proj"]) == 2
    assert "holds other things than a run (notes.txt)" in capsys.readouterr().err
    assert main(["train", "run.yaml", "--output-dir", "run"]) == 0
    assert main(["train", "run.yaml", "--output-dir", "run"]) == 0  # a run's folder: resumed (here: evaluated again)


def test_evaluate_checks_its_output_paths_first_and_writes_each_file_on_its_own(tmp_path, monkeypatch, capsys):
    _, run, base = trained_at(tmp_path, monkeypatch)
    (tmp_path / "adir").mkdir()
    capsys.readouterr()
    assert main([*base, "--hyps", "adir", "--json", "s.json"]) == 2
    assert "--hyps adir is a folder; give a file path" in capsys.readouterr().err  # before decoding
    assert main([*base, "--hyps", "x.txt", "--json", "x.txt"]) == 2
    assert "--hyps and --json are both x.txt" in capsys.readouterr().err
    for own in (run / "metrics.json", run / "checkpoints" / "last.ckpt", run / "config.json"):  # the model's files
        before = own.read_bytes()
        assert main([*base, "--json", str(own)]) == 2
        assert f"--json {own} is a file of the model given to --checkpoint ({run})" in capsys.readouterr().err
        assert own.read_bytes() == before
    assert main(["evaluate", "--checkpoint", str(run / "checkpoints" / "last.ckpt"), "--src", "src.txt", "--ref",
                 "src.txt", "--no-speed", "--hyps", str(run / "metrics.json")]) == 2
    assert "is a file of the model given to --checkpoint" in capsys.readouterr().err
    assert main(["export", str(run), "exp"]) == 0
    before = (tmp_path / "exp" / "config.json").read_bytes()
    assert main(["evaluate", "--checkpoint", "exp", "--src", "src.txt", "--ref", "src.txt", "--no-speed", "--json",
                 "exp/config.json"]) == 2
    assert "--json exp/config.json is inside the export given to --checkpoint (exp)" in capsys.readouterr().err
    assert (tmp_path / "exp" / "config.json").read_bytes() == before
    from atnat.experiments import files
    from atnat.experiments.cli import commands

    def unwritable(path, lines):
        raise files.UnwritableError(f"cannot write {path}: the disk is full")
    monkeypatch.setattr(commands, "write_lines_atomic", unwritable)
    assert main([*base, "--hyps", "h.txt", "--json", "s.json"]) == 1
    assert "cannot write h.txt" in capsys.readouterr().err and json.loads((tmp_path / "s.json").read_text())["rows"]


def test_evaluate_json_names_its_teacher_and_is_strict_json(tmp_path, monkeypatch, capsys):
    """`evaluate --strategy speculative --teacher T --json F` wrote no teacher (the numbers depend on it) and bare NaN
    for the columns without a value, which strict JSON readers refuse."""
    import json

    grid, run, base = trained_at(tmp_path, monkeypatch)
    assert main(["run", str(grid), "--results", "res"]) == 0
    cmlm = tmp_path / "res" / "tiny" / "runs" / "cmlm-kd-s1"
    assert main(["evaluate", "--checkpoint", str(cmlm), "--src", "src.txt", "--ref", "src.txt", "--no-speed",
                 "--strategy", "speculative", "--teacher", str(run), "--json", "out.json"]) == 0
    text = (tmp_path / "out.json").read_text()
    record = json.loads(text, parse_constant=lambda name: pytest.fail(f"{name} in --json output"))
    assert record["teacher"] == str(run) and record["rows"][0]["strategy"] == "speculative-k5"
    assert main([*base, "--json", "plain.json"]) == 0
    assert json.loads((tmp_path / "plain.json").read_text())["teacher"] is None


@pytest.mark.slow  # a minute of timing
def test_the_timing_notice_counts_the_sentences_there_are(tmp_path, monkeypatch, capsys):
    """`--latency-sentences 1000000` on a one-line file said "1000000 sentences one at a time"."""
    grid, run, base = trained_at(tmp_path, monkeypatch)
    argv = [a for a in base if a != "--no-speed"]
    capsys.readouterr()
    assert main([*argv, "--latency-sentences", "1000000", "--repeats", "1"]) == 0
    err = capsys.readouterr().err
    assert "(1 sentences one at a time, 1 in batches" in err and "1000000" not in err, err
