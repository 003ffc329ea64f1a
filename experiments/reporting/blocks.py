"""The report's document model: blocks built once from the results and rendered as markdown and HTML.

A table block may carry the numbers behind its formatted cells and, per column, which way is
better; `best_cells` turns that into the cells to mark, so both renderers mark the same cells and
no renderer knows a column by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

DIRECTIONS = ("", "higher", "lower")  # a table column's better direction; "" = not ranked


@dataclass(frozen=True)
class Block:
    """One piece of the document: kind is heading|para|note|authored (the authors' own markdown, notes.md)|table|
    figure|toc (where the HTML page lists its
    sections; markdown has none)."""

    kind: str  # which renderer applies
    text: str = ""  # heading/paragraph/note text or figure caption; `code` spans allowed
    level: int = 2  # heading level
    frame: pd.DataFrame | None = None  # table cells, already formatted as strings
    path: Path | None = None  # figure PNG (relative to the results folder)
    values: pd.DataFrame | None = None  # table: the numbers behind frame's cells, same shape; NaN = none
    better: tuple[str, ...] = ()  # table with values: per column, a DIRECTIONS entry
    folded: bool = False  # level-2 heading: the HTML page shows its section closed until opened
    secondary: tuple[bool, ...] = ()  # table: per column, folded in the HTML page behind "more columns"

    def __post_init__(self):
        if self.values is not None and (self.frame is None or self.values.shape != self.frame.shape):
            raise ValueError("Block.values must have the shape of Block.frame")
        if self.better and (self.values is None or len(self.better) != self.values.shape[1]):
            raise ValueError("Block.better needs values and one direction per column")
        if not set(self.better) <= set(DIRECTIONS):
            raise ValueError(f"Block.better entries must be among {DIRECTIONS}, got {self.better}")


def best_cells(block: Block) -> set[tuple[int, int]]:
    """(row, column) of each ranked column's best value, ties all included.

    A column is ranked when it has a direction and at least two distinct numbers: a lone number
    or a column of equal values has no best worth marking.
    """
    if block.values is None:
        return set()
    best = set()
    for j, direction in enumerate(block.better):
        column = block.values.iloc[:, j].to_numpy(dtype=float)  # (rows,)
        numbers = column[~np.isnan(column)]
        if not direction or np.unique(numbers).size < 2:
            continue
        target = numbers.max() if direction == "higher" else numbers.min()
        best |= {(int(i), j) for i in np.flatnonzero(column == target)}
    return best
