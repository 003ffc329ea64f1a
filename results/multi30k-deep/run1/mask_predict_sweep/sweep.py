"""CMLM mask-predict against its number of iterations T on the deep grid's distilled CMLMs (issue
25's 4-vs-10 question): test2016 sacreBLEU for T = 1..20 (length beam 3, the whole schedule) and
for T = 4 and 10 with fairseq's adaptive early stop, each decoded by `atnat evaluate` with the
eager engine from the run's evaluated weights (checkpoints/averaged.ckpt); one CSV row per
(cell, strategy). Run from the repository root, one cell at a time (1 thread):

    .venv/bin/python results/multi30k-deep/run1/mask_predict_sweep/sweep.py RUNS_DIR CELL [CELL ...]

e.g. RUNS_DIR=/work/deep-results/multi30k-deep/runs CELL=en-de-cmlm-kd-s1. Writes <cell>.json
(what atnat evaluate wrote) and appends to sweep.csv beside this file.
"""
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = Path("../shared/data/multi30k")
FULL = (1, 2, 3, 4, 5, 6, 8, 10, 15, 20)
EARLY = (4, 10)
COLUMNS = ("cell", "test_set", "strategy", "iterations", "early_stop", "bleu", "bleu_ci_low", "bleu_ci_high",
           "chrf", "bleu_tok", "repetition_rate", "length_within1")


def sweep(runs: Path, cell: str) -> list[dict]:
    src, tgt = cell.split("-")[0:2]
    also = [f"mask-predict:iterations={t},length_beam=3" for t in FULL[1:]]
    also += [f"mask-predict:iterations={t},length_beam=3,early_stop=true" for t in EARLY]
    out = HERE / f"{cell}.json"
    command = [sys.executable, "-m", "atnat.experiments.cli", "evaluate", "--checkpoint", str(runs / cell),
               "--src", str(DATA / f"test2016.{src}"), "--ref", str(DATA / f"test2016.{tgt}"),
               "--strategy", "mask-predict", "--iterations", str(FULL[0]), "--beam", "3",
               *[a for x in also for a in ("--also", x)], "--no-speed", "--engine", "eager",
               "--n-bootstrap", "1000", "--json", str(out)]
    subprocess.run(command, check=True, env=os.environ | {"OMP_NUM_THREADS": "1"})
    rows = []
    for r in json.loads(out.read_text())["rows"]:
        label = r["strategy"]
        rows.append({"cell": cell, "test_set": "test2016", "strategy": label,
                     "iterations": int(label.split("-")[2]), "early_stop": "early_stop=true" in label,
                     **{k: r[k] for k in COLUMNS[5:]}})
    return rows


if __name__ == "__main__":
    runs_dir, cells = Path(sys.argv[1]), sys.argv[2:]
    path = HERE / "sweep.csv"
    new = not path.exists()
    with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        if new:
            writer.writeheader()
        for name in cells:
            writer.writerows(sweep(runs_dir, name))
