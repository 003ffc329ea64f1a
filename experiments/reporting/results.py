"""A results folder read back for the report: results.csv, curves/*.csv, samples.csv,
environment.json, goals.json and notes.md, each checked (a file cut short, a missing column or a
non-number where a number belongs is one AtnatError naming the file) before anything is built."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from atnat.core.errors import AtnatError
from atnat.experiments.evaluation.columns import columns
from atnat.experiments.files import read_utf8, sha256
from atnat.experiments.reporting import figures
from atnat.experiments.reporting.goals import parse_goals
from atnat.experiments.reporting.integrity import check_row_count, check_tables
from atnat.experiments.reporting.ranking import RANKING_COLUMNS, RANKING_OPTIONAL

# The columns of results.csv the report reads, from their one declaration (evaluation/schema.py):
# required ones must be there; the others are read when present (NaN or empty when absent).
NUMERIC_COLUMNS = tuple(c.name for c in columns() if c.kind == "number" and c.required)
REQUIRED_COLUMNS = tuple(c.name for c in columns() if c.required)
OPTIONAL_NUMERIC = tuple(c.name for c in columns() if c.kind == "number" and not c.required)
OPTIONAL_TEXT = tuple(c.name for c in columns() if c.kind == "label" and not c.required)
TEXT_COLUMNS = tuple(c.name for c in columns() if c.kind == "label")  # read as text: a commit 9945357 is no number
SAMPLE_COLUMNS = ("cell", "strategy", "index", "source", "reference", "hypothesis")
DEFAULT_MARGIN = 1.0  # BLEU: the equivalence margin when the grid sets none (its `equivalence_margin`)


@dataclass(frozen=True)
class GridResults:
    """Everything the report reads from one results folder; optional parts are None if absent."""

    name: str  # grid name = folder name
    root: Path  # the results folder
    table: pd.DataFrame  # results.csv, numeric columns as floats, one row per cell x strategy
    curves: dict[str, pd.DataFrame | None]  # curves/<name>.csv by figures.CURVE_COLUMNS name
    samples: pd.DataFrame | None  # samples.csv
    environment: dict | None  # environment.json
    goals: list = ()  # goals.json: the grid's goals (reporting/goals.py), checked in the report
    notes: str = ""  # notes.md: the authors' hand-written notes (why a goal was missed ...), when written for this run
    notes_left_out: str = ""  # why a notes.md in the folder was not shown (written for another run)
    extra_tests: pd.DataFrame | None = None  # extra_tests.csv: BLEU on further test splits (eval.extra_tests)
    comparisons: pd.DataFrame | None = None  # comparisons.csv: BLEU differences to each task's AT reference, with
    # intervals over sentences and seeds (reporting/table.py)
    ranking: pd.DataFrame | None = None  # ranking.csv: each system against the next one down, per test set,
    # and the pairs that flip between test sets (reporting/ranking.py)

    @property
    def equivalence_margin(self) -> float:
        """±BLEU inside which a difference's whole interval makes two systems "equivalent" (grid key)."""
        margin = (self.environment or {}).get("equivalence_margin", DEFAULT_MARGIN)
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 <= margin < float("inf"):
            raise AtnatError(f"environment.json of {self.root}: equivalence_margin is {margin!r}, not a number of BLEU")
        return float(margin)

    @property
    def baseline(self) -> str | None:
        """The grid's `baseline` cell (grid key), the AT reference of its comparisons; None: not declared."""
        return (self.environment or {}).get("baseline") or None


SCORES = ("bleu", "chrf")  # point scores on a 0-100 scale (their bootstrap bounds may pass 100 a little)


def _read_csv(path: Path, required: tuple[str, ...], numeric: tuple[str, ...],
              text: tuple[str, ...] = ()) -> pd.DataFrame | None:
    """The CSV at path checked for its columns; None when the file is absent or has no rows. `text`:
    columns read as strings whatever they look like (absent ones ignored)."""
    if not path.is_file():
        return None
    try:
        df = pd.read_csv(path, keep_default_na=True, dtype={c: str for c in text})
    except pd.errors.EmptyDataError:
        return None
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise AtnatError(f"{path}: not a readable CSV file ({e})") from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise AtnatError(f"{path}: missing required column(s) {', '.join(missing)}; "
                         f"expected at least: {', '.join(required)}")  # fmt: skip
    for col in (c for c in numeric if c in df.columns):  # an optional column may be absent
        values = pd.to_numeric(df[col], errors="coerce")
        bad = df[col].notna() & values.isna()
        if bad.any():
            row = int(bad.to_numpy().argmax())
            value = df[col].iloc[row]
            raise AtnatError(f"{path}: column {col} must be numeric; data row {row + 1} has {value!r}")
        outside = values.isin([float("inf"), float("-inf")])  # no table atnat writes holds one
        if col in SCORES:  # a score of sacreBLEU's scale (100.00000000000004 is float rounding)
            outside |= (values < 0) | (values > 100 + 1e-6)
        if outside.any():
            row = int(outside.to_numpy().argmax())
            raise AtnatError(f"{path}: column {col} must be a finite number{' from 0 to 100' if col in SCORES else ''}; "
                             f"data row {row + 1} has {df[col].iloc[row]!r}: not a table atnat wrote, or edited since")
        df[col] = values.astype(float)
    return None if df.empty else df


def ok_rows(table: pd.DataFrame) -> pd.DataFrame:
    return table[table["status"] == "ok"]


RESIDENT_GROWTH = "cpu-resident-growth"  # decode_memory_basis of a CPU memory figure the report does not show


def _without_resident_growth(table: pd.DataFrame, environment: dict | None) -> pd.DataFrame:
    """A CPU memory figure without its basis was read as the growth of the resident size over the decode,
    which stays ~0 when the allocator serves the decode from memory an earlier call freed (a greedy decode
    read 0.01 MiB): not shown (NaN), its basis RESIDENT_GROWTH so that the report says why."""
    on_cpu = table["timing_threads"].notna() | str((environment or {}).get("device", "")).lower().startswith("cpu")
    old = table["decode_memory_mb"].notna() & (table["decode_memory_basis"] == "") & on_cpu
    if not old.any():
        return table
    table = table.copy()
    table.loc[old, "decode_memory_mb"] = float("nan")
    table.loc[old, "decode_memory_basis"] = RESIDENT_GROWTH
    return table


def _load_table(root: Path, environment: dict | None = None) -> pd.DataFrame:
    path = root / "results.csv"
    if not path.is_file():
        raise AtnatError(f"{path}: results.csv not found; is {root} a results folder written by `atnat run`?")
    table = _read_csv(path, REQUIRED_COLUMNS, NUMERIC_COLUMNS, TEXT_COLUMNS)
    if table is None:
        raise AtnatError(f"{path}: results.csv has no rows")
    if "bleu_p_sides" not in table and "bleu_p_vs_at" in table and (environment or {}).get("significance", "bs") == "bs":
        # written before the bootstrap's p was made two-sided: sacrebleu's one tail, doubled (Holm's adjustment
        # scales with its p-values, so the adjusted ones double too)
        for col in ("bleu_p_vs_at", "bleu_p_holm"):
            if col in table:
                table[col] = (2 * pd.to_numeric(table[col], errors="coerce")).clip(upper=1.0)
        table["bleu_p_sides"] = 2.0
        if environment is not None:
            environment["p_doubled_on_read"] = True
    extra = {col: pd.to_numeric(table[col], errors="coerce") if col in table else float("nan")
             for col in OPTIONAL_NUMERIC}
    extra |= {col: table[col].astype(object).where(table[col].notna(), "").astype(str) if col in table else ""
              for col in OPTIONAL_TEXT}  # an all-empty column is read as float NaN
    table = table.assign(**extra)
    table = _without_resident_growth(table, environment)
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
        return json.loads(read_utf8(path, ""))
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
    table = _load_table(root, environment)
    check_row_count(root, len(table), environment)
    curves = {}
    for name, cols in figures.CURVE_COLUMNS.items():
        numeric = tuple(c for c in cols if c not in figures.LABEL_COLUMNS)
        curves[name] = _read_csv(root / "curves" / f"{name}.csv", cols, numeric)
    samples = _read_csv(root / "samples.csv", SAMPLE_COLUMNS, ())
    goals = parse_goals(_read_json(root / "goals.json"), str(root / "goals.json"))
    notes, notes_left_out = notes_of_this_run(root, environment)
    comparisons = _read_csv(root / "comparisons.csv", ("task", "system", "against", "bleu_diff", "diff_ci_low",
                                                        "diff_ci_high"), ("bleu_diff", "diff_ci_low", "diff_ci_high",
                                                                          "n_seeds"))
    extra = _read_csv(root / "extra_tests.csv", ("cell", "task", "strategy", "test_set", "bleu"), ("bleu",))
    numbers = ("system_bleu", "against_bleu", "bleu_diff", "diff_ci_low", "diff_ci_high", *RANKING_OPTIONAL)
    ranking = _read_csv(root / "ranking.csv", tuple(c for c in RANKING_COLUMNS if c not in RANKING_OPTIONAL), numbers)
    name = root.resolve().name
    if (environment or {}).get("interim"):  # <results>/<grid>/interim/: named after its grid
        name = f"{root.resolve().parent.name} (interim)"
    return GridResults(name, root, table, curves, samples, environment, goals, notes,
                       extra_tests=extra, comparisons=comparisons, ranking=ranking, notes_left_out=notes_left_out)


NOTES_STAMP = re.compile(r"<!--\s*notes for the run:\s*(.+?)\s*-->")


def run_identity(root: Path, environment: dict | None) -> str:
    """What a results folder's run is known by: its start time (environment.json) where the run wrote it;
    a report made from collected cells has none, and is known by the sha256 of its results.csv."""
    started = (environment or {}).get("started")
    if started:
        return f"started {started}"
    table = root / "results.csv"
    return f"results.csv sha256 {sha256(table)[:12]}" if table.is_file() else "unknown"


def notes_stamp(root: Path, environment: dict | None) -> str:
    """The first line that ties a notes.md to this folder's run."""
    return f"<!-- notes for the run: {run_identity(root, environment)} -->"


def notes_of_this_run(root: Path, environment: dict | None) -> tuple[str, str]:
    """(notes, why they were left out): notes.md when its first line is this folder's run's stamp
    (notes_stamp), else "" and one sentence saying whose run they describe and how to attach them. Notes
    quote a run's numbers: beside another run's tables (a grid run again) they would state what is not so."""
    path = root / "notes.md"
    if not path.is_file():
        return "", ""
    text = read_utf8(path, "").lstrip("\ufeff").strip()  # (an editor's byte-order mark is no text)
    first, _, rest = text.partition("\n")
    found = NOTES_STAMP.fullmatch(first.strip())
    mine = run_identity(root, environment)
    if found and found.group(1) == mine:
        return rest.strip(), ""
    whose = f"the run {found.group(1)}" if found else "no run (their first line names none)"
    return "", (f"The hand-written notes in notes.md were written for {whose}, not for this one ({mine}): left out, "
                f"since they quote that run's numbers. To attach notes to this run, begin notes.md with the line "
                f"`{notes_stamp(root, environment)}`")
