"""A run's test references as files: references.txt, and references-2.txt ... for further reference
streams (written at evaluation, read back by the table and the paired tests)."""
from __future__ import annotations

from pathlib import Path

from atnat.experiments.files import write_text_atomic, written_lines


def write_references(run_dir: Path, streams: list[list[str]]) -> None:
    """references.txt (the test targets) and references-2.txt ... for further reference streams."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for k, stream in enumerate(streams, 1):
        name = "references.txt" if k == 1 else f"references-{k}.txt"
        write_text_atomic(run_dir / name, "\n".join(stream) + "\n")


def read_references(run_dir: Path) -> list[list[str]] | None:
    """The reference streams written by write_references (None if the run has none)."""
    first = run_dir / "references.txt"
    if not first.exists():
        return None
    paths = [first] + sorted(run_dir.glob("references-*.txt"), key=lambda p: int(p.stem.split("-")[1]))
    return [written_lines(p) for p in paths]
