"""Which numeric precision a run trains in: `train.precision` as Lightning spells it, or `auto`.

`auto` picks bf16 mixed precision where the hardware does bf16 arithmetic natively — a CUDA GPU
that supports it, or a CPU with avx512_bf16 or AMX (`amx_bf16`) — and fp32 elsewhere; the choice
is recorded in the run's train.json. What it does to a CPU training step's speed: `atnat bench train`
(results/bench/README.md); to quality: `experiments/grids/multi30k-deep.yaml` (teachers trained in fp32
and bf16).
"""
from __future__ import annotations

from pathlib import Path

import torch

PRECISIONS = ("auto", "32-true", "32", "bf16-mixed", "bf16-true", "16-mixed", "16-true", "64-true")
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The CPU's feature flags (empty where /proc/cpuinfo is not readable)."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags") and ":" in line:
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_does_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    return bool(cpu_flags(cpuinfo) & set(BF16_CPU_FLAGS))


def resolve_precision(precision: str, accelerator: str = "auto", cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The Lightning precision a run trains in: `precision` itself, or for `auto` bf16-mixed where the
    device it will train on (`accelerator`, as Lightning picks it) does bf16 natively, else 32-true."""
    if precision != "auto":
        return precision
    on_gpu = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    if on_gpu:
        return "bf16-mixed" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "32-true"
    return "bf16-mixed" if cpu_does_bf16(cpuinfo) else "32-true"
