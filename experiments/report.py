"""The report of one grid: report.md, a self-contained report.html, and figures/*.png.

Regenerated from the results folder alone (results.csv, curves/*.csv, samples.csv, environment.json),
so a report can be rebuilt without rerunning the grid. The document is built once as blocks and
rendered twice, so both files show the same formatted numbers; absent optional inputs become notes.
"""

from __future__ import annotations

import base64
import html
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from atnat.experiments import figures
from atnat.experiments.figures import pareto_front, system_label
from atnat.experiments.integrity import check_row_count, check_tables
from atnat.models.errors import AtnatError

__all__ = ["REQUIRED_COLUMNS", "GridResults", "load_results", "markdown_table", "pareto_front", "write_report"]

# Columns of results.csv the report reads; the grid runner writes more, which are ignored here.
NUMERIC_COLUMNS = (
    "bleu", "chrf", "bleu_ci_low", "bleu_ci_high", "bleu_p_vs_at", "exact_match",
    "latency_ms_b1", "throughput_sents_s", "speedup_vs_at", "throughput_speedup_vs_at",
    "decoder_passes", "repetition_rate", "length_exact", "length_within1", "mixing_rate",
)  # fmt: skip
REQUIRED_COLUMNS = ("cell", "task", "decoder", "strategy", "guided_attention", *NUMERIC_COLUMNS,
                    "status", "error")  # fmt: skip
SAMPLE_COLUMNS = ("cell", "strategy", "index", "source", "reference", "hypothesis")


@dataclass(frozen=True)
class GridResults:
    """Everything the report reads from one results folder; optional parts are None if absent."""

    name: str  # grid name = folder name
    root: Path  # the results folder
    table: pd.DataFrame  # results.csv, numeric columns as floats, one row per cell x strategy
    curves: dict[str, pd.DataFrame | None]  # curves/<name>.csv by figures.CURVE_COLUMNS name
    samples: pd.DataFrame | None  # samples.csv
    environment: dict | None  # environment.json


def _read_csv(path: Path, required: tuple[str, ...], numeric: tuple[str, ...]) -> pd.DataFrame | None:
    """The CSV at path checked for its columns; None when the file is absent or has no rows."""
    if not path.is_file():
        return None
    try:
        df = pd.read_csv(path, keep_default_na=True)
    except pd.errors.EmptyDataError:
        return None
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise AtnatError(f"{path}: not a readable CSV file ({e})") from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise AtnatError(f"{path}: missing required column(s) {', '.join(missing)}; "
                         f"expected at least: {', '.join(required)}")  # fmt: skip
    for col in numeric:
        values = pd.to_numeric(df[col], errors="coerce")
        bad = df[col].notna() & values.isna()
        if bad.any():
            row = int(bad.to_numpy().argmax())
            value = df[col].iloc[row]
            raise AtnatError(f"{path}: column {col} must be numeric; data row {row + 1} has {value!r}")
        df[col] = values.astype(float)
    return None if df.empty else df


def _ok(table: pd.DataFrame) -> pd.DataFrame:
    return table[table["status"] == "ok"]


def _load_table(root: Path) -> pd.DataFrame:
    path = root / "results.csv"
    if not path.is_file():
        raise AtnatError(f"{path}: results.csv not found; is {root} a results folder written by `atnat run`?")
    table = _read_csv(path, REQUIRED_COLUMNS, NUMERIC_COLUMNS)
    if table is None:
        raise AtnatError(f"{path}: results.csv has no rows")
    labels = ["cell", "task", "decoder", "strategy"]
    table[labels] = table[labels].astype(str)
    table["status"] = table["status"].fillna("").astype(str).str.strip().str.lower()
    table["error"] = table["error"].astype(object).fillna("").astype(str)
    flags = table["guided_attention"].astype(str).str.strip().str.lower()
    table["guided_attention"] = flags.isin(["true", "1", "1.0", "yes"])  # CSV spellings of True
    return table


def _load_environment(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        env = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise AtnatError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(env, dict):
        raise AtnatError(f"{path}: expected a JSON object of environment fields")
    return env


def load_results(results_dir: Path) -> GridResults:
    """Read and check a results folder; AtnatError names the file and what is missing."""
    root = Path(results_dir)
    if not root.is_dir():
        raise AtnatError(f"{root}: results folder not found")
    environment = _load_environment(root / "environment.json")
    check_tables(root, environment)  # a CSV cut short is refused before pandas reads it as if whole
    table = _load_table(root)
    check_row_count(root, len(table), environment)
    curves = {}
    for name, cols in figures.CURVE_COLUMNS.items():
        numeric = tuple(c for c in cols if c not in figures.LABEL_COLUMNS)
        curves[name] = _read_csv(root / "curves" / f"{name}.csv", cols, numeric)
    samples = _read_csv(root / "samples.csv", SAMPLE_COLUMNS, ())
    return GridResults(root.resolve().name, root, table, curves, samples, environment)


DASH = "–"  # shown for a value that does not apply (NaN in the table); numbers are formatted once
N_SAMPLES = 3  # sample indices shown per task
MAX_SAMPLE_SYSTEMS = 8  # hypothesis columns per sample table; the rest are named in a note


def _num(x: float, digits: int) -> str:
    return DASH if pd.isna(x) else f"{x:.{digits}f}"


def _auto(x: float) -> str:
    """Three or so significant digits without exponents: 0.84, 12.3, 1520."""
    return DASH if pd.isna(x) else _num(x, 2 if abs(x) < 10 else 1 if abs(x) < 1000 else 0)


def _pct(x: float) -> str:
    return _num(100 * x, 1)


def _pvalue(x: float) -> str:
    return DASH if pd.isna(x) else "<0.001" if x < 0.001 else f"{x:.3f}"


def _length(r: pd.Series) -> str:
    both = pd.notna(r["length_exact"]) or pd.notna(r["length_within1"])
    return f"{_pct(r['length_exact'])} / {_pct(r['length_within1'])}" if both else DASH


def _bleu_ci(r: pd.Series) -> str:
    ci = pd.notna(r["bleu_ci_low"]) and pd.notna(r["bleu_ci_high"])
    return _num(r["bleu"], 2) + (f" [{r['bleu_ci_low']:.2f}, {r['bleu_ci_high']:.2f}]" if ci else "")


# header, source columns (a column is left out when they are all empty for a task), format(row)
OVERVIEW_COLUMNS = (
    ("Cell", ("cell",), lambda r: r["cell"]),
    ("Strategy", ("strategy",), lambda r: r["strategy"]),
    ("BLEU [95% CI]", ("bleu",), _bleu_ci),
    ("chrF", ("chrf",), lambda r: _num(r["chrf"], 1)),
    ("Exact %", ("exact_match",), lambda r: _pct(r["exact_match"])),
    ("Latency ms (b=1)", ("latency_ms_b1",), lambda r: _auto(r["latency_ms_b1"])),
    ("Speed-up ×", ("speedup_vs_at",), lambda r: _num(r["speedup_vs_at"], 2)),
    ("Throughput sent/s", ("throughput_sents_s",), lambda r: _auto(r["throughput_sents_s"])),
    ("Thr. speed-up ×", ("throughput_speedup_vs_at",), lambda r: _num(r["throughput_speedup_vs_at"], 2)),
    ("Passes", ("decoder_passes",), lambda r: _num(r["decoder_passes"], 1)),
    ("Repetition %", ("repetition_rate",), lambda r: _pct(r["repetition_rate"])),
    ("Length exact / ±1 %", ("length_exact", "length_within1"), _length),
    ("Mixing %", ("mixing_rate",), lambda r: _pct(r["mixing_rate"])),
    ("p vs AT", ("bleu_p_vs_at",), lambda r: _pvalue(r["bleu_p_vs_at"])),
)  # fmt: skip


def overview_table(part: pd.DataFrame) -> pd.DataFrame:
    """Formatted rows of one task's finished cells, AT baselines first, otherwise in grid order."""
    rows = part.assign(_nat=part["decoder"] != "at").sort_values("_nat", kind="stable")
    keep = [(h, fmt) for h, cols, fmt in OVERVIEW_COLUMNS
            if h in {"Cell", "Strategy"} or rows[list(cols)].notna().to_numpy().any()]  # fmt: skip
    cells = [[fmt(r) for _, fmt in keep] for _, r in rows.iterrows()]
    return pd.DataFrame(cells, columns=[h for h, _ in keep])


def failures_table(failed: pd.DataFrame) -> pd.DataFrame:
    """One row per failed cell and error message, its strategies joined."""
    rows = []
    for (cell, error), part in failed.groupby(["cell", "error"], sort=False):
        message = " ".join(error.split()) or "(no error message recorded)"
        rows.append({"Cell": cell, "Task": part["task"].iloc[0], "Decoder": part["decoder"].iloc[0],
                     "Strategy": ", ".join(dict.fromkeys(part["strategy"].dropna().astype(str))) or "–", "Status": part["status"].iloc[0],
                     "Error": message if len(message) <= 300 else message[:299] + "…"})  # fmt: skip
    return pd.DataFrame(rows)


def _systems(part: pd.DataFrame, decoders: pd.Series) -> list[str]:
    """Distinct 'cell / strategy' labels of samples, AT cells first, otherwise in file order."""
    first = part.drop_duplicates("system")
    first = first.assign(_nat=first["cell"].map(decoders) != "at").sort_values("_nat", kind="stable")
    return list(first["system"])


def samples_tables(samples: pd.DataFrame, table: pd.DataFrame) -> list[tuple[str, pd.DataFrame, list[str]]]:
    """Per task: (task, table of source, reference and one hypothesis column per system, systems left out)."""
    cells = table.drop_duplicates("cell").set_index("cell")
    s = samples.fillna("").assign(cell=samples["cell"].astype(str), system=system_label(samples))
    s["task"] = s["cell"].map(cells["task"]).fillna("(cell not in results.csv)")
    out = []
    for task, part in s.groupby("task", sort=False):
        systems = _systems(part, cells["decoder"])
        shown = systems[:MAX_SAMPLE_SYSTEMS]
        indices = sorted(part["index"].unique())[:N_SAMPLES]
        part = part[part["index"].isin(indices) & part["system"].isin(shown)]
        wide = part.pivot_table(index=["index", "source", "reference"], columns="system", values="hypothesis",
                                aggfunc="first")  # fmt: skip
        wide = wide.reindex(columns=shown).fillna(DASH).reset_index()
        wide = wide.rename(columns={"index": "#", "source": "Source", "reference": "Reference"})
        out.append((task, wide, systems[MAX_SAMPLE_SYSTEMS:]))
    return out


@dataclass(frozen=True)
class Block:
    """One piece of the document: kind is heading|para|note|table|figure."""

    kind: str  # which renderer applies
    text: str = ""  # heading/paragraph/note text or figure caption; `code` spans allowed
    level: int = 2  # heading level
    frame: pd.DataFrame | None = None  # table cells, already formatted as strings
    path: Path | None = None  # figure PNG (relative to the results folder)


def _summary(g: GridResults) -> str:
    """One paragraph per grid phrased from the numbers: per task, best AT and best NAT system."""
    parts = [_task_summary(task, part) for task, part in _ok(g.table).groupby("task", sort=False)]
    failed, total = g.table.loc[g.table["status"] != "ok", "cell"].nunique(), g.table["cell"].nunique()
    tail = f"; {failed} failed (listed below)." if failed else "."
    return " ".join([*parts, f"{total - failed} of {total} cells finished{tail}"])


def _best(part: pd.DataFrame) -> pd.Series | None:
    scored = part.dropna(subset=["bleu"])
    return None if scored.empty else scored.loc[scored["bleu"].idxmax()]


_SPEEDS = (("speedup_vs_at", "at batch 1"), ("throughput_speedup_vs_at", "in large-batch throughput"))


def _task_summary(task: str, part: pd.DataFrame) -> str:
    """Best AT and best NAT system of one task (by BLEU), their gap, the NAT speed-ups, the front."""
    at, nat = _best(part[part["decoder"] == "at"]), _best(part[part["decoder"] != "at"])
    text = f"On `{task}`,"
    if at is not None:
        text += f" the best AT system is `{at['cell']} / {at['strategy']}` at {at['bleu']:.2f} BLEU"
    else:
        text += " there is no AT baseline"
    if nat is None:
        return text + " and no NAT system."
    text += f"; the best NAT system is `{nat['cell']} / {nat['strategy']}` at {nat['bleu']:.2f} BLEU"
    if at is not None:
        text += f" ({nat['bleu'] - at['bleu']:+.2f} against that AT system)"
    speed = [f"{nat[c]:.2f}× {how}" for c, how in _SPEEDS if pd.notna(nat[c])]
    text += f", with a speed-up over AT greedy of {' and '.join(speed)}" if speed else ""
    front = [f"`{s}`" for s in system_label(pareto_front(part, "speedup_vs_at", "bleu"))]
    return text + (f". The BLEU/speed-up Pareto front holds {', '.join(front)}." if front else ".")


def _reproduce(g: GridResults) -> Block:
    command = (g.environment or {}).get("command")
    if not command:
        return Block("note", "environment.json is missing or has no command: the run is not reproducible.")
    return Block("para", f"To reproduce: `{command}`")


def _overview(g: GridResults) -> list[Block]:
    blocks = [Block("heading", "Overview", 2)]
    env = g.environment or {}
    if env.get("shared_device_timings"):
        blocks.append(Block("note", f"Speed caveat: {env['parallel_cells']} cells ran at once on shared devices "
                            f"({env.get('lanes')}), so latency, throughput and speed-ups were measured under "
                            "load; rerun with one cell per device for clean timings."))
    ok = _ok(g.table)
    for task, part in ok.groupby("task", sort=False):
        blocks += [Block("heading", f"Task `{task}`", 3), Block("table", frame=overview_table(part))]
    if ok.empty:
        blocks.append(Block("note", "No cell finished: there are no results to tabulate."))
    failed = g.table[g.table["status"] != "ok"]
    if not failed.empty:
        blocks += [Block("heading", "Failed cells", 3), Block("table", frame=failures_table(failed))]
    return blocks


def _figures(g: GridResults) -> list[Block]:
    """Draw every figure whose data is present; a one-line note for each one that is not."""
    blocks = [Block("heading", "Figures", 2)]
    for caption, source, path in figures.draw_figures(g.table, g.curves, g.root / "figures"):
        if path is None:
            blocks.append(Block("note", f"{caption}: not drawn, no data for it in {source}."))
        else:
            blocks.append(Block("figure", caption, path=path.relative_to(g.root)))
    return blocks


def _samples(g: GridResults) -> list[Block]:
    blocks = [Block("heading", "Sample outputs", 2)]
    if g.samples is None:
        return blocks + [Block("note", "samples.csv is missing or empty: no sample outputs to show.")]
    for task, frame, hidden in samples_tables(g.samples, g.table):
        blocks += [Block("heading", f"Task `{task}`", 3), Block("table", frame=frame)]
        if hidden:
            blocks.append(Block("note", f"{len(hidden)} more systems in samples.csv: {', '.join(hidden)}."))
    return blocks


def _environment(g: GridResults) -> list[Block]:
    blocks = [Block("heading", "Environment", 2)]
    if g.environment is None:
        return blocks + [Block("note", "environment.json is missing: versions and device are not recorded.")]
    env = dict(g.environment)
    if isinstance(env.get("wall_time_s"), (int, float)):
        env["wall_time_s"] = f"{env['wall_time_s']:.0f} s ({env['wall_time_s'] / 60:.1f} min)"
    frame = pd.DataFrame({"Field": list(env), "Value": [str(v) for v in env.values()]})
    return blocks + [Block("table", frame=frame)]


def build_document(g: GridResults) -> list[Block]:
    """The report as blocks, in section order; draws the figures as a side effect."""
    head = [Block("heading", f"Grid report: {g.name}", 1), Block("para", _summary(g)), _reproduce(g)]
    return head + _overview(g) + _figures(g) + _samples(g) + _environment(g)


def _md_cell(text: object) -> str:
    """Table-safe markdown: one line, pipes escaped, '<tag'-like text escaped so it is not HTML."""
    flat = " ".join(str(text).split()).replace("|", "\\|")
    return re.sub(r"<(?=[A-Za-z/!?])", r"\\<", flat)


def markdown_table(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured markdown table of a frame of strings (pipes escaped, newlines flattened)."""
    lines = ["| " + " | ".join(_md_cell(c) for c in frame.columns) + " |",
             "|" + "|".join("---" for _ in frame.columns) + "|"]  # fmt: skip
    lines += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def _md_block(b: Block) -> str:
    if b.kind == "heading":
        return "#" * b.level + " " + b.text
    if b.kind == "table":
        return markdown_table(b.frame)
    if b.kind == "figure":
        return f"![{b.text}]({b.path.as_posix()})\n\n*{b.text}*"
    return f"> Note: {b.text}" if b.kind == "note" else b.text


def render_markdown(blocks: list[Block]) -> str:
    """The report as markdown; figures are linked by their path relative to the results folder."""
    return "\n\n".join(_md_block(b) for b in blocks) + "\n"


def _inline_html(text: str) -> str:
    """Escaped text with `code` spans turned into <code> elements."""
    return re.sub(r"`([^`]*)`", r"<code>\1</code>", html.escape(text))


def _html_table(frame: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    cells = ("".join(f"<td>{html.escape(str(v))}</td>" for v in row) for row in frame.itertuples(index=False))
    rows = "".join(f"<tr>{c}</tr>" for c in cells)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _html_block(b: Block, root: Path) -> str:
    if b.kind == "heading":
        return f"<h{b.level}>{_inline_html(b.text)}</h{b.level}>"
    if b.kind == "table":
        return _html_table(b.frame)
    if b.kind == "figure":
        data = base64.b64encode((root / b.path).read_bytes()).decode("ascii")
        alt = html.escape(b.text, quote=True)
        img = f'<img alt="{alt}" src="data:image/png;base64,{data}">'
        return f"<figure>{img}<figcaption>{alt}</figcaption></figure>"
    if b.kind == "note":
        return f'<p class="note">Note: {_inline_html(b.text)}</p>'
    return f"<p>{_inline_html(b.text)}</p>"


_CSS = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:0.85em}th{background:#f3f3f3}img{max-width:100%}
th,td{border:1px solid #ccc;padding:3px 7px;text-align:left;vertical-align:top}code{background:#f3f3f3}
.note{color:#666;font-style:italic}figcaption{color:#555;font-size:0.9em}"""


def render_html(blocks: list[Block], root: Path, title: str) -> str:
    """A single HTML file: inline CSS, figures as base64 data URIs, no external references."""
    body = "\n".join(_html_block(b, root) for b in blocks)
    head = f'<meta charset="utf-8"><title>{html.escape(title)}</title><style>{_CSS}</style>'
    return f'<!DOCTYPE html>\n<html lang="en"><head>{head}</head><body>\n{body}\n</body></html>\n'


def write_report(results_dir: Path) -> tuple[Path, Path]:
    """Write report.md, report.html and figures/*.png into results_dir; return (md, html) paths."""
    grid = load_results(Path(results_dir))
    blocks = build_document(grid)
    md_path, html_path = grid.root / "report.md", grid.root / "report.html"
    md_path.write_text(render_markdown(blocks), encoding="utf-8")
    html_path.write_text(render_html(blocks, grid.root, f"Grid report: {grid.name}"), encoding="utf-8")
    return md_path, html_path
