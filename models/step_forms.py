"""How a training step runs (`train.step`): the same arithmetic in three forms, equal to each other
up to float rounding (tests/test_step_forms.py compares losses and gradients over 20 steps).

- "eager": PyTorch's default: the model op by op, Adam(W) updating one parameter at a time on a CPU
  (one multi-tensor pass on a GPU).
- "fused": the eager model, and Adam(W) as one fused kernel over every parameter.
- "compiled": the loss (encoder and the decoder's `loss`) under `torch.compile`, and the fused
  Adam(W). Dropout draws its masks with PyTorch's own generator (inductor's `fallback_random`), so a
  seed gives the masks it gives in eager mode. The first steps compile (tens of seconds on a CPU);
  each new batch shape may compile again until shapes are treated as dynamic.

Which form is fastest depends on the device: `atnat bench train --forms eager,fused,compiled`
measures them side by side (results/bench/README.md has the figures).
"""
from __future__ import annotations

from typing import Callable

import torch

STEP_FORMS = ("eager", "fused", "compiled")


def uses_fused_optimizer(form: str) -> bool:
    return form in ("fused", "compiled")


def make_optimizer(params, optim_cfg, form: str = "eager") -> torch.optim.Optimizer:
    """Adam (AdamW when optim.weight_decay > 0) with the config's values, fused where the form says."""
    cls = torch.optim.AdamW if optim_cfg.weight_decay > 0 else torch.optim.Adam
    extra = {"fused": True} if uses_fused_optimizer(form) else {}
    return cls(params, lr=optim_cfg.lr, betas=optim_cfg.betas, eps=optim_cfg.eps,
               weight_decay=optim_cfg.weight_decay, **extra)


def apply_to_optimizer(optimizer: torch.optim.Optimizer, form: str) -> None:
    """Make an optimizer follow `form` after its state was loaded (a resumed run: a saved state keeps
    the flags of the form that saved it)."""
    fused = uses_fused_optimizer(form)
    for group in optimizer.param_groups:
        if "fused" in group:
            group["fused"] = fused or None
            group["foreach"] = None if fused else group.get("foreach")


_COMPILED: dict[Callable, Callable] = {}  # one compiled wrapper per function (dynamo guards on its arguments)


def compiled(fn: Callable) -> Callable:
    """`fn` under torch.compile, dropout masks drawn from PyTorch's generator as in eager mode. Kept
    here, not on a module, so that a module stays copyable (EMA) and picklable."""
    if fn not in _COMPILED:
        _COMPILED[fn] = torch.compile(fn, options={"fallback_random": True})
    return _COMPILED[fn]
