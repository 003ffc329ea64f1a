"""Resuming a run exactly where it stopped.

- `ResumeState` puts what a mid-epoch resume needs into each checkpoint besides Lightning's own
  state: the RNG states and how many batches of the current epoch were trained (the token-budget
  sampler then skips them), so a resumed run trains on exactly the batches an uninterrupted one would.
- `SaveLast` writes last.ckpt at the step a run has reached when it is told to stop (SIGTERM: a
  scheduler's preemption or time limit, a stopped `atnat run`, whose workers get SIGTERM), so a resume
  loses no training (a run stopped inside a validation keeps its previous last.ckpt), and every
  `train.save_every_s` seconds between validations, so a run killed without warning (a lost machine,
  SIGKILL) trains again at most about that much.
- `AtomicCheckpointIO` is how Lightning writes, reads and removes checkpoints: atomically with their
  sha256, read back checked and tensors-only (modelfiles/checkpoints.py).
- `resume_point` picks the newest checkpoint of a run that loads and checks; one that does not is
  renamed `<name>.damaged-<time>` with a message naming it, and the run falls back to the next one
  or starts afresh.
"""
from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from pytorch_lightning.callbacks import Checkpoint, ModelCheckpoint
from pytorch_lightning.utilities.exceptions import SIGTERMException

from atnat.experiments.modelfiles.checkpoints import (
    CheckpointDamaged,
    CheckpointRefused,
    checkpoint_step,
    checksum_path,
    moved_here,
    read_checkpoint,
    save_checkpoint_file,
)

monotonic = time.monotonic  # SaveLast's clock (a test sets its own)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint files written atomically with their sha256, read back checked and
    tensors-only, removed together with their checksum."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        save_checkpoint_file(checkpoint, Path(path))

    def load_checkpoint(self, path, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
        checkpoint = read_checkpoint(Path(path), map_location if map_location is not None else "cpu")
        return moved_here(checkpoint, Path(path).parent)

    def remove_checkpoint(self, path) -> None:
        super().remove_checkpoint(path)
        checksum_path(Path(path)).unlink(missing_ok=True)


class PlateauRule(pl.callbacks.EarlyStopping):
    """Lightning's early stopping, whose resume keeps the patience this run was given: Lightning restored the
    checkpoint's, so a patience changed at a resume (recorded in settings_changes.json) was ignored."""

    @property
    def state_key(self) -> str:  # Lightning's own key: checkpoints written before this class resume into it
        return "EarlyStopping" + super().state_key.removeprefix(type(self).__qualname__)

    def load_state_dict(self, state_dict: dict) -> None:
        patience = self.patience
        super().load_state_dict(state_dict)
        self.patience = patience


class ResumeState(pl.Callback):
    """Saves and restores the RNG states and the position inside the training epoch.

    `sampler` is the training loader's TokenBudgetSampler: on resume it skips the batches of the
    current epoch that were already trained (Lightning resumes its counters, not the data order)."""

    def __init__(self, sampler):
        self.sampler = sampler

    def on_train_start(self, trainer, pl_module) -> None:
        # a run saved after the last batch of an epoch resumes into the next one without
        # on_train_epoch_start (Lightning restarts there as mid-epoch): the sampler follows the trainer
        self.sampler.set_epoch(trainer.current_epoch)
        # a run whose early stopping had decided (its counters are restored; the decision is not) and that was
        # stopped before its end was recorded (SIGTERM in that validation, a kill before train.json): it stays
        # stopped, as the run would have, instead of training past its stop
        if any(isinstance(c, pl.callbacks.EarlyStopping) and c.patience > 0 and c.wait_count >= c.patience
               for c in trainer.callbacks):
            trainer.should_stop = True

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


class SaveLast(Checkpoint):
    """last.ckpt at the step reached, on SIGTERM and every `every_s` seconds (None: on SIGTERM only).

    SIGTERM: Lightning's own handler only notes the signal; the step in progress ends, and here, at its
    on_train_batch_end (where Lightning's step-interval checkpoints are written, the optimizer stepped and
    ResumeState's position moved on), the step is saved once; Lightning then stops. Never at a step whose
    validation is due: Lightning, resuming from a checkpoint written there, would count that validation as
    done without running it (its checkpoint selection and early stopping would miss it). There the
    validation starts instead, and Lightning stops inside it (its checkpoint written if it completes first);
    a signal inside a validation, or noted at an epoch's end after its last step's look, is saved by nothing:
    the previous last.ckpt stands, and up to val_every_steps steps are trained again. One noted after this
    callback's look within an epoch is saved as Lightning stops (on_exception).

    Time: at the end of the first step `every_s` seconds (`clock`'s) after the last checkpoint of any kind
    (a validation's included), the same save, except at a step whose validation is due (its checkpoint
    follows); a resume from it is exact in the same way. Several processes (DDP) agree on the decision first
    (any rank's reason saves), so that every rank reaches the checkpoint's collective together: one small
    collective a step, beside the one Lightning makes every step for the signal (a stop itself is not tested
    with several processes). A Checkpoint callback, so Lightning runs it after the others (EMA's update of
    the step, the divergence guard's check)."""

    def __init__(self, ckpt_dir: Path, every_s: float | None = None, clock=None):
        self.ckpt_dir, self.every_s, self.clock = ckpt_dir, every_s, clock or monotonic
        self.term_seen, self.since = False, None

    def on_train_start(self, trainer, pl_module) -> None:
        self.since = self.clock()

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        self.since = self.clock()  # any checkpoint (a validation's, or this callback's) restarts the count

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        term = trainer.received_sigterm and not self.term_seen
        due = self.every_s is not None and self.since is not None and self.clock() - self.since >= self.every_s
        save = (term or due) and not validation_due(trainer)
        if trainer.world_size > 1:
            save = trainer.strategy.reduce_boolean_decision(save, all=False)
        if save:
            trainer.save_checkpoint(self.ckpt_dir / "last.ckpt")
        if term:
            self.stopping(trainer, f"saved {self.ckpt_dir / 'last.ckpt'}" if save else
                          "its validation is due: last.ckpt is that validation's if it ends first, else the one before")

    def stopping(self, trainer, what: str) -> None:
        self.term_seen = True
        if trainer.is_global_zero:
            print(f"atnat: stopping (SIGTERM) after step {trainer.global_step}; {what}", file=sys.stderr)

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        """A signal that came after this step's look (in the moment between a step's end and Lightning's):
        Lightning stops training with SIGTERMException between two steps of an epoch; the step reached is saved
        here. Not inside a validation (its state is not a step's), not at an epoch's end (a checkpoint taken
        there does not resume exactly: the previous last.ckpt stands), not where this callback saved already."""
        epoch = trainer.fit_loop.epoch_progress.current
        mid_epoch = epoch.processed < epoch.started
        if isinstance(exception, SIGTERMException) and not self.term_seen and trainer.training and mid_epoch:
            trainer.save_checkpoint(self.ckpt_dir / "last.ckpt")
            self.stopping(trainer, f"saved {self.ckpt_dir / 'last.ckpt'}")


def validation_due(trainer) -> bool:
    """Whether Lightning validates after the step that just ended (its own test, asked at the same point)."""
    loop = trainer.fit_loop.epoch_loop
    try:
        return bool(loop._should_check_val_fx(trainer.fit_loop._data_fetcher))
    except AttributeError:  # another Lightning: validation every val_check_batch batches, counted over epochs
        every = trainer.val_check_batch
        return every not in (None, float("inf")) and (loop.total_batch_idx + 1) % int(every) == 0


def _python_rng_state() -> tuple:
    version, internal, gauss = random.getstate()
    return version, list(internal), gauss  # plain types: loadable with weights_only=True


DAMAGED = (CheckpointDamaged, CheckpointRefused)


def resume_point(ckpt_dir: Path, set_aside: bool = True, quiet: bool = False) -> Path | None:
    """The newest checkpoint in `ckpt_dir` that loads (last.ckpt first), or None for a fresh start.

    A checkpoint that fails to load is renamed `<name>.damaged-<time>` (never deleted; `set_aside`
    False: only skipped, as in the helper ranks of a DDP run) and named on stderr (`quiet`: not). averaged.ckpt is
    never resumed from: its weights are a mean, not a training state."""
    if not ckpt_dir.is_dir():
        return None
    candidates = sorted((p for p in ckpt_dir.glob("*.ckpt") if p.name != "averaged.ckpt" and p.is_file()),
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
            if checksum_path(path).exists():
                os.replace(checksum_path(path), checksum_path(aside))
            print(f"atnat: {err}; set aside as {aside.name}", file=sys.stderr)
    if not good:
        if damaged and not quiet:
            print(f"atnat: no loadable checkpoint left in {ckpt_dir}; training starts afresh", file=sys.stderr)
        return None
    best_step = max(step for step, _ in good)
    chosen = next(path for step, path in good if step == best_step)  # last.ckpt wins a tie
    if damaged and not quiet:
        print(f"atnat: resuming from {chosen} (step {best_step})", file=sys.stderr)
    return chosen


class RunCheckpoint(ModelCheckpoint):
    """Lightning's checkpoint callback, whose state a resume always restores: a run resumes only from its own
    checkpoint folder, however that folder was named when it saved (`results/...` then `/home/.../results/...`,
    or a folder moved since). Lightning kept the best checkpoint's score only when the recorded folder name was
    the same string, so a run resumed under another spelling of its path picked a worse `best.ckpt` and said
    nothing. The recorded paths are mapped to this folder by file name."""

    @property
    def state_key(self) -> str:
        """Lightning's key for ModelCheckpoint's state: checkpoints saved before this class, and tools that read
        them, find the state under it."""
        return super().state_key.replace(type(self).__qualname__, ModelCheckpoint.__qualname__, 1)

    def load_state_dict(self, state_dict: dict) -> None:
        here = self.dirpath

        def moved(path):
            return str(Path(here) / Path(path).name) if path and here else path

        state = dict(state_dict)
        if state.get("dirpath") is not None and here is not None:
            state.update(dirpath=here, best_model_path=moved(state.get("best_model_path")),
                         kth_best_model_path=moved(state.get("kth_best_model_path")),
                         last_model_path=moved(state.get("last_model_path")),
                         best_k_models={moved(p): v for p, v in (state.get("best_k_models") or {}).items()})
        super().load_state_dict(state)
