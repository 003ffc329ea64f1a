"""Run plumbing shared by training, evaluation, distillation, timing and the CLI: where a run's
task, tokenizer and weights come from, which checkpoint a run is judged by, and where it decodes."""
from __future__ import annotations

import os
from pathlib import Path

import torch

from atnat.core.errors import AtnatError
from atnat.models.seq2seq import Seq2SeqModule

from atnat.experiments.config import RunConfig, make, named
from atnat.experiments.tasks import TASKS, TaskData

CACHE_DIR = Path(os.environ.get("ATNAT_CACHE", Path.home() / ".cache" / "atnat"))  # sentencepiece models


def load_task(cfg: RunConfig) -> TaskData:
    name, opts = named(cfg.task, "task")
    task_cls = TASKS.get(name)
    return task_cls(make(task_cls.Options, opts, f"task ({name})"), cache_dir=CACHE_DIR / "spm").load()


def attach_tokenizer(module: Seq2SeqModule, tokenizer, bleu_tokenize: str, lang: str = "en") -> None:
    module.tokenizer_state = tokenizer.to_state()
    module.detokenize = tokenizer.decode
    module.bleu_tokenize = bleu_tokenize
    module.target_lang = lang


def evaluation_checkpoint(run_dir: Path) -> Path:
    """The weights a finished run is evaluated (and used as a teacher) with."""
    averaged = run_dir / "checkpoints" / "averaged.ckpt"
    return averaged if averaged.is_file() else run_dir / "checkpoints" / "best.ckpt"


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
    """A trained module in eval mode and its tokenizer, from an export directory (`atnat export`),
    a run directory (its checkpoints/best.ckpt) or a checkpoint file. Nothing is unpickled beyond
    tensors and plain containers (see experiments/export.py)."""
    from atnat.experiments.export import is_export_dir, load_export, module_from_checkpoint
    from atnat.experiments.tokenize import tokenizer_from_state

    path = Path(checkpoint)
    if is_export_dir(path):
        module = load_export(path, map_location)
    else:
        if path.is_dir():
            path = evaluation_checkpoint(path)
        if not path.is_file():
            raise AtnatError(f"checkpoint {path} does not exist")
        module = module_from_checkpoint(path, map_location)
    module.eval()
    if module.tokenizer_state is None:
        raise AtnatError(f"checkpoint {path} carries no tokenizer (not written by atnat train?)")
    tokenizer = tokenizer_from_state(module.tokenizer_state)
    module.detokenize = tokenizer.decode
    return module, tokenizer
