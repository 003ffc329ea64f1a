"""Train one run: data -> Seq2SeqModule -> Lightning Trainer, resumable from its last checkpoint."""
from __future__ import annotations

import datetime
import json
import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint

from atnat.models.errors import AtnatError
from atnat.models.seq2seq import Seq2SeqModule

from atnat.experiments.config import RunConfig, make, named
from atnat.experiments.data import EncodedSplit, encode_split, make_loader
from atnat.experiments.tasks import TASKS, TaskData

CACHE_DIR = Path(os.environ.get("ATNAT_CACHE", Path.home() / ".cache" / "atnat"))


@dataclass
class PreparedData:
    """A task's sentences, tokenizer and encoded splits."""

    task: TaskData
    encoded: dict[str, EncodedSplit]


def load_task(cfg: RunConfig) -> TaskData:
    name, opts = named(cfg.task, "task")
    task_cls = TASKS.get(name)
    return task_cls(make(task_cls.Options, opts, f"task ({name})"), cache_dir=CACHE_DIR / "spm").load()


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
    attach_tokenizer(module, task.tokenizer, task.bleu_tokenize)
    return module


def attach_tokenizer(module: Seq2SeqModule, tokenizer, bleu_tokenize: str) -> None:
    module.tokenizer_state = tokenizer.to_state()
    module.detokenize = tokenizer.decode
    module.bleu_tokenize = bleu_tokenize


def quiet_lightning() -> None:
    """Drop Lightning's tips and the data-loader worker advice that do not apply here."""
    for name in ("pytorch_lightning", "lightning.pytorch", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*LeafSpec.*")
    warnings.filterwarnings("ignore", ".*treespec.*")
    warnings.filterwarnings("ignore", ".*smaller than the logging interval.*")


def make_trainer(cfg: RunConfig, run_dir: Path) -> pl.Trainer:
    t = cfg.train
    callbacks = [ModelCheckpoint(dirpath=run_dir / "checkpoints", filename="best", monitor="val/loss",
                                 mode="min", save_last=True, save_top_k=1, enable_version_counter=False)]
    if t.early_stop_patience:
        callbacks.append(EarlyStopping("val/loss", patience=t.early_stop_patience, mode="min"))
    return pl.Trainer(
        max_steps=t.max_steps, max_epochs=t.max_epochs, val_check_interval=t.val_every_steps,
        max_time=None if t.max_time_s is None else datetime.timedelta(seconds=t.max_time_s),
        check_val_every_n_epoch=None, accelerator=t.accelerator, devices=t.devices, num_nodes=t.num_nodes,
        precision=t.precision,
        gradient_clip_val=cfg.optim.get("clip_norm", 1.0) or None, callbacks=callbacks,
        default_root_dir=run_dir, logger=pl.loggers.CSVLogger(run_dir, name="logs", version=""),
        enable_progress_bar=t.progress_bar, enable_model_summary=False, num_sanity_val_steps=0,
        use_distributed_sampler=False, log_every_n_steps=min(50, max(1, t.val_every_steps // 4)))


def train(cfg: RunConfig, run_dir: Path, data: PreparedData | None = None) -> Path | None:
    """Train (or resume) the run in `run_dir`; returns the best checkpoint's path, or None in the
    non-zero ranks of a multi-device (DDP) run, whose work ends with training."""
    quiet_lightning()
    run_dir.mkdir(parents=True, exist_ok=True)
    if cfg.train.num_threads:
        torch.set_num_threads(cfg.train.num_threads)
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    data = data or prepare_data(cfg)
    (run_dir / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2, default=str))
    module = build_module(cfg, data.task)
    t = cfg.train
    train_loader = make_loader(data.encoded["train"], t.max_tokens, shuffle=True, seed=cfg.seed,
                               max_sentences=t.max_sentences, distributed=True)
    val_loader = make_loader(data.encoded["valid"], cfg.eval.max_tokens, shuffle=False)
    last = run_dir / "checkpoints" / "last.ckpt"
    trainer = make_trainer(cfg, run_dir)
    trainer.fit(module, train_loader, val_loader, ckpt_path=str(last) if last.exists() else None)
    best = run_dir / "checkpoints" / "best.ckpt"
    if not best.exists():  # no validation ran (tiny runs): keep what we have
        trainer.save_checkpoint(best)  # collective under DDP: every rank calls it, rank 0 writes
    if not trainer.is_global_zero:
        return None
    info = {"world_size": trainer.world_size, "accelerator": type(trainer.accelerator).__name__,
            "precision": str(trainer.precision), "global_step": trainer.global_step}
    (run_dir / "train.json").write_text(json.dumps(info, indent=2))
    return best


def inference_device(accelerator: str = "auto") -> str:
    """Where a run decodes (evaluation, distillation, translation): the GPU when its accelerator
    allows one and one is visible, else the CPU."""
    if accelerator == "cpu" or not torch.cuda.is_available():
        return "cpu"
    return "cuda"


def helper_rank() -> bool:
    """True in the extra processes of a multi-device (DDP) run: those Lightning starts (LOCAL_RANK > 0)
    and the tasks past the first of a multi-task SLURM job (SLURM_PROCID > 0)."""
    return any(int(os.environ.get(k, "0") or 0) > 0 for k in ("LOCAL_RANK", "NODE_RANK", "SLURM_PROCID"))


def load_module(checkpoint: str | Path, map_location: str = "cpu") -> tuple[Seq2SeqModule, object]:
    """A trained module in eval mode and its tokenizer, from a checkpoint or a run directory."""
    from atnat.experiments.tokenize import tokenizer_from_state

    path = Path(checkpoint)
    if path.is_dir():
        path = path / "checkpoints" / "best.ckpt"
    if not path.is_file():
        raise AtnatError(f"checkpoint {path} does not exist")
    module = Seq2SeqModule.load_from_checkpoint(path, map_location=map_location, weights_only=False)
    module.eval()
    if module.tokenizer_state is None:
        raise AtnatError(f"checkpoint {path} carries no tokenizer (not written by atnat train?)")
    tokenizer = tokenizer_from_state(module.tokenizer_state)
    module.detokenize = tokenizer.decode
    return module, tokenizer
