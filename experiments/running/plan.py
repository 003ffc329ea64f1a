"""What a run of a grid would do, as `atnat run GRID --dry-run` shows it: the cells it runs, in order (teachers
first), and those whose run folder records other settings than the grid gives now (stale.py). It reads the grid
file and the run folders' records only, so it starts without the training code.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from atnat.core.errors import AtnatError
from atnat.experiments.running.grid import Cell, Grid, describe, load_grid_into, run_order, select_cells
from atnat.experiments.running.stale import Stale, describe_stale, find_stale


@dataclass
class Plan:
    grid: Grid
    out: Path  # the results folder
    cells: list[Cell]  # those this run runs (`--only`), in order
    stale: list[Stale]  # the stale ones among them
    outside: dict[str, str]  # stale cells outside `--only`: name -> why (not run; the report names them)


def plan(path, results_root: Path, only: list[str] | None, smoke: bool) -> Plan:
    grid, out = load_grid_into(path, results_root, smoke)
    cells = select_cells(run_order(grid), only, path)
    chosen = {c.name for c in cells}
    found = find_stale(grid, grid.cells)  # over the whole grid: a chosen student's teacher may be outside `only`
    return Plan(grid, out, cells, [s for s in found if s.cell in chosen],
                {s.cell: s.reason for s in found if s.cell not in chosen})


def refuse_missing_inputs(planned: Plan, path) -> None:
    """A cell's `train.init_from` that names no file or folder would fail that cell when it starts, maybe
    hours in (after its teacher): refused before any cell runs, and by `--dry-run`. A path inside this
    grid's results folder is left to the cell that writes it."""
    out = planned.out.resolve()
    for cell in planned.cells:
        source = cell.config.train.init_from
        if source and source != "teacher" and not Path(source).exists() and not Path(source).resolve().is_relative_to(out):
            raise AtnatError(f"{path}: cell {cell.name}: train.init_from {source}: no such file or folder here "
                             "(give a checkpoint, a run folder or an export, or `teacher`)")


def refuse_unequal_parallel_files(planned: Plan, path) -> None:
    """Parallel files of unequal line counts (a side cut short, a line lost) would fail every cell of their task
    when it reads them, maybe hours in (after a teacher): refused before any cell runs, and by `--dry-run`, each
    pair named with both counts (ParallelTask.unequal_line_counts). Their text itself (UTF-8, lengths) is read
    when it is encoded: `atnat data prepare GRID` does that for every cell before a run."""
    import json

    from atnat.experiments.config.run import task_of
    from atnat.experiments.data.tasks import ParallelTask

    seen, problems = set(), []
    for cell in planned.cells:
        key = json.dumps(cell.config.task, sort_keys=True, default=str)
        if key in seen:  # cells of one task (seeds, decoders) share its files
            continue
        seen.add(key)
        task = task_of(cell.config)
        if isinstance(task, ParallelTask):  # other tasks have no parallel files
            problems += [f"cell {cell.name}: {problem}" for problem in task.unequal_line_counts()]
    if problems:
        raise AtnatError(f"{path}: " + "; ".join(problems) + " (nothing has run)")


def refuse_files_in_the_way(planned: Plan, path) -> None:
    """A file where the results folder, its runs/ or a cell's run folder goes: every cell there would fail
    with the system's "File exists" (or train nothing): refused, each named, before anything runs, and by
    `--dry-run`."""
    places = [(planned.out, "the results folder"), (planned.out / "runs", "the run folders' folder")]
    places += [(Path(c.config.output_dir), f"the run folder of cell {c.name}") for c in planned.cells]
    blocked = [f"{where} is a file where {what} goes" for where, what in places if where.exists() and not where.is_dir()]
    if blocked:
        raise AtnatError(f"{path}: {'; '.join(blocked)}: move or remove it (nothing has run)")


def refuse_sources_out_of_reach(planned: Plan, path) -> None:
    """A cell whose decoder reads fewer source tokens than its data holds (a DA-Transformer's or CTC's graph grows
    with the source and has to fit the positional table) would fail when it starts, maybe hours in (after its
    teacher; or evaluation, for eval.extra_tests): refused before any cell runs, and by `--dry-run`, naming the cell
    and the remedies. Only cells whose reach is below train.max_len read their data here (an architecture on the
    meta device, no weights)."""
    import json

    import torch  # lazy: start-up

    from atnat.experiments.config.run import extra_test_split, load_task, named
    from atnat.experiments.data.batching import encode_split
    from atnat.experiments.data.prepared import prepared_split
    from atnat.experiments.training.train import PreparedData, check_lengths_fit
    from atnat.models.seq2seq import Seq2SeqModule

    data: dict[str, PreparedData] = {}
    problems = []
    for cell in planned.cells:
        cfg = cell.config
        dec_name, dec_opts = named(cfg.decoder, "decoder")
        try:
            with torch.device("meta"):
                module = Seq2SeqModule(vocab_size=16, decoder=dec_name, model=cfg.model, decoder_options=dec_opts,
                                       loss=cfg.loss, optim=cfg.optim)
            reach = module.decoder.max_source_length
        except Exception:  # noqa: BLE001  (a plugin decoder that cannot be built without weights: it checks itself)
            continue
        if reach >= cfg.train.max_len:
            continue  # no source it keeps can be longer than it reads
        key = json.dumps([cfg.task, cfg.train.max_len, list(cfg.eval.extra_tests)], sort_keys=True, default=str)
        if key not in data:  # cells of one task share its data (seeds, decoders)
            task = load_task(cfg)
            encoded = {split: prepared_split(task, split, max_len=cfg.train.max_len, drop_long=split == "train")
                       for split in task.splits}
            for name in cfg.eval.extra_tests:  # decoded after training: a source past the reach would fail it then
                src, tgt = extra_test_split(cfg, name)
                encoded[name] = encode_split(task.tokenizer, src, tgt, name=name, max_len=cfg.train.max_len)
            data[key] = PreparedData(task, encoded)
        try:
            check_lengths_fit(module, data[key], cfg.train.max_len, sides=("sources",))
        except AtnatError as err:
            problems.append(f"cell {cell.name}: {err}")
    if problems:
        raise AtnatError(f"{path}: " + "; ".join(problems) + " (nothing has run)")


def gpu_notes(planned: Plan) -> list[str]:
    """The cells that ask for a GPU where none is usable (a dry run lists them; `atnat run` with the local
    launcher refuses them before anything runs; a cluster job's node checks its own)."""
    wanted = [c for c in planned.cells if str(c.config.train.accelerator).lower() in ("gpu", "cuda")]
    if not wanted:
        return []
    from atnat.experiments.config.devices import gpu_problem  # here: it imports torch

    problem = gpu_problem()
    return [f"cell {c.name}: train.accelerator is {c.config.train.accelerator}, but no GPU is usable here "
            f"({problem}): `atnat run` refuses it here; a cluster launcher runs it on a GPU node" for c in wanted] \
        if problem else []


def show_plan(planned: Plan) -> None:
    """The plan on stdout: a row per cell, then the stale ones."""
    import pandas as pd  # lazy: start-up

    print(pd.DataFrame([describe(c) | {"strategies": len(c.config.eval.strategies)} for c in planned.cells])
          .to_string(index=False))
    if planned.stale:
        print(f"stale (run with other settings than these):\n{describe_stale(planned.stale)}")
    if planned.outside:
        print("stale, outside --only (not run; the report names them): " + ", ".join(planned.outside))
