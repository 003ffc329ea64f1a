"""A grid whose settings changed since its cells ran names the stale cells and stops, until told
to rerun or keep them: neither their numbers nor their runs are silently kept or lost."""
import json
from pathlib import Path

import pytest
import yaml

from atnat.experiments.cli.commands import main
from tests.test_grid import TINY, write_grid


def edited(**cells):
    return {**TINY, "cells": {name: {**TINY["cells"][name], **cells.get(name, {})} for name in TINY["cells"]}}


def test_a_changed_training_setting_is_named_then_rerun_with_its_students(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path)
    assert main(["run", str(grid), "--results", "res"]) == 0
    runs = tmp_path / "res" / "tiny" / "runs"
    write_grid(tmp_path, edited(at={"optim": {"lr": 0.01}}))
    capsys.readouterr()
    assert main(["run", str(grid), "--results", "res"]) == 2
    err = capsys.readouterr().err
    assert "2 cell(s) were run with other settings" in err and "Nothing was run" in err
    assert "at-s1 (train again): optim.lr: 0.0005 -> 0.01" in err
    assert "cmlm-kd-s1 (train again): its teacher at-s1 is trained again" in err
    assert json.loads((runs / "at-s1" / "config.json").read_text())["optim"]["lr"] == 0.0005  # untouched
    assert main(["run", str(grid), "--results", "res", "--stale", "rerun"]) == 0
    assert json.loads((runs / "at-s1" / "config.json").read_text())["optim"]["lr"] == 0.01
    kept = sorted(p.name.split(".stale-")[0] for p in runs.glob("*.stale-*"))
    assert kept == ["at-s1", "cmlm-kd-s1"]  # the old runs and their numbers are kept aside
    assert main(["run", str(grid), "--results", "res"]) == 0  # nothing stale any more


def test_a_changed_eval_setting_is_kept_on_request_or_evaluated_again_without_training(tmp_path, monkeypatch,
                                                                                      capsys):
    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path)
    assert main(["run", str(grid), "--results", "res"]) == 0
    out = tmp_path / "res" / "tiny"
    trained = (out / "runs" / "at-s1" / "train.json").stat().st_mtime_ns
    write_grid(tmp_path, edited(at={"eval": {"strategies": ["greedy", {"name": "beam", "beam_size": 3}]}}))
    capsys.readouterr()
    assert main(["run", str(grid), "--results", "res"]) == 2
    assert "at-s1 (evaluate again): eval.strategies" in capsys.readouterr().err
    assert main(["run", str(grid), "--results", "res", "--stale", "keep"]) == 0
    assert "Kept on the user's word (`--stale keep`)" in (out / "report.md").read_text()
    assert main(["run", str(grid), "--results", "res", "--stale", "rerun"]) == 0
    assert (out / "runs" / "at-s1" / "train.json").stat().st_mtime_ns == trained  # not trained again
    labels = {r["strategy"] for r in json.loads((out / "runs" / "at-s1" / "metrics.json").read_text())["rows"]}
    assert labels == {"greedy", "beam3"}
    assert "Kept on the user's word" not in (out / "report.md").read_text()
    capsys.readouterr()
    assert main(["run", str(grid), "--results", "res"]) == 0  # evaluated under the new settings: not stale now
    assert "evaluate again" not in capsys.readouterr().err


def test_only_matches_cell_names_exactly_or_by_glob(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path)
    assert main(["run", str(grid), "--results", "res", "--only", "at", "--dry-run"]) == 2
    assert "--only 'at' matches no cell" in capsys.readouterr().err  # a substring is not a name
    assert main(["run", str(grid), "--results", "res", "--only", "at-s1", "--dry-run"]) == 0
    listed = capsys.readouterr().out
    assert "at-s1" in listed and "cmlm-kd-s1" not in listed
    assert main(["run", str(grid), "--results", "res", "--only", "*-s1", "--dry-run"]) == 0
    assert "cmlm-kd-s1" in capsys.readouterr().out


def stale_at_cell(tmp_path, monkeypatch):
    """The tiny grid's at-s1 with a run folder recorded under another learning rate (stale: to train again):
    (grid, cell, run folder)."""
    from atnat.experiments.config.settings import resolved
    from atnat.experiments.running.grid import load_grid_into

    monkeypatch.chdir(tmp_path)
    grid, _ = load_grid_into(write_grid(tmp_path), tmp_path / "res", False)
    cell = grid.by_name()["at-s1"]
    run = Path(cell.config.output_dir)
    run.mkdir(parents=True)
    recorded = resolved(cell.config)
    recorded["optim"]["lr"] = 0.123
    (run / "config.json").write_text(json.dumps(recorded))
    return grid, cell, run


def test_stale_rerun_moves_no_folder_of_a_cell_another_process_trains(tmp_path, monkeypatch):
    import subprocess
    import sys

    import pytest as _pytest

    from atnat.core.errors import AtnatError
    from atnat.experiments.locks import cell_lock
    from atnat.experiments.running.stale import handle_stale

    grid, cell, run = stale_at_cell(tmp_path, monkeypatch)
    holder = subprocess.Popen([sys.executable, "-c", "import time; from pathlib import Path; from atnat.experiments.locks "
                               f"import held\nwith held(Path({str(cell_lock(run))!r}), 'cell at-s1'):\n    print('held', "
                               "flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with _pytest.raises(AtnatError, match="--stale rerun: cell at-s1 is in use by .*nothing was moved"):
            handle_stale(grid, [cell], "rerun")
        assert run.is_dir() and not list(run.parent.glob("at-s1.stale-*"))
    finally:
        holder.kill()
        holder.wait()


def test_a_student_of_a_teacher_trained_again_alone_is_stale(tmp_path, monkeypatch):
    """The teacher was trained again on its own (`--only 'at-*'`, or a lost machine): its settings are the
    grid's, but its weights are not those its finished student learnt from; the whole grid names the student."""
    import yaml

    from atnat.experiments.cli.commands import main
    from atnat.experiments.modelfiles.checkpoints import write_checksum
    from atnat.experiments.modelfiles.loading import evaluation_checkpoint
    from atnat.experiments.running.grid import load_grid_into
    from atnat.experiments.running.stale import find_stale
    from tests.test_extra_tests import tiny_grid_dir

    _, spec = tiny_grid_dir(tmp_path, monkeypatch)
    spec["cells"]["nat"] = {"decoder": {"name": "nat"}, "teacher": "at", "distill": {"strategy": {"name": "greedy"}},
                            "eval": {"strategies": ["parallel"]}}
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    for cell in ("at-s1", "nat-s1"):
        assert main(["cell", "g.yaml", cell, "--results", "res"]) == 0
    grid, _ = load_grid_into(tmp_path / "g.yaml", tmp_path / "res", False)
    assert find_stale(grid, grid.cells) == []
    weights = evaluation_checkpoint(Path(grid.by_name()["at-s1"].config.output_dir))
    weights.write_bytes(weights.read_bytes() + b"\0")  # trained again: other weights, and their checksum
    write_checksum(weights)
    (stale,) = find_stale(grid, grid.cells)
    assert stale.cell == "nat-s1" and stale.retrain and "has other weights now" in stale.reason
    # the student stopped half-way (a checkpoint, no results yet): `atnat cell` distilled again from the new
    # teacher and resumed, its later steps on other targets than its first, exit 0, distill.json overwritten
    student = Path(grid.by_name()["nat-s1"].config.output_dir)
    for name in ("metrics.json", "train.json"):
        (student / name).unlink()
    recorded = (student / "distill.json").read_text()
    assert main(["cell", "g.yaml", "nat-s1", "--results", "res"]) == 1
    assert "its teacher" in (student / "error.log").read_text() and "has other weights now" in (student / "error.log").read_text()
    assert (student / "distill.json").read_text() == recorded


def test_a_long_setting_that_changed_shows_where_it_changed():
    from atnat.experiments.config.settings import SettingsChange

    greedy = {"name": "greedy", "max_len_a": 2.0, "max_len_b": 10, "min_len": 0, "no_repeat_ngram": 0}
    change = SettingsChange([], [("eval.strategies", [greedy], [greedy, {"name": "beam", "beam_size": 3}])])
    before, after = change.describe().split(" -> ")
    assert "beam" in after and "beam" not in before and before != after


def test_a_recorded_config_never_imports_the_plugins_it_names(tmp_path, monkeypatch):
    """The stale check read each run's config.json through the config reader, which imported its `plugins:`
    list: a results folder could run code (and pass the module on to every worker through ATNAT_PLUGINS)."""
    import os
    import sys

    from atnat.experiments.config.plugins import ENV
    from atnat.experiments.config.run import run_config_from_dict
    from atnat.experiments.config.settings import settings_change
    from tests.test_resume import RUN

    marker = tmp_path / "ran"
    (tmp_path / "planted_module.py").write_text(f"open({str(marker)!r}, 'w').write('imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(ENV, "")
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({**RUN, "plugins": ["planted_module"]}))
    change = settings_change(run, run_config_from_dict(RUN, "test"))
    assert not marker.exists() and "planted_module" not in sys.modules and not os.environ[ENV]
    assert change.training and "planted_module" in change.training[0][1]  # the record is named, not trusted


def test_a_teacher_changed_between_two_runs_checkpoints_of_one_name_is_a_training_change(tmp_path):
    """Only the file name was compared: runs/teacher-A/checkpoints/best.ckpt and runs/teacher-B/checkpoints/
    best.ckpt were the same teacher, so a student resumed (or was reused) under another teacher."""
    from atnat.experiments.config.run import run_config_from_dict
    from atnat.experiments.config.settings import resolved, settings_change
    from tests.test_resume import RUN

    def student(teacher):
        return run_config_from_dict({**RUN, "decoder": {"name": "cmlm"}, "distill": {"teacher": teacher},
                                     "eval": {"strategies": [{"name": "mask-predict", "iterations": 2}]}}, "test")

    run = tmp_path / "student"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(resolved(student("runs/teacher-A/checkpoints/best.ckpt"))))
    change = settings_change(run, student("runs/teacher-B/checkpoints/best.ckpt"))
    assert [key for key, *_ in change.training] == ["distill.teacher"]
    assert not settings_change(run, student("/moved/runs/teacher-A/checkpoints/best.ckpt"))  # a moved folder


def test_test_only_settings_re_evaluate_instead_of_training_again(tmp_path):
    """task.n_test (its own generator) and a targets: false student's distill.strategy (unused) retrained the
    cell and every student."""
    from atnat.experiments.config.run import run_config_from_dict
    from atnat.experiments.config.settings import resolved, settings_change
    from tests.test_resume import RUN

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(resolved(run_config_from_dict(RUN, "test"))))
    change = settings_change(run, run_config_from_dict({**RUN, "task": {**RUN["task"], "n_test": 20}}, "test"))
    assert not change.training and [k for k, *_ in change.evaluation] == ["task.n_test"]
    assert settings_change(run, run_config_from_dict({**RUN, "task": {**RUN["task"], "n_valid": 20}}, "test")).training
    control = {**RUN, "decoder": {"name": "cmlm"}, "eval": {"strategies": [{"name": "mask-predict", "iterations": 2}]},
               "distill": {"teacher": "runs/at", "targets": False}}
    (run / "config.json").write_text(json.dumps(resolved(run_config_from_dict(control, "test"))))
    other = {**control, "distill": {**control["distill"], "strategy": {"name": "greedy"}}}
    assert not settings_change(run, run_config_from_dict(other, "test"))
    used = {**other, "distill": {**other["distill"], "targets": True}}
    keys = [k for k, *_ in settings_change(run, run_config_from_dict(used, "test")).training]
    assert keys == ["distill.strategy", "distill.targets"]  # with targets, the strategy counts


@pytest.mark.slow  # several tiny grid runs (20-30 s): `pytest -m slow` runs it
def test_only_checks_the_whole_grid_for_stale_cells_and_the_report_names_those_it_does_not_run(
        tmp_path, monkeypatch, capsys):
    """--only once limited the check to the cells it chose: a student whose teacher outside the choice
    changed, or any stale cell not chosen, was tabulated as current (exit 0)."""
    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path)
    assert main(["run", str(grid), "--results", "res"]) == 0
    write_grid(tmp_path, edited(at={"train": {**TINY["base"]["train"], "max_steps": 12}}))
    capsys.readouterr()
    assert main(["run", str(grid), "--results", "res", "--only", "cmlm-kd-s1"]) == 2
    assert "cmlm-kd-s1 (train again): its teacher at-s1 is trained again" in capsys.readouterr().err
    # told to rerun it alone, it would learn from the old teacher again (then named stale for a false reason)
    assert main(["run", str(grid), "--results", "res", "--only", "cmlm-kd-s1", "--stale", "rerun"]) == 2
    assert "is stale as a student of at-s1, which is stale too but not in this run" in capsys.readouterr().err
    assert not list((tmp_path / "res" / "tiny" / "runs").glob("*.stale-*"))  # nothing moved
    write_grid(tmp_path, edited(**{"cmlm-kd": {"eval": {"strategies": [{"name": "mask-predict", "iterations": 3}]}}}))
    assert main(["run", str(grid), "--results", "res", "--only", "at-s1"]) == 0
    assert "outside --only were run with other settings" in capsys.readouterr().err
    report = (tmp_path / "res" / "tiny" / "report.md").read_text()
    assert "Run with other settings than the grid file gives now" in report and "`cmlm-kd-s1` (eval.strategies" in report


@pytest.mark.slow  # several tiny grid runs (20-30 s): `pytest -m slow` runs it
def test_a_grid_file_edited_while_it_runs_is_kept_as_it_was_read_and_cells_run_by_the_edit_are_named(
        tmp_path, monkeypatch, capsys):
    """Workers read the grid file again: one edited mid-run trains or evaluates later cells by the edit,
    while the run's tables stood for the file as it started, and grid-as-run.yaml kept the edited file."""
    from atnat.experiments.running.launchers import local

    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path)
    original = grid.read_bytes()
    real = local.start

    def start(grid_path, cell, *args):
        if cell.name == "cmlm-kd-s1":  # the teacher has finished: the file is edited before its student starts
            write_grid(tmp_path, edited(**{"cmlm-kd": {"eval": {"strategies": [{"name": "mask-predict",
                                                                                 "iterations": 3}]}}}))
        return real(grid_path, cell, *args)
    monkeypatch.setattr(local, "start", start)
    assert main(["run", str(grid), "--results", "res", "--workers", "2"]) == 2
    assert "cmlm-kd-s1 (evaluate again): eval.strategies" in capsys.readouterr().err
    out = tmp_path / "res" / "tiny"
    assert (out / "grid-as-run.yaml").read_bytes() == original
    assert "`cmlm-kd-s1` (eval.strategies" in (out / "report.md").read_text()


def test_a_student_whose_teacher_has_not_finished_is_not_run(tmp_path, monkeypatch, capsys):
    """A teacher stopped half way has a best checkpoint: the student distilled from it and was reported ok,
    as if taught by the finished teacher."""
    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path)
    assert main(["run", str(grid), "--results", "res", "--only", "at-s1"]) == 0
    runs = tmp_path / "res" / "tiny" / "runs"
    (runs / "at-s1" / "metrics.json").unlink()  # stopped before its evaluation
    capsys.readouterr()
    assert main(["run", str(grid), "--results", "res", "--only", "cmlm-kd-s1"]) == 1
    assert "its teacher cell at-s1 has not finished" in capsys.readouterr().err
    assert not (runs / "cmlm-kd-s1" / "checkpoints").exists()
    assert main(["run", str(grid), "--results", "res"]) == 0  # the whole grid: teacher, then student


def test_atnat_cell_names_a_finished_cell_the_grid_has_changed_since(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path, {**TINY, "cells": {"at": TINY["cells"]["at"]}})
    assert main(["cell", str(grid), "at-s1", "--results", "res"]) == 0
    write_grid(tmp_path, {**TINY, "cells": {"at": {**TINY["cells"]["at"], "optim": {"lr": 0.01}}}})
    capsys.readouterr()
    assert main(["cell", str(grid), "at-s1", "--results", "res"]) == 0  # done: not run again
    assert "cell at-s1 finished with other settings than" in capsys.readouterr().err


def test_a_student_started_from_its_teacher_is_not_resumed_after_the_teacher_trained_again(tmp_path, monkeypatch):
    """A student of `init_from: teacher` on the references (no distill.json) read its teacher again at every
    resume and recorded those weights as the ones it started from: a teacher trained again meanwhile went unseen,
    and the finished student said it learnt from weights it never saw."""
    from tests.test_extra_tests import tiny_grid_dir

    _, spec = tiny_grid_dir(tmp_path, monkeypatch)
    spec["cells"]["ctl"] = {"decoder": "nat", "teacher": "at", "distill": {"targets": False},
                            "train": {"init_from": "teacher"}, "eval": {"strategies": ["parallel"]}}
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    for cell in ("at-s1", "ctl-s1"):
        assert main(["cell", "g.yaml", cell, "--results", "res"]) == 0
    runs = tmp_path / "res" / "two-tests" / "runs"
    first = json.loads((runs / "ctl-s1" / "init.json").read_text())["checkpoint"]
    for record in ("train.json", "metrics.json"):  # the student's training not finished: it resumes
        (runs / "ctl-s1" / record).unlink()
    (runs / "at-s1").rename(tmp_path / "old-at")  # the teacher trained again, to other weights
    spec["cells"]["at"]["train"] = {"max_steps": 6}
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    assert main(["cell", "g.yaml", "at-s1", "--results", "res"]) == 0
    assert main(["cell", "g.yaml", "ctl-s1", "--results", "res"]) == 1
    assert "has other weights now than those it learnt from" in (runs / "ctl-s1" / "error.log").read_text()
    assert json.loads((runs / "ctl-s1" / "init.json").read_text())["checkpoint"] == first


def test_a_holder_left_on_another_machine_is_named_for_removal_and_an_ended_job_holds_nothing(tmp_path, monkeypatch):
    """A worker killed on another host leaves cell.lock.json: --stale rerun refused for ever, with no word of the
    file to remove; one whose cluster job has ended still blocked it."""
    from atnat.core.errors import AtnatError
    from atnat.experiments.locks import cell_lock, holder_file
    from atnat.experiments.running.stale import handle_stale

    grid, cell, run = stale_at_cell(tmp_path, monkeypatch)
    holder_file(cell_lock(run)).write_text(json.dumps({"pid": 4242, "host": "node7-gone"}))
    with pytest.raises(AtnatError, match=r"a holder on another machine that is gone.*cell.lock.json: remove it"):
        handle_stale(grid, [cell], "rerun")
    (run / "job.json").write_text(json.dumps({"executor": "local", "job_id": str(2**22 + 1), "submitted_s": 0}))
    handle_stale(grid, [cell], "rerun")  # its job has ended: the folder is moved aside
    assert list(run.parent.glob("at-s1.stale-*"))


def test_a_record_this_atnat_cannot_read_says_why_whole():
    """A plugin trial's finding: after a grid's plugins changed, the stale message cut the reason to 60 characters
    (a path), hiding that a recorded plugin was not imported."""
    from atnat.experiments.config.settings import SettingsChange

    why = ("runs/at-s1/config.json: the run was made with plugins brk.raising_metric, which a record read back does "
           "not import; name them in your config's plugins: or with --plugins")
    told = SettingsChange([("config.json", why, "(this atnat's settings)")], []).describe()
    assert why in told
