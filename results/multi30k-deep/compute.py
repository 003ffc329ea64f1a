"""The training compute the deep grid took, per cell and in all, for the README.

A cell's whole training time is in its train.json when the run trained in one attempt; the grid's
worktree (17f3ce4) recorded only the last attempt's time of a run resumed across working sessions.
For those cells this estimates it as steps x seconds per step, the step rate measured while the grid
ran: `rates.csv` (unix time, cell, step, phase, updated), a sample of every cell's progress.json
every 5 minutes (/work/deep-rates.sh). The rate of a cell is the median over its consecutive training
samples (at most 10 minutes apart, step increasing); a cell never sampled takes the median rate of
its cell variant's other seeds (or of one trained in one attempt: its whole time over its steps).
Every cell trains with 1 thread, two cells at a time on the 2 cores.

    .venv/bin/python results/multi30k-deep/compute.py RUNS_DIR RATES_CSV
"""
import csv
import json
import statistics
import sys
from pathlib import Path


def rates(path: Path) -> dict[str, float]:
    """cell -> median seconds per step over its consecutive training samples."""
    samples: dict[str, list[tuple[float, int]]] = {}
    with open(path, newline="") as f:
        for row in csv.reader(f):
            when, cell, step, phase = float(row[0]), row[1], row[2], row[3]
            if phase == "training" and step.isdigit():
                samples.setdefault(cell, []).append((when, int(step)))
    out = {}
    for cell, points in samples.items():
        per_step = [(t2 - t1) / (s2 - s1) for (t1, s1), (t2, s2) in zip(points, points[1:])
                    if s2 > s1 and 0 < t2 - t1 <= 600]
        if per_step:
            out[cell] = statistics.median(per_step)
    return out


def variant(cell: str) -> str:
    return cell.rsplit("-s", 1)[0].split("-", 2)[2]  # en-de-cmlm-kd-s1 -> cmlm-kd


def whole(run: Path) -> tuple[dict, int, bool]:
    """train.json, the attempts, and whether its train_time_s covers the whole training."""
    info = json.loads((run / "train.json").read_text())
    attempts_file = run / "logs" / "attempts"
    attempts = int(attempts_file.read_text().strip() or 1) if attempts_file.is_file() else 1
    return info, attempts, attempts == 1 or "train_time_this_attempt_s" in info


def main(runs: Path, rates_csv: Path) -> None:
    measured = rates(rates_csv)
    for run in runs.iterdir():  # a cell trained in one attempt: its whole time over its steps, if not sampled
        if (run / "train.json").is_file() and run.name not in measured:
            info, _, complete = whole(run)
            if complete:
                measured[run.name] = float(info["train_time_s"]) / int(info["global_step"])
    print("| cell | steps | attempts | train time (h) | from |")
    print("|---|---|---|---|---|")
    total = 0.0
    for run in sorted(p for p in runs.iterdir() if (p / "train.json").is_file()):
        info, attempts, complete = whole(run)
        steps = int(info["global_step"])
        if complete:
            seconds, source = float(info["train_time_s"]), "train.json"
        else:
            same = [r for c, r in measured.items() if variant(c) == variant(run.name)]
            rate = measured.get(run.name) or (statistics.median(same) if same else None)
            if rate is None:
                print(f"| {run.name} | {steps} | {attempts} | - | no rate measured |")
                continue
            seconds = steps * rate
            source = f"{steps} steps x {rate:.2f} s/step ({'own' if run.name in measured else 'variant'} rate)"
        total += seconds
        print(f"| {run.name} | {steps} | {attempts} | {seconds / 3600:.2f} | {source} |")
    print(f"\ntotal: {total / 3600:.1f} h of training (one thread each; two cells at a time on 2 cores)")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
