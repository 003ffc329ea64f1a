"""The cluster launcher: each cell of a grid as a SLURM job (job arrays), submitted through submitit.

Every job runs the unit `atnat cell GRID CELL` in its process (CellJob). Cells whose teacher has
finished go into job arrays; a student whose teacher's job is queued or running is submitted with
`--dependency=afterok:<teacher job>` and `--kill-on-invalid-dep=yes` (a failed teacher cancels it).
Each cell's run folder gets `job.json` (launcher, job id, submitted, state), which a re-run reads:
a finished cell is never resubmitted, nor one whose job is still queued or running. A job that
times out or is pre-empted gets submitit's signal, requeues itself (CellJob is Checkpointable) and
resumes from `checkpoints/last.ckpt`. On submitit's local executor (`--launcher submitit-local`)
the jobs run on this machine, and a student is submitted once its teacher's job has ended.

The timing phase is a job of its own (TimingJob), on the cells' kind of node (their partition and
resources, one GPU), submitted after the cells' jobs with `--dependency=afterany:<their jobs>` (a
failed cell must not stop the others from being timed); its job.json is `results/<grid>/timing/`.
The table and report are written once no cell's job and no timing job is queued or running, by the
`atnat run` that finds them ended (or waits for them: `--wait`); the submitting machine (a login
node) never times anything.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import submitit

from atnat.core.errors import AtnatError
from atnat.experiments.config.plugins import ENV, load_plugins
from atnat.experiments.reporting.records import cell_status
from atnat.experiments.running.cell import record_failure_unless_held, run_named_cell
from atnat.experiments.running.grid import Cell, load_grid_into
from atnat.experiments.running.launchers.cluster_settings import ClusterSettings
from atnat.experiments.running.launchers.jobs import TIMING_DIR, is_active, read_job, record_state, write_job
from atnat.experiments.running.timing_phase import timing_is_current, timing_phase


class CellJob(submitit.helpers.Checkpointable):
    """One cell as a cluster job: `atnat cell GRID CELL` in the job's process (every task of a
    multi-node cell runs it; Lightning reads the ranks from SLURM). Checkpointable: on a time-out
    or pre-emption signal submitit requeues the same job, and the cell resumes from last.ckpt."""

    def __init__(self, grid_path: str, cell: str, results_root: str, smoke: bool) -> None:
        self.grid_path, self.cell, self.results_root, self.smoke = grid_path, cell, results_root, smoke
        self.args = ["cell", grid_path, cell, "--results", results_root] + (["--smoke"] if smoke else [])
        self.plugins = os.environ.get(ENV, "")  # modules named on the submitting command line

    def __call__(self) -> str:
        import atnat.decoding  # noqa: F401  (the job's own process: register the built-ins, then the plugins)
        import atnat.models.decoders  # noqa: F401

        load_plugins(self.plugins.split(","), "cluster job")
        status = run_named_cell(self.grid_path, self.cell, results_root=Path(self.results_root), smoke=self.smoke)
        if status not in ("ok", None):  # the job fails, so that `afterok` students of this cell never start
            raise RuntimeError(f"atnat {' '.join(self.args)}: the cell {status}")
        return "ok"


class TimingJob(submitit.helpers.Checkpointable):
    """The grid's timing phase as a cluster job (running/timing_phase.py): every finished cell's
    systems timed side by side on this job's node, into results/<grid>/timing.csv. Requeued on
    pre-emption; it then times again from the start."""

    def __init__(self, grid_path: str, results_root: str, smoke: bool) -> None:
        self.grid_path, self.results_root, self.smoke = grid_path, results_root, smoke
        self.plugins = os.environ.get(ENV, "")

    def __call__(self) -> str:
        import atnat.decoding  # noqa: F401  (the job's own process: register the built-ins, then the plugins)
        import atnat.models.decoders  # noqa: F401

        load_plugins(self.plugins.split(","), "cluster job")
        grid, out = load_grid_into(self.grid_path, Path(self.results_root), self.smoke)
        timing_phase(grid, out)
        print(f"timing phase of {grid.name}: {out / 'timing.csv'}", flush=True)
        return "ok"


def dependency(job_ids: list[str], kind: str = "afterok") -> str:
    """The sbatch dependency that starts a job once all `job_ids` have completed successfully
    (afterok), or have ended in any way (afterany)."""
    return f"{kind}:" + ":".join(job_ids)


def devices_of(cell: Cell) -> int:
    devices = cell.config.train.devices
    if isinstance(devices, (list, tuple)):
        return len(devices)
    return int(devices) if str(devices).lstrip("-").isdigit() and int(devices) > 0 else 1


def job_parameters(cell: Cell, settings: ClusterSettings, after: list[str], name: str) -> dict:
    """submitit (AutoExecutor) parameters of a cell's job: one task per device on each of the
    cell's `train.num_nodes` nodes, its GPUs, and the dependency on its teacher's job."""
    tasks = devices_of(cell)
    gpus = tasks if settings.gpus_per_cell is None else settings.gpus_per_cell
    if 0 < gpus < tasks:
        raise AtnatError(f"cell {cell.name}: train.devices is {tasks} but --gpus-per-cell is {gpus}")
    if settings.executor == "local":  # one process per job; Lightning starts a DDP cell's other ranks
        if cell.config.train.num_nodes > 1:
            raise AtnatError(f"cell {cell.name}: train.num_nodes > 1 needs SLURM (--launcher slurm)")
        tasks, after = 1, []  # no queue: the student's job is submitted once its teacher's has ended
    params = {"name": name, "timeout_min": settings.time_min, "nodes": cell.config.train.num_nodes,
              "tasks_per_node": tasks, "gpus_per_node": gpus, "slurm_array_parallelism": settings.array_parallelism}
    extra = dict(settings.options)
    for key in ("partition", "account", "qos", "constraint"):
        if getattr(settings, key):
            params[f"slurm_{key}"] = getattr(settings, key)
    if settings.cpus_per_task:
        params["cpus_per_task"] = settings.cpus_per_task
    if settings.mem_gb:
        params["mem_gb"] = settings.mem_gb
    if after:
        params["slurm_dependency"] = dependency(after)
        extra["kill-on-invalid-dep"] = "yes"
    if extra:
        params["slurm_additional_parameters"] = extra
    return params


def run_on_cluster(grid, cells: list[Cell], settings: ClusterSettings, *, results_root: Path,
                   smoke: bool) -> list[str]:
    """Submit the cells that need a job (teachers first); returns the cells still queued or running
    (none after waiting)."""
    if not cells:
        return []
    dirs = {c.name: Path(c.config.output_dir) for c in cells}
    folder = (dirs[cells[0].name].parent.parent / "jobs").resolve()  # submitit's pickles and the jobs' logs
    status = {name: cell_status(d) for name, d in dirs.items()}
    jobs: dict[str, dict] = {}  # cell -> its live job (queued or running), this run's or an earlier one's
    handles: dict[str, submitit.Job] = {}  # this run's submissions
    for cell in cells:
        job = read_job(dirs[cell.name])
        if status[cell.name] != "ok" and job and is_active(record_state(dirs[cell.name], job)):
            jobs[cell.name] = job
            print(f"{cell.name}: job {job['job_id']} is {job['state'].lower()}; not resubmitted", file=sys.stderr)
    todo = [c for c in cells if status[c.name] != "ok" and c.name not in jobs]
    for cell in todo:  # refuse impossible resource requests before anything is submitted
        job_parameters(cell, settings, [], grid.name)
    while todo:
        ready = [c for c in todo if c.teacher not in {t.name for t in todo}]
        groups: dict[tuple, list[Cell]] = {}
        for cell in ready:
            after = teacher_jobs(cell, status, jobs, handles, dirs, settings)
            if after is None:
                status[cell.name] = "failed"
                continue
            key = (tuple(after), repr(job_parameters(cell, settings, after, grid.name)))
            groups.setdefault(key, []).append(cell)
        for (after, _), group in groups.items():
            submit(grid, group, list(after), settings, folder, results_root, smoke, jobs, handles)
        todo = [c for c in todo if c not in ready]
    if settings.wait:
        wait_for(list(jobs), jobs, handles, dirs, settings)
    pending = [n for n, job in jobs.items() if is_active(record_state(dirs[n], job, handles.get(n)))]
    if pending:
        print(f"{len(pending)} of {len(cells)} cells are queued or running; `atnat status {grid.path}` shows "
              "them; run this command again once they have ended to write the table and report", file=sys.stderr)
    return pending


def teacher_jobs(cell: Cell, status: dict, jobs: dict, handles: dict, dirs: dict,
                 settings: ClusterSettings) -> list[str] | None:
    """The job ids a cell's job must wait for ([] when its teacher is done or not in this run), or
    None when its teacher failed (the cell is then marked failed)."""
    teacher = cell.teacher if cell.teacher in status else None
    if teacher is None or status[teacher] == "ok":
        return []
    if teacher in jobs and settings.executor == "local":  # no queue here: wait for the teacher's job
        wait_for([teacher], jobs, handles, dirs, settings)
        status[teacher] = cell_status(dirs[teacher])
        if status[teacher] == "ok":
            return [jobs[teacher]["job_id"]]
    elif teacher in jobs:
        return [jobs[teacher]["job_id"]]
    record_failure_unless_held(cell, f"teacher cell {teacher} failed")
    return None


def submit(grid, group: list[Cell], after: list[str], settings: ClusterSettings, folder: Path,
           results_root: Path, smoke: bool, jobs: dict, handles: dict) -> None:
    """One job per cell of `group` (an array when there are several), each recorded in job.json."""
    executor = submitit.AutoExecutor(folder=folder, cluster=settings.executor)
    executor.update_parameters(**job_parameters(group[0], settings, after, f"atnat-{grid.name}"))
    calls = [CellJob(str(Path(grid.path).resolve()), c.name, str(results_root.resolve()), smoke) for c in group]
    with executor.batch():
        submitted = [executor.submit(call) for call in calls]
    for cell, job in zip(group, submitted):
        record = {"launcher": "slurm" if settings.executor == "slurm" else "submitit-local",
                  "executor": settings.executor, "job_id": str(job.job_id), "folder": str(folder),
                  "submitted": time.strftime("%Y-%m-%d %H:%M:%S"), "submitted_s": time.time(),
                  "state": "SUBMITTED", "after": after, "stdout": str(job.paths.stdout),
                  "stderr": str(job.paths.stderr)}
        write_job(Path(cell.config.output_dir), record)
        jobs[cell.name], handles[cell.name] = record, job
        print(f"{cell.name}: submitted job {job.job_id}" + (f" (after {', '.join(after)})" if after else ""),
              file=sys.stderr)


def wait_for(names: list[str], jobs: dict, handles: dict, dirs: dict, settings: ClusterSettings) -> None:
    """Block until the jobs of `names` have ended, looking every `poll_s` seconds (local: 0.5 s)."""
    poll = 0.5 if settings.executor == "local" else settings.poll_s
    while any(is_active(record_state(dirs[n], jobs[n], handles.get(n))) for n in names):
        time.sleep(poll)


@dataclass(frozen=True)
class TimingState:
    """Where the grid's timing phase stands under a cluster launcher."""

    pending: bool  # its job is queued or running: the table and report wait for it
    job_id: str | None = None  # the job that timed (or times) the grid; None when nothing needed timing
    failed: str = ""  # why the timing job that ended left systems untimed ("": it did not)


def timing_parameters(cells: list[Cell], settings: ClusterSettings, after: list[str], name: str) -> dict:
    """The timing job's submitit parameters: the cells' partition, account, constraints and limits, one
    task, one GPU when their jobs have GPUs (none with --gpus-per-cell 0), after every cell job given."""
    params = job_parameters(cells[0], settings, [], name)
    params.update(nodes=1, tasks_per_node=1, gpus_per_node=min(1, params["gpus_per_node"]))
    params.pop("slurm_array_parallelism", None)
    if after and settings.executor != "local":
        params["slurm_dependency"] = dependency(after, "afterany")
    return params


def time_on_cluster(grid, out: Path, pending: list[str], settings: ClusterSettings, *, results_root: Path,
                    smoke: bool) -> TimingState:
    """Make sure the timing phase runs as a job once the cells' jobs have ended: none needed when
    timing.csv already holds every finished system; one submitted after the cells still queued or
    running (`pending`), unless a timing job waiting for all of them is queued already; with
    `settings.wait`, wait for it. A timing job that ended without a current timing is named on stderr."""
    folder = out / TIMING_DIR
    dirs = {c.name: Path(c.config.output_dir) for c in grid.cells}
    after = sorted({read_job(dirs[n])["job_id"] for n in pending if read_job(dirs[n])})
    job = read_job(folder)
    active = job is not None and is_active(record_state(folder, job))
    if not pending and not active and timing_is_current(grid, out):
        return TimingState(False, job["job_id"] if job else None)
    handle = None
    if not (active and set(after) <= set(job.get("after", []))):
        if active:  # a timing job that would start before this run's new cell jobs: the new one follows it
            after = sorted(set(after) | {job["job_id"]})
        job, handle = submit_timing(grid, after, settings, out, results_root, smoke)
    if settings.wait:
        while is_active(record_state(folder, job, handle)):
            time.sleep(0.5 if settings.executor == "local" else settings.poll_s)
    if is_active(record_state(folder, job, handle)) or pending:
        print(f"timing phase: job {job['job_id']} runs once the cells' jobs have ended; run this command again "
              "after it to write the table and report", file=sys.stderr)
        return TimingState(True, job["job_id"])
    if not timing_is_current(grid, out):
        failed = (f"the timing job {job['job_id']} ended without timing every finished system (see {job['stderr']}); "
                  "the table's speed columns are missing or old: run the command again to time them")
        print(f"atnat: {failed}", file=sys.stderr)
        return TimingState(False, job["job_id"], failed)
    return TimingState(False, job["job_id"])


def submit_timing(grid, after: list[str], settings: ClusterSettings, out: Path, results_root: Path,
                  smoke: bool) -> tuple[dict, submitit.Job]:
    """Submit the timing job (after the jobs `after`); its job.json goes to results/<grid>/timing/."""
    executor = submitit.AutoExecutor(folder=(out / "jobs").resolve(), cluster=settings.executor)
    executor.update_parameters(**timing_parameters(grid.cells, settings, after, f"atnat-{grid.name}-timing"))
    handle = executor.submit(TimingJob(str(Path(grid.path).resolve()), str(results_root.resolve()), smoke))
    record = {"launcher": "slurm" if settings.executor == "slurm" else "submitit-local",
              "executor": settings.executor, "job_id": str(handle.job_id), "folder": str((out / "jobs").resolve()),
              "submitted": time.strftime("%Y-%m-%d %H:%M:%S"), "submitted_s": time.time(), "state": "SUBMITTED",
              "after": after, "stdout": str(handle.paths.stdout), "stderr": str(handle.paths.stderr)}
    write_job(out / TIMING_DIR, record)
    print(f"timing phase: job {handle.job_id} submitted" + (f" (after {', '.join(after)})" if after else ""),
          file=sys.stderr)
    return record, handle
