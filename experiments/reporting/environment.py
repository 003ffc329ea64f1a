"""What a results folder's environment.json records: the command, the code (commit, edited or not),
the versions, the device and the CPU's vector instructions (AVX2 and AVX-512 machines round
differently), the wall time."""
from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import pytorch_lightning
import sacrebleu
import torch

from atnat.experiments.provenance import code_version


def cpu_info(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict:
    """The CPU model and the vector instruction set torch uses: results move between AVX2 and AVX-512."""
    model = platform.processor() or platform.machine()
    flags: set[str] = set()
    try:
        for line in cpuinfo.read_text().splitlines():
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


def environment(grid, wall_time: float, command: str) -> dict:
    """What environment.json records of the machine, the versions, the code and the command
    (`grid`: the grid, or its file's path)."""
    grid_path = getattr(grid, "path", grid)
    version = code_version()
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else \
        f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    return {"command": command, "device": device, **cpu_info(), "python": platform.python_version(),
            "torch": torch.__version__, "lightning": pytorch_lightning.__version__, "sacrebleu": sacrebleu.__version__,
            "wall_time_s": round(wall_time, 1), "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() - wall_time)),
            **version, "grid": str(grid_path)}
