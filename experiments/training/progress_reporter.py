"""The Lightning callback that keeps a training run's progress.json current and prints a line at each
validation (the file's format and its reading: progress.py, which imports no Lightning, so that
`atnat status` starts fast)."""
from __future__ import annotations

import time
from pathlib import Path

import pytorch_lightning as pl

from atnat.experiments.training.progress import describe, eta_seconds, write_progress


class ProgressReporter(pl.Callback):
    """Writes progress.json every `every` steps and at each validation; prints a line per validation."""

    def __init__(self, run_dir: Path, max_steps: int, max_time_s: float | None, every: int = 10,
                 stops_early: bool = False):
        self.run_dir, self.max_steps, self.max_time_s, self.every = Path(run_dir), max_steps, max_time_s, every
        self.stops_early = stops_early  # a plateau rule: the ETA to max_steps is a bound
        self.started, self.start_step = time.time(), 0
        self._first_step_seen = False

    def on_train_start(self, trainer, pl_module) -> None:
        self.started, self.start_step = time.time(), trainer.global_step
        if trainer.is_global_zero:
            write_progress(self.run_dir, phase="training", step=trainer.global_step, max_steps=self.max_steps)

    def _state(self, trainer) -> dict:
        metrics = trainer.callback_metrics
        value = lambda key: float(metrics[key]) if key in metrics else None  # noqa: E731
        elapsed = time.time() - self.started
        return {"phase": "training", "step": trainer.global_step, "max_steps": self.max_steps,
                "loss": value("train/loss"), "val_loss": value("val/loss"), "val_bleu": value("val/bleu"),
                "elapsed_s": elapsed, "stops_early": self.stops_early,
                "eta_s": eta_seconds(trainer.global_step, self.max_steps, elapsed, self._time_left(trainer),
                                     self.start_step)}

    def _time_left(self, trainer) -> float | None:
        """The wall-clock budget of this attempt (max_time_s less what earlier attempts used)."""
        if not self.max_time_s:
            return None
        timer = next((c for c in trainer.callbacks if type(c).__name__ == "Timer"), None)
        before = 0.0
        if timer is not None:
            try:
                before = timer.time_elapsed("train") - (time.time() - self.started)
            except Exception:  # noqa: BLE001  (a Timer without state: no earlier attempt)
                before = 0.0
        return max(self.max_time_s - max(before, 0.0), 0.0)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.is_global_zero and not self._first_step_seen:  # when the first step of this attempt ended
            self._first_step_seen = True
            write_progress(self.run_dir, first_step_at=time.time())
        if trainer.is_global_zero and trainer.global_step % self.every == 0:
            write_progress(self.run_dir, **self._state(trainer))

    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.is_global_zero and not trainer.sanity_checking:
            state = self._state(trainer)
            write_progress(self.run_dir, **state)
            print(f"{self.run_dir.name}: {describe(state)}", flush=True)

    def on_exception(self, trainer, pl_module, exception) -> None:  # the step it stopped at (run_cell says why)
        if trainer.is_global_zero:
            write_progress(self.run_dir, step=trainer.global_step)

    def on_train_end(self, trainer, pl_module) -> None:
        if trainer.is_global_zero:
            write_progress(self.run_dir, phase="evaluating", step=trainer.global_step)
