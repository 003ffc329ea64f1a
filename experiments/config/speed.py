"""How a grid's timing phase (and `atnat evaluate`) measures decoding speed: the `speed:` section."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from atnat.core.engine_names import DEFAULT_ENGINE, parse_engine
from atnat.core.options import require_at_least, require_threads


@dataclass(frozen=True)
class SpeedSettings:
    """How the timing phase measures decoding speed (see evaluation/timing.py)."""

    latency_sentences: int = 32  # sentences decoded one at a time for latency at batch 1
    throughput_sentences: int = 512  # sentences decoded in large batches for throughput
    throughput_batch: int = 64  # sentences per batch in the throughput measurement
    repeats: int = 3  # timed repeats of every call (the median of each call's repeats is used)
    warmup: int = 1  # untimed passes over every call before timing
    bootstrap: int = 1000  # resamples of the sentences (batches) for the speed-up confidence intervals
    threads: int | None = 1  # torch CPU threads per system while timing: 1 is what the bench found sound on a
    # small or shared CPU (results/bench/README.md: 2-thread ratios on 2 vCPUs were noise); null: torch's
    # default. Shown beside every speed figure of the report
    ct2_baseline: bool = False  # also time each plain AT cell exported to CTranslate2 (float32; needs the
    # bench extra): rows <strategy>-ct2 and speedup columns against its greedy
    aa_control: bool = True  # time the baseline twice, as two systems: the ratio of the two (ideally 1) is
    # the noise floor of its task's speed ratios (batch-1: columns speed_noise_low/high; throughput:
    # throughput_noise_low/high)
    reference_at: str | None = None  # a second AT cell of the grid (by its name under `cells:`, e.g. a deep-encoder/
    # shallow-decoder AT): every system's speed-ups over that cell's greedy, same task and seed, are measured too
    engine: str = DEFAULT_ENGINE  # how our systems decode while timed (core/engine_names.py, modelfiles/engines.py:
    # auto (the default), eager, static, packed, inductor, aoti, with +options); recorded per row (timing_engine)

    def __post_init__(self) -> None:
        for name in ("latency_sentences", "throughput_sentences", "throughput_batch", "repeats"):
            require_at_least(getattr(self, name), 1, "speed", name)
        require_at_least(self.warmup, 0, "speed", "warmup")
        require_at_least(self.bootstrap, 0, "speed", "bootstrap")
        require_threads(self.threads, "speed", "threads")
        object.__setattr__(self, "engine", parse_engine(self.engine, "speed.engine").label)  # one spelling

    def record(self) -> dict:
        """These settings as timing.json records them: an eager engine is left out, as timings taken
        before engines existed recorded it (they were eager), so those stay current."""
        out = dataclasses.asdict(self)
        if out["engine"] == "eager":
            del out["engine"]
        if out["reference_at"] is None:  # as timings taken before it existed recorded it
            del out["reference_at"]
        return out
