"""atnat collect: a grid that runs for days loses its finished cells with the machine unless their
results are copied out as they finish (a long grid's first run lost 16 cells' checkpoints that way).
Only results are copied: no checkpoint, no data, nothing a planted link points at; the record of
the code that made them travels with them (train.json attempts, metrics.json written_by)."""
import json
import os
import shutil
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from atnat.experiments.cli.commands import main
from atnat.experiments.config.devices import device_name
from atnat.experiments.modelfiles.checkpoints import checksum_path, write_checksum
from atnat.experiments.modelfiles.loading import evaluation_checkpoint
from atnat.experiments.provenance import code_version
from tests.test_extra_tests import tiny_grid_dir


@pytest.mark.slow
def test_collect_copies_finished_results_only_and_keeps_them_current(tmp_path, monkeypatch, capsys):
    _, spec = tiny_grid_dir(tmp_path, monkeypatch)
    spec["cells"]["nat"] = {"decoder": "nat", "eval": {"strategies": ["parallel"]}}
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    assert main(["collect", "g.yaml", "--results", "res", "--to", "kept"]) == 2  # nothing has run
    assert "res/two-tests/runs does not exist" in capsys.readouterr().err
    assert main(["run", "g.yaml", "--results", "res", "--only", "at-s1"]) == 0
    capsys.readouterr()

    # what the cell records of the code that made it (experiments/provenance.py), and results.csv with it
    version = code_version()
    commit = version["git_commit"] + ("*" if version["git_dirty"] else "")
    run = tmp_path / "res" / "two-tests" / "runs" / "at-s1"
    (attempt,) = json.loads((run / "train.json").read_text())["attempts"]
    assert attempt["git_commit"] == version["git_commit"] and attempt["resumed_from"] is None
    # and the machine: the same seed gives the same weights only on the same CPU model (cpu-model-check)
    assert attempt["machine"]["cpu_model"] == device_name("cpu") and "torch_cpu_capability" in attempt["machine"]
    assert json.loads((run / "metrics.json").read_text())["written_by"]["git_commit"] == version["git_commit"]
    table = pd.read_csv(tmp_path / "res" / "two-tests" / "results.csv", keep_default_na=False).query("status == 'ok'")
    assert set(table["trained_with"]) == {commit} and set(table["evaluated_with"]) == {commit}
    assert "The cells ran under" not in (tmp_path / "res" / "two-tests" / "report.md").read_text()  # one version

    assert main(["collect", "g.yaml", "--results", "res", "--to", "kept"]) == 0
    out = capsys.readouterr().out
    assert "collected into kept: at-s1 (" in out and "not finished (not collected): nat-s1" in out
    copied = sorted(p.relative_to(tmp_path / "kept").as_posix() for p in (tmp_path / "kept").rglob("*") if p.is_file())
    assert "at-s1/metrics.json" in copied and "at-s1/hyps/greedy.txt" in copied and "at-s1/logs/metrics.csv" in copied
    assert "at-s1/timing.csv" in copied and "at-s1/timing.json" in copied  # the run timed it (its own phase)
    assert not [f for f in copied if "ckpt" in f or "references" in f or "samples" in f or f.endswith(".lock")]
    assert not (tmp_path / "kept" / "nat-s1").exists()
    assert (tmp_path / "kept" / "at-s1" / "metrics.json").read_bytes() == (run / "metrics.json").read_bytes()
    assert list(run.glob("checkpoints/*.ckpt"))  # the checkpoints were there, and were left behind

    # the machine is lost: the interim report is made from the collected copies alone, the same as from
    # the run folders (the references, left with the data set, are read from it again)
    interim = tmp_path / "res" / "two-tests" / "interim"
    assert main(["report", "--interim", "g.yaml", "--results", "res"]) == 0
    direct = {f: pd.read_csv(interim / f) for f in ("results.csv", "extra_tests.csv", "comparisons.csv")}
    (tmp_path / "res").rename(tmp_path / "res-lost")
    assert main(["report", "--interim", "g.yaml", "--results", "res", "--collected", "kept"]) == 0
    for name, table in direct.items():
        pd.testing.assert_frame_equal(pd.read_csv(interim / name), table, check_dtype=False)
    assert direct["results.csv"]["bleu_p_vs_at"].notna().any() and direct["comparisons.csv"]["diff_ci_low"].notna().all()
    assert "read from the cells collected in kept" in (interim / "report.md").read_text()
    assert not (tmp_path / "res" / "two-tests" / "runs").exists()  # staged elsewhere, gone after
    assert main(["report", "--interim", "g.yaml", "--results", "res", "--collected", "nowhere"]) == 2
    assert "--collected nowhere: no such folder" in capsys.readouterr().err
    shutil.rmtree(tmp_path / "res")
    (tmp_path / "res-lost").rename(tmp_path / "res")

    # atnat time: a seed is timed once all its cells are done, while the rest of the grid still trains
    assert main(["time", "g.yaml", "--results", "res"]) == 2
    err = capsys.readouterr().err
    assert "no task and seed has all its cells finished" in err and "not finished: nat-s1" in err
    del spec["cells"]["nat"]  # the same grid less the unfinished cell: its seed is complete
    (tmp_path / "g-at.yaml").write_text(yaml.safe_dump(spec))
    (tmp_path / "res" / "two-tests" / "timing.csv").unlink()  # the run's own timing phase timed at-s1: anew
    assert main(["time", "g-at.yaml", "--results", "res"]) == 0
    assert "timed (or kept, unchanged): parallel seed 1" in capsys.readouterr().out
    timed = pd.read_csv(tmp_path / "res" / "two-tests" / "timing.csv")
    assert main(["status", "g-at.yaml", "--results", "res"]) == 0  # per seed: done, and timed when
    assert f"parallel seed 1: 1 of 1 cells done, timed {timed.timing_session.iloc[0]}" in capsys.readouterr().out
    assert main(["status", "g.yaml", "--results", "res"]) == 0
    assert f"parallel seed 1: 1 of 2 cells done, 1 of them timed {timed.timing_session.iloc[0]}\n" in capsys.readouterr().out
    assert {"greedy", "beam2"} <= set(timed.strategy) and (timed.speedup_vs_at.notna()).any()
    assert main(["collect", "g.yaml", "--results", "res", "--to", "kept"]) == 0  # the seed's speed travels too
    assert "at-s1 (1 file)" in capsys.readouterr().out  # the new timing.csv (timing.json, the same settings)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "kept" / "at-s1" / "timing.csv"), timed)
    (tmp_path / "res").rename(tmp_path / "res-lost")
    assert main(["report", "--interim", "g.yaml", "--results", "res", "--collected", "kept"]) == 0
    speed = pd.read_csv(interim / "results.csv").query("cell == 'at-s1'")
    assert speed.speedup_vs_at.notna().all() and speed.latency_ms_b1.notna().all()
    assert "speed only of the tasks and seeds timed so far" in (interim / "report.md").read_text()
    shutil.rmtree(tmp_path / "res")
    (tmp_path / "res-lost").rename(tmp_path / "res")
    # the cell's weights change (trained again): its copied timing, of the old weights, is removed
    weights = evaluation_checkpoint(run)
    checksum = checksum_path(weights)
    original, recorded = weights.read_bytes(), checksum.read_text()
    weights.write_bytes(original + b"other weights")  # other bytes, their own checksum: as a cell trained again
    write_checksum(weights)
    assert main(["collect", "g.yaml", "--results", "res", "--to", "kept"]) == 0
    out = capsys.readouterr().out  # the copy's weights record follows the weights; the old timing goes
    assert "at-s1 (1 file)" in out and "at-s1 (2)" in out and not (tmp_path / "kept" / "at-s1" / "timing.csv").exists()
    weights.write_bytes(original)
    checksum.write_text(recorded)
    assert main(["collect", "g.yaml", "--results", "res", "--to", "kept"]) == 0
    assert "at-s1 (3 files)" in capsys.readouterr().out  # timing.csv, timing.json and weights.json

    assert main(["collect", "g.yaml", "--results", "res", "--to", "kept"]) == 0  # again: nothing to do
    assert "already current: 1 cell" in capsys.readouterr().out
    # the grid's timing moved away (as `atnat time` asks, to time a seed anew): a copy of these weights keeps its speed
    (tmp_path / "res" / "two-tests" / "timing.csv").rename(tmp_path / "timing-away.csv")
    assert main(["collect", "g.yaml", "--results", "res", "--to", "kept"]) == 0
    assert (tmp_path / "kept" / "at-s1" / "timing.csv").is_file() and (tmp_path / "kept" / "at-s1" / "timing.json").is_file()
    (tmp_path / "timing-away.csv").rename(tmp_path / "res" / "two-tests" / "timing.csv")

    # the cell evaluated again: a changed file is updated, a file it no longer has is removed
    metrics = json.loads((run / "metrics.json").read_text())
    metrics["rows"][0]["bleu"] = 99.0
    metrics["rows"] = [r for r in metrics["rows"] if r["strategy"] != "beam2"]  # no longer decoded with beam2
    (run / "metrics.json").write_text(json.dumps(metrics))
    (run / "hyps" / "beam2.txt").unlink()
    assert main(["collect", "g.yaml", "--results", "res", "--to", "kept"]) == 0
    out = capsys.readouterr().out
    assert "at-s1 (1 file)" in out and "removed from the copies (no longer in the run folder): at-s1 (1)" in out
    assert json.loads((tmp_path / "kept" / "at-s1" / "metrics.json").read_text())["rows"][0]["bleu"] == 99.0
    assert not (tmp_path / "kept" / "at-s1" / "hyps" / "beam2.txt").exists()

    # a link planted where a result belongs is refused by name, and never followed into the copy
    secret = tmp_path / "secret.txt"
    secret.write_text("not a result\n")
    os.symlink(secret, run / "hyps" / "planted.txt")
    assert main(["collect", "g.yaml", "--results", "res", "--to", "kept"]) == 1
    out = capsys.readouterr().out
    assert "skipped " in out and "hyps/planted.txt: not a regular file inside the run folder" in out
    assert not (tmp_path / "kept" / "at-s1" / "hyps" / "planted.txt").exists()
    assert (tmp_path / "kept" / "at-s1" / "metrics.json").exists()  # the rest is still there
    for name in ("timing.json", "timing.csv"):  # the grid's timing files are read like any result
        os.replace(tmp_path / "res" / "two-tests" / name, tmp_path / f"moved-{name}")
        os.symlink(secret, tmp_path / "res" / "two-tests" / name)
    assert main(["collect", "g.yaml", "--results", "res", "--to", "kept"]) == 1
    assert "timing.csv: not a regular file (a link?)" in capsys.readouterr().out
    assert (tmp_path / "kept" / "at-s1" / "timing.json").read_text() != secret.read_text()
    (tmp_path / "kept" / "at-s1" / "timing.json").unlink()  # a link among the copies is refused
    os.symlink(secret, tmp_path / "kept" / "at-s1" / "timing.json")
    assert main(["report", "--interim", "g.yaml", "--results", "res", "--collected", "kept"]) == 2
    err = capsys.readouterr().err  # refused, naming the file: as changed since it was collected (a manifest check)
    assert "refused kept/at-s1" in err and "timing.json" in err

    # atnat time on a finished seed whose weights are gone, never timed: a failure, named
    (tmp_path / "res" / "two-tests" / "timing.csv").unlink()
    (tmp_path / "res" / "two-tests" / "timing.json").unlink()
    shutil.rmtree(run / "checkpoints")
    assert main(["time", "g-at.yaml", "--results", "res"]) == 1
    assert "not timed: parallel seed 1 (no checkpoint and no earlier timing: at-s1)" in capsys.readouterr().out


def test_time_partial_times_a_seeds_finished_cells_beside_its_baseline_while_others_train(tmp_path, monkeypatch,
                                                                                        capsys):
    """A seed of the deep grid takes more than one session to finish, and the machine may be lost in
    between: `atnat time --partial` times each finished student beside its (finished) AT baseline
    while both still have their weights; a seed without its baseline has nothing to be timed against."""
    _, spec = tiny_grid_dir(tmp_path, monkeypatch)
    spec["cells"]["nat"] = {"decoder": "nat", "eval": {"strategies": ["parallel"]}}
    spec["cells"]["cmlm"] = {"decoder": "cmlm", "eval": {"strategies": [{"name": "mask-predict", "iterations": 2}]}}
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    out = tmp_path / "res" / "two-tests"
    assert main(["cell", "g.yaml", "nat-s1", "--results", "res"]) == 0  # one cell, no timing phase, no report
    capsys.readouterr()
    assert main(["time", "g.yaml", "--results", "res", "--partial"]) == 2  # no baseline yet: nothing to time
    err = capsys.readouterr().err
    assert "no task and seed has its baseline finished" in err and "baseline (at-s1) has finished" in err
    assert not (out / "timing.csv").exists()

    assert main(["cell", "g.yaml", "at-s1", "--results", "res"]) == 0
    capsys.readouterr()
    assert main(["time", "g.yaml", "--results", "res"]) == 2  # without --partial: waits for the whole seed
    assert "not finished: cmlm-s1" in capsys.readouterr().err
    assert main(["time", "g.yaml", "--results", "res", "--partial"]) == 0
    assert ("timed (or kept, unchanged): parallel seed 1 (its finished cells; not finished: cmlm-s1)"
            in capsys.readouterr().out)
    first = pd.read_csv(out / "timing.csv")
    assert set(first.cell) == {"at-s1", "nat-s1"} and first.timing_session.nunique() == 1
    nat = first.query("cell == 'nat-s1'").iloc[0]
    assert nat.speed_baseline == "at-s1 / greedy" and nat.speedup_vs_at > 0 and nat.speed_noise_low > 0
    assert main(["status", "g.yaml", "--results", "res"]) == 0
    assert f"parallel seed 1: 2 of 3 cells done, 2 of them timed {first.timing_session.iloc[0]}\n" in capsys.readouterr().out
    assert main(["time", "g.yaml", "--results", "res", "--partial"]) == 0  # nothing new: kept as it is
    pd.testing.assert_frame_equal(pd.read_csv(out / "timing.csv"), first)

    # nat-s1's weights are lost before the seed completes; its timing beside at-s1 stays. The seed's last
    # cell finishes: the seed is timed anew as a whole, except the cell with no weights left
    shutil.rmtree(out / "runs" / "nat-s1" / "checkpoints")
    assert main(["cell", "g.yaml", "cmlm-s1", "--results", "res"]) == 0
    capsys.readouterr()
    assert main(["status", "g.yaml", "--results", "res"]) == 0  # done, timed but for its last cell: said so
    assert (f"parallel seed 1: 3 of 3 cells done, 2 of them timed {first.timing_session.iloc[0]}; not timed: cmlm-s1 "
            "(atnat time)\n") in capsys.readouterr().out
    assert main(["time", "g.yaml", "--results", "res"]) == 0
    assert "timed (or kept, unchanged): parallel seed 1\n" in capsys.readouterr().out
    second = pd.read_csv(out / "timing.csv")
    assert set(second.cell) == {"at-s1", "nat-s1", "cmlm-s1"}
    pd.testing.assert_frame_equal(second.query("cell == 'nat-s1'").reset_index(drop=True),
                                  first.query("cell == 'nat-s1'").reset_index(drop=True), check_like=True)
    assert second.query("cell != 'nat-s1'").timing_session.nunique() == 1  # timed together, in one session

    # at-s1 is trained again after its seed was timed: status said "timed", and collect dropped its rows (of
    # other weights) without a word
    weights = evaluation_checkpoint(out / "runs" / "at-s1")
    weights.write_bytes(weights.read_bytes() + b"\0")
    write_checksum(weights)
    assert main(["status", "g.yaml", "--results", "res"]) == 0
    assert "parallel seed 1: 3 of 3 cells done, 2 of them timed " in (said := capsys.readouterr().out)
    assert "; not timed: at-s1 (atnat time)" in said
    assert main(["collect", "g.yaml", "--results", "res", "--to", "kept"]) == 0
    assert "without a timing of their present weights (time their seed while the weights are here: atnat time): " \
           "at-s1\n" in capsys.readouterr().out + "\n"
    assert not (tmp_path / "kept" / "at-s1" / "timing.csv").exists() and (tmp_path / "kept" / "nat-s1" / "timing.csv").exists()
    assert second.query("cell == 'cmlm-s1'").speed_baseline.tolist() == ["at-s1 / greedy"]


def test_time_partial_leaves_a_seed_whose_baseline_alone_has_finished(tmp_path, monkeypatch, capsys):
    """Nothing is compared with a baseline timed alone, and the seed's first student times it again
    beside itself: on the deep grid such a timing of `en-de-at-s3` paused the grid for 10 minutes
    for nothing."""
    from atnat.experiments.running import timing_phase

    _, spec = tiny_grid_dir(tmp_path, monkeypatch)
    spec["cells"]["nat"] = {"decoder": "nat", "eval": {"strategies": ["parallel"]}}
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    weights = tmp_path / "best.ckpt"
    weights.write_text("w")
    monkeypatch.setattr(timing_phase, "cell_status", lambda run: "ok" if Path(run).name == "at-s1" else "running")
    monkeypatch.setattr(timing_phase, "evaluation_checkpoint", lambda run: weights)
    assert main(["time", "g.yaml", "--results", "res", "--partial"]) == 2
    err = capsys.readouterr().err
    assert "nothing to time yet" in err and "only its baseline (at-s1) has finished: nothing to time beside it yet" in err
    assert not (tmp_path / "res" / "two-tests" / "timing.csv").exists()


def test_a_teacher_trained_again_with_other_weights_is_never_filed_beside_students_of_its_old_weights(
        tmp_path, monkeypatch, capsys):
    """The deep grid's teachers are trained again after each lost machine. On another CPU model bf16
    training rounds differently (the deep grid: an Intel AMX machine left the AMD runs' losses at step 49),
    so the teacher comes out with other weights: its copy must not replace the one the collected
    students learnt from, and a report from the copies must refuse a student beside another teacher."""
    _, spec = tiny_grid_dir(tmp_path, monkeypatch)
    spec["cells"]["nat"] = {"decoder": {"name": "nat"}, "teacher": "at", "distill": {"strategy": {"name": "greedy"}},
                            "train": {"init_from": "teacher"}, "eval": {"strategies": ["parallel"]}}
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    for cell in ("at-s1", "nat-s1"):  # trained alone: no timing phase, no report
        assert main(["cell", "g.yaml", cell, "--results", "res"]) == 0
    assert main(["collect", "g.yaml", "--results", "res", "--to", "kept"]) == 0
    capsys.readouterr()
    run = tmp_path / "res" / "two-tests" / "runs"
    kept = tmp_path / "kept"
    stamp = json.loads((kept / "at-s1" / "weights.json").read_text())["checkpoint"]
    assert stamp.startswith("sha256-") and json.loads((kept / "nat-s1" / "weights.json").read_text())["checkpoint"] \
        not in ("", stamp)  # the student's own weights
    assert json.loads((kept / "nat-s1" / "distill.json").read_text())["checkpoint"] == stamp
    assert json.loads((kept / "nat-s1" / "train.json").read_text())["initialised_from"]["checkpoint"] == stamp

    # the teacher is trained again and comes out different: its copy stays the one nat-s1 learnt from
    before = {p.name: p.read_bytes() for p in (kept / "at-s1").rglob("*") if p.is_file()}
    metrics = json.loads((run / "at-s1" / "metrics.json").read_text())
    metrics["rows"][0]["bleu"] = 12.5
    (run / "at-s1" / "metrics.json").write_text(json.dumps(metrics))
    weights = evaluation_checkpoint(run / "at-s1")  # trained again: other bytes, and their checksum beside them
    weights.write_bytes(weights.read_bytes() + b"\0")
    write_checksum(weights)
    new = "sha256-" + checksum_path(weights).read_text().split()[0]
    assert main(["collect", "g.yaml", "--results", "res", "--to", "kept"]) == 1
    out = capsys.readouterr().out
    assert f"not updated: at-s1: its weights are now {new}, but the collected nat-s1 learnt from other " \
           f"weights of it ({stamp}" in out
    assert {p.name: p.read_bytes() for p in (kept / "at-s1").rglob("*") if p.is_file()} == before

    # the run's student is trained again from the new teacher too: in one pass, the teacher's copy is kept
    # back (the collected student learnt from the old one), so the new student is not filed beside it either
    for name, keys in (("distill.json", ("checkpoint",)), ("train.json", ("initialised_from", "checkpoint")),
                       ("init.json", ("checkpoint",))):
        record = json.loads((run / "nat-s1" / name).read_text())
        (record if len(keys) == 1 else record[keys[0]])[keys[-1]] = new
        (run / "nat-s1" / name).write_text(json.dumps(record))
    assert main(["collect", "g.yaml", "--results", "res", "--to", "kept"]) == 1
    out = capsys.readouterr().out
    assert "not updated: at-s1: its weights are now" in out
    assert f"not updated: nat-s1: it learnt from {new}, not from the weights of at-s1 filed in kept ({stamp}" in out
    assert json.loads((kept / "nat-s1" / "distill.json").read_text())["checkpoint"] == stamp
    assert main(["report", "--interim", "g.yaml", "--results", "res", "--collected", "kept"]) == 0  # consistent

    # a copy filed by hand beside the student anyway is refused by the report: as changed since it was
    # collected, and, filed whole (its manifest written again, as a collect elsewhere would), naming both
    from atnat.experiments.running.collect import write_manifest

    (kept / "at-s1" / "weights.json").write_text(json.dumps({"checkpoint": new}))
    assert main(["report", "--interim", "g.yaml", "--results", "res", "--collected", "kept"]) == 2
    assert "kept/at-s1: not as collected (changed since it was collected: weights.json)" in capsys.readouterr().err
    write_manifest(kept / "at-s1")
    assert main(["report", "--interim", "g.yaml", "--results", "res", "--collected", "kept"]) == 2
    err = capsys.readouterr().err
    assert "students beside another model than their teacher" in err and f"nat-s1 learnt from {stamp}" in err
    (kept / "at-s1" / "weights.json").write_text(json.dumps({"checkpoint": stamp}))
    write_manifest(kept / "at-s1")

    # the old student's copy removed on purpose: the new teacher and the new student are filed together
    shutil.rmtree(kept / "nat-s1")
    assert main(["collect", "g.yaml", "--results", "res", "--to", "kept"]) == 0
    capsys.readouterr()
    assert json.loads((kept / "at-s1" / "metrics.json").read_text())["rows"][0]["bleu"] == 12.5
    assert json.loads((kept / "at-s1" / "weights.json").read_text())["checkpoint"] == new
    assert json.loads((kept / "nat-s1" / "distill.json").read_text())["checkpoint"] == new
    assert main(["report", "--interim", "g.yaml", "--results", "res", "--collected", "kept"]) == 0

    # the teacher's weights go and it is evaluated again: its copy no longer names weights it cannot vouch for
    shutil.rmtree(run / "at-s1" / "checkpoints")
    metrics["rows"][0]["bleu"] = 13.5
    (run / "at-s1" / "metrics.json").write_text(json.dumps(metrics))
    assert main(["collect", "g.yaml", "--results", "res", "--to", "kept"]) == 0
    capsys.readouterr()
    assert not (kept / "at-s1" / "weights.json").exists()


@pytest.mark.slow
def test_the_grids_own_report_from_collected_cells_needs_every_cell_and_matches_the_runs(tmp_path, monkeypatch,
                                                                                         capsys):
    """The deep grid's seeds finish on machines that are gone by the end (seed 1 exists only as copies):
    its report is made from the collected cells, the same tables as the run's own, and only once every
    cell is there."""
    _, spec = tiny_grid_dir(tmp_path, monkeypatch)
    spec["cells"]["nat"] = {"decoder": "nat", "eval": {"strategies": ["parallel"]}}
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", "g.yaml", "--results", "res"]) == 0
    assert main(["collect", "g.yaml", "--results", "res", "--to", "kept"]) == 0
    own = pd.read_csv(tmp_path / "res" / "two-tests" / "results.csv")
    timing = (tmp_path / "res" / "two-tests" / "timing.csv").read_bytes()
    own_samples = pd.read_csv(tmp_path / "res" / "two-tests" / "samples.csv")
    assert not any((tmp_path / "kept").glob("*/samples.csv"))  # the data set's text stays with the data set
    capsys.readouterr()
    assert main(["report", "g.yaml", "--results", "res", "--collected", "kept"]) == 2  # never over a runner's folder
    assert "holds run folders (runs/)" in capsys.readouterr().err
    assert (tmp_path / "res" / "two-tests" / "timing.csv").read_bytes() == timing
    (tmp_path / "res").rename(tmp_path / "res-lost")  # the machine is gone
    shutil.move(tmp_path / "kept" / "nat-s1", tmp_path / "nat-s1-aside")
    capsys.readouterr()
    assert main(["report", "g.yaml", "--results", "res", "--collected", "kept"]) == 2
    assert "1 of the 2 cells of g.yaml are not collected there (nat-s1)" in capsys.readouterr().err
    assert not (tmp_path / "res" / "two-tests" / "report.md").exists()
    shutil.move(tmp_path / "nat-s1-aside", tmp_path / "kept" / "nat-s1")
    assert main(["report", "g.yaml", "--results", "res", "--collected", "kept"]) == 0
    out = tmp_path / "res" / "two-tests"
    report = (out / "report.md").read_text()
    assert "Interim report" not in report and "Made from the cells collected in kept" in report
    made = pd.read_csv(out / "results.csv")
    keys = ["cell", "strategy", "bleu", "bleu_ci_low", "bleu_ci_high", "latency_ms_b1", "speedup_vs_at"]
    pd.testing.assert_frame_equal(made[keys].sort_values(keys[:2]).reset_index(drop=True),
                                  own[keys].sort_values(keys[:2]).reset_index(drop=True))
    assert made.speedup_vs_at.notna().all()  # the speed came along with the copies
    # the sample outputs, made again from the collected hypotheses and the data set's sentences
    assert len(own_samples) and "samples.csv is missing" not in report
    pd.testing.assert_frame_equal(pd.read_csv(out / "samples.csv"), own_samples)
    assert not (out / "runs").exists() and not (out / "interim").exists()
    assert main(["report", "g.yaml", "--results", "res", "--collected", "kept", "--restat"]) == 2
    assert "--collected and --restat exclude each other" in capsys.readouterr().err
    (kept_timing := tmp_path / "kept" / "nat-s1" / "timing.csv").unlink()  # a cell whose speed was never collected
    (tmp_path / "kept" / "nat-s1" / "timing.json").unlink()
    from atnat.experiments.running.collect import write_manifest

    write_manifest(tmp_path / "kept" / "nat-s1")  # as a collect that found no timing would have written it
    assert main(["report", "g.yaml", "--results", "res", "--collected", "kept"]) == 0
    assert "no speed was collected for nat-s1" in json.loads((out / "environment.json").read_text())["collected_from"]
    assert pd.read_csv(out / "results.csv").query("cell == 'nat-s1'").speedup_vs_at.isna().all()
    assert not kept_timing.exists()
    hyps = tmp_path / "kept" / "nat-s1" / "hyps" / "parallel.txt"  # a hypotheses file cut short
    hyps.write_text("".join(hyps.read_text().splitlines(keepends=True)[:-2]))
    capsys.readouterr()
    assert main(["report", "g.yaml", "--results", "res", "--collected", "kept"]) == 2
    assert "refused kept/nat-s1: not as collected (changed since it was collected: hyps/parallel.txt)" in (
        capsys.readouterr().err)
    write_manifest(tmp_path / "kept" / "nat-s1")  # collected so (the manifest agrees): the count is checked too
    assert main(["report", "g.yaml", "--results", "res", "--collected", "kept"]) == 2
    err = capsys.readouterr().err
    assert "kept/nat-s1/hyps/parallel.txt: 10 hypotheses for the 12 sentences of test (cut short" in err
    hyps.unlink()  # a strategy scored in metrics.json whose hypotheses are gone
    write_manifest(tmp_path / "kept" / "nat-s1")
    assert main(["report", "g.yaml", "--results", "res", "--collected", "kept"]) == 2
    assert "kept/nat-s1/hyps/parallel.txt: missing; kept/nat-s1/metrics.json scored the strategy 'parallel'" in (
        capsys.readouterr().err)


def test_status_counts_the_collected_copies_of_cells_whose_machine_is_gone(tmp_path, monkeypatch, capsys):
    """The deep grid: seed 1's cells exist only as collected copies (their machine was lost), and `atnat
    status` said "en-de seed 1: 0 of 6 cells done". With --collected it names a copy's cell `collected`, counts
    it as done, reads its timing from the copy, and keeps a live run's state (a teacher trained again) first."""
    _, spec = tiny_grid_dir(tmp_path, monkeypatch)
    spec["cells"]["nat"] = {"decoder": "nat", "eval": {"strategies": ["parallel"]}}
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    kept = tmp_path / "kept"
    for cell in ("at-s1", "nat-s1"):
        (kept / cell).mkdir(parents=True)
        (kept / cell / "metrics.json").write_text(json.dumps({"status": "ok", "rows": [{"strategy": "greedy"}]}))
        for name in ("config.json", "train.json"):
            (kept / cell / name).write_text("{}")
    (kept / "at-s1" / "timing.csv").write_text("cell,strategy,timing_session\nat-s1,greedy,2026-11-26 10:56:54 UTC\n")
    runs = tmp_path / "res" / "two-tests" / "runs"
    (runs / "at-s1" / "checkpoints").mkdir(parents=True)  # the teacher trains again here: its live state wins
    (runs / "at-s1" / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert main(["status", "g.yaml", "--results", "res"]) == 0
    out = capsys.readouterr().out
    assert "parallel seed 1: 0 of 2 cells done" in out
    assert main(["status", "g.yaml", "--results", "res", "--collected", "kept"]) == 0
    out = capsys.readouterr().out
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in out.splitlines() if line.count("│") > 3}
    assert rows["at-s1"] == "interrupted" and rows["nat-s1"] == "collected"
    assert "parallel seed 1: 1 of 2 cells done (1 of them a collected copy: kept)" in out
    (runs / "at-s1" / "checkpoints" / "last.ckpt").unlink()
    assert main(["status", "g.yaml", "--results", "res", "--collected", "kept"]) == 0
    out = capsys.readouterr().out
    assert "parallel seed 1: 2 of 2 cells done (2 of them collected copies: kept), not timed (1 collected copy without a timing: " in out
    (kept / "nat-s1" / "timing.csv").write_text("cell,strategy,timing_session\nnat-s1,parallel,2026-11-26 10:56:54 UTC\n")
    assert main(["status", "g.yaml", "--results", "res", "--collected", "kept"]) == 0
    assert "cells done (2 of them collected copies: kept), timed 2026-11-26 10:56:54 UTC" in capsys.readouterr().out
    # a copy changed since collect wrote it is no result (the report refuses it): status counted it as done
    from atnat.experiments.running.collect import write_manifest

    write_manifest(kept / "nat-s1")
    (kept / "nat-s1" / "metrics.json").write_text(json.dumps({"status": "ok", "rows": [{"strategy": "parallel"}]}))
    assert main(["status", "g.yaml", "--results", "res", "--collected", "kept"]) == 0
    out = capsys.readouterr().out
    assert "parallel seed 1: 1 of 2 cells done (1 of them a collected copy: kept)" in out
    assert "copy damaged" in out and "changed since it was collected: metrics.json" in out
    assert main(["status", "g.yaml", "--results", "res", "--collected", "nowhere"]) == 2
    assert "--collected nowhere: no such folder" in capsys.readouterr().err


def test_time_only_times_the_seeds_of_the_cells_named_each_whole(tmp_path, monkeypatch, capsys):
    """The deep grid's last timing is one seed per quiet session (sessions differ by more than a session's
    interval): `atnat time --only 'en-de-*-s2'` times that seed's group whole - its baseline with it - and
    neither times nor waits for the other seeds; a pattern that names no cell is refused before any timing."""
    from atnat.experiments.running import timing_phase

    _, spec = tiny_grid_dir(tmp_path, monkeypatch)
    spec["cells"]["nat"] = {"decoder": "nat", "eval": {"strategies": ["parallel"]}}
    spec["seeds"] = [1, 2]
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    asked = []

    def fake_time_grid(cells, out, speed, device, baseline, **kw):
        asked.append(sorted(c.name for c in cells))
        return pd.DataFrame({"cell": [c.name for c in cells]})

    monkeypatch.setattr(timing_phase, "cell_status", lambda run: "ok")
    monkeypatch.setattr(timing_phase, "time_grid", fake_time_grid)
    monkeypatch.setattr(timing_phase, "score_exported_twins", lambda *a, **k: None)
    assert main(["time", "g.yaml", "--results", "res", "--only", "nat-s2", "--anew"]) == 0
    out = capsys.readouterr().out
    assert asked == [["at-s2", "nat-s2"]]  # the named cell's seed, whole; seed 1 untouched
    assert "timed (or kept, unchanged): parallel seed 2\n" in out and "seed 1" not in out
    assert main(["time", "g.yaml", "--results", "res", "--only", "*-s1", "--only", "at-s2"]) == 0
    assert asked[-1] == ["at-s1", "at-s2", "nat-s1", "nat-s2"]
    assert main(["time", "g.yaml", "--results", "res", "--only", "cmlm-s2"]) == 2
    assert "--only 'cmlm-s2' matches no cell" in capsys.readouterr().err and len(asked) == 2


def test_a_collect_cut_short_leaves_a_copy_that_is_not_read_as_whole(tmp_path, monkeypatch, capsys):
    """A machine lost mid-collect (the case collect exists for) leaves a cell's copy half old, half new: it
    is marked while written, a report from the copies refuses it, and the next collect makes it whole."""
    from atnat.experiments.running import collect as collect_module

    _, spec = tiny_grid_dir(tmp_path, monkeypatch)
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    assert main(["cell", "g.yaml", "at-s1", "--results", "res"]) == 0
    assert main(["collect", "g.yaml", "--results", "res", "--to", "kept"]) == 0
    assert not (tmp_path / "kept" / "at-s1" / collect_module.UNDER_WAY).exists()
    metrics = tmp_path / "res" / "two-tests" / "runs" / "at-s1" / "metrics.json"
    metrics.write_text(metrics.read_text().replace('"rows"', '"rows" ', 1))  # new results to copy
    real = collect_module.atomic_write_bytes

    def lost_after_metrics(path, data):
        real(path, data)
        if Path(path).name == "metrics.json":
            raise KeyboardInterrupt  # the machine goes away here

    monkeypatch.setattr(collect_module, "atomic_write_bytes", lost_after_metrics)
    with pytest.raises(KeyboardInterrupt):
        collect_module.collect("g.yaml", results_root=tmp_path / "res", dest=tmp_path / "kept")
    monkeypatch.setattr(collect_module, "atomic_write_bytes", real)
    run = tmp_path / "res" / "two-tests" / "runs" / "at-s1"
    run.rename(tmp_path / "elsewhere")  # and the machine with it
    capsys.readouterr()
    assert main(["status", "g.yaml", "--results", "res", "--collected", "kept"]) == 0
    assert "collected" not in capsys.readouterr().out.split("at-s1")[1].splitlines()[0]  # a cut copy counts for nothing
    (tmp_path / "elsewhere").rename(run)
    assert main(["report", "--interim", "g.yaml", "--results", "res", "--collected", "kept"]) == 2
    assert "its collect was cut short" in capsys.readouterr().err
    assert main(["collect", "g.yaml", "--results", "res", "--to", "kept"]) == 0
    assert main(["report", "--interim", "g.yaml", "--results", "res", "--collected", "kept"]) == 0


def test_collect_refuses_a_destination_inside_the_results_folder(tmp_path, monkeypatch, capsys):
    _, spec = tiny_grid_dir(tmp_path, monkeypatch)
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    assert main(["cell", "g.yaml", "at-s1", "--results", "res"]) == 0
    before = sorted(p.name for p in (tmp_path / "res" / "two-tests" / "runs" / "at-s1").iterdir())
    capsys.readouterr()
    assert main(["collect", "g.yaml", "--results", "res", "--to", "res/two-tests/runs"]) == 2
    assert "is inside the results folder" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "res" / "two-tests" / "runs" / "at-s1").iterdir()) == before


@pytest.mark.slow  # several tiny grid runs (20-30 s): `pytest -m slow` runs it
def test_a_timing_stopped_after_a_group_keeps_the_groups_it_timed(tmp_path, monkeypatch, capsys):
    """`atnat time --anew` over two seeds, stopped while it times the second: the first seed's new timing
    was lost (timing.csv was written once, at the end), and with it an hour of a quiet machine."""
    from atnat.experiments.evaluation import timing as timing_module
    from tests.test_grid import TINY

    monkeypatch.chdir(tmp_path)
    spec = {**TINY, "cells": {"at": TINY["cells"]["at"]}, "seeds": [1, 2]}
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", "g.yaml", "--results", "res"]) == 0
    path = tmp_path / "res" / "tiny" / "timing.csv"
    before = pd.read_csv(path)
    real, calls = timing_module.time_systems, []

    def stopped_in_the_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        time.sleep(1.1)  # a session of its own (sessions are named to the second)
        return real(*args, **kwargs)
    monkeypatch.setattr(timing_module, "time_systems", stopped_in_the_second)
    assert main(["time", "g.yaml", "--results", "res", "--anew"]) == 130  # Ctrl-C
    after = pd.read_csv(path)
    assert sorted(after.cell.unique()) == ["at-s1", "at-s2"]
    sessions = {cell: set(rows.timing_session) for cell, rows in after.groupby("cell")}
    old = {cell: set(rows.timing_session) for cell, rows in before.groupby("cell")}
    assert sessions["at-s1"] != old["at-s1"]  # the group timed before the stop is kept
    assert sessions["at-s2"] == old["at-s2"]  # not timed again yet: its earlier rows stand


def test_a_report_from_collected_copies_checks_each_against_its_manifest(tmp_path, monkeypatch, capsys):
    """A copied score edited by hand, or a copy without its config.json (which the stale check reads), was
    reported as collected; a copy from before manifests is reported and named as unchecked."""
    from atnat.experiments.running.collect import MANIFEST

    _, spec = tiny_grid_dir(tmp_path, monkeypatch)
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    assert main(["cell", "g.yaml", "at-s1", "--results", "res"]) == 0
    assert main(["collect", "g.yaml", "--results", "res", "--to", "kept"]) == 0
    copy = tmp_path / "kept" / "at-s1"
    report = ["report", "--interim", "g.yaml", "--results", "res", "--collected", "kept"]
    assert main(report) == 0
    metrics = (copy / "metrics.json").read_text()
    (copy / "metrics.json").write_text(metrics.replace('"bleu": ', '"bleu": 99.0, "was": ', 1))
    capsys.readouterr()
    assert main(report) == 2
    assert "kept/at-s1: not as collected (changed since it was collected: metrics.json)" in capsys.readouterr().err
    (copy / "metrics.json").write_text(metrics)
    (copy / "config.json").unlink()
    assert main(report) == 2
    assert "kept/at-s1: not as collected (it lacks config.json)" in capsys.readouterr().err
    assert main(["collect", "g.yaml", "--results", "res", "--to", "kept"]) == 0  # made whole again
    (copy / MANIFEST).unlink()  # as collected by an atnat before manifests
    assert main(report) == 0
    text = (tmp_path / "res" / "two-tests" / "interim" / "report.md").read_text()
    assert "1 of the copies were collected before collect recorded the sha256" in text and "`at-s1`" in text
    environment = text.split("## Environment")[1]  # whose machine the Environment table describes
    assert "not of the machines that trained and timed the collected cells" in environment


def test_a_cell_whose_checkpoint_is_damaged_is_kept_back_and_the_others_are_collected(tmp_path, monkeypatch, capsys):
    """A damaged checkpoint stopped the collect at that cell (exit 2): every later cell went uncollected, though
    the command's rule is that a cell held back is named and the rest still collected (exit 1)."""
    _, spec = tiny_grid_dir(tmp_path, monkeypatch)
    spec["seeds"] = [1, 2]
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    for cell in ("at-s1", "at-s2"):
        assert main(["cell", "g.yaml", cell, "--results", "res"]) == 0
    best = evaluation_checkpoint(tmp_path / "res" / "two-tests" / "runs" / "at-s1")
    with open(best, "ab") as f:
        f.write(b"x")
    capsys.readouterr()
    assert main(["collect", "g.yaml", "--results", "res", "--to", "kept"]) == 1
    out = capsys.readouterr()
    assert "at-s1: " in out.out + out.err and "does not match the sha256" in out.out + out.err
    assert (tmp_path / "kept" / "at-s2" / "metrics.json").is_file() and not (tmp_path / "kept" / "at-s1").exists()


def test_an_interim_report_leaves_out_the_speed_of_a_cell_whose_checkpoint_is_damaged(tmp_path, monkeypatch, capsys):
    """One damaged checkpoint stopped the interim report (exit 2, no report): the check of which weights a timing
    row was measured on raised for it."""
    _, spec = tiny_grid_dir(tmp_path, monkeypatch)
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", "g.yaml", "--results", "res"]) == 0
    with open(evaluation_checkpoint(tmp_path / "res" / "two-tests" / "runs" / "at-s1"), "ab") as f:
        f.write(b"x")
    capsys.readouterr()
    assert main(["report", "--interim", "g.yaml", "--results", "res"]) == 0
    err = capsys.readouterr().err
    assert "at-s1: " in err and "does not match the sha256" in err and "its speed is left out of the tables" in err
    table = pd.read_csv(tmp_path / "res" / "two-tests" / "interim" / "results.csv")
    assert table.latency_ms_b1.isna().all()


def test_a_damaged_timing_record_is_named_and_the_run_times_anew(tmp_path, monkeypatch, capsys):
    """A timing.json cut short ended `atnat run` and `atnat time` with a bare JSONDecodeError naming no file; the
    run stopped after training, with no results table."""
    _, spec = tiny_grid_dir(tmp_path, monkeypatch)
    (tmp_path / "g.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", "g.yaml", "--results", "res"]) == 0
    out = tmp_path / "res" / "two-tests"
    (out / "timing.json").write_text('{"speed": {"lat')
    capsys.readouterr()
    assert main(["time", "g.yaml", "--results", "res", "--only", "at-s1"]) == 2
    assert "timing.json cannot be read (JSONDecodeError" in capsys.readouterr().err
    assert main(["run", "g.yaml", "--results", "res"]) == 0
    err = capsys.readouterr().err
    assert "timing.json cannot be read (JSONDecodeError" in err and "every system is timed anew" in err
    assert json.loads((out / "timing.json").read_text())["speed"] and (out / "results.csv").is_file()
