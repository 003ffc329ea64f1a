"""Cells whose recorded settings differ from the grid's now: found before anything runs, and
neither silently kept nor silently discarded.

A cell's run folder records every setting it was trained and evaluated with (config.json, written
by training/train.py). When the grid file has changed since, the cell is stale:
- its training settings changed (or its teacher's did): its weights are not what the grid asks for;
- only its eval settings changed (or a task's test-only option, or a distill.strategy a targets: false
  student does not use): its weights stand, its scores do not.
`atnat run` lists the stale cells and stops (exit 2) unless told what to do: `--stale rerun` trains
the first kind again (the old folder is kept as `runs/<cell>.stale-<time>`) and evaluates the second
again from its checkpoint; `--stale keep` keeps their numbers, and the report names them.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from atnat.core.errors import AtnatError
from atnat.experiments.config.run import build_strategy
from atnat.experiments.config.settings import SettingsChange, settings_change
from atnat.experiments.locks import cell_lock, describe_holder, holder_alive, holder_file, is_held
from atnat.experiments.modelfiles.export import is_export_dir
from atnat.experiments.modelfiles.loading import checkpoint_stamps, evaluation_checkpoint
from atnat.experiments.reporting.records import read_metrics, teacher_stamps
from atnat.experiments.running.launchers.jobs import is_active, job_state, read_job

STALE_CHOICES = ("rerun", "keep")


class StaleCells(AtnatError):
    """Cells were run with other settings and the user has not said what to do with them."""


@dataclass
class Stale:
    cell: str
    change: SettingsChange
    retrain: bool  # its weights are stale (own training settings, or a stale teacher's)
    reason: str
    teacher_retrained: str = ""  # stale only as the student of this teacher, which is trained again


def find_stale(grid, cells) -> list[Stale]:
    """The cells among `cells` (of `grid`) whose run folder recorded other settings than asked now;
    a student of a teacher that is retrained is retrained too (its targets and weights came from it)."""
    found: dict[str, Stale] = {}
    for cell in cells:
        run_dir = Path(cell.config.output_dir)
        if not (run_dir / "config.json").is_file():
            continue
        change = settings_change(run_dir, cell.config)
        if change:
            found[cell.name] = Stale(cell.name, change, bool(change.training), change.describe())
        elif (renamed := renamed_systems(run_dir, cell)):
            found[cell.name] = Stale(cell.name, change, False, f"its systems are named {renamed} now (this atnat's "
                                                               "labels): its results are filed under the old names")
    by_name = grid.by_name()
    weights: dict[Path, set[str]] = {}  # a teacher's stamps, one checksum each
    for cell in cells:  # a finished student whose teacher has other weights now than those it learnt from
        teacher = by_name.get(cell.teacher or "")
        if cell.name in found or teacher is None or cell.teacher in found:
            continue
        if teacher_changed(Path(cell.config.output_dir), Path(teacher.config.output_dir), weights):
            found[cell.name] = Stale(cell.name, SettingsChange([], []), True,
                                     f"its teacher {teacher.name} has other weights now than those it learnt from")
    changed = True
    while changed:  # students of retrained teachers, transitively
        changed = False
        for cell in cells:
            teacher = found.get(cell.teacher or "")
            if teacher is not None and teacher.retrain and not (found.get(cell.name) and found[cell.name].retrain):
                if (Path(by_name[cell.name].config.output_dir) / "config.json").is_file():
                    found[cell.name] = Stale(cell.name, SettingsChange([], []), True,
                                             f"its teacher {teacher.cell} is trained again", teacher.cell)
                    changed = True
    return [found[c.name] for c in cells if c.name in found]


def teacher_changed(student_dir: Path, teacher: Path, memo: dict[Path, set[str]] | None = None) -> bool:
    """Whether the student of `student_dir` learnt from other weights than its teacher (a run folder, checkpoint
    file or export) holds now; False where either side has nothing to compare (no record, no weights).
    `memo`: the teachers' stamps found so far (each checksum is read once)."""
    learnt = teacher_stamps(student_dir)
    weights = teacher if teacher.is_file() else evaluation_checkpoint(teacher)
    if not learnt or not (is_export_dir(teacher) or weights.is_file()):
        return False
    memo = {} if memo is None else memo
    if teacher not in memo:
        memo[teacher] = checkpoint_stamps(teacher)
    return not learnt & memo[teacher]


def renamed_systems(run_dir: Path, cell) -> str:
    """When a finished cell's results record names its systems otherwise than this atnat labels its
    strategies (a label scheme changed): "old -> new, ..."; else ""."""
    try:
        meta = read_metrics(run_dir)
    except AtnatError:
        return ""
    if meta is None or meta["status"] != "ok":
        return ""
    recorded = [str(r.get("strategy")) for r in meta["rows"]]
    now = [build_strategy(spec)[0] for spec in cell.config.eval.strategies]
    return "" if recorded == now else ", ".join(f"{a} -> {b}" for a, b in zip(recorded, now) if a != b) or \
        f"{recorded} -> {now}"


def describe_stale(stale: list[Stale]) -> str:
    lines = [f"  {s.cell} ({'train again' if s.retrain else 'evaluate again'}): {s.reason}" for s in stale]
    return "\n".join(lines)


def handle_stale(grid, cells, policy: str | None, found: list[Stale] | None = None) -> list[Stale]:
    """Apply `policy` to the stale cells (see the module docstring; `found`: those among `cells`, found already);
    StaleCells when there are some and no policy was given. Returns the stale cells (for environment.json and
    the report)."""
    stale = find_stale(grid, cells) if found is None else found
    if not stale:
        return []
    if policy is None:
        raise StaleCells(f"{grid.path}: {len(stale)} cell(s) were run with other settings than the grid gives now:\n"
                         f"{describe_stale(stale)}\nNothing was run. Say what to do with them: --stale rerun (train "
                         "or evaluate them again; old run folders are kept as runs/<cell>.stale-<time>) or "
                         "--stale keep (keep their numbers; the report names them)")
    if policy not in STALE_CHOICES:
        raise AtnatError(f"--stale {policy!r}: expected one of {', '.join(STALE_CHOICES)}")
    if policy == "rerun":
        chosen = {c.name for c in cells}
        for s in stale:  # trained again for its teacher's sake, but that teacher is not trained again in this run
            if s.teacher_retrained and s.teacher_retrained not in chosen:
                raise AtnatError(f"--stale rerun: {s.cell} is stale as a student of {s.teacher_retrained}, which is "
                                 f"stale too but not in this run: trained again now, {s.cell} would learn from the old "
                                 f"teacher once more. Nothing was moved: run its teacher too (--only "
                                 f"'{s.teacher_retrained}' --only '{s.cell}'), or without --only")
        by_name = grid.by_name()
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for s in stale:  # all checked before any is moved: a cell in use elsewhere would train on in the old folder
            run_dir = Path(by_name[s.cell].config.output_dir)
            lock = cell_lock(run_dir)
            job = read_job(run_dir)
            ended = job is not None and not is_active(job_state(job))  # a cluster job that ended holds nothing
            if is_held(lock) or (holder_alive(lock) and not ended):
                raise AtnatError(f"--stale rerun: cell {s.cell} is in use by {describe_holder(lock)}; nothing was "
                                 f"moved: wait for it to end or stop it (lock file {lock}; a holder on another machine "
                                 f"that is gone, killed with no chance to clean up, leaves {holder_file(lock)}: remove "
                                 "it)")
        for s in stale:
            run_dir = Path(by_name[s.cell].config.output_dir)
            if s.retrain:
                os.replace(run_dir, run_dir.with_name(f"{run_dir.name}.stale-{stamp}"))
            elif (run_dir / "metrics.json").is_file():
                os.replace(run_dir / "metrics.json", run_dir / f"metrics.stale-{stamp}.json")
    return stale


def note_if_stale(path, cell_name: str, *, results_root: Path, smoke: bool = False) -> None:
    """`atnat cell` on a cell that finished with other settings than the grid file gives now: said on stderr
    (the cell is not run again; `atnat run --stale rerun` does that)."""
    from atnat.experiments.reporting.records import cell_status
    from atnat.experiments.running.grid import load_grid_into

    grid, _ = load_grid_into(path, results_root, smoke)
    cell = grid.by_name().get(cell_name)
    if cell is None or cell_status(Path(cell.config.output_dir)) != "ok":
        return
    found = [s for s in find_stale(grid, grid.cells) if s.cell == cell_name]
    if found:
        print(f"atnat: cell {cell_name} finished with other settings than {path} gives now; not run again here "
              f"(`atnat run --stale rerun` trains or evaluates it again):\n{describe_stale(found)}", file=sys.stderr)
