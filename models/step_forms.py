"""How a training step runs (`train.step`): the same arithmetic in three forms, equal to each other
up to float rounding (tests/test_step_forms.py compares losses and gradients over 20 steps).

- "eager": PyTorch's default: the model op by op, Adam(W) updating one parameter at a time on a CPU
  (one multi-tensor pass on a GPU).
- "fused": the eager model, and Adam(W) as one fused kernel over every parameter.
- "compiled": the loss (encoder and the decoder's `loss`) under `torch.compile`, and the fused
  Adam(W). On a CPU dropout draws its masks with PyTorch's own generator (inductor's
  `fallback_random`), so a seed gives the masks it gives in eager mode; on a GPU inductor draws its
  own inside its fused kernels (the same distribution, other draws). The first steps compile (a
  minute or more on a CPU); a new batch shape compiles once more, then shapes are dynamic.

With a fused optimizer the module clips gradients itself (Seq2SeqModule.configure_gradient_clipping),
and 16-mixed (fp16 with a loss scaler) is refused: the scaler would have to unscale before the clipping.

Which form is fastest depends on the device: `atnat bench train --forms eager,fused,compiled`
measures them side by side (results/bench/README.md has the figures).
"""
from __future__ import annotations

from typing import Callable

import torch

from atnat.core.compile_cache import private_compile_cache

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
    the flags of the form that saved it, and its step counters where that form keeps them: on the
    parameter's device for the fused kernel, on the CPU otherwise)."""
    fused = uses_fused_optimizer(form)
    for group in optimizer.param_groups:
        if "fused" not in group:
            continue
        group["fused"] = fused or None
        group["foreach"] = None if fused else group.get("foreach")
        for param in group["params"]:
            state = optimizer.state.get(param)
            if state and torch.is_tensor(state.get("step")) and not group.get("capturable"):
                state["step"] = state["step"].to(param.device if fused else "cpu", torch.float32)


_COMPILED: dict[tuple, Callable] = {}  # one compiled wrapper per function (dynamo guards on its arguments)


def compiled(fn: Callable, eager_random: bool = True) -> Callable:
    """`fn` under torch.compile; `eager_random`: random numbers (dropout) from PyTorch's generator, as in
    eager mode (else inductor's own, fused into its kernels: the same distribution, other draws). Kept
    here, not on a module, so that a module stays copyable (EMA) and picklable."""
    key = (fn, eager_random)
    if key not in _COMPILED:
        private_compile_cache()  # nothing inductor finds on disk from before this process is used
        _COMPILED[key] = torch.compile(fn, options={"fallback_random": True} if eager_random else None)
    return _COMPILED[key]
