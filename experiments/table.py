"""Tabulate a grid's finished cells into results.csv, curves/*.csv and samples.csv, with the
comparisons against each task's AT baseline (speed-up, paired significance)."""
from __future__ import annotations

import json
import platform
import subprocess
import time
from pathlib import Path

import pandas as pd

from atnat.experiments.grid import Grid
from atnat.experiments.metrics import paired_significance

CURVES = ("position_accuracy", "prefix_corruption", "bleu_by_length", "iterations", "attention")
COLUMNS = ["cell", "task", "decoder", "strategy", "strategy_name", "iterations", "seed", "distilled",
           "guided_attention", "options", "bleu", "chrf", "bleu_ci_low", "bleu_ci_high", "bleu_p_vs_at",
           "exact_match", "latency_ms_b1", "throughput_sents_s", "speedup_vs_at", "throughput_speedup_vs_at",
           "decoder_passes", "repetition_rate", "length_exact", "length_within1", "length_mae", "mixing_rate",
           "cond_error_delta", "peak_memory_mb", "distill_bleu", "train_steps", "train_time_s", "status", "error"]


def baseline_cells(df: pd.DataFrame) -> dict[tuple, str]:
    """(task, seed) -> the plain AT cell: decoder at, not distilled, no guided attention, no options."""
    plain = df[(df.decoder == "at") & ~df.distilled.astype(bool) & ~df.guided_attention.astype(bool)
               & (df.options.fillna("") == "") & (df.status == "ok")]
    return {key: grp.cell.iloc[0] for key, grp in plain.groupby(["task", "seed"])}


def add_comparisons(df: pd.DataFrame, runs: Path) -> pd.DataFrame:
    """speedup_vs_at (AT greedy latency / latency), throughput ratio, p-value vs the AT baseline."""
    df = df.copy()
    for col in ("speedup_vs_at", "throughput_speedup_vs_at", "bleu_p_vs_at"):
        df[col] = float("nan")
    for (task, seed), base in baseline_cells(df).items():
        rows = df[(df.task == task) & (df.seed == seed) & (df.status == "ok")]
        base_rows = df[(df.cell == base)]
        greedy = base_rows[base_rows.strategy_name == "greedy"]
        if len(greedy):
            df.loc[rows.index, "speedup_vs_at"] = greedy.latency_ms_b1.iloc[0] / rows.latency_ms_b1
            df.loc[rows.index, "throughput_speedup_vs_at"] = rows.throughput_sents_s / greedy.throughput_sents_s.iloc[0]
        ref_strategy = next((s for s in base_rows.strategy if s.startswith("beam")), base_rows.strategy.iloc[0])
        base_hyps = read_hyps(runs / base / "hyps" / f"{ref_strategy}.txt")
        refs = read_refs(runs / base)
        if base_hyps is None or refs is None:
            continue
        tokenize = "none" if base_rows.get("bleu_signature", pd.Series([""])).astype(str).str.contains(
            "tok:none").any() else "13a"
        systems = {i: h for i, r in rows.iterrows() if not (r.cell == base and r.strategy == ref_strategy)
                   and (h := read_hyps(runs / r.cell / "hyps" / f"{r.strategy}.txt")) is not None
                   and len(h) == len(refs)}
        if systems:
            pvals = paired_significance(base_hyps, {str(k): v for k, v in systems.items()}, refs,
                                        tokenize=tokenize, n=200)
            for k, p in pvals.items():
                df.loc[int(k), "bleu_p_vs_at"] = p
    return df


def read_hyps(path: Path) -> list[str] | None:
    return path.read_text(encoding="utf-8").split("\n")[:-1] if path.exists() else None


def read_refs(run_dir: Path) -> list[str] | None:
    path = run_dir / "references.txt"
    return read_hyps(path)


def tabulate(grid: Grid, out: Path, describe) -> pd.DataFrame:
    """Gather every cell's metrics.json and curves into the grid's tables; returns results.csv."""
    runs = out / "runs"
    rows, curves, samples = [], {c: [] for c in CURVES}, []
    for cell in grid.cells:
        run_dir = runs / cell.name
        info = describe(cell)
        meta = json.loads((run_dir / "metrics.json").read_text()) if (run_dir / "metrics.json").exists() else \
            {"status": "not run", "rows": []}
        status = meta.get("status", "failed")
        if status != "ok" or not meta.get("rows"):
            rows.append(info | {"status": status, "error": meta.get("error", "")})
            continue
        rows += [info | r | {"status": "ok", "error": ""} for r in meta["rows"]]
        for name in CURVES:
            path = run_dir / "curves" / f"{name}.csv"
            if path.exists():
                curves[name].append(pd.read_csv(path).assign(cell=cell.name))
        if (run_dir / "samples.csv").exists():
            samples.append(pd.read_csv(run_dir / "samples.csv").assign(cell=cell.name))
    df = add_comparisons(pd.DataFrame(rows), runs)
    for col in COLUMNS:
        if col not in df:
            df[col] = float("nan")
    df = df[COLUMNS + [c for c in df.columns if c not in COLUMNS]]
    out.mkdir(parents=True, exist_ok=True)
    write_csv(df, out / "results.csv")
    (out / "curves").mkdir(exist_ok=True)
    for name, frames in curves.items():
        if frames:
            write_csv(pd.concat(frames, ignore_index=True), out / "curves" / f"{name}.csv")
    if samples:
        write_csv(pd.concat(samples, ignore_index=True), out / "samples.csv")
    return df


def write_csv(df: pd.DataFrame, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    df.to_csv(tmp, index=False)
    tmp.replace(path)


def environment(grid: Grid, wall_time: float, command: str) -> dict:
    import pytorch_lightning
    import sacrebleu
    import torch

    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent,
                                timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else \
        f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    return {"command": command, "device": device, "python": platform.python_version(), "torch": torch.__version__,
            "lightning": pytorch_lightning.__version__, "sacrebleu": sacrebleu.__version__,
            "wall_time_s": round(wall_time, 1), "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() - wall_time)),
            "git_commit": commit, "grid": str(grid.path)}
