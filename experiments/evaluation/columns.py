"""Every column of results.csv in table order: the labels, each registered metric's own columns
(plugins included), the comparisons, speed and run information (evaluation/schema.py)."""
from __future__ import annotations

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
