"""Coverage of the 95% interval of a mean over k seeds measured on one shared test set, under the rule
before 2026-11-25 (one t for the sum, at Welch-Satterthwaite degrees of freedom) and the rule since
(metrics/quality.py t_interval: the seeds' standard error at t with k-1 df, the test-sentence part at the
normal quantile, in quadrature). Per-seed values = truth 0 + test-set noise shared by the seeds (sd 0.37
BLEU, a little above the test-sentence bootstrap sd of the interim multi30k-deep ranking's paired
differences, 0.21-0.35 in its diff_sentence_se; its variance taken as known) + seed noise (sd `seed_sd`).

    .venv/bin/python results/interval-coverage/simulate.py   # -> results/interval-coverage/coverage.csv
"""
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import t as student

from atnat.experiments.evaluation.metrics.quality import t_interval

SENTENCE_SD, REPEATS = 0.37, 20000


def welch(mean: float, sd: float, k: int, v: float) -> tuple[float, float]:
    seed_var = sd ** 2 / k
    total = seed_var + v
    df = total ** 2 / (seed_var ** 2 / (k - 1)) if seed_var > 0 else float("inf")
    half = student.ppf(0.975, df) * total ** 0.5
    return mean - half, mean + half


def main() -> None:
    rng = np.random.default_rng(0)
    rows = []
    for k in (2, 3):
        for seed_sd in (0.25, 0.5, 1.0, 2.0):
            old = new = 0
            for _ in range(REPEATS):
                values = rng.normal(0, SENTENCE_SD) + rng.normal(0, seed_sd, k)
                m, sd = values.mean(), values.std(ddof=1)
                low, high = welch(m, sd, k, SENTENCE_SD ** 2)
                old += low <= 0 <= high
                low, high, _ = t_interval(m, sd, k, SENTENCE_SD ** 2)
                new += low <= 0 <= high
            rows.append({"seeds": k, "seed_sd": seed_sd, "sentence_sd": SENTENCE_SD, "repeats": REPEATS,
                         "coverage_welch_t": old / REPEATS, "coverage_t_k_minus_1_in_quadrature": new / REPEATS})
    out = Path(__file__).with_name("coverage.csv")
    pd.DataFrame(rows).to_csv(out, index=False)
    print(pd.DataFrame(rows).to_string(index=False))


if __name__ == "__main__":
    main()
