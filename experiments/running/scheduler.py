"""Running a grid: which cells run, in what order and where (serially, in worker processes, or as
cluster jobs), then the timing phase (here, or as its own cluster job: timing_phase.py), results.csv,
environment.json and the report.

A results folder is locked by its runner (locks.py): a second runner is refused. Cells run with other
settings than the grid gives now are handled first (stale.py); each cell's own life is cell.py.
"""
from __future__ import annotations

import json
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch
from rich.console import Console
from rich.progress import Progress

from atnat.core.errors import AtnatError
from atnat.experiments.config.devices import require_gpu
from atnat.experiments.config.plugins import installed_plugins
from atnat.experiments.files import atomic_write_bytes, write_json_atomic
from atnat.experiments.locks import LockHeld, folder_lock, held
from atnat.experiments.modelfiles.checkpoints import checkpoint_step
from atnat.experiments.provenance import tracked_files
from atnat.experiments.reporting.environment import environment
from atnat.experiments.reporting.goals import goal_pairs, parse_goals
from atnat.experiments.reporting.integrity import tables_written
from atnat.experiments.reporting.records import cell_status, read_metrics
from atnat.experiments.reporting.report import write_report
from atnat.experiments.reporting.table import tabulate
from atnat.experiments.running.cell import record_failure_unless_held, run_one, students_of
from atnat.experiments.running.collect import stage_collected
from atnat.experiments.running.grid import Cell, describe, load_grid_into
from atnat.experiments.running.launchers.local import make_lanes, run_parallel
from atnat.experiments.running.plan import (
    plan,
    refuse_files_in_the_way,
    refuse_missing_inputs,
    refuse_sources_out_of_reach,
    refuse_unequal_parallel_files,
)
from atnat.experiments.running.stale import describe_stale, find_stale, handle_stale
from atnat.experiments.running.status import saved_training
from atnat.experiments.running.timing_phase import check_timing_peers, timing_description, timing_device, timing_phase
from atnat.experiments.training.progress import describe as describe_progress
from atnat.experiments.training.progress import read_progress
from atnat.experiments.training.resume import resume_point


@dataclass
class GridRun:
    """What `run_grid` left: the results folder, and the cells of this run that did not finish."""

    out: Path
    failed: list[str] = field(default_factory=list)  # cells whose metrics.json is not "ok"
    stale: list[str] = field(default_factory=list)  # cells of this run that ran with other settings than the grid
    # gives (its file edited while it ran): the report names them
    pending: list[str] = field(default_factory=list)  # cells whose cluster job is queued or running (and
    # "timing phase" while the timing phase's cluster job is)
    timing_failed: str = ""  # why the timing phase (here or as a cluster job) left systems untimed ("": it did not)


def run_grid(path, *, results_root: Path = Path("results"),
             only: list[str] | None = None, smoke: bool = False, workers: int | None = None,
             devices: list[str] | None = None, cluster=None, stale: str | None = None) -> GridRun:
    """Run every cell of a grid (teachers first), then write results.csv and the report.

    With `workers` > 1 or `devices`, cells run in parallel worker processes, one per device (see
    launchers/local.py); a cell that trains on several devices (DDP) always runs in its own process.
    With `cluster` (launchers/cluster_settings.py ClusterSettings), cells are submitted as cluster jobs; the
    table and report are written once none of them is queued or running. Cells run with other
    settings than the grid gives now are handled by `stale` (running/stale.py)."""
    planned = plan(path, results_root, only, smoke)  # what `--dry-run` shows (running/plan.py)
    refuse_missing_inputs(planned, path)
    refuse_files_in_the_way(planned, path)
    refuse_unequal_parallel_files(planned, path)
    refuse_sources_out_of_reach(planned, path)
    grid, out, cells, found, outside = planned.grid, planned.out, planned.cells, planned.stale, planned.outside
    if cluster is None:  # a cluster's jobs check their own node (running/cell.py); here: before anything runs
        for cell in cells:
            require_gpu(cell.config.train.accelerator, f"{path}: cell {cell.name}")
    # the timing phase's peers: on the timing device here; on a login node only what it can see (the install)
    check_timing_peers(grid, timing_device(grid, devices) if cluster is None else "cpu", path)
    tracked = tracked_files(out)
    if tracked:
        print(f"atnat: {out} holds {tracked} committed files; this run rewrites its tables and report there "
              f"(`git checkout -- {out}` restores them; --results DIR writes elsewhere)", file=sys.stderr)
    with held(folder_lock(out), f"results folder {out}"):
        kept = handle_stale(grid, cells, stale, found)
        if outside:
            print(f"atnat: {len(outside)} cell(s) outside --only were run with other settings than the grid gives "
                  f"now; not run here, the report names them: {', '.join(outside)}", file=sys.stderr)
        try:
            pending, late, timing_failed = _run_cells(
                grid, cells, path, out, results_root=results_root, smoke=smoke, workers=workers, devices=devices,
                cluster=cluster, kept_stale={s.cell: s.reason for s in kept} if stale == "keep" else {}, outside=outside)
        except KeyboardInterrupt:
            print(f"atnat: {where_cells_resume(cells)}", file=sys.stderr)
            raise
    failed = [c.name for c in cells if c.name not in pending and cell_status(Path(c.config.output_dir)) != "ok"]
    if failed:
        print(f"failed: {len(failed)} of {len(cells)} cells: {', '.join(failed)} "
              f"(errors in {out / 'results.csv'} and each run's error.log)", file=sys.stderr)
    if late:
        print(f"atnat: {len(late)} cell(s) ran with other settings than the grid file gave when this run started (it "
              f"was edited meanwhile); the report names them:\n{describe_stale(late)}", file=sys.stderr)
    return GridRun(out, failed=failed, pending=pending, stale=[s.cell for s in late], timing_failed=timing_failed)


def _run_cells(grid, cells, path, out: Path, *, results_root, smoke, workers, devices, cluster,
               kept_stale: dict[str, str], outside: dict[str, str]) -> tuple[list[str], list, str]:
    """Run (or submit) the cells, then write the table and report; returns the cells still pending, those
    that ran with other settings than `grid` (Stale: workers read the grid file again, which may have changed)
    and why the timing phase (here, or as a cluster job) left systems untimed ("" where it did not)."""
    if cluster is not None:
        from atnat.experiments.running.launchers.slurm import run_on_cluster, time_on_cluster  # submitit: only here

        started = time.time()
        pending = run_on_cluster(grid, cells, cluster, results_root=results_root, smoke=smoke)
        timing = time_on_cluster(grid, out, pending, cluster, results_root=results_root, smoke=smoke)
        if pending or timing.pending:
            return pending + (["timing phase"] if timing.pending else []), [], ""
        late = _late_stale(grid, kept_stale, outside)
        write_outputs(grid, out, path, started, {"parallel_cells": len(cells), "lanes": cluster.executor,
                                                 "stale_cells_kept": kept_stale,
                                                 "stale_cells_interim": outside | {s.cell: s.reason for s in late}}
                      | ({"timing_failed": timing.failed} if timing.failed else {}), timed_by_job=timing.job_id)
        return [], late, timing.failed

    multi_node = [c.name for c in cells if c.config.train.num_nodes > 1]
    if multi_node:
        raise AtnatError(f"{path}: cells {', '.join(multi_node)} train on several nodes (train.num_nodes > 1); "
                         "run them with a cluster launcher: --launcher slurm")
    lanes = make_lanes(workers, devices)
    parallel = len(lanes) > 1 or any(c.config.train.devices not in (1, "1") for c in cells)  # DDP: own process
    started = time.time()

    # a console of its own: Lightning's rich progress bar (a cell trained in this process) clears the live
    # display of rich's shared console as it starts, and a progress bar on that console then fails as it stops
    with Progress(transient=False, console=Console()) as progress:
        bar = progress.add_task(f"grid {grid.name}", total=len(cells))
        if parallel:
            _run_in_workers(grid, cells, lanes, progress, bar, results_root=results_root, smoke=smoke)
        else:
            for cell in cells:
                run_dir = Path(cell.config.output_dir)
                progress.update(bar, description=f"{grid.name}: {cell.name}")
                if cell_status(run_dir) != "ok":
                    try:
                        run_one(cell, run_dir, students_of(grid, cell))
                    except LockHeld as err:  # trained by another process right now: not this run's
                        progress.console.print(f"cell {cell.name} skipped: {err}")
                progress.advance(bar)
    timing_failed = timing_phase(grid, out, timing_device(grid, devices))
    late = _late_stale(grid, kept_stale, outside)
    write_outputs(grid, out, path, started, {"parallel_cells": len(lanes) if parallel else 1,
                                             "lanes": ", ".join(lane.gpu or "cpu" for lane in lanes),
                                             "stale_cells_kept": kept_stale,
                                             "stale_cells_interim": outside | {s.cell: s.reason for s in late}}
                  | ({"timing_failed": timing_failed} if timing_failed else {}))
    return [], late, timing_failed


def _late_stale(grid, kept: dict[str, str], outside: dict[str, str]) -> list:
    """The cells that ran with other settings than `grid` (as read when the run started), found once they
    have run: a worker reads the grid file again, and the file may have been edited meanwhile."""
    return [s for s in find_stale(grid, grid.cells) if s.cell not in kept and s.cell not in outside]


def _tabulate(grid, path, out: Path, runs: Path | None = None) -> pd.DataFrame:
    """The grid's tables in `out` (reporting/table.py tabulate) with the grid's own settings."""
    first = grid.cells[0].config.eval if grid.cells else None
    return tabulate([describe(c) for c in grid.cells], out, significance=first.significance if first else "bs",
                    n_bootstrap=first.n_bootstrap if first else 1000, baseline=grid.baseline,
                    margin=grid.equivalence_margin, goal_pairs=goal_pairs(parse_goals(grid.goals, str(path))),
                    compare=grid.compare, runs=runs)


def write_interim(path, *, results_root: Path = Path("results"), smoke: bool = False,
                  collected: Path | None = None, figures: bool = True) -> tuple[Path, list[str]]:
    """An interim report of a grid whose cells are not all done (a run of days, still running or
    paused): its finished cells tabulated into <results>/<grid>/interim/ - tables, goals, ranking and
    report, with speed only for the tasks and seeds timed so far (`atnat time`) - without touching the
    runner's own folder or taking its lock; the
    final `atnat run` writes the real report. With `collected` (the DEST of `atnat collect`), the
    cells are those collected there rather than the run folders, so that cells whose machine is
    gone are still reported (collect.py stage_collected). Returns the interim folder and the problems of
    the cells whose metrics.json is damaged (tabulated as failed)."""
    grid, out = load_grid_into(path, results_root, smoke)
    if collected is not None:
        with tempfile.TemporaryDirectory(prefix="atnat-collected-") as tmp:
            staged_grid, staged = load_grid_into(path, Path(tmp), smoke)  # run folders point into the stage
            unverified: list[str] = []
            if not stage_collected(staged_grid, collected, staged / "runs", unverified):
                raise AtnatError(f"--collected {collected}: no collected cell of {path} there: nothing to report")
            damaged = [problem.replace(str(staged / "runs"), str(collected)) for problem in damaged_records(staged_grid)]
            return _interim(staged_grid, path, staged / "runs", out / "interim", f"the cells collected in {collected}",
                            figures=figures, unverified=unverified), damaged
    if not (out / "runs").is_dir():
        raise AtnatError(f"{out / 'runs'}: no run folders yet: nothing to report for {path}")
    return _interim(grid, path, out / "runs", out / "interim", None, figures=figures), damaged_records(grid)


def damaged_records(grid) -> list[str]:
    """What is wrong with each cell's metrics.json that cannot be read as a results record (the tables show
    the cell as failed)."""
    damaged = []
    for cell in grid.cells:
        try:
            read_metrics(Path(cell.config.output_dir))
        except AtnatError as err:
            damaged.append(str(err))
    return damaged


def write_collected(path, *, results_root: Path = Path("results"), smoke: bool = False, collected: Path,
                    figures: bool = True) -> Path:
    """The grid's own report (tables, goals, ranking, report in <results>/<grid>/) made from the cells
    collected in `collected` (collect.py), for a grid whose cells outlived the machines that trained
    them (the deep grid: seeds finished on machines since replaced). Every cell of the grid must be
    there, with the speed its seeds were timed at (`atnat time`, collected with each cell); a grid
    with cells missing gets only an interim report. Returns the results folder."""
    grid, out = load_grid_into(path, results_root, smoke)
    if (out / "runs").is_dir():  # a runner's folder: its own tables, timing and report are the runner's to write
        raise AtnatError(f"{out} holds run folders (runs/): the report from the copies in {collected} would replace "
                         f"the runner's tables and timing; give another --results folder (or `atnat report --interim "
                         f"{path} --collected {collected}`)")
    out.mkdir(parents=True, exist_ok=True)
    with held(folder_lock(out), f"results folder {out}"), \
            tempfile.TemporaryDirectory(prefix="atnat-collected-") as tmp:
        staged_grid, staged = load_grid_into(path, Path(tmp), smoke)
        unverified: list[str] = []
        there = set(stage_collected(staged_grid, collected, staged / "runs", unverified))
        missing = [c.name for c in grid.cells if c.name not in there]
        if missing:
            raise AtnatError(f"--collected {collected}: {len(missing)} of the {len(grid.cells)} cells of {path} are not "
                             f"collected there ({', '.join(missing)}): the grid's report needs every cell; "
                             f"`atnat report --interim {path} --collected {collected}` reports those there")
        return _interim(staged_grid, path, staged / "runs", out, f"the cells collected in {collected}", final=True,
                        figures=figures, unverified=unverified)


def _interim(grid, path, runs: Path, interim: Path, source: str | None, final: bool = False,
             figures: bool = True, unverified: list[str] = ()) -> Path:
    """The interim tables and report of the run folders `runs` into `interim`, with the speed of the
    seeds timed so far (`atnat time`: timing.csv beside `runs`), if any; `final`: the grid's own
    report from its collected cells, every one of them there (write_collected)."""
    interim.mkdir(parents=True, exist_ok=True)
    for name in ("timing.csv", "timing.json"):
        timed, copy = runs.parent / name, interim / name
        if timed.is_file():
            atomic_write_bytes(copy, timed.read_bytes())
        else:
            copy.unlink(missing_ok=True)  # an earlier interim's, no longer current
    table = _tabulate(grid, path, interim, runs=runs)
    command = "atnat " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else f"atnat report --interim {path}"
    env = environment(grid.path, 0.0, command)
    done = int(table.drop_duplicates("cell")["status"].eq("ok").sum())
    timed = (interim / "timing.csv").is_file()
    env |= {**_judged_by(grid), "results_rows": len(table), "tables": tables_written(interim),
            **({"timing": timing_description(interim)} if timed else {}),  # else no `timing`: no speed measured
            "stale_cells_interim": {x.cell: x.reason for x in find_stale(grid, grid.cells)}}
    if unverified:  # copies collected before collect recorded their files' sha256
        env["collected_unverified"] = sorted(unverified)
    if final:  # every cell collected (write_collected): the grid's report, read from the copies
        to_time = set(table["cell"].astype(str)) - {c.name for c in grid.never_timed()}
        no_speed = sorted(to_time - set(pd.read_csv(interim / "timing.csv")["cell"].astype(str))) if timed else []
        env["collected_from"] = f"{source}, written {env.pop('started')} {time.strftime('%Z')}" + (
            f"; no speed was collected for {', '.join(no_speed)}" if no_speed else "" if timed else
            "; no cell's speed was collected (no `atnat time`)")
    else:
        env["interim"] = (f"{done} of {len(grid.cells)} cells finished when written ({env.pop('started')} "
                          f"{time.strftime('%Z')}); "
                          + ("speed only of the tasks and seeds timed so far (`atnat time`)" if timed else
                             "no timing phase yet") + (f"; read from {source}" if source else ""))
    env.pop("wall_time_s")
    write_json_atomic(interim / "environment.json", env)
    write_goals(interim, grid.goals)
    write_report(interim, figures and grid.report.figures)
    return interim


def write_restat(path, *, results_root: Path = Path("results"), smoke: bool = False,
                 figures: bool = True) -> tuple[Path, list[str]]:
    """The tables of a grid's results folder recomputed from its run folders with this version's
    statistics (the paired tests, comparisons.csv, ranking.csv), then the report: for a results folder
    written by an older version. Nothing is trained, evaluated or timed again (timing.csv is read as
    it is); environment.json keeps the run's own record, with `restat` (command, commit, date) added.
    Returns the folder and the problems of the cells whose metrics.json is damaged (tabulated as failed)."""
    grid, out = load_grid_into(path, results_root, smoke)
    if not (out / "runs").is_dir() or not (out / "environment.json").is_file():
        raise AtnatError(f"{out}: --restat needs a finished run's folder with its runs/ and environment.json")
    _refuse_lost_results(grid, out)
    damaged = damaged_records(grid)
    with held(folder_lock(out), f"results folder {out}"):  # not under a runner writing the same tables
        table = _tabulate(grid, path, out)
        env = json.loads((out / "environment.json").read_text(encoding="utf-8"))
        command = f"atnat report --restat {shlex.quote(str(path))} --results {shlex.quote(str(results_root))}" \
            + (" --smoke" if smoke else "")
        now = environment(grid.path, 0.0, command)
        env |= {"restat": {k: now[k] for k in ("command", "git_commit", "git_dirty", "started") if k in now},
                **_judged_by(grid), "results_rows": len(table), "tables": tables_written(out)}
        write_json_atomic(out / "environment.json", env)
        write_goals(out, grid.goals)  # judged as the grid states them now, as ranking.csv's goal pairs are
        write_report(out, figures and grid.report.figures)
    return out, damaged


def _refuse_lost_results(grid, out: Path) -> None:
    """AtnatError naming the cells that had a result when the run wrote its tables but have no
    metrics.json now (a run folder removed or cut): recomputed without them, every table would show
    the cell "not run" beside its timing rows, and the run's findings would be lost, not restated."""
    before: dict[str, str] = {}
    try:
        table = pd.read_csv(out / "results.csv", usecols=["cell", "status"])
        before = dict(zip(table["cell"].astype(str), table["status"].astype(str)))
    except (OSError, ValueError):  # no readable results.csv: every cell must have its record
        pass
    lost = [Path(c.config.output_dir) for c in grid.cells
            if before.get(c.name) != "not run" and not (Path(c.config.output_dir) / "metrics.json").is_file()]
    if lost:
        raise AtnatError(f"{out}: --restat recomputes the tables from every cell's results, and "
                         f"{len(lost)} cell(s) have no results there (no metrics.json): "
                         f"{', '.join(str(p) for p in lost)}; restore those folders (`atnat collect` keeps copies), "
                         "or `atnat run` the grid to run them again; nothing was changed")


def _judged_by(grid) -> dict:
    """The grid settings the report judges with, kept in environment.json: the equivalence margin, the
    `compare:` pairs (so that a pair with no result is named, not silently absent), the `baseline`
    cell (the AT reference of the summary's verdict, as of comparisons.csv) and the cells never timed
    (`untimed:`, so that their empty speed columns are explained, not taken for a timing that failed)."""
    return {"equivalence_margin": grid.equivalence_margin, "compare": [list(pair) for pair in grid.compare],
            "baseline": grid.baseline, **({"untimed": [c.name for c in grid.never_timed()]} if grid.untimed else {})}


def write_outputs(grid, out: Path, path, started: float, run_info: dict, timed_by_job: str | None = None) -> None:
    """results.csv, environment.json and the report of the results folder `out`, after the timing phase
    (run by the caller, or by the cluster job `timed_by_job`)."""
    table = _tabulate(grid, path, out)
    command = "atnat " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else f"atnat run {path}"
    env = environment(grid.path, time.time() - started, command) | run_info
    if grid.cells:
        env.update(significance=grid.cells[0].config.eval.significance,
                   n_bootstrap=grid.cells[0].config.eval.n_bootstrap)
    env["timing"] = timing_description(out, timed_by_job, default_threads=None if timed_by_job else torch.get_num_threads())
    if env.get("timing_failed"):  # a timing.json there may be an earlier run's
        env["timing"] = f"failed: {env['timing_failed']} (timing.json there: {env['timing']})"
    env |= _judged_by(grid)
    env["plugins"] = installed_plugins()  # every plugin this process saw, with its distribution's version
    env["results_rows"] = len(table)  # the report refuses a results.csv with fewer (a cut-short file)
    env["tables"] = tables_written(out)  # and a folder where one of these is gone
    write_json_atomic(out / "environment.json", env)
    # the grid file as run: the report tells a reader when the file has changed since (its settings differ)
    atomic_write_bytes(out / "grid-as-run.yaml", grid.source or Path(grid.path).read_bytes())
    write_goals(out, grid.goals)
    write_report(out, grid.report.figures)
    print(f"results: {out / 'results.csv'} ({len(table)} rows); report: {out / 'report.md'}")


def write_goals(out: Path, goals: list) -> None:
    """goals.json for the report: the grid's goals as it states them now; none where it sets none (an old file
    left behind would show goals the grid no longer has)."""
    if goals:
        write_json_atomic(out / "goals.json", goals)
    elif (out / "goals.json").exists() or (out / "goals.json").is_symlink():
        (out / "goals.json").unlink()


def where_cells_resume(cells: list[Cell]) -> str:
    """After an interruption: which started cells resume from a checkpoint (and its step) and which start
    again from step 0 (none saved yet); finished cells are kept."""
    resume, again = [], []
    for cell in cells:
        run_dir = Path(cell.config.output_dir)
        if cell_status(run_dir) == "ok" or not run_dir.is_dir():
            continue
        checkpoint = resume_point(run_dir / "checkpoints", set_aside=False)
        if checkpoint is not None:
            resume.append(f"{cell.name} (step {checkpoint_step(checkpoint)})")
        elif (run_dir / "logs").is_dir() or (run_dir / "config.json").is_file():
            again.append(cell.name)
    parts = ["finished cells are kept"]
    if resume:
        parts.append("resuming from their last checkpoint: " + ", ".join(resume))
    if again:
        parts.append("starting again from step 0 (no checkpoint saved yet): " + ", ".join(again))
    return "; ".join(parts)


def failure_reason(cell: Cell) -> str:
    """': <the first line of the error>' of a failed cell (its metrics.json), '' otherwise."""
    try:
        meta = read_metrics(Path(cell.config.output_dir))
    except AtnatError:
        return ""
    if not meta or meta.get("status") != "failed":
        return ""
    lines = str(meta.get("error") or "").strip().splitlines()
    first = lines[0] if lines else "no error message recorded"
    return f": {first if len(first) <= 300 else first[:299] + '…'}"


def _run_in_workers(grid, cells, lanes, progress, bar, *, results_root: Path, smoke: bool) -> None:
    def status(cell: Cell) -> str | None:
        return cell_status(Path(cell.config.output_dir))

    def finished(cell: Cell, state: str, seconds: float) -> None:
        progress.console.print(f"{cell.name}: {state} ({seconds:.0f} s){failure_reason(cell)}", markup=False)
        progress.advance(bar)

    lines: dict[str, object] = {}  # a progress line per running cell

    def poll(running: list[Cell]) -> None:
        names = {c.name for c in running}
        for name in [n for n in lines if n not in names]:
            progress.remove_task(lines.pop(name))
        for cell in running:
            text = f"  {cell.name}: {describe_progress(read_progress(Path(cell.config.output_dir)))}"
            if cell.name not in lines:
                lines[cell.name] = progress.add_task(text, total=None)
            progress.update(lines[cell.name], description=text)

    todo = priority_order(grid, [c for c in cells if status(c) != "ok"],
                          started=lambda c: saved_training(Path(c.config.output_dir)))
    progress.advance(bar, len(cells) - len(todo))
    run_parallel(grid.path, todo, lanes, results_root=results_root, smoke=smoke, status=status,
                 mark_failed=lambda cell, message: record_failure_unless_held(cell, message),
                 on_finish=finished, on_poll=poll)
    for task in lines.values():
        progress.remove_task(task)


def priority_order(grid, cells: list[Cell], started=lambda cell: False) -> list[Cell]:
    """The order free workers take cells in: first the cells a stopped run left half-trained (`started`:
    their training saved in a checkpoint), whatever their seed - a grid resumed with more cells than it
    had (a wider `--only`) finishes its work in progress before it begins new work; then seed by seed,
    and within a seed its teachers first (their students wait on them), then the rest as the grid file
    declares them (a cell declared last, e.g. a control, runs last within its seed). A free worker takes
    the next seed's cells only when no cell of the earlier seeds is ready to run, so that each seed's
    comparison is complete - reportable, and timeable by `atnat time` - as early as can be, and a machine
    lost midway costs mostly the seed in progress, not a bit of every seed."""
    teachers = {c.teacher for c in grid.cells if c.teacher}
    declared = {c.name: i for i, c in enumerate(grid.cells)}
    return sorted(cells, key=lambda c: (not started(c), c.seed, c.name not in teachers, declared[c.name]))
