"""How fast a real run trains: the tokens of its training batches over the time its training loop took,
validation left out, written to train.json as `throughput` (this attempt of the run; under DDP the tokens of
every process's batches, summed, over rank 0's clock). `atnat bench train` times one bare step; this says how
much of that speed a whole run keeps (data loading, logging, checkpoint writes and the callbacks included).

Tokens are summed on the device (no host sync per step); the clock is read with the device synchronised
only where it must be: when training starts, after the first WARM_STEPS steps (so that compiling and the
first allocations can be told apart from the steady state), around each validation and at the end.
Lightning's own ThroughputMonitor synchronises every step, which would itself slow a GPU run.
"""
from __future__ import annotations

import time

import pytorch_lightning as pl
import torch

WARM_STEPS = 10  # steps of this attempt before the steady-state clock starts


def graphs_compiled() -> int:
    """Graphs torch.compile has made in this process so far (its dynamo counters; 0 where there are none): a
    compiled step that compiles again after its first steps spends part of its steady state compiling."""
    try:
        from torch._dynamo.utils import counters
        return int(counters["stats"]["unique_graphs"])
    except (ImportError, AttributeError, KeyError, TypeError, ValueError):
        return 0


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


class Throughput(pl.Callback):
    """Counts the source and target tokens (not padding) of every training batch of this attempt and
    times its training loop without its validations; `record()` is train.json's `throughput`."""

    def __init__(self) -> None:
        self._tokens: torch.Tensor | None = None  # (source, target) tokens so far, on the device
        self._warm_tokens: torch.Tensor | None = None  # ... at the end of the first WARM_STEPS steps
        self._steps = 0
        self._started = self._warm_at = self._ended = None
        self._validation_s = self._warm_validation_s = 0.0
        self._validation_started: float | None = None
        self._world_size = 1
        self._graphs: list[int] = []

    def _now(self, module) -> float:
        synchronize(module.device)
        return time.perf_counter()

    def on_train_start(self, trainer: pl.Trainer, pl_module) -> None:
        self._tokens = torch.zeros(2, dtype=torch.long, device=pl_module.device)
        self._graphs = [graphs_compiled()]  # at the start, after the warm steps, at the end
        self._started = self._now(pl_module)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        lengths = getattr(batch, "src_lengths", None), getattr(batch, "tgt_lengths", None)
        if self._tokens is None or lengths[0] is None or lengths[1] is None:
            return
        self._tokens += torch.stack([lengths[0].sum(), lengths[1].sum()]).to(self._tokens.device)
        self._steps += 1
        if self._steps == WARM_STEPS:
            self._warm_tokens = self._tokens.clone()
            self._warm_at = self._now(pl_module)
            self._warm_validation_s = self._validation_s
            self._graphs.append(graphs_compiled())

    def on_validation_start(self, trainer: pl.Trainer, pl_module) -> None:
        if self._started is not None and self._ended is None:  # a validation inside fit's training loop
            self._validation_started = self._now(pl_module)

    def on_validation_end(self, trainer: pl.Trainer, pl_module) -> None:
        if self._validation_started is not None:
            self._validation_s += self._now(pl_module) - self._validation_started
            self._validation_started = None

    def on_train_end(self, trainer: pl.Trainer, pl_module) -> None:
        if self._started is None:
            return
        self._ended = self._now(pl_module)
        self._graphs.append(graphs_compiled())
        # every rank trains on its own share of the batches: the run's tokens are their sum (one collective,
        # which every rank reaches here; the identity in a single process)
        reduce = trainer.strategy.reduce
        self._tokens = reduce(self._tokens, reduce_op="sum")
        if self._warm_tokens is not None:
            self._warm_tokens = reduce(self._warm_tokens, reduce_op="sum")
        self._world_size = trainer.world_size

    def record(self) -> dict | None:
        """train.json's `throughput`, or None when no training step ran in this attempt."""
        if self._ended is None or not self._steps:
            return None
        src, tgt = (int(v) for v in self._tokens.tolist())
        loop_s = self._ended - self._started - self._validation_s
        out = {"steps": self._steps, "world_size": self._world_size, "source_tokens": src, "target_tokens": tgt,
               "validation_s": round(self._validation_s, 3), "loop_s": round(loop_s, 3),
               "target_tokens_per_s": round(tgt / loop_s, 1) if loop_s > 0 else None,
               "graphs_compiled": self._graphs[-1] - self._graphs[0]}
        if self._warm_at is not None and self._steps > WARM_STEPS:
            warm_src, warm_tgt = (int(v) for v in self._warm_tokens.tolist())
            steady_s = self._ended - self._warm_at - (self._validation_s - self._warm_validation_s)
            steady_tgt = tgt - warm_tgt
            out["steady"] = {"after_steps": WARM_STEPS, "steps": self._steps - WARM_STEPS,
                             "target_tokens": steady_tgt, "loop_s": round(steady_s, 3),
                             "s_per_step": round(steady_s / (self._steps - WARM_STEPS), 5),
                             "target_tokens_per_s": round(steady_tgt / steady_s, 1) if steady_s > 0 else None,
                             "graphs_compiled": self._graphs[-1] - self._graphs[1]}
        return out


def run_record(record: dict | None, previous: object, *, attempt: int, form: str) -> dict | None:
    """train.json's `throughput` for the run: this attempt's `record`, named by its attempt and step form;
    when this attempt has no steady state to tell (a resume that found training finished, or 10 steps or
    fewer), the steady measurement of the previous train.json (`previous`, read back: untrusted) where it
    was made in the same step form, with the attempt that made it."""
    if record is not None:
        record = {**record, "attempt": attempt, "step": form}
        if "steady" in record:
            return record
    old = previous.get("throughput") if isinstance(previous, dict) else None
    if isinstance(old, dict) and isinstance(old.get("steady"), dict) and old.get("step", "eager") == form:
        return old
    return record
