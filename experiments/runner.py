"""Run cells and grids: distil -> train (resumable) -> evaluate -> tabulate -> report.

A finished cell has `metrics.json` with status "ok" and is skipped when the grid runs again; an
interrupted one resumes from `checkpoints/last.ckpt`; a failing one is marked "failed" with its
error and the grid goes on.
"""
from __future__ import annotations

import json
import shlex
import sys
import time
import traceback
from pathlib import Path

import pandas as pd
import torch

from atnat.models.errors import AtnatError

from atnat.experiments.config import RunConfig
from atnat.experiments.evaluate import EvalResult, SpeedSettings, evaluate, write_json_atomic
from atnat.experiments.grid import Cell, load_grid, run_order
from atnat.experiments.table import environment, tabulate
from atnat.experiments.train import (
    helper_rank, inference_device, load_module, load_task, prepare_data, train,
)


def run_cell(cfg: RunConfig, run_dir: Path, speed: SpeedSettings = SpeedSettings()) -> EvalResult | None:
    """Train (resuming if possible) and evaluate one run; writes everything into run_dir.
    Returns None in the helper ranks of a DDP run: rank 0 alone evaluates and writes results."""
    run_dir.mkdir(parents=True, exist_ok=True)
    task = load_task(cfg)
    device = inference_device(cfg.train.accelerator)  # decoding runs where training ran
    targets, teacher, distill_meta = None, None, None
    if cfg.distill is not None:
        from atnat.experiments.distill import distilled_targets

        src, tgt = task.splits["train"]
        targets, distill_meta = distilled_targets(cfg.distill.teacher, src, tgt, cfg.distill.strategy,
                                                  device=device)
        write_json_atomic(run_dir / "distill.json", distill_meta)
    if any(_name(s) == "npd" for s in cfg.eval.strategies):
        if cfg.distill is None:
            raise AtnatError(f"run {cfg.name}: strategy npd needs an AT teacher; set distill.teacher")
        teacher = load_module(cfg.distill.teacher, map_location=device)[0]
    started = time.time()
    best = train(cfg, run_dir, prepare_data(cfg, task, targets))
    if best is None:
        return None
    train_time = time.time() - started
    module, _ = load_module(best, map_location=device)
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    result = evaluate(module, task, cfg, run_dir, teacher=teacher, speed=speed)
    steps = int(torch.load(best, map_location="cpu", weights_only=True).get("global_step", 0))
    devices = json.loads((run_dir / "train.json").read_text())["world_size"]
    for row in result.rows:
        row.update(train_steps=steps, train_time_s=train_time, train_devices=devices,
                   distill_bleu=distill_meta["bleu_vs_references"] if distill_meta else float("nan"))
    save_cell_outputs(run_dir, result)
    return result


def _name(spec) -> str:
    return spec if isinstance(spec, str) else spec.get("name", "")


def save_cell_outputs(run_dir: Path, result: EvalResult) -> None:
    (run_dir / "curves").mkdir(exist_ok=True)
    for name, frame in result.curves.items():
        frame.to_csv(run_dir / "curves" / f"{name}.csv", index=False)
    if result.samples is not None:
        result.samples.to_csv(run_dir / "samples.csv", index=False)
    write_json_atomic(run_dir / "metrics.json", {"status": "ok", "rows": result.rows})


def cell_status(run_dir: Path) -> str | None:
    path = run_dir / "metrics.json"
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text()).get("status")
    except json.JSONDecodeError:
        return None


def describe(cell: Cell) -> dict:
    cfg = cell.config
    loss, dec_opts = cfg.loss or {}, {k: v for k, v in cfg.decoder.items() if k != "name"} \
        if isinstance(cfg.decoder, dict) else {}
    return {"cell": cell.name, "variant": cell.variant, "task": cell.labels.get("task", cfg.task_name),
            "decoder": cfg.decoder_name, "seed": cell.seed, "distilled": cfg.distill is not None,
            "guided_attention": float(loss.get("guided_attention_weight", 0) or 0) > 0,
            "options": ", ".join(f"{k}={v}" for k, v in dec_opts.items()), "teacher": cell.teacher or ""}


def load_grid_into(path, results_root: Path, smoke: bool):
    """The validated grid whose cells write under `results_root/<grid name>[-smoke]`, and that folder."""
    name = load_grid(path, smoke=smoke).name  # validate everything before anything runs
    out = results_root / (name + ("-smoke" if smoke else ""))
    return load_grid(path, smoke=smoke, results_dir=out), out


def run_grid(path, *, results_root: Path = Path("results"), dry_run: bool = False,
             only: list[str] | None = None, smoke: bool = False, workers: int | None = None,
             devices: list[str] | None = None) -> Path:
    """Run every cell of a grid (teachers first), then write results.csv and the report.

    With `workers` > 1 or `devices`, cells run in parallel worker processes, one per device (see
    scheduler.py); a cell that trains on several devices (DDP) always runs in its own process."""
    grid, out = load_grid_into(path, results_root, smoke)
    cells = [c for c in run_order(grid) if not only or any(o in c.name for o in only)]
    if dry_run:
        print(pd.DataFrame([describe(c) | {"strategies": len(c.config.eval.strategies)} for c in cells])
              .to_string(index=False))
        return out
    from atnat.experiments.scheduler import make_lanes, shared

    lanes = make_lanes(workers, devices)
    parallel = len(lanes) > 1 or any(c.config.train.devices not in (1, "1") for c in cells)  # DDP: own process
    if shared(lanes):
        print(f"note: {len(lanes)} cells run at once on {'the CPU' if lanes[0].gpu is None else 'shared GPUs'}; "
              "their speed columns are measured under that load (the report says so)", file=sys.stderr)
    started = time.time()
    from rich.progress import Progress

    with Progress(transient=False) as progress:
        bar = progress.add_task(f"grid {grid.name}", total=len(cells))
        if parallel:
            _run_in_workers(grid, cells, lanes, progress, bar, results_root=results_root, smoke=smoke)
        else:
            speed = SpeedSettings(**grid.speed)
            for cell in cells:
                run_dir = Path(cell.config.output_dir)
                progress.update(bar, description=f"{grid.name}: {cell.name}")
                if cell_status(run_dir) != "ok":
                    run_one(cell, run_dir, speed)
                progress.advance(bar)
    table = tabulate(grid, out, describe)
    command = "atnat " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else f"atnat run {path}"
    env = environment(grid, time.time() - started, command)
    env["parallel_cells"] = len(lanes) if parallel else 1
    env["lanes"] = ", ".join(lane.gpu or "cpu" for lane in lanes)
    env["shared_device_timings"] = parallel and shared(lanes)
    write_json_atomic(out / "environment.json", env)
    from atnat.experiments.report import write_report

    write_report(out)
    print(f"results: {out / 'results.csv'} ({len(table)} rows); report: {out / 'report.md'}")
    return out


def _run_in_workers(grid, cells, lanes, progress, bar, *, results_root: Path, smoke: bool) -> None:
    from atnat.experiments.scheduler import run_parallel

    def status(cell: Cell) -> str | None:
        return cell_status(Path(cell.config.output_dir))

    def finished(cell: Cell, state: str, seconds: float) -> None:
        progress.console.print(f"{cell.name}: {state} ({seconds:.0f} s)")
        progress.advance(bar)

    todo = [c for c in cells if status(c) != "ok"]
    progress.advance(bar, len(cells) - len(todo))
    run_parallel(grid.path, todo, lanes, results_root=results_root, smoke=smoke, status=status,
                 mark_failed=lambda cell, message: record_failure(cell, Path(cell.config.output_dir), message),
                 on_finish=finished)


def run_named_cell(path, cell_name: str, *, results_root: Path = Path("results"), smoke: bool = False) -> None:
    """Run one cell of a grid (what `atnat run --workers` launches per process); skips it when done."""
    grid, _ = load_grid_into(path, results_root, smoke)
    cells = grid.by_name()
    if cell_name not in cells:
        raise AtnatError(f"{path}: no cell named {cell_name!r} (cells: {', '.join(cells)})")
    cell = cells[cell_name]
    run_dir = Path(cell.config.output_dir)
    if cell_status(run_dir) != "ok":
        run_one(cell, run_dir, SpeedSettings(**grid.speed))


def run_one(cell: Cell, run_dir: Path, speed: SpeedSettings) -> None:
    """Run a cell; a failure is recorded with its error and does not stop the grid."""
    try:
        run_cell(cell.config, run_dir, speed)
    except KeyboardInterrupt:
        raise
    except Exception as err:  # noqa: BLE001  (any failure of a cell is recorded, the grid goes on)
        if helper_rank():  # a DDP helper rank: rank 0 records the failure
            raise
        message = str(err) if isinstance(err, AtnatError) else f"{type(err).__name__}: {err}"
        record_failure(cell, run_dir, message, traceback.format_exc())


def record_failure(cell: Cell, run_dir: Path, message: str, trace: str = "") -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    if trace:
        (run_dir / "error.log").write_text(trace)
    write_json_atomic(run_dir / "metrics.json", {"status": "failed", "error": message, "rows": []})
    where = f" (see {run_dir / 'error.log'})" if trace else ""
    print(f"cell {cell.name} failed: {message}{where}", file=sys.stderr)
