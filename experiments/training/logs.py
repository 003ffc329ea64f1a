"""Training logs that a resume appends to: logs/metrics.csv (and TensorBoard on request).

Lightning's CSVLogger deletes an existing metrics.csv when a run resumes, losing the steps before
the interruption. Here every attempt appends, with an `attempt` column (1 for the first start, 2
after the first resume, ...): steps between the last checkpoint and a kill appear twice, once per
attempt, which is what happened.
"""
from __future__ import annotations

import csv
import os
from pathlib import Path

from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger
from pytorch_lightning.loggers.csv_logs import ExperimentWriter

from atnat.core.errors import AtnatError
from atnat.experiments.config.devices import helper_rank
from atnat.experiments.files import write_text_atomic


class _AppendingWriter(ExperimentWriter):
    """Keeps an existing metrics.csv and its columns; a header change rewrites it atomically."""

    def __init__(self, log_dir: str, attempt: int):
        super().__init__(log_dir)
        self.attempt = attempt
        path = Path(self.metrics_file_path)
        if path.is_file():
            with open(path, newline="") as f:
                self.metrics_keys = next(csv.reader(f), [])

    def _check_log_dir_exists(self) -> None:  # Lightning deletes metrics.csv here; we keep it
        os.makedirs(self.log_dir, exist_ok=True)

    def log_metrics(self, metrics_dict, step=None) -> None:
        super().log_metrics({**metrics_dict, "attempt": self.attempt}, step)

    def _rewrite_with_new_header(self, fieldnames: list[str]) -> None:
        path = Path(self.metrics_file_path)
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fieldnames)
            writer.writeheader()
            writer.writerows(rows)
        os.replace(tmp, path)


def attempts_so_far(path: Path) -> int:
    """The attempts logs/attempts counts (0 when absent). Read back: a file that holds no count is named."""
    try:
        text = path.read_text(encoding="utf-8").strip() if path.is_file() else ""
    except (OSError, UnicodeDecodeError) as err:
        raise AtnatError(f"{path} cannot be read ({err}); it counts the run's training attempts: "
                         "delete it to count from 1 again") from None
    if text and not text.isdigit():
        raise AtnatError(f"{path} holds {text[:40]!r}, not a count of training attempts; delete it to count from 1 again")
    return int(text or 0)


class AppendingCSVLogger(CSVLogger):
    """CSVLogger writing <run>/logs/metrics.csv, appending across resumes (see module docstring)."""

    def __init__(self, run_dir: Path):
        super().__init__(run_dir, name="logs", version="")
        attempts = Path(self.log_dir) / "attempts"
        self.attempt = attempts_so_far(attempts) + 1
        if helper_rank():  # the extra processes of a multi-device run log nothing: only the first counts attempts
            return
        os.makedirs(self.log_dir, exist_ok=True)
        write_text_atomic(attempts, str(self.attempt))

    @property
    def experiment(self) -> _AppendingWriter:
        if self._experiment is None:
            self._experiment = _AppendingWriter(self.log_dir, self.attempt)
        return self._experiment


def make_loggers(names: tuple[str, ...], run_dir: Path) -> list:
    """The Lightning loggers named in train.loggers, all writing under <run>/logs/."""
    loggers = []
    for name in names:
        if name == "csv":
            loggers.append(AppendingCSVLogger(run_dir))
        elif name == "tensorboard":
            try:
                loggers.append(TensorBoardLogger(run_dir, name="logs", version="tensorboard",
                                                 default_hp_metric=False))
            except ModuleNotFoundError as err:
                raise AtnatError(f"train.loggers: tensorboard needs the tensorboard package ({err}); "
                                 "pip install tensorboard") from None
    return loggers
