"""The `optim:` section of a config: Adam's settings and its learning-rate schedule (kept apart from
the Lightning module, so that reading a config needs no Lightning)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from atnat.core.options import require_at_least, require_choice, require_fraction, require_non_negative, require_positive


@dataclass(frozen=True)
class OptimConfig:
    """Adam and its learning-rate schedule."""

    lr: float = 5e-4  # peak learning rate
    schedule: str = "inverse_sqrt"  # inverse_sqrt (paper: linear warm-up, then 1/sqrt(step)) | constant
    warmup_steps: int = 400  # warm-up length of the inverse_sqrt schedule
    betas: tuple[float, float] = (0.9, 0.98)  # Adam betas of the paper
    eps: float = 1e-9  # Adam epsilon
    weight_decay: float = 0.0  # decoupled weight decay (AdamW) when > 0
    clip_norm: float = 1.0  # gradient clipping by global norm (0 = off); applied by the Trainer

    def __post_init__(self):
        require_choice(self.schedule, ("inverse_sqrt", "constant"), "optim", "schedule")
        require_positive("optim", lr=self.lr, eps=self.eps)
        require_at_least(self.warmup_steps, 0, "optim", "warmup_steps")
        for i, beta in enumerate(self.betas):
            require_fraction(beta, "optim", f"betas[{i}]")
        require_non_negative("optim", weight_decay=self.weight_decay, clip_norm=self.clip_norm)


def lr_factor(step: int, schedule: str, warmup: int) -> float:
    """Multiplier of the peak lr at an optimizer step (1-based)."""
    if schedule == "constant":
        return 1.0
    step = max(step, 1)
    return min(step / max(warmup, 1), math.sqrt(max(warmup, 1) / step))
