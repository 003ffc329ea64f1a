"""How much of the bare training step's speed a whole run keeps, in each step form: one cell of a grid
trained for STEPS steps under each form (each in a process of its own, training only, no evaluation; data
loading, logging, checkpoints and the callbacks included), its train.json `throughput` beside `atnat bench
train`'s bare step of the same model size and form, timed right after it on the same device.

    python results/bench/real_run_forms.py OUT.csv [GRID] [CELL] [STEPS] [FORMS] [BARE] [LIMIT_S]

GRID: default experiments/grids/multi30k.yaml; CELL: default at-s1; STEPS: default 300 (the run validates once,
at its end); FORMS: default eager,compiled; BARE: the bench size to compare with (grid, base, bench, or tiny
for tests; default grid), or none. LIMIT_S: each form's run, and its bare step, stopped (its process group
killed, no checkpoint saved) after that many seconds; the form's row then says so, the next form runs, and the
script exits 1 after writing the table (default: no limit). The runs' folders go to a temporary folder,
removed at the end. Columns: the steady state (after the first 10 steps, which compile) and the whole loop, both without validation; the bare step runs on
as many target tokens a step as the run's steady mean (its sentences of 20 -> 30 tokens, unpadded), in the
run's precision, on the run's CPU threads; `share_of_bare` is the steady tokens per second over the bare
step's.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[2]


def cell_config(grid: str, cell: str, steps: int, form: str) -> dict:
    """The cell's run config, trained for `steps` steps in `form`, validated once at the end, no time cap."""
    from atnat.experiments.running.grid import load_grid

    cells = {c.name: c for c in load_grid(grid).cells}
    if cell not in cells:
        raise SystemExit(f"{grid}: no cell {cell!r}; cells: {', '.join(cells)}")
    if cells[cell].teacher:
        raise SystemExit(f"{grid}: {cell} learns from a teacher; time a cell without one (an AT)")
    raw = json.loads(json.dumps(cells[cell].raw))
    raw["train"] = {**raw.get("train", {}), "max_steps": steps, "val_every_steps": steps, "max_time_s": None,
                    "step": form, "early_stop_patience": None,
                    "devices": 1}  # the bare step is one device's: the run trains on one too (its tokens, its clock)
    raw["name"] = f"{cell}-{form}"
    return raw


class OverLimit(Exception):
    """A form's process ran past its time limit and was stopped."""


def run_limited(command: list[str], limit: float | None) -> None:
    """Run `command` from the repository root; past `limit` seconds kill its whole process group (no SIGTERM,
    which would let a run save its checkpoint past the cap) and raise OverLimit."""
    child = subprocess.Popen(command, cwd=ROOT, start_new_session=True)
    try:
        code = child.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        raise OverLimit from None
    except BaseException:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        raise
    if code:
        raise subprocess.CalledProcessError(code, command)


def train_only(config: Path, run_dir: Path) -> None:
    """Train the run in config (YAML) into run_dir: training alone, the evaluation left out."""
    from atnat.experiments.config.run import load_run_config
    from atnat.experiments.training.train import train

    train(load_run_config(config), run_dir)


def bare_step(size: str, form: str, device: str, precision: str, decoder: str, tokens: int, threads: int | None,
              folder: Path, limit: float | None = None) -> float:
    """`atnat bench train`'s bare step at `size`, in `form`, on as many target tokens a step as the run's mean."""
    out = folder / f"bare-{form}.csv"
    run_limited([sys.executable, "-m", "atnat.experiments.cli", "bench", "train", "--device", device,
                 "--precision", precision, "--forms", form, *(["--tiny"] if size == "tiny" else ["--size", size]),
                 "--decoders", decoder, "--tokens", str(tokens), *(["--threads", str(threads)] if threads else []),
                 "--steps", "10", "--out", str(out)], limit)
    return float(pd.read_csv(out)["tokens_per_s"].iloc[0])


def bench_precision(run_precision: str) -> str | None:
    """The bench's name for the precision the run trained in; None where the bench has none (fp16)."""
    return "bf16" if "bf16" in run_precision else "fp32" if run_precision.startswith("32") else None


def main(out: str, grid: str = "experiments/grids/multi30k.yaml", cell: str = "at-s1", steps: str = "300",
         forms: str = "eager,compiled", bare: str = "grid", limit_s: str = "") -> None:
    if not steps.isdigit() or int(steps) <= 10:
        raise SystemExit(f"STEPS: more than 10 (the first 10 compile and warm up; the steady part comes after), got {steps}")
    try:
        limit = float(limit_s) if limit_s else None
    except ValueError:
        limit = float("nan")
    if limit is not None and not (0 < limit < float("inf")):
        raise SystemExit(f"LIMIT_S: a positive number of seconds, got {limit_s!r}")
    rows, stopped = [], []
    with tempfile.TemporaryDirectory(prefix="real-run-forms-") as tmp:
        folder = Path(tmp)
        for form in forms.split(","):
            raw = cell_config(grid, cell, int(steps), form)
            config = folder / f"{form}.yaml"
            config.write_text(yaml.safe_dump(raw))
            run_dir = folder / form
            try:
                run_limited([sys.executable, __file__, "--train-only", str(config), str(run_dir)], limit)
            except OverLimit:
                stopped.append(form)
                rows.append({"grid": grid, "cell": cell, "form": form, "status": f"stopped at its limit of {limit_s} s"})
                print(f"{form}: stopped at its limit of {limit_s} s", flush=True)
                write_rows(rows, out)
                continue
            info = json.loads((run_dir / "train.json").read_text())
            speed = info.get("throughput") or {}
            steady = speed.get("steady") or {}
            if not steady or speed.get("world_size", 1) != 1:
                raise SystemExit(f"{form}: the run recorded no one-device steady speed in {run_dir / 'train.json'} "
                                 f"(throughput: {json.dumps(speed)[:200]})")
            cuda = info["accelerator"] == "CUDAAccelerator"
            threads = None if cuda else raw["train"].get("num_threads")
            per_step = round(steady["target_tokens"] / steady["steps"])
            row = {"grid": grid, "cell": cell, "form": form, "status": "ok", "decoder": raw["decoder"]["name"],
                   "accelerator": info["accelerator"], "precision": info["precision"], "threads": threads,
                   "steps": speed["steps"], "steady_after_steps": steady["after_steps"],
                   "steady_target_tokens_per_step": per_step, "steady_s_per_step": steady.get("s_per_step"),
                   "steady_target_tokens_per_s": steady.get("target_tokens_per_s"),
                   "steady_graphs_compiled": steady.get("graphs_compiled"),  # > 0: compiling inside the steady part
                   "loop_target_tokens_per_s": speed["target_tokens_per_s"], "loop_s": speed["loop_s"],
                   "validation_s": speed["validation_s"], "target_tokens": speed["target_tokens"]}
            precision = bench_precision(info["precision"])
            if bare != "none" and precision is None:
                print(f"{form}: no bare step in {info['precision']} (the bench times fp32 and bf16)", flush=True)
            elif bare != "none":
                row["bare_size"] = bare
                try:
                    row["bare_target_tokens_per_s"] = bare_step(bare, form, "cuda" if cuda else "cpu", precision,
                                                                row["decoder"], per_step, threads, folder, limit)
                    row["share_of_bare"] = row["steady_target_tokens_per_s"] / row["bare_target_tokens_per_s"]
                except OverLimit:
                    stopped.append(form)
                    row["status"] = f"bare step stopped at its limit of {limit_s} s"
                    print(f"{form}: the bare step stopped at its limit of {limit_s} s", flush=True)
            rows.append(row)
            print(pd.DataFrame([row]).to_string(index=False), flush=True)
            write_rows(rows, out)  # after each form: a time limit hit later keeps this one
    print(pd.DataFrame(rows).to_string(index=False))
    print(f"wrote {out}")
    if stopped:
        raise SystemExit(f"stopped at the time limit: {', '.join(stopped)}")


def write_rows(rows: list[dict], out: str) -> None:
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(out, index=False)


if __name__ == "__main__":
    # stopped from outside (a `timeout`): SystemExit, so that run_limited kills the form's run it started
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if sys.argv[1:2] == ["--train-only"]:
        train_only(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        main(*sys.argv[1:])
