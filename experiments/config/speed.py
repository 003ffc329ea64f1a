"""How a grid's timing phase (and `atnat evaluate`) measures decoding speed: the `speed:` section."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SpeedSettings:
    """How the timing phase measures decoding speed (see evaluation/timing.py)."""

    latency_sentences: int = 32  # sentences decoded one at a time for latency at batch 1
    throughput_sentences: int = 512  # sentences decoded in large batches for throughput
    throughput_batch: int = 64  # sentences per batch in the throughput measurement
    repeats: int = 3  # timed repeats of every call (the median of each call's repeats is used)
    warmup: int = 1  # untimed passes over every call before timing
    bootstrap: int = 1000  # resamples of the sentences (batches) for the speed-up confidence intervals
    threads: int | None = None  # torch CPU threads while timing (None: torch's default)
    ct2_baseline: bool = False  # also time each plain AT cell exported to CTranslate2 (float32; needs the
    # bench extra): rows <strategy>-ct2 and a speedup_vs_ct2 column against its greedy
