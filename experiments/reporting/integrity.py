"""Refuse result tables that are not whole, instead of reporting them as if they were.

pandas reads a CSV cut mid-row (a writer killed mid-file) without complaint: the short last row
becomes NaNs (a finished cell shown as failed) and the rows after the cut vanish. A file written
by `tabulate` always ends with a newline and has one field per column in every row; results.csv
has the row count that `run_grid` records in environment.json right after writing it.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from atnat.core.errors import AtnatError

REBUILD = ("rebuild the tables with `atnat run {grid}` (same --results folder): it re-reads every finished "
           "cell's metrics.json from runs/ without retraining, then writes the report")


TABLES = ("results.csv", "comparisons.csv", "ranking.csv", "extra_tests.csv", "samples.csv", "timing.csv")  # tabulate's


def check_tables(root: Path, env: dict | None) -> None:
    """Every table the runner writes into the results folder `root` is whole (see the module docstring); other
    CSV files there (an author's own analyses) are not the report's to judge."""
    grid = _grid(env)
    written = (env or {}).get("tables")
    for name in written if isinstance(written, list) else []:
        if name in TABLES and not (root / name).is_file():
            raise AtnatError(f"{root / name}: missing, but the run wrote it (environment.json lists it): without it the "
                             f"report would judge the systems without its rows; {REBUILD.format(grid=grid)}")
    for path in [*(root / name for name in TABLES), *sorted((root / "curves").glob("*.csv"))]:
        if path.is_file():
            check_whole(path, grid)


def tables_written(root: Path) -> list[str]:
    """The tables of TABLES in the results folder `root`, for environment.json's `tables`: the report refuses
    the folder when one of them is gone (check_tables)."""
    return [name for name in TABLES if (root / name).is_file()]


def check_whole(path: Path, grid: str = "GRID") -> None:
    """Refuse a CSV that does not end with a newline or has a row of the wrong width."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        raise AtnatError(f"{path}: the file is cut short: it does not end with a newline, so its last row is "
                         f"incomplete and the rows after it are missing; {REBUILD.format(grid=grid)}")
    reader = csv.reader(io.StringIO(data.decode("utf-8", errors="replace"), newline=""))
    width = len(next(reader, []))
    for record in reader:
        if len(record) != width:
            raise AtnatError(f"{path}: line {reader.line_num} has {len(record)} fields but the header has {width}: "
                             f"the file is damaged (cut short or edited); {REBUILD.format(grid=grid)}")


def check_row_count(root: Path, rows: int, env: dict | None) -> None:
    """A table cut at a row boundary ends cleanly; the runner's row count still tells."""
    expected = (env or {}).get("results_rows")
    if isinstance(expected, int) and expected != rows:
        raise AtnatError(f"{root / 'results.csv'} has {rows} rows, but environment.json records {expected} written "
                         f"by the runner: the table is incomplete or stale; {REBUILD.format(grid=_grid(env))}")


def _grid(env: dict | None) -> str:
    return str((env or {}).get("grid") or "GRID")
