"""Timing and memory probes: controlled clocks, warm-up/repeat counts, CUDA sync calls."""

import gc
import mmap
import time

import pytest
import torch

from atnat.core.errors import AtnatError
from atnat.experiments.evaluation.metrics import current_rss_mb, measure, peak_memory_mb, reset_peak


class FakeClock:
    """Returns pre-set readings, counting how often it is read."""

    def __init__(self, readings):
        self.readings = list(readings)
        self.reads = 0

    def __call__(self):
        self.reads += 1
        return self.readings.pop(0)


def test_measure_median_min_and_counts():
    calls = []
    clock = FakeClock([0, 3, 10, 11, 20, 22, 30, 35, 40, 44])  # durations 3, 1, 2, 5, 4
    t = measure(lambda: calls.append(1), warmup=2, repeats=5, clock=clock)
    assert t.times == (3, 1, 2, 5, 4)
    assert t.median_s == 3 and t.min_s == 1 and t.repeats == 5
    assert len(calls) == 7  # 2 warm-up + 5 timed
    assert clock.reads == 10  # warm-up calls are not timed


def test_measure_even_repeats_and_no_warmup():
    calls = []
    t = measure(lambda: calls.append(1), warmup=0, repeats=2, clock=FakeClock([0, 1, 5, 8]))
    assert t.median_s == 2 and len(calls) == 2


def test_measure_real_clock():
    t = measure(lambda: time.sleep(0.01), warmup=0, repeats=2)
    assert 0.009 <= t.min_s <= t.median_s < 1.0


def test_measure_synchronises_cuda_around_each_repeat(monkeypatch):
    syncs = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: syncs.append(device))
    measure(lambda: None, warmup=1, repeats=3, device="cuda", clock=FakeClock(range(6)))
    assert len(syncs) == 6
    measure(lambda: None, warmup=1, repeats=3, device="cpu", clock=FakeClock(range(6)))
    assert len(syncs) == 6


def test_measure_rejects_bad_counts():
    with pytest.raises(AtnatError, match="repeats=0"):
        measure(lambda: None, repeats=0)


def test_cpu_memory_probes():
    # The block is an anonymous mapping of our own, touched page by page and unmapped on close, so
    # what the probe sees does not depend on the allocator: numpy's 64 MiB array once stayed
    # resident after del on CI (glibc kept it), and garbage collected mid-measurement once gave
    # back 36 MiB while the block took 64 (CI: +28 MiB) - hence gc off as well.
    size = 64 * 2**20
    gc.collect()
    gc.disable()
    try:
        before = current_rss_mb()
        block = mmap.mmap(-1, size)
        page = mmap.PAGESIZE
        for offset in range(0, size, page):
            block[offset] = 1  # touch every page
        after = current_rss_mb()
        assert after - before > 48
        reset_peak("cpu")  # a documented no-op
        assert peak_memory_mb("cpu") >= after - 1
        block.close()  # munmap: the pages go back at once
        assert after - current_rss_mb() > 48
    finally:
        gc.enable()


def test_cuda_peak_memory_reads_allocator(monkeypatch):
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 3 * 2**20)
    resets = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: resets.append(device))
    assert peak_memory_mb("cuda") == 3.0
    reset_peak("cuda")
    assert len(resets) == 1
