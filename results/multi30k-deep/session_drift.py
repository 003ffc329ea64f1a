"""The same weights timed in several sessions: how far a speed ratio moves between `atnat time` sessions,
against its interval within one session. `en-de-at-s2` (the seed-2 teacher) was timed again beside each new
student of its seed (`atnat time --partial`), so every version of its collected timing.csv in this
repository's history holds one session of the same five systems.

    python results/multi30k-deep/session_drift.py      (from the repository's root; writes session_drift.csv)
"""
from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
CELL = "en-de-at-s2"
PATH = f"results/multi30k-deep/finished-cells/{CELL}/timing.csv"
COLUMNS = ["speedup_vs_at", "speedup_ci_low", "speedup_ci_high", "throughput_speedup_vs_at"]


def versions() -> list[pd.DataFrame]:
    """Every committed version of the cell's timing.csv, and the working tree's."""
    root = HERE.parents[1]
    git = lambda *a: subprocess.run(["git", *a], cwd=root, capture_output=True, text=True, check=True).stdout
    found = [pd.read_csv(io.StringIO(git("show", f"{c}:{PATH}"))) for c in git("log", "--format=%H", "--", PATH).split()]
    return found + [pd.read_csv(root / PATH)]


def main() -> None:
    rows = pd.concat(versions(), ignore_index=True)
    rows = rows[rows["cell"] == CELL].drop_duplicates(["timing_session", "strategy"])
    rows = rows[["strategy", "timing_session", *COLUMNS]].sort_values(["strategy", "timing_session"])
    # each session's 95% interval of the ratio, as a half-width relative to the ratio
    within = rows.assign(half_width=(rows["speedup_ci_high"] - rows["speedup_ci_low"]) / 2 / rows["speedup_vs_at"])
    spread = within.groupby("strategy", sort=False).agg(
        sessions=("timing_session", "nunique"), ratio_min=("speedup_vs_at", "min"), ratio_max=("speedup_vs_at", "max"),
        half_width_within=("half_width", "median"),
        throughput_min=("throughput_speedup_vs_at", "min"), throughput_max=("throughput_speedup_vs_at", "max"))
    spread["range_between_sessions"] = spread["ratio_max"] / spread["ratio_min"] - 1
    rows.to_csv(HERE / "session_drift.csv", index=False)
    print(rows.to_string(index=False))
    print()
    print(spread.round(3).to_string())


if __name__ == "__main__":
    main()
