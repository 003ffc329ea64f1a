"""What a results folder's environment.json records: the command, the code (commit, edited or not),
the versions, the device and the CPU's vector instructions (AVX2 and AVX-512 machines round
differently), the wall time."""
from __future__ import annotations

import platform
import time

import pytorch_lightning
import sacrebleu
import torch

from atnat.experiments.config.devices import cpu_info
from atnat.experiments.provenance import code_version


def environment(grid, wall_time: float, command: str) -> dict:
    """What environment.json records of the machine, the versions, the code and the command
    (`grid`: the grid, or its file's path)."""
    grid_path = getattr(grid, "path", grid)
    version = code_version()
    threads = torch.get_num_threads()
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else \
        f"CPU ({platform.processor() or platform.machine()}, {threads} thread{'' if threads == 1 else 's'})"
    return {"command": command, "device": device, **cpu_info(), "python": platform.python_version(),
            "torch": torch.__version__, "lightning": pytorch_lightning.__version__, "sacrebleu": sacrebleu.__version__,
            "wall_time_s": round(wall_time, 1),
            "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() - wall_time)),
            **version, "grid": str(grid_path)}
