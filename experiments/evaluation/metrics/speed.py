"""Wall-clock timing and memory probes for decoding speed comparisons.

Timing follows the design's rules: warm up first, synchronise CUDA around every repeat (kernels
run asynchronously, so an unsynchronised timer measures only the launch), report the median.
"""

from __future__ import annotations

import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from atnat.core.errors import AtnatError


@dataclass(frozen=True)
class Timing:
    """Repeated wall-clock timings of one callable."""

    median_s: float  # median seconds per call over the timed repeats
    min_s: float  # fastest call in seconds (least disturbed by other load)
    times: tuple[float, ...]  # seconds of every timed repeat, in order
    repeats: int  # number of timed repeats (warm-up calls excluded)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(
    fn: Callable[[], object],
    *,
    warmup: int = 2,
    repeats: int = 5,
    device: torch.device | str = "cpu",
    clock: Callable[[], float] = time.perf_counter,
) -> Timing:
    """Time ``fn()`` ``repeats`` times after ``warmup`` untimed calls; CUDA is synchronised
    before and after each timed call. ``clock`` is injectable for tests."""
    if warmup < 0 or repeats < 1:
        raise AtnatError(
            f"measure needs warmup >= 0 and repeats >= 1, got warmup={warmup}, repeats={repeats}"
        )
    dev = torch.device(device)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        _synchronize(dev)
        start = clock()
        fn()
        _synchronize(dev)
        times.append(clock() - start)
    return Timing(
        median_s=float(statistics.median(times)),
        min_s=float(min(times)),
        times=tuple(float(t) for t in times),
        repeats=repeats,
    )


def peak_memory_mb(device: torch.device | str = "cpu") -> float:
    """Peak memory in MiB: CUDA tensors allocated on the device since the last reset_peak, or,
    on CPU, the process's peak resident set size (since start; it cannot be reset)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.max_memory_allocated(dev) / 2**20
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # ru_maxrss is in kilobytes on Linux, in bytes on macOS.
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def reset_peak(device: torch.device | str = "cpu") -> None:
    """Reset the CUDA peak-memory counter; a no-op on CPU, whose peak RSS cannot be reset
    (compare current_rss_mb() before and after instead)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)


def current_rss_mb() -> float:
    """Current resident set size of this process in MiB (Linux /proc/self/statm), to check
    that memory does not grow over repeated calls."""
    try:
        with open("/proc/self/statm") as f:
            resident_pages = int(f.read().split()[1])
    except OSError as e:
        raise RuntimeError("current_rss_mb needs /proc/self/statm (Linux)") from e
    return resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20
