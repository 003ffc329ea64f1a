"""A grid's timing phase, wherever it runs: in `atnat run` after the local launcher's cells, or as its
own cluster job on the cells' kind of node (launchers/slurm.py TimingJob), never on a login node.

It decodes on the device the cells trained for: the GPU when their accelerator allows one (the first
GPU of `--devices`), else the CPU. What it measures is evaluation/timing.py; timing.json records the
device's model, so timings taken on another GPU model are taken again.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from atnat.core.errors import AtnatError
from atnat.experiments.config.devices import inference_device
from atnat.experiments.config.speed import SpeedSettings
from atnat.experiments.evaluation.baseline import is_baseline_cell, timing_group, timing_groups
from atnat.experiments.evaluation.columns import read_timing
from atnat.experiments.evaluation.exported import score_exported_twins
from atnat.experiments.evaluation.timing import system_keys, time_grid
from atnat.experiments.locks import held
from atnat.experiments.modelfiles import ct2
from atnat.experiments.modelfiles.loading import evaluation_checkpoint
from atnat.experiments.reporting.records import cell_status
from atnat.experiments.running.grid import load_grid_into, select_cells

TIMING_LOCK = "timing.lock"  # results/<grid>/timing.lock: one timing at a time writes timing.csv


def timing_device(grid, devices: list[str] | None = None) -> str:
    """Where the timing phase decodes: `cuda:<first of --devices>` (or cuda) when the cells' accelerator
    allows a GPU and one is visible, else cpu."""
    device = inference_device(grid.cells[0].config.train.accelerator) if grid.cells else "cpu"
    return f"cuda:{devices[0]}" if device == "cuda" and devices else device


def check_timing_peers(grid, device: str, where) -> None:
    """speed.ct2_baseline needs CTranslate2 on the timing device: refused before anything trains."""
    if SpeedSettings(**grid.speed).ct2_baseline:
        problem = ct2.device_problem(device)
        if problem:
            raise AtnatError(f"{where}: speed.ct2_baseline: {problem}; the timing phase could not time the "
                             f"CTranslate2 twin on {device} (set speed.ct2_baseline: false to time without it)")


def finished(grid) -> list:
    """The grid's finished cells the timing phase times: all but those of its `untimed:` cells."""
    return [c for c in grid.timed_cells() if cell_status(Path(c.config.output_dir)) == "ok"]


def timing_phase(grid, out: Path, device: str | None = None) -> str:
    """Time every finished cell's strategies side by side (evaluation/timing.py), into out/timing.csv.
    -> why finished cells were left without speed ("" when none was): no checkpoint left to time and no
    earlier timing, or a baseline with none (the run then fails, as its cluster timing job does)."""
    done = finished(grid)
    if not done:
        return ""
    device = device or timing_device(grid)
    with held(out / TIMING_LOCK, f"the timing of {out}"):
        table = time_grid(done, out, SpeedSettings(**grid.speed), device, grid.baseline)
        score_exported_twins(done, device, SpeedSettings(**grid.speed))  # the CTranslate2 AT's BLEU
    timed = set(table["cell"].astype(str)) if "cell" in table else set()
    untimed = sorted(c.name for c in done if c.name not in timed)
    if not untimed:
        return ""
    why = (f"no speed for {', '.join(untimed)}: finished, but with no checkpoint left to time and no earlier "
           "timing, or beside a baseline with none")
    print(f"atnat: timing phase: {why}", file=sys.stderr)
    return why


def time_finished_groups(path, *, results_root: Path, smoke: bool = False, devices: list[str] | None = None,
                         partial: bool = False, anew: bool = False, only: list[str] | None = None
                         ) -> tuple[dict[tuple[str, int], list[str]], dict[tuple[str, int], str]]:
    """`atnat time GRID`: time now every task and seed whose cells have all finished (timing_group),
    before the rest of the grid is done: a grid that trains for days gets each seed's speed while
    that seed's checkpoints exist, on a machine made quiet for it (the grid's processes paused).
    With `partial`, also the finished cells of a task and seed whose baseline cell has finished
    while others still train: on a machine that may be lost before the seed completes, each student
    is timed beside its AT baseline (and the A/A control) while both exist. Timing that group again
    later times the cells finished since beside the baseline, timed again with them; the cells timed
    before keep their rows (each ratio is still measured within one session), as does a cell whose
    checkpoints are gone by then. Groups timed before with the same weights and
    settings are kept, rows of other groups too; the runner's timing phase later keeps what this
    timed (evaluation/timing.py time_grid). With `anew`, each group chosen is timed again whole, in one
    session, even where its cells were timed before (the last timing of a grid timed cell by cell).
    With `only` (`--only` cell names or globs, as in `atnat run`), only the task-and-seed groups of the
    cells named: a group is timed as a whole (its baseline and A/A control with it), never one cell alone,
    and the other groups are neither timed nor waited for (e.g. one seed's final timing while another trains).
    Cells of the grid's `untimed:` cells are neither timed nor waited for: a group is whole without them.
    -> ({group timed or kept: its cells not finished yet (empty for a whole group)}, {group not timed:
    why}); a finished group that could not be timed (a cell with no checkpoint and no earlier timing)
    is among the second."""
    grid, out = load_grid_into(path, results_root, smoke)
    groups = timing_groups(grid.timed_cells())
    if only:
        selected = select_cells(grid.cells, only, path)
        named = {timing_group(c) for c in grid.timed_cells(selected)}
        if not named:
            raise AtnatError(f"atnat time {path}: --only {' '.join(only)} names only cells the grid never times "
                             f"(untimed: {', '.join(grid.untimed)}): {', '.join(c.name for c in selected)}")
        groups = {key: cells for key, cells in groups.items() if key in named}
    ready: dict[tuple[str, int], list[str]] = {}
    waiting: dict[tuple[str, int], str] = {}
    chosen: dict[tuple[str, int], list] = {}
    for key, cells in groups.items():
        done = [c for c in cells if cell_status(Path(c.config.output_dir)) == "ok"]
        unfinished = [c.name for c in cells if c not in done]
        bases = [c for c in done if is_baseline_cell(c, grid.baseline)]
        if not unfinished:
            ready[key], chosen[key] = [], cells
        elif partial and len(bases) < len(done) and any(
                evaluation_checkpoint(Path(c.config.output_dir)).is_file() for c in bases):
            ready[key], chosen[key] = unfinished, done  # finished cells and a baseline with weights to time them against
        else:
            baseline = [c.name for c in cells if is_baseline_cell(c, grid.baseline)]
            waiting[key] = f"not finished: {', '.join(unfinished)}" + (
                f"; only its baseline ({', '.join(baseline)}) has finished: nothing to time beside it yet"
                if partial and done and len(bases) == len(done)
                else f"; --partial times a seed's finished cells once its baseline ({', '.join(baseline) or 'none'}) "
                     "has finished, with its checkpoint" if partial else "")
    if not ready:
        raise AtnatError(f"atnat time {path}: no task and seed has {'its baseline' if partial else 'all its cells'} "
                         f"finished under {out}: nothing to time yet ("
                         + "; ".join(f"{t} seed {s}: {why}" for (t, s), why in waiting.items()) + ")")
    device = timing_device(grid, devices)
    check_timing_peers(grid, device, path)
    cells = [c for key in ready for c in chosen[key]]
    with held(out / TIMING_LOCK, f"the timing of {out}"):
        table = time_grid(cells, out, SpeedSettings(**grid.speed), device, grid.baseline, keep_others=True, anew=anew)
        score_exported_twins(cells, device, SpeedSettings(**grid.speed))
    timed = set(table["cell"].astype(str))
    for key in list(ready):  # a cell with no checkpoint and no earlier timing has no speed: not a success
        untimed = [c.name for c in chosen[key] if c.name not in timed]
        if untimed:
            del ready[key]
            waiting[key] = f"no checkpoint and no earlier timing: {', '.join(untimed)}"
    return ready, waiting


def timing_is_current(grid, out: Path) -> bool:
    """Whether out/timing.csv holds every finished cell's systems with their present weights, timed
    with these speed settings: time_grid's own test, less the device, which only the node that times
    knows (run there, the timing job re-times on another GPU model). Nothing finished: True."""
    done = finished(grid)
    if not done:
        return True
    try:
        settings = json.loads((out / "timing.json").read_text())
        table = read_timing(out / "timing.csv")
    except (OSError, ValueError):
        return False
    speed = SpeedSettings(**grid.speed)
    if settings.get("speed") != json.loads(json.dumps(speed.record())) or settings.get("baseline") != grid.baseline:
        return False
    timeable = [c for c in done if evaluation_checkpoint(Path(c.config.output_dir)).is_file()]
    fresh = table[table.cell.isin([c.name for c in timeable])]
    return sorted(zip(fresh.cell, fresh.strategy, fresh.fingerprint.astype(str))) == system_keys(timeable, speed,
                                                                                               grid.baseline)


def timing_description(out: Path, job_id: str | None = None, default_threads: int | None = None) -> str:
    """How the timing phase ran, for environment.json: its device and the device's model, the CPU
    threads on a CPU (`default_threads`: torch's count where the phase ran, when speed.threads is
    not set), and the cluster job that ran it."""
    try:
        settings = json.loads((out / "timing.json").read_text())
    except (OSError, ValueError):
        return "no timing phase ran"
    text = (f"timing phase after training: each system side by side with its task and seed's AT baseline in one "
            f"process, on "
            f"{settings.get('device', '?')} ({settings.get('device_name', 'model not recorded')})")
    if str(settings.get("device", "")).startswith("cpu"):
        threads = (settings.get("speed") or {}).get("threads") or default_threads
        text += f", {threads} CPU thread{'' if threads == 1 else 's'}" if threads else ", torch's default CPU threads"
    text += f", engine {(settings.get('speed') or {}).get('engine', 'eager')}"
    return text + (f", in cluster job {job_id}" if job_id else "")
