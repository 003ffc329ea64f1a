"""The report of one grid: report.md, a self-contained report.html, and figures/*.png.

Regenerated from the results folder alone (results.py reads it), so a report can be rebuilt without
rerunning the grid. The document is built here once as blocks (sections: summary, goals, overview
tables, definitions, figures, samples, environment) and rendered twice (markdown.py, html.py), so
both files show the same formatted numbers; absent optional inputs become notes.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd

from atnat.experiments.config.plugins import describe_plugins
from atnat.experiments.evaluation.baseline import is_at_rows
from atnat.experiments.evaluation.columns import better, by_name
from atnat.experiments.evaluation.metrics.row import METRICS
from atnat.experiments.evaluation.schema import MISSING, Column
from atnat.experiments.files import write_text_atomic
from atnat.experiments.provenance import label
from atnat.experiments.reporting import figures, ranking
from atnat.experiments.reporting.aggregate import (
    INTERVALS,
    LATENCY_FLOOR,
    THROUGHPUT_FLOOR,
    aggregate_seeds,
    interval,
    seeds_of,
)
from atnat.experiments.reporting.blocks import Block
from atnat.experiments.reporting.figures import system_label
from atnat.experiments.reporting.goals import check_goals
from atnat.experiments.reporting.headline import headline_blocks
from atnat.experiments.reporting.html import render_html
from atnat.experiments.reporting.judging import _threads_of, summary
from atnat.experiments.reporting.markdown import render_markdown
from atnat.experiments.reporting.results import RESIDENT_GROWTH, GridResults, load_results, ok_rows

DASH = MISSING  # shown for a value that does not apply (NaN in the table); numbers are formatted once
N_SAMPLES = 3  # sample indices shown per task
MAX_SAMPLE_SYSTEMS = 8  # hypothesis columns per sample table; the rest are named in a note


def _num(x: float, digits: int) -> str:
    return DASH if pd.isna(x) else f"{x:.{digits}f}"


def _spread(r: pd.Series, col: str, digits: int, scale: float = 1.0) -> str:
    """mean ± sd over seeds; with one seed, the value and its 95% interval when it has one; "(k of n seeds)"
    after a value that fewer seeds than the system's have (a speed of seeds timed, others not)."""
    if pd.isna(r[col]):
        return DASH
    k, n = seeds_of(r, col), int(r.get("n_seeds", 1) or 1)
    fewer = f" ({k} of {n} seeds)" if k < n else ""
    if k > 1:
        return f"{scale * r[col]:.{digits}f} ± {scale * r[f'{col}_sd']:.{digits}f}{fewer}"
    low, high = interval(r, col) if INTERVALS.get(col) else (float("nan"), float("nan"))  # the headline's (speed:
    ci = pd.notna(low) and pd.notna(high) and low != high  # widened to the A/A noise floor)
    return (f"{scale * r[col]:.{digits}f}" + (f" [{scale * low:.{digits}f}, {scale * high:.{digits}f}]" if ci else "")
            + fewer)


# The overview's columns, in this order, as their declarations (evaluation/schema.py, metrics/row.py)
# present them: heading, scale, format, spread; a registered metric's other shown columns (a plugin's
# too) follow. A column all empty for a task is left out of that task's table.
OVERVIEW_ORDER = ("mixing_rate", "bleu", "bleu_tok", "chrf", "exact_match", "latency_ms_b1", "speedup_vs_at",
                  "speedup_vs_ref_at", "speedup_vs_ct2", "throughput_sents_s", "throughput_speedup_vs_at",
                  "throughput_speedup_vs_ref_at", "decoder_passes", "verifier_passes", "acceptance_length",
                  "verifier_greedy_match", "timed_equals_evaluated",
                  "decode_memory_mb", "repetition_rate", "length_exact", "error_propagation", "bleu_p_holm")
# which way is better for a results.csv column: an overview column with a direction has its best value
# per task marked (bold) and its first sort click puts the best first
BETTER = better()


def show(col: Column, r: pd.Series) -> str:
    """One overview cell of a system (a row of aggregate_seeds) as its column's declaration says."""
    digits = int(col.fmt[1:-1]) if col.fmt[:1] == "." and col.fmt[-1:] == "f" and col.fmt[1:-1].isdigit() else None
    if col.fmt == "p":  # with several seeds, the least significant one
        return col.format(r.get(f"{col.name}_max", r.get(col.name)))
    if col.with_column:
        both = pd.notna(r[col.name]) or pd.notna(r.get(col.with_column))
        return f"{_num(col.scale * r[col.name], 1)} / {_num(col.scale * r[col.with_column], 1)}" if both else DASH
    if col.spread:
        return _spread(r, col.name, digits if digits is not None else 2, col.scale)
    if col.scale != 1.0:
        return _num(col.scale * r[col.name], 1)
    return col.format(r[col.name])


def overview_columns(rows: pd.DataFrame) -> list[Column]:
    """The overview's columns for these rows: OVERVIEW_ORDER, then every other shown metric column."""
    declared = by_name()
    listed = [declared[n] for n in OVERVIEW_ORDER if n in declared]
    extra = [c for name in METRICS.in_order() for c in METRICS.get(name).columns
             if c.kind == "number" and c.shown and c.name not in OVERVIEW_ORDER]
    return [c for c in listed + extra if c.name in rows]


def _baseline_names(part: pd.DataFrame) -> dict[str, str]:
    """{speed_base}, {p_base}: the baselines named in a task's speed and p-value headers."""
    def name(col: str, fallback: str) -> str:
        values = [v for v in part[col].astype(str) if v]
        if not values:
            return fallback
        strategy = values[0].split(" / ")[-1]
        return f"AT {strategy}"
    ref = [v for v in part["ref_at_baseline"].astype(str) if v and v != "nan"] if "ref_at_baseline" in part else []
    return {"speed_base": name("speed_baseline", "AT greedy"), "p_base": name("p_baseline", "AT"),
            "ref_base": re.sub(r"-s\d+$", "", ref[0].split(" / ")[0]) + " greedy" if ref else "the reference AT"}


def _numbers(column: pd.Series) -> pd.Series:
    return column.astype(float) if pd.api.types.is_numeric_dtype(column) else pd.Series(float("nan"), column.index)


def overview_table(part: pd.DataFrame) -> Block:
    """One task's systems (mean over seeds) as a table block, AT first, otherwise in grid order.

    Each column carries its numbers and BETTER's direction for them (bold best, sorting)."""
    agg = aggregate_seeds(part)
    rows = agg.assign(_nat=~is_at_rows(agg)).sort_values("_nat", kind="stable")
    names = _baseline_names(part)
    lead = [("System", None, lambda r: r["family"]), ("Strategy", None, lambda r: r["strategy"])]
    if bool((rows["n_seeds"] > 1).any()):
        lead.append(("Seeds", None, lambda r: str(int(r["n_seeds"]))))
    shown = [(c.heading.format(**names), c, lambda r, c=c: show(c, r)) for c in overview_columns(rows)
             if rows[[c.name] + ([c.with_column] if c.with_column in rows else [])].notna().to_numpy().any()]
    keep = lead + shown
    cells = [[fmt(r) for _, _, fmt in keep] for _, r in rows.iterrows()]
    frame = pd.DataFrame(cells, columns=[h for h, _, _ in keep])
    values = pd.DataFrame({h: (_numbers(rows[c.name]) if c is not None else pd.Series(float("nan"), rows.index))
                           .to_numpy() for h, c, _ in keep})
    return Block("table", frame=frame, values=values, better=tuple(BETTER.get(c.name, "") if c is not None else ""
                                                                   for _, c, _ in keep),
                 secondary=tuple(bool(c is not None and c.secondary) for _, c, _ in keep))


def failures_table(failed: pd.DataFrame) -> pd.DataFrame:
    """One row per failed cell and error message, its strategies joined."""
    rows = []
    for (cell, error), part in failed.groupby(["cell", "error"], sort=False):
        message = " ".join(error.split()) or "(no error message recorded)"
        rows.append({"Cell": cell, "Task": part["task"].iloc[0], "Decoder": part["decoder"].iloc[0],
                     "Strategy": ", ".join(dict.fromkeys(part["strategy"].dropna().astype(str))) or "–",
                     "Status": part["status"].iloc[0],
                     "Error": message if len(message) <= 300 else message[:299] + "…"})  # fmt: skip
    return pd.DataFrame(rows)


def _baseline_cells(table: pd.DataFrame) -> set[str]:
    """The cells holding each task and seed's baseline (results.csv's p_baseline, 'cell / strategy');
    without that column (older tables), the AT cells."""
    named = table["p_baseline"].dropna().astype(str) if "p_baseline" in table.columns else pd.Series(dtype=str)
    if named.empty:
        cells = table.drop_duplicates("cell").set_index("cell")
        return set(cells.index[is_at_rows(cells).to_numpy()])
    return set(named.str.split(" / ").str[0])


def _systems(part: pd.DataFrame, cells: pd.DataFrame, lead: set[str]) -> list[str]:
    """Distinct 'cell / strategy' labels of samples, in the order their columns are shown: one seed's
    systems first (the seed with the most of them; ties: the lowest), the other seeds' after, so that
    the columns shown compare systems, not seeds. Within a seed, each cell's first strategy, then each
    cell's second, and so on, the baseline's cell (`lead`) first and the others as the file lists them
    (the grid's order): every decoder gets a column before any gets its second, and a control declared
    last (an fp32 twin) comes last in each round (`cells`: results.csv's rows, one per cell, indexed by
    cell)."""
    first = part.drop_duplicates("system").reset_index(drop=True)
    seed = first["cell"].map(cells["seed"]) if "seed" in cells.columns else pd.Series(0, index=first.index)
    seed = pd.to_numeric(seed, errors="coerce").fillna(float("inf"))  # an unknown seed last on ties
    counts = seed.value_counts()
    seed_rank = seed.map({v: i for i, v in enumerate(sorted(counts.index, key=lambda v: (-counts[v], v)))})
    cell_order = {c: i for i, c in enumerate(dict.fromkeys(first["cell"]))}
    order = first.assign(_seed=seed_rank, _round=first.groupby("cell").cumcount(),
                         _later=~first["cell"].isin(lead), _cell=first["cell"].map(cell_order))
    order = order.sort_values(["_seed", "_round", "_later", "_cell"], kind="stable")
    return list(order["system"])


def samples_tables(samples: pd.DataFrame, table: pd.DataFrame) -> list[tuple[str, pd.DataFrame, list[str]]]:
    """Per task: (task, table of source, reference and one hypothesis column per system, systems left out)."""
    cells = table.drop_duplicates("cell").set_index("cell")
    s = samples.fillna("").assign(cell=samples["cell"].astype(str), system=system_label(samples))
    s["task"] = s["cell"].map(cells["task"]).fillna("(cell not in results.csv)")
    out, lead = [], _baseline_cells(table)
    for task, part in s.groupby("task", sort=False):
        systems = _systems(part, cells, lead)
        shown = systems[:MAX_SAMPLE_SYSTEMS]
        indices = sorted(part["index"].unique())[:N_SAMPLES]
        part = part[part["index"].isin(indices) & part["system"].isin(shown)]
        wide = part.pivot_table(index=["index", "source", "reference"], columns="system", values="hypothesis",
                                aggfunc="first")  # fmt: skip
        wide = wide.reindex(columns=shown).fillna(DASH).reset_index()
        wide = wide.rename(columns={"index": "#", "source": "Source", "reference": "Reference"})
        out.append((task, wide, systems[MAX_SAMPLE_SYSTEMS:]))
    return out


INTERVAL = ("with several seeds, Student's t over the seeds' paired differences with the test-sentence bootstrap "
            "variance added (metrics/quality.py seed_interval: t at k-1 df on the seeds' standard error, the normal "
            "quantile on the sentences' one, added in quadrature); with one seed, the test sentences resampled only")


def _definitions(g: GridResults) -> list[Block]:
    """How to read the numbers: each overview column's own description (a plugin's column explains
    itself), then how speed, intervals and claims are made."""
    table, env = g.table, g.environment or {}
    names = {"speed_base": "the baseline", "p_base": "the baseline", "ref_base": "the reference AT"}
    rows = [(col.heading.format(**names), _sentence(col.description))
            for col in overview_columns(table) if table[col.name].notna().any()]
    method = {"bs": "bootstrap resampling", "ar": "approximate randomisation"}.get(env.get("significance"), "")
    if env.get("n_bootstrap"):
        method += f" ({env['n_bootstrap']} resamples)"
    rows += [
        ("Seeds and intervals", "With one seed, [95% bootstrap interval] over the test sentences; with several, "
                                "mean ± sd over seeds (per-seed rows in results.csv): a description, not an "
                                "interval."),
        ("Speed", "Measured after training, in sessions of one process each: a system is timed side by side with "
                  "its task and seed's AT baseline in one session (a seed's systems in one session, or in several where "
                  "a note under the table names them): each test sentence (batch 1) or batch is decoded by every system "
                  "of the session in turn, the order changing from call to call, repeated, median per call. A speed-up "
                  "is the baseline's total time over the system's on the same sentences in the same session, [95% "
                  "paired interval over sentences] (batches, for throughput; the code that timed each row: "
                  "`timed_with` in results.csv)."
                  + (f" {env['timing']}." if env.get("timing") else "")),
        ("Claims", f"The paired test{f' ({method})' if method else ''} is sacrebleu's, on the same sentences. The "
                   "summary calls a system ahead or behind only when the paired 95% interval of the difference "
                   f"({INTERVAL}) excludes 0 and the paired test against that very system agrees in every seed; "
                   f"equivalent only when the whole interval lies within ±{g.equivalence_margin:g} BLEU; else not "
                   "resolved. Without hypotheses for a paired interval, only when the two means' 95% intervals "
                   "do not overlap."),
    ]
    return [Block("heading", "How to read the numbers", 2),
            Block("table", frame=pd.DataFrame(rows, columns=["Column", "Definition"]))]


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def _goals(g: GridResults) -> list[Block]:
    """The grid's goals, each met / missed / not measured by the numbers of this report, then the
    authors' notes (notes.md) under a heading that says they are written by hand."""
    blocks = []
    if g.goals:
        agg = aggregate_seeds(ok_rows(g.table))
        checked = check_goals(g.goals, agg, g.ranking)
        missing = checked["Result"].astype(str).str.startswith("missed")
        met, missed = int((checked["Result"] == "met").sum()), int(missing.sum())
        sure = int(((checked["Result"] == "met") & (checked["Over low"] > 0)).sum())  # met, interval clear of 0
        sure_missed = int((missing & (checked["Beyond noise"] == "yes")).sum())
        judged = agg[(agg["family"].astype(str) + " / " + agg["strategy"].astype(str)).isin(checked["System"])]
        judged = judged if len(judged) else agg  # the seeds of the systems the goals judge, not of every task's
        seeds = sorted({int(n) for n in judged["n_seeds"].dropna()}) if "n_seeds" in judged else []
        over_seeds = ("one seed" if seeds == [1] else f"means over {seeds[0]} seeds" if len(seeds) == 1 else
                      f"means over {seeds[0]} to {seeds[-1]} seeds" if seeds else "the results")
        unmeasured = len(checked) - met - missed
        over = [DASH if pd.isna(o) else f"{o:+.2f}" + ("" if pd.isna(lo) else f" [{ranking.signed(lo)}, {ranking.signed(hi)}]")
                for o, lo, hi in zip(checked["Over target"], checked["Over low"], checked["Over high"])]
        frame = checked.assign(**{c: checked[c].map(lambda v: DASH if pd.isna(v) else f"{v:.2f}")
                                  for c in ("Value", "Target")},
                               **{"Speed-up vs AT greedy": checked["Speed-up vs AT greedy"].map(
                                   lambda v: DASH if pd.isna(v) else f"{v:.2f}×")},
                               **{"Over target": over, "Beyond noise": checked["Beyond noise"].replace("", DASH),
                                  "Result": [_result_shown(r, b) for r, b in zip(checked["Result"],
                                                                                 checked["Beyond noise"])]})
        frame = frame.drop(columns=["Over low", "Over high"])
        blocks += [Block("heading", "Goals", 2),  # goals.json keeps met / missed; the table says when only on the mean
                   Block("para", f"Of the grid file's {len(checked)} goals, on {over_seeds}: {met} met ({sure} beyond "
                                 f"noise), {missed} missed ({sure_missed} beyond noise)"
                                 + (f", {unmeasured} not measured" if unmeasured else "") + ".")]
        blocks += [Block("table", frame=frame),
                   Block("note", "Over target: how far the system lies past its target "
                                 "(positive: met) with the interval of that margin - the paired 95% interval of the "
                                 f"difference ({INTERVAL}) for a goal against another system, its Value and "
                                 "Target then both means over the seeds it pairs; for a goal against a number the "
                                 "95% interval of the mean (several seeds: Student's t over the seeds, the "
                                 "test-sentence variance added; one seed: its bootstrap interval); beyond noise "
                                 "when that interval excludes 0. The best of several systems is judged among those "
                                 "with a result; a miss while one of them has none is not measured. For the "
                                 "best of m systems each interval is at 1 - 0.05/m (Bonferroni), so that "
                                 "picking the best cannot pass noise for a result, and a miss is beyond noise "
                                 "only when each of the m misses beyond noise.")]
    return blocks


def _notes(g: GridResults) -> list[Block]:
    """The authors' notes (notes.md) under a heading that says they are written by hand; or why they were
    left out (written for another run)."""
    if g.notes:
        return [Block("heading", "Notes (written by the authors, not generated)", 2), Block("authored", g.notes.strip())]
    if g.notes_left_out:
        return [Block("heading", "Notes (written by the authors, not generated)", 2), Block("note", g.notes_left_out)]
    return []


def _averaged(g: GridResults) -> list[Block]:
    """Which checkpoints' mean each cell evaluated (train.average): the steps, so that a reader sees whether
    an average reached back into early training."""
    if "averaged_steps" not in g.table:
        return []
    cells = g.table.drop_duplicates("cell")
    cells = cells[cells["averaged_steps"].fillna("").astype(str).str.len() > 0]
    if cells.empty:
        return []
    def steps(cell: str, text: str) -> str:
        if text.startswith("final "):  # no checkpoint was inside the window: the final weights, not a mean
            step = text.removeprefix("final ")
            return f"`{cell}` its final weights alone (step {step}: every checkpoint came before the window)"
        return f"`{cell}` steps {text.replace('+', ', ')}"

    shown = "; ".join(steps(c, str(s)) for c, s in zip(cells["cell"], cells["averaged_steps"]))
    return [Block("note", f"Evaluated weights: the mean of the checkpoints at these steps (train.average, from the "
                          f"last train.average_window of training and past the warm-up; where no checkpoint was, "
                          f"the final weights alone): {shown}.")]


def _reproduce(g: GridResults) -> Block:
    command = (g.environment or {}).get("command")
    if not command:
        return Block("note", "environment.json is missing or has no command: the run is not reproducible.")
    plugins = (g.environment or {}).get("plugins") or []
    with_plugins = f", with the plugins {describe_plugins(plugins)} installed" if plugins else ""
    changed = _grid_file_changed(g)
    if changed:
        return Block("para", f"Made by: `{command}`{with_plugins}. {changed}")
    return Block("para", f"To reproduce: `{command}`{with_plugins}")


def _grid_file_changed(g: GridResults) -> str:
    """Why running the grid file named in environment.json would not reproduce this folder, or "": its
    settings (comments aside) now differ from grid-as-run.yaml, the file as it was run."""
    import yaml  # lazy: start-up

    as_run, named = g.root / "grid-as-run.yaml", (g.environment or {}).get("grid")
    if not named or not as_run.is_file():
        return ""
    package_root = Path(__file__).resolve().parents[2]
    current = next((p for p in (Path(named), package_root / named) if p.is_file()), None)
    if current is None:
        return ""
    try:
        same = yaml.safe_load(current.read_text()) == yaml.safe_load(as_run.read_text())
    except (yaml.YAMLError, OSError, UnicodeDecodeError):
        return ""
    if same:
        return ""
    return (f"`{named}` has changed since this run (its settings differ from `grid-as-run.yaml`, the file as "
            f"run, kept in this folder): running it now trains other settings and is not expected to give these "
            f"numbers; `grid-as-run.yaml` holds the settings behind them.")


def _code(g: GridResults) -> list[Block]:
    """A note when the cells were trained, evaluated or timed under more than one version of the code (a grid
    resumed across commits, a seed timed again by newer code) or under another than the one that wrote this
    report: which cells under which commits (results.csv trained_with / evaluated_with / timed_with; the timing
    is named only where some row recorded the code that timed it)."""
    ok = ok_rows(g.table)
    if ok.empty or not {"trained_with", "evaluated_with"} <= set(ok):
        return []
    ok = ok.assign(**{c: ok[c].fillna("").astype(str) if c in ok else "" for c in ("timed_with", "timing_session")})
    timed = ok["timed_with"].ne("").any()
    cells = ok.groupby("cell", sort=False).agg(
        trained_with=("trained_with", "first"), evaluated_with=("evaluated_with", "first"),
        timed_with=("timed_with", lambda v: "+".join(dict.fromkeys(x for x in v if x))),  # A+B: timed in parts
        timing_session=("timing_session", lambda v: next((x for x in v if x), ""))).reset_index()
    cells[["trained_with", "evaluated_with"]] = cells[["trained_with", "evaluated_with"]].fillna("").astype(str)
    cells = cells[(cells["trained_with"] != "") | (cells["evaluated_with"] != "")]
    if timed:
        cells["timing"] = [f"timed under {t}" if t else "timed under unrecorded code" if s else "not timed"
                           for t, s in zip(cells["timed_with"], cells["timing_session"])]
    report_commit = label(g.environment)
    used = ({c for column in ("trained_with", *(["timed_with"] if timed else [])) for value in cells[column]
             for c in value.split("+") if c} | set(cells["evaluated_with"])) - {""}
    if not used or used == {report_commit}:
        return []
    keys = ["trained_with", "evaluated_with", *(["timing"] if timed else [])]
    groups = cells.groupby(keys, sort=True)["cell"].apply(list)
    parts = [f"trained under {key[0] or 'unrecorded code'}, evaluated under {key[1] or 'unrecorded code'}"
             + (f", {key[2]}" if timed else "") + ": "
             + (", ".join(f"`{c}`" for c in names) if len(names) <= 4 else f"{len(names)} cells (`{names[0]}` ...)")
             for key, names in groups.items()]
    tables = f"these tables were written under {report_commit}" if report_commit else "these tables' code is unrecorded"
    lead = "The cells ran under more than one version of the code" if len(used) > 1 else \
        f"The cells ran under {next(iter(used))}, {tables.replace('these', 'but these', 1)}"
    edited = " `*`: tracked files were edited since that commit;" if any("*" in c for c in used | {report_commit or ""}) else ""
    columns = "trained_with, evaluated_with" + (", timed_with" if timed else "")
    return [Block("note", f"{lead}{f' ({tables})' if len(used) > 1 else ''}: {'; '.join(parts)}.{edited} Each cell's "
                          f"commits are in results.csv ({columns}).")]


def _compute(g: GridResults) -> list[Block]:
    """The training compute the grid took: its cells' training wall times summed (train_time_s)."""
    cells = ok_rows(g.table).drop_duplicates("cell")
    times = cells["train_time_s"].dropna() if "train_time_s" in cells else pd.Series(dtype=float)
    if times.empty:
        return []
    missing = len(cells) - len(times)
    tail = f"; {missing} finished cell(s) recorded none" if missing else ""
    total = times.sum()
    took = f"{total / 3600:.1f} h" if total >= 3600 else f"{total / 60:.1f} min"
    speeds = cells["train_tokens_per_s"].dropna() if "train_tokens_per_s" in cells else pd.Series(dtype=float)
    speed = "" if speeds.empty else (
        f" The training loops ran at {speeds.min():,.0f}" + (f" to {speeds.max():,.0f}" if len(speeds) > 1 else "")
        + f" target tokens a second ({len(speeds)} cell{'s' if len(speeds) != 1 else ''}; train_tokens_per_s: the last "
        "attempt after its first 10 steps, validation left out).")
    return [Block("para", f"Compute: training took {took} of wall time summed over "
                          f"{len(times)} cell{'s' if len(times) != 1 else ''} (each cell's train_time_s, every attempt of "
                          "a resumed run; cells "
                          f"that ran at once overlap in wall-clock time{tail}).{speed}")]


def _overview(g: GridResults) -> list[Block]:
    blocks = [Block("heading", "Overview", 2)]
    ok = ok_rows(g.table)
    untimed = set((g.environment or {}).get("untimed") or [])  # the grid's `untimed:` cells
    for task, part in ok.groupby("task", sort=False):
        blocks += [Block("heading", f"Task `{task}`", 3), overview_table(part)]
        speed = speed_note(part, (g.environment or {}).get("timing", ""))
        if speed:
            blocks.append(Block("note", speed))
        if part["decode_memory_basis"].eq(RESIDENT_GROWTH).any():
            blocks.append(Block("note", "Memory is not shown: this table's CPU memory was read as the growth of the "
                                        "process's resident size over a decode, which stays near 0 when the allocator "
                                        "serves the decode from memory an earlier call freed. Timing again (`atnat time "
                                        "--anew`) measures it, with that memory given back to the system first."))
        never = [c for c in part["cell"].astype(str).unique() if c in untimed]
        if never:
            blocks.append(Block("note", f"Never timed, as the grid asks (`untimed:`): {', '.join(f'`{c}`' for c in never)}; "
                                        "their speed columns stay empty."))
        sessions = part.loc[part["timing_session"] != "", ["cell", "timing_session"]].drop_duplicates()
        if sessions["timing_session"].nunique() > 1:
            when = "; ".join(f"{session}: {', '.join(f'`{c}`' for c in sorted(part_['cell'].unique()))}"
                             for session, part_ in sessions.groupby("timing_session"))
            blocks.append(Block("note", f"Speed was measured in {sessions['timing_session'].nunique()} timing "
                                        "sessions (a seed's systems side by side with that seed's AT baseline, "
                                        "a student timed beside it when it finished and kept while its weights "
                                        "stay the same, or a cell's earlier timing kept when its checkpoints are "
                                        "gone): every "
                                        "ratio was measured within one session, but times and throughputs of "
                                        f"different sessions were not measured side by side ({when})."))
    if ok.empty:
        blocks.append(Block("note", "No cell finished: there are no results to tabulate."))
    else:
        blocks.insert(1, Block("para", "Bold marks the best value of a column within its task."))
    stale = (g.environment or {}).get("stale_cells_interim") or {}
    if stale:
        again = ("" if (g.environment or {}).get("collected_from") else
                 " (the final `atnat run --stale rerun` evaluates or trains them again)")
        blocks.append(Block("note", "Run with other settings than the grid file gives now, so their numbers come "
                                    f"from those settings{again}: "
                                    + "; ".join(f"`{cell}` ({why})" for cell, why in stale.items()) + "."))
    kept = (g.environment or {}).get("stale_cells_kept") or {}
    if kept:
        blocks.append(Block("note", "Kept on the user's word (`--stale keep`) although the grid's settings changed "
                                    "since they ran, so their numbers come from other settings: "
                                    + "; ".join(f"`{cell}` ({why})" for cell, why in kept.items()) + "."))
    failed = g.table[~g.table["status"].isin(["ok", "not run"])]
    if not failed.empty:
        blocks += [Block("heading", "Failed cells", 3), Block("table", frame=failures_table(failed))]
    not_run = g.table.loc[g.table["status"] == "not run", "cell"].drop_duplicates()
    if not not_run.empty:
        blocks += [Block("heading", "Cells not run yet", 3),
                   Block("para", f"{len(not_run)} cell(s) of the grid have no result in this folder (not started, "
                                 "still training, or waiting for a teacher): " + ", ".join(f"`{c}`" for c in not_run)
                                 + ".")]
    return blocks


def speed_note(part: pd.DataFrame, timing: str = "") -> str:
    """Beside a task's speed figures: the threads they were measured with and the A/A noise floors, each
    the union over the task's seeds as aggregate_seeds takes it (older results folders: environment.json's
    description of the timing; a results.csv from before the throughput floor: the latency one stands in,
    as aggregate.noise_floor applies it). A task none of whose systems was timed gets a note saying so,
    not the grid's timing description (that told of a timing this task never had)."""
    timed = [c for c in ("latency_ms_b1", "speedup_vs_at", "throughput_sents_s", "throughput_speedup_vs_at",
                         "timing_threads", LATENCY_FLOOR[0], THROUGHPUT_FLOOR[0]) if c in part and part[c].notna().any()]
    if not timed:
        return "No system of this task was timed."
    threads = sorted({int(t) for t in part.get("timing_threads", pd.Series(dtype=float)).dropna()})
    text = []
    if not threads and timing:  # a GPU timing, or an older folder: the timing's own description
        text.append(f"Speed: {timing}")
    resolved = sorted({e for e in part.get("timing_engine", pd.Series(dtype=object)).dropna() if "=" in str(e)})
    if resolved:  # what an engine became on this device (auto on a GPU: eager or CUDA graphs)
        text.append(f"decoded as {', '.join(f'`{e}`' for e in resolved)} (the rows' timing_engine)")
    if threads:
        text.append(f"Speed measured with {', '.join(map(str, threads))} CPU thread"
                    f"{'s' if threads != [1] else ''} per system")
    packed = sorted({str(p) for p in part.get("timing_engine_packed", pd.Series(dtype=object)).dropna() if str(p)})
    if packed:  # auto's layers on this CPU: where oneDNN's packed product measured faster than the plain one
        text.append("`auto`'s weight shapes on oneDNN's packed product (the rows' timing_engine_packed): "
                    + " / ".join(packed))
    floors = {}
    for kind, (lo, hi) in (("batch-1", LATENCY_FLOOR), ("throughput", THROUGHPUT_FLOOR)):
        noise = part[[lo, hi]].dropna() if lo in part and hi in part else pd.DataFrame()
        if not noise.empty:
            floors[kind] = f"[{noise[lo].min():.2f}, {noise[hi].max():.2f}]"
    if floors:
        latency = f"batch-1 latency {floors['batch-1']} for the batch-1 ratios" if "batch-1" in floors else ""
        throughput = (f"throughput {floors['throughput']} for the throughput ratios" if "throughput" in floors else
                      "no throughput floor was measured, so the latency one stands in for the throughput ratios")
        ct2 = any(c in part and part[c].notna().any() for c in ("speedup_vs_ct2", "throughput_speedup_vs_ct2"))
        text.append("A/A noise floors of the speed ratios (the baseline timed twice, as two systems; over seeds, the "
                    f"widest): {'; '.join(f for f in (latency, throughput) if f)}"
                    + (" (the CTranslate2 ratios too, each the floor of its kind: that of our baseline in the same "
                       "session)" if ct2 else "")
                    + ": a ratio inside its floor is not distinguishable from the A/A control, and no system leaves "
                      "the front by less")
        off = []  # an A/A interval that excludes 1: the baseline differed from itself beyond its own interval
        for kind, (lo, hi) in (("batch-1 latency", LATENCY_FLOOR), ("throughput", THROUGHPUT_FLOOR)):
            if lo in part and hi in part:
                bad = part[(part[lo] > 1) | (part[hi] < 1)]
                if bad.empty:
                    continue
                bad = bad if "cell" in bad else bad.assign(cell=bad.index.astype(str))
                by_session = "timing_session" in bad and (bad["timing_session"].fillna("").astype(str) != "").all()
                where = bad["timing_session"] if by_session else bad["cell"]
                for name, rows in bad.groupby(where.astype(str), sort=False):
                    off.append(f"{kind} [{rows[lo].min():.2f}, {rows[hi].max():.2f}] in "
                               f"{'the session of ' if by_session else ''}{name} "
                               f"({', '.join(f'`{c}`' for c in dict.fromkeys(rows['cell']))})")
        if off:
            text.append("the A/A control's own interval excluded 1 (the baseline timed against itself differed beyond "
                        "its interval: a disturbed session, or the 1 in 20 a 95% interval misses by chance; its ratios "
                        "may be off by as much) for "
                        + "; ".join(off))
    elif text:
        text.append("no A/A control was timed, so the noise floor of the ratios is unknown")
    return "; ".join(text) + "." if text else ""


def _other_tests(g: GridResults) -> list[Block]:
    """BLEU on the further test splits (eval.extra_tests) beside the main one, mean ± sd over seeds,
    and whether the systems rank the same on every split (or which pairs flip)."""
    if g.extra_tests is None or g.extra_tests.empty:
        return []
    blocks = [Block("heading", "Other test sets", 2)]
    ok = ok_rows(g.table)
    for task, part in ok.groupby("task", sort=False):
        extra = g.extra_tests[g.extra_tests["task"].astype(str) == str(task)]
        if extra.empty:
            continue
        main = part.assign(system=part["family"].astype(str) + " / " + part["strategy"].astype(str))
        # every system of the main test set, those without a score on another (e.g. a CTranslate2 twin scored on
        # the main test set only) named under the table, not left out unsaid
        extra = extra.assign(system=extra["family"].fillna(extra["cell"]).astype(str) + " / " + extra["strategy"])
        named = g.ranking[(g.ranking["task"].astype(str) == str(task)) & (g.ranking["test_set"] == ranking.MAIN)] \
            if g.ranking is not None else pd.DataFrame()
        first = str(named["split_name"].iloc[0]) if len(named) else "main test set"
        means = {first: main.groupby("system", sort=False)["bleu"].agg(["mean", "std", "count"])}
        for name, rows in extra.groupby("test_set", sort=False):
            means[str(name)] = rows.groupby("system", sort=False)["bleu"].agg(["mean", "std", "count"])
        systems = list(means[first].index)
        frame = pd.DataFrame({"System": systems, **{f"BLEU ({k})": [_mean_sd(v, s) for s in systems]
                                                    for k, v in means.items()}})
        ranked = g.ranking is not None and (g.ranking["task"].astype(str) == str(task)).any()
        flipped = ranking.flips(g.ranking, task) if ranked else None
        if flipped is None:  # no ranking.csv (an older results folder): the order of the means only
            text = _ranking(means)
        elif flipped:
            count = {k: sum(kind == k for kind, _ in flipped) for k in ranking.FLIP_KINDS}
            kinds = [f"{count[k]} {words}" for k, words in ranking.FLIP_KINDS.items() if count[k] or k == "real"]
            text = (f"The order by mean BLEU differs between the test sets for {len(flipped)} pair(s): "
                    + ", ".join(kinds) + ". Each with its paired interval per test set: "
                    + "; ".join(sentence for _, sentence in flipped) + ".")
        else:
            everywhere = [s for s in systems if all(s in v.index for v in means.values())]
            text = f"The {len(everywhere)} systems scored on every test set rank the same (by mean BLEU) on each."
        unscored = {k: [s for s in systems if s not in v.index] for k, v in means.items()}
        text += "".join(f" No score on {k} for {', '.join(f'`{s}`' for s in missing)}: left out of its order."
                        for k, missing in unscored.items() if missing)
        blocks += [Block("heading", f"Task `{task}`", 3), Block("table", frame=frame), Block("para", text)]
    return blocks if len(blocks) > 1 else []


def _ranking_section(g: GridResults) -> list[Block]:
    """Per task and test set: the systems by mean BLEU, each against the next one down with its paired
    interval and verdict (ranking.csv), so the order is read as far as the noise allows."""
    if g.ranking is None:
        return []
    nexts = g.ranking[g.ranking["relation"].astype(str).str.contains("next")]
    blocks = [Block("heading", "Ranking", 2), Block("para", (
        "Systems by mean BLEU over seeds, each minus the next one down: the mean over seeds of the paired "
        f"difference with its 95% interval ({INTERVAL}). `>` / `<` the interval excludes 0 (`<`: the paired "
        "difference puts it below the next one, on the seeds both have); `≈` it lies within the equivalence margin "
        f"±{g.equivalence_margin:g} BLEU (`> ≈` / `< ≈`: beyond noise, but the whole interval inside the margin: "
        "a difference smaller than it); `?` neither: the order of that pair is not resolved by these runs. "
        "BLEU: the mean over all of a system's seeds, which sets the order; a difference pairs only the seeds "
        "both systems have. Each verdict is its own 95% interval, with no correction for the many pairs of a "
        "chain: over a dozen pairs, one may cross 0 by chance."
        + _one_seed_caveat(nexts, "`>` / `<`")))]
    means = _means_by_test_set(g)
    for (task, split), rows in nexts.groupby(["task", "split_name"], sort=False):
        mean = means.get((str(task), str(rows["test_set"].iloc[0])), {})
        table = []  # (system, BLEU, seeds paired, difference to the next one down, verdict)
        for r in rows.itertuples():
            if not table or table[-1][0] != r.system:  # the first, or after a system with no pair below it
                table.append((r.system, mean.get(r.system, r.system_bleu), DASH, DASH, ""))
            own = (mean.get(r.system, r.system_bleu), mean.get(r.against, r.against_bleu))
            on = ("" if all(abs(m - p) < 0.005 for m, p in zip(own, (r.system_bleu, r.against_bleu))) else
                  f" ({r.system_bleu:.2f} vs {r.against_bleu:.2f} on the {int(r.n_seeds)} seed"
                  f"{'s' if r.n_seeds != 1 else ''} paired)")  # the means the difference is of, where they differ
            table[-1] = (r.system, mean.get(r.system, r.system_bleu), str(int(r.n_seeds)),
                         f"{r.bleu_diff:+.2f} [{ranking.signed(r.diff_ci_low)}, {ranking.signed(r.diff_ci_high)}]{on}",
                         ranking.shown(r.verdict, r.diff_ci_low, r.diff_ci_high, g.equivalence_margin, symbol=True))
            table.append((r.against, mean.get(r.against, r.against_bleu), DASH, DASH, ""))
        frame = pd.DataFrame([(str(i), s, f"{b:.2f}", n, d, v) for i, (s, b, n, d, v) in enumerate(table, 1)],
                             columns=["Rank", "System", "BLEU", "Seeds paired", "Minus next down", "Verdict"])
        blocks += [Block("heading", f"Task `{task}`, {split}", 3), Block("table", frame=frame)]
    return blocks if len(blocks) > 2 else []


def _means_by_test_set(g: GridResults) -> dict[tuple[str, str], dict[str, float]]:
    """(task, ranking.csv's test_set) -> system -> mean BLEU over all its seeds (results.csv for the main
    test set, extra_tests.csv for the others): the means the ranking orders by."""
    out = {}
    if getattr(g, "table", None) is None or "bleu" not in g.table:  # no results table: the paired means stand
        return out
    ok = ok_rows(g.table).dropna(subset=["bleu"])
    ok = ok.assign(system=ok["family"].fillna(ok["cell"]).astype(str) + " / " + ok["strategy"].astype(str))
    for task, part in ok.groupby("task", sort=False):
        out[(str(task), ranking.MAIN)] = part.groupby("system")["bleu"].mean().to_dict()
    if getattr(g, "extra_tests", None) is not None and not g.extra_tests.empty:
        extra = g.extra_tests.dropna(subset=["bleu"])
        extra = extra.assign(system=extra["family"].fillna(extra["cell"]).astype(str) + " / " + extra["strategy"])
        for (task, name), part in extra.groupby(["task", "test_set"], sort=False):
            out[(str(task), str(name))] = part.groupby("system")["bleu"].mean().to_dict()
    return out


def _mean_sd(stats: pd.DataFrame, system: str) -> str:
    if system not in stats.index or pd.isna(stats.loc[system, "mean"]):
        return DASH
    m, sd, n = stats.loc[system, ["mean", "std", "count"]]
    return f"{m:.2f} ± {sd:.2f}" if n > 1 else f"{m:.2f}"


def _compare_section(g: GridResults) -> list[Block]:
    """The pairs the grid's `compare:` asks for, on every test set: the paired difference with its
    interval and verdict (ranking.csv rows with relation `compare`)."""
    wanted = [tuple(p) for p in (getattr(g, "environment", None) or {}).get("compare") or []]
    asked = g.ranking[g.ranking["relation"].astype(str).str.contains("compare")] if g.ranking is not None else None
    if asked is None or asked.empty:
        return [Block("heading", "Comparisons the grid asks for", 2), Block("para", _not_compared(wanted, set()))] \
            if wanted else []
    done = set(zip(asked["system"], asked["against"]))
    pair = asked["system"] + "\t" + asked["against"]  # each pair's test sets together, pairs in first-seen order
    asked = asked.assign(_pair=pair.map({p: i for i, p in enumerate(dict.fromkeys(pair))}))
    asked = asked.sort_values("_pair", kind="stable")
    frame = pd.DataFrame({
        "System": asked["system"], "Against": asked["against"], "Task": asked["task"].astype(str),
        "Test set": asked["split_name"].astype(str), "Seeds paired": asked["n_seeds"].map(lambda n: str(int(n))),
        "Difference": [f"{d:+.2f} [{ranking.signed(lo)}, {ranking.signed(hi)}]" for d, lo, hi in
                       zip(asked["bleu_diff"], asked["diff_ci_low"], asked["diff_ci_high"])],
        "Verdict": [ranking.shown(v, lo, hi, g.equivalence_margin)
                    for v, lo, hi in zip(asked["verdict"], asked["diff_ci_low"], asked["diff_ci_high"])]})
    return [Block("heading", "Comparisons the grid asks for", 2), Block("para", (
        "Each pair of the grid file's `compare:`: BLEU of the system minus the other's, the mean over seeds of "
        f"the paired difference with its 95% interval ({INTERVAL}), "
        "on every test set. ahead / behind: the interval excludes 0 (\"by less than\" the margin when it also lies "
        f"inside it); equivalent: it lies within ±{g.equivalence_margin:g} BLEU; not resolved: neither. Each pair is "
        "judged by its own interval, as ranking.csv judges it; the headline table's verdict against the AT reference "
        "also asks the paired test, Holm-corrected over all the systems compared with it, so a pair here may read "
        "ahead or behind where the headline says not resolved (with its Holm p)."
        + _one_seed_caveat(asked, "ahead / behind")
        + (" " + _not_compared(wanted, done) if _not_compared(wanted, done) else ""))),
        Block("table", frame=frame)]


def _not_compared(wanted: list[tuple[str, str]], done: set[tuple[str, str]]) -> str:
    """A sentence naming the grid's `compare:` pairs with no paired result (a side not finished or
    failed, or no common seed): not measured, never left out in silence."""
    missing = [f"`{a}` against `{b}`" for a, b in wanted if (a, b) not in done]
    return (f"Not measured ({len(missing)} of the {len(wanted)} pairs: a side has no result, or the two share "
            f"no seed): {'; '.join(missing)}.") if missing else ""


def _one_seed_caveat(rows: pd.DataFrame, verdicts: str) -> str:
    """A sentence for a paragraph of paired verdicts when any of its rows pairs one seed: its interval covers
    the test sentences only, so `verdicts` there are beyond test-sentence noise, not training noise."""
    if not (pd.to_numeric(rows["n_seeds"], errors="coerce") == 1).any():
        return ""
    return (f" Where one seed is paired (Seeds paired: 1) the interval covers the choice of test sentences only: "
            f"{verdicts} there mean beyond test-sentence noise only ({ranking.ONE_SEED}).")


def _ranking(means: dict[str, pd.DataFrame]) -> str:
    """Do the systems rank the same (by mean BLEU) on every test set? Name the pairs that flip."""
    names = list(means)
    common = [s for s in means[names[0]].index if all(s in m.index for m in means.values())]
    flips = []
    for other in names[1:]:
        for i, a in enumerate(common):
            for b in common[i + 1:]:
                first = means[names[0]].loc[a, "mean"] - means[names[0]].loc[b, "mean"]
                second = means[other].loc[a, "mean"] - means[other].loc[b, "mean"]
                if first * second < 0:
                    flips.append(f"`{a}` and `{b}` ({names[0]} {first:+.2f}, {other} {second:+.2f})")
    if not flips:
        return f"The {len(common)} systems rank the same (by mean BLEU) on {' and '.join(names)}."
    return f"The ranking by mean BLEU flips between the test sets for: {'; '.join(flips)}."


def _figures(g: GridResults, draw: bool = True) -> tuple[list[Block], list[Block]]:
    """Draw every figure whose data is present (a one-line note for each one that is not).

    Returns the headline figure (figures.FIGURES' first, quality vs speed) apart from the others.
    Without `draw`: no figure, the PNGs of an earlier report removed (they would not match these
    tables), and a note that says how to draw them.
    """
    if not draw:
        figures.remove_figures(g.root / "figures")
        return [Block("note", "Figures not drawn (the grid's `report: {figures: false}`, or `--no-figures`): "
                              f"`atnat report {g.root}` draws them from these tables.")], []
    blocks = []
    for caption, source, path in figures.draw_figures(g.table, g.curves, g.root / "figures"):
        if path is None:
            short = re.split(r" \(|;", caption)[0]  # the figure's name, not the caption of a figure that is not there
            blocks.append(Block("note", f"Figure not drawn: {short}; no data for it in {source}."))
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
    where = ("The machine and versions of the command that wrote these tables" + (
        ", not of the machines that trained and timed the collected cells (each row's own are in results.csv: "
        "train_devices, timing_threads, trained_with, evaluated_with)." if from_copies(env) else "."))
    return blocks + [Block("para", where), Block("table", frame=frame)]


def build_document(g: GridResults, figures: bool = True) -> list[Block]:
    """The report as blocks, in section order; draws the figures (unless not `figures`) as a side effect.

    The verdict in plain system names and the headline table come first (headline.py), then the
    quality-vs-speed figure, the summary, the goals and the full tables, the authors' notes, the
    definitions of the columns, the other figures, the samples and the environment.
    """
    headline, other_figures = _figures(g, figures)
    first, after_figure = headline_blocks(g, _threads_of((g.environment or {}).get("timing", "")))
    interim = (g.environment or {}).get("interim")
    head = [Block("heading", f"Grid report: {g.name}", 1),  # before the verdict only a caveat on every number
            *([Block("note", f"Interim report of a grid still running: {interim}. Cells not finished are listed "
                             "under the overview; the final `atnat run` replaces these numbers.")] if interim else []),
            *first, *headline, *after_figure, *_provenance(g), Block("toc"), Block("heading", "Summary", 2),
            Block("para", summary(g)), _reproduce(g), *_code(g), *_compute(g), *_averaged(g)]
    return (head + _goals(g) + _overview(g) + _ranking_section(g) + _compare_section(g) + _other_tests(g)
            + _notes(g) + _definitions(g) + other_figures + _samples(g) + _environment(g))


def _provenance(g: GridResults) -> list[Block]:
    """Where the tables came from, shown after the first screen: collected copies, p-values read from an
    older atnat, copies whose files could not be checked, plugins not imported for this report."""
    return [*([Block("note", f"Made from {collected}: each cell's results as copied when it finished "
                             "(`atnat collect`), with the speed of the cells timed beside their seed's baseline "
                             "(`atnat time`); the machines that trained them, and their checkpoints, may be gone.")]
              if (collected := (g.environment or {}).get("collected_from")) else []),
            *([Block("note", "The paired test's p-values in results.csv were written as sacreBLEU's one-tailed bootstrap "
                             "p (by an older atnat); this report doubles them into the two-sided p of the test it "
                             "names.")] if (g.environment or {}).get("p_doubled_on_read") else []),
            *([Block("note", f"{len(unchecked)} of the copies were collected before collect recorded the sha256 of "
                             "each file it copies, so their files could not be checked: "
                             + ", ".join(f"`{c}`" for c in unchecked) + ".")]
              if (unchecked := (g.environment or {}).get("collected_unverified") or []) else []),
            *([Block("note", f"The run was made with the plugin module{'s' * (len(absent) > 1)} "
                             + ", ".join(f"`{m}`" for m in absent) + ", not imported for this report: a metric "
                             "it adds is left out of the tables. To show it: `atnat report ... --plugins "
                             + ",".join(absent) + "`.")] if (absent := plugins_not_loaded(g.environment)) else [])]


def plugins_not_loaded(environment: dict | None) -> list[str]:
    """The plugin modules a run recorded (environment.json) that this process has not imported: the report reads
    a metric's columns from its declaration, so a plugin metric's columns would be missing without a word. A
    record read back never imports them (nothing read back runs code); the user names them with --plugins."""
    recorded = (environment or {}).get("plugins") or []
    return [p["module"] for p in recorded if isinstance(p, dict) and p.get("group") == "module"
            and isinstance(p.get("module"), str) and p["module"] not in sys.modules]


def from_copies(env: dict) -> bool:
    """Whether the tables were read from collected copies (`atnat report --collected`), final or interim."""
    return bool(env.get("collected_from")) or "read from the cells collected in" in str(env.get("interim", ""))


def write_report(results_dir: Path, figures: bool = True) -> tuple[Path, Path]:
    """Write report.md, report.html and (with `figures`) figures/*.png into results_dir; return (md, html) paths."""
    grid = load_results(Path(results_dir))
    blocks = build_document(grid, figures)
    md_path, html_path = grid.root / "report.md", grid.root / "report.html"
    write_text_atomic(md_path, render_markdown(blocks))
    write_text_atomic(html_path, render_html(blocks, grid.root, f"Grid report: {grid.name}"))
    return md_path, html_path


def _result_shown(result: str, beyond_noise: object) -> str:
    """A goal's Result as the table shows it: met / missed with how firmly - beyond noise (as is), on the mean only,
    or with no interval to judge noise by (a bare "met" would read as a sure one)."""
    if result not in ("met", "missed") or beyond_noise == "yes":
        return result
    if beyond_noise == "no":
        return f"{result} on the mean, not beyond noise"
    return f"{result} on the mean (no interval)"
