"""The report as one self-contained HTML page: inline CSS and script, figures as base64 data URIs.

Sections (level-2 headings) get anchors and a table of contents; a folded section and a table
longer than FOLD_ROWS rows sit in a closed <details>; each ranked column's best value is marked;
every table sorts on a header click or Enter (assets/report.js, which also exposes
`window.atnatReport.sortTable` and sets `data-report-ready` on <body> once it has run).
"""

from __future__ import annotations

import base64
import html
import re
from importlib import resources
from pathlib import Path

import numpy as np

from atnat.experiments.reporting.blocks import Block, best_cells

FOLD_ROWS = 25  # a table with more rows than this starts closed
NOWRAP_CHARS = 24  # a column whose cells are all this short is never wrapped (names, numbers)
_NUMBER = re.compile(r"[<>]?[-+]?\d[\d.]*(e[-+]?\d+)?%?( .*)?")  # a cell that reads as a number first
_DASHES = {"", "–", "—", "-"}  # cells that stand for a missing value


def _asset(name: str) -> str:
    return resources.files("atnat.experiments.reporting").joinpath("assets", name).read_text(encoding="utf-8")


def _inline_html(text: str) -> str:
    """Escaped text with `code` spans turned into <code> elements."""
    return re.sub(r"`([^`]*)`", r"<code>\1</code>", html.escape(text))


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def _anchors(blocks: list[Block]) -> dict[int, str]:
    """A unique id for each level-2 and level-3 heading, by block index; level 3 prefixed by its section."""
    anchors, section, seen = {}, "", set()
    for i, b in enumerate(blocks):
        if b.kind != "heading" or b.level not in (2, 3):
            continue
        base = _slug(b.text) if b.level == 2 else f"{section}-{_slug(b.text)}"
        anchor, n = base, 1
        while anchor in seen:
            n += 1
            anchor = f"{base}-{n}"
        seen.add(anchor)
        anchors[i] = anchor
        section = anchor if b.level == 2 else section
    return anchors


def _toc(blocks: list[Block], anchors: dict[int, str]) -> str:
    """A two-level table of contents: sections, each with its subsections."""
    items = []
    for i, anchor in anchors.items():
        link = f'<a href="#{anchor}">{_inline_html(blocks[i].text)}</a>'
        if blocks[i].level == 2:
            items.append([link, []])
        elif items:
            items[-1][1].append(f"<li>{link}</li>")
    lis = "".join(f"<li>{link}" + (f"<ul>{''.join(subs)}</ul>" if subs else "") + "</li>" for link, subs in items)
    return f'<nav class="toc" aria-label="Contents"><ul>{lis}</ul></nav>' if items else ""


def _numeric_columns(b: Block) -> list[bool]:
    """Per column: does it hold numbers (right-aligned)? From the block's values, else from its text."""
    if b.values is not None:
        return [bool(b.values.iloc[:, j].notna().any()) for j in range(b.values.shape[1])]
    cells = [[str(v).strip() for v in b.frame.iloc[:, j]] for j in range(b.frame.shape[1])]
    return [any(c not in _DASHES for c in col) and all(c in _DASHES or _NUMBER.fullmatch(c) for c in col)
            for col in cells]  # fmt: skip


def _header(b: Block, j: int, numeric: bool) -> str:
    direction = b.better[j] if b.better else ""
    classes = [c for c, on in (("num", numeric), ("sec", bool(b.secondary) and b.secondary[j])) if on]
    attrs = (f' class="{" ".join(classes)}"' if classes else "") + (
        f' data-better="{direction}" title="{direction} is better"' if direction else "")
    return f"<th{attrs}>{html.escape(str(b.frame.columns[j]))}</th>"


def _cell(text: str, classes: list[str], key: float | None) -> str:
    """One <td>: key (the number behind text, NaN for none) becomes data-v; a best cell is strong."""
    attrs = (f' class="{" ".join(classes)}"' if classes else "") + (
        "" if key is None else f' data-v="{"" if np.isnan(key) else repr(float(key))}"')
    text = html.escape(text)
    return f"<td{attrs}>{f'<strong>{text}</strong>' if 'best' in classes else text}</td>"


def html_table(b: Block) -> str:
    """A sortable table; best values in <strong> with class best, numbers right-aligned and keyed by
    data-v (the number behind the formatted text), long tables in a closed <details>."""
    numeric, best, n_cols = _numeric_columns(b), best_cells(b), b.frame.shape[1]
    keyed = [b.values is not None and numeric[j] for j in range(n_cols)]
    short = [b.frame.iloc[:, j].astype(str).str.len().max() <= NOWRAP_CHARS for j in range(n_cols)]
    rows = []
    for i, row in enumerate(b.frame.itertuples(index=False)):
        folded = [bool(b.secondary) and b.secondary[j] for j in range(n_cols)]
        flags = [(("num", numeric[j]), ("nw", short[j]), ("best", (i, j) in best), ("sec", folded[j]))
                 for j in range(n_cols)]
        cells = [_cell(str(v), [c for c, on in flags[j] if on], b.values.iat[i, j] if keyed[j] else None)
                 for j, v in enumerate(row)]  # fmt: skip
        rows.append(f"<tr>{''.join(cells)}</tr>")
    head = "".join(_header(b, j, numeric[j]) for j in range(n_cols))
    table = f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    if any(b.secondary):  # the first screen shows the headline columns; a button shows the rest
        n = sum(b.secondary)
        table = (f'<div class="folded-columns"><button type="button" class="more-columns" aria-expanded="false">'
                 f'Show {n} more columns</button>{table}</div>')
    if len(rows) > FOLD_ROWS:
        return f'<details class="long"><summary>Show all {len(rows)} rows</summary>{table}</details>'
    return table


def _html_block(b: Block, root: Path, anchor: str | None) -> str:
    if b.kind == "heading":
        id_attr = f' id="{anchor}"' if anchor else ""
        return f"<h{b.level}{id_attr}>{_inline_html(b.text)}</h{b.level}>"
    if b.kind == "table":
        return html_table(b)
    if b.kind == "figure":
        data = base64.b64encode((root / b.path).read_bytes()).decode("ascii")
        alt = html.escape(b.text, quote=True)
        img = f'<img alt="{alt}" src="data:image/png;base64,{data}">'
        return f"<figure>{img}<figcaption>{alt}</figcaption></figure>"
    if b.kind == "note":
        return f'<p class="note">Note: {_inline_html(b.text)}</p>'
    if b.kind == "authored":  # the authors' markdown: paragraphs, their lines, **bold** and `code` kept
        paragraphs = [p for p in re.split(r"\n\s*\n", b.text) if p.strip()]
        return "".join("<p>" + "<br>".join(re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", _inline_html(line))
                                           for line in p.strip().splitlines()) + "</p>" for p in paragraphs)
    return f"<p>{_inline_html(b.text)}</p>"


def _open_section(b: Block, anchor: str) -> tuple[str, str]:
    """The opening and closing tags of a level-2 section: a closed <details> when folded."""
    heading = f"<h2>{_inline_html(b.text)}</h2>"
    if b.folded:
        return f'<details class="section" id="{anchor}"><summary>{heading}</summary>', "</details>"
    return f'<section id="{anchor}">{heading}', "</section>"


def render_html(blocks: list[Block], root: Path, title: str) -> str:
    """A single HTML file: inline CSS and script, figures as base64 data URIs, no external references."""
    anchors = _anchors(blocks)
    parts, close = [], ""
    for i, b in enumerate(blocks):
        if b.kind == "heading" and b.level == 2:
            opening, next_close = _open_section(b, anchors[i])
            parts += [close, opening]
            close = next_close
            continue
        if b.kind == "toc":  # the contents, where the document asks for them (after its first screen)
            parts.append(_toc(blocks, anchors))
            continue
        parts.append(_html_block(b, root, anchors.get(i)))
    parts.append(close)
    body = "\n".join(p for p in parts if p)
    head = (f'<meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(title)}</title><style>{_asset('report.css')}</style>")  # fmt: skip
    script = f"<script>{_asset('report.js')}</script>"
    return f'<!DOCTYPE html>\n<html lang="en"><head>{head}</head><body>\n{body}\n{script}\n</body></html>\n'

