"""Train one run: data -> Seq2SeqModule -> Lightning Trainer, resumable from its last checkpoint."""
from __future__ import annotations

import datetime
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint

from atnat.core.errors import AtnatError
from atnat.models.seq2seq import Seq2SeqModule

from atnat.experiments.checkpoints import AtomicCheckpointIO, ResumeState, average_checkpoints, resume_point
from atnat.experiments.config import RunConfig, named
from atnat.experiments.data import EncodedSplit, encode_split, make_loader
from atnat.experiments.files import write_json_atomic
from atnat.experiments.logs import make_loggers
from atnat.experiments.progress import ProgressReporter
from atnat.experiments.divergence import DivergenceGuard
from atnat.experiments.runs import attach_tokenizer, helper_rank, load_module, load_task
from atnat.experiments.tasks import TaskData

@dataclass
class PreparedData:
    """A task's sentences, tokenizer and encoded splits."""

    task: TaskData
    encoded: dict[str, EncodedSplit]


def prepare_data(cfg: RunConfig, task: TaskData | None = None,
                 train_targets: list[str] | None = None) -> PreparedData:
    """Load and encode all splits; `train_targets` replaces the training targets (distillation)."""
    task = task or load_task(cfg)
    encoded = {}
    for split, (src, tgt) in task.splits.items():
        if split == "train" and train_targets is not None:
            if len(train_targets) != len(src):
                raise AtnatError(f"distilled targets: {len(train_targets)} lines for {len(src)} training sources")
            tgt = train_targets
        encoded[split] = encode_split(task.tokenizer, src, tgt, name=split, max_len=cfg.train.max_len,
                                      drop_long=split == "train")
    return PreparedData(task, encoded)


def build_module(cfg: RunConfig, task: TaskData) -> Seq2SeqModule:
    dec_name, dec_opts = named(cfg.decoder, "decoder")
    module = Seq2SeqModule(vocab_size=task.tokenizer.vocab_size, decoder=dec_name, model=cfg.model,
                           decoder_options=dec_opts, loss=cfg.loss, optim=cfg.optim)
    attach_tokenizer(module, task.tokenizer, task.bleu_tokenize, task.lang)
    from atnat.experiments.assemble import validation_search

    module.validation_search = validation_search(module.decoder)
    return module


def quiet_lightning() -> None:
    """Drop Lightning's tips and the data-loader worker advice that do not apply here."""
    for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*LeafSpec.*")
    warnings.filterwarnings("ignore", ".*treespec.*")
    warnings.filterwarnings("ignore", ".*smaller than the logging interval.*")


def initialise(module: Seq2SeqModule, cfg: RunConfig) -> dict:
    """Copy train.init_from's weights into `module` wherever a parameter's name and shape match (a
    NAT student of an AT teacher: encoder, embeddings, decoder layers, output projection; not the
    length predictor). A resumed run then loads its own checkpoint over this. -> what was copied."""
    source = cfg.train.init_from
    if source == "teacher":
        if cfg.distill is None:
            raise AtnatError(f"run {cfg.name}: train.init_from: teacher needs distill.teacher (a grid teacher)")
        source = cfg.distill.teacher
    other = load_module(source)[0].state_dict()
    own = module.state_dict()
    copied = {k: v for k, v in other.items() if k in own and own[k].shape == v.shape}
    if not copied:
        raise AtnatError(f"train.init_from {source}: no parameter of that model fits this one")
    module.load_state_dict(copied, strict=False)
    return {"source": str(source), "tensors": len(copied), "of": len(own),
            "not_copied": sorted(k for k in own if k not in copied)}


def selection(t) -> tuple[str, str]:
    """(monitored metric, mode) that selects checkpoints (train.checkpoint_metric)."""
    return ("val/bleu", "max") if t.checkpoint_metric == "bleu" else ("val/loss", "min")


def make_trainer(cfg: RunConfig, run_dir: Path, sampler) -> pl.Trainer:
    """The Lightning Trainer of a run: checkpoint selection and averaging, EMA, exact resume
    (`sampler`: the training loader's TokenBudgetSampler), atomic checkpoint files, logs."""
    t = cfg.train
    monitor, mode = selection(t)
    ckpt_dir = run_dir / "checkpoints"
    several = t.keep > 1 or t.average == "best"
    callbacks = [ResumeState(sampler),
                 ModelCheckpoint(dirpath=ckpt_dir, filename="top-{step}" if several else "best", monitor=monitor,
                                 mode=mode, save_last=True, save_top_k=t.keep if t.average != "last" else 1,
                                 enable_version_counter=False, auto_insert_metric_name=False)]
    if t.average == "last":  # the last `keep` validation checkpoints
        callbacks.append(ModelCheckpoint(dirpath=ckpt_dir, filename="step-{step}", monitor="step", mode="max",
                                         save_top_k=t.keep, enable_version_counter=False,
                                         auto_insert_metric_name=False))
    if t.early_stop_patience:
        callbacks.append(EarlyStopping(monitor, patience=t.early_stop_patience, mode=mode))
    if t.ema is not None:
        from pytorch_lightning.callbacks.weight_averaging import EMAWeightAveraging

        callbacks.append(EMAWeightAveraging(decay=t.ema))
    callbacks.append(DivergenceGuard(t.divergence_factor))  # a NaN/exploding loss fails the run
    callbacks.append(ProgressReporter(run_dir, t.max_steps, t.max_time_s))  # progress.json, a line per validation
    return pl.Trainer(
        max_steps=t.max_steps, max_epochs=t.max_epochs, val_check_interval=t.val_every_steps,
        max_time=None if t.max_time_s is None else datetime.timedelta(seconds=t.max_time_s),
        check_val_every_n_epoch=None, accelerator=t.accelerator, devices=t.devices, num_nodes=t.num_nodes,
        precision=t.precision,
        gradient_clip_val=cfg.optim.get("clip_norm", 1.0) or None, callbacks=callbacks,
        default_root_dir=run_dir, logger=make_loggers(t.loggers, run_dir) or False,
        plugins=[AtomicCheckpointIO()],
        enable_progress_bar=t.progress_bar, enable_model_summary=False, num_sanity_val_steps=0,
        use_distributed_sampler=False, log_every_n_steps=min(50, max(1, t.val_every_steps // 4)))


def train(cfg: RunConfig, run_dir: Path, data: PreparedData | None = None) -> Path | None:
    """Train (or resume) the run in `run_dir`; returns the checkpoint evaluation uses (see
    `evaluation_checkpoint`), or None in the non-zero ranks of a multi-device (DDP) run, whose work
    ends with training."""
    quiet_lightning()
    run_dir.mkdir(parents=True, exist_ok=True)
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    data = data or prepare_data(cfg)
    write_json_atomic(run_dir / "config.json", cfg.to_dict())
    module = build_module(cfg, data.task)
    t = cfg.train
    initialised = initialise(module, cfg) if t.init_from else None
    train_loader = make_loader(data.encoded["train"], t.max_tokens, shuffle=True, seed=cfg.seed,
                               max_sentences=t.max_sentences, distributed=True)
    val_loader = make_loader(data.encoded["valid"], cfg.eval.max_tokens, shuffle=False)
    trainer = make_trainer(cfg, run_dir, train_loader.batch_sampler)
    resume = resume_point(run_dir / "checkpoints", set_aside=not helper_rank())  # every DDP rank resumes
    trainer.fit(module, train_loader, val_loader, ckpt_path=str(resume) if resume else None)
    best = run_dir / "checkpoints" / "best.ckpt"
    if not any(isinstance(c, ModelCheckpoint) and c.best_model_path for c in trainer.callbacks):
        trainer.save_checkpoint(best)  # no validation ran (tiny runs): keep what we have; collective under DDP
    if not trainer.is_global_zero:
        return None
    chosen = select_weights(trainer, t, run_dir / "checkpoints")
    info = {"world_size": trainer.world_size, "accelerator": type(trainer.accelerator).__name__,
            "precision": str(trainer.precision), "global_step": trainer.global_step,
            "evaluated_checkpoint": chosen.name}
    if initialised:
        info["initialised_from"] = initialised
    write_json_atomic(run_dir / "train.json", info)
    return chosen


def select_weights(trainer: pl.Trainer, t, ckpt_dir: Path) -> Path:
    """The checkpoint evaluation uses: best.ckpt, or averaged.ckpt (train.average) written here."""
    best = ckpt_dir / "best.ckpt"
    selector = next(c for c in trainer.callbacks if isinstance(c, ModelCheckpoint))
    if t.average == "none":
        if selector.best_model_path and Path(selector.best_model_path) != best:  # keep > 1: copy the best
            AtomicCheckpointIO().save_checkpoint(torch.load(selector.best_model_path, map_location="cpu",
                                                            weights_only=False), best)
        return best
    if t.average == "best":
        ranked = sorted(selector.best_k_models.items(), key=lambda kv: float(kv[1]), reverse=selector.mode == "max")
        paths = [Path(p) for p, _ in ranked]
    else:
        steps = next(c for c in trainer.callbacks if isinstance(c, ModelCheckpoint) and c.monitor == "step")
        paths = sorted((Path(p) for p in steps.best_k_models), key=lambda p: int(p.stem.split("-")[-1]))
    if not paths:  # no validation ran: nothing to average
        return best
    out = ckpt_dir / "averaged.ckpt"
    average_checkpoints(paths, out, {"average": t.average, "metric": t.checkpoint_metric,
                                     "checkpoints": [p.name for p in paths]})
    return out
