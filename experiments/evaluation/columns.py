"""Every column of results.csv in table order: the labels, each registered metric's own columns
(plugins included), the comparisons, speed and run information (evaluation/schema.py)."""
from __future__ import annotations

import pandas as pd

from atnat.experiments.evaluation.metrics.row import METRICS
from atnat.experiments.evaluation.schema import COMPARISONS, LABELS, PROBES, RUN, SPEED, Column


def columns() -> tuple[Column, ...]:
    """Every column of results.csv, in table order: labels, quality metrics (the registered
    metrics' own columns), comparisons, speed, run information."""
    metric_columns = tuple(col for name in METRICS.in_order() for col in METRICS.get(name).columns)
    return LABELS + metric_columns + PROBES + COMPARISONS + SPEED + RUN


def by_name() -> dict[str, Column]:
    return {c.name: c for c in columns()}


def better() -> dict[str, str]:
    """Column name -> "higher"/"lower" for the columns where one value is better than another."""
    return {c.name: c.better for c in columns() if c.better}


def read_timing(path) -> pd.DataFrame:
    """A timing.csv (evaluation/timing.py) with its label columns read as text, so that a commit such as 9945357
    or 12e4567 in timed_with stays that commit (not the number 9945357.0 or inf)."""
    text = ["cell", "strategy", "fingerprint", "control", *(c.name for c in SPEED if c.kind == "label")]
    return pd.read_csv(path, dtype={name: str for name in text})
