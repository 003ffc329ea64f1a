"""The CPU cores this process may run on: its affinity (a job's allotment under taskset, cgroups or a cluster
scheduler), not every core of the host."""
from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may use (os.sched_getaffinity where the system has it, else os.cpu_count)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1
