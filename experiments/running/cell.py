"""One cell's life: distil (a student) -> train (resumable) -> evaluate -> its results record.

A finished cell has `metrics.json` with status "ok" and is skipped when the grid runs again; an
interrupted one resumes from `checkpoints/last.ckpt`; one whose training finished is only evaluated
again; a failing one is marked "failed" with its error and the grid goes on. A cell is locked by the
process that trains it (locks.py): a second process on one cell is refused. `atnat cell GRID CELL`
(what every launcher runs) and `atnat train` both come here.
"""
from __future__ import annotations

import json
import sys
import time
import traceback
from contextlib import nullcontext
from pathlib import Path

import torch

from atnat.core.errors import AtnatError
from atnat.experiments.config.devices import helper_rank, inference_device, require_gpu
from atnat.experiments.config.run import RunConfig, build_strategy, load_task
from atnat.experiments.config.settings import resolved
from atnat.experiments.config.speed import SpeedSettings
from atnat.experiments.evaluation.assemble import check_teacher
from atnat.experiments.evaluation.baseline import plain_at_config
from atnat.experiments.evaluation.evaluate import EvalResult, evaluate, validation_bleu
from atnat.experiments.evaluation.timing import COLUMNS, System, time_systems
from atnat.experiments.files import write_csv, write_json_atomic, write_text_atomic
from atnat.experiments.locks import LockHeld, cell_lock, held
from atnat.experiments.modelfiles.loading import checkpoint_stamp, load_module
from atnat.experiments.reporting.records import cell_status, whole_train_time, write_record
from atnat.experiments.running.grid import Cell, load_grid_into
from atnat.experiments.running.stale import teacher_changed
from atnat.experiments.training.distill import distilled_targets
from atnat.experiments.training.progress import counting_phase, record_end, write_progress
from atnat.experiments.training.resume import resume_point
from atnat.experiments.training.train import finished_training, prepare_data, train


def run_cell(cfg: RunConfig, run_dir: Path, speed: SpeedSettings | None = SpeedSettings(), *,
             allow_changes: bool = False) -> EvalResult | None:
    """Train (resuming if possible) and evaluate one run; writes everything into run_dir. A run
    whose training finished under these settings is only evaluated again. With `speed`, the run's
    own strategies are then timed side by side (a grid leaves this to its timing phase:
    speed=None). Returns None in the helper ranks of a DDP run: rank 0 alone evaluates and writes
    results. `allow_changes`: see train(). Its progress.json ends with `done` or with what stopped it."""
    try:
        result = train_and_evaluate(cfg, run_dir, speed, allow_changes=allow_changes)
    except BaseException as err:
        if not helper_rank():
            record_end(run_dir, err)
        raise
    if not helper_rank():
        record_end(run_dir)
    return result


def train_and_evaluate(cfg: RunConfig, run_dir: Path, speed: SpeedSettings | None, *,
                       allow_changes: bool) -> EvalResult | None:
    require_gpu(cfg.train.accelerator, f"run {cfg.name}")  # before distillation and training
    run_dir.mkdir(parents=True, exist_ok=True)
    task = load_task(cfg)
    device = inference_device(cfg.train.accelerator)  # decoding runs where training ran
    targets, teacher, distill_meta = None, None, None
    done = None if helper_rank() else finished_training(run_dir, cfg)  # only evaluated again
    refuse_another_teacher(cfg, run_dir)
    refuse_another_tokenizer(cfg, run_dir, task, done)
    if done is not None and (run_dir / "distill.json").is_file():
        distill_meta = json.loads((run_dir / "distill.json").read_text())
    beside = [strategy for _, strategy in map(build_strategy, cfg.eval.strategies) if strategy.uses_teacher]
    if beside:  # strategies that run the teacher beside the model: it is checked before anything is trained
        if cfg.distill is None:
            raise AtnatError(f"run {cfg.name}: a strategy that runs an AT teacher (npd, speculative) needs "
                             "distill.teacher")
        teacher, teacher_tokenizer = load_module(cfg.distill.teacher, map_location=device)
        check_teacher(teacher, teacher_tokenizer, task.tokenizer, f"run {cfg.name}: distill.teacher {cfg.distill.teacher}",
                      verifies=any(not strategy.needs_scorer for strategy in beside))
    if cfg.distill is not None and cfg.distill.targets and done is None:
        src, tgt = task.splits["train"]
        follow = counting_phase(run_dir, "distilling training sentences with the teacher", len(src))
        targets, distill_meta = distilled_targets(cfg.distill.teacher, src, tgt, cfg.distill.strategy,
                                                  device=device, on_batch=follow)
        write_json_atomic(run_dir / "distill.json", distill_meta)

    started = time.time()
    best = done or train(cfg, run_dir, prepare_data(cfg, task, targets), allow_changes=allow_changes)
    if best is None:
        return None
    trained = json.loads((run_dir / "train.json").read_text())
    train_time = whole_train_time(run_dir, trained, time.time() - started)
    module, _ = load_module(best, map_location=device)
    if done is not None and not helper_rank():  # evaluated again: not "done" while it decodes
        write_progress(run_dir, phase="evaluating")
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    result = evaluate(module, task, cfg, run_dir, teacher=teacher)
    evaluated_val = validation_bleu(module, task, cfg)  # of the weights judged (averaged ones too)
    for row in result.rows:  # steps trained, not the best checkpoint's
        row.update(train_steps=trained["global_step"], train_time_s=train_time, train_devices=trained["world_size"],
                   distill_bleu=distill_meta["bleu_vs_references"] if distill_meta else float("nan"),
                   evaluated_checkpoint=trained.get("evaluated_checkpoint", ""), val_bleu_evaluated=evaluated_val,
                   averaged_steps=("final " if trained.get("averaged_final_alone") else "")
                   + "+".join(map(str, trained.get("averaged_steps") or [])))
    if speed is not None:
        time_own_strategies(cfg, run_dir, module, teacher, speed, result)
    save_cell_outputs(run_dir, result)
    if done is not None:  # evaluated again under new eval settings (training's are unchanged): they are the run's now
        write_json_atomic(run_dir / "config.json", resolved(cfg))
    return result


def refuse_another_teacher(cfg: RunConfig, run_dir: Path) -> None:
    """A student that has trained from its teacher (its checkpoints) goes on only with those teacher weights:
    a teacher trained again since would give the rest of the run other targets than its first steps had (or
    judge a finished one with another verifier), and distill.json would forget the first."""
    if cfg.distill is None or not any((run_dir / "checkpoints").glob("*.ckpt")):
        return
    teacher = Path(cfg.distill.teacher)
    if teacher_changed(run_dir, teacher):
        raise AtnatError(f"run {cfg.name} ({run_dir}): its teacher {teacher} has other weights now than those it "
                         f"learnt from (distill.json, train.json): going on would mix two teachers in one run. Train "
                         f"it again from the start: `atnat run GRID --stale rerun`, or move {run_dir} aside")


def refuse_another_tokenizer(cfg: RunConfig, run_dir: Path, task, done: Path | None) -> None:
    """A run goes on (resumed, or evaluated again) only with the tokenizer its checkpoint holds: the task's
    training files changed since give another tokenizer, under which the test sentences would be encoded into
    other ids than the weights learnt (a score of nonsense), or training would go on over other tokens. Its
    settings alone cannot tell: they name the files, not what is in them."""
    if done is None:  # the one training would resume from (training names a damaged one as it sets it aside)
        done = resume_point(run_dir / "checkpoints", set_aside=False, quiet=True)
    if done is None:
        return
    own = load_module(done)[1]
    if own.to_state() != task.tokenizer.to_state():
        raise AtnatError(f"run {cfg.name} ({run_dir}): its checkpoint {done.name} holds another tokenizer than the "
                         f"task's files give now ({own.vocab_size} and {task.tokenizer.vocab_size} pieces): the training "
                         "files changed since it trained. Restore the files it trained on, or move the run folder aside "
                         "to train it anew")


def time_own_strategies(cfg: RunConfig, run_dir: Path, module, teacher, speed: SpeedSettings,
                        result: EvalResult) -> None:
    """A single run (`atnat train`): its strategies timed side by side; speed-ups against its own
    greedy when it is a plain AT run."""
    tokenizer = load_task(cfg).tokenizer
    sources = [tokenizer.encode(line)[: cfg.train.max_len] for line in load_task(cfg).splits[cfg.eval.split][0]]
    systems = [System(cfg.name, label, module, strategy, sources, teacher, checkpoint_stamp(run_dir))
               for label, strategy in (build_strategy(spec) for spec in cfg.eval.strategies)]
    labels = [label for label, _ in (build_strategy(spec) for spec in cfg.eval.strategies)]
    baselines = {cfg.name: (cfg.name, "greedy")} if plain_at_config(cfg) and "greedy" in labels else {}
    timing = time_systems(systems, speed, baselines).set_index("strategy")
    for row in result.rows:
        row.update({c: timing.loc[row["strategy"], c] for c in COLUMNS if c not in ("cell", "strategy", "fingerprint")})


def save_cell_outputs(run_dir: Path, result: EvalResult) -> None:
    (run_dir / "curves").mkdir(exist_ok=True)
    for name, frame in result.curves.items():
        write_csv(frame, run_dir / "curves" / f"{name}.csv")
    if result.samples is not None:
        write_csv(result.samples, run_dir / "samples.csv")
    write_record(run_dir, "ok", result.rows, extra_tests=result.extra_tests)


def students_of(grid, cell: Cell) -> list[Cell]:
    return [c for c in grid.cells if c.teacher == cell.name]


def distil_for_students(cell: Cell, students: list[Cell]) -> None:
    """A teacher that has just finished writes its students' distilled targets while it still holds
    the machine (all its threads; the students would otherwise start together and wait for one of
    them to decode with its share); students whose training finished under their settings need none
    (a teacher evaluated again). A failure here is left to the students, which retry it."""
    specs = {json.dumps(s.config.distill.strategy, sort_keys=True): s for s in students
             if s.config.distill is not None and s.config.distill.targets
             and finished_training(Path(s.config.output_dir), s.config) is None}  # a trained student needs none
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
            record_end(run_dir)
            return
        try:
            require_gpu(cell.config.train.accelerator, f"run {cell.name}")  # this machine's trouble first
            unfinished_teacher(cell)
            run_cell(cell.config, run_dir, speed=None)
            distil_for_students(cell, list(students))
            record_end(run_dir)  # the teacher's last phase was its students' distillation
        except KeyboardInterrupt:
            raise
        except Exception as err:  # noqa: BLE001  (any failure of a cell is recorded, the grid goes on)
            if helper_rank():  # a DDP helper rank: rank 0 records the failure
                raise
            message = str(err) if isinstance(err, AtnatError) else f"{type(err).__name__}: {err}"
            record_failure(cell, run_dir, message, traceback.format_exc())


def unfinished_teacher(cell: Cell) -> None:
    """AtnatError when the cell's teacher cell has not finished: its best checkpoint so far (a run stopped
    half way) would be distilled from, and the student reported as if taught by the finished teacher."""
    if cell.teacher is None or cell.config.distill is None:
        return
    status = cell_status(Path(cell.config.distill.teacher))
    if status != "ok":
        raise AtnatError(f"its teacher cell {cell.teacher} has not finished ({status or 'no result yet'} in "
                         f"{cell.config.distill.teacher}): run the teacher first (`atnat run` runs teachers before "
                         "their students; with --only, select the teacher too)")


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
    write_record(run_dir, "failed", [], message)
    where = f" (see {run_dir / 'error.log'})" if trace else ""
    print(f"cell {cell.name} failed: {message}{where}", file=sys.stderr)


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
