"""The report rendered as markdown (report.md): GitHub-flavoured tables, figures linked by their
path relative to the results folder."""
from __future__ import annotations

import re

import pandas as pd

from atnat.experiments.reporting.blocks import Block, best_cells


def _md_cell(text: object) -> str:
    """Table-safe markdown: one line, pipes escaped, '<tag'-like text escaped so it is not HTML."""
    flat = " ".join(str(text).split()).replace("|", "\\|")
    return re.sub(r"<(?=[A-Za-z/!?])", r"\\<", flat)


def markdown_table(frame: pd.DataFrame, bold: set[tuple[int, int]] = frozenset()) -> str:
    """A GitHub-flavoured markdown table of a frame of strings (pipes escaped, newlines flattened);
    the cells at the (row, column) positions in bold are set in bold."""
    lines = ["| " + " | ".join(_md_cell(c) for c in frame.columns) + " |",
             "|" + "|".join("---" for _ in frame.columns) + "|"]  # fmt: skip
    for i, row in enumerate(frame.itertuples(index=False)):
        cells = (f"**{_md_cell(v)}**" if (i, j) in bold else _md_cell(v) for j, v in enumerate(row))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _md_text(text: str) -> str:
    """Text outside `code` spans with '<tag'-like text escaped, so that a name or a message is never HTML in a
    markdown viewer (a code span shows its text as it is)."""
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(p if p.startswith("`") else re.sub(r"<(?=[A-Za-z/!?])", r"\\<", p) for p in parts)


def _md_block(b: Block) -> str:
    if b.kind == "heading":
        return "#" * b.level + " " + _md_text(b.text)
    if b.kind == "table":
        return markdown_table(b.frame, best_cells(b))
    if b.kind == "figure":
        return f"![{b.text}]({b.path.as_posix()})\n\n*{b.text}*"
    if b.kind == "authored":  # the authors' own markdown (notes.md), lines and lists kept
        return _md_text(b.text)
    return f"> Note: {_md_text(b.text)}" if b.kind == "note" else _md_text(b.text)


def render_markdown(blocks: list[Block]) -> str:
    """The report as markdown; figures are linked by their path relative to the results folder."""
    return "\n\n".join(_md_block(b) for b in blocks if b.kind != "toc") + "\n"
