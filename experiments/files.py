"""Files that outlive a process: every file the runner writes goes through a temporary file in
the same folder, fsynced and renamed into place, so a kill or a full disk never leaves half a file."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same folder, fsynced, then renamed."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def write_json_atomic(path: Path, data) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, default=str))


def write_lines_atomic(path: Path, lines: list[str]) -> None:
    """One line per item, each ending in a newline."""
    write_text_atomic(path, "".join(line + "\n" for line in lines))


def write_csv(df: pd.DataFrame, path: Path) -> None:
    write_text_atomic(path, df.to_csv(index=False))
