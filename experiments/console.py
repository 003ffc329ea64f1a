"""Terminal output for the commands that print rich tables and trees (`atnat list`, `atnat status`)."""
from __future__ import annotations

from rich.console import Console


class PipeConsole(Console):
    """A console that lets a closed pipe raise, so `atnat list | head -1` ends as every other
    command does (exit 141, nothing on stderr) instead of rich's own exit 1."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError
