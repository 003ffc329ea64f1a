"""Where the ranking of a task's systems is beyond noise, on every test set: ranking.csv and its
sentences in the report.

Per task and test set (the main one and each of eval.extra_tests) the systems are ordered by mean
BLEU over seeds; each one is compared with the next one down by the paired difference of
metrics.quality.bleu_difference (seeds paired, a 95% interval over test sentences and seeds
together). A pair whose order differs between two test sets is compared on both (`relation`:
`next`, `flip`, `goal` - a grid goal's system against its `of` -, `compare` - a pair the grid's
`compare:` asks for -, `reach` - the best NAT system on the main test set against each other NAT
system, which the summary's "within reach" list rests on - or several), so a flip is called
real only when both of its intervals exclude 0 over several seeds (with one seed an interval covers the
test sentences only: training noise is not covered, and the report says so).
The verdict of a pair:

- `ahead`: the interval excludes 0 (the order holds beyond sentence and seed noise; one seed: beyond
  test-sentence noise only);
- `equivalent`: the whole interval lies within ± the grid's equivalence_margin;
- `not resolved`: neither (the order is noise as far as these runs can tell).
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from atnat.experiments.evaluation.baseline import is_nat_rows
from atnat.experiments.evaluation.metrics.quality import bleu_difference, relevel
from atnat.experiments.evaluation.references import read_references
from atnat.experiments.files import written_lines

MAIN = "main"  # ranking.csv's test_set of the task's own test split (its name in `split_name`)
RANKING_COLUMNS = ("task", "test_set", "split_name", "relation", "system", "against", "system_bleu", "against_bleu",
                   "n_seeds", "bleu_diff", "diff_ci_low", "diff_ci_high", "diff_seed_se", "diff_sentence_se",
                   "verdict")
# written since the simultaneous intervals of best-of-several goals; a ranking.csv from before has none (paired())
RANKING_OPTIONAL = ("diff_seed_se", "diff_sentence_se")
SYMBOL = {"ahead": ">", "behind": "<", "equivalent": "≈", "not resolved": "?"}


def signed(x: float, margin: float | None = None) -> str:
    """x to 2 decimals, or 3 where 2 would put it on 0 (or on ±margin) while it is not there: an interval
    shown beside a verdict must not seem to touch the line the verdict says it stays off (or crosses)."""
    lines = (0.0,) if margin is None else (0.0, margin, -margin)
    return f"{x:+.3f}" if round(x, 2) in lines and x not in lines else f"{x:+.2f}"


def within_margin(low: float, high: float, margin: float) -> bool:
    """The whole interval lies inside ±margin: any difference there is smaller than the margin."""
    return -margin <= low and high <= margin


def shown(verdict_: str, low: float, high: float, margin: float, symbol: bool = False) -> str:
    """A verdict as the report shows it: `ahead` / `behind` whose whole interval also lies inside
    ±margin is a difference beyond noise but smaller than the margin, and says so (`> ≈`, or `ahead,
    by less than ±1`), so that a trivially small but resolved difference does not read as a real gap."""
    small = verdict_ in ("ahead", "behind") and within_margin(low, high, margin)
    if symbol:
        return SYMBOL.get(verdict_, "?") + (" ≈" if small else "")
    return f"{verdict_}, by less than ±{margin:g}" if small else verdict_


def verdict(low: float, high: float, margin: float) -> str:
    """`ahead` / `behind` when the interval excludes 0, `equivalent` when it lies within ±margin, else
    `not resolved`."""
    if low > 0 or high < 0:
        return "ahead" if low > 0 else "behind"
    if within_margin(low, high, margin):
        return "equivalent"
    return "not resolved"


def _outputs(rows: pd.DataFrame, runs: Path, test_set: str) -> dict[str, dict[int, Path]]:
    """system -> {seed: hypothesis file} on `test_set` (MAIN: hyps/<strategy>.txt, else <strategy>@<set>)."""
    out: dict[str, dict[int, Path]] = {}
    for r in rows.itertuples():
        name = f"{r.strategy}.txt" if test_set == MAIN else f"{r.strategy}@{test_set}.txt"
        path = runs / r.cell / "hyps" / name
        if path.is_file():
            out.setdefault(r.system, {})[int(r.seed)] = path
    return out


def references_of(run_dir: Path, test_set: str) -> list[list[str]] | None:
    """A run's reference streams on `test_set` (MAIN: its own test split), None when not written."""
    if test_set == MAIN:
        return read_references(run_dir)
    path = run_dir / f"references@{test_set}.txt"
    return [written_lines(path)] if path.is_file() else None


def _read(path: Path) -> list[str]:
    return written_lines(path)


def _pair(a: str, b: str, files: dict[str, dict[int, Path]], refs, tokenize: str, n: int) -> dict | None:
    """The paired difference a - b over their common seeds; None when they share none."""
    seeds = sorted(set(files[a]) & set(files[b]))
    if not seeds:
        return None
    d = bleu_difference([_read(files[a][s]) for s in seeds], [_read(files[b][s]) for s in seeds], refs,
                        tokenize=tokenize, n=n)
    return {"seeds": seeds, "n_seeds": d.n_seeds, "bleu_diff": d.diff, "diff_ci_low": d.low, "diff_ci_high": d.high,
            "diff_seed_se": d.seed_se, "diff_sentence_se": d.sentence_se}


def rank_systems(df: pd.DataFrame, extra: pd.DataFrame | None, runs: Path, *, margin: float,
                 n: int = 1000, goal_pairs: list[tuple[str, str]] = (),
                 compare: list[tuple[str, str]] = ()) -> pd.DataFrame:
    """ranking.csv's rows (RANKING_COLUMNS) for the finished rows of results.csv `df` and the scores
    on further test sets `extra` (extra_tests.csv); systems without hypotheses on disk are left out.
    `goal_pairs`: (system, of) of the grid's goals against another system, compared on the main test
    set too (relation `goal`), so the goals table can say whether a goal is met beyond noise;
    `compare`: the grid's `compare:` pairs, on every test set (relation `compare`); the best NAT system
    (highest mean on the main test set) against every other NAT system there (relation `reach`)."""
    if "bleu" not in df:  # no cell finished with scores (all failed)
        return pd.DataFrame(columns=RANKING_COLUMNS)
    ok = df[df["status"] == "ok"].dropna(subset=["bleu"]).copy()
    if ok.empty:
        return pd.DataFrame(columns=RANKING_COLUMNS)
    ok["system"] = ok["family"].fillna(ok["cell"]).astype(str) + " / " + ok["strategy"].astype(str)
    rows = []
    for task, part in ok.groupby("task", sort=False):
        tokens = part["bleu_tokenize"].dropna() if "bleu_tokenize" in part else pd.Series(dtype=object)
        tokenize = str(tokens.iloc[0]) if len(tokens) else "13a"
        scores_of = {MAIN: part}  # per test set: one row per system and seed
        if extra is not None and not extra.empty:
            mine = extra[extra["task"].astype(str) == str(task)]
            mine = mine.assign(system=mine["family"].fillna(mine["cell"]).astype(str) + " / " + mine["strategy"])
            for name, scores in mine.groupby("test_set", sort=False):
                scores_of[str(name)] = scores
        means = {name: s.groupby("system", sort=False)["bleu"].mean() for name, s in scores_of.items()}
        by_seed = {name: s.dropna(subset=["bleu"]).set_index(["system", s["seed"].astype(int)])["bleu"]
                   for name, s in scores_of.items()}
        split = _split_name(runs / part["cell"].iloc[0])
        files = {name: {s: f for s, f in _outputs(part, runs, name).items() if s in means[name].index}
                 for name in means}  # a system's outputs on a test set it has a score on
        order = {name: [s for s in m.sort_values(ascending=False, kind="stable").index if s in files[name]]
                 for name, m in means.items()}
        wanted = {name: {(a, b): ["next"] for a, b in zip(o, o[1:])} for name, o in order.items()}
        for name, ranked in order.items():  # pairs ordered differently on another test set: on both
            for other, ranked_other in order.items():
                place = {s: i for i, s in enumerate(ranked_other)}
                common = [s for s in ranked if s in place]
                for i, a in enumerate(common):
                    for b in common[i + 1:]:
                        if other != name and place[a] > place[b] and "flip" not in wanted[name].get((a, b), []):
                            wanted[name].setdefault((a, b), []).append("flip")
        known = "autoregressive" in part or "decoder" in part  # a table that says which systems are AT
        nat = set(part.loc[is_nat_rows(part).to_numpy(), "system"]) if known else set()
        best = next((s for s in means[MAIN].sort_values(ascending=False, kind="stable").index if s in nat), None)
        if best in files[MAIN]:  # the summary's best NAT (by mean, hypotheses or not): only it, never a runner-up
            for other in (s for s in order[MAIN] if s in nat and s != best):  # clearly below it, or within reach
                wanted[MAIN].setdefault((best, other), []).append("reach")
        for a, b in goal_pairs:
            if a in files[MAIN] and b in files[MAIN]:
                wanted[MAIN].setdefault((a, b), []).append("goal")
        for name in wanted:
            for a, b in compare:
                if a in files[name] and b in files[name]:
                    wanted[name].setdefault((a, b), []).append("compare")
        for name, pairs in wanted.items():
            first = part.loc[part["system"].isin([a for a, _ in pairs]), "cell"]
            refs = references_of(runs / first.iloc[0], name) if len(first) else None
            if refs is None:
                continue
            for (a, b), relation in pairs.items():
                d = _pair(a, b, files[name], refs, tokenize, n)
                if d is None:
                    continue
                seeds = d.pop("seeds")  # both means on the seeds the difference pairs, as the difference
                rows.append({"task": task, "test_set": name, "split_name": split if name == MAIN else name,
                             "relation": " ".join(relation), "system": a, "against": b,
                             "system_bleu": by_seed[name][a].loc[seeds].mean(),
                             "against_bleu": by_seed[name][b].loc[seeds].mean(), **d,
                             "verdict": verdict(d["diff_ci_low"], d["diff_ci_high"], margin)})
    return pd.DataFrame(rows, columns=RANKING_COLUMNS)


def _split_name(run_dir: Path) -> str:
    """The task's own test split as the run's config.json names it (`test` of a parallel task)."""
    try:
        task = json.loads((run_dir / "config.json").read_text(encoding="utf-8")).get("task", {})
    except (OSError, ValueError):
        return "main test set"
    return str(task.get("test") or task.get("split") or "main test set") if isinstance(task, dict) else "main test set"


def chain(rows: pd.DataFrame) -> str:
    """`A (37.8) > B (35.1) ? C (34.9)`: one test set's `next` rows as a ranked chain."""
    nexts = rows[rows["relation"].str.contains("next")]
    if nexts.empty:
        return ""
    parts = [f"`{nexts.iloc[0]['system']}` ({nexts.iloc[0]['system_bleu']:.2f})"]
    for r in nexts.itertuples():
        parts.append(f"{SYMBOL.get(r.verdict, '?')} `{r.against}` ({r.against_bleu:.2f})")
    return " ".join(parts)


# The kinds of flips() in the order it lists them, each with the report's words for a count of them
# (report.py's Other test sets paragraph names every kind that occurs, from this one place):
FLIP_KINDS = {
    "real": "real flip(s) (the paired 95% interval excludes 0 on both test sets, in opposite directions, over "
            "several seeds)",
    "one seed": "flip(s) beyond test-sentence noise on both test sets with one seed (training noise not covered)",
    "one test set": "beyond noise on one test set only",
    "noise": "within noise on every test set",
    "one side": "compared on one test set only (no paired result on the other: no common seeds or no references "
                "there), so not judged as a flip",
    "same when paired": "the same order once paired on common seeds (the means' order differed only through the "
                        "seeds each mean holds)",
}
ONE_SEED = "one seed: training noise not covered"  # what an interval over one seed leaves out


def flips(ranking: pd.DataFrame, task: str) -> list[tuple[str, str]]:
    """(kind, sentence) per pair of `task` whose order differs between test sets, with its intervals;
    kind is one of FLIP_KINDS, in its order. A pair paired on one seed on some test set is beyond
    test-sentence noise at most (never `real`); one with a flip row on a single test set (its other side
    not paired) is `one side`, never a verdict about every test set."""
    mine = ranking[(ranking["task"].astype(str) == str(task)) & ranking["relation"].str.contains("flip")]
    n_sets = ranking.loc[ranking["task"].astype(str) == str(task), "split_name"].nunique()
    sides: dict[tuple[str, str], dict[str, tuple[float, float, float, float]]] = {}
    for r in mine.itertuples():  # each flip has a row on both test sets, a and b swapped: one orientation
        key = next((k for k in ((r.system, r.against), (r.against, r.system)) if k in sides), (r.system, r.against))
        sign = 1 if key == (r.system, r.against) else -1
        low, high = sorted((sign * r.diff_ci_low, sign * r.diff_ci_high))
        sides.setdefault(key, {})[r.split_name] = (sign * r.bleu_diff, low, high, getattr(r, "n_seeds", float("nan")))
    out = []
    for (a, b), per_set in sides.items():
        beyond = {name: d > 0 for name, (d, low, high, _) in per_set.items() if low > 0 or high < 0}
        one_seed = any(k == 1 for *_, k in per_set.values())
        noise = "test-sentence noise" if one_seed else "noise"
        caveat = f" ({ONE_SEED})" if one_seed and beyond else ""
        where = "every test set" if len(per_set) >= n_sets else f"each of the {len(per_set)} test sets it was paired on"
        if len(per_set) == 1:
            kind = "one side"
        elif len(set(beyond.values())) == 2:
            kind = "one seed" if one_seed else "real"
        else:
            kind = "noise" if not beyond else "same when paired" if len(beyond) == len(per_set) else "one test set"
        judged = {"real": "a real flip: beyond noise on both sides",
                  "one seed": f"a flip beyond test-sentence noise on both sides{caveat}",
                  "noise": f"within {noise} on {where}",
                  "one test set": f"beyond {noise} on " + ", ".join(beyond) + f" only{caveat}",
                  "one side": f"compared on {next(iter(per_set))} only: no paired result on another test set, so "
                              f"not judged as a flip; {'beyond' if beyond else 'within'} {noise} there{caveat}",
                  "same when paired": f"not a flip: paired on common seeds, the same order beyond {noise} on "
                                      f"{where}{caveat}"}[kind]
        text = "; ".join(f"{name} {d:+.2f} [{signed(low)}, {signed(high)}]" for name, (d, low, high, _) in per_set.items())
        out.append((kind, f"`{a}` minus `{b}`: {text} ({judged})"))
    return sorted(out, key=lambda k: list(FLIP_KINDS).index(k[0]))


def paired(ranking: pd.DataFrame | None, a: str, b: str, level: float = 0.95) -> dict | None:
    """a - b on the main test set from ranking.csv, either way round: {diff, low, high, a, b, n_seeds}
    (a, b: their mean BLEU on the seeds the difference pairs; low, high: its `level` interval, the
    stored 95% one re-levelled from its standard errors, metrics.quality.relevel - a ranking.csv
    written before they were kept is widened at k - 1 df: wider, never narrower); None when the pair
    was not compared."""
    if ranking is None:
        return None
    main = ranking[ranking["test_set"].astype(str) == MAIN]
    for sign, (x, y) in ((1, (a, b)), (-1, (b, a))):
        hit = main[(main["system"] == x) & (main["against"] == y)]
        if not hit.empty:
            r = hit.iloc[0]
            n_seeds = int(r["n_seeds"])
            parts = {k: float(r.get(f"diff_{k}", float("nan"))) for k in ("seed_se", "sentence_se")}
            low, high = relevel(r["bleu_diff"], r["diff_ci_low"], r["diff_ci_high"], level, k=n_seeds, **parts)
            low, high = sorted((sign * low, sign * high))
            mine, theirs = (r["system_bleu"], r["against_bleu"])[::sign]
            return {"diff": sign * r["bleu_diff"], "low": low, "high": high, "a": mine, "b": theirs,
                    "n_seeds": n_seeds}
    return None
