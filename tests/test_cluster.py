"""The cluster launcher: sbatch files that submitit generates for a grid (dependencies, arrays,
resources; fake sbatch/sacct, no cluster), and a grid through the same code path on submitit's
local executor (teacher, student, resubmission, status, resume after pre-emption)."""
import json
import os
import signal
import stat
import time
from pathlib import Path

import pandas as pd
import pytest

from atnat.experiments.cli.commands import main
from atnat.experiments.running.launchers import jobs as jobs_module
from atnat.experiments.running.launchers.slurm import dependency
from tests.test_grid import TINY, write_grid
from tests.test_workers import STUDENT

FAKE_SBATCH = """#!/bin/sh
n=$(($(cat "$FAKE_SLURM/count" 2>/dev/null || echo 100) + 1)); echo $n > "$FAKE_SLURM/count"
cp "$1" "$FAKE_SLURM/sbatch_$n.sh"; echo "Submitted batch job $n"
"""


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """sbatch that records each submission file, srun that exists, sacct that lists nothing yet."""
    bin_dir, record = tmp_path / "bin", tmp_path / "sbatch"
    bin_dir.mkdir()
    record.mkdir()
    for name, text in (("sbatch", FAKE_SBATCH), ("srun", "#!/bin/sh\n"), ("sacct", "#!/bin/sh\necho 'JobID|State|NodeList'\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(stat.S_IRWXU)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM", str(record))
    return record


def sbatch_options(path: Path) -> dict[str, str]:
    lines = [line[len("#SBATCH --"):] for line in path.read_text().splitlines() if line.startswith("#SBATCH --")]
    return dict(line.split("=", 1) if "=" in line else (line, "") for line in lines)


def test_dependency_string():
    assert dependency(["17"]) == "afterok:17"
    assert dependency(["17_0", "18"]) == "afterok:17_0:18"


def test_generated_submissions_arrays_dependencies_resources_and_no_second_job(tmp_path, monkeypatch, fake_slurm,
                                                                              capsys):
    data = {**TINY, "axes": {"task.vocab": [5, 6]},  # 2 tasks x (teacher + 2 students + 1 DDP cell on 2 nodes)
            "cells": {"at": TINY["cells"]["at"], "cmlm-kd": TINY["cells"]["cmlm-kd"], "nat-kd": STUDENT,
                      "big": {"decoder": {"name": "at"}, "train": {"devices": 4, "num_nodes": 2}}}}
    grid = write_grid(tmp_path, data)
    monkeypatch.chdir(tmp_path)
    args = ["run", str(grid), "--results", "res", "--launcher", "slurm", "--partition", "gpu", "--time", "90",
            "--array-parallelism", "2", "--cpus-per-task", "4", "--slurm-option", "account=nlp"]
    assert main(args) == 0  # submitted; nothing failed, nothing to tabulate yet
    err = capsys.readouterr().err
    assert "8 of 8 cells are queued or running" in err and not (tmp_path / "res" / "tiny" / "results.csv").exists()
    subs = {int(p.stem.split("_")[1]): sbatch_options(p) for p in fake_slurm.glob("sbatch_*.sh")}
    assert sorted(subs) == [101, 102, 103, 104, 105]
    teachers, big, students_5, students_6, timing = (subs[k] for k in sorted(subs))
    # the timing phase: its own job on the cells' kind of node, once every cell job has ended (afterany:
    # a failed cell must not keep the others from being timed), never on this (login) machine
    cell_jobs = ["101_0", "101_1", "102_0", "102_1", "103_0", "103_1", "104_0", "104_1"]
    assert timing["dependency"] == "afterany:" + ":".join(cell_jobs) and "array" not in timing
    assert timing["partition"] == "gpu" and timing["gpus-per-node"] == "1" and timing["nodes"] == "1"
    assert timing["ntasks-per-node"] == "1" and timing["account"] == "nlp" and timing["time"] == "90"
    timing_job = json.loads((tmp_path / "res" / "tiny" / "timing" / "job.json").read_text())
    assert timing_job["job_id"] == "105" and timing_job["after"] == cell_jobs
    assert "timing phase: job 105 submitted (after 101_0" in err and not (tmp_path / "res" / "tiny" / "timing.csv").exists()
    assert teachers["array"] == "0-1%2" and "dependency" not in teachers  # both teachers: one array
    assert teachers["partition"] == "gpu" and teachers["time"] == "90" and teachers["gpus-per-node"] == "1"
    assert teachers["ntasks-per-node"] == "1" and teachers["nodes"] == "1" and teachers["cpus-per-task"] == "4"
    assert teachers["account"] == "nlp" and teachers["signal"] == "USR2@90"  # submitit's requeue signal
    assert big["array"] == "0-1%2" and big["nodes"] == "2" and big["ntasks-per-node"] == "4" and big["gpus-per-node"] == "4"
    for students, teacher_job in ((students_5, "101_0"), (students_6, "101_1")):  # each waits for its own teacher
        assert students["dependency"] == f"afterok:{teacher_job}" and students["kill-on-invalid-dep"] == "yes"
        assert students["array"] == "0-1%2"
    runs = tmp_path / "res" / "tiny" / "runs"
    job = json.loads((runs / "6-cmlm-kd-s1" / "job.json").read_text())
    assert job["launcher"] == "slurm" and job["job_id"] == "104_0" and job["after"] == ["101_1"]
    assert job["state"] == "SUBMITTED" and job["stdout"].endswith("104_0_0_log.out")
    assert main(["status", str(grid), "--results", "res"]) == 0
    assert "timing phase: job 105 submitted" in capsys.readouterr().out
    # again while every job is queued: no second job for any cell, nor for the timing phase
    assert main(args) == 0 and len(list(fake_slurm.glob("sbatch_*.sh"))) == 5
    assert "5-at-s1: job 101_0 is submitted; not resubmitted" in capsys.readouterr().err
    # the teacher of task 5 finished, the other one's job was cancelled: only that one goes again,
    # and its students now wait for the new job
    (runs / "5-at-s1" / "metrics.json").write_text(json.dumps({"status": "ok", "rows": []}))
    cancelled = {"101_1", "104_0", "104_1"}
    monkeypatch.setattr(jobs_module, "job_state", lambda job, handle=None:
                        "CANCELLED by 0" if job["job_id"] in cancelled else "PENDING")
    assert main(args) == 0
    new = {int(p.stem.split("_")[1]): sbatch_options(p) for p in fake_slurm.glob("sbatch_*.sh")}
    assert sorted(new) == [101, 102, 103, 104, 105, 106, 107, 108]
    assert "array" not in new[106] and "dependency" not in new[106]  # 6-at-s1 alone
    assert new[107]["dependency"] == "afterok:106" and new[107]["array"] == "0-1%2"
    assert json.loads((runs / "6-nat-kd-s1" / "job.json").read_text())["job_id"] == "107_1"
    # the queued timing job would start before the new cell jobs: another one follows them and it
    assert new[108]["dependency"] == "afterany:" + ":".join(sorted(["101_0", "102_0", "102_1", "103_0", "103_1",
                                                                    "105", "106", "107_0", "107_1"]))


def test_cluster_settings_are_checked(tmp_path, monkeypatch, capsys):
    grid = write_grid(tmp_path, {**TINY, "cells": {"big": {"decoder": {"name": "at"}, "train": {"devices": 2}}}})
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(grid), "--launcher", "slurm", "--gpus-per-cell", "1"]) == 2
    assert "cell big-s1: train.devices is 2 but --gpus-per-cell is 1" in capsys.readouterr().err
    assert main(["run", str(grid), "--launcher", "slurm", "--slurm-option", "reservation"]) == 2
    assert "--slurm-option 'reservation': expected KEY=VALUE" in capsys.readouterr().err
    grid = write_grid(tmp_path, {**TINY, "cells": {"big": {"decoder": {"name": "at"}, "train": {"num_nodes": 2}}}})
    assert main(["run", str(grid)]) == 2
    assert "train on several nodes (train.num_nodes > 1); run them with a cluster launcher" in capsys.readouterr().err


@pytest.mark.slow
def test_teacher_and_student_through_the_cluster_code_path_on_submitits_local_executor(tmp_path, monkeypatch, capsys):
    grid = write_grid(tmp_path, {**TINY, "cells": {"at": TINY["cells"]["at"], "nat-kd": STUDENT}})
    monkeypatch.chdir(tmp_path)

    def not_here(*args, **kwargs):
        raise AssertionError("the submitting process (a login node) timed the grid")

    from atnat.experiments.running import scheduler, timing_phase

    monkeypatch.setattr(scheduler, "timing_phase", not_here, raising=False)
    monkeypatch.setattr(timing_phase, "time_grid", not_here)
    assert main(["run", str(grid), "--results", "res", "--launcher", "submitit-local"]) == 0
    out = tmp_path / "res" / "tiny"
    df = pd.read_csv(out / "results.csv")
    assert (df.status == "ok").all() and set(df.cell) == {"at-s1", "nat-kd-s1"}
    # the timing phase ran as its own job, after the cells' jobs, and its numbers reached the table
    timing_job = json.loads((out / "timing" / "job.json").read_text())
    assert "timing phase of tiny" in Path(timing_job["stdout"]).read_text()
    assert timing_job["submitted_s"] >= (out / "runs" / "nat-kd-s1" / "metrics.json").stat().st_mtime
    assert json.loads((out / "timing.json").read_text())["device_name"]  # the device's model, not just "cpu"
    assert df.latency_ms_b1.notna().all()
    assert f"in cluster job {timing_job['job_id']}" in json.loads((out / "environment.json").read_text())["timing"]
    teacher, student = (json.loads((out / "runs" / c / "job.json").read_text()) for c in ("at-s1", "nat-kd-s1"))
    assert student["after"] == [teacher["job_id"]] and teacher["after"] == []
    assert student["submitted_s"] >= (out / "runs" / "at-s1" / "metrics.json").stat().st_mtime  # after its teacher
    assert Path(teacher["stdout"]).parent == out / "jobs" and Path(student["stderr"]).exists()
    err = capsys.readouterr().err
    assert err.count("submitted job") == 2 and err.count(f"timing phase: job {timing_job['job_id']} submitted") == 1
    # again: nothing is resubmitted (the timing holds), the table is rewritten
    assert main(["run", str(grid), "--results", "res", "--launcher", "submitit-local"]) == 0
    assert "submitted" not in capsys.readouterr().err
    assert json.loads((out / "runs" / "at-s1" / "job.json").read_text())["job_id"] == teacher["job_id"]
    assert main(["status", str(grid), "--results", "res"]) == 0
    table = capsys.readouterr().out
    for cell, job in (("at-s1", teacher), ("nat-kd-s1", student)):
        row = next(line for line in table.splitlines() if f" {cell} " in line)
        assert "done" in row and job["job_id"] in row and " 8 " in row  # state, job id, last step


def test_a_timing_job_that_fails_fails_the_run(tmp_path, monkeypatch, capsys):
    """The timing job ended without timing anything: `atnat run` said so on one stderr line, exited 0, and the
    report said "no timing phase ran", as if none had been due."""
    import functools

    from atnat.experiments.running.launchers import slurm

    grid = write_grid(tmp_path, {**TINY, "cells": {"at": TINY["cells"]["at"]}})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(slurm, "TimingJob", lambda *args: functools.partial(int, "not a number"))  # the job raises
    assert main(["run", str(grid), "--results", "res", "--launcher", "submitit-local"]) == 1
    assert "ended without timing every finished system" in capsys.readouterr().err
    timing = json.loads((tmp_path / "res" / "tiny" / "environment.json").read_text())["timing"]
    assert timing.startswith("failed: the timing job ") and "run the command again to time them" in timing


@pytest.mark.slow
def test_a_preempted_job_requeues_and_resumes_from_its_last_checkpoint(tmp_path, monkeypatch):
    # long enough that the signal lands mid-run on a fast machine too
    cell = {"decoder": {"name": "at"}, "train": {"max_steps": 400, "val_every_steps": 10}}
    grid = write_grid(tmp_path, {**TINY, "cells": {"at": cell}})
    run = tmp_path / "res" / "tiny" / "runs" / "at-s1"
    import threading

    def preempt_once():  # submitit's pre-emption signal to the job's process, once a checkpoint exists
        deadline = time.time() + 240
        while time.time() < deadline and not (run / "checkpoints" / "last.ckpt.sha256").exists():
            time.sleep(0.05)  # the checksum is written after the checkpoint is renamed into place
        os.kill(json.loads((run / "cell.lock.json").read_text())["pid"], signal.SIGUSR2)

    monkeypatch.chdir(tmp_path)
    thread = threading.Thread(target=preempt_once)
    thread.start()
    assert main(["run", str(grid), "--results", "res", "--launcher", "submitit-local"]) == 0
    thread.join()
    job = json.loads((run / "job.json").read_text())
    log = Path(job["stderr"]).read_text() + Path(job["stdout"]).read_text()
    assert "this job is preempted" in log and f"Requeued job {job['job_id']}" in log
    assert log.count("Starting with JobEnvironment") == 2  # the same job ran twice
    assert json.loads((run / "train.json").read_text())["global_step"] == 400
    log = pd.read_csv(run / "logs" / "metrics.csv")  # both attempts' rows, the attempt in a column
    assert set(log["attempt"]) == {1, 2}
    assert log.loc[log["attempt"] == 2, "step"].min() > 10  # it went on from a checkpoint, not from step 0
    assert (pd.read_csv(tmp_path / "res" / "tiny" / "results.csv").status == "ok").all()


def test_status_states_from_the_run_folder(tmp_path, monkeypatch):
    import socket

    from atnat.experiments.running.status import cell_state

    def folder(name, **files):
        d = tmp_path / name
        for rel, text in files.items():
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_text(text)
        return d

    job = json.dumps({"executor": "slurm", "job_id": "7_1", "folder": str(tmp_path), "submitted_s": 0})
    monkeypatch.setattr("atnat.experiments.running.status.job_state",
                        lambda j: {"7_1": "PENDING", "8": "RUNNING", "9": "CANCELLED by 12"}[j["job_id"]])
    me = json.dumps({"pid": os.getpid(), "host": socket.gethostname()})
    gone = json.dumps({"pid": 2**22 + 1, "host": socket.gethostname()})  # above any pid in use here
    csv = "epoch,step,train/loss\n0,49,2.0\n0,99,1.5\n"
    assert cell_state(folder("q", **{"job.json": job}))["state"] == "queued"
    assert cell_state(folder("r", **{"job.json": job.replace('"7_1"', '"8"')}))["state"] == "running"
    assert cell_state(folder("e", **{"job.json": job.replace('"7_1"', '"9"')}))["state"] == "ended (cancelled by 12)"
    row = cell_state(folder("l", **{"cell.lock.json": me, "logs/metrics.csv": csv}))  # local pool or by hand
    assert row["state"] == "running" and row["last_step"] == 99 and row["job"] == "" and row["now"] == "starting"
    progress = json.dumps({"phase": "training", "step": 99, "max_steps": 400, "loss": 1.5, "eta_s": 600})
    row = cell_state(folder("l2", **{"cell.lock.json": me, "progress.json": progress}))
    assert row["now"] == "training step 99/400, loss 1.5, ETA 10 min"
    row = cell_state(tmp_path / "l2", stops_early=True)  # the grid gives the cell a plateau rule
    assert row["now"] == "training step 99/400, loss 1.5, ETA at most 10 min (plateau rule)"
    evaluating = json.dumps({"phase": "evaluating", "step": 400})
    assert cell_state(folder("l3", **{"cell.lock.json": me, "progress.json": evaluating}))["now"] == "evaluating"
    assert cell_state(folder("i", **{"cell.lock.json": gone, "checkpoints/last.ckpt": "x"}))["state"] == "interrupted"
    stopped = json.dumps({"phase": "stopped at step 170 while training (interrupted)", "step": 170})
    row = cell_state(folder("i2", **{"checkpoints/last.ckpt": "x", "progress.json": stopped}))
    assert row["state"] == "interrupted" and row["now"] == "stopped at step 170 while training (interrupted)"
    lost = cell_state(folder("i0", **{"cell.lock.json": gone, "logs/metrics.csv": csv}))  # stopped before a checkpoint
    assert lost["state"] == "interrupted" and lost["now"] == "no checkpoint: starts again at step 0" and lost["last_step"] == 99
    failed = cell_state(folder("f", **{"metrics.json": json.dumps({"status": "failed", "error": "boom"})}))
    assert failed["state"] == "failed" and failed["error"] == "boom"
    retried = cell_state(folder("f2", **{"metrics.json": json.dumps({"status": "failed", "error": "boom"}),
                                         "cell.lock.json": me, "progress.json": progress}))  # a live process retries
    assert retried["state"] == "running" and retried["now"] == "training step 99/400, loss 1.5, ETA 10 min"
    assert cell_state(folder("f3", **{"metrics.json": json.dumps({"status": "failed", "error": "boom"}),
                                      "cell.lock.json": gone}))["state"] == "failed"
    assert cell_state(tmp_path / "nothing")["state"] == "not started"


class _Stops:
    """A trainer whose fit ends the way `exit` says, as Lightning's interrupted fit would."""

    interrupted = True

    def __init__(self, exit):
        self.exit = exit

    def fit(self, *args, **kwargs):
        self.exit()


def _after_ctrl_c():
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        raise SystemExit(1) from None  # Lightning's exit after Ctrl-C: the KeyboardInterrupt is its context


def test_a_cluster_jobs_own_exit_from_inside_training_passes_through_and_lightnings_is_a_ctrl_c():
    from pytorch_lightning.utilities.exceptions import SIGTERMException

    from atnat.experiments.training.train import fit

    def requeued():  # submitit's pre-emption handler: the job is requeued, then it exits
        raise SystemExit(-1)

    try:  # caught here whatever it is: a KeyboardInterrupt escaping would stop pytest itself
        fit(_Stops(requeued), None, None, None, None)
    except BaseException as error:
        stop = error
    assert type(stop) is SystemExit and stop.code == -1  # submitit's job runner sees its own exit, not a Ctrl-C
    def on_sigterm():
        raise SIGTERMException(1)

    for lightnings in (_after_ctrl_c, on_sigterm):
        with pytest.raises(KeyboardInterrupt):
            fit(_Stops(lightnings), None, None, None, None)


def test_a_cell_whose_job_ended_is_not_running_because_its_killed_holder_left_a_file(tmp_path, monkeypatch):
    """A job killed on a compute node (NODE_FAIL, kill -9) leaves its cell lock's holder file naming that host;
    `atnat status` must say the job ended, not that the cell runs."""
    import atnat.experiments.running.status as status
    from atnat.experiments.locks import cell_lock, holder_file

    run = tmp_path / "runs" / "at-s1"
    run.mkdir(parents=True)
    cell_lock(run).touch()
    holder_file(cell_lock(run)).write_text(json.dumps({"host": "gpu-node-17", "pid": 4242}))
    (run / "job.json").write_text(json.dumps({"launcher": "slurm", "executor": "slurm", "job_id": "4242"}))
    monkeypatch.setattr(status, "job_state", lambda job, handle=None: "NODE_FAIL")
    assert status.folder_state(run)["state"] == "ended (node_fail)"


def test_status_of_a_cell_whose_records_are_cut_short(tmp_path):
    """A metrics.csv row without its step (cut short, or read while it is written) gave a bare ValueError from
    int(NaN), and one damaged train.json an error instead of the whole table."""
    from atnat.experiments.running.status import cell_state

    cut = tmp_path / "cut"
    (cut / "logs").mkdir(parents=True)
    (cut / "logs" / "metrics.csv").write_text("attempt,epoch,step,train/loss\n1,0,,\n")
    assert cell_state(cut)["last_step"] is None
    (cut / "logs" / "metrics.csv").write_text("attempt,epoch,step,train/loss\n1,0,49,2.0\n1,0,,\n")
    assert cell_state(cut)["last_step"] == 49
    bad = tmp_path / "bad"
    (bad / "checkpoints").mkdir(parents=True)
    (bad / "checkpoints" / "last.ckpt").write_text("x")
    (bad / "train.json").write_text('{"global_step": 1')
    row = cell_state(bad)
    assert row["state"] == "record damaged" and "train.json: not a finished run's record" in row["error"]


def test_a_planted_job_file_is_not_taken_for_a_job(tmp_path):
    """job.json's job id went unchecked into sbatch's --dependency (a planted newline became a line of the batch
    script), and a submission time in the future kept the cell "submitted" for ever."""
    import time

    from atnat.experiments.running.launchers.jobs import read_job

    def planted(name, **job):
        (tmp_path / name).mkdir()
        (tmp_path / name / "job.json").write_text(json.dumps({"executor": "slurm", "submitted_s": 0, **job}))
        return read_job(tmp_path / name)

    assert planted("a", job_id="123\necho INJECTED #") is None
    assert planted("b", job_id=["7"]) is None
    assert planted("c", job_id="7_1")["job_id"] == "7_1"
    assert planted("d", job_id="8", submitted_s=time.time() + 1e9)["submitted_s"] == 0
    assert planted("e", job_id="9", submitted_s="soon")["submitted_s"] == 0
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "job.json").write_text("[1, 2]")
    assert read_job(tmp_path / "f") is None
