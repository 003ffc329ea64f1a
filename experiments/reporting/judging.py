"""What the report's summary says, phrased from the numbers: per task the best AT and the best NAT
system, whether they differ beyond noise (the paired interval of comparisons.csv, and the paired
test against that very system; aggregate.py's rules where no paired interval exists), are
equivalent within the margin, or are not resolved; the NAT's speed with its interval; the other NAT
systems within reach of the best one (the highest of several noisy means is not a winner by
itself), each with its own difference and speed; and the systems not clearly beaten in both
quality and speed, NAT first."""
from __future__ import annotations

import re

import pandas as pd

from atnat.experiments.evaluation.baseline import is_at_rows, is_nat_rows, reference_at_rows
from atnat.experiments.evaluation.metrics.quality import relevel
from atnat.experiments.reporting.aggregate import (
    aggregate_seeds,
    beyond_spread,
    interval,
    robust_front,
    seeds_alone,
    seeds_of,
    significant,
)
from atnat.experiments.reporting.names import lossy_mark, plain_names
from atnat.experiments.reporting.ranking import MAIN, paired, signed, within_margin
from atnat.experiments.reporting.results import GridResults, ok_rows


def summary(g: GridResults) -> str:
    """One paragraph per grid phrased from the numbers: per task, best AT and best NAT system, and
    how far their difference is resolved (see the module docstring)."""
    timing = _threads_of((g.environment or {}).get("timing", ""))
    parts = [_task_summary(task, part, g.comparisons, g.equivalence_margin, timing, g.ranking, g.baseline)
             for task, part in ok_rows(g.table).groupby("task", sort=False)]
    cells = g.table.drop_duplicates("cell")
    finished, total = int((cells["status"] == "ok").sum()), len(cells)
    not_run = int((cells["status"] == "not run").sum())  # no result yet (a partial grid), not a failure
    failed = total - finished - not_run
    tail = "".join([f"; {failed} failed (listed below)" if failed else "",
                    f"; {not_run} not run yet (listed below)" if not_run else ""])
    return " ".join([*parts, f"{finished} of {total} cells finished{tail}."])


def _best(agg: pd.DataFrame) -> pd.Series | None:
    scored = agg.dropna(subset=["bleu"])
    return None if scored.empty else scored.loc[scored["bleu"].idxmax()]


def _name(r: pd.Series, plain: dict[str, str] | None = None) -> str:
    """`family / strategy` (its plain name, as the verdict calls it; its mean BLEU, over how many seeds)."""
    scored = seeds_of(r, "bleu")  # the seeds its mean BLEU stands on
    seeds = f", {scored} seeds" if scored > 1 else ""
    system = f"{r['family']} / {r['strategy']}"
    called = f"{plain[system]}; " if plain and system in plain else ""
    return f"`{system}` ({called}{r['bleu']:.2f} BLEU{seeds})"


def picked(diff: pd.Series, m: int) -> pd.Series:
    """The paired difference of the best of m systems (picked by their means on the same sentences) with its
    interval widened to 1 - 0.05/m (Bonferroni, as a goal's best of several): the pick favours a lucky system,
    so a 95% interval would claim too much for it (ahead, or equivalent). Exact from the standard errors
    comparisons.csv keeps; from a table without them, each side scaled by the quantiles' ratio
    (quality.relevel). `level` holds the confidence."""
    level = 0.95 if m <= 1 else 1 - 0.05 / m
    k = int(diff["n_seeds"]) if pd.notna(diff.get("n_seeds")) else 1
    low, high = relevel(float(diff["bleu_diff"]), float(diff["diff_ci_low"]), float(diff["diff_ci_high"]), level, k=k,
                        seed_se=float(diff.get("diff_seed_se", float("nan"))),
                        sentence_se=float(diff.get("diff_sentence_se", float("nan"))))
    widened = diff.copy()
    widened["diff_ci_low"], widened["diff_ci_high"], widened["level"] = low, high, level
    return widened


def _verdict(nat: pd.Series, at: pd.Series, comparison: pd.Series | None, margin: float,
             family_of: dict[str, str] | None = None) -> str:
    """How the best NAT system compares with the best AT one, claimed only as far as the numbers go:
    ahead or behind when the difference's interval excludes 0 (and the paired test agrees),
    equivalent when the whole interval lies within ±margin, else not resolved - with the interval."""
    several = nat["n_seeds"] > 1 and at["n_seeds"] > 1
    if comparison is None:  # no paired interval (hypotheses gone): only the systems' own intervals
        gap = nat["bleu"] - at["bleu"]
        if beyond_spread(nat, at, "bleu"):  # disjoint intervals: a conservative claim, still made
            own = "95% intervals of the means (Student's t over seeds)" if several else \
                "95% intervals (one seed: test sentences only)"
            return f"{abs(gap):.2f} BLEU {'behind' if gap < 0 else 'ahead of'} it, beyond both systems' {own}"
        return (f"{gap:+.2f} BLEU against it; not resolved (their intervals overlap, and no paired interval: "
                "the runs' hypotheses are not in this results folder)")
    d, low, high = comparison["bleu_diff"], comparison["diff_ci_low"], comparison["diff_ci_high"]
    n = int(comparison.get("n_seeds", 1) or 1)
    level = comparison.get("level", 0.95)
    paired_at = "paired 95%" if pd.isna(level) or level == 0.95 else \
        f"paired {100 * level:.1f}%, simultaneous over the NAT systems it is the best of"
    over = f"{paired_at}, {n} seeds; Student's t over the seeds, test-sentence variance added" if n > 1 else \
        f"{paired_at}, one seed: the interval covers the choice of test sentences only, not training noise"
    if n < max(nat["n_seeds"], at["n_seeds"]):  # the means above hold other seeds than the difference
        over += f"; paired on the {n} seed{'s' if n != 1 else ''} both have"
    if pd.isna(low) or pd.isna(high):
        return f"not resolved: {d:+.2f} BLEU, with no interval (fewer than 2 test-sentence resamples: eval.n_bootstrap)"
    interval = f"{d:+.2f} BLEU [{signed(low, margin)}, {signed(high, margin)}] ({over})"
    tested = tested_against(nat, at, family_of)
    agrees = significant(nat) if tested else True
    if (low > 0 or high < 0) and agrees:
        test = ""
        if tested:
            test = ", and the paired test agrees (Holm p < 0.05" + (" in every seed)" if several else ")")
        small = f", less than the ±{margin:g} equivalence margin" if within_margin(low, high, margin) else ""
        return f"{abs(d):.2f} BLEU {'behind' if d < 0 else 'ahead of'} it{small}: {interval}{test}"
    if within_margin(low, high, margin):
        return f"equivalent to it within ±{margin:g} BLEU: {interval}"
    untested = pd.isna(nat.get("bleu_p_holm_max", nat.get("bleu_p_holm")))
    why = ("the paired test is missing for a seed" if untested else "the paired test does not agree in every seed") \
        if (low > 0 or high < 0) else f"the interval holds 0 but is not inside ±{margin:g}"
    return f"not resolved: {interval}; {why}"


def families_of(part: pd.DataFrame) -> dict[str, str]:
    """cell -> its family (the cell itself where none is recorded): what tested_against reads a p_baseline by."""
    return dict(zip(part["cell"], part["family"].fillna(part["cell"]))) if "family" in part else {}


def tested_against(nat: pd.Series, at: pd.Series, family_of: dict[str, str] | None = None) -> bool:
    """Are nat's paired-test p-values (bleu_p_holm, against p_baseline) against this very system (family
    and strategy)? Then a claim of ahead or behind also needs the test to agree (aggregate.significant)."""
    base_cell, _, base_strategy = str(nat.get("p_baseline", "")).partition(" / ")
    return base_strategy == at["strategy"] and (family_of or {}).get(base_cell, base_cell) == at["family"]


def _mixing(agg: pd.DataFrame) -> str:
    """Dialect-like tasks: how often the AT and the NAT systems mix target variants inside a sentence
    - each family's range with the systems at its ends; with more than a few systems the rest is
    left to the overview's Mixing column (the summary stays a few sentences)."""
    rows = agg.dropna(subset=["mixing_rate"])
    if rows.empty:
        return ""
    at_rows = is_at_rows(rows)
    parts = [_mixing_range(label, rows[mask]) for label, mask in (("AT", at_rows), ("NAT", ~at_rows))]
    parts = [p for p in parts if p]
    more = " (every system: the overview's Mixing column)" if len(rows) > MIXING_NAMED else ""
    return (" Variant mixing (sentences whose words come from more than one target variant): "
            f"{'; '.join(parts)}{more}.")


MIXING_NAMED = 4  # systems whose mixing the summary can list one by one


def _mixing_range(family: str, rows: pd.DataFrame) -> str:
    if rows.empty:
        return ""
    name = lambda r: f"`{r['family']} / {r['strategy']}` {100 * r['mixing_rate']:.1f}%"
    ordered = rows.sort_values("mixing_rate", kind="stable")
    if len(ordered) <= 2 or len(ordered) <= MIXING_NAMED // 2:
        return f"{family} " + ", ".join(name(r) for _, r in ordered.iterrows())
    low, high = ordered.iloc[0], ordered.iloc[-1]
    if low["mixing_rate"] == high["mixing_rate"]:
        return f"{family} {100 * low['mixing_rate']:.1f}% (all {len(ordered)} systems)"
    return f"{family} from {name(low)} to {name(high)} ({len(ordered)} systems)"


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _threads_of(timing: str) -> str:
    """Where the speed was measured, from environment.json's timing text: '2 CPU threads' (results folders older
    than timing_threads), or on a GPU 'on cuda:0 (NVIDIA H100 80GB HBM3), engine auto'; '' when it says neither."""
    found = re.search(r"(\d+) CPU threads?", timing or "")
    if found:
        return found.group(0)
    gpu = re.search(r"\bon (cuda(?::\d+)?(?: \([^)]*\))?)(?:, engine ([\w-]+))?", timing or "")
    return f"on {gpu.group(1)}" + (f", engine {gpu.group(2)}" if gpu.group(2) else "") if gpu else ""


def _comparison(comparisons: pd.DataFrame | None, task: str, nat: pd.Series, at: pd.Series) -> pd.Series | None:
    """comparisons.csv's row of `nat` against `at` in this task, if there is one."""
    if comparisons is None:
        return None
    if "test_set" in comparisons:  # the main test set's rows (older comparisons.csv: only those)
        comparisons = comparisons[comparisons["test_set"].astype(str) == MAIN]
    hit = comparisons[(comparisons["task"].astype(str) == task)
                      & (comparisons["system"] == f"{nat['family']} / {nat['strategy']}")
                      & (comparisons["against"] == f"{at['family']} / {at['strategy']}")]
    return None if hit.empty else hit.iloc[0]


def _other_test_sets(comparisons: pd.DataFrame | None, task: str, nat: pd.Series, at: pd.Series) -> str:
    """'; on test2017 -1.90 BLEU [-2.60, -1.20] (paired 95%, 3 seeds)': the same difference on each further
    test set."""
    if comparisons is None or "test_set" not in comparisons:
        return ""
    rows = comparisons[(comparisons["task"].astype(str) == task) & (comparisons["test_set"].astype(str) != MAIN)
                       & (comparisons["system"] == f"{nat['family']} / {nat['strategy']}")
                       & (comparisons["against"] == f"{at['family']} / {at['strategy']}")]
    parts = [f"on {r['test_set']} {r['bleu_diff']:+.2f} BLEU [{signed(r['diff_ci_low'])}, {signed(r['diff_ci_high'])}] "
             f"(paired 95%, {int(r['n_seeds'])} seed{'s' if int(r['n_seeds']) != 1 else ''})" for _, r in rows.iterrows()]
    return f"; {'; '.join(parts)}" if parts else ""


def _task_summary(task: str, part: pd.DataFrame, comparisons: pd.DataFrame | None = None,
                  margin: float = 1.0, timing: str = "", ranking: pd.DataFrame | None = None,
                  baseline: str | None = None) -> str:
    """Mixing first where a task measures it; the AT reference (the best strategy of the grid's
    `baseline` cell, else the best of our AT systems: the one comparisons.csv is against) and the best
    NAT system (mean BLEU), the verdict, the NAT speed-ups, and the front of systems not clearly
    beaten in both BLEU and speed-up."""
    agg = aggregate_seeds(part)
    mixing = _mixing(agg)
    nat_rows = is_nat_rows(agg)  # a speculative strategy is the AT's output at another speed: not a NAT system
    reference = reference_at_rows(agg, baseline)  # our AT (never its engine twin), the declared baseline's
    at, nat = _best(agg[reference]), _best(agg[nat_rows])
    declared = baseline and "variant" in agg and (agg.loc[reference, "variant"].astype(str) == baseline).all()
    what = f"the AT baseline (`baseline: {baseline}`)" if declared else "the best AT system"
    plain = plain_names(agg.assign(system=agg["family"].astype(str) + " / " + agg["strategy"].astype(str)))
    rest = f"{what} is {_name(at, plain)}" if at is not None else "there is no AT baseline"
    text = f"On `{task}`:{mixing} {_capital(rest) if mixing else rest}"
    if nat is None:
        return text + " and no NAT system."
    text += f"; the best NAT system is {_name(nat, plain)}"
    if at is not None:
        family_of = families_of(part)
        comparison = _comparison(comparisons, task, nat, at)
        m = int(agg.loc[nat_rows, "bleu"].notna().sum())
        if comparison is not None and m > 1 and pd.notna(comparison["diff_ci_low"]) and (
                comparison["diff_ci_low"] > 0 or within_margin(comparison["diff_ci_low"], comparison["diff_ci_high"],
                                                               margin)):
            comparison = picked(comparison, m)  # ahead or equivalent: the pick favours a lucky one, as the verdict says
        text += ", " + _verdict(nat, at, comparison, margin, family_of)
        text += _other_test_sets(comparisons, task, nat, at)
    threads = _threads(part, nat) or timing
    speed = _speed(nat, threads)
    text += f". It runs {speed}" if speed else ""
    text += _within_reach(agg[nat_rows], nat, ranking)
    front = robust_front(agg, "speedup_vs_at", "bleu")
    if not front.empty:  # NAT systems first, fastest first: the ones a reader is looking for
        front = front.assign(_at=~is_nat_rows(front)).sort_values(["_at", "speedup_vs_at"], ascending=[True, False],
                                                                 kind="stable")
    listed = [f"`{r['family']} / {r['strategy']}`{lossy_mark(r)}" for _, r in front.iterrows()]
    if len(listed) > FRONT_NAMED:  # a few names; the figure rings them all
        listed = listed[:FRONT_NAMED] + [f"{len(listed) - FRONT_NAMED} more (ringed in the figure)"]
    return text + (". Not clearly beaten in both BLEU and batch-1 speed-up over AT greedy (NAT first, fastest "
                   f"first): {', '.join(listed)}." if listed else ".")


def _ratio(row: pd.Series, col: str) -> str:
    """'3.86× [3.47, 4.25]' (the 95% interval of the mean, aggregate.interval: t over seeds, at least
    the A/A floor), tagged when the interval lies below 1 or holds it (then with the mean's side of 1: a
    0.64× [0.37, 1.11] is slower on the mean, not "not faster")."""
    low, high = interval(row, col)
    if pd.isna(low) or pd.isna(high) or low == high:  # no interval recorded (an older results.csv)
        return f"{row[col]:.2f}×"
    tag = (" (slower)" if high < 1 else "" if low > 1 else  # 1x inside: the side of the mean, not beyond noise
           " (faster on the mean, not beyond noise)" if row[col] > 1 else
           " (slower on the mean, not beyond noise)" if row[col] < 1 else " (not different beyond noise)")
    return f"{row[col]:.2f}× [{low:.2f}, {high:.2f}{'; over the seeds alone' if seeds_alone(row, col) else ''}]{tag}"


def _speed(nat: pd.Series, threads: str) -> str:
    """'at 3.86× [3.47, 4.25] AT greedy's batch-1 speed and ... (3 seeds, 1 CPU thread)', '' untimed."""
    ours = [f"{_ratio(nat, c)} {how}" for c, how in _SPEEDS[:2] if pd.notna(nat.get(c))]
    engine = [f"{_ratio(nat, c)} {how}" for c, how in _SPEEDS[2:] if pd.notna(nat.get(c))]
    if not ours and not engine:
        return ""
    text = f"at {' and '.join(ours)} of our AT greedy" if ours else ""
    if engine:
        text += (" and " if ours else "at ") + f"{' and '.join(engine)} of the same AT run by CTranslate2"
    n = int(nat["n_seeds"])
    k = max(seeds_of(nat, c) for c, _ in _SPEEDS if pd.notna(nat.get(c)))
    seeds = f"timed on {k} of its {n} seeds" if k < n else f"{n} seeds" if n > 1 else "one seed"
    return text + f" ({seeds}{', ' + threads if threads else ''}; 95% intervals, at least the A/A noise floor)"


def within_reach(nats: pd.DataFrame, best: pd.Series, ranking: pd.DataFrame | None = None) -> list[tuple]:
    """The other systems of `nats` not clearly below `best` in BLEU, best first, each with its paired
    interval against it (ranking.csv) or None where the pair was not compared (their own 95% intervals
    overlap then): [(row, pair)]. The one rule of "within reach" (see _within_reach)."""
    near = []
    for _, r in nats.dropna(subset=["bleu"]).sort_values("bleu", ascending=False, kind="stable").iterrows():
        if r["family"] == best["family"] and r["strategy"] == best["strategy"]:
            continue
        pair = paired(ranking, f"{r['family']} / {r['strategy']}", f"{best['family']} / {best['strategy']}")
        if (pair is not None and pair["high"] < 0) or (pair is None and beyond_spread(r, best, "bleu")):
            continue
        near.append((r, pair))
    return near


def _within_reach(nats: pd.DataFrame, best: pd.Series, ranking: pd.DataFrame | None = None) -> str:
    """The other NAT systems not clearly below the best one - the best of several noisy means may be
    ahead by luck - each with its difference and batch-1 speed. Clearly below: the paired 95% interval
    of it minus the best (ranking.csv, relation `reach`) lies below 0; in a ranking.csv from before that
    relation, where the pair was not compared, their own 95% intervals are disjoint (a conservative test,
    said so). Two intervals against the same AT are no test of the pair: each carries the AT's noise."""
    near = []
    for r, pair in within_reach(nats, best, ranking):
        if pair is not None:
            n = pair["n_seeds"]
            diff, low, high = (v + 0.0 for v in (pair["diff"], pair["low"], pair["high"]))  # no "-0.00"
            what = (f"{r['bleu']:.2f} BLEU, {diff:+.2f} [{signed(low)}, {signed(high)}] against the "
                    f"best NAT, paired on {n} seed{'s' if n != 1 else ''}")
        else:
            what = f"{r['bleu']:.2f} BLEU: not paired with the best NAT; its 95% interval overlaps the best one's"
        k, n = seeds_of(r, "speedup_vs_at"), int(r["n_seeds"])
        speed = (f", {_ratio(r, 'speedup_vs_at')} at batch 1" + (f" (timed on {k} of {n} seeds)" if k < n else "")
                 if pd.notna(r.get("speedup_vs_at")) else "")
        seeds = f", {int(r['n_seeds'])} seeds" if r["n_seeds"] > 1 and pair is None else ""
        near.append(f"`{r['family']} / {r['strategy']}` ({what}{seeds}{speed})")
    if not near:
        return ""
    if len(near) > REACH_NAMED:
        near = near[:REACH_NAMED] + [f"{len(near) - REACH_NAMED} more"]
    return (". Within reach of the best NAT (not clearly below it: its paired 95% interval against the best NAT does "
            f"not lie below 0, or, where the two are not paired, their 95% intervals overlap): {'; '.join(near)}")


REACH_NAMED = 3  # other NAT systems within reach that the summary names
FRONT_NAMED = 4  # systems of the front the summary names before it points to the figure
_SPEEDS = (("speedup_vs_at", "the batch-1 speed"), ("throughput_speedup_vs_at", "the large-batch throughput"),
           ("speedup_vs_ct2", "the batch-1 speed"), ("throughput_speedup_vs_ct2", "the large-batch throughput"))


def _threads(part: pd.DataFrame, system: pd.Series) -> str:
    """The CPU threads the system's seeds were timed with ('1 CPU thread', '1 to 2 CPU threads'); '' when not
    recorded. From the seeds' rows, not their mean (seeds timed at 1, 2 and 2 threads are no '1 CPU thread')."""
    if "timing_threads" not in part:
        return ""
    rows = part[(part["family"].astype(str) == str(system["family"])) & (part["strategy"].astype(str) == str(system["strategy"]))]
    counts = sorted({int(t) for t in pd.to_numeric(rows["timing_threads"], errors="coerce").dropna()})
    if not counts:
        return ""
    return (f"{counts[0]} CPU thread{'s' if counts[0] != 1 else ''}" if len(counts) == 1 else
            f"{counts[0]} to {counts[-1]} CPU threads (by seed)")
