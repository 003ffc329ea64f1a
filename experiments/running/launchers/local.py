"""The local launcher: a grid's cells in parallel worker processes, one per device (or CPU lane).

Each cell runs as `atnat cell GRID CELL` in its own process, pinned to its GPU(s) through
CUDA_VISIBLE_DEVICES, with its output in `<run dir>/worker.log`. A student starts once its
teacher has finished; a student whose teacher failed is marked failed without running. A cell
that asks for several devices (`train.devices: k`, DDP) takes k lanes at once. Interrupting the
grid stops the workers; their cells resume from their last checkpoints on the next run. A worker
whose `atnat run` dies, even by kill -9, ends too (`die_with_parent`), so no orphan keeps training.

Why not a library pool: concurrent.futures / multiprocessing pools reuse worker processes (a
cell's torch threads, CUDA context and Lightning state would leak into the next cell), cannot
give one task k devices at once (a DDP cell), nor a per-task CUDA_VISIBLE_DEVICES, log file and
kill; submitit's LocalExecutor (used by `--cluster local`, launchers/slurm.py) starts one job per
cell with no lanes or device assignment. What is left here is the lane bookkeeping (`Lane`,
`make_lanes`) and a Popen per cell.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from atnat.core.cores import usable_cores
from atnat.experiments.config.run import ConfigError
from atnat.experiments.running.grid import Cell

PARENT_ENV = "ATNAT_PARENT_PID"  # set for a worker: the pid of the `atnat run` it must not outlive


@dataclass(frozen=True)
class Lane:
    """Where one worker process runs: a GPU id, or None for a CPU lane."""

    gpu: str | None


def make_lanes(workers: int | None, devices: list[str] | None) -> list[Lane]:
    """`--devices 0,1` -> one lane per listed GPU (`0,0` runs two cells on GPU 0); else `--workers N`
    lanes over the visible GPUs in turn (N > GPUs shares them), or CPU lanes without a GPU."""
    if devices:
        return [Lane(str(d)) for d in devices]
    n = workers or 1
    import torch

    if torch.cuda.is_available():
        return [Lane(str(i % torch.cuda.device_count())) for i in range(n)]
    return [Lane(None) for _ in range(n)]


def shared(lanes: list[Lane]) -> bool:
    """True when two lanes run on the same device, so their timings disturb each other."""
    return len({lane.gpu for lane in lanes}) < len(lanes)


def lanes_needed(cell: Cell, lanes: list[Lane]) -> int:
    """Lanes a cell occupies: its DDP device count (every lane for `auto`/-1)."""
    devices = cell.config.train.devices
    if isinstance(devices, (list, tuple)):
        want = len(devices)
    elif isinstance(devices, int) and devices > 0:
        want = devices
    else:  # "auto" or -1: everything this grid has
        want = len(lanes)
    gpus = list(dict.fromkeys(lane.gpu for lane in lanes))
    if lanes[0].gpu is not None and want > len(gpus):
        raise ConfigError(f"cell {cell.name}: train.devices asks for {want} GPUs, but the grid runs on "
                          f"{len(gpus)} ({', '.join(gpus)})")
    return min(want, len(lanes))


def take(free: list[Lane], n: int) -> list[Lane] | None:
    """n free lanes, on n different GPUs for a multi-GPU cell (CPU lanes: any n); None if not now."""
    if n == 1 or free[:1] and free[0].gpu is None:
        return free[:n] if len(free) >= n else None
    picked: list[Lane] = []
    for lane in free:
        if all(lane.gpu != p.gpu for p in picked):
            picked.append(lane)
    return picked[:n] if len(picked) >= n else None


def cell_command(grid_path: Path, cell: Cell, results_root: Path, smoke: bool) -> list[str]:
    cmd = [sys.executable, "-m", "atnat.experiments.cli", "cell", str(grid_path), cell.name,
           "--results", str(results_root)]
    return cmd + (["--smoke"] if smoke else [])


def worker_env(lanes: list[Lane], n_lanes_total: int) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", **{PARENT_ENV: str(os.getpid())})
    if lanes[0].gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(dict.fromkeys(lane.gpu for lane in lanes))
    if "OMP_NUM_THREADS" not in os.environ:  # share the CPU cores between the lanes
        env["OMP_NUM_THREADS"] = str(max(1, usable_cores() * len(lanes) // n_lanes_total))
    return env


ELSEWHERE = 75  # (EX_TEMPFAIL) a worker's exit code: its cell is trained by another process right now (not a failure)


@dataclass
class Running:
    cell: Cell
    proc: subprocess.Popen
    lanes: list[Lane]
    log: object
    started: float


def run_parallel(grid_path: Path, cells: list[Cell], lanes: list[Lane], *, results_root: Path, smoke: bool,
                 status, mark_failed, on_finish=lambda cell, status, seconds: None,
                 on_poll=lambda running: None) -> None:
    """Run `cells` (teachers first) on `lanes`; `status(cell)` reads a cell's finished state,
    `mark_failed(cell, message)` records a failure the worker could not record itself,
    `on_poll(cells)` is called about every second with the cells running."""
    needs = {c.name: lanes_needed(c, lanes) for c in cells}  # refuse impossible requests up front
    pending, free, running = list(cells), list(lanes), []
    state: dict[str, str | None] = {c.name: None for c in cells}  # to run (a failed one is retried)
    polled = 0.0
    try:
        while pending or running:
            if time.time() - polled >= 1.0:
                on_poll([job.cell for job in running])
                polled = time.time()
            for job in [j for j in running if j.proc.poll() is not None]:
                running.remove(job)
                job.log.close()
                free += job.lanes
                if job.proc.returncode == ELSEWHERE and status(job.cell) != "ok":  # its owner records its end
                    state[job.cell.name] = "elsewhere"
                    on_finish(job.cell, "trained by another process", time.time() - job.started)
                    continue
                state[job.cell.name] = status(job.cell)
                record = Path(job.cell.config.output_dir) / "metrics.json"
                if state[job.cell.name] == "failed" and record.stat().st_mtime < job.started:  # an earlier attempt's
                    state[job.cell.name] = None  # failure, not this worker's: it died without recording one
                if state[job.cell.name] not in ("ok", "failed"):
                    log = Path(job.cell.config.output_dir) / "worker.log"
                    mark_failed(job.cell, f"worker exited with code {job.proc.returncode}; see {log}")
                    state[job.cell.name] = "failed"
                on_finish(job.cell, state[job.cell.name], time.time() - job.started)
            for cell in list(pending):
                teacher = state[cell.teacher] if cell.teacher in state else "ok"  # else: not in this run
                if teacher == "elsewhere":  # not this run's to train after it: left for a run once it has finished
                    state[cell.name] = "elsewhere"
                    pending.remove(cell)
                    on_finish(cell, f"skipped (its teacher {cell.teacher} is trained by another process)", 0.0)
                elif teacher == "failed":
                    mark_failed(cell, f"teacher cell {cell.teacher} failed")
                    state[cell.name] = "failed"
                    pending.remove(cell)
                    on_finish(cell, "failed", 0.0)
                elif teacher == "ok" and (taken := take(free, needs[cell.name])) is not None:
                    free = [lane for lane in free if not any(lane is t for t in taken)]
                    running.append(start(grid_path, cell, taken, len(lanes), results_root, smoke))
                    pending.remove(cell)
            time.sleep(0.2)
    finally:
        stop_workers(running)


STOP_WAIT_S = 180  # how long a stopped grid waits for its workers to end the step they are in and save it


def stop_workers(running: list[Running]) -> None:
    """Interrupted: SIGTERM to every worker, which ends the training step it is in, saves it (last.ckpt) and
    exits; its cell resumes from there next time. A worker still running after STOP_WAIT_S, or after a
    second Ctrl-C, is killed (its cell then resumes from its previous checkpoint)."""
    for job in running:
        job.proc.terminate()
    if any(job.proc.poll() is None for job in running):
        print(f"atnat: stopping {len(running)} worker(s): each saves the step it is in "
              f"(up to {STOP_WAIT_S} s; Ctrl-C again kills them now)", file=sys.stderr)
    deadline = time.time() + STOP_WAIT_S
    try:
        for job in running:
            try:
                job.proc.wait(timeout=max(0.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pass
    except KeyboardInterrupt:
        pass
    finally:
        for job in running:
            if job.proc.poll() is None:
                job.proc.kill()
                job.proc.wait()
            job.log.close()


def start(grid_path: Path, cell: Cell, lanes: list[Lane], n_lanes: int, results_root: Path,
          smoke: bool) -> Running:
    run_dir = Path(cell.config.output_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    log = open(run_dir / "worker.log", "ab")
    proc = subprocess.Popen(cell_command(grid_path, cell, results_root, smoke), stdout=log,
                            stderr=subprocess.STDOUT, env=worker_env(lanes, n_lanes))
    return Running(cell, proc, lanes, log, time.time())


def die_with_parent() -> None:
    """In a worker: leave Ctrl-C to the runner, and end (SIGTERM, which Lightning turns into a clean stop
    after the step it saves) when the `atnat run` that started it dies, so that a killed grid leaves no
    orphan training into a folder a re-run takes.
    Linux: prctl(PR_SET_PDEATHSIG); everywhere: a thread that watches the parent pid, which also
    covers a parent that died before the prctl."""
    parent = int(os.environ.pop(PARENT_ENV, "0") or 0)  # popped: the worker's own children (DDP ranks) do not inherit it
    if not parent:
        return
    # Ctrl-C in a terminal reaches every process of the grid: the runner answers it with SIGTERM to each
    # worker, which ends its step and saves it (stop_workers); a worker that took the SIGINT itself would
    # stop mid-step with nothing saved
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1  # from <linux/prctl.h>
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="atnat-parent-watch", daemon=True).start()
