"""Stop a diverging run: a non-finite training loss, or one far above what a model that guesses
uniformly would score, fails the cell with the step and the value, instead of training on to a
useless model recorded as "ok" (lr 1000 -> loss 1e8 from the first step).

The bound does not depend on the run having started healthy: it is `factor` times ln(V), the
cross-entropy of a uniform guess over the V-word vocabulary (every decoder family's loss at
initialisation is 0.3-2.9 ln V, measured on the synthetic tasks with guided attention on and off).
The losses are kept on the device and looked at every CHECK_EVERY steps (one host sync there,
none per step).
"""
from __future__ import annotations

import math

import pytorch_lightning as pl
import torch

from atnat.core.errors import AtnatError

CHECK_EVERY = 10  # steps between looks at the buffered losses (and, under DDP, one collective)


class DivergenceError(AtnatError):
    """Training diverged: the message names the step and the loss."""


def uniform_guess_loss(vocab_size: int) -> float:
    """ln V: the cross-entropy per token of a model that gives every word the same probability."""
    return math.log(max(int(vocab_size), 2))


class DivergenceGuard(pl.Callback):
    """Raise DivergenceError when the training loss is NaN/inf, or above `factor` x ln(V) (`factor`
    None: only non-finite losses stop training). V is read from the module's `vocab_size`
    hyper-parameter when training starts (or given)."""

    def __init__(self, factor: float | None = 10.0, vocab_size: int | None = None):
        if factor is not None and not (math.isfinite(factor) and factor >= 2):
            raise AtnatError(f"train: divergence_factor must be a number >= 2 or null, got {factor!r}")
        self.factor = factor
        self.bound: float | None = None if factor is None or vocab_size is None \
            else factor * uniform_guess_loss(vocab_size)
        self._pending: list[tuple[int, torch.Tensor]] = []  # (step, loss) not looked at yet

    def on_train_start(self, trainer: pl.Trainer, pl_module) -> None:
        vocab = getattr(pl_module, "hparams", {}).get("vocab_size") if self.factor is not None else None
        if vocab is not None:
            self.bound = self.factor * uniform_guess_loss(vocab)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is None:
            return
        self._pending.append((trainer.global_step, loss.detach().float()))
        if len(self._pending) >= CHECK_EVERY or trainer.global_step <= 1:
            self._check(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module) -> None:
        self._check(trainer)

    def _check(self, trainer: pl.Trainer) -> None:
        pending, self._pending = self._pending, []
        values = torch.stack([v for _, v in pending]).tolist() if pending else []
        problem = self.problem([s for s, _ in pending], values)
        if trainer.strategy.reduce_boolean_decision(problem is not None, all=False):  # every rank stops
            raise DivergenceError(problem or "training diverged in another process of this multi-device run")

    def problem(self, steps: list[int], values: list[float]) -> str | None:
        """The first bad loss among (step, value) pairs in training order, described; else None."""
        for step, value in zip(steps, values):
            if not math.isfinite(value):
                return f"training diverged at step {step}: the loss is {value} (try a lower optim.lr)"
            if self.bound is not None and value > self.bound:
                return (f"training diverged at step {step}: loss {value:.4g} is over {self.factor:g} x ln(V) = "
                        f"{self.bound:.4g}, far worse than a uniform guess (ln V = {self.bound / self.factor:.3g}); "
                        "try a lower optim.lr (or raise train.divergence_factor)")
        return None

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state_dict: dict) -> None:
        pass  # checkpoints of earlier versions kept a reference loss; the bound is recomputed


UNFIT_WINDOW = 20  # steps whose share of left-out targets is judged together
UNFIT_LIMIT = 0.5  # the share of targets left out beyond which a run learns from too little of its data


class UnfitGuard(pl.Callback):
    """Fail a run whose decoder leaves out most training targets: a DA-Transformer's or a CTC decoder's loss
    skips a target longer than the decoder can emit from its source (logged as train/unfit), so a run whose targets mostly
    do not fit trains on almost nothing and would be recorded as "ok". Judged on the mean of UNFIT_WINDOW
    steps, on the device between looks (one host sync every UNFIT_WINDOW steps)."""

    def __init__(self) -> None:
        self._window: list[torch.Tensor] = []
        self._judged = False  # a full window judged in this process

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        unfit = trainer.callback_metrics.get("train/unfit")
        if unfit is None:  # a decoder that fits every target logs none
            return
        self._window.append(unfit.detach().float())
        if len(self._window) >= UNFIT_WINDOW:
            self._judge(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module) -> None:
        """The steps since the last full window are judged too: all of a run shorter than one, else a tail of at
        least half a window (a few last batches alone would judge a finished run on little)."""
        if self._window and (not self._judged or len(self._window) >= UNFIT_WINDOW // 2):
            self._judge(trainer)

    def _judge(self, trainer: pl.Trainer) -> None:
        self._judged = True
        steps = len(self._window)
        share = float(torch.stack(self._window).mean())
        self._window = []
        # each process judges its own batches; all stop when one does (else the others would wait for it in
        # the next gradient exchange until the collective times out)
        if not trainer.strategy.reduce_boolean_decision(share >= UNFIT_LIMIT, all=False):
            return
        if share < UNFIT_LIMIT:
            raise AtnatError(f"step {trainer.global_step}: another process of this multi-device run found most of "
                             "its training targets left out by the decoder's loss (train/unfit); see its message")
        raise AtnatError(
            f"step {trainer.global_step}: the decoder's loss left out {share:.0%} of the training targets over the "
            f"last {steps} steps (train/unfit): they are longer than it can emit from their sources (a "
            "DA-Transformer's graph has floor(upsample x S) + 2 vertices; a CTC decoder's upsample x S slots must hold "
            "the target and a blank between each two equal neighbours); raise decoder.upsample, or distil from a "
            "teacher whose outputs fit")
