"""Stop a diverging run: a non-finite or exploding training loss fails the cell with the step and
the value, instead of training on to a useless model recorded as "ok" (lr 1000 -> loss 1e8).

The losses are kept on the device and looked at every CHECK_EVERY steps (one host sync there,
none per step); the reference is the highest loss of the first REFERENCE_STEPS steps, i.e. of a
model near its initialisation, which healthy training only goes below.
"""
from __future__ import annotations

import math

import pytorch_lightning as pl
import torch

from atnat.core.errors import AtnatError

REFERENCE_STEPS = 3  # steps whose highest loss is the reference for the explosion test
CHECK_EVERY = 10  # steps between looks at the buffered losses (and, under DDP, one collective)


class DivergenceError(AtnatError):
    """Training diverged: the message names the step and the loss."""


class DivergenceGuard(pl.Callback):
    """Raise DivergenceError when the training loss is NaN/inf, or above `factor` times the
    reference loss (`factor` None: only non-finite losses stop training)."""

    def __init__(self, factor: float | None = 10.0):
        self.factor = factor
        self.reference: float | None = None  # saved in checkpoints, so a resumed run keeps it
        self._pending: list[tuple[int, torch.Tensor]] = []  # (step, loss) not looked at yet

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is None:
            return
        self._pending.append((trainer.global_step, loss.detach().float()))
        if len(self._pending) >= CHECK_EVERY or (self.reference is None and len(self._pending) >= REFERENCE_STEPS):
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
            if self.reference is None or step <= REFERENCE_STEPS:
                self.reference = value if self.reference is None else max(self.reference, value)
            elif self.factor is not None and value > self.factor * self.reference:
                return (f"training diverged at step {step}: loss {value:.4g} is over {self.factor:g} times the "
                        f"loss of the first steps ({self.reference:.4g}); try a lower optim.lr (or raise "
                        "train.divergence_factor)")
        return None

    def state_dict(self) -> dict:
        return {"reference": self.reference}

    def load_state_dict(self, state_dict: dict) -> None:
        self.reference = state_dict.get("reference")
