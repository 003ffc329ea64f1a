"""Which code made a result: the checkout's git commit and whether tracked files were edited since.

Recorded by environment.json for a grid, and per cell by train.json (every training attempt: a
run resumed across code changes names each commit) and metrics.json (the evaluation), so that a
grid that ran for days says which of its cells ran under which code.
"""
from __future__ import annotations

import datetime
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]  # the checkout atnat runs from


def code_version() -> dict:
    """{"git_commit": short hash ("" outside a git checkout), "git_dirty": tracked files outside results/
    edited since that commit (None when unknown)}, read now. A run rewriting its own committed results
    folder does not make itself dirty."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO,
                                timeout=5).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                  ":(exclude)results"],  # results are what runs write, not the code they ran
                                 capture_output=True, text=True, cwd=REPO, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit, changed = "", ""
    return {"git_commit": commit, "git_dirty": bool(changed) if commit else None}


def stamp() -> dict:
    """code_version() with the time now (UTC, seconds): one line of a cell's provenance."""
    return {"time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), **code_version()}


def label(record) -> str:
    """'3eb4ed6', '3eb4ed6*' (tracked files edited since that commit) from a stamp or anything with
    git_commit / git_dirty (environment.json); '' when not recorded."""
    if not isinstance(record, dict) or not record.get("git_commit"):
        return ""
    return str(record["git_commit"]) + ("*" if record.get("git_dirty") else "")


def tracked_files(folder: Path) -> int:
    """How many files under `folder` git tracks (0 outside a checkout, or where git is missing)."""
    folder = Path(folder)
    if not folder.is_dir():
        return 0
    try:
        out = subprocess.run(["git", "ls-files", "--", "."], capture_output=True, text=True, cwd=folder,
                             timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return len(out.splitlines())
