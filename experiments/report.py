"""The report of one grid: report.md, a self-contained report.html, and figures/*.png.

Regenerated from the results folder alone (results.csv, curves/*.csv, samples.csv, environment.json),
so a report can be rebuilt without rerunning the grid. The document is built once as blocks and
rendered twice, so both files show the same formatted numbers; absent optional inputs become notes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from atnat.experiments import figures, schema
from atnat.experiments.aggregate import INTERVALS, aggregate_seeds, beyond_spread, robust_front, significant
from atnat.experiments.blocks import Block, best_cells
from atnat.experiments.figures import pareto_front, system_label
from atnat.experiments.files import write_text_atomic
from atnat.experiments.goals import check_goals, parse_goals
from atnat.experiments.report_html import render_html
from atnat.experiments.integrity import check_row_count, check_tables
from atnat.core.errors import AtnatError

__all__ = ["REQUIRED_COLUMNS", "GridResults", "load_results", "markdown_table", "pareto_front", "write_report"]

# The columns of results.csv the report reads, from their one declaration (experiments/schema.py):
# required ones must be there; the others are read when present (NaN or empty when absent).
NUMERIC_COLUMNS = tuple(c.name for c in schema.columns() if c.kind == "number" and c.required)
REQUIRED_COLUMNS = tuple(c.name for c in schema.columns() if c.required)
OPTIONAL_NUMERIC = tuple(c.name for c in schema.columns() if c.kind == "number" and not c.required)
OPTIONAL_TEXT = tuple(c.name for c in schema.columns() if c.kind == "label" and not c.required)
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
    goals: list = ()  # goals.json: the grid's goals (experiments/goals.py), checked in the report
    notes: str = ""  # notes.md: the authors' hand-written notes (why a goal was missed ...)


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
    extra = {col: pd.to_numeric(table[col], errors="coerce") if col in table else float("nan")
             for col in OPTIONAL_NUMERIC}
    extra |= {col: table[col].astype(object).where(table[col].notna(), "").astype(str) if col in table else ""
              for col in OPTIONAL_TEXT}  # an all-empty column is read as float NaN
    table = table.assign(**extra)
    table["family"] = table["family"].where(table["family"] != "", table["cell"])
    labels = ["cell", "task", "decoder", "strategy"]
    table[labels] = table[labels].astype(str)
    table["status"] = table["status"].fillna("").astype(str).str.strip().str.lower()
    table["error"] = table["error"].astype(object).fillna("").astype(str)
    flags = table["guided_attention"].astype(str).str.strip().str.lower()
    table["guided_attention"] = flags.isin(["true", "1", "1.0", "yes"])  # CSV spellings of True
    return table


def _read_json(path: Path):
    """A JSON file of the results folder; None when absent, AtnatError naming it when not JSON."""
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise AtnatError(f"{path}: not valid JSON ({e})") from None


def _load_environment(path: Path) -> dict | None:
    env = _read_json(path)
    if env is None:
        return None
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
    goals = parse_goals(_read_json(root / "goals.json"), str(root / "goals.json"))
    notes = (root / "notes.md").read_text(encoding="utf-8").strip() if (root / "notes.md").is_file() else ""
    return GridResults(root.resolve().name, root, table, curves, samples, environment, goals, notes)


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


def _spread(r: pd.Series, col: str, digits: int) -> str:
    """mean ± sd over seeds; with one seed, the value and its 95% interval when it has one."""
    if pd.isna(r[col]):
        return DASH
    if r.get("n_seeds", 1) > 1:
        return f"{r[col]:.{digits}f} ± {r[f'{col}_sd']:.{digits}f}"
    low, high = INTERVALS.get(col, (None, None))
    ci = low and pd.notna(r.get(low)) and pd.notna(r.get(high))
    return f"{r[col]:.{digits}f}" + (f" [{r[low]:.{digits}f}, {r[high]:.{digits}f}]" if ci else "")


def _p(r: pd.Series) -> str:
    return _pvalue(r.get("bleu_p_holm_max", r.get("bleu_p_holm")))


# header, source columns (a column is left out when they are all empty for a task), format(row of
# aggregate_seeds). {speed_base} and {p_base} in a header name the task's baselines.
OVERVIEW_COLUMNS = (
    ("System", ("family",), lambda r: r["family"]),
    ("Strategy", ("strategy",), lambda r: r["strategy"]),
    ("Seeds", ("n_seeds",), lambda r: str(int(r["n_seeds"]))),
    ("Mixing %", ("mixing_rate",), lambda r: _pct(r["mixing_rate"])),
    ("BLEU", ("bleu",), lambda r: _spread(r, "bleu", 2)),
    ("Tok. BLEU", ("bleu_tok",), lambda r: _num(r["bleu_tok"], 2)),
    ("chrF", ("chrf",), lambda r: _num(r["chrf"], 1)),
    ("Exact %", ("exact_match",), lambda r: _pct(r["exact_match"])),
    ("Latency ms (b=1)", ("latency_ms_b1",), lambda r: _auto(r["latency_ms_b1"])),
    ("Speed-up × vs {speed_base} (b=1)", ("speedup_vs_at",), lambda r: _spread(r, "speedup_vs_at", 2)),
    ("Speed-up × vs CTranslate2 greedy (b=1)", ("speedup_vs_ct2",), lambda r: _spread(r, "speedup_vs_ct2", 2)),
    ("Throughput sent/s", ("throughput_sents_s",), lambda r: _auto(r["throughput_sents_s"])),
    ("Thr. speed-up ×", ("throughput_speedup_vs_at",), lambda r: _spread(r, "throughput_speedup_vs_at", 2)),
    ("Passes", ("decoder_passes",), lambda r: _num(r["decoder_passes"], 1)),
    ("Memory MiB", ("decode_memory_mb",), lambda r: _auto(r["decode_memory_mb"])),
    ("Repetition %", ("repetition_rate",), lambda r: _pct(r["repetition_rate"])),
    ("Length exact / ±1 %", ("length_exact", "length_within1"), _length),
    ("Error excess", ("cond_error_excess",), lambda r: _num(r["cond_error_excess"], 3)),
    ("p vs {p_base} (Holm)", ("bleu_p_holm",), _p),
)  # fmt: skip
# which way is better for a results.csv column (declared in experiments/schema.py); an overview column
# whose first source column has a direction has its best value per task marked (bold) and its first
# sort click puts the best first
BETTER = schema.better()


def metric_columns(rows: pd.DataFrame) -> tuple:
    """Overview columns of registered metrics (a plugin's too) that OVERVIEW_COLUMNS does not
    show already: header = the column name, formatted with its declared format."""
    covered = {c for _, cols, _ in OVERVIEW_COLUMNS for c in cols}
    from atnat.experiments.metrics.row import METRICS

    extra = [c for name in METRICS.in_order() for c in METRICS.get(name).columns
             if c.kind == "number" and c.shown and c.name not in covered and c.name in rows]
    return tuple((c.name, (c.name,), lambda r, c=c: DASH if pd.isna(r[c.name]) else format(r[c.name], c.fmt or ".3g"))
                 for c in extra)


def _baseline_names(part: pd.DataFrame) -> dict[str, str]:
    """{speed_base}, {p_base}: the baselines named in a task's speed and p-value headers."""
    def name(col: str, fallback: str) -> str:
        values = [v for v in part[col].astype(str) if v]
        if not values:
            return fallback
        strategy = values[0].split(" / ")[-1]
        return f"AT {strategy}"
    return {"speed_base": name("speed_baseline", "AT greedy"), "p_base": name("p_baseline", "AT")}


def _numbers(column: pd.Series) -> pd.Series:
    return column.astype(float) if pd.api.types.is_numeric_dtype(column) else pd.Series(float("nan"), column.index)


def overview_table(part: pd.DataFrame) -> Block:
    """One task's systems (mean over seeds) as a table block, AT first, otherwise in grid order.

    Each column carries the numbers of its first source column and BETTER's direction for that.
    """
    agg = aggregate_seeds(part)
    rows = agg.assign(_nat=agg["decoder"] != "at").sort_values("_nat", kind="stable")
    several = bool((rows["n_seeds"] > 1).any())
    names = _baseline_names(part)
    keep = [(h.format(**names), cols, fmt) for h, cols, fmt in OVERVIEW_COLUMNS + metric_columns(rows)
            if h in {"System", "Strategy"} or (h == "Seeds" and several)
            or (h != "Seeds" and rows[list(cols)].notna().to_numpy().any())]  # fmt: skip
    cells = [[fmt(r) for _, _, fmt in keep] for _, r in rows.iterrows()]
    frame = pd.DataFrame(cells, columns=[h for h, _, _ in keep])
    values = pd.DataFrame({h: _numbers(rows[cols[0]]).to_numpy() for h, cols, _ in keep})
    return Block("table", frame=frame, values=values, better=tuple(BETTER.get(c[0], "") for _, c, _ in keep))


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


def _summary(g: GridResults) -> str:
    """One paragraph per grid phrased from the numbers: per task, best AT and best NAT system, and
    whether they differ beyond the seed spread (aggregate.py's rules) or are tied."""
    parts = [_task_summary(task, part) for task, part in _ok(g.table).groupby("task", sort=False)]
    failed, total = g.table.loc[g.table["status"] != "ok", "cell"].nunique(), g.table["cell"].nunique()
    tail = f"; {failed} failed (listed below)." if failed else "."
    return " ".join([*parts, f"{total - failed} of {total} cells finished{tail}"])


def _best(agg: pd.DataFrame) -> pd.Series | None:
    scored = agg.dropna(subset=["bleu"])
    return None if scored.empty else scored.loc[scored["bleu"].idxmax()]


def _name(r: pd.Series) -> str:
    seeds = f", {int(r['n_seeds'])} seeds" if r["n_seeds"] > 1 else ""
    return f"`{r['family']} / {r['strategy']}` ({r['bleu']:.2f} BLEU{seeds})"


def _verdict(nat: pd.Series, at: pd.Series) -> str:
    """How the best NAT system compares with the best AT one, claimed only beyond the spread."""
    gap = nat["bleu"] - at["bleu"]
    beyond = beyond_spread(nat, at, "bleu")
    tested = str(nat.get("p_baseline", "")).split(" / ")[-1] == at["strategy"]  # p is against that system
    agrees = significant(nat) if tested else True
    where = "behind" if gap < 0 else "ahead of"
    if beyond and agrees:
        how = "beyond the seed spread" if nat["n_seeds"] > 1 and at["n_seeds"] > 1 else "beyond the 95% intervals"
        test = " and significant (Holm p < 0.05 in every seed)" if tested else ""
        return f"{abs(gap):.2f} BLEU {where} it, {how}{test}"
    several = nat["n_seeds"] > 1 and at["n_seeds"] > 1
    why = ("not significant in every seed (Holm)" if beyond else
           "within the spread over seeds" if several else "within the 95% intervals; one seed")
    return f"tied with it ({gap:+.2f} BLEU, {why})"


def _mixing(agg: pd.DataFrame) -> str:
    """Dialect-like tasks: which systems mix target variants inside a sentence, and how often."""
    rows = agg.dropna(subset=["mixing_rate"])
    if rows.empty:
        return ""
    ordered = rows.sort_values("mixing_rate", kind="stable")
    listed = ", ".join(f"`{r['family']} / {r['strategy']}` {100 * r['mixing_rate']:.1f}%" for _, r in ordered.iterrows())
    return f" Variant mixing (sentences whose words come from more than one target variant): {listed}."


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _task_summary(task: str, part: pd.DataFrame) -> str:
    """Mixing first where a task measures it; best AT and best NAT system (mean BLEU), the verdict,
    the NAT speed-ups, and the front of systems not clearly beaten in both BLEU and speed-up."""
    agg = aggregate_seeds(part)
    mixing = _mixing(agg)
    at, nat = _best(agg[agg["decoder"] == "at"]), _best(agg[agg["decoder"] != "at"])
    rest = f"the best AT system is {_name(at)}" if at is not None else "there is no AT baseline"
    text = f"On `{task}`:{mixing} {_capital(rest) if mixing else rest}"
    if nat is None:
        return text + " and no NAT system."
    text += f"; the best NAT system is {_name(nat)}"
    if at is not None:
        text += ", " + _verdict(nat, at)
    speed = [f"{nat[c]:.2f}× {how}" for c, how in _SPEEDS if pd.notna(nat[c])]
    text += f", with a speed-up over AT greedy of {' and '.join(speed)}" if speed else ""
    front = robust_front(agg, "speedup_vs_at", "bleu")
    listed = [f"`{r['family']} / {r['strategy']}`" for _, r in front.iterrows()]
    return text + (f". Not clearly beaten in both BLEU and speed-up: {', '.join(listed)}." if listed else ".")


_SPEEDS = (("speedup_vs_at", "at batch 1"), ("throughput_speedup_vs_at", "in large-batch throughput"))


def _definitions(g: GridResults) -> list[Block]:
    """How the numbers are made: metric definitions the tables rely on."""
    table, env = g.table, g.environment or {}
    method = {"bs": "bootstrap resampling", "ar": "approximate randomisation"}.get(env.get("significance"), "")
    if env.get("n_bootstrap"):
        method += f" ({env['n_bootstrap']} resamples)"
    text = [
        ("BLEU", "sacreBLEU defaults (cased, detokenised; `13a`, or `none` for symbol tasks) against every "
                 "reference stream of the test set (dialect: every variant). With one seed, [95% bootstrap "
                 "interval]; with several, mean ± sd over seeds (per-seed rows in results.csv)."),
        ("Tok. BLEU", "BLEU on Moses-tokenised text (sacremoses), as NAT papers report it: comparable with their "
                      "tables, not with sacreBLEU."),
        ("Speed", "measured after training in one process, every system of a task side by side: each test "
                  "sentence (batch 1) or batch is decoded by every system in turn, in rotating order, repeated, "
                  "median per call. Speed-up = total time of the AT greedy baseline / the system's, on the same "
                  "sentences, [95% paired bootstrap interval over sentences] (batches, for throughput)."),
        ("vs CTranslate2", "the same, against the plain AT cell's weights exported to CTranslate2 (float32) and "
                           "decoded greedily by it in the same timing phase (rows `...-ct2`): the fastest AT a user "
                           "could deploy. Its passes are not observable."),
        ("Memory", "peak memory of a large-batch decode above what the process held before it (CPU: VmHWM "
                   "reset per call; CUDA: peak allocated tensors)."),
        ("Error excess", "P(error | previous alignment column an error) − P(error | previous column a match), "
                         "over Levenshtein alignments with the closest reference, minus the same difference "
                         "expected if each sentence's errors were in random order: 0 = errors do not follow "
                         "errors beyond what their number explains; > 0 = they propagate."),
        ("p", f"paired test{f' ({method})' if method else ''} of BLEU against the task's AT baseline "
              "(sacrebleu; same sentences), Holm-corrected over the systems of the task and seed; with several "
              "seeds, the largest over seeds. A difference is stated in the summary only when it exceeds the "
              "seed spread (or, with one seed, the 95% intervals) and the test agrees."),
    ]
    present = {"Tok. BLEU": "bleu_tok", "Memory": "decode_memory_mb", "Error excess": "cond_error_excess",
               "vs CTranslate2": "speedup_vs_ct2"}
    rows = [(k, v) for k, v in text if k not in present or table[present[k]].notna().any()]
    return [Block("heading", "How to read the numbers", 2),
            Block("table", frame=pd.DataFrame(rows, columns=["Column", "Definition"]))]


def _goals(g: GridResults) -> list[Block]:
    """The grid's goals, each met / missed / not measured by the numbers of this report, then the
    authors' notes (notes.md) under a heading that says they are written by hand."""
    blocks = []
    if g.goals:
        checked = check_goals(g.goals, aggregate_seeds(_ok(g.table)))
        met = int((checked["Result"] == "met").sum())
        frame = checked.assign(**{c: checked[c].map(lambda v: DASH if pd.isna(v) else f"{v:.2f}")
                                  for c in ("Value", "Target")},
                               **{"Speed-up vs AT greedy": checked["Speed-up vs AT greedy"].map(
                                   lambda v: DASH if pd.isna(v) else f"{v:.2f}×")})
        blocks += [Block("heading", "Goals", 2),
                   Block("para", f"{met} of {len(checked)} goals set in the grid file met (seeds averaged)."),
                   Block("table", frame=frame)]
    if g.notes:
        blocks += [Block("heading", "Notes (written by the authors, not generated)", 2)]
        blocks += [Block("para", " ".join(p.split())) for p in g.notes.split("\n\n") if p.strip()]
    return blocks


def _reproduce(g: GridResults) -> Block:
    command = (g.environment or {}).get("command")
    if not command:
        return Block("note", "environment.json is missing or has no command: the run is not reproducible.")
    return Block("para", f"To reproduce: `{command}`")


def _overview(g: GridResults) -> list[Block]:
    blocks = [Block("heading", "Overview", 2)]
    ok = _ok(g.table)
    for task, part in ok.groupby("task", sort=False):
        blocks += [Block("heading", f"Task `{task}`", 3), overview_table(part)]
        sessions = part.loc[part["timing_session"] != "", ["cell", "timing_session"]].drop_duplicates()
        if sessions["timing_session"].nunique() > 1:
            latest = sessions["timing_session"].max()
            apart = sorted(sessions.loc[sessions["timing_session"] != latest, "cell"].unique())
            blocks.append(Block("note", f"Speed of {', '.join(f'`{c}`' for c in apart)} was measured in an "
                                        f"earlier timing phase (their checkpoints are gone), not side by side "
                                        f"with the others (timed {latest}): compare their speed-ups with care."))
    if ok.empty:
        blocks.append(Block("note", "No cell finished: there are no results to tabulate."))
    else:
        blocks.insert(1, Block("para", "Bold marks the best value of a column within its task."))
    kept = (g.environment or {}).get("stale_cells_kept") or {}
    if kept:
        blocks.append(Block("note", "Kept on the user's word (`--stale keep`) although the grid's settings changed "
                                    "since they ran, so their numbers come from other settings: "
                                    + "; ".join(f"`{cell}` ({why})" for cell, why in kept.items()) + "."))
    failed = g.table[g.table["status"] != "ok"]
    if not failed.empty:
        blocks += [Block("heading", "Failed cells", 3), Block("table", frame=failures_table(failed))]
    return blocks


def _figures(g: GridResults) -> tuple[list[Block], list[Block]]:
    """Draw every figure whose data is present (a one-line note for each one that is not).

    Returns the headline figure (figures.FIGURES' first, quality vs speed) apart from the others.
    """
    blocks = []
    for caption, source, path in figures.draw_figures(g.table, g.curves, g.root / "figures"):
        if path is None:
            blocks.append(Block("note", f"{caption}: not drawn, no data for it in {source}."))
        else:
            blocks.append(Block("figure", caption, path=path.relative_to(g.root)))
    return blocks[:1], [Block("heading", "Figures", 2), *blocks[1:]]


def _samples(g: GridResults) -> list[Block]:
    blocks = [Block("heading", "Sample outputs", 2, folded=True)]
    if g.samples is None:
        return blocks + [Block("note", "samples.csv is missing or empty: no sample outputs to show.")]
    for task, frame, hidden in samples_tables(g.samples, g.table):
        blocks += [Block("heading", f"Task `{task}`", 3), Block("table", frame=frame)]
        if hidden:
            blocks.append(Block("note", f"{len(hidden)} more systems in samples.csv: {', '.join(hidden)}."))
    return blocks


def _environment(g: GridResults) -> list[Block]:
    blocks = [Block("heading", "Environment", 2, folded=True)]
    if g.environment is None:
        return blocks + [Block("note", "environment.json is missing: versions and device are not recorded.")]
    env = dict(g.environment)
    if isinstance(env.get("wall_time_s"), (int, float)):
        env["wall_time_s"] = f"{env['wall_time_s']:.0f} s ({env['wall_time_s'] / 60:.1f} min)"
    frame = pd.DataFrame({"Field": list(env), "Value": [str(v) for v in env.values()]})
    return blocks + [Block("table", frame=frame)]


def build_document(g: GridResults) -> list[Block]:
    """The report as blocks, in section order; draws the figures as a side effect.

    The summary and the quality-vs-speed figure come first, then the tables, the definitions of
    their columns, the other figures, the samples and the environment.
    """
    headline, other_figures = _figures(g)
    head = [Block("heading", f"Grid report: {g.name}", 1), Block("para", _summary(g)), _reproduce(g), *headline]
    return head + _goals(g) + _overview(g) + _definitions(g) + other_figures + _samples(g) + _environment(g)


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


def _md_block(b: Block) -> str:
    if b.kind == "heading":
        return "#" * b.level + " " + b.text
    if b.kind == "table":
        return markdown_table(b.frame, best_cells(b))
    if b.kind == "figure":
        return f"![{b.text}]({b.path.as_posix()})\n\n*{b.text}*"
    return f"> Note: {b.text}" if b.kind == "note" else b.text


def render_markdown(blocks: list[Block]) -> str:
    """The report as markdown; figures are linked by their path relative to the results folder."""
    return "\n\n".join(_md_block(b) for b in blocks) + "\n"


def write_report(results_dir: Path) -> tuple[Path, Path]:
    """Write report.md, report.html and figures/*.png into results_dir; return (md, html) paths."""
    grid = load_results(Path(results_dir))
    blocks = build_document(grid)
    md_path, html_path = grid.root / "report.md", grid.root / "report.html"
    write_text_atomic(md_path, render_markdown(blocks))
    write_text_atomic(html_path, render_html(blocks, grid.root, f"Grid report: {grid.name}"))
    return md_path, html_path
