"""Results over seeds: one row per system (cell family x strategy) with the mean and the spread,
and the rules the report uses before it calls one system better than another where no paired
interval exists (reporting/ranking.py and table.py give those): the two systems' 95% intervals of
their means (`interval`: Student's t over seeds, the test-sentence variance added; one seed: the
recorded bootstrap interval) must not overlap. For BLEU against the AT baseline the paired
significance test must agree as well (Holm-corrected p < 0.05 in every seed).
"""
from __future__ import annotations

import math

import pandas as pd

from atnat.experiments.evaluation.metrics.quality import relevel, t_interval

ALPHA = 0.05  # significance level of the paired tests (after Holm's correction)
# columns whose (low, high) 95% interval stands in for the spread when a system has one seed
INTERVALS = {"bleu": ("bleu_ci_low", "bleu_ci_high"), "speedup_vs_at": ("speedup_ci_low", "speedup_ci_high"),
             "throughput_speedup_vs_at": ("throughput_speedup_ci_low", "throughput_speedup_ci_high"),
             "latency_ms_b1": ("latency_ms_b1_ci_low", "latency_ms_b1_ci_high"),
             "speedup_vs_ct2": ("speedup_vs_ct2_ci_low", "speedup_vs_ct2_ci_high"),
             "throughput_speedup_vs_ct2": ("throughput_speedup_vs_ct2_ci_low", "throughput_speedup_vs_ct2_ci_high"),
             "speedup_vs_ref_at": ("speedup_vs_ref_at_ci_low", "speedup_vs_ref_at_ci_high"),
             "speedup_vs_at_beam": ("speedup_vs_at_beam_ci_low", "speedup_vs_at_beam_ci_high"),
             "throughput_speedup_vs_at_beam": ("throughput_speedup_vs_at_beam_ci_low",
                                               "throughput_speedup_vs_at_beam_ci_high"),
             "throughput_speedup_vs_ref_at": ("throughput_speedup_vs_ref_at_ci_low", "throughput_speedup_vs_ref_at_ci_high"),
             "error_propagation": ("error_propagation_ci_low", "error_propagation_ci_high")}
# what a column's mean can be: a t interval near an end is cut there (3 seeds at 0.1-2 BLEU reached below 0)
RANGES = {"bleu": (0.0, 100.0), "latency_ms_b1": (0.0, math.inf)}
KEYS = ["task", "family", "strategy"]
SEED_COUNT = "_seed_count"  # suffix of aggregate_seeds' per-column seed counts (a results.csv has `error_propagation_n`)
# the A/A control's noise floors (timing.py), each measured on its own kind of timing
LATENCY_FLOOR = ("speed_noise_low", "speed_noise_high")  # batch-1 latency
THROUGHPUT_FLOOR = ("throughput_noise_low", "throughput_noise_high")  # large-batch throughput
# each speed ratio -> the floor of its kind. The CTranslate2 ratios take the same floors: the control is our
# baseline timed twice in the same session on the same sentences, the nearest measure of that session's timing
# noise (the twin's own run-to-run noise is not measured)
NOISE_FLOORS = {"speedup_vs_at": LATENCY_FLOOR, "speedup_vs_ct2": LATENCY_FLOOR, "speedup_vs_ref_at": LATENCY_FLOOR,
                "speedup_vs_at_beam": LATENCY_FLOOR, "throughput_speedup_vs_at": THROUGHPUT_FLOOR,
                "throughput_speedup_vs_ct2": THROUGHPUT_FLOOR, "throughput_speedup_vs_ref_at": THROUGHPUT_FLOOR,
                "throughput_speedup_vs_at_beam": THROUGHPUT_FLOOR}


def aggregate_seeds(ok: pd.DataFrame) -> pd.DataFrame:
    """Finished rows -> one row per (task, family, strategy) in first-seen order: every numeric
    column's mean, and `<col>_sd`, `<col>_min`, `<col>_max`, `<col>_seed_count` (seeds with a value) over seeds, `n_seeds`, and
    `bleu_p_holm_max` (the least significant seed; NaN when a seed has no test); label columns from the
    first seed. The A/A noise floors (LATENCY_FLOOR, THROUGHPUT_FLOOR) are the union over seeds (least
    low, greatest high), not a mean: the widest any seed measured, as the report's speed note states it. A
    speculative system's acceptance length is its seeds' tokens over their verifier passes, pooled (a mean
    of the seeds' ratios would not agree with the mean passes beside it)."""
    df = ok.assign(family=ok["family"].fillna(ok["cell"]) if "family" in ok else ok["cell"]).copy()
    numeric = [c for c in df.columns if c not in KEYS and pd.api.types.is_numeric_dtype(df[c])
               and not pd.api.types.is_bool_dtype(df[c])]
    groups = df.groupby(KEYS, sort=False)
    labels = [c for c in df.columns if c not in KEYS and c not in numeric]
    parts = [groups[numeric].mean(), groups[numeric].std().add_suffix("_sd"),
             groups[numeric].min().add_suffix("_min"), groups[numeric].max().add_suffix("_max"),
             groups[numeric].count().add_suffix(SEED_COUNT),  # the seeds each mean stands on (seeds_of)
             groups[labels].first(),
             (groups["seed"].nunique() if "seed" in df else groups.size()).rename("n_seeds")]  # seeds, not rows
    out = pd.concat(parts, axis=1)
    for low, high in (LATENCY_FLOOR, THROUGHPUT_FLOOR):
        if low in numeric and high in numeric:
            out[low], out[high] = groups[low].min(), groups[high].max()
    if "acceptance_length" in numeric and "verifier_passes" in numeric:  # tokens over verifier passes, pooled
        both = df["acceptance_length"].notna() & df["verifier_passes"].notna()  # (a seed's tokens: its ratio x passes)
        tokens = (df["acceptance_length"] * df["verifier_passes"]).where(both).groupby([df[k] for k in KEYS], sort=False)
        passes = df["verifier_passes"].where(both).groupby([df[k] for k in KEYS], sort=False)
        out["acceptance_length"] = (tokens.sum(min_count=1) / passes.sum(min_count=1)).reindex(out.index)
    if "bleu_p_holm" in df:  # the least significant seed; a seed without a test leaves no claim for all
        out["bleu_p_holm_max"] = groups["bleu_p_holm"].agg(lambda p: p.max() if p.notna().all() else float("nan"))
    return out.reset_index().copy()


SPEED_RATIOS = tuple(NOISE_FLOORS)


def seeds_of(row: pd.Series, col: str) -> int:
    """How many seeds a system's mean in `col` stands on: its `n_seeds`, or fewer where some seeds have no
    value in that column (a speed ratio of a seed never timed: its weights were lost before the timing)."""
    k = int(row.get("n_seeds", 1) or 1)
    n = row.get(col + SEED_COUNT)
    return k if n is None or pd.isna(n) else min(k, int(n))


def span(row: pd.Series, col: str) -> tuple[float, float]:
    """The spread of a system in one column: its seed range, or its 95% interval with one seed; a
    speed ratio's spread is widened to at least the A/A control's noise floor around its value."""
    if seeds_of(row, col) > 1:
        low, high = row[f"{col}_min"], row[f"{col}_max"]
    else:
        low, high = _recorded(row, col)
    return _noise_floor(row, col, low, high)


def _recorded(row: pd.Series, col: str) -> tuple[float, float]:
    """A one-seed row's recorded 95% interval in `col`; none recorded (eval.n_bootstrap: 1, or a column that
    records none): NaN, no interval, never a zero-width one (which made any gap "beyond both intervals"). A
    speed ratio's is its value, which the A/A noise floor then widens (_noise_floor)."""
    lo_col, hi_col = INTERVALS.get(col, (None, None))
    if lo_col and pd.notna(row.get(lo_col)) and pd.notna(row.get(hi_col)):
        return row[lo_col], row[hi_col]
    return (row[col], row[col]) if col in NOISE_FLOORS else (float("nan"), float("nan"))


def noise_floor(row: pd.Series, col: str) -> tuple[float, float]:
    """The A/A noise floor (low, high) of speed ratio `col` in `row`: the floor of its own kind
    (NOISE_FLOORS); a row without a throughput floor (a results.csv from before it was timed, or too few
    batches for its interval) takes the latency one for its throughput ratios, as every ratio did before.
    (NaN, NaN) for any other column or a row without an A/A control."""
    if col not in NOISE_FLOORS:
        return float("nan"), float("nan")
    for low, high in (NOISE_FLOORS[col], LATENCY_FLOOR):
        if pd.notna(row.get(low)) and pd.notna(row.get(high)):
            return float(row[low]), float(row[high])
    return float("nan"), float("nan")


def _noise_floor(row: pd.Series, col: str, low: float, high: float) -> tuple[float, float]:
    """(low, high) widened to at least the A/A control's noise floor (`noise_floor`) around a speed
    ratio's value, and to hold the value itself (a recorded spread may not: the speed baseline's own is the
    A/A interval, which a biased timing puts beside 1, not around it)."""
    noise_low, noise_high = noise_floor(row, col)
    if pd.notna(noise_low) and pd.notna(noise_high) and pd.notna(row[col]):
        low, high = min(low, row[col] * noise_low), max(high, row[col] * noise_high)
    if col in NOISE_FLOORS and pd.notna(row[col]) and pd.notna(low) and pd.notna(high):
        low, high = min(low, row[col]), max(high, row[col])
    return low, high


def _exp(x: float) -> float:
    """exp that gives inf past float range (an interval over two timed batches can be that wide), not an error."""
    return math.exp(x) if x < 709.0 else float("inf")


def interval(row: pd.Series, col: str, level: float = 0.95) -> tuple[float, float]:
    """The `level` interval (95% unless said) of a system's mean in one column: with one seed its
    recorded 95% interval (test sentences resampled; another level scales its sides by the normal
    quantiles, metrics.quality.relevel); with k >= 2 seeds, Student's t on the seeds' sd with the
    test-sentence variance added, taken from the seeds' mean interval width (metrics.quality.t_interval;
    as if the seeds' sentence noise were fully shared, the wide side); a speed ratio's is taken on the
    log scale (its sd and width over its mean: a ratio's noise is multiplicative, and a symmetric
    interval of a noisy ratio reached below 0x) and widened to at least the A/A noise floor. A seed range
    alone is no interval: 2-3 seeds' [min, max] covers the mean far less often than 95%."""
    k = seeds_of(row, col)
    if k < 2:
        low, high = _recorded(row, col)
        if pd.notna(row[col]) and pd.notna(low) and pd.notna(high):
            low, high = relevel(float(row[col]), float(low), float(high), level)
            if col in RANGES:  # a recorded interval too: the metric's range holds it
                low, high = max(low, RANGES[col][0]), min(high, RANGES[col][1])
        return _noise_floor(row, col, low, high)
    lo_col, hi_col = INTERVALS.get(col, (None, None))
    width = row[hi_col] - row[lo_col] if lo_col and pd.notna(row.get(lo_col)) and pd.notna(row.get(hi_col)) else 0.0
    sd = row.get(f"{col}_sd")
    if pd.isna(row[col]) or pd.isna(sd):
        return float("nan"), float("nan")
    mean = float(row[col])
    if col in SPEED_RATIOS and mean > 0:  # a ratio: on the log scale (delta method), so never below 0
        low, high, _ = t_interval(0.0, float(sd) / mean, k, (width / mean / (2 * 1.959964)) ** 2, level)
        return _noise_floor(row, col, mean * _exp(low), mean * _exp(high))
    low, high, _ = t_interval(mean, float(sd), k, (width / (2 * 1.959964)) ** 2, level)
    if col in RANGES:  # the mean cannot leave the metric's range: neither can its interval
        low, high = max(low, RANGES[col][0]), min(high, RANGES[col][1])
    return _noise_floor(row, col, low, high)


def seeds_alone(row: pd.Series, col: str) -> bool:
    """True when `interval` of a several-seed mean in `col` is over the seeds alone: no per-sentence (or, for a
    speed ratio, per-timing) interval recorded to add (eval.n_bootstrap: 1, or a metric that records none), so
    it leaves out the test sentences' noise and is narrower than one that has it. The report says so beside it."""
    if seeds_of(row, col) < 2 or pd.isna(row.get(col)):
        return False
    lo_col, hi_col = INTERVALS.get(col, (None, None))
    return not (lo_col and pd.notna(row.get(lo_col)) and pd.notna(row.get(hi_col)))


def beyond_spread(a: pd.Series, b: pd.Series, col: str) -> bool:
    """True when a's and b's 95% intervals in `col` (`interval`) do not overlap: a conservative test
    of their difference, for where no paired interval exists."""
    (a_low, a_high), (b_low, b_high) = interval(a, col), interval(b, col)
    if any(pd.isna(v) for v in (a_low, a_high, b_low, b_high)):
        return False
    return a_low > b_high or b_low > a_high


def significant(row: pd.Series) -> bool:
    """The paired test against the AT baseline agrees in every seed (Holm p < ALPHA)."""
    p = row.get("bleu_p_holm_max", row.get("bleu_p_holm"))
    return pd.notna(p) and p < ALPHA


def robust_front(agg: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """Systems not clearly dominated, maximising x and y: j dominates i only if j is at least as
    good in both means and better beyond the spread in at least one. Ties stay on the front."""
    valid = agg.dropna(subset=[x, y])
    if valid.empty:
        return valid
    keep = []
    for i, a in valid.iterrows():
        dominated = any(
            b[x] >= a[x] and b[y] >= a[y] and (beyond_spread(a, b, x) or beyond_spread(a, b, y))
            for j, b in valid.iterrows() if j != i)
        keep.append(not dominated)
    return valid[keep].sort_values([x, y], ascending=[True, False], kind="stable")
