"""Job bookkeeping of a cluster cell: `runs/<cell>/job.json` (launcher, job id, submitted time, state),
written atomically, and the job's state now, asked of submitit (sacct on SLURM)."""
from __future__ import annotations

import json
import math
import os
import re
import time
from pathlib import Path

from atnat.experiments.files import write_json_atomic

JOB_FILE = "job.json"
TIMING_DIR = "timing"  # results/<grid>/timing/: job.json of the timing phase's cluster job
# SLURM states of a job that has not ended; SUBMITTED is ours: just submitted, not yet listed by sacct
ACTIVE = {"SUBMITTED", "PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING",
          "SUSPENDED", "CONFIGURING", "COMPLETING", "SIGNALING", "STAGE_OUT"}
UNLISTED_GRACE_S = 600  # sacct may not list a job yet for a while after submission


JOB_ID = re.compile(r"\d+(_\d+)?")  # SLURM's (an array task: 7_1), or a local job's controller pid


def read_job(run_dir: Path) -> dict | None:
    """The cell's job.json, or None where there is none or it is not one atnat wrote: its job id goes into
    sbatch's --dependency and a state query, so only a SLURM job id is taken (a planted line there would
    run in the batch script), and a submission time that is not a past moment counts as none (one in the
    future kept the cell "submitted" for ever)."""
    try:
        job = json.loads((run_dir / JOB_FILE).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(job, dict) or not JOB_ID.fullmatch(str(job.get("job_id", ""))):
        return None
    submitted = job.get("submitted_s", 0)
    if isinstance(submitted, bool) or not isinstance(submitted, (int, float)) or not math.isfinite(submitted) \
            or submitted > time.time():
        job["submitted_s"] = 0
    return job


def write_job(run_dir: Path, job: dict) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(run_dir / JOB_FILE, job)


def is_active(state: str) -> bool:
    """True while a job with this state may still start or run."""
    return state.split(" ")[0].upper() in ACTIVE


def job_state(job: dict, handle=None) -> str:
    """The job's state now: SLURM's through submitit (sacct), or for a job of submitit's local
    executor RUNNING while its controller process lives, else FINISHED."""
    if job.get("executor") == "slurm":
        state = slurm_state(job["job_id"])
    elif handle is not None:  # a local job submitted by this process
        state = handle.state
    else:
        state = "RUNNING" if local_controller_alive(int(job["job_id"])) else "FINISHED"
    if state.upper() == "UNKNOWN" and time.time() - float(job.get("submitted_s", 0)) < UNLISTED_GRACE_S:
        return "SUBMITTED"
    return state


_sacct = {"last": 0.0, "seen": set()}  # one sacct call answers for every job the watcher knows


def slurm_state(job_id: str, fresh_s: float = 10.0) -> str:
    """SLURM's state of a job through submitit's watcher: sacct once per `fresh_s` for all the jobs
    it knows (not once per cell), and at once for a job it has not listed yet."""
    from submitit.slurm.slurm import SlurmJob

    watcher = SlurmJob.watcher
    watcher.register_job(job_id)
    stale = time.time() - _sacct["last"] > fresh_s or job_id not in _sacct["seen"]
    state = watcher.get_state(job_id, mode="force" if stale else "cache")
    if stale:
        _sacct["last"] = time.time()
    _sacct["seen"].add(job_id)
    return state


def local_controller_alive(pid: int) -> bool:
    """Whether `pid` is still the controller of a submitit local job (not a recycled pid)."""
    try:
        return b"submitit" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (macOS): the pid is alive or not
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True


def record_state(run_dir: Path, job: dict, handle=None) -> str:
    """Ask the job's state, keep it in job.json (with the time it was seen), and return it."""
    state = job_state(job, handle)
    if state != job.get("state"):
        job.update(state=state, state_seen=time.strftime("%Y-%m-%d %H:%M:%S"))
        write_job(run_dir, job)
    return state
