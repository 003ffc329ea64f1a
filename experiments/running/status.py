"""`atnat status GRID`: each cell's state, job and last training step, read from its run folder.

State: done / failed (metrics.json), queued / running (job.json, asked of submitit; or the cell's
lock, held by whoever trains it; what a running cell does now from its progress.json), ended (a job
that ended without a result: cancelled, timed out for good), record damaged (a metrics.json cut short
or hand-edited: the next run evaluates the cell again; or an unfinished cell's train.json), interrupted (no
result, and a checkpoint to resume from, or training logged and lost with no checkpoint: it starts again;
what stopped it, where the run could write that down: Ctrl-C, a signal, an error), not started; with
`--collected DEST`, collected: no run here, but a finished copy in DEST (`atnat collect` copied it before
its machine was lost). Then, per task and seed, how many of its cells are done (collected
copies named) and whether it has been timed (`atnat time`, or the timing phase; a copy's own timing.csv
for a collected cell). Under a cluster launcher, a last line gives the state of the timing phase's job
(launchers/slurm.py).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from rich.table import Table

from atnat.core.errors import AtnatError
from atnat.experiments.console import PipeConsole
from atnat.experiments.evaluation.baseline import timing_groups
from atnat.experiments.locks import cell_lock, holder_alive
from atnat.experiments.modelfiles.loading import recorded_stamp
from atnat.experiments.reporting.records import cell_status, read_metrics
from atnat.experiments.running.grid import load_grid_into
from atnat.experiments.running.launchers.jobs import TIMING_DIR, is_active, job_state, read_job
from atnat.experiments.training.progress import describe, read_progress


def last_step(run_dir: Path) -> int | None:
    """The last training step the run logged (logs/metrics.csv), or its final step (train.json)."""
    info = run_dir / "train.json"
    if info.exists():
        try:
            step = json.loads(info.read_text(encoding="utf-8")).get("global_step", 0)
            if isinstance(step, bool) or not isinstance(step, int):
                raise ValueError(f"global_step is {step!r}")
        except (ValueError, AttributeError) as err:  # not JSON, not an object, not a step
            raise AtnatError(f"{info}: not a finished run's record ({err}); move it aside to see the cell as "
                             "unfinished") from None
        return step
    log = run_dir / "logs" / "metrics.csv"
    if not log.exists():
        return None
    import pandas as pd

    try:
        steps = pd.read_csv(log, usecols=["step"])["step"]
    except (ValueError, pd.errors.EmptyDataError):
        return None
    steps = pd.to_numeric(steps, errors="coerce").dropna()  # a row cut short, or one being written
    return int(steps.max()) if len(steps) else None


def step_or_problem(run_dir: Path) -> tuple[int | None, str]:
    """last_step, or None and what is wrong with the record it reads (one damaged train.json hides no other cell)."""
    try:
        return last_step(run_dir), ""
    except AtnatError as err:
        return None, str(err).replace(f"{run_dir}{os.sep}", "")


def cell_state(run_dir: Path, stops_early: bool | None = None) -> dict:
    """One row of the status table for a cell's run folder; a running cell's `now` says what it does
    (its progress.json: the training step and ETA, or evaluating, distilling...)."""
    row = folder_state(run_dir)
    if row["state"] == "running":
        row["now"] = describe(read_progress(run_dir), stops_early)
    elif row["state"] == "interrupted" and not row["now"]:  # what stopped it, where the run could say (not a kill)
        phase = (read_progress(run_dir) or {}).get("phase", "")
        row["now"] = phase if phase.startswith("stopped") else ""
    return row


def saved_training(run_dir: Path) -> bool:
    """Whether a run left its training saved in a checkpoint to resume from (averaged.ckpt is a mean of
    weights, never resumed: training/resume.py resume_point)."""
    folder = run_dir / "checkpoints"
    return folder.is_dir() and any(p.name != "averaged.ckpt" for p in folder.glob("*.ckpt"))


def folder_state(run_dir: Path) -> dict:
    if run_dir.exists() and not run_dir.is_dir():  # `atnat run` refuses the grid until it is moved
        return {"state": "blocked", "job": "", "launcher": "", "last_step": "", "now": "",
                "error": f"a file is where its run folder goes ({run_dir}): move or remove it"}
    job = read_job(run_dir) or {}
    step, bad_record = step_or_problem(run_dir)
    row = {"state": "not started", "job": job.get("job_id", ""), "launcher": job.get("launcher", ""),
           "last_step": step, "error": "", "now": ""}
    try:
        meta, damaged = read_metrics(run_dir), ""
    except AtnatError as err:  # cut short or hand-edited: the next run evaluates the cell again
        meta, damaged = None, str(err).replace(f"{run_dir / 'metrics.json'}: ", "metrics.json: ")
    status = meta and meta["status"]
    held = holder_alive(cell_lock(run_dir))
    if status == "ok" or (status == "failed" and not held):  # (a failed cell that a live process holds: retried)
        row["state"] = "done" if status == "ok" else "failed"
        if status == "failed":
            row["error"] = str(meta.get("error", ""))[:80]
        return row
    if damaged and not held and not (job and is_active(job_state(job))):
        row |= {"state": "record damaged", "error": f"the next run evaluates it again; {damaged}"[:140]}
        return row
    if bad_record and not held:
        row |= {"state": "record damaged", "error": bad_record[:140]}
        return row
    if job:
        state = job_state(job)
        row["job_state"] = state
        if is_active(state):
            row["state"] = "running" if held or state.startswith("RUNNING") else "queued"
            return row
        row["state"] = f"ended ({state.lower()})"
        held = False  # the job ended: a holder file it left (a kill leaves one) holds nothing
    if held:
        row["state"] = "running"
    elif saved_training(run_dir) and not job:
        row["state"] = "interrupted"
    elif not job and row["last_step"] is not None:  # it trained, and stopped before its first checkpoint
        row["state"], row["now"] = "interrupted", "no checkpoint: starts again at step 0"
    return row


def status_rows(grid, collected: Path | None = None) -> list[dict]:
    rows = [{"cell": c.name, "teacher": c.teacher or ""}
            | cell_state(Path(c.config.output_dir), c.config.train.early_stop_patience is not None) for c in grid.cells]
    if collected is not None:  # a cell with no run here but a finished copy there: collected (a live run wins)
        from atnat.experiments.running.collect import UNDER_WAY, UNVERIFIED, verify_copy  # here: start-up

        for row in rows:
            copy = collected / row["cell"]
            if row["state"] == "not started" and cell_status(copy) == "ok" and not (copy / UNDER_WAY).exists():
                problem = verify_copy(copy)  # as the report checks it: a copy changed since is not a result
                row |= {"state": "collected", "last_step": step_or_problem(copy)[0]} if problem in (None, UNVERIFIED) else \
                    {"state": "copy damaged", "now": f"{problem}: collect it again"}
    return rows


def check_collected(collected: Path) -> Path:
    """The --collected folder, refused with one clear error when it does not exist."""
    if not collected.is_dir():
        raise AtnatError(f"--collected {collected}: no such folder (give the DEST of an earlier `atnat collect`)")
    return collected


def timing_line(out: Path) -> str | None:
    """The timing phase's cluster job, where there is one: `timing phase: job 105 pending`."""
    job = read_job(out / TIMING_DIR)
    return f"timing phase: job {job['job_id']} {job_state(job).lower()}" if job else None


def timing_rows(path: Path):
    """A timing.csv's (cell, timing_session, fingerprint) rows (no fingerprint: ""), or None where there is none
    or it cannot be read."""
    import pandas as pd

    try:
        rows = pd.read_csv(path, usecols=lambda c: c in ("cell", "timing_session", "fingerprint"), dtype=str) \
            if path.is_file() and not path.is_symlink() else None
    except (ValueError, pd.errors.EmptyDataError):
        return None
    if rows is None or not {"cell", "timing_session"} <= set(rows.columns):
        return None
    return rows if "fingerprint" in rows else rows.assign(fingerprint="")


def of_present_weights(timing, grid, state: dict[str, str]):
    """The rows of the grid's timing.csv timed on the weights each cell (run here) holds now, by the sha256
    recorded beside them: a cell trained again since its seed was timed has only older rows. A cell whose
    weights are gone keeps its rows: their timing is all there is."""
    dirs = {c.name: Path(c.config.output_dir) for c in grid.cells if state.get(c.name) == "done"}
    stamps = {name: stamp for name, run_dir in dirs.items() if (stamp := recorded_stamp(run_dir))}
    keep = [stamps.get(str(cell)) in (None, str(fingerprint)) for cell, fingerprint in zip(timing["cell"], timing["fingerprint"])]
    return timing[keep]


def seed_lines(grid, out: Path, rows: list[dict], collected: Path | None = None) -> list[str]:
    """Per task and seed (the unit `atnat time` times): how many of its cells are done (and how many of those
    are collected copies), and once all are, whether it has been timed (timing.csv rows for each of its cells,
    and when; a collected cell's from its copy's timing.csv); before that, how many of them `atnat time
    --partial` has timed. Cells of the grid's `untimed:` count as done when done, and are named as never
    timed, never as waiting for a timing."""
    import pandas as pd

    state = {r["cell"]: r["state"] for r in rows}
    copies = [t for r in rows if r["state"] == "collected" and collected is not None
              and (t := timing_rows(collected / r["cell"] / "timing.csv")) is not None]
    own = timing_rows(out / "timing.csv")
    found = [t for t in [of_present_weights(own, grid, state) if own is not None else None] + copies if t is not None]
    timing = pd.concat(found, ignore_index=True) if found else None
    never = {c.name for c in grid.never_timed()}
    lines = []
    for (task, seed), cells in timing_groups(grid.cells).items():
        names = [c.name for c in cells]
        finished = [n for n in names if state[n] in ("done", "collected")]
        line = f"{task} seed {seed}: {len(finished)} of {len(names)} cells done"
        n_copies = sum(state[n] == "collected" for n in finished)
        if n_copies:
            line += (f" ({n_copies} of them {'a collected copy' if n_copies == 1 else 'collected copies'}: "
                     f"{collected})")
        to_time = [n for n in finished if n not in never]  # the grid's `untimed:` cells are never waited for
        timed = timing[timing["cell"].astype(str).isin(to_time)] if timing is not None else None
        timed_names = set(timed["cell"].astype(str)) if timed is not None else set()
        sessions = ", ".join(sorted(set(timed["timing_session"].dropna().astype(str)))) if timed is not None else ""
        if len(finished) == len(names):
            if timed_names == set(to_time):
                line += f", timed {sessions or '(session not recorded)'}"
            elif no_timing := [n for n in to_time if n not in timed_names and state[n] == "collected"]:
                line += (f", not timed ({len(no_timing)} collected {'copy' if len(no_timing) == 1 else 'copies'} without "
                         "a timing: their weights are not here to time)")
            elif timed_names:  # timed before its last cells finished (`--partial`, or a cell trained later)
                line += (f", {len(timed_names)} of them timed {sessions or '(session not recorded)'}; not timed: "
                         f"{', '.join(n for n in to_time if n not in timed_names)} (atnat time)")
            else:
                line += ", not timed yet (atnat time)"
        elif timed_names:  # `atnat time --partial`: the cells finished so far, beside the baseline
            line += f", {len(timed_names)} of them timed {sessions or '(session not recorded)'}"
        if skipped := [n for n in names if n in never]:
            line += f"; never timed: {', '.join(skipped)} (the grid's untimed)"
        lines.append(line)
    return lines


def print_status(grid_path, *, results_root: Path, smoke: bool, collected: Path | None = None) -> list[dict]:
    collected = check_collected(collected) if collected is not None else None
    grid, out = load_grid_into(grid_path, results_root, smoke)
    rows = status_rows(grid, collected)
    table = Table(title=f"{grid_path}: {len(rows)} cells")
    for col in ("cell", "state", "job", "last step", "teacher", "now / error"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["cell"], r["state"], str(r["job"]), "" if r["last_step"] is None else str(r["last_step"]),
                      r["teacher"], r["error"] or r["now"])
    console = PipeConsole(width=200)  # `atnat status | head -1` exits 141 like every other command
    console.print(table)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    console.print(", ".join(f"{n} {state}" for state, n in counts.items()))
    for line in seed_lines(grid, out, rows, collected):
        console.print(line)
    if timing_line(out):
        console.print(timing_line(out))
    other = out.with_name(out.name[:-len("-smoke")]) if smoke else out.with_name(out.name + "-smoke")
    if all(r["state"] == "not started" for r in rows) and (other / "runs").is_dir():
        console.print(f"nothing has started in {out}; {other} holds the {'full' if smoke else 'smoke'} run's cells: "
                      f"atnat status {grid_path}{'' if smoke else ' --smoke'}")
    return rows
