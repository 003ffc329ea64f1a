"""Beside the running deep grid: whenever a cell finishes, copy it into this folder (`atnat collect`),
pause the grid, time what can be timed (`atnat time --partial`: each finished student beside its seed's
AT baseline and A/A control), let the grid go on, and collect again (the new timing.csv). A machine lost
between two sessions then costs the cells still training, not a finished student's scores (collected
before an hour's timing starts) or its speed. Committing the
collected cells stays with the person (or session) working in the checkout.

    python results/multi30k-deep/watch.py [--results /work/deep-results] [--pgid-file /work/deep-pgid]
    (--grid and --to point it at another grid and collect folder, e.g. a tiny grid to try it on)

What it times: once a task and seed has all its cells finished, that group anew and whole, in one session
(`atnat time --anew --partial --only`: its final timing, so that its systems' times are measured side by
side; the same weights timed in two sessions differ by more than one session's interval, STATUS.md).
Before that, a new student beside its baseline (`--partial`: its speed survives a machine lost before the
seed is complete), unless `--whole-only` names it (default: en->fr's cells, whose partial timings a
lost machine would make useless: WHOLE_ONLY below). A cell named by `--never-time` (default: the fp32
twins, precision controls: the grid asks for their BLEU, not their speed, which is their bf16 teachers'
architecture decoding in fp32 alike) neither starts a timing nor holds back its seed's: `--partial`
times it only if it happens to have finished when its seed is timed.

Cells it finds finished but not timed when it starts (a timing cut short by the end of a session) count
as new: it times them at its first look. It stops by itself once the grid's process group is gone,
after a last collect. Nothing else should run while it times (its log says when): the A/A control's floor in timing.csv shows how quiet the
machine was. A pause counts in the paused cells' train_time_s (Lightning's timer runs on): the log's
pause lines say how long each was. It never pauses while the runner's own timing phase runs (its
timing.lock held), and it lets a grid it finds stopped (an earlier watcher killed mid-pause) go on.
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
GRID = "experiments/grids/multi30k-deep.yaml"
TIME_LIMIT_S = 3600  # one `atnat time --partial` takes minutes; past this the grid goes on regardless
WHOLE_LIMIT_S = 2 * 3600  # a whole seed anew: 53 minutes for en-de seed 2 without its twin (2026-11-26 16:19)
MAX_TRIES = 2  # a timing that fails this often for the same cells is left to a person
NEVER_TIME = ("*-fp32-*",)  # precision controls: their BLEU is the question, not their speed
# timed only with their whole task and seed: en->fr seed 1's students. A partial timing is insurance against
# losing the machine before the seed is complete, and there it buys nothing: a lost machine takes the teacher's
# weights, so the students still training need a teacher trained again, and en->fr is trained again whole (its
# earlier students stay the other machine's lineage, which collect keeps apart). Each partial timing of a CMLM
# student paused the grid for 20-40 minutes (STATUS.md, 2026-11-26).
WHOLE_ONLY = ("en-fr-*",)


def log(message: str) -> None:
    print(time.strftime("%Y-%m-%d %H:%M:%S UTC ", time.gmtime()) + message, flush=True)


def finished_cells(results: Path, grid_path: str = GRID) -> dict[str, tuple[bool, tuple]]:
    """{finished cell: (whether it is its seed's baseline, its (task, seed) group)}"""
    from atnat.experiments.evaluation.baseline import is_baseline_cell
    from atnat.experiments.evaluation.baseline import timing_group
    from atnat.experiments.running.cell import cell_status
    from atnat.experiments.running.grid import load_grid_into

    grid, _ = load_grid_into(REPO / grid_path, results, False)
    return {c.name: (is_baseline_cell(c, grid.baseline), timing_group(c)) for c in grid.cells
            if cell_status(Path(c.config.output_dir)) == "ok"}


def grid_groups(results: Path, grid_path: str = GRID) -> dict[tuple, list[str]]:
    """{(task, seed): the names of all its cells, finished or not}"""
    from atnat.experiments.evaluation.baseline import timing_groups
    from atnat.experiments.running.grid import load_grid_into

    grid, _ = load_grid_into(REPO / grid_path, results, False)
    return {key: [c.name for c in cells] for key, cells in timing_groups(grid.cells).items()}


def timed_cells(results: Path, grid_path: str = GRID) -> set[str]:
    """The cells with rows in the grid's timing.csv (timed by an earlier `atnat time`; status.py reads it)."""
    from atnat.experiments.running.grid import load_grid_into
    from atnat.experiments.running.status import timing_rows

    rows = timing_rows(load_grid_into(REPO / grid_path, results, False)[1] / "timing.csv")
    return set() if rows is None else set(rows["cell"].astype(str))


def worth_timing(new: list[str], done: dict[str, tuple[bool, tuple]]) -> bool:
    """A new student, or a new baseline whose seed already has a finished student to time beside it."""
    return any(not done[n][0] or any(not base and group == done[n][1] for base, group in done.values()) for n in new)


def timings(new: list[str], done: dict[str, tuple[bool, tuple]], groups: dict[tuple, list[str]],
            never: tuple[str, ...] = NEVER_TIME, whole_only: tuple[str, ...] = WHOLE_ONLY) -> list[tuple[str, ...]]:
    """The `atnat time` options for the cells found finished since the last look, one tuple per run: each
    group they complete (its cells in `never` aside) anew and whole; the rest beside their baseline, if
    worth it; a cell in `whole_only` only with its whole group (neither a partial run for it nor in one
    for its siblings); a cell in `never` starts nothing."""
    matches = lambda c, globs: any(fnmatch.fnmatchcase(c, p) for p in globs)  # noqa: E731
    new = [n for n in new if not matches(n, never)]
    done = {c: v for c, v in done.items() if not matches(c, never)}
    complete = sorted(g for g, cells in groups.items()
                      if all(c in done for c in cells if not matches(c, never)) and any(n in cells for n in new))
    runs = [("--anew", "--partial", *[a for c in groups[g] for a in ("--only", c)]) for g in complete]
    rest = [n for n in new if done[n][1] not in complete and not matches(n, whole_only)]
    partial = {c: v for c, v in done.items() if not matches(c, whole_only)}
    if rest and worth_timing(rest, partial):
        rest_groups = sorted({done[n][1] for n in rest})
        runs.append(("--partial", *[a for g in rest_groups for c in groups[g] if not matches(c, whole_only)
                                    for a in ("--only", c)]))
    return runs


def covered(options: tuple[str, ...], new: list[str]) -> set[str]:
    """The new cells one `atnat time` run of timings() times: those its --only names."""
    named = {options[i + 1] for i, o in enumerate(options[:-1]) if o == "--only"}
    return {n for n in new if n in named}


def timing_phase_running(results: Path, grid_path: str = GRID) -> bool:
    """The runner's own timing phase (or an `atnat time`) holds the grid's timing lock now."""
    from filelock import FileLock, Timeout

    from atnat.experiments.running.grid import load_grid_into

    path = load_grid_into(REPO / grid_path, results, False)[1] / "timing.lock"
    if not path.exists():
        return False
    try:
        with FileLock(str(path), timeout=0):
            return False
    except Timeout:
        return True


def signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def atnat(*args: str, timeout: float | None = None) -> int:
    try:
        return subprocess.run([str(REPO / ".venv" / "bin" / "atnat"), *args], cwd=REPO, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        log(f"atnat {args[0]} ran past {timeout:.0f} s: stopped")
        return 124


def collect(grid: str, results: Path, dest: Path) -> None:
    code = atnat("collect", grid, "--results", str(results), "--to", str(dest))
    log(f"atnat collect exited {code}: commit what it copied")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default="/work/deep-results", type=Path)
    ap.add_argument("--pgid-file", default="/work/deep-pgid", type=Path)
    ap.add_argument("--every", type=float, default=300, help="seconds between two looks")
    ap.add_argument("--grid", default=GRID, help="the grid file, relative to the repository (default: the deep grid)")
    ap.add_argument("--to", default=HERE / "finished-cells", type=Path, help="where atnat collect copies the cells")
    ap.add_argument("--never-time", action="append", default=None, metavar="GLOB",
                    help="cells that start no timing and hold back none (repeatable; default: "
                         f"{' '.join(NEVER_TIME)})")
    ap.add_argument("--whole-only", action="append", default=None, metavar="GLOB",
                    help="cells timed only with their whole task and seed, never beside their baseline alone "
                         f"(repeatable; default: {' '.join(WHOLE_ONLY)})")
    args = ap.parse_args(argv)
    args.never_time = args.never_time or list(NEVER_TIME)
    args.whole_only = args.whole_only or list(WHOLE_ONLY)
    pgid = int(args.pgid_file.read_text().strip())
    if os.getpgid(0) == pgid:
        log(f"this watcher is in the grid's process group {pgid}: it would pause itself; start it with setsid")
        return 2
    paused = False
    failures: dict[tuple, int] = {}

    def leave(signum, _frame):  # killed mid-pause: the grid must not stay stopped
        if paused:
            signal_group(pgid, signal.SIGCONT)
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, leave)
    signal_group(pgid, signal.SIGCONT)  # a grid left stopped by an earlier watcher goes on
    done = finished_cells(args.results, args.grid)
    seen = set(done) & timed_cells(args.results, args.grid)  # a cell that finished untimed counts as new
    untimed = sorted(set(done) - seen)
    log(f"watching grid process group {pgid}; finished and timed already: {', '.join(sorted(seen)) or 'none'}"
        + (f"; finished, not timed yet: {', '.join(untimed)}" if untimed else ""))
    while signal_group(pgid, 0):
        time.sleep(args.every)
        try:
            done = finished_cells(args.results, args.grid)
            groups = grid_groups(args.results, args.grid)
        except Exception as err:  # e.g. the checkout mid-edit: the grid runs on; look again later
            log(f"could not read the grid's state ({type(err).__name__}: {err}); looking again later")
            continue
        new = sorted(set(done) - seen)
        if not new:
            continue
        log(f"finished: {', '.join(new)}")
        runs = timings(new, done, groups, tuple(args.never_time), tuple(args.whole_only))
        if runs and timing_phase_running(args.results, args.grid):
            log("the runner's timing phase is running: not pausing; looking again later")
            continue
        settled = set(new) - {c for options in runs for c in covered(options, new)}  # nothing to time for them
        if runs:  # the scores first: a timing can take an hour, and a session can end in it
            collect(args.grid, args.results, args.to)
        for options in runs:
            cells = covered(options, new)
            log(f"pausing the grid to time ({' '.join(options)})")
            started, paused = time.time(), signal_group(pgid, signal.SIGSTOP)
            try:
                code = atnat("time", args.grid, "--results", str(args.results), *options,
                             timeout=WHOLE_LIMIT_S if options[0] == "--anew" else TIME_LIMIT_S)
            finally:
                signal_group(pgid, signal.SIGCONT)
                paused = False
            log(f"atnat time {options[0]} exited {code}; the grid goes on after a pause of {time.time() - started:.0f} s")
            if code == 0:
                settled |= cells
                continue
            key = tuple(sorted(cells))  # a failure (a cell without weights, an error): once more at the next look,
            failures[key] = failures.get(key, 0) + 1  # then left to a person, not a pause at every look
            if failures[key] >= MAX_TRIES:
                log(f"atnat time {options[0]} failed {failures[key]} times for {', '.join(key)}: not tried again; "
                    "time it by hand (results/multi30k-deep/time_seed.sh)")
                settled |= cells
        collect(args.grid, args.results, args.to)
        seen |= settled
    log("the grid's process group is gone: a last collect, then stopping")
    collect(args.grid, args.results, args.to)
    return 0


if __name__ == "__main__":
    sys.exit(main())
