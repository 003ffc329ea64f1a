"""Tabulate a grid's finished cells into results.csv, curves/*.csv and samples.csv, with the
comparisons against each task's AT baseline (speed-up, paired significance)."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd

from atnat.core.errors import AtnatError
from atnat.experiments.evaluation import columns as schema
from atnat.experiments.evaluation.baseline import baseline_cells, is_engine_twin, reference_at_rows
from atnat.experiments.evaluation.exported import exported_rows
from atnat.experiments.evaluation.metrics import holm, paired_significance
from atnat.experiments.evaluation.metrics.quality import bleu_difference
from atnat.experiments.evaluation.references import read_references
from atnat.experiments.files import read_json_object, write_csv, written_lines
from atnat.experiments.modelfiles.checkpoints import CheckpointDamaged
from atnat.experiments.modelfiles.loading import checkpoint_stamps, evaluation_checkpoint
from atnat.experiments.provenance import label
from atnat.experiments.reporting.ranking import MAIN, rank_systems, references_of
from atnat.experiments.reporting.records import read_metrics, training_throughput, whole_train_time

CURVES = ("position_accuracy", "prefix_corruption", "bleu_by_length", "iterations", "attention")  # per run
# curves/validation.csv comes from each run's training log (validation_curve)
TIMING = [c.name for c in schema.SPEED]  # the columns the timing phase fills (timing.csv)


def add_significance(df: pd.DataFrame, runs: Path, *, method: str = "bs", n: int = 1000,
                     baseline: str | None = None) -> pd.DataFrame:
    """p-value of each system's BLEU difference to the task's AT baseline (the plain AT cell of the
    same seed, its beam strategy if it has one, else its first), paired on the same test sentences;
    `bleu_p_holm`: Holm-corrected over the systems compared within that task and seed; `p_baseline`
    names the baseline. A CTranslate2 twin is no system of its own (the same weights and search, run by
    another engine): it is left out of the family, so the timing phase cannot change how many tests are corrected for."""
    df = df.copy()
    for col in ("bleu_p_vs_at", "bleu_p_holm"):
        df[col] = float("nan")
    df["p_baseline"], df["bleu_p_sides"] = "", 2.0  # paired_significance's p are two-sided
    for (task, seed), base in baseline_cells(df, baseline).items():
        rows = df[(df.task == task) & (df.seed == seed) & (df.status == "ok")]
        base_rows = df[(df.cell == base) & (df.status == "ok")]
        if base_rows.empty:  # the baseline cell has no result (not run yet, or its run folder gone)
            continue
        ref_strategy = next((s for s in base_rows.strategy if s.startswith("beam")), base_rows.strategy.iloc[0])
        base_hyps = read_hyps(runs / base / "hyps" / f"{ref_strategy}.txt")
        refs = read_references(runs / base)
        if base_hyps is None or refs is None:
            continue
        tokenize = str(base_rows.bleu_tokenize.iloc[0]) if "bleu_tokenize" in base_rows and \
            base_rows.bleu_tokenize.notna().any() else "13a"
        twins = is_engine_twin(rows)  # another system's weights and search run elsewhere: no test of their own
        systems = {i: h for i, r in rows[~twins].iterrows() if not (r.cell == base and r.strategy == ref_strategy)
                   and (h := read_hyps(runs / r.cell / "hyps" / f"{r.strategy}.txt")) is not None
                   and len(h) == len(refs[0])}
        if not systems:
            continue
        pvals = paired_significance(base_hyps, {str(k): v for k, v in systems.items()}, refs,
                                    tokenize=tokenize, n=n, method=method)
        smallest = len(systems) * (2.0 if method == "bs" else 1.0)  # x 1/(n+1): the smallest Holm p n resamples allow
        if smallest / (n + 1) >= 0.05:
            print(f"atnat: {task} seed {seed}: with {n} paired-test resamples and {len(systems)} systems against "
                  f"{base} / {ref_strategy}, no Holm-corrected p can fall below {min(smallest / (n + 1), 1.0):.3f}, so "
                  f"no system can be called ahead or behind it by the corrected test (against a reference AT other "
                  f"than this one, the paired interval alone decides: 'interval only'); eval.n_bootstrap >= "
                  f"{math.ceil(smallest / 0.05)} allows it", file=sys.stderr)
        adjusted = holm(pvals)
        for k, p in pvals.items():
            df.loc[int(k), ["bleu_p_vs_at", "bleu_p_holm"]] = p, adjusted[k]
        df.loc[rows[~twins].index, "p_baseline"] = f"{base} / {ref_strategy}"
    return df


EXTRA_COLUMNS = ("cell", "family", "task", "decoder", "seed", "strategy", "test_set", "sentences", "bleu",
                 "bleu_ci_low", "bleu_ci_high", "chrf", "bleu_tok",
                 "verifier_greedy_match")  # extra_tests.csv: eval.extra_tests' scores
COMPARISON_COLUMNS = ("task", "test_set", "system", "against", "n_seeds", "bleu_diff", "diff_ci_low", "diff_ci_high",
                      "method", "diff_seed_se", "diff_sentence_se")  # the standard errors: the verdict's interval for
# the best of several NATs is widened from them (headline.py); a comparisons.csv from before has none


def compare_systems(df: pd.DataFrame, runs: Path, *, n: int = 1000, test_sets: tuple[str, ...] = (),
                    baseline: str | None = None) -> pd.DataFrame:
    """Per task, every system's BLEU minus that of the task's AT reference (the best strategy, by mean
    BLEU over seeds on the main test set, of the grid's `baseline` cell, else of all our AT systems;
    never a CTranslate2 twin: evaluation/baseline.py reference_at_rows), paired by seed, with a 95% interval over test sentences
    and seeds (metrics.quality.bleu_difference): on the main test set (test_set `main`) and on each of
    `test_sets` (eval.extra_tests: hyps/<strategy>@<set>.txt against references@<set>.txt), so that
    "how far behind the AT" is answered on every test year. -> comparisons.csv's rows (COMPARISON_COLUMNS)."""
    ok = df[df["status"] == "ok"].copy()
    if ok.empty or "bleu" not in ok:
        return pd.DataFrame(columns=COMPARISON_COLUMNS)
    ok["system"] = ok["family"].fillna(ok["cell"]).astype(str) + " / " + ok["strategy"].astype(str)
    rows = []
    for task, part in ok.groupby("task", sort=False):
        at = part[reference_at_rows(part, baseline)].dropna(subset=["bleu"])
        if at.empty:
            continue
        best = at.groupby("system", sort=False)["bleu"].mean().idxmax()
        reference = {int(r.seed): r for _, r in part[part["system"] == best].iterrows()}
        tokens = part["bleu_tokenize"].dropna() if "bleu_tokenize" in part else pd.Series(dtype=object)
        tokenize = str(tokens.iloc[0]) if len(tokens) else "13a"
        for test_set in (MAIN, *test_sets):
            name = (lambda strategy: f"{strategy}.txt") if test_set == MAIN else \
                (lambda strategy, t=test_set: f"{strategy}@{t}.txt")
            for system, rows_of in part.groupby("system", sort=False):
                if system == best:
                    continue
                pairs = [(r, reference[int(r.seed)]) for _, r in rows_of.iterrows() if int(r.seed) in reference]
                outputs = [(read_hyps(runs / a.cell / "hyps" / name(a.strategy)),
                            read_hyps(runs / b.cell / "hyps" / name(b.strategy))) for a, b in pairs]
                refs = references_of(runs / pairs[0][1].cell, test_set) if pairs else None
                if not pairs or refs is None or any(x is None or y is None for x, y in outputs):
                    continue
                d = bleu_difference([x for x, _ in outputs], [y for _, y in outputs], refs, tokenize=tokenize, n=n)
                rows.append({"task": task, "test_set": test_set, "system": system, "against": best,
                             "n_seeds": d.n_seeds, "bleu_diff": d.diff, "diff_ci_low": d.low, "diff_ci_high": d.high,
                             "method": d.method, "diff_seed_se": d.seed_se, "diff_sentence_se": d.sentence_se})
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def _same_weights(runs: Path, cells: pd.Series, fingerprints: pd.Series) -> list[bool]:
    """Per timing row: was it measured on the weights its cell is evaluated with now? (True where that
    cannot be checked: no evaluated checkpoint here, or a row from before fingerprints.) One checksum per cell."""
    stamps: dict[str, set[str] | None] = {}
    for cell in sorted(set(cells.astype(str))):
        try:
            stamps[cell] = checkpoint_stamps(runs / cell) if evaluation_checkpoint(runs / cell).is_file() else None
        except CheckpointDamaged as err:  # the weights it was timed on cannot be checked: its speed left out
            print(f"atnat: {cell}: {err}; its speed is left out of the tables", file=sys.stderr)
            stamps[cell] = set()
    return [not mark or mark == "nan" or stamps[cell] is None or mark in stamps[cell]
            for cell, mark in zip(cells.astype(str), fingerprints.astype(str))]


def add_timing(df: pd.DataFrame, timing: pd.DataFrame | None, runs: Path | None = None) -> pd.DataFrame:
    """The timing phase's columns (timing.csv) joined on (cell, strategy), a row timed on other weights than
    the cell's now left out (its cell shows no speed until timed again); systems timed but not
    evaluated (a plain AT's CTranslate2 twin, `<strategy>-ct2`) become rows of their cell with
    speed columns only, where the cell has results (a cell not run, or whose run folder is gone, gets none);
    the A/A control's rows stay in timing.csv (their noise floor is a column)."""
    if timing is None or timing.empty or "strategy" not in df:  # (no cell has results: nothing to time)
        return df
    if "control" in timing:  # the A/A control's twin is a measurement of noise, not a system
        timing = timing[timing["control"].fillna("").astype(str) == ""]
    if runs is not None and "fingerprint" in timing:  # a speed timed on other weights than the cell's now: dropped
        timing = timing[_same_weights(runs, timing.cell, timing.fingerprint)]
    keep = timing[["cell", "strategy", *[c for c in TIMING if c in timing]]]
    merged = df.drop(columns=[c for c in TIMING if c in df]).merge(keep, on=["cell", "strategy"], how="left")
    known = set(zip(df.cell, df.strategy))
    extra = keep[[(c, s) not in known for c, s in zip(keep.cell, keep.strategy)]]
    if extra.empty:
        return merged
    labels = [c for c in ("family", "variant", "task", "decoder", "seed", "distilled", "guided_attention", "options",
                          "teacher") if c in df]
    info = df[df.status == "ok"].drop_duplicates("cell").set_index("cell")[labels]  # a cell without results has no twin
    extra = extra.join(info, on="cell").assign(strategy_name=extra.strategy, status="ok", error="")
    if runs is not None:  # a CTranslate2 twin scored like any system (evaluation/exported.py)
        scores = pd.DataFrame([{"cell": c, "strategy": s, **row} for c in extra.cell.unique()
                               for s, row in exported_rows(runs / c).items()])
        if not scores.empty:
            scores = scores.drop(columns=[c for c in scores if c in extra and c not in ("cell", "strategy")])
            extra = extra.merge(scores, on=["cell", "strategy"], how="left")
    return pd.concat([merged, extra[extra.cell.isin(info.index)]], ignore_index=True)


def read_hyps(path: Path) -> list[str] | None:
    return written_lines(path) if path.exists() else None


def validation_curve(log: Path) -> pd.DataFrame | None:
    """step, val_loss, val_bleu at each validation of a run's training log (logs/metrics.csv; a step
    validated again after a resume keeps its latest value); None without a log or a validation."""
    if not log.is_file():
        return None
    frame = pd.read_csv(log)
    cols = {"step": "step", "val/loss": "val_loss", "val/bleu": "val_bleu"}
    if "val/loss" not in frame:
        return None
    frame = frame.reindex(columns=list(cols)).rename(columns=cols).dropna(subset=["val_loss"])
    return None if frame.empty else frame.drop_duplicates("step", keep="last").reset_index(drop=True)


def tabulate(cells: list[dict], out: Path, *, significance: str = "bs", n_bootstrap: int = 1000,
             baseline: str | None = None, margin: float = 1.0,
             goal_pairs: list[tuple[str, str]] = (), compare: list[tuple[str, str]] = (),
             runs: Path | None = None) -> pd.DataFrame:
    """Gather every cell's metrics.json and curves into the results folder `out`'s tables; returns
    results.csv. `cells`: one dict per cell of the grid, its label columns (cell, family, task,
    decoder, ...: running/cell.py `describe`); the paired test and the grid's `baseline` as in
    add_significance; `margin`: the grid's equivalence margin (ranking.csv's verdicts); `goal_pairs`:
    the (system, of) pairs of its goals, and `compare` its `compare:` pairs, compared in ranking.csv;
    `runs`: the cells' run folders (default `out`/runs)."""
    runs = runs if runs is not None else out / "runs"
    rows, curves, samples, extra = [], {c: [] for c in (*CURVES, "validation")}, [], []
    for info in cells:
        name = info["cell"]
        run_dir = runs / name
        try:
            meta = read_metrics(run_dir) or {"status": "not run", "rows": []}
        except AtnatError as err:
            meta = {"status": "failed", "error": str(err), "rows": []}
        status = meta.get("status", "failed")
        if status != "ok" or not meta.get("rows"):
            rows.append(info | {"status": status, "error": meta.get("error", "")})
            continue
        trained = read_json_object(run_dir / "train.json")  # it only refines a column
        if trained is not None:  # the whole training time, or NaN where only part of it was recorded
            meta["rows"] = [r | {"train_time_s": whole_train_time(run_dir, trained, r.get("train_time_s", float("nan"))),
                                 "train_tokens_per_s": training_throughput(trained)} for r in meta["rows"]]
        code = {"trained_with": "+".join(dict.fromkeys(c for a in (trained or {}).get("attempts") or [] if (c := label(a)))),
                "evaluated_with": label(meta.get("written_by"))}
        meta["rows"] = [r | code for r in meta["rows"]]
        rows += [info | r | {"status": "ok", "error": ""} for r in meta["rows"]]
        extra += [{k: info.get(k) for k in ("cell", "family", "task", "decoder", "seed")} | e
                  for e in meta.get("extra_tests") or []]
        for curve in CURVES:
            path = run_dir / "curves" / f"{curve}.csv"
            if path.exists():
                curves[curve].append(pd.read_csv(path).assign(cell=name))
        if (run_dir / "samples.csv").exists():
            samples.append(pd.read_csv(run_dir / "samples.csv").assign(cell=name))
        validation = validation_curve(run_dir / "logs" / "metrics.csv")
        if validation is not None:
            curves["validation"].append(validation.assign(cell=name))
    named = [(r["cell"], r["strategy"]) for r in rows if r.get("status") == "ok" and "strategy" in r]
    twice = sorted({pair for pair in named if named.count(pair) > 1})
    if twice:
        pairs = [f"{cell} / {strategy}" for cell, strategy in twice]
        raise AtnatError(f"{out}: two systems share a name ({', '.join(pairs)}): their results would be mixed; "
                         "each strategy of a cell needs its own label")
    timing_path = out / "timing.csv"
    df = add_timing(pd.DataFrame(rows), schema.read_timing(timing_path) if timing_path.exists() else None, runs)
    df = add_significance(df, runs, method=significance, n=n_bootstrap, baseline=baseline)
    extra = pd.DataFrame(extra, columns=EXTRA_COLUMNS)
    write_csv(compare_systems(df, runs, n=n_bootstrap, test_sets=tuple(dict.fromkeys(extra["test_set"].astype(str))),
                              baseline=baseline),
              out / "comparisons.csv")
    write_csv(extra, out / "extra_tests.csv")
    write_csv(rank_systems(df, extra, runs, margin=margin, n=n_bootstrap, goal_pairs=goal_pairs,
                                 compare=compare), out / "ranking.csv")
    order = [c.name for c in schema.columns()]
    df = df.assign(**{col: float("nan") for col in order if col not in df})
    df = df[order + [c for c in df.columns if c not in order]]
    out.mkdir(parents=True, exist_ok=True)
    write_csv(df, out / "results.csv")
    (out / "curves").mkdir(exist_ok=True)
    for curve, frames in curves.items():  # a table no cell has data for now is removed: it would be drawn again
        if frames:
            write_csv(pd.concat(frames, ignore_index=True), out / "curves" / f"{curve}.csv")
        else:
            _remove(out / "curves" / f"{curve}.csv")
    if samples:
        write_csv(pd.concat(samples, ignore_index=True), out / "samples.csv")
    else:
        _remove(out / "samples.csv")
    return df


def _remove(path: Path) -> None:
    if path.is_file() or path.is_symlink():
        path.unlink()
