"""What a training run is doing, for the person waiting on it.

Every run writes `<run>/progress.json` (atomically): its phase, step, training loss, the last
validation scores, elapsed time and ETA; and prints a line at each validation (its worker.log
then shows the run's course; the Lightning callback that does it is progress_reporter.py). `atnat run`
and `atnat status` read these files and show one line per running cell.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

from atnat.experiments.files import atomic_write_bytes

FILE = "progress.json"


def write_progress(run_dir: Path, **fields) -> None:
    """Merge `fields` into <run>/progress.json (atomic), stamped with the time."""
    path = Path(run_dir) / FILE
    state = read_progress(run_dir) or {}
    state.update(fields, updated=time.time())
    atomic_write_bytes(path, json.dumps(state, default=float).encode())


def record_end(run_dir: Path, error: BaseException | None = None) -> None:
    """The run's last word in progress.json, where it has one: `done`, or what stopped it and at which step
    (a run stopped by Ctrl-C, a signal or an error would otherwise still read "training" there). A kill
    leaves no word: `atnat status` reads a dead lock holder as interrupted."""
    state = read_progress(run_dir)
    if state is None:
        return
    if error is None:
        write_progress(run_dir, phase="done")
        return
    why = "interrupted" if isinstance(error, KeyboardInterrupt) else f"failed: {type(error).__name__}"
    at = f" at step {state['step']}" if "step" in state else ""
    was = state.get("phase", "training")
    write_progress(run_dir, phase=f"stopped{at} while {was.split(':')[0]} ({why})")


def counting_phase(run_dir: Path, what: str, total: int, every_s: float = 5.0):
    """A callback for a long count (`on_batch(done)`): writes the phase `what: done/total, ETA` to
    progress.json at most every `every_s` seconds, and once at the end."""
    started = last = time.time()
    write_progress(run_dir, phase=f"{what}: 0/{total}")

    def on_batch(done: int) -> None:
        nonlocal last
        now = time.time()
        if now - last < every_s and done < total:
            return
        last = now
        eta = (total - done) * (now - started) / done if done else math.inf
        write_progress(run_dir, phase=f"{what}: {done}/{total}, ETA {_minutes(eta)}")

    return on_batch


def read_progress(run_dir: Path) -> dict | None:
    """The run's progress.json, its numbers kept only where they are finite numbers (it is read while the
    run writes it, and shown, never trusted); None where it cannot be read as an object."""
    try:
        state = json.loads((Path(run_dir) / FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict):
        return None
    number = lambda v: not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
    state = {k: v for k, v in state.items() if k not in NUMBERS or number(v)}
    if not isinstance(state.get("phase", "training"), str):
        state["phase"] = "training"
    return state


NUMBERS = ("step", "max_steps", "loss", "val_loss", "val_bleu", "eta_s", "elapsed_s", "updated", "first_step_at")


def eta_seconds(step: int, max_steps: int, elapsed: float, max_time: float | None, start_step: int = 0) -> float:
    """Seconds left: the remaining steps at this attempt's pace, capped by the time budget left."""
    done = step - start_step
    left = math.inf if done <= 0 or max_steps <= 0 else (max_steps - step) * elapsed / done
    if max_time:
        left = min(left, max(max_time - elapsed, 0.0))
    return left


def _minutes(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "?"
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def describe(state: dict | None, stops_early: bool | None = None) -> str:
    """One line: `training step 120/2000, loss 4.12, val BLEU 12.3, ETA 14 min` (or the phase). A run
    with a plateau rule (train.early_stop_patience; `stops_early`, else the state's own flag) may stop
    before its step budget: its ETA is a bound, `ETA at most 14 min (plateau rule)`."""
    if not state:
        return "starting"
    phase = state.get("phase", "training")
    if phase != "training":
        return phase
    parts = [f"step {state.get('step', 0)}/{state.get('max_steps', '?')}"]
    if state.get("loss") is not None:
        parts.append(f"loss {state['loss']:.3g}")
    for key, name in (("val_loss", "val loss"), ("val_bleu", "val BLEU")):
        if state.get(key) is not None:
            parts.append(f"{name} {state[key]:.3g}")
    bound = state.get("stops_early", False) if stops_early is None else stops_early
    eta = _minutes(state.get("eta_s"))
    parts.append(f"ETA at most {eta} (plateau rule)" if bound and eta != "?" else f"ETA {eta}")
    return "training " + ", ".join(parts)
