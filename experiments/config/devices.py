"""Where a run trains and decodes: the device evaluation, distillation and translation use, and
which process of a multi-device (DDP) run this is."""
from __future__ import annotations

import os

import torch


def inference_device(accelerator: str = "auto") -> str:
    """Where a run decodes (evaluation, distillation, translation): the GPU when its accelerator
    allows one and one is visible, else the CPU."""
    if accelerator == "cpu" or not torch.cuda.is_available():
        return "cpu"
    return "cuda"


def helper_rank() -> bool:
    """True in the extra processes of a multi-device (DDP) run: those Lightning starts (LOCAL_RANK > 0)
    and the tasks past the first of a multi-task SLURM job (SLURM_PROCID > 0)."""
    return any(int(os.environ.get(k, "0") or 0) > 0 for k in ("LOCAL_RANK", "NODE_RANK", "SLURM_PROCID"))
