"""A small, schema-valid results folder with known numbers, as the grid runner would write it.

Two tasks: `copy` (AT greedy and beam, CMLM with two strategies, CTC, one failed NAT cell) and
`dialect` (AT and vanilla NAT, with a mixing rate). Tests read the report back against ROWS.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

NAN = math.nan
GRID = "tinygrid"
COMMAND = "atnat run experiments/grids/tinygrid.yaml"
FAILED_CELL = "copy-nat-guided-s1"
FAILED_ERROR = "CUDA out of memory | tried to allocate 2.00 GiB\nsee runs/copy-nat-guided-s1/log.txt"
CURVE_FILES = ("position_accuracy", "prefix_corruption", "bleu_by_length", "iterations", "attention", "validation")

_KEYS = ("cell", "task", "decoder", "strategy", "strategy_name", "iterations", "distilled",
         "guided_attention", "bleu", "bleu_ci_low", "bleu_ci_high", "chrf", "bleu_p_vs_at", "exact_match",
         "latency_ms_b1", "throughput_sents_s", "speedup_vs_at", "throughput_speedup_vs_at",
         "decoder_passes", "repetition_rate", "length_exact", "length_within1", "mixing_rate",
         "status")  # fmt: skip
_VALUES = (
    ("copy-at-s1", "copy", "at", "greedy", "greedy", NAN, False, False,
     37.12, 35.8, 38.44, 61.34, NAN, 0.125, 12.34, 1520.0, 1.0, 1.0, 11.2, 0.01, NAN, NAN, NAN, "ok"),
    ("copy-at-s1", "copy", "at", "beam5", "beam", NAN, False, False,
     38.05, 36.7, 39.4, 62.0, 0.21, 0.14, 30.1, 600.0, 0.41, 0.39, 11.4, 0.008, NAN, NAN, NAN, "ok"),
    ("copy-cmlm-kd-s1", "copy", "cmlm", "mask-predict-4", "mask-predict", 4, True, False,
     35.5, 34.0, 36.9, 58.25, 0.04, 0.1, 3.2, 4100.0, 3.86, 2.7, 5.0, 0.034, 0.45, 0.8, NAN, "ok"),
    ("copy-cmlm-kd-s1", "copy", "cmlm", "length-beam-3", "length-beam", 4, True, False,
     35.2, 33.9, 36.5, 58.0, 0.0004, 0.09, 4.1, 3900.0, 3.01, 2.5, 15.0, 0.03, 0.5, 0.85, NAN, "ok"),
    ("copy-ctc-s1", "copy", "ctc", "ctc", "ctc", NAN, False, False,
     30.25, 28.1, 32.3, 55.0, 0.001, 0.05, 1.9, 5200.0, 6.49, 5.1, 1.0, 0.002, NAN, NAN, NAN, "ok"),
    (FAILED_CELL, "copy", "nat", "parallel", "parallel", NAN, False, True,
     NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, "failed"),
    ("dialect-at-s1", "dialect", "at", "greedy", "greedy", NAN, False, True,
     52.4, 50.1, 54.6, 70.2, NAN, 0.3, 10.0, 1800.0, 1.0, 1.0, 9.0, 0.0, NAN, NAN, 0.02, "ok"),
    ("dialect-nat-s1", "dialect", "nat", "parallel", "parallel", NAN, False, True,
     41.87, 39.5, 44.1, 63.0, 0.0002, 0.12, 1.25, 5760.0, 8.0, 3.2, 1.0, 0.12, 0.6, 0.9, 0.315, "ok"),
)  # fmt: skip
ROWS = [dict(zip(_KEYS, values)) for values in _VALUES]


def results_frame() -> pd.DataFrame:
    """results.csv with every column of the runner's schema."""
    df = pd.DataFrame(ROWS)
    df["seed"] = 1
    df["family"] = df["cell"].str.removesuffix("-s1")
    df["options"] = ""
    df["length_mae"] = df["length_within1"].map(lambda v: NAN if pd.isna(v) else 1 - v)
    df["cond_error_excess"] = df["decoder"].map({"at": 0.21}).astype(float)
    df["decode_memory_mb"], df["train_steps"], df["train_time_s"] = 120.0, 500, 42.0
    df["decode_memory_basis"] = "cpu-resident"
    df["bleu_tok"] = df["bleu"] + 1.5
    df["bleu_p_holm"] = (df["bleu_p_vs_at"] * 2).clip(upper=1.0)
    df["bleu_p_sides"] = 2.0  # two-sided p (as tabulate writes them)
    df["speedup_ci_low"], df["speedup_ci_high"] = df["speedup_vs_at"] * 0.9, df["speedup_vs_at"] * 1.1
    df["speed_baseline"] = df["task"] + "-at-s1 / greedy"
    df["p_baseline"] = df["task"].map({"copy": "copy-at-s1 / beam5", "dialect": "dialect-at-s1 / greedy"})
    df["error"] = df["status"].map({"failed": FAILED_ERROR}).fillna("")
    return df


def with_seeds(frame: pd.DataFrame, bleu_shift: dict[int, float]) -> pd.DataFrame:
    """The rows repeated for further seeds, BLEU shifted per seed (seed -> points), cells renamed."""
    copies = [frame]
    for seed, shift in bleu_shift.items():
        other = frame.copy()
        other["seed"] = seed
        other["cell"] = other["cell"].str.replace("-s1", f"-s{seed}", regex=False)
        other["bleu"] = other["bleu"] + shift
        copies.append(other)
    return pd.concat(copies, ignore_index=True)


def curves() -> dict[str, pd.DataFrame]:
    """One small curve per optional curves file, over cells of the results above."""
    positions = [
        {"cell": cell, "strategy": strat, "mode": mode, "position": t, "count": 8,
         "accuracy": 1.0 - t * (0.02 if mode == "teacher_forced" else 0.1)}
        for cell, strat in (("copy-at-s1", "greedy"), ("copy-cmlm-kd-s1", "mask-predict-4"))
        for mode in ("teacher_forced", "free_running") for t in range(6)
    ]  # fmt: skip
    corruption = [{"cell": "copy-at-s1", "corrupted": k, "distance": d, "relative_accuracy": 1 - 0.3 * k / d}
                  for k in (1, 2) for d in range(1, 5)]  # fmt: skip
    systems = (("copy-at-s1", "greedy", 40.0), ("dialect-nat-s1", "parallel", 45.0))
    buckets = ("21+", "1-10", "11-20")  # out of order on purpose: the figure sorts them by length
    by_length = [{"cell": cell, "strategy": strat, "bucket": b, "n": 10, "bleu": bleu - i * 3}
                 for cell, strat, bleu in systems for i, b in enumerate(buckets)]  # fmt: skip
    iters = [{"cell": "copy-cmlm-kd-s1", "strategy": "mask-predict-4", "iteration": i, "bleu": 30.0 + i}
             for i in range(1, 5)]  # fmt: skip
    attention = [{"cell": cell, "sentence": 0, "target_pos": t, "source_pos": s,
                  "weight": 0.8 if s == t else 0.05}
                 for cell in ("copy-at-s1", "copy-cmlm-kd-s1", "dialect-nat-s1")
                 for t in range(5) for s in range(5)]  # fmt: skip
    validation = [{"cell": cell, "step": step, "val_loss": 5.0 - step / 100, "val_bleu": bleu * step / 300}
                  for cell, bleu in (("copy-at-s1", 37.0), ("copy-ctc-s1", 30.0), ("dialect-nat-s1", 42.0))
                  for step in (100, 200, 300)]  # fmt: skip
    frames = (positions, corruption, by_length, iters, attention, validation)
    return {name: pd.DataFrame(rows) for name, rows in zip(CURVE_FILES, frames)}


def samples() -> pd.DataFrame:
    """Four indices per finished cell and strategy (the report shows the first three)."""
    rows = []
    for r in ROWS:
        if r["status"] != "ok":
            continue
        for i in range(4):
            src = f"{r['task']} source {i}"
            hyp = f"hyp {r['cell']} {r['strategy']} {i}"
            rows.append({"cell": r["cell"], "strategy": r["strategy"], "index": i, "source": src,
                         "reference": f"ref {src}", "hypothesis": hyp})  # fmt: skip
    return pd.DataFrame(rows)


ENVIRONMENT = {"command": COMMAND, "device": "cpu (2 threads)", "python": "3.11.7", "torch": "2.13.0",
               "lightning": "2.5.1", "sacrebleu": "2.5.1", "wall_time_s": 754.2,
               "started": "2025-01-01T12:00:00", "git_commit": "abc1234"}  # fmt: skip


def comparisons(n_seeds: int = 1) -> pd.DataFrame:
    """comparisons.csv of the fixture: copy's best NAT behind its best AT by an interval that holds 0
    but reaches beyond ±1 BLEU (not resolved); dialect's NAT beyond its interval."""
    method = f"{n_seeds} seeds: t at {n_seeds - 1} df on the seed part, normal on the test-sentence part" if n_seeds > 1 else \
        "test sentences resampled (one seed: training noise not covered)"
    return pd.DataFrame([
        {"task": "copy", "system": "copy-cmlm-kd / mask-predict-4", "against": "copy-at / beam5", "n_seeds": n_seeds,
         "bleu_diff": -2.55, "diff_ci_low": -5.1, "diff_ci_high": 0.2, "method": method},
        {"task": "dialect", "system": "dialect-nat / parallel", "against": "dialect-at / greedy", "n_seeds": n_seeds,
         "bleu_diff": -10.53, "diff_ci_low": -13.0, "diff_ci_high": -8.1, "method": method}])


def build_results(base: Path, *, omit: Iterable[str] = (), drop_columns: Iterable[str] = ()) -> Path:
    """Write the folder base/GRID, leaving out the relative paths in omit and the given result columns."""
    root = base / GRID
    (root / "curves").mkdir(parents=True, exist_ok=True)
    (root / "runs" / "copy-at-s1").mkdir(parents=True, exist_ok=True)  # present in real folders; ignored
    skip = set(omit)
    files = {"results.csv": results_frame().drop(columns=list(drop_columns)), "samples.csv": samples(),
             "comparisons.csv": comparisons()}
    files |= {f"curves/{name}.csv": frame for name, frame in curves().items()}
    for rel, frame in files.items():
        if rel not in skip:
            frame.to_csv(root / rel, index=False)
    if "environment.json" not in skip:
        (root / "environment.json").write_text(json.dumps(ENVIRONMENT, indent=2), encoding="utf-8")
    return root
