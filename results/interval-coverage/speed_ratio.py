"""Coverage of the timing phase's 95% interval of a batch-1 speed-up (evaluation/timing.py _ratio_ci: the
ratio of summed times, a percentile bootstrap over the timed sentences widened to the ratio estimator's t
interval, on the log scale, where that is wider) when the timed sentences are a sample
of the test set and the quantity of interest is the speed-up over all of it. Sentences' lengths are drawn
from a log-normal (median 16 tokens, clipped to 3-200); an AT sentence takes time in proportion to its
length, a one-pass NAT a fixed time plus a little per token (so the speed-up grows with length), each call
with 5% log-normal timing noise. The truth: the ratio of the expected summed times (a Monte Carlo of
`TRUTH_DRAWS` samples). 32 sentences is the default `speed.latency_sentences`.

    .venv/bin/python results/interval-coverage/speed_ratio.py   # -> results/interval-coverage/speed_ratio.csv
"""
from pathlib import Path

import numpy as np
import pandas as pd

from atnat.experiments.evaluation.timing import _ratio_ci

REPEATS, TRUTH_DRAWS, RESAMPLES = 2000, 4000, 1000


def lengths(rng, n: int, spread: float) -> np.ndarray:
    return np.clip(rng.lognormal(np.log(16), spread, n), 3, 200).round()


def times(rng, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    noise = lambda: rng.lognormal(0, 0.05, len(lens))  # noqa: E731
    return (0.002 * lens + 0.001) * noise(), (0.004 + 0.0001 * lens) * noise()


def main() -> None:
    rng = np.random.default_rng(0)
    rows = []
    for sentences in (32, 128):
        for spread in (0.5, 0.8):
            totals = np.array([[t.sum() for t in times(rng, lengths(rng, sentences, spread))]
                               for _ in range(TRUTH_DRAWS)]).mean(0)
            truth = totals[0] / totals[1]
            hits = 0
            for _ in range(REPEATS):
                at, nat = times(rng, lengths(rng, sentences, spread))
                _, low, high = _ratio_ci(at, nat, RESAMPLES, seed=int(rng.integers(1, 2**31)))
                hits += low <= truth <= high
            rows.append({"sentences": sentences, "length_spread": spread, "repeats": REPEATS, "truth": round(truth, 4),
                         "coverage": hits / REPEATS})
            print(rows[-1])
    pd.DataFrame(rows).to_csv(Path(__file__).with_name("speed_ratio.csv"), index=False)


if __name__ == "__main__":
    main()
