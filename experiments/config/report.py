"""What a grid's report draws: the `report:` section of a grid file."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReportSettings:
    """Settings of the report a grid run writes at its end (reporting/report.py)."""

    figures: bool = True  # draw the PNG figures (most of a report's time); false: the tables
    # and notes only, with a note saying how to draw them later (`atnat report RESULTS_DIR` draws them)
