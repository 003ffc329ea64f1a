"""Beside the running deep grid: whenever a cell finishes, pause the grid, time what can be timed
(`atnat time --partial`: each finished student beside its seed's AT baseline and A/A control), let the
grid go on, and copy the finished cells into this folder (`atnat collect`). A machine lost between two
sessions then costs the cells still training, not a finished student's speed or scores. Committing the
collected cells stays with the person (or session) working in the checkout.

    python results/multi30k-deep/watch.py [--results /work/deep-results] [--pgid-file /work/deep-pgid]

It stops by itself once the grid's process group is gone. Nothing else should run while it times (its
log says when): the A/A control's floor in timing.csv shows how quiet the machine was.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
GRID = "experiments/grids/multi30k-deep.yaml"


def log(message: str) -> None:
    print(time.strftime("%Y-%m-%d %H:%M:%S UTC ", time.gmtime()) + message, flush=True)


def finished_cells(results: Path) -> dict[str, bool]:
    """{finished cell: whether it is a baseline (an AT teacher: timed with its first student, not alone)}"""
    from atnat.experiments.evaluation.baseline import is_baseline_cell
    from atnat.experiments.running.cell import cell_status
    from atnat.experiments.running.grid import load_grid_into

    grid, _ = load_grid_into(REPO / GRID, results, False)
    return {c.name: is_baseline_cell(c, grid.baseline) for c in grid.cells
            if cell_status(Path(c.config.output_dir)) == "ok"}


def alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def atnat(*args: str) -> int:
    return subprocess.run([str(REPO / ".venv" / "bin" / "atnat"), *args], cwd=REPO).returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default="/work/deep-results", type=Path)
    ap.add_argument("--pgid-file", default="/work/deep-pgid", type=Path)
    ap.add_argument("--every", type=float, default=300, help="seconds between two looks")
    args = ap.parse_args(argv)
    pgid = int(args.pgid_file.read_text().strip())
    seen = finished_cells(args.results)
    log(f"watching grid process group {pgid}; finished already: {', '.join(sorted(seen)) or 'none'}")
    while alive(pgid):
        time.sleep(args.every)
        done = finished_cells(args.results)
        new = sorted(set(done) - set(seen))
        if not new:
            continue
        log(f"finished: {', '.join(new)}")
        if not all(done[name] for name in new):
            log("pausing the grid to time")
            os.killpg(pgid, signal.SIGSTOP)
            try:
                code = atnat("time", GRID, "--results", str(args.results), "--partial")
            finally:
                os.killpg(pgid, signal.SIGCONT)
            log(f"atnat time --partial exited {code}; the grid goes on")
        code = atnat("collect", GRID, "--results", str(args.results), "--to", str(HERE / "finished-cells"))
        log(f"atnat collect exited {code}: commit what it copied")
        seen = done
    log("the grid's process group is gone: stopping")
    return 0


if __name__ == "__main__":
    sys.exit(main())
