"""Run cells and grids: distil -> train (resumable) -> evaluate -> tabulate -> report.

A finished cell has `metrics.json` with status "ok" and is skipped when the grid runs again; an
interrupted one resumes from `checkpoints/last.ckpt`; a failing one is marked "failed" with its
error and the grid goes on. A results folder is locked by its runner, and a cell by the process
that trains it (locks.py): a second runner, or a second process on one cell, is refused.
"""
from __future__ import annotations

import fnmatch
import json
import shlex
import sys
import time
import traceback
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch

from atnat.core.errors import AtnatError

from atnat.experiments.config import RunConfig
from atnat.experiments.evaluate import EvalResult, SpeedSettings, evaluate
from atnat.experiments.files import write_csv, write_json_atomic, write_text_atomic
from atnat.experiments.grid import Cell, load_grid, run_order
from atnat.experiments.stale import describe_stale, find_stale, handle_stale
from atnat.experiments.locks import LockHeld, cell_lock, folder_lock, held
from atnat.experiments.table import environment, read_metrics, tabulate
from atnat.experiments.train import finished_training, prepare_data, train
from atnat.experiments.runs import helper_rank, inference_device, load_module, load_task


def run_cell(cfg: RunConfig, run_dir: Path, speed: SpeedSettings | None = SpeedSettings(), *,
             allow_changes: bool = False) -> EvalResult | None:
    """Train (resuming if possible) and evaluate one run; writes everything into run_dir. A run
    whose training finished under these settings is only evaluated again. With `speed`, the run's
    own strategies are then timed side by side (a grid leaves this to its timing phase:
    speed=None). Returns None in the helper ranks of a DDP run: rank 0 alone evaluates and writes
    results. `allow_changes`: see train()."""
    run_dir.mkdir(parents=True, exist_ok=True)
    task = load_task(cfg)
    device = inference_device(cfg.train.accelerator)  # decoding runs where training ran
    targets, teacher, distill_meta = None, None, None
    done = None if helper_rank() else finished_training(run_dir, cfg)  # only evaluated again
    if done is not None and (run_dir / "distill.json").is_file():
        distill_meta = json.loads((run_dir / "distill.json").read_text())
    if cfg.distill is not None and cfg.distill.targets and done is None:
        from atnat.experiments.distill import distilled_targets

        from atnat.experiments.progress import counting_phase

        src, tgt = task.splits["train"]
        follow = counting_phase(run_dir, "distilling training sentences with the teacher", len(src))
        targets, distill_meta = distilled_targets(cfg.distill.teacher, src, tgt, cfg.distill.strategy,
                                                  device=device, on_batch=follow)
        write_json_atomic(run_dir / "distill.json", distill_meta)
    from atnat.experiments.assemble import build_strategy

    if any(build_strategy(s)[1].needs_scorer for s in cfg.eval.strategies):
        if cfg.distill is None:
            raise AtnatError(f"run {cfg.name}: a strategy that re-ranks with an AT teacher (npd) needs "
                             "distill.teacher")
        teacher = load_module(cfg.distill.teacher, map_location=device)[0]
    started = time.time()
    best = done or train(cfg, run_dir, prepare_data(cfg, task, targets), allow_changes=allow_changes)
    if best is None:
        return None
    trained = json.loads((run_dir / "train.json").read_text())
    train_time = trained.get("train_time_s", time.time() - started)
    module, _ = load_module(best, map_location=device)
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    result = evaluate(module, task, cfg, run_dir, teacher=teacher)
    for row in result.rows:  # steps trained, not the best checkpoint's
        row.update(train_steps=trained["global_step"], train_time_s=train_time, train_devices=trained["world_size"],
                   distill_bleu=distill_meta["bleu_vs_references"] if distill_meta else float("nan"))
    if speed is not None:
        time_own_strategies(cfg, run_dir, module, teacher, speed, result)
    save_cell_outputs(run_dir, result)
    return result


def time_own_strategies(cfg: RunConfig, run_dir: Path, module, teacher, speed: SpeedSettings,
                        result: EvalResult) -> None:
    """A single run (`atnat train`): its strategies timed side by side; speed-ups against its own
    greedy when it is a plain AT run."""
    from atnat.experiments.distill import checkpoint_stamp
    from atnat.experiments.assemble import build_strategy
    from atnat.experiments.timing import COLUMNS, System, plain_at, time_systems

    tokenizer = load_task(cfg).tokenizer
    sources = [tokenizer.encode(line)[: cfg.train.max_len] for line in load_task(cfg).splits[cfg.eval.split][0]]
    systems = [System(cfg.name, label, module, strategy, sources, teacher, checkpoint_stamp(run_dir))
               for label, strategy in (build_strategy(spec) for spec in cfg.eval.strategies)]
    baselines = {cfg.name: (cfg.name, "greedy")} if plain_at(cfg) else {}
    timing = time_systems(systems, speed, baselines).set_index("strategy")
    for row in result.rows:
        row.update({c: timing.loc[row["strategy"], c] for c in COLUMNS if c not in ("cell", "strategy", "fingerprint")})


def save_cell_outputs(run_dir: Path, result: EvalResult) -> None:
    (run_dir / "curves").mkdir(exist_ok=True)
    for name, frame in result.curves.items():
        write_csv(frame, run_dir / "curves" / f"{name}.csv")
    if result.samples is not None:
        write_csv(result.samples, run_dir / "samples.csv")
    write_json_atomic(run_dir / "metrics.json", {"status": "ok", "rows": result.rows})


def cell_status(run_dir: Path) -> str | None:
    """"ok" / "failed" from the cell's metrics.json; None when it has none, or one of the wrong shape
    (named on stderr: the cell then runs again, which re-evaluates a finished training)."""
    try:
        meta = read_metrics(run_dir)
    except AtnatError as err:
        print(f"atnat: {err}; the cell counts as unfinished", file=sys.stderr)
        return None
    return None if meta is None else meta["status"]


def describe(cell: Cell) -> dict:
    cfg = cell.config
    loss, dec_opts = cfg.loss or {}, {k: v for k, v in cfg.decoder.items() if k != "name"} \
        if isinstance(cfg.decoder, dict) else {}
    family = cell.name[: -len(f"-s{cell.seed}")] if cell.name.endswith(f"-s{cell.seed}") else cell.name
    return {"cell": cell.name, "family": family, "variant": cell.variant, "task": cell.labels.get("task", cfg.task_name),
            "decoder": cfg.decoder_name, "seed": cell.seed,
            "distilled": cfg.distill is not None and cfg.distill.targets,
            "guided_attention": float(loss.get("guided_attention_weight", 0) or 0) > 0,
            "options": ", ".join(f"{k}={v}" for k, v in dec_opts.items()), "teacher": cell.teacher or ""}


def load_grid_into(path, results_root: Path, smoke: bool):
    """The validated grid whose cells write under `results_root/<grid name>[-smoke]`, and that folder."""
    name = load_grid(path, smoke=smoke).name  # validate everything before anything runs
    out = results_root / (name + ("-smoke" if smoke else ""))
    return load_grid(path, smoke=smoke, results_dir=out), out


@dataclass
class GridRun:
    """What `run_grid` left: the results folder, and the cells of this run that did not finish."""

    out: Path
    failed: list[str] = field(default_factory=list)  # cells whose metrics.json is not "ok"
    pending: list[str] = field(default_factory=list)  # cells whose cluster job is queued or running


def run_grid(path, *, results_root: Path = Path("results"), dry_run: bool = False,
             only: list[str] | None = None, smoke: bool = False, workers: int | None = None,
             devices: list[str] | None = None, cluster=None, stale: str | None = None) -> GridRun:
    """Run every cell of a grid (teachers first), then write results.csv and the report.

    With `workers` > 1 or `devices`, cells run in parallel worker processes, one per device (see
    launchers/local.py); a cell that trains on several devices (DDP) always runs in its own process.
    With `cluster` (launchers/slurm.py ClusterSettings), cells are submitted as cluster jobs; the
    table and report are written once none of them is queued or running. Cells run with other
    settings than the grid gives now are handled by `stale` (experiments/stale.py)."""
    grid, out = load_grid_into(path, results_root, smoke)
    cells = select_cells(run_order(grid), only, path)
    if dry_run:
        print(pd.DataFrame([describe(c) | {"strategies": len(c.config.eval.strategies)} for c in cells])
              .to_string(index=False))
        found = find_stale(grid, cells)
        if found:
            print(f"stale (run with other settings than these):\n{describe_stale(found)}")
        return GridRun(out)
    with held(folder_lock(out), f"results folder {out}"):
        kept = handle_stale(grid, cells, stale)
        pending = _run_cells(grid, cells, path, out, results_root=results_root, smoke=smoke, workers=workers,
                             devices=devices, cluster=cluster,
                             kept_stale={s.cell: s.reason for s in kept} if stale == "keep" else {})
    failed = [c.name for c in cells if c.name not in pending and cell_status(Path(c.config.output_dir)) != "ok"]
    if failed:
        print(f"failed: {len(failed)} of {len(cells)} cells: {', '.join(failed)} "
              f"(errors in {out / 'results.csv'} and each run's error.log)", file=sys.stderr)
    return GridRun(out, failed, pending)


def select_cells(cells: list[Cell], only: list[str] | None, path) -> list[Cell]:
    """The cells named by `--only` patterns: exact names or shell-style globs (`*-at-s1`, `en-de-*`);
    a pattern that matches no cell is an error naming the cells."""
    if not only:
        return cells
    unmatched = [p for p in only if not any(fnmatch.fnmatchcase(c.name, p) for c in cells)]
    if unmatched:
        raise AtnatError(f"{path}: --only {unmatched[0]!r} matches no cell (an exact name or a glob such as "
                         f"'*-at-s1'); cells: {', '.join(c.name for c in cells)}")
    return [c for c in cells if any(fnmatch.fnmatchcase(c.name, p) for p in only)]


def _run_cells(grid, cells, path, out: Path, *, results_root, smoke, workers, devices, cluster,
               kept_stale: dict[str, str]) -> list[str]:
    """Run (or submit) the cells, then write the table and report; returns the cells still pending."""
    if cluster is not None:
        from atnat.experiments.launchers.slurm import run_on_cluster

        started = time.time()
        pending = run_on_cluster(grid, cells, cluster, results_root=results_root, smoke=smoke)
        if not pending:
            write_outputs(grid, out, path, started, {"parallel_cells": len(cells), "lanes": cluster.executor,
                                                     "stale_cells_kept": kept_stale})
        return pending
    from atnat.experiments.launchers.local import make_lanes

    multi_node = [c.name for c in cells if c.config.train.num_nodes > 1]
    if multi_node:
        raise AtnatError(f"{path}: cells {', '.join(multi_node)} train on several nodes (train.num_nodes > 1); "
                         "run them with a cluster launcher: --launcher slurm")
    lanes = make_lanes(workers, devices)
    parallel = len(lanes) > 1 or any(c.config.train.devices not in (1, "1") for c in cells)  # DDP: own process
    started = time.time()
    from rich.progress import Progress

    with Progress(transient=False) as progress:
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
    write_outputs(grid, out, path, started, {"parallel_cells": len(lanes) if parallel else 1,
                                             "lanes": ", ".join(lane.gpu or "cpu" for lane in lanes),
                                             "stale_cells_kept": kept_stale})
    return []


def write_outputs(grid, out: Path, path, started: float, run_info: dict) -> None:
    """The timing phase, then results.csv, environment.json and the report of the results folder `out`."""
    timing_phase(grid, out)
    table = tabulate(grid, out, describe)
    command = "atnat " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else f"atnat run {path}"
    env = environment(grid, time.time() - started, command) | run_info
    if grid.cells:
        env.update(significance=grid.cells[0].config.eval.significance,
                   n_bootstrap=grid.cells[0].config.eval.n_bootstrap)
    speed = SpeedSettings(**grid.speed)
    env["timing"] = ("timing phase after training: every system of a task side by side in one process"
                     + (f", {speed.threads or torch.get_num_threads()} CPU threads" if device_is_cpu(grid) else ""))
    env["results_rows"] = len(table)  # the report refuses a results.csv with fewer (a cut-short file)
    write_json_atomic(out / "environment.json", env)
    if grid.goals:
        write_json_atomic(out / "goals.json", grid.goals)
    elif (out / "goals.json").exists():  # the grid no longer sets goals: the report must not show old ones
        (out / "goals.json").unlink()
    from atnat.experiments.report import write_report

    write_report(out)
    print(f"results: {out / 'results.csv'} ({len(table)} rows); report: {out / 'report.md'}")


def _run_in_workers(grid, cells, lanes, progress, bar, *, results_root: Path, smoke: bool) -> None:
    from atnat.experiments.launchers.local import run_parallel

    def status(cell: Cell) -> str | None:
        return cell_status(Path(cell.config.output_dir))

    def finished(cell: Cell, state: str, seconds: float) -> None:
        progress.console.print(f"{cell.name}: {state} ({seconds:.0f} s)")
        progress.advance(bar)

    lines: dict[str, object] = {}  # a progress line per running cell

    def poll(running: list[Cell]) -> None:
        from atnat.experiments.progress import describe as describe_progress, read_progress

        names = {c.name for c in running}
        for name in [n for n in lines if n not in names]:
            progress.remove_task(lines.pop(name))
        for cell in running:
            text = f"  {cell.name}: {describe_progress(read_progress(Path(cell.config.output_dir)))}"
            if cell.name not in lines:
                lines[cell.name] = progress.add_task(text, total=None)
            progress.update(lines[cell.name], description=text)

    todo = priority_order(grid, [c for c in cells if status(c) != "ok"])
    progress.advance(bar, len(cells) - len(todo))
    run_parallel(grid.path, todo, lanes, results_root=results_root, smoke=smoke, status=status,
                 mark_failed=lambda cell, message: record_failure_unless_held(cell, message),
                 on_finish=finished, on_poll=poll)
    for task in lines.values():
        progress.remove_task(task)


def priority_order(grid, cells: list[Cell]) -> list[Cell]:
    """The order free workers take cells in: teachers first (their students wait on them), then the
    rest as the grid file declares them (a cell declared last, e.g. a control, runs last)."""
    teachers = {c.teacher for c in grid.cells if c.teacher}
    declared = {c.name: i for i, c in enumerate(grid.cells)}
    return sorted(cells, key=lambda c: (c.name not in teachers, declared[c.name]))


def run_named_cell(path, cell_name: str, *, results_root: Path = Path("results"), smoke: bool = False) -> str | None:
    """Run one cell of a grid (what every launcher runs per cell); skips it when done. Returns the
    cell's status ("ok", "failed"; None in a DDP helper rank, which records nothing)."""
    grid, _ = load_grid_into(path, results_root, smoke)
    cells = grid.by_name()
    if cell_name not in cells:
        raise AtnatError(f"{path}: no cell named {cell_name!r} (cells: {', '.join(cells)})")
    cell = cells[cell_name]
    run_dir = Path(cell.config.output_dir)
    if cell_status(run_dir) != "ok":
        run_one(cell, run_dir, students_of(grid, cell))
    return None if helper_rank() else cell_status(run_dir)


def device_is_cpu(grid) -> bool:
    return bool(grid.cells) and inference_device(grid.cells[0].config.train.accelerator) == "cpu"


def timing_phase(grid, out: Path) -> None:
    """Time every finished cell's strategies side by side (timing.py), into out/timing.csv."""
    from atnat.experiments.timing import time_grid

    done = [c for c in grid.cells if cell_status(Path(c.config.output_dir)) == "ok"]
    if not done:
        return
    device = inference_device(done[0].config.train.accelerator)
    time_grid(done, out, SpeedSettings(**grid.speed), device)


def students_of(grid, cell: Cell) -> list[Cell]:
    return [c for c in grid.cells if c.teacher == cell.name]


def distil_for_students(cell: Cell, students: list[Cell]) -> None:
    """A teacher that has just finished writes its students' distilled targets while it still holds
    the machine (all its threads; the students would otherwise start together and wait for one of
    them to decode with its share). A failure here is left to the students, which retry it."""
    from atnat.experiments.distill import distilled_targets
    from atnat.experiments.progress import counting_phase

    specs = {json.dumps(s.config.distill.strategy, sort_keys=True): s for s in students
             if s.config.distill is not None and s.config.distill.targets}
    if not specs or helper_rank():
        return
    run_dir = Path(cell.config.output_dir)
    src, tgt = load_task(cell.config).splits["train"]
    for student in specs.values():
        follow = counting_phase(run_dir, f"distilling training sentences for {student.name}", len(src))
        try:
            distilled_targets(run_dir, src, tgt, student.config.distill.strategy,
                              device=inference_device(cell.config.train.accelerator), on_batch=follow)
        except Exception as err:  # noqa: BLE001  (the student reports it, with its own error)
            print(f"cell {cell.name}: distillation for {student.name} failed here ({err}); the student retries",
                  file=sys.stderr)


def run_one(cell: Cell, run_dir: Path, students: list[Cell] = ()) -> None:
    """Run a cell under its lock (LockHeld if another process trains it), then write its students'
    distilled targets; its speed is measured later, by the grid's timing phase. A failure is
    recorded with its error and does not stop the grid."""
    with nullcontext() if helper_rank() else held(cell_lock(run_dir), f"cell {cell.name}"):
        if cell_status(run_dir) == "ok":  # finished by another process while this one waited
            distil_for_students(cell, list(students))
            return
        try:
            run_cell(cell.config, run_dir, speed=None)
            distil_for_students(cell, list(students))
        except KeyboardInterrupt:
            raise
        except Exception as err:  # noqa: BLE001  (any failure of a cell is recorded, the grid goes on)
            if helper_rank():  # a DDP helper rank: rank 0 records the failure
                raise
            message = str(err) if isinstance(err, AtnatError) else f"{type(err).__name__}: {err}"
            record_failure(cell, run_dir, message, traceback.format_exc())


def record_failure_unless_held(cell: Cell, message: str) -> None:
    """Record a failure found from outside the cell (its worker died, its teacher failed), unless
    another process holds the cell: then that process owns its run folder."""
    run_dir = Path(cell.config.output_dir)
    try:
        with held(cell_lock(run_dir), f"cell {cell.name}"):
            record_failure(cell, run_dir, message)
    except LockHeld as err:
        print(f"cell {cell.name} not run here: {err}", file=sys.stderr)


def record_failure(cell: Cell, run_dir: Path, message: str, trace: str = "") -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    if trace:
        write_text_atomic(run_dir / "error.log", trace)
    write_json_atomic(run_dir / "metrics.json", {"status": "failed", "error": message, "rows": []})
    where = f" (see {run_dir / 'error.log'})" if trace else ""
    print(f"cell {cell.name} failed: {message}{where}", file=sys.stderr)
