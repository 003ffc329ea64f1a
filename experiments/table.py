"""Tabulate a grid's finished cells into results.csv, curves/*.csv and samples.csv, with the
comparisons against each task's AT baseline (speed-up, paired significance)."""
from __future__ import annotations

import json
import platform
import subprocess
import time
from pathlib import Path

import pandas as pd

from atnat.core.errors import AtnatError
from atnat.experiments.grid import Grid
from atnat.experiments.evaluate import read_references
from atnat.experiments import schema
from atnat.experiments.files import write_csv
from atnat.experiments.metrics import holm, paired_significance

CURVES = ("position_accuracy", "prefix_corruption", "bleu_by_length", "iterations", "attention")  # per run
# curves/validation.csv comes from each run's training log (validation_curve)
TIMING = [c.name for c in schema.SPEED]  # the columns the timing phase fills (timing.csv)


def baseline_cells(df: pd.DataFrame) -> dict[tuple, str]:
    """(task, seed) -> the plain AT cell: decoder at, not distilled, no guided attention, no options."""
    plain = df[(df.decoder == "at") & ~df.distilled.astype(bool) & ~df.guided_attention.astype(bool)
               & (df.options.fillna("") == "") & (df.status == "ok")]
    return {key: grp.cell.iloc[0] for key, grp in plain.groupby(["task", "seed"])}


def add_significance(df: pd.DataFrame, runs: Path, *, method: str = "bs", n: int = 1000) -> pd.DataFrame:
    """p-value of each system's BLEU difference to the task's AT baseline (the plain AT cell of the
    same seed, its beam strategy if it has one, else its first), paired on the same test sentences;
    `bleu_p_holm`: Holm-corrected over the systems compared within that task and seed; `p_baseline`
    names the baseline."""
    df = df.copy()
    for col in ("bleu_p_vs_at", "bleu_p_holm"):
        df[col] = float("nan")
    df["p_baseline"] = ""
    for (task, seed), base in baseline_cells(df).items():
        rows = df[(df.task == task) & (df.seed == seed) & (df.status == "ok")]
        base_rows = df[(df.cell == base)]
        ref_strategy = next((s for s in base_rows.strategy if s.startswith("beam")), base_rows.strategy.iloc[0])
        base_hyps = read_hyps(runs / base / "hyps" / f"{ref_strategy}.txt")
        refs = read_references(runs / base)
        if base_hyps is None or refs is None:
            continue
        tokenize = str(base_rows.bleu_tokenize.iloc[0]) if "bleu_tokenize" in base_rows and \
            base_rows.bleu_tokenize.notna().any() else "13a"
        systems = {i: h for i, r in rows.iterrows() if not (r.cell == base and r.strategy == ref_strategy)
                   and (h := read_hyps(runs / r.cell / "hyps" / f"{r.strategy}.txt")) is not None
                   and len(h) == len(refs[0])}
        if not systems:
            continue
        pvals = paired_significance(base_hyps, {str(k): v for k, v in systems.items()}, refs,
                                    tokenize=tokenize, n=n, method=method)
        adjusted = holm(pvals)
        for k, p in pvals.items():
            df.loc[int(k), ["bleu_p_vs_at", "bleu_p_holm"]] = p, adjusted[k]
        df.loc[rows.index, "p_baseline"] = f"{base} / {ref_strategy}"
    return df


def add_timing(df: pd.DataFrame, timing: pd.DataFrame | None) -> pd.DataFrame:
    """The timing phase's columns (timing.csv) joined on (cell, strategy); systems timed but not
    evaluated (a plain AT's CTranslate2 twin, `<strategy>-ct2`) become rows of their cell with
    speed columns only."""
    if timing is None or timing.empty:
        return df
    keep = timing[["cell", "strategy", *[c for c in TIMING if c in timing]]]
    merged = df.drop(columns=[c for c in TIMING if c in df]).merge(keep, on=["cell", "strategy"], how="left")
    known = set(zip(df.cell, df.strategy))
    extra = keep[[(c, s) not in known for c, s in zip(keep.cell, keep.strategy)]]
    if extra.empty:
        return merged
    labels = [c for c in ("family", "variant", "task", "decoder", "seed", "distilled", "guided_attention", "options",
                          "teacher") if c in df]
    info = df.drop_duplicates("cell").set_index("cell")[labels]
    extra = extra.join(info, on="cell").assign(strategy_name=extra.strategy, status="ok", error="")
    return pd.concat([merged, extra[extra.cell.isin(info.index)]], ignore_index=True)


def read_hyps(path: Path) -> list[str] | None:
    return path.read_text(encoding="utf-8").split("\n")[:-1] if path.exists() else None


def validation_curve(log: Path) -> pd.DataFrame | None:
    """step, val_loss, val_bleu at each validation of a run's training log (logs/metrics.csv; a step
    validated again after a resume keeps its latest value); None without a log or a validation."""
    if not log.is_file():
        return None
    frame = pd.read_csv(log)
    cols = {"step": "step", "val/loss": "val_loss", "val/bleu": "val_bleu"}
    if "val/loss" not in frame:
        return None
    frame = frame.reindex(columns=list(cols)).rename(columns=cols).dropna(subset=["val_loss"])
    return None if frame.empty else frame.drop_duplicates("step", keep="last").reset_index(drop=True)


def read_metrics(run_dir: Path) -> dict | None:
    """A cell's metrics.json ({"status": "ok" | "failed", "rows": [...]}, "error" when failed), or None
    when there is none; one of another shape (hand-edited, cut short) is an AtnatError naming it."""
    path = run_dir / "metrics.json"
    if not path.exists():
        return None
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise AtnatError(f"{path}: not a readable results record ({err})") from None
    problem = None
    if not isinstance(meta, dict):
        problem = f"expected a JSON object with status and rows, got a {type(meta).__name__}"
    elif meta.get("status") not in ("ok", "failed"):
        problem = f"status is {meta.get('status')!r}, expected 'ok' or 'failed'"
    elif not isinstance(meta.setdefault("rows", []) if meta["status"] == "failed" else meta.get("rows"), list) \
            or not all(isinstance(r, dict) for r in meta["rows"]):
        problem = "rows is not a list of result rows"
    elif meta["status"] == "ok" and not meta["rows"]:
        problem = "status ok but no result rows"
    if problem:
        raise AtnatError(f"{path}: not a results record of atnat: {problem}")
    return meta


def tabulate(grid: Grid, out: Path, describe) -> pd.DataFrame:
    """Gather every cell's metrics.json and curves into the grid's tables; returns results.csv."""
    runs = out / "runs"
    rows, curves, samples = [], {c: [] for c in (*CURVES, "validation")}, []
    for cell in grid.cells:
        run_dir = runs / cell.name
        info = describe(cell)
        try:
            meta = read_metrics(run_dir) or {"status": "not run", "rows": []}
        except AtnatError as err:
            meta = {"status": "failed", "error": str(err), "rows": []}
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
        validation = validation_curve(run_dir / "logs" / "metrics.csv")
        if validation is not None:
            curves["validation"].append(validation.assign(cell=cell.name))
    timing_path = out / "timing.csv"
    df = add_timing(pd.DataFrame(rows), pd.read_csv(timing_path) if timing_path.exists() else None)
    ev = grid.cells[0].config.eval if grid.cells else None
    df = add_significance(df, runs, method=ev.significance if ev else "bs", n=ev.n_bootstrap if ev else 1000)
    order = [c.name for c in schema.columns()]
    df = df.assign(**{col: float("nan") for col in order if col not in df})
    df = df[order + [c for c in df.columns if c not in order]]
    out.mkdir(parents=True, exist_ok=True)
    write_csv(df, out / "results.csv")
    (out / "curves").mkdir(exist_ok=True)
    for name, frames in curves.items():
        if frames:
            write_csv(pd.concat(frames, ignore_index=True), out / "curves" / f"{name}.csv")
    if samples:
        write_csv(pd.concat(samples, ignore_index=True), out / "samples.csv")
    return df


def cpu_info(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict:
    """The CPU model and the vector instruction set torch uses: results move between AVX2 and AVX-512."""
    import torch

    model = platform.processor() or platform.machine()
    flags: set[str] = set()
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name") and ":" in line:
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and ":" in line:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    vector = [f for f in ("avx512f", "avx512_bf16", "amx_tile", "avx2", "fma", "neon", "asimd") if f in flags]
    capability = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else ""
    return {"cpu_model": model, "cpu_flags": " ".join(vector), "torch_cpu_capability": capability,
            "cpu_count": __import__("os").cpu_count()}


def environment(grid: Grid, wall_time: float, command: str) -> dict:
    import pytorch_lightning
    import sacrebleu
    import torch

    here = Path(__file__).parent
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=here,
                                timeout=5).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "."],
                                 capture_output=True, text=True, cwd=here.parent, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit, changed = "", ""
    dirty = bool(changed) if commit else None  # tracked files edited since the commit: the code is not that commit
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else \
        f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    return {"command": command, "device": device, **cpu_info(), "python": platform.python_version(),
            "torch": torch.__version__, "lightning": pytorch_lightning.__version__, "sacrebleu": sacrebleu.__version__,
            "wall_time_s": round(wall_time, 1), "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() - wall_time)),
            "git_commit": commit, "git_dirty": dirty, "grid": str(grid.path)}
