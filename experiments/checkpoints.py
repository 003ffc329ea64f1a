"""Checkpoints that survive a kill: atomic writes, exact resume, damaged files set aside, averaging.

- `AtomicCheckpointIO` writes every checkpoint to a temporary file in its own folder, fsyncs it and
  renames it into place, so a kill or a full disk leaves the previous file whole.
- `ResumeState` puts what a mid-epoch resume needs into each checkpoint besides Lightning's own
  state: the RNG states and how many batches of the current epoch were trained (the token-budget
  sampler then skips them), so a resumed run trains on exactly the batches an uninterrupted one would.
- `resume_point` picks the newest checkpoint of a run that loads; one that does not is renamed
  `<name>.damaged` with a message naming it, and the run falls back to the next one or starts afresh.
- `average_checkpoints` averages the weights of several checkpoints (Vaswani et al. 2017 average the
  last 5 or 20; NAT toolkits the best 5 by validation BLEU).
"""
from __future__ import annotations

import os
import random
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO

from atnat.core.errors import AtnatError


class AtomicCheckpointIO(TorchCheckpointIO):
    """torch.save into a temporary file beside the target, fsync, rename: never a half-written file."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)


class ResumeState(pl.Callback):
    """Saves and restores the RNG states and the position inside the training epoch.

    `sampler` is the training loader's TokenBudgetSampler: on resume it skips the batches of the
    current epoch that were already trained (Lightning resumes its counters, not the data order)."""

    def __init__(self, sampler):
        self.sampler = sampler

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.sampler.set_epoch(trainer.current_epoch)  # the batches are drawn lazily, after this hook
        self.sampler.trained = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.sampler.trained = batch_idx + 1  # batch_idx continues across a resume

    def state_dict(self) -> dict:
        state = {"torch": torch.get_rng_state(), "python": _python_rng_state(),
                 "sampler": self.sampler.state_dict()}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state: dict) -> None:
        torch.set_rng_state(state["torch"])
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])
        self.sampler.load_state_dict(state["sampler"])


def _python_rng_state() -> tuple:
    version, internal, gauss = random.getstate()
    return version, list(internal), gauss  # plain types: loadable with weights_only=True


def checkpoint_step(path: Path) -> int:
    """The global step stored in a checkpoint; raises whatever a damaged file raises."""
    ckpt = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    return int(ckpt.get("global_step", 0))


DAMAGED = (zipfile.BadZipFile, EOFError, RuntimeError, OSError, ValueError, KeyError,
           __import__("pickle").UnpicklingError)


def resume_point(ckpt_dir: Path, set_aside: bool = True) -> Path | None:
    """The newest checkpoint in `ckpt_dir` that loads (last.ckpt first), or None for a fresh start.

    A checkpoint that fails to load is renamed `<name>.damaged-<time>` (never deleted; `set_aside`
    False: only skipped, as in the helper ranks of a DDP run) and named on stderr. averaged.ckpt is
    never resumed from: its weights are a mean, not a training state."""
    if not ckpt_dir.is_dir():
        return None
    candidates = sorted((p for p in ckpt_dir.glob("*.ckpt") if p.name != "averaged.ckpt"),
                        key=lambda p: (p.name != "last.ckpt", -p.stat().st_mtime))
    good: list[tuple[int, Path]] = []
    damaged = False
    for path in candidates:
        try:
            good.append((checkpoint_step(path), path))
        except DAMAGED as err:
            damaged = True
            if not set_aside:
                continue
            aside = path.with_name(f"{path.name}.damaged-{int(time.time())}")
            os.replace(path, aside)
            print(f"atnat: checkpoint {path} is damaged ({type(err).__name__}: {err}); set aside as "
                  f"{aside.name}", file=sys.stderr)
    if not good:
        if damaged:
            print(f"atnat: no loadable checkpoint left in {ckpt_dir}; training starts afresh", file=sys.stderr)
        return None
    best_step = max(step for step, _ in good)
    chosen = next(path for step, path in good if step == best_step)  # last.ckpt wins a tie
    if damaged:
        print(f"atnat: resuming from {chosen} (step {best_step})", file=sys.stderr)
    return chosen


def average_state_dicts(states: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Element-wise mean of floating-point tensors (accumulated in float64, so averaging N copies of
    one model gives it back exactly); other tensors are taken from the last state."""
    if not states:
        raise AtnatError("checkpoint averaging needs at least one checkpoint")
    keys = list(states[-1])
    for i, s in enumerate(states):
        if list(s) != keys:
            raise AtnatError(f"checkpoint averaging: checkpoint {i} has different parameters than the others")
    out = {}
    for key in keys:
        last = states[-1][key]
        if last.is_floating_point():
            total = torch.zeros_like(last, dtype=torch.float64)
            for s in states:
                total += s[key].to(torch.float64)
            out[key] = (total / len(states)).to(last.dtype)
        else:
            out[key] = last
    return out


def average_checkpoints(paths: list[Path], out: Path, note: dict) -> None:
    """Write `out`: the checkpoint paths[-1] with its weights replaced by the mean over `paths`, and
    `note` (what was averaged) under "atnat_selection"."""
    ckpts = [torch.load(p, map_location="cpu", weights_only=False) for p in paths]
    merged = dict(ckpts[-1])
    merged["state_dict"] = average_state_dicts([c["state_dict"] for c in ckpts])
    merged["atnat_selection"] = note
    AtomicCheckpointIO().save_checkpoint(merged, out)
