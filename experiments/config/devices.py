"""Where a run trains and decodes: the device evaluation, distillation and translation use, and
which process of a multi-device (DDP) run this is."""
from __future__ import annotations

import os
import platform
from pathlib import Path

import torch

from atnat.core.errors import AtnatError


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


def leave_process_group() -> None:
    """End this process's part in a multi-device run once its collectives are over (after training).
    Lightning destroys NCCL groups at exit but leaves gloo's (CPU DDP) to the exit-time destructors,
    which aborted a rank now and then ("terminate called without an active exception"); Lightning
    then killed every rank and the run failed after finishing."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def gpu_problem() -> str | None:
    """Why this process cannot train on a CUDA GPU, or None when it can (torch sees one)."""
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return None
    if torch.version.cuda is None:
        return f"this torch ({torch.__version__}) is built without CUDA"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return "torch sees no CUDA device (" + (f"CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None
                                             else "no GPU or no working driver") + ")"


def gpu_ids(text: str | None, flag: str = "--devices") -> list[str] | None:
    """`--devices 0,1` -> ["0", "1"]: GPU ids of this machine, checked before anything runs; one AtnatError
    when they are not ids, or no GPU is usable here (the cells would train on the CPU instead, without a
    word), or an id is past the GPUs torch sees (under a CUDA_VISIBLE_DEVICES mask: not one of the mask's,
    since each worker is given its id as CUDA_VISIBLE_DEVICES). None when not given."""
    if not text:
        return None
    ids = [d.strip() for d in text.split(",") if d.strip()]
    if not ids or not all(d.isdigit() for d in ids):
        raise AtnatError(f"{flag} {text}: expected comma-separated GPU ids, e.g. 0,1")
    problem = gpu_problem()
    if problem:
        raise AtnatError(f"{flag} {text}: GPU ids, but no GPU is usable here: {problem}; drop {flag} (--workers N "
                         "runs cells side by side on the CPU)")
    mask = os.environ.get("CUDA_VISIBLE_DEVICES")
    if mask is not None:  # each worker gets its id as CUDA_VISIBLE_DEVICES: an id of the machine, not of this mask
        visible = [m.strip() for m in mask.split(",") if m.strip()]
        if outside := [d for d in ids if d not in visible]:
            raise AtnatError(f"{flag} {text}: GPU {', '.join(outside)} is not among this process's "
                             f"(CUDA_VISIBLE_DEVICES={mask}); each worker is given its id as CUDA_VISIBLE_DEVICES")
        return ids
    count = torch.cuda.device_count()
    if past := [d for d in ids if int(d) >= count]:
        raise AtnatError(f"{flag} {text}: no GPU {', '.join(past)} here: torch sees {count} (ids 0 to {count - 1})")
    return ids


def require_gpu(accelerator: str, where: str) -> None:
    """A run that asks for a GPU (`train.accelerator: gpu`) stops here, with one message, when none is
    usable, instead of failing inside Lightning after distillation, or (`auto`) training on the CPU."""
    if str(accelerator).lower() not in ("gpu", "cuda"):
        return
    problem = gpu_problem()
    if problem:
        raise AtnatError(f"{where}: train.accelerator is {accelerator}, but no GPU is usable here: {problem}; run it "
                         "on a machine with a CUDA GPU, or set train.accelerator: cpu (a grid's smoke section can)")


def decode_device(requested: str, quantize: str | None = None, note=None) -> str:
    """The device `translate` / `evaluate` decode on for `--device` (auto, cpu, gpu) and `--quantize`:
    int8 has CPU kernels only, so `auto` then takes the CPU even where a GPU is visible (`note` is
    told why: the command prints it on stderr) and `gpu` is refused; `gpu` where no GPU is usable is refused."""
    if quantize in (None, "none"):
        problem = gpu_problem() if requested == "gpu" else None
        if problem:  # asked for: never decoded (and timed) on the CPU instead, without a word
            raise AtnatError(f"--device gpu: no GPU is usable here: {problem}; drop --device gpu (or give --device "
                             "cpu) to decode on the CPU")
        return inference_device(requested)
    if requested == "gpu":
        raise AtnatError(f"--quantize {quantize} runs on the CPU only (PyTorch's dynamic int8 kernels); "
                         "drop --device gpu, or drop --quantize to decode in float on the GPU")
    if requested == "auto" and inference_device("auto") != "cpu" and note is not None:
        note(f"atnat: --quantize {quantize} decodes on the CPU (PyTorch's dynamic int8 kernels are CPU-only), "
             "not on the visible GPU")
    return "cpu"


def trains_on_gpu(accelerator: str) -> bool:
    """Whether Lightning will train a run with this `train.accelerator` on a CUDA GPU (its batches are
    then pinned: data/batching.py)."""
    accelerator = str(accelerator).lower()
    return accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())


def device_name(device: str) -> str:
    """The model of the device a timing ran on: what decides whether saved timings still hold (an H100
    PCIe and an H100 SXM are both "cuda"): torch.cuda.get_device_name, or the CPU's model name."""
    if str(device).startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return cpu_info()["cpu_model"] or "cpu"


def cpu_info(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict:
    """The CPU model and the vector instruction set torch uses: results move between AVX2 and AVX-512,
    and bf16 training between CPUs with and without AMX (results/multi30k-deep/cpu-model-check)."""
    model = platform.processor() or platform.machine()
    flags: set[str] = set()
    try:
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name") and ":" in line:
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and ":" in line:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    vector = [f for f in ("avx512f", "avx512_bf16", "amx_tile", "avx2", "fma", "neon", "asimd") if f in flags]
    capability = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else ""
    return {"cpu_model": model, "cpu_flags": " ".join(vector), "torch_cpu_capability": capability,
            "cpu_count": os.cpu_count()}


def machine_record() -> dict:
    """What a training attempt records of the machine it ran on (attempts.json): the same seed and settings
    give the same weights only on the same CPU model (and GPU), so a run resumed or retrained elsewhere
    says where each part was trained."""
    info = cpu_info()
    record = {k: info[k] for k in ("cpu_model", "cpu_flags", "torch_cpu_capability")}
    if torch.cuda.is_available():  # what the process saw; the run's own accelerator setting says whether it used it
        record["gpu_visible"] = torch.cuda.get_device_name(0)
    return record
