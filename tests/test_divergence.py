"""A diverging run fails its cell with the step and the loss instead of being recorded "ok"
lr 1000 on a tiny copy task (also exploding from its first step, with no healthy
start to compare with), a loss forced to NaN, and bad factors refused when the config is read."""
import json
import math

import pandas as pd
import pytest

from atnat.experiments.cli.commands import main
from atnat.experiments.config.run import ConfigError, run_config_from_dict
from atnat.experiments.training.divergence import DivergenceError, DivergenceGuard
from atnat.experiments.training.train import train
from atnat.models.seq2seq import Seq2SeqModule
from tests.test_grid import TINY, write_grid


def test_lr_1000_fails_the_cell_with_step_and_loss_and_the_grid_goes_on(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    base = {**TINY["base"], "train": {**TINY["base"]["train"], "max_steps": 40, "val_every_steps": 20}}
    grid = write_grid(tmp_path, {**TINY, "base": base, "cells": {
        "at": {"decoder": {"name": "at"}, "optim": {"lr": 1000}},
        "at-ok": {"decoder": {"name": "at"}, "optim": {"lr": 0.003}}}})
    assert main(["run", str(grid), "--results", "res"]) == 1  # a failed cell: exit 1, after the table and report
    out = tmp_path / "res" / "tiny"
    meta = json.loads((out / "runs" / "at-s1" / "metrics.json").read_text())
    assert meta["status"] == "failed"
    assert meta["error"].startswith("training diverged at step ") and "x ln(V)" in meta["error"]
    step = int(meta["error"].split("step ")[1].split(":")[0])
    assert 1 <= step <= 40
    table = pd.read_csv(out / "results.csv")
    assert table.set_index("cell").loc["at-s1", "status"] == "failed"
    assert table.set_index("cell").loc["at-ok-s1", "status"] == "ok"  # a healthy lr is not stopped


def test_a_nan_loss_stops_training_at_its_step(tmp_path, monkeypatch):
    raw = {**TINY["base"], "name": "nan", "decoder": {"name": "at"}}
    raw["train"] = {**raw["train"], "max_steps": 30, "val_every_steps": 100}
    original = Seq2SeqModule.training_step

    def poisoned(self, batch, batch_idx):
        loss = original(self, batch, batch_idx)
        return loss * float("nan") if self.global_step == 6 else loss  # the 7th optimizer step

    monkeypatch.setattr(Seq2SeqModule, "training_step", poisoned)
    with pytest.raises(DivergenceError, match=r"^training diverged at step 7: the loss is nan"):
        train(run_config_from_dict(raw, "test"), tmp_path / "run")


def test_a_run_exploding_from_its_first_step_fails(tmp_path):
    # warm-up of one step: lr 1000 from the start, so the first losses are already huge; a guard
    # whose reference is the first steps' loss saw nothing wrong and recorded the run "ok"
    raw = {**TINY["base"], "name": "boom", "decoder": {"name": "at"}, "optim": {"lr": 1000, "warmup_steps": 1}}
    raw["train"] = {**raw["train"], "max_steps": 30, "val_every_steps": 100}
    with pytest.raises(DivergenceError, match=r"^training diverged at step \d+: loss \S+ is over 10 x ln\(V\)"):
        train(run_config_from_dict(raw, "test"), tmp_path / "run")


def test_the_bound_is_a_multiple_of_a_uniform_guess_and_the_factor_is_checked():
    guard = DivergenceGuard(10.0, vocab_size=100)  # bound 10 ln 100 = 46.05
    assert guard.problem([1, 2, 3, 4], [40.0, 46.0, 3.0, 2.0]) is None  # no healthy start needed, none assumed
    assert "step 5: loss 46.1 is over 10 x ln(V) = 46.05" in guard.problem([5], [46.1])
    lenient = DivergenceGuard(None, vocab_size=100)
    assert lenient.problem([1, 2, 3, 4], [2.0, 2.0, 2.0, 1e12]) is None
    assert "the loss is inf" in lenient.problem([5], [math.inf])
    assert run_config_from_dict({"name": "x", "task": "copy", "decoder": "at", "train": {"divergence_factor": None}},
                                "t").train.divergence_factor is None
    for bad in (-1, 0, 1.5, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match=r"^t: train: divergence_factor must be a number >= 2"):
            run_config_from_dict({"name": "x", "task": "copy", "decoder": "at", "train": {"divergence_factor": bad}}, "t")


def test_a_dag_run_whose_targets_mostly_do_not_fit_its_graph_fails_instead_of_finishing_ok(tmp_path):
    """A DA-Transformer whose graph is shorter than most of its targets left every one out (train/unfit 1.0, loss 0 at
    every step) and finished "ok", then ranked best NAT from weights that never saw a target."""
    from atnat.core.errors import AtnatError
    from atnat.experiments.running.cell import run_cell

    base = TINY["base"]
    raw = {**base, "name": "unfit", "decoder": {"name": "dag", "upsample": 1.0},
           "task": {"name": "fertility", "vocab": 6, "min_len": 4, "max_len": 6, "n_train": 200, "n_valid": 10,
                    "n_test": 10},
           "train": {**base["train"], "max_steps": 60, "val_every_steps": 30},
           "eval": {"n_bootstrap": 10, "strategies": ["dag-greedy"]}}
    with pytest.raises(AtnatError, match=r"the decoder's loss left out \d+% of the training targets .* raise "
                                         r"decoder\.upsample"):
        run_cell(run_config_from_dict(raw, "test"), tmp_path / "run")
    fits = {**raw, "decoder": {"name": "dag", "upsample": 4.0}, "train": {**raw["train"], "max_steps": 25}}
    assert run_cell(run_config_from_dict(fits, "test"), tmp_path / "fits") is not None


class _Strategy:
    """A stand-in for a multi-device run's strategy: the other process says whether it stops."""

    def __init__(self, other_stops: bool):
        self.other_stops, self.asked = other_stops, []

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:  # noqa: A002 (Lightning's name)
        self.asked.append((decision, all))
        return (decision or self.other_stops) if not all else (decision and self.other_stops)


def _unfit_trainer(share: float, other_stops: bool = False, step: int | None = None):
    """A stand-in trainer whose last batch left out `share` of its targets (train/unfit)."""
    from types import SimpleNamespace

    import torch

    from atnat.experiments.training.divergence import UNFIT_WINDOW

    return SimpleNamespace(strategy=_Strategy(other_stops), callback_metrics={"train/unfit": torch.tensor(share)},
                           global_step=UNFIT_WINDOW if step is None else step)


@pytest.mark.parametrize("share, other_stops, raises", [(0.4, False, None), (0.4, True, "another process"),
                                                        (0.6, False, "left out 60%")])
def test_every_process_of_a_multi_device_run_stops_when_one_finds_its_targets_unfit(share, other_stops, raises):
    """Each process judges its own batches' share of left-out targets; one that stops alone would leave the
    others waiting for it in the next gradient exchange."""
    from atnat.core.errors import AtnatError
    from atnat.experiments.training.divergence import UNFIT_WINDOW, UnfitGuard

    guard, trainer = UnfitGuard(), _unfit_trainer(share, other_stops)
    for _ in range(UNFIT_WINDOW - 1):
        guard.on_train_batch_end(trainer, None, None, None, 0)
    assert trainer.strategy.asked == []  # one look a window
    if raises is None:
        guard.on_train_batch_end(trainer, None, None, None, 0)
    else:
        with pytest.raises(AtnatError, match=raises):
            guard.on_train_batch_end(trainer, None, None, None, 0)
    assert trainer.strategy.asked == [(share >= 0.5, False)]


def test_a_ctc_run_whose_targets_mostly_do_not_fit_its_slots_fails_and_unfit_rows_dilute_nothing(tmp_path):
    """CTC gave a target longer than its slots zero loss (zero_infinity) and still divided by it: a run whose
    targets mostly did not fit trained "ok" at loss 0, and a batch half unfit halved its fitting rows' loss."""
    import torch

    from atnat.core.errors import AtnatError
    from atnat.experiments.running.cell import run_cell
    from atnat.models.losses import ctc_fits, ctc_loss

    # one slot per token, and a blank between two equal neighbours
    target = torch.tensor([[5, 5, 6], [5, 6, 7], [5, 6, 0]])
    assert ctc_fits(torch.tensor([3, 3, 2]), target, torch.tensor([3, 3, 2])).tolist() == [False, True, True]
    log_probs = torch.randn(2, 4, 9).log_softmax(-1)
    mask = torch.tensor([[False] * 4, [False, False, True, True]])  # 4 slots, and 2
    pair = torch.tensor([[5, 6, 7], [5, 6, 7]])
    both, fits = ctc_loss(log_probs, mask, pair, torch.tensor([3, 3]), blank=0)
    alone, _ = ctc_loss(log_probs[:1], mask[:1], pair[:1], torch.tensor([3]), blank=0)
    assert fits.tolist() == [True, False] and torch.allclose(both, alone)

    base = TINY["base"]
    raw = {**base, "name": "unfit", "decoder": {"name": "ctc", "upsample": 1},
           "task": {"name": "fertility", "vocab": 6, "min_len": 4, "max_len": 6, "n_train": 200, "n_valid": 10,
                    "n_test": 10},
           "train": {**base["train"], "max_steps": 60, "val_every_steps": 30},
           "eval": {"n_bootstrap": 10, "strategies": ["ctc"]}}
    with pytest.raises(AtnatError, match=r"the decoder's loss left out \d+% of the training targets .*a CTC decoder"):
        run_cell(run_config_from_dict(raw, "test"), tmp_path / "run")


def test_the_last_steps_of_a_run_are_judged_for_unfit_targets_too():
    """The guard judged only full windows of UNFIT_WINDOW steps: a 19-step run whose decoder left out nearly every
    target finished "ok", and the last steps of any run went unjudged. A partial window is judged at the end."""
    from atnat.core.errors import AtnatError
    from atnat.experiments.training.divergence import UNFIT_WINDOW, UnfitGuard

    bad, good = _unfit_trainer(0.98, step=UNFIT_WINDOW - 1), _unfit_trainer(0.1, step=UNFIT_WINDOW - 1)
    guard = UnfitGuard()
    for i in range(UNFIT_WINDOW - 1):
        guard.on_train_batch_end(bad, None, None, None, i)
    with pytest.raises(AtnatError, match=r"left out 98% of the training targets over the last 19 steps"):
        guard.on_train_end(bad, None)
    fits = UnfitGuard()
    for i in range(3):
        fits.on_train_batch_end(good, None, None, None, i)
    fits.on_train_end(good, None)  # a fitting tail passes
    UnfitGuard().on_train_end(good, None)  # nothing since the last full window: nothing to judge
    judged = UnfitGuard()
    for i in range(UNFIT_WINDOW):  # a full window that fits, judged
        judged.on_train_batch_end(good, None, None, None, i)
    for i in range(3):  # then 3 bad batches: too few to fail a finished run on
        judged.on_train_batch_end(bad, None, None, None, i)
    judged.on_train_end(bad, None)
