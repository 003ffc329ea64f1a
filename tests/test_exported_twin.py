"""The CTranslate2 AT has a BLEU: a grid with speed.ct2_baseline scores the plain AT's
CTranslate2 twin over the whole test split like any system; its greedy outputs equal ours, so its
BLEU equals our greedy's, and it joins the table, the comparisons and the report."""
import pandas as pd
import pytest

from atnat.experiments.cli.commands import main
from tests.test_grid import TINY, write_grid

pytest.importorskip("ctranslate2")


def test_the_ctranslate2_twin_is_scored_like_any_system(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    grid = {**TINY, "cells": {"at": {"decoder": {"name": "at"}, "eval": {"strategies": ["greedy"]}},
                              "nat": {"decoder": {"name": "nat"}, "eval": {"strategies": ["parallel"]}}},
            "speed": {**TINY["speed"], "ct2_baseline": True}}
    assert main(["run", str(write_grid(tmp_path, grid)), "--results", "res"]) == 0
    out = tmp_path / "res" / "tiny"
    table = pd.read_csv(out / "results.csv").set_index(["cell", "strategy"])
    twin, ours = table.loc[("at-s1", "greedy-ct2")], table.loc[("at-s1", "greedy")]
    assert twin.bleu == pytest.approx(ours.bleu) and twin.chrf == pytest.approx(ours.chrf)  # same outputs
    assert pd.notna(twin.speedup_vs_at) and pd.notna(twin.latency_ms_b1)
    hyps = (out / "runs" / "at-s1" / "hyps")
    assert (hyps / "greedy-ct2.txt").read_text() == (hyps / "greedy.txt").read_text()
    comparisons = pd.read_csv(out / "comparisons.csv")
    assert "at / greedy-ct2" in set(comparisons.system) or "at / greedy-ct2" in set(comparisons.against)
    assert "greedy-ct2" in (out / "report.md").read_text()
