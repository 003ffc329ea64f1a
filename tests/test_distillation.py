"""Sequence-level distillation removes the multi-modality that makes NAT mix target variants."""
import pytest

from atnat.decoding.greedy import Greedy
from atnat.decoding.parallel import Parallel
from atnat.experiments.evaluation.metrics import variant_mixing_rate
from atnat.experiments.training.distill import distill_sources
from tests.training import decode_split, fit, make_task

DIALECT = dict(vocab=8, variants=2, min_len=3, max_len=7, n_train=3000, n_test=200, seed=3)
TRAIN = dict(steps=500, lr=2e-3, warmup=60, max_tokens=768, seed=0)


@pytest.mark.slow
def test_distillation_cuts_variant_mixing_of_nat_on_dialect():
    task = make_task("dialect", **DIALECT)
    teacher, _ = fit("at", "dialect", task=task, **TRAIN)
    at_hyps, _, _ = decode_split(teacher, task, Greedy())
    src, _ = task.splits["train"]
    distilled = distill_sources(teacher, task.tokenizer, src, {"name": "greedy"})
    assert len(distilled) == len(src)
    raw_nat, _ = fit("nat", "dialect", task=task, **TRAIN)
    kd_nat, _ = fit("nat", "dialect", task=task, train_targets=distilled, **TRAIN)
    mixing = {name: variant_mixing_rate(decode_split(m, task, Parallel())[0], task.token_variant)
              for name, m in (("raw", raw_nat), ("kd", kd_nat))}
    at_mix = variant_mixing_rate(at_hyps, task.token_variant)
    # measured (seeded): AT ~0.0, NAT raw ~0.5+, NAT distilled ~0.0-0.05
    assert mixing["raw"] > at_mix + 0.2
    assert mixing["kd"] < 0.5 * mixing["raw"]


def test_students_start_from_the_teachers_weights_and_a_control_trains_on_references(tmp_path, monkeypatch):
    import json

    import torch

    from atnat.experiments.cli.commands import main
    from atnat.experiments.config.run import ConfigError, run_config_from_dict
    from atnat.experiments.modelfiles.loading import load_module
    from atnat.experiments.training.train import initialise
    from tests.test_grid import TINY, write_grid

    monkeypatch.chdir(tmp_path)
    cells = {"at": TINY["cells"]["at"],
             "cmlm-kd": {**TINY["cells"]["cmlm-kd"], "train": {"init_from": "teacher"}},
             "cmlm": {"decoder": {"name": "cmlm"}, "teacher": "at", "distill": {"targets": False},
                      "train": {"init_from": "teacher"}, "eval": {"strategies": [{"name": "mask-predict"}]}}}
    grid = write_grid(tmp_path, {**TINY, "cells": cells})
    assert main(["run", str(grid), "--results", "res"]) == 0
    runs = tmp_path / "res" / "tiny" / "runs"
    info = json.loads((runs / "cmlm-kd-s1" / "train.json").read_text())["initialised_from"]
    assert info["source"].endswith("runs/at-s1") and "decoder.length_predictor.proj.weight" in info["not_copied"]
    assert (runs / "cmlm-kd-s1" / "distill.json").exists() and not (runs / "cmlm-s1" / "distill.json").exists()
    from atnat.experiments.training.distill import cache_dir

    cache = cache_dir(runs / "at-s1", {"name": "greedy"}) / "train.txt"  # written by the teacher's own process
    assert cache.stat().st_mtime <= (runs / "cmlm-kd-s1" / "config.json").stat().st_mtime
    df = __import__("pandas").read_csv(tmp_path / "res" / "tiny" / "results.csv").set_index("cell")
    assert bool(df.loc["cmlm-kd-s1", "distilled"]) and not bool(df.loc["cmlm-s1", "distilled"])
    # the copy itself: every matching tensor equals the teacher's before training
    teacher = load_module(runs / "at-s1")[0]
    cfg = run_config_from_dict({**json.loads((runs / "cmlm-kd-s1" / "config.json").read_text())}, "x")
    from atnat.experiments.config.run import load_task
    from atnat.experiments.training.train import build_module

    student = build_module(cfg, load_task(cfg))
    initialise(student, cfg)
    for name, value in teacher.state_dict().items():
        if name.startswith("encoder."):
            assert torch.equal(student.state_dict()[name], value), name
    with __import__("pytest").raises(ConfigError, match="init_from: teacher needs a teacher"):
        run_config_from_dict({**TINY["base"], "name": "x", "decoder": "cmlm", "train": {"init_from": "teacher"},
                              "eval": {"strategies": ["parallel"]}}, "x")


def test_a_teacher_evaluated_again_decodes_nothing_for_students_already_trained(tmp_path, monkeypatch):
    """`--stale rerun` after a teacher's eval changed evaluates it again; its students finished
    training, so writing their distilled targets again (29,000 beam-5 decodes on Multi30k) is waste."""
    import json
    import shutil

    from atnat.experiments.cli.commands import main
    from tests.test_grid import TINY, write_grid

    monkeypatch.chdir(tmp_path)
    assert main(["run", str(write_grid(tmp_path)), "--results", "res"]) == 0
    runs = tmp_path / "res" / "tiny" / "runs"
    for cell in ("at-s1", "cmlm-kd-s1"):  # a teacher's last phase, its students' distillation, is over too
        assert json.loads((runs / cell / "progress.json").read_text())["phase"] == "done"
    shutil.rmtree(runs / "at-s1" / "distill")  # e.g. cleaned away, or cached under another name
    again = {**TINY, "cells": {**TINY["cells"], "at": {**TINY["cells"]["at"], "eval": {"strategies": ["greedy"]}}}}
    assert main(["run", str(write_grid(tmp_path, again)), "--results", "res", "--stale", "rerun"]) == 0
    assert not list((runs / "at-s1").glob("distill/*/train.txt"))
    assert (runs / "at-s1" / "metrics.json").is_file() and (runs / "cmlm-kd-s1" / "metrics.json").is_file()


def test_an_interrupted_distillation_resumes_at_the_chunk_it_stopped_in(tmp_path, monkeypatch):
    from atnat.experiments.training import distill

    monkeypatch.setattr(distill, "CHUNK", 3)
    sources = [f"s{i}" for i in range(10)]
    decoded, seen = [], []

    def decode(part, follow, fail_at=None):
        if fail_at is not None and part[0] == fail_at:
            raise KeyboardInterrupt  # the run stopped here
        decoded.append(part[0])
        for n in range(1, len(part) + 1 if follow else 1):
            follow(n)
        return [s.upper() for s in part]

    identity = {"checkpoint": "a", "options": {"name": "beam"}}
    with pytest.raises(KeyboardInterrupt):
        distill._in_chunks(tmp_path, identity, sources, lambda p, f: decode(p, f, fail_at="s6"), seen.append)
    assert decoded == ["s0", "s3"]
    decoded.clear()
    seen.clear()
    assert distill._in_chunks(tmp_path, identity, sources, decode, seen.append) == [s.upper() for s in sources]
    assert decoded == ["s6", "s9"]  # the two finished chunks were taken as they were
    assert seen[:2] == [3, 6] and seen[-1] == 10  # progress counts the whole split
    decoded.clear()
    (tmp_path / "chunks" / "000000000003.txt").write_text("S3\nS4\nX5\n")  # edited, same length: decoded again
    assert distill._in_chunks(tmp_path, identity, sources, decode) == [s.upper() for s in sources]
    assert decoded == ["s3"]
    decoded.clear()
    (tmp_path / "chunks" / "000000000003.txt").write_text("S3\nS4\n")  # a chunk cut short: decoded again
    distill._in_chunks(tmp_path, {**identity, "checkpoint": "b"}, sources, decode)  # other weights: all again
    assert decoded == ["s0", "s3", "s6", "s9"]


def test_an_output_file_may_go_into_folders_not_made_yet_but_not_under_a_file(tmp_path):
    """The writer makes missing folders (files.atomic_write): `--output new/train.de` worked, and must."""
    from atnat.core.errors import AtnatError
    from atnat.experiments.files import check_output_file, write_lines_atomic

    fresh = tmp_path / "new" / "deeper" / "train.de"
    assert check_output_file(fresh, "--output") == fresh
    write_lines_atomic(fresh, ["a"])
    assert fresh.read_text() == "a\n"
    with pytest.raises(AtnatError, match=f"--output {fresh}/x is in {fresh}, which is a file"):
        check_output_file(fresh / "x", "--output")


def test_distill_refuses_to_write_over_the_teachers_training_data_or_files(tmp_path, monkeypatch, capsys):
    """Without --input the teacher's own training split is read; --output naming its target file replaced it."""
    import yaml

    from atnat.experiments.cli.commands import main
    from tests.test_extra_tests import tiny_grid_dir

    data, spec = tiny_grid_dir(tmp_path, monkeypatch)
    spec["cells"] = {"at": spec["cells"]["at"]}
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    assert main(["cell", "g.yaml", "at-s1", "--results", "res"]) == 0
    run = tmp_path / "res" / spec["name"] / "runs" / "at-s1"
    (target,) = data.glob("train.yy")
    before = target.read_bytes()
    capsys.readouterr()
    assert main(["distill", "--teacher", str(run), "--strategy", "greedy", "--output", str(target)]) == 2
    assert "is the teacher's training train target" in capsys.readouterr().err and target.read_bytes() == before
    assert main(["distill", "--teacher", str(run), "--strategy", "greedy", "--output", str(run / "config.json")]) == 2
    assert f"--output {run / 'config.json'} is a file of the model given to --teacher" in capsys.readouterr().err
    from atnat.experiments.training import distill as distilling

    def decoded(*args, **kwargs):
        raise AssertionError("the teacher decoded before --output was checked")

    monkeypatch.setattr(distilling, "distilled_targets", decoded)
    monkeypatch.setattr(distilling, "distill_sources", decoded)
    seen = []
    monkeypatch.setattr(distilling, "distilled_targets",
                        lambda teacher, src, tgt, spec, device: (seen.append(spec) or ["kd"], {"lines": 1}))
    assert main(["distill", "--teacher", str(run), "--output", str(tmp_path / "kd.txt"), "--option", "beam_size=2"]) == 0
    assert seen == [{"name": "beam", "beam_size": 2}]  # the user's beam, not a conflict with the default 5
    capsys.readouterr()
    monkeypatch.setattr(distilling, "distilled_targets", decoded)
    for output, problem in ((tmp_path, "is a folder"), (target / "kd.txt", "which is a file"),
                            (target / "deeper" / "kd.txt", f"is in {target}, which is a file")):
        for source in ([], ["--input", str(target)]):
            assert main(["distill", "--teacher", str(run), "--output", str(output), *source]) == 2
            err = capsys.readouterr().err
            assert err.startswith(f"atnat: error: --output {output} ") and problem in err


@pytest.mark.parametrize("strategy", ["speculative", "npd"])
def test_a_strategy_that_runs_a_second_model_is_refused_as_distillations_strategy(tmp_path, capsys, strategy):
    """distill --strategy speculative --teacher T said "pass --teacher", which was given: distillation decodes with its
    teacher alone, so a strategy that runs a teacher beside the decoder is no strategy of distillation's."""
    from atnat.experiments.cli.commands import main

    (tmp_path / "src.txt").write_text("a b\n")
    assert main(["distill", "--teacher", str(tmp_path / "teacher"), "--strategy", strategy, "--input",
                 str(tmp_path / "src.txt"), "--output", str(tmp_path / "kd.txt")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"--strategy {strategy}" in err and "distillation decodes with the teacher alone" in err and \
        "pass --teacher" not in err, err
    assert not (tmp_path / "kd.txt").exists()


def test_a_tasks_distillation_leaves_out_sources_beyond_the_teachers_reach_and_records_what_it_did(tmp_path,
                                                                                                 monkeypatch):
    """Reviews: (1) a teacher that trained fine (pairs over train.max_len dropped) failed to distil its own task
    at the first source longer than it reads, though the student drops that pair anyway (on WMT14: one line past
    max_positions, hours into a decode); (2) the device the targets were decoded on was not recorded; (3) a cache
    reused for other references reported the first caller's BLEU as distill_bleu."""
    import copy

    from atnat.experiments.config.run import load_task, run_config_from_dict
    from atnat.experiments.training.distill import distilled_targets
    from atnat.experiments.training.train import train
    from tests.test_resume import RUN

    raw = copy.deepcopy(RUN)
    raw["model"]["max_positions"] = 4
    raw["train"].update(max_len=3, max_steps=7)
    cfg = run_config_from_dict(raw, "t")
    train(cfg, tmp_path / "teacher")
    src, tgt = (list(side) for side in load_task(cfg).splits["train"])
    from atnat.experiments.modelfiles.loading import load_module

    module, tokenizer = load_module(tmp_path / "teacher", map_location="cpu")
    reach = module.decoder.max_source_length
    beyond = [i for i, s in enumerate(src) if len(tokenizer.encode(s)) > reach]
    assert beyond and len(beyond) < len(src)
    lines, meta = distilled_targets(tmp_path / "teacher", src, tgt, "greedy")
    assert len(lines) == len(src) and all(lines[i] == "" for i in beyond)
    assert meta["beyond_teacher_reach"] == len(beyond) and meta["device"] == "cpu"
    assert meta["beyond_teacher_reach_lines"] == beyond and any(lines[i] for i in range(len(src)) if i not in beyond)
    from atnat.experiments.evaluation.metrics.quality import bleu_metric

    within = [i for i in range(len(src)) if i not in beyond]  # the undecoded sources' empty lines are not scored
    assert meta["bleu_vs_references"] == pytest.approx(bleu_metric(module.bleu_tokenize).corpus_score(
        [lines[i] for i in within], [[tgt[i] for i in within]]).score)
    from types import SimpleNamespace

    from atnat.experiments.training import distill

    class Count:  # a score that tells references apart (a 7-step teacher's short lines score 0 BLEU on any)
        def corpus_score(self, hyps, refs):
            return SimpleNamespace(score=float(sum(len(r) for r in refs[0])))

        def get_signature(self):
            return "count"

    others = [line + " w7" for line in lines]  # the cache, scored against other references
    monkeypatch.setattr(distill, "bleu_metric", lambda tokenize: Count())
    again, other = distilled_targets(tmp_path / "teacher", src, others, "greedy")
    assert again == lines and other["bleu_vs_references"] == sum(len(others[i]) for i in within)
