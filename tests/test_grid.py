"""Grid expansion, grid config errors, and a tiny grid end to end through the CLI (with resume)."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from atnat.experiments.cli.commands import main
from atnat.experiments.config.run import ConfigError
from atnat.experiments.running.grid import load_grid, run_order

TINY = {
    "name": "tiny",
    "base": {
        "task": {"name": "copy", "vocab": 6, "min_len": 2, "max_len": 4, "n_train": 200, "n_valid": 10, "n_test": 12},
        "model": {"d_model": 16, "n_heads": 2, "ffn_dim": 32, "encoder_layers": 1, "decoder_layers": 1, "dropout": 0.0},
        "train": {"max_steps": 8, "max_tokens": 256, "val_every_steps": 4, "progress_bar": False, "num_threads": 1},
        "eval": {"n_bootstrap": 10},
    },
    "cells": {
        "at": {"decoder": {"name": "at"}, "eval": {"strategies": ["greedy", {"name": "beam", "beam_size": 2}]}},
        "cmlm-kd": {"decoder": {"name": "cmlm"}, "teacher": "at",
                    "distill": {"strategy": {"name": "greedy"}},
                    "eval": {"strategies": [{"name": "mask-predict", "iterations": 2}]}},
    },
    "seeds": [1],
    # eager: these grids test the timing phase's logic; the default engine (auto) compiles an AT step
    # for single-sentence decodes (~10 s a package), which tests/test_engines.py covers
    "speed": {"latency_sentences": 2, "throughput_sentences": 4, "repeats": 1, "warmup": 0, "engine": "eager"},
    # no figures: they were about half of each tiny grid run (1.6-2.3 s of 3.4-4.6 s, measured 2026-11-26);
    # test_a_grid_report_without_figures_says_how_to_draw_them checks both ways, tests/test_report.py the figures
    "report": {"figures": False},
}


def write_grid(tmp_path, data=TINY, name="tiny.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_expansion_axes_zip_exclude_seeds_and_teacher_order(tmp_path):
    data = {**TINY, "axes": {"task.vocab": [5, 6], "model.d_model": {"small": 16, "big": 32},
                             "train.max_steps": [3, 4]},
            "zip": [["task.vocab", "train.max_steps"]], "exclude": [{"cell": "cmlm-kd", "model.d_model": "big"}],
            "seeds": [1, 2]}
    grid = load_grid(write_grid(tmp_path, data))
    # 2 zipped values x 2 widths x 2 variants x 2 seeds, minus cmlm-kd on big (2 x 2 seeds)
    assert len(grid.cells) == 2 * 2 * 2 * 2 - 4
    names = [c.name for c in grid.cells]
    assert "5-3-small-at-s1" in names and "6-4-big-at-s2" in names and "6-4-big-cmlm-kd-s1" not in names
    cell = grid.by_name()["5-3-small-cmlm-kd-s2"]
    assert cell.config.task["vocab"] == 5 and cell.config.train.max_steps == 3 and cell.config.model["d_model"] == 16
    assert cell.teacher == "5-3-small-at-s2" and cell.config.distill.teacher.endswith("runs/5-3-small-at-s2")
    order = [c.name for c in run_order(grid)]
    assert all(order.index(c.teacher) < order.index(c.name) for c in grid.cells if c.teacher)


@pytest.mark.parametrize("change, message", [
    ({"cels": {}}, r"unknown key 'cels' \(did you mean 'cells'\?\); valid keys: name, description"),
    ({"cells": {"x": {"decoder": {"name": "cmlm"}, "teacher": "nobody"}}}, r"teacher names 'nobody'"),
    ({"cells": {"x": {"decoder": {"name": "at"}, "eval": {"strategies": ["ctc"]}}}}, r"cannot drive decoder 'at'"),
    ({"zip": [["task.vocab"]]}, r"zip names axis 'task.vocab', which is not in axes"),
    ({"speed": {"repeat": 3}}, r"speed: unknown key 'repeat' \(did you mean 'repeats'\?\); valid keys: latency_sentences"),
    ({"speed": {"engine": "aoti+turbo"}}, r"speed.engine 'aoti\+turbo': unknown option 'turbo'; valid: engines eager, "
                                          r"static, packed, inductor, aoti, auto; options \+autotune"),
    ({"speed": {**TINY["speed"], "reference_at": "nobody"}}, r"speed.reference_at: 'nobody' is not a cell of this grid"),
    ({"speed": {**TINY["speed"], "reference_at": "cmlm-kd"}}, r"speed.reference_at: 'cmlm-kd' must be an AT cell"),
    ({"cells": {**TINY["cells"], "fast": {"decoder": {"name": "at"}, "eval": {"strategies": ["beam"]}}},
      "speed": {**TINY["speed"], "reference_at": "fast"}}, r"'fast' must evaluate with greedy"),
])
def test_grid_config_errors_name_file_and_key(tmp_path, change, message):
    path = write_grid(tmp_path, {**TINY, **change})
    with pytest.raises(ConfigError, match=message):
        load_grid(path)
    assert f"{path}" in str(pytest.raises(ConfigError, load_grid, path).value)


def test_a_teacher_cycle_names_the_cells_in_it_and_those_waiting_on_it(tmp_path):
    """Trials: the message listed every cell not yet ordered, a student of the cycle among them as if in it."""
    cells = {"a": {"decoder": {"name": "at"}, "teacher": "b"}, "b": {"decoder": {"name": "at"}, "teacher": "a"},
             "at": TINY["cells"]["at"], "kd": {**TINY["cells"]["cmlm-kd"], "teacher": "a"}}
    grid = load_grid(write_grid(tmp_path, {**TINY, "cells": cells}))
    with pytest.raises(ConfigError) as refused:
        run_order(grid)
    message = str(refused.value)
    assert "teacher dependencies form a cycle: a-s1 -> b-s1 -> a-s1 (each learns from the next); waiting on it: kd-s1" \
        in message and "at-s1" not in message
    cells |= {"c": {"decoder": {"name": "at"}, "teacher": "d"}, "d": {"decoder": {"name": "at"}, "teacher": "c"}}
    with pytest.raises(ConfigError) as refused:
        run_order(load_grid(write_grid(tmp_path, {**TINY, "cells": cells})))
    assert "form cycles: a-s1 -> b-s1 -> a-s1; c-s1 -> d-s1 -> c-s1 (each learns from the next); waiting on them: " \
        "kd-s1" in str(refused.value)


def md_table_rows(md: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in md.splitlines()
            if line.startswith("|") and not set(line) <= set("|-: ")]


def test_tiny_grid_end_to_end_through_the_cli(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path, {**TINY, "speed": {**TINY["speed"], "engine": "static"},  # the timing's engine
                                 "report": {"figures": True}})  # the whole report, as a grid's run writes it
    assert main(["run", str(grid), "--results", "res"]) == 0
    out = tmp_path / "res" / "tiny"
    assert (out / "figures" / "quality_vs_speed.png").is_file()
    df = pd.read_csv(out / "results.csv")
    assert list(df.strategy) == ["greedy", "beam2", "mask-predict-2"]
    assert (df.timing_engine == "static").all()
    assert "engine static" in json.loads((out / "environment.json").read_text())["timing"]
    assert (df.status == "ok").all() and df.bleu.between(0, 100).all()
    assert df.loc[df.strategy == "greedy", "speedup_vs_at"].iloc[0] == pytest.approx(1.0)
    # every system's speed over the baseline's beam search too (the usual quality reference), paired
    assert (df.at_beam_baseline == "at-s1 / beam2").all() and df.speedup_vs_at_beam.notna().all()
    assert df.loc[df.strategy == "beam2", "speedup_vs_at_beam"].iloc[0] == pytest.approx(1.0)
    assert bool(df.loc[df.decoder == "cmlm", "distilled"].iloc[0])
    assert json.loads((out / "runs" / "cmlm-kd-s1" / "distill.json").read_text())["lines"] == 200
    md = (out / "report.md").read_text()
    rows = md_table_rows(md)
    for _, r in df.iterrows():  # every BLEU of the table appears in the report's tables
        assert any(f"{r.bleu:.2f}" in " ".join(row) for row in rows), r.bleu
    assert (out / "report.html").exists() and (out / "environment.json").exists()
    # the report is regenerated from the folder alone
    (out / "report.md").unlink()
    assert main(["report", str(out)]) == 0 and (out / "report.md").read_text() == md


class Cli(subprocess.Popen):
    """An atnat command in its own process group: a test that gives up on it (communicate's timeout)
    kills the whole group, so no DDP rank or grid worker is left running beside the next tests."""

    def communicate(self, input=None, timeout=None):
        try:
            return super().communicate(input, timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            raise


def run_cli(args, cwd, program=("-m", "atnat.experiments.cli"), **kw):
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    return Cli([sys.executable, *program, *args], cwd=cwd, env=env, start_new_session=True,
               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)


@pytest.mark.slow
def test_killed_grid_resumes_without_retraining_finished_cells(tmp_path, monkeypatch):
    grid = write_grid(tmp_path)
    proc = run_cli(["run", str(grid), "--results", "res"], tmp_path)
    first = tmp_path / "res" / "tiny" / "runs" / "at-s1"
    deadline = time.time() + 240
    while not (first / "metrics.json").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)  # killed as hard as it gets, mid-grid
    proc.wait()
    assert json.loads((first / "metrics.json").read_text())["status"] == "ok"
    stamp = (first / "checkpoints" / "best.ckpt").stat().st_mtime
    done = run_cli(["run", str(grid), "--results", "res"], tmp_path)
    log = done.communicate(timeout=300)[0].decode()
    assert done.returncode == 0, log
    assert (first / "checkpoints" / "best.ckpt").stat().st_mtime == stamp  # not retrained
    df = pd.read_csv(tmp_path / "res" / "tiny" / "results.csv")
    assert list(df.strategy) == ["greedy", "beam2", "mask-predict-2"] and (df.status == "ok").all()
    # an uninterrupted run of the same grid ends with the same quality numbers (in this process: a third
    # `atnat run` process would only add its start-up)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    monkeypatch.chdir(fresh)
    assert main(["run", str(grid), "--results", "res"]) == 0
    ref_df = pd.read_csv(fresh / "res" / "tiny" / "results.csv")
    cols = ["cell", "strategy", "bleu", "exact_match", "repetition_rate", "length_exact"]
    pd.testing.assert_frame_equal(df[cols], ref_df[cols])


def test_translate_and_distill_cli_on_a_trained_run(tmp_path, monkeypatch, capsys):
    import io

    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path, {**TINY, "cells": {"at": TINY["cells"]["at"]}})
    assert main(["run", str(grid), "--results", "res"]) == 0
    run = tmp_path / "res" / "tiny" / "runs" / "at-s1"
    lines = (run / "references.txt").read_text().split("\n")[:3]
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(lines) + "\n"))
    capsys.readouterr()
    assert main(["translate", "--checkpoint", str(run), "--strategy", "beam", "--beam", "2"]) == 0
    out = capsys.readouterr().out.split("\n")
    assert len(out) == 4 and out[-1] == ""  # one line per input line, in order
    assert main(["distill", "--teacher", str(run), "--output", "kd.txt", "--strategy", "greedy"]) == 0
    assert len((tmp_path / "kd.txt").read_text().split("\n")[:-1]) == 200
    # the distillation cache is reused for the same teacher weights and redone when they change
    from atnat.experiments.training.distill import distilled_targets

    src = ["w1 w2", "w3"]
    _, meta = distilled_targets(run, src, src, {"name": "greedy"})
    from atnat.experiments.training.distill import cache_dir

    cached = cache_dir(run, {"name": "greedy"}) / "train.txt"
    cached.write_text("stale\nstale\n")  # other targets with their checksum: what a reuse would return
    recorded = json.loads((cached.parent / "meta.json").read_text())
    import hashlib

    recorded["targets_sha256"] = hashlib.sha256("stale\nstale".encode()).hexdigest()
    (cached.parent / "meta.json").write_text(json.dumps(recorded))
    assert distilled_targets(run, src, src, {"name": "greedy"})[0] == ["stale", "stale"]
    ckpt = run / "checkpoints" / "best.ckpt"  # other weights (the stamp is their sha256, not the file's date)
    from atnat.experiments.modelfiles.checkpoints import read_checkpoint, save_checkpoint_file

    state = read_checkpoint(ckpt)
    name = next(k for k, v in state["state_dict"].items() if v.is_floating_point())
    state["state_dict"][name] = state["state_dict"][name] + 1.0
    save_checkpoint_file(state, ckpt)
    fresh, meta2 = distilled_targets(run, src, src, {"name": "greedy"})
    assert fresh != ["stale", "stale"] and meta2["checkpoint"] != meta["checkpoint"]
    assert main(["translate", "--checkpoint", str(run), "--strategy", "mask-predict"]) == 2
    assert "strategy 'mask-predict' cannot drive decoder 'at': it needs the capability 'parallel'" in capsys.readouterr().err


@pytest.mark.slow
def test_translate_with_the_compiled_step_gives_the_same_translations(tmp_path, monkeypatch, capsys):
    import io

    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path, {**TINY, "cells": {"at": TINY["cells"]["at"]}})
    assert main(["run", str(grid), "--results", "res"]) == 0
    run = tmp_path / "res" / "tiny" / "runs" / "at-s1"
    text = "\n".join((run / "references.txt").read_text().split("\n")[:5]) + "\n"
    outs = []
    for extra in ([], ["--compile", "default"]):
        monkeypatch.setattr("sys.stdin", io.StringIO(text))
        capsys.readouterr()
        assert main(["translate", "--checkpoint", str(run), "--strategy", "beam", "--beam", "2", *extra]) == 0
        outs.append(capsys.readouterr().out)
    assert outs[0] == outs[1] and len(outs[0].split("\n")) == 6


def test_a_grid_report_without_figures_says_how_to_draw_them(tmp_path, monkeypatch, capsys):
    """`report: {figures: false}` (TINY's) writes the tables and a note, no PNG; `atnat report DIR` draws
    the figures from the same tables, and `--no-figures` removes them again (none outlives its tables)."""
    monkeypatch.chdir(tmp_path)
    assert load_grid(write_grid(tmp_path, {k: v for k, v in TINY.items() if k != "report"})).report.figures
    grid = write_grid(tmp_path, {**TINY, "cells": {"at": TINY["cells"]["at"]}})
    assert load_grid(grid).report.figures is False
    assert main(["run", str(grid), "--results", "res"]) == 0
    out = tmp_path / "res" / "tiny"
    md = (out / "report.md").read_text(encoding="utf-8")
    assert (out / "grid-as-run.yaml").read_text() == grid.read_text()  # the file as run (the report compares it)
    assert "Figures not drawn (the grid's `report: {figures: false}`, or `--no-figures`): `atnat report" in md
    assert not list(out.glob("figures/*.png")) and ".png" not in md
    assert main(["report", str(out)]) == 0
    drawn = sorted(p.stem for p in out.glob("figures/*.png"))
    assert "quality_vs_speed" in drawn and "](figures/quality_vs_speed.png)" in (out / "report.md").read_text(encoding="utf-8")
    assert main(["report", str(out), "--no-figures"]) == 0
    assert not list(out.glob("figures/*.png")) and "Figures not drawn" in (out / "report.md").read_text(encoding="utf-8")
    for bad, message in (({"figures": "maybe"}, "report.figures"), ({"figure": False}, "figure")):
        with pytest.raises(ConfigError, match=message):
            load_grid(write_grid(tmp_path, {**TINY, "report": bad}, name="bad.yaml"))


def test_a_grid_whose_cell_shows_lightnings_progress_bar_finishes_with_its_report(tmp_path, monkeypatch):
    """Lightning's rich progress bar, for a cell trained inside `atnat run`, cleared the live display of rich's
    shared console, on which the grid's own progress bar then failed as it stopped (IndexError): no timing
    phase, no report, exit 1."""
    from atnat.experiments.cli.commands import main

    data = {**TINY, "base": {**TINY["base"], "train": {**TINY["base"]["train"], "progress_bar": True, "max_steps": 2}},
            "cells": {"at": {"decoder": {"name": "at"}, "eval": {"strategies": ["greedy"]}}}}
    grid = write_grid(tmp_path, data)
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(grid), "--results", "res"]) == 0
    assert (tmp_path / "res" / "tiny" / "report.md").exists()


def test_two_cells_that_would_share_a_run_folder_are_refused(tmp_path):
    """Names are joined with '-': an axis label 'x-at' with cell 'at' and label 'x' with cell 'at-at' both make
    'x-at-at-s1'; the second would be skipped as done and shown with the first one's numbers."""
    at = {"decoder": {"name": "at"}}
    data = {**TINY, "axes": {"model.d_model": {"x-at": 16, "x": 32}}, "cells": {"at": at, "at-at": at}}
    with pytest.raises(ConfigError, match="two cells are both named 'x-at-at-s1'"):
        load_grid(write_grid(tmp_path, data))
    with pytest.raises(ConfigError, match="the same seed twice in seeds"):
        load_grid(write_grid(tmp_path, {**TINY, "cells": {"at": at}, "seeds": [1, 1]}))


def _with(**changes):
    data = {**TINY, "cells": {k: dict(v) for k, v in TINY["cells"].items()}}
    for key, value in changes.items():
        if key.startswith("cell_"):
            data["cells"]["at"].update(value)
        else:
            data[key] = value
    return data


@pytest.mark.parametrize("data, message", [
    (_with(exclude=[{"cell": "cmlm-kd", "sed": 2}]), r"exclude\[0\] names 'sed', which is no axis, 'cell' or 'seed'"),
    (_with(exclude=["cmlm-kd"]), r"exclude\[0\] must be a mapping"),
    (_with(base={**TINY["base"], "distill": {"strategy": {"name": "greedy"}}}),
     r"cell at-s1: distill: no teacher to distil from: give this cell one \(grid: teacher: CELL, with distill: in that "
     r"cell rather than in base:"),
    (_with(axes={"model.d_model": {"small": 16, "big": 32}, "optim.lr": {"lo": 0.001, "hi": 0.002},
                 "train.max_steps": {"short": 8, "long": 9}},
           zip=[["model.d_model", "optim.lr"], ["model.d_model", "train.max_steps"]]),
     r"zip names axis 'model\.d_model' in two groups"),
    (_with(axes={"model.d_model": {"small": 16, "big": 32}, "optim.lr": {"lo": 0.001, "hi": 0.002}},
           zip=["model.d_model", "optim.lr"]), r"zip must be a list of axis groups, e\.g\. \[\[model\.d_model, optim\.lr\]\]"),
    ({**TINY, "cells": {"nat": {"decoder": {"name": "nat"}, "eval": {"strategies": ["parallel"]}},
                        "nat2": {"decoder": {"name": "nat"}, "teacher": "nat", "eval": {"strategies": ["parallel"]}}}},
     r"cells\.nat2: its teacher nat-s1: distill\.strategy beam5 cannot decode with the teacher: strategy 'beam' "
     r"cannot drive decoder 'nat'"),
    ({**TINY, "cells": {"ctc": {"decoder": {"name": "ctc"}, "eval": {"strategies": ["ctc"]}},
                        "nat": {"decoder": {"name": "nat"}, "teacher": "ctc", "distill": {"targets": False},
                                "eval": {"strategies": [{"name": "npd", "length_beam": 3}]}}}},
     r"cells\.nat: its teacher ctc-s1: eval strategy npd-3 runs its teacher as an AT .* 'ctc' is not autoregressive"),
    (_with(exclude=[{"cell": "nta"}]), r"exclude\[0\]\.cell: 'nta' is none of its values \(valid: at, cmlm-kd\), so "
                                       r"the rule would exclude nothing"),
    (_with(exclude=[{"seed": 7}]), r"exclude\[0\]\.seed: 7 is none of its values \(valid: 1\)"),
    (_with(exclude=[{"seed": 1}]), r"exclude leaves no cell of the grid: nothing would run"),
    (_with(exclude=[{"cell": ["at"]}]), r"exclude\[0\]\.cell: \['at'\] is none of its values"),
    (_with(seeds=[]), "seeds must be a non-empty list of integers"),
    (_with(seeds=3), "seeds must be a non-empty list of integers"),
    (_with(axes={"train.max_steps": [3, 4]}, cell_at={"train": {"max_steps": 20}}),
     "cells.at sets train.max_steps, which axes.train.max_steps varies"),
    (_with(base={**TINY["base"], "seed": 7}), r"base.seed: a grid sets each cell's seed from seeds:"),
    (_with(cell_at={"name": "myat"}), "cells.at.name: a grid names each cell"),
    (_with(smoke={"output_dir": "/tmp/shared"}), "smoke.output_dir: a grid writes every cell under its results folder"),
    (_with(axes={"output_dir": ["a", "b"]}), "axes.output_dir: a grid sets each cell's output_dir itself"),
    ({**TINY, "cells": {**TINY["cells"], "cmlm-kd": {**TINY["cells"]["cmlm-kd"], "distill": {
        "strategy": {"name": "greedy"}, "teacher": "/elsewhere/run"}}}}, "teacher: and distill.teacher both name a teacher"),
])
def test_grid_settings_that_would_be_ignored_or_overridden_are_refused(tmp_path, data, message):
    """Each was accepted: a misspelt exclude rule excluded nothing, a cell's value replaced every axis value (two
    runs labelled differently, trained alike), seed:/name:/output_dir were silently replaced or bypassed the
    results folder, an explicit distill.teacher was swapped for teacher:'s run; a non-list exclude or seeds
    crashed with a traceback; an exclude that removed every cell passed a dry run and crashed `atnat run`."""
    with pytest.raises(ConfigError, match=message):
        load_grid(write_grid(tmp_path, data))


def test_a_key_given_twice_in_a_grid_file_is_refused(tmp_path):
    """Plain YAML keeps the last of two equal keys: a second `train:` under base silently reset the first's
    settings to their defaults."""
    text = write_grid(tmp_path).read_text().replace("  train:", "  train:\n    max_steps: 3\n  train:", 1)
    assert text.count("  train:") == 2
    (tmp_path / "twice.yaml").write_text(text)
    with pytest.raises(ConfigError, match="the key 'train' is given twice"):
        load_grid(tmp_path / "twice.yaml")


def test_an_equivalence_margin_written_5e_1_is_a_number(tmp_path):
    """YAML reads 5e-1 (no dot) as a string: refused here while every other number field takes it."""
    path = write_grid(tmp_path)
    path.write_text(path.read_text() + "equivalence_margin: 5e-1\n")
    assert load_grid(path).equivalence_margin == 0.5


def test_an_axis_over_the_task_makes_another_task_and_a_bare_decoder_name_keeps_its_axis(tmp_path):
    """An axis over `task.vocab` put both vocabularies under one task `copy`: their systems were timed
    together and 'paired' across different test sentences. And a cell's bare `decoder: ctc` dropped the
    axis `decoder.upsample` (both cells ran with the default), as `smoke:` dropped a bare task's name."""
    from atnat.experiments.evaluation.baseline import timing_groups
    from atnat.experiments.running.grid import describe

    vocab = {**TINY, "axes": {"task.vocab": {"v5": 5, "v6": 6}}}
    grid = load_grid(write_grid(tmp_path, vocab))
    assert sorted({describe(c)["task"] for c in grid.cells}) == ["copy-v5", "copy-v6"]
    assert sorted(timing_groups(grid.cells)) == [("copy-v5", 1), ("copy-v6", 1)]
    bare = {**TINY, "cells": {"ctc": {"decoder": "ctc", "eval": {"strategies": ["ctc"]}}},
            "axes": {"decoder.upsample": {"up2": 2, "up3": 3}}}
    grid = load_grid(write_grid(tmp_path, bare, "bare.yaml"))
    assert {c.name: c.config.decoder for c in grid.cells} == {"up2-ctc-s1": {"name": "ctc", "upsample": 2},
                                                              "up3-ctc-s1": {"name": "ctc", "upsample": 3}}
    task = {**TINY, "base": {**TINY["base"], "task": "reverse"}, "smoke": {"task": {"n_train": 50}}}
    grid = load_grid(write_grid(tmp_path, task, "task.yaml"), smoke=True)
    assert {c.config.task_name for c in grid.cells} == {"reverse"}


@pytest.mark.parametrize("change, message", [
    ({"cells": {"at": "at"}}, r"cells\.at: expected a mapping of settings \(e\.g\. decoder: \{name: at\}\), got 'at'"),
    ({"base": [1, 2]}, r"base: expected a mapping of settings, got \[1, 2\]"),
    ({"speed": [1]}, r"speed: expected a mapping of settings, got \[1\]"),
    ({"smoke": [1]}, r"smoke: expected a mapping of settings, got \[1\]"),
    ({"axes": ["model.d_model"]}, r"axes: expected a mapping of settings, got \['model\.d_model'\]"),
    ({"cells": {"at": {"decoder": {"name": "at"}}, "nat": {"decoder": {"name": "nat"}, "teacher": ["at"]}}},
     r"cells\.nat\.teacher: expected a cell name, got \['at'\]"),
    ({"baseline": ["at"]}, r"baseline: expected a cell name, got \['at'\]"),
    ({"cells": {1: {"decoder": {"name": "at"}}}}, r"cells: a cell name must be text, got 1"),
])
def test_a_grid_entry_of_the_wrong_kind_is_one_message(tmp_path, change, message):
    """Each of these was a traceback (ValueError, TypeError, 'unhashable type')."""
    from atnat.experiments.config.run import ConfigError

    with pytest.raises(ConfigError, match=message):
        load_grid(write_grid(tmp_path, {**TINY, **change}))


def test_smoke_settings_are_checked_without_smoke(tmp_path):
    """A misspelt key under smoke: passed the dry run (which promises every key checked) and failed only under
    --smoke, without naming smoke:."""
    from atnat.experiments.config.run import ConfigError

    grid = write_grid(tmp_path, {**TINY, "smoke": {"trian": {"max_steps": 5}}})
    with pytest.raises(ConfigError, match=r"unknown key 'trian'.*\(with the grid's smoke: settings, which --smoke "
                                          r"applies\)"):
        load_grid(grid)


def test_a_cell_whose_sources_outgrow_its_reach_is_named_by_dry_run_and_refused_before_its_teacher_trains(
        tmp_path, monkeypatch, capsys):
    """A trial's finding: a DA-Transformer student whose graph (upsample x source) outgrew the positional table
    passed `--dry-run` and failed when it started, after its teacher had trained."""
    monkeypatch.chdir(tmp_path)
    data = {**TINY, "cells": {"at": TINY["cells"]["at"],
                              "dat-kd": {"decoder": {"name": "dag", "upsample": 8}, "teacher": "at",
                                         "model": {"max_positions": 30}, "distill": {"strategy": {"name": "greedy"}},
                                         "eval": {"strategies": ["dag-greedy"]}}}}
    grid = write_grid(tmp_path, data)
    for command in (["run", str(grid), "--results", "res", "--dry-run"], ["run", str(grid), "--results", "res"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "cell dat-kd-s1: split train: sources of up to 4 tokens (train.max_len 256), but this model reads at " \
               "most 3 (decoder dag, model.max_positions 30, decoder.upsample 8)" in err and "nothing has run" in err
    assert not (tmp_path / "res" / "tiny" / "runs").exists()  # the teacher did not train
    fits = {**data, "cells": {**data["cells"], "dat-kd": {**data["cells"]["dat-kd"], "model": {"max_positions": 64}}}}
    assert main(["run", str(write_grid(tmp_path, fits)), "--results", "res", "--dry-run"]) == 0


def test_an_extra_test_split_whose_sources_outgrow_a_cells_reach_is_named_before_any_cell_trains(tmp_path, monkeypatch,
                                                                                                  capsys):
    """eval.extra_tests (test2017 beside test2016) are decoded after training: a source there past the decoder's
    reach failed the cell's evaluation hours in."""
    from tests.test_export import parallel_files

    monkeypatch.chdir(tmp_path)
    parallel_files(tmp_path)
    (tmp_path / "long.xx").write_text(" ".join(["the small red cat sees a big blue dog"] * 20) + "\n")
    (tmp_path / "long.yy").write_text("X\n")
    data = {"name": "reach", "base": {
        "task": {"name": "parallel", "data_dir": str(tmp_path), "src": "xx", "tgt": "yy", "valid": "valid",
                 "test": "test", "vocab_size": 60},
        "model": {"d_model": 16, "n_heads": 2, "ffn_dim": 32, "encoder_layers": 1, "decoder_layers": 1,
                  "max_positions": 600},
        "train": {"max_steps": 2, "max_tokens": 256, "val_every_steps": 2, "progress_bar": False, "num_threads": 1},
        "eval": {"n_bootstrap": 10, "extra_tests": ["long"]}},
        "cells": {"dat": {"decoder": {"name": "dag", "upsample": 8}, "eval": {"strategies": ["dag-greedy"]}}}}
    assert main(["run", str(write_grid(tmp_path, data)), "--results", "res", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "cell dat-s1: split long: sources of up to" in err and "this model reads at most 74 (decoder dag" in err
