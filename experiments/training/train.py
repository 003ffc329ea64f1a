"""Train one run: data -> Seq2SeqModule -> Lightning Trainer, resumable from its last checkpoint."""
from __future__ import annotations

import datetime
import json
import logging
import math
import signal
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint, Timer
from pytorch_lightning.utilities import exceptions as pl_exceptions

from atnat.core.errors import AtnatError
from atnat.experiments.config.devices import helper_rank, leave_process_group, machine_record, trains_on_gpu
from atnat.experiments.config.plugins import named_plugins
from atnat.experiments.config.precision import resolve_precision
from atnat.experiments.config.run import RunConfig, load_task, named
from atnat.experiments.config.settings import resolved, settings_change
from atnat.experiments.data.batching import check_budget, longest_pair, make_loader
from atnat.experiments.data.prepared import PreparedSplit, prepared_split
from atnat.experiments.data.tasks import TaskData
from atnat.experiments.evaluation.assemble import validation_search
from atnat.experiments.files import path_part, read_json_object, write_json_atomic
from atnat.experiments.modelfiles.checkpoints import (
    average_checkpoints,
    checkpoint_step,
    checksum_path,
    read_checkpoint,
    save_checkpoint_file,
)
from atnat.experiments.modelfiles.loading import attach_tokenizer, checkpoint_stamp, load_module
from atnat.experiments.provenance import stamp
from atnat.experiments.training.divergence import DivergenceGuard, UnfitGuard
from atnat.experiments.training.logs import make_loggers
from atnat.experiments.training.progress_reporter import ProgressReporter
from atnat.experiments.training.resume import (
    AtomicCheckpointIO,
    PlateauRule,
    ResumeState,
    RunCheckpoint,
    SaveLast,
    resume_point,
)
from atnat.experiments.training.throughput import Throughput, run_record
from atnat.models.decoders.base import LossConfig
from atnat.models.seq2seq import Seq2SeqModule


@dataclass
class PreparedData:
    """A task's sentences, tokenizer and prepared splits."""

    task: TaskData
    encoded: dict[str, PreparedSplit]


def check_lengths_fit(module, data: PreparedData, max_len: int, sides: tuple[str, ...] = ("sources", "targets")) -> None:
    """Refused before anything is written: a sentence past the model's reach would fail at its batch, hours
    in. Sources against what the model reads, targets against what its loss and probes teacher-force (an AT:
    the target and its end symbol, one position each). `sides`: those checked (a grid checks the sources of
    every cell before any runs: running/plan.py)."""
    decoder = module.decoder
    limits = [decoder.max_source_length] + ([decoder.max_target_length] if decoder.max_target_length is not None else [])
    for name, split in data.encoded.items():
        if not len(split):
            continue
        for side, longest, limit, verb in (("sources", int(split.src_lengths.max()), decoder.max_source_length, "reads"),
                                           ("targets", int(split.tgt_lengths.max()), decoder.max_target_length, "writes")):
            if side in sides and limit is not None and longest > limit:
                upsample = getattr(getattr(decoder, "options", None), "upsample", None)  # positions per source token
                remedies = ([f"set train.max_len to at most {min(limits)}"] if min(limits) > 0 else []) + \
                    ([f"lower decoder.upsample ({upsample:g} positions per source token)"] if upsample else []) + \
                    ["raise model.max_positions"]
                reach = f"at most {limit}" if limit else "none"
                raise AtnatError(f"split {name}: {side} of up to {longest} tokens (train.max_len {max_len}), but "
                                 f"this model {verb} {reach} (decoder {module.hparams.decoder}, "
                                 f"model.max_positions {module.model_cfg.max_positions}"
                                 + (f", decoder.upsample {upsample:g}" if upsample else "") + "): "
                                 + ", ".join(remedies[:-1]) + (", or " if len(remedies) > 1 else "") + remedies[-1])


def prepare_data(cfg: RunConfig, task: TaskData | None = None,
                 train_targets: list[str] | None = None) -> PreparedData:
    """Every split prepared (encoded once into the cache of memory-mapped splits, then mapped);
    `train_targets` replaces the training targets (distillation)."""
    task = task or load_task(cfg)
    encoded = {}
    for split in task.splits:
        targets = None
        if split == "train" and train_targets is not None:
            sources = task.side_texts("train")[0].digest()[1]
            if len(train_targets) != sources:
                raise AtnatError(f"distilled targets: {len(train_targets)} lines for {sources} training sources")
            targets = train_targets
        encoded[split] = prepared_split(task, split, max_len=cfg.train.max_len, drop_long=split == "train",
                                        targets=targets)
        budget, setting = (cfg.train.max_tokens, "train.max_tokens") if split == "train" \
            else (cfg.eval.max_tokens, "eval.max_tokens")
        check_budget(encoded[split], budget, setting=setting, name=split)  # refused before anything trains
    return PreparedData(task, encoded)


def build_module(cfg: RunConfig, task: TaskData) -> Seq2SeqModule:
    dec_name, dec_opts = named(cfg.decoder, "decoder")
    module = Seq2SeqModule(vocab_size=task.tokenizer.vocab_size, decoder=dec_name, model=cfg.model,
                           decoder_options=dec_opts, loss=cfg.loss, optim=cfg.optim)
    attach_tokenizer(module, task.tokenizer, task.bleu_tokenize, task.lang)
    module.validation_search = validation_search(module.decoder)
    module.plugins = named_plugins()  # recorded with its checkpoints and exports
    return module


def quiet_lightning() -> None:
    """Drop Lightning's tips and the data-loader worker advice that do not apply here."""
    for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*LeafSpec.*")
    warnings.filterwarnings("ignore", ".*treespec.*")
    warnings.filterwarnings("ignore", ".*smaller than the logging interval.*")


INIT_RECORD = "init.json"  # the weights a run started from (train.init_from), written at its first step


def initialised_from(module: Seq2SeqModule, cfg: RunConfig, run_dir: Path, resume: Path | None) -> dict:
    """The record of the weights the run started from: copied now at a fresh start (and recorded in init.json
    before its first step), read back at a resume, whose checkpoint replaces them anyway (reading the source
    again would record what it holds now: a teacher trained again since, whose change then went unseen). A run
    begun before init.json existed copies them again, as it did."""
    recorded = read_json_object(run_dir / INIT_RECORD) if resume is not None else None
    if recorded:
        return recorded
    initialised = initialise(module, cfg)
    if resume is None and not helper_rank():
        write_json_atomic(run_dir / INIT_RECORD, initialised)
    return initialised


def initialise(module: Seq2SeqModule, cfg: RunConfig) -> dict:
    """Copy train.init_from's weights into `module` wherever a parameter's name and shape match (a
    NAT student of an AT teacher: encoder, embeddings, decoder layers, output projection; not the
    length predictor). A resumed run then loads its own checkpoint over this. -> what was copied."""
    source = cfg.train.init_from
    if source == "teacher":
        if cfg.distill is None:
            raise AtnatError(f"run {cfg.name}: train.init_from: teacher needs distill.teacher (a grid teacher)")
        source = cfg.distill.teacher
    source_module, source_tokenizer = load_module(source)
    if module.tokenizer_state is not None and source_tokenizer.to_state() != module.tokenizer_state:
        raise AtnatError(f"train.init_from {source}: that model's vocabulary is not this run's (another tokenizer: "
                         "another task's files): its embeddings and output layer would land on other pieces. Start "
                         "from a model of this task")
    other = source_module.state_dict()
    own = module.state_dict()
    copied = {k: v for k, v in other.items() if k in own and own[k].shape == v.shape}
    if not copied:
        raise AtnatError(f"train.init_from {source}: no parameter of that model fits this one")
    module.load_state_dict(copied, strict=False)
    # the weights' identity (as distill.json records the teacher's): a teacher trained again later, e.g.
    # on another CPU whose bf16 kernels round differently, is then told apart from the one used here
    return {"source": str(source), "checkpoint": checkpoint_stamp(source), "tensors": len(copied), "of": len(own),
            "not_copied": sorted(k for k in own if k not in copied)}


def finished_training(run_dir: Path, cfg: RunConfig) -> Path | None:
    """The checkpoint a run's finished training left for evaluation (train.json names it), when it
    was trained with these settings; None when training is not finished or its settings changed."""
    record = run_dir / "train.json"
    if not record.is_file():
        return None
    try:
        chosen = run_dir / "checkpoints" / path_part(json.loads(record.read_text())["evaluated_checkpoint"], str(record))
    except (OSError, ValueError, KeyError, TypeError, AtnatError):  # not this run's record: not finished
        return None
    return chosen if chosen.is_file() and not settings_change(run_dir, cfg).training else None


def selection(t) -> tuple[str, str]:
    """(monitored metric, mode) that selects checkpoints (train.checkpoint_metric)."""
    return ("val/bleu", "max") if t.checkpoint_metric == "bleu" else ("val/loss", "min")


def ddp_strategy(cfg: RunConfig) -> str:
    """Lightning's strategy: its own choice ("auto": DDP for several devices), except where a
    zero-weighted loss part leaves parameters without a gradient (loss.length_weight: 0, the NAT
    length predictor): DDP refuses those unless told to look for them every step, which costs a
    walk over the autograd graph, so only such runs pay it."""
    t = cfg.train
    several = t.num_nodes > 1 or str(t.devices) not in ("1", "[0]")
    zero_length = float(cfg.loss.get("length_weight", LossConfig.length_weight)) == 0
    return "ddp_find_unused_parameters_true" if several and zero_length else "auto"


class ValidateAtTheEnd(pl.Callback):
    """A validation at the last step of training (max_steps, or the last batch of max_epochs) when it is no
    multiple of val_every_steps: Lightning ends such a run without validating, so the final weights were
    never saved for selection or averaging. Asking it to stop there makes it validate first."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        loop = trainer.fit_loop
        last_step = trainer.max_steps not in (None, -1) and trainer.global_step >= trainer.max_steps
        last_epoch = (trainer.max_epochs not in (None, -1) and loop.epoch_loop.batch_progress.is_last_batch
                      and trainer.current_epoch + 1 >= trainer.max_epochs)
        if last_step or last_epoch:
            trainer.should_stop = True


def make_trainer(cfg: RunConfig, run_dir: Path, sampler) -> pl.Trainer:
    """The Lightning Trainer of a run: checkpoint selection and averaging, EMA, exact resume
    (`sampler`: the training loader's TokenBudgetSampler), atomic checkpoint files, logs."""
    t = cfg.train
    monitor, mode = selection(t)
    ckpt_dir = run_dir / "checkpoints"
    several = t.keep > 1 or t.average == "best"
    callbacks = [ResumeState(sampler),
                 RunCheckpoint(dirpath=ckpt_dir, filename="top-{step}" if several else "best", monitor=monitor,
                               mode=mode, save_last=True, save_top_k=t.keep if t.average != "last" else 1,
                               enable_version_counter=False, auto_insert_metric_name=False)]
    if t.average == "last":  # the last `keep` validation checkpoints
        callbacks.append(RunCheckpoint(dirpath=ckpt_dir, filename="step-{step}", monitor="step", mode="max",
                                       save_top_k=t.keep, enable_version_counter=False,
                                       auto_insert_metric_name=False))
    if t.early_stop_patience:
        callbacks.append(PlateauRule(monitor, patience=t.early_stop_patience, mode=mode,
                                     min_delta=t.early_stop_min_delta))
    if t.ema is not None:
        from pytorch_lightning.callbacks.weight_averaging import EMAWeightAveraging

        callbacks.append(EMAWeightAveraging(decay=t.ema))
    callbacks.append(DivergenceGuard(t.divergence_factor))  # a NaN/exploding loss fails the run
    callbacks.append(UnfitGuard())  # and so does a loss that leaves out most targets
    callbacks.append(ValidateAtTheEnd())
    callbacks.append(Throughput())  # train.json's tokens per second of the training loop, validation left out
    callbacks.append(ProgressReporter(run_dir, t.max_steps, t.max_time_s,
                                       stops_early=t.early_stop_patience is not None))  # progress.json, a line per validation
    # training wall time kept in the checkpoints (Lightning's Timer restores it on resume): train.json's
    # train_time_s counts every attempt of a resumed run; max_time_s, if set, caps that total
    callbacks.append(Timer(None if t.max_time_s is None else datetime.timedelta(seconds=t.max_time_s),
                           interval="step"))
    # last: a Checkpoint, so Lightning runs it after every other callback's step end (EMA's update, the
    # divergence guard), and after the selecting ModelCheckpoint, which stays trainer.checkpoint_callback
    callbacks.append(SaveLast(ckpt_dir, t.save_every_s))
    return pl.Trainer(
        max_steps=t.max_steps, max_epochs=t.max_epochs, val_check_interval=t.val_every_steps,
        check_val_every_n_epoch=None, accelerator=t.accelerator, devices=t.devices, num_nodes=t.num_nodes,
        strategy=ddp_strategy(cfg),
        precision=resolve_precision(t.precision, t.accelerator),
        gradient_clip_val=cfg.optim.get("clip_norm", 1.0) or None, callbacks=callbacks,
        default_root_dir=run_dir, logger=make_loggers(t.loggers, run_dir) or False,
        plugins=[AtomicCheckpointIO()],
        enable_progress_bar=t.progress_bar, enable_model_summary=False, num_sanity_val_steps=0,
        use_distributed_sampler=False, log_every_n_steps=min(50, max(1, t.val_every_steps // 4)))


def record_attempt(run_dir: Path, resume: Path | None) -> None:
    """Append this training attempt to attempts.json: when it started, from which checkpoint, the code
    (git commit, edited or not) and the machine (CPU model, GPU): a run resumed across code changes or
    machines names every commit and machine it ran under."""
    path = run_dir / "attempts.json"
    history = attempts_of(run_dir)
    history.append({**stamp(), "resumed_from": resume.name if resume is not None else None, "machine": machine_record()})
    write_json_atomic(path, history)


def attempts_of(run_dir: Path) -> list[dict]:
    """attempts.json's entries ([] when absent or not a list: it only documents, nothing depends on it)."""
    try:
        history = json.loads((run_dir / "attempts.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return [h for h in history if isinstance(h, dict)] if isinstance(history, list) else []


class SettingsChanged(AtnatError):
    """A run would resume under other settings than the ones it was trained with."""


def record_change(run_dir: Path, change, step: int) -> None:
    """Append an accepted change of settings, with the step from which it holds, to settings_changes.json."""
    path = run_dir / "settings_changes.json"
    try:
        history = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
    except (OSError, ValueError) as err:
        raise AtnatError(f"{path} cannot be read as the run's list of settings changes ({err}); move it aside "
                         "to start the list again") from None
    if not isinstance(history, list):
        raise AtnatError(f"{path} holds a {type(history).__name__}, not the run's list of settings changes; "
                         "move it aside to start the list again")
    history.append({"step": step, "time": datetime.datetime.now().isoformat(timespec="seconds"),
                    "changes": [{"key": k, "was": a, "now": b} for k, a, b in change.training]})
    write_json_atomic(path, history)


class OptimizerSettings(pl.Callback):
    """After a resume with changed settings: the optimizer takes this run's optim values (lr, betas,
    eps, weight decay) instead of those saved with its state (the schedule's shape follows the new
    config already: its factor is a function, not saved)."""

    def on_train_start(self, trainer, pl_module) -> None:
        o = pl_module.optim_cfg
        for config in trainer.lr_scheduler_configs:
            config.scheduler.base_lrs = [o.lr for _ in config.scheduler.base_lrs]
        for optimizer in trainer.optimizers:
            for group in optimizer.param_groups:
                group.update(initial_lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay)
        for config in trainer.lr_scheduler_configs:  # lr = new peak x the schedule's factor at this step
            sched = config.scheduler
            for group, base, factor in zip(sched.optimizer.param_groups, sched.base_lrs, sched.lr_lambdas):
                group["lr"] = base * factor(sched.last_epoch)


def check_weights_fit(module, resume: Path, change) -> None:
    """A changed setting may change how training goes on, not the model's shape: every tensor of the
    checkpoint must fit the model the new settings build (SettingsChanged naming the first that does not)."""
    saved = read_checkpoint(resume).get("state_dict", {})
    for name, tensor in module.state_dict().items():
        if name in saved and tuple(saved[name].shape) != tuple(tensor.shape):
            raise SettingsChanged(f"a resumed run cannot change the model's shape (not even with "
                                  f"--allow-settings-change): {name} is "
                                  f"{tuple(saved[name].shape)} in {resume} and {tuple(tensor.shape)} under the new "
                                  f"settings ({change.describe()}); train the new model in another folder")


def train(cfg: RunConfig, run_dir: Path, data: PreparedData | None = None, *,
          allow_changes: bool = False) -> Path | None:
    """Train (or resume) the run in `run_dir`; returns the checkpoint evaluation uses (see
    `evaluation_checkpoint`), or None in the non-zero ranks of a multi-device (DDP) run, whose work
    ends with training. Resuming under settings that differ from the recorded ones (config.json)
    is SettingsChanged, unless `allow_changes` (then recorded in settings_changes.json)."""
    quiet_lightning()
    run_dir.mkdir(parents=True, exist_ok=True)
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    data = data or prepare_data(cfg)
    resume = resume_point(run_dir / "checkpoints", set_aside=not helper_rank())  # every DDP rank resumes
    change = settings_change(run_dir, cfg) if resume is not None else None
    module = build_module(cfg, data.task)
    if change and change.training:  # refused before anything is written: the run stays as it was
        check_weights_fit(module, resume, change)  # a new shape: no flag resumes it
    if change and change.training and not allow_changes:
        raise SettingsChanged(f"run {cfg.name} ({run_dir}) was trained with other settings than these, and "
                              f"resuming would file its results under settings that did not make them: "
                              f"{change.describe()}. Give the run another folder (or move {run_dir} aside; a grid's "
                              "cell: `atnat run GRID --stale rerun` trains it anew, `--stale keep` keeps only "
                              "finished numbers), or resume one run with the new settings on purpose: atnat train "
                              "--allow-settings-change (the change is recorded in settings_changes.json with its step)")
    check_lengths_fit(module, data, cfg.train.max_len)
    t = cfg.train
    added = bool(change) and any(key == "train.init_from" for key, *_ in change.training)  # given only now
    # the last refusal (a source missing, of another tokenizer, with nothing that fits): before anything is recorded
    initialised = initialised_from(module, cfg, run_dir, resume) if t.init_from and not added else None
    if not helper_rank():
        if change and change.training:
            record_change(run_dir, change, checkpoint_step(resume))
        write_json_atomic(run_dir / "config.json", resolved(cfg))  # every setting, defaults included
        record_attempt(run_dir, resume)
        if resume is None and initialised is None:  # a fresh start from scratch: no earlier start's record
            (run_dir / INIT_RECORD).unlink(missing_ok=True)
    pin = trains_on_gpu(t.accelerator)
    train_loader = make_loader(data.encoded["train"], t.max_tokens, shuffle=True, seed=cfg.seed,
                               max_sentences=t.max_sentences, distributed=True, pin_memory=pin)
    # validation batches by the training budget, not eval.max_tokens (an evaluation setting, free to change
    # without training again): the validation loss is a mean of batch means, so it depends on the batching,
    # and it selects checkpoints and stops training early
    val_loader = make_loader(data.encoded["valid"], max(t.max_tokens, longest_pair(data.encoded["valid"])),
                             shuffle=False, pin_memory=pin)
    module.train_loss_in_progress_bar = t.progress_bar  # else no per-step read of the loss on the host
    module.step_form = t.step
    trainer = make_trainer(cfg, run_dir, train_loader.batch_sampler)
    if change and change.training:
        trainer.callbacks.append(OptimizerSettings())  # the new optim values replace the checkpoint's
    started = time.time()
    fit(trainer, module, train_loader, val_loader, resume)
    train_time = time.time() - started
    timer = next(c for c in trainer.callbacks if isinstance(c, Timer))
    best = run_dir / "checkpoints" / "best.ckpt"
    if not any(isinstance(c, ModelCheckpoint) and c.best_model_path and Path(c.best_model_path).is_file()
               for c in trainer.callbacks):
        trainer.save_checkpoint(best)  # no validation ran (tiny runs): keep what we have; collective under DDP
    leave_process_group()  # the last collective is behind: rank 0 evaluates alone
    if not trainer.is_global_zero:
        return None
    warmup = module.optim_cfg.warmup_steps if module.optim_cfg.schedule == "inverse_sqrt" else 0  # a constant lr has none
    chosen, averaged_steps, final_alone = select_weights(trainer, t, run_dir / "checkpoints", warmup)
    info = {"world_size": trainer.world_size, "accelerator": type(trainer.accelerator).__name__,
            "precision": str(trainer.precision), "precision_asked": t.precision, "global_step": trainer.global_step,
            "evaluated_checkpoint": chosen.name, "averaged_steps": averaged_steps, "train_time_s": timer.time_elapsed("train"),
            "train_time_this_attempt_s": train_time, "attempts": attempts_of(run_dir),
            "averaged_final_alone": final_alone}  # every checkpoint preceded the averaging window
    speed = run_record(next(c for c in trainer.callbacks if isinstance(c, Throughput)).record(),
                       read_json_object(run_dir / "train.json"), attempt=len(info["attempts"]), form=t.step)
    if speed is not None:
        info["throughput"] = speed
    if initialised:
        info["initialised_from"] = initialised
    write_json_atomic(run_dir / "train.json", info)
    return chosen


def fit(trainer: pl.Trainer, module, train_loader, val_loader, resume: Path | None) -> None:
    """trainer.fit, with Ctrl-C kept a KeyboardInterrupt: Lightning turns it into a silent exit 1
    (and ignores SIGINT from then on); atnat's command line reports it as 130 with the resume hint.
    SIGTERM (Lightning's SIGTERMException) likewise. Any other exit passes as it is: a cluster job's
    pre-emption handler (submitit) requeues the job, then exits from inside training, and its job
    runner must see that exit."""
    handler = signal.getsignal(signal.SIGINT)
    try:
        trainer.fit(module, train_loader, val_loader, ckpt_path=str(resume) if resume else None)
    except SystemExit as stop:
        sigterm = getattr(pl_exceptions, "SIGTERMException", ())  # what Lightning raises on SIGTERM (older releases: none)
        if not (isinstance(stop, sigterm) or isinstance(stop.__context__, KeyboardInterrupt)):
            raise  # not Lightning's own: its exit after Ctrl-C has the KeyboardInterrupt as context
        raise KeyboardInterrupt from None
    finally:
        if handler is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, handler)


def averaging_start(last_step: int, window: float, warmup: int) -> int:
    """The first step whose checkpoint may join an average: inside the last `window` of training and past
    the warm-up (a checkpoint from inside it is weights the schedule had not settled yet)."""
    return max(warmup, math.ceil(round((1 - window) * last_step, 9)))  # 300.00000000000006 is step 300


def select_weights(trainer: pl.Trainer, t, ckpt_dir: Path, warmup: int = 0) -> tuple[Path, list[int], bool]:
    """The checkpoint evaluation uses: best.ckpt, or averaged.ckpt (train.average) written here; the steps
    it averages ([] for best.ckpt); and whether they are the final weights alone. Candidates from before
    averaging_start are left out; where none is left, the final weights are evaluated alone, never a
    checkpoint from early training."""
    best = ckpt_dir / "best.ckpt"
    selector = next(c for c in trainer.callbacks if isinstance(c, ModelCheckpoint))
    if t.average == "none":
        for stale in (ckpt_dir / "averaged.ckpt", checksum_path(ckpt_dir / "averaged.ckpt")):
            stale.unlink(missing_ok=True)  # an earlier average (train.average changed): evaluation would prefer it
        if selector.best_model_path and Path(selector.best_model_path) not in (best,) \
                and Path(selector.best_model_path).is_file():  # keep > 1: copy the best
            save_checkpoint_file(read_checkpoint(Path(selector.best_model_path)), best)
        return best, [], False
    if t.average == "best":
        ranked = sorted(selector.best_k_models.items(), key=lambda kv: float(kv[1]), reverse=selector.mode == "max")
        paths = [Path(p) for p, _ in ranked]  # a moved run folder's record points here (checkpoints.py moved_here)
    else:  # the last `keep` step checkpoints on disk: a run killed between writing last.ckpt and recording its step
        # checkpoint resumes without that step in the callback's record (and a moved run without any)
        step = lambda p: int(p.stem.split("-")[-1])  # noqa: E731
        paths = sorted((p for p in ckpt_dir.glob("step-*.ckpt") if step(p) <= trainer.global_step), key=step)[-t.keep:]
    paths = [p for p in paths if p.is_file()]
    if not paths:  # no validation ran: nothing to average
        return best, [], False
    step_of = {p: checkpoint_step(p) for p in paths}
    start = averaging_start(max(trainer.global_step, max(step_of.values())), t.average_window, warmup)
    kept = [p for p in paths if step_of[p] >= start]
    out = ckpt_dir / "averaged.ckpt"
    if not kept:  # every candidate is older than the window (the metric peaked early): the final weights alone
        trainer.save_checkpoint(out)  # (last.ckpt is not they: Lightning renews it only with a new top-k one)
        return out, [trainer.global_step], True
    average_checkpoints(kept, out, {"average": t.average, "metric": t.checkpoint_metric,
                                    "checkpoints": [p.name for p in kept], "steps": sorted(step_of[p] for p in kept),
                                    "left_out_before_step": start,
                                    "left_out": sorted(step_of[p] for p in paths if p not in kept)})
    return out, sorted(step_of[p] for p in kept), False
