"""Seed aggregation and the rules behind the report's claims: mean and range per system, a system
off the front only when another beats it beyond the spread."""
import pandas as pd
import pytest

from atnat.experiments.reporting.aggregate import aggregate_seeds, beyond_spread, robust_front


def rows(family: str, bleus: list[float], speeds: list[float]) -> list[dict]:
    return [{"task": "t", "family": family, "strategy": "s", "cell": f"{family}-s{i + 1}", "bleu": b,
             "speedup_vs_at": v} for i, (b, v) in enumerate(zip(bleus, speeds))]


def test_mean_and_range_over_seeds_per_system():
    agg = aggregate_seeds(pd.DataFrame(rows("a", [30.0, 31.0, 32.0], [1.0, 1.1, 1.2])))
    (row,) = agg.to_dict("records")
    assert row["n_seeds"] == 3 and row["bleu"] == pytest.approx(31.0) and row["bleu_sd"] == pytest.approx(1.0)
    assert (row["bleu_min"], row["bleu_max"]) == (30.0, 32.0)


def test_the_front_drops_only_systems_beaten_beyond_the_seed_spread():
    table = pd.DataFrame(rows("fast", [30.0, 31.0, 32.0], [5.0, 5.2, 5.4])  # best speed
                         + rows("close", [29.0, 30.5, 32.0], [4.9, 5.1, 5.3])  # lower means, ranges overlap
                         + rows("beaten", [20.0, 21.0, 22.0], [2.0, 2.1, 2.2])  # behind beyond the spread
                         + rows("good", [35.0, 36.0, 37.0], [1.0, 1.1, 1.2]))  # best BLEU, slow
    agg = aggregate_seeds(table)
    front = robust_front(agg, "speedup_vs_at", "bleu")
    assert sorted(front["family"]) == ["close", "fast", "good"]
    by = agg.set_index("family")
    assert beyond_spread(by.loc["fast"], by.loc["beaten"], "bleu")
    assert not beyond_spread(by.loc["fast"], by.loc["close"], "bleu")
