"""Loading a trained model: from a run folder, a checkpoint file or an export directory, with its
tokenizer; which checkpoint a finished run is judged by; what identifies a model's weights."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from atnat.core.errors import AtnatError
from atnat.experiments.data.tokenize import tokenizer_from_state
from atnat.experiments.files import check_readable
from atnat.experiments.modelfiles.checkpoints import checksum_path, verify_checksum
from atnat.experiments.modelfiles.export import CT2_MARKER, is_export_dir, load_export, module_from_checkpoint, read_config

if TYPE_CHECKING:
    from atnat.models.seq2seq import Seq2SeqModule


def attach_tokenizer(module: Seq2SeqModule, tokenizer, bleu_tokenize: str, lang: str = "en") -> None:
    module.tokenizer_state = tokenizer.to_state()
    module.detokenize = tokenizer.decode
    module.bleu_tokenize = bleu_tokenize
    module.target_lang = lang


def evaluation_checkpoint(run_dir: Path) -> Path:
    """The weights a finished run is evaluated (and used as a teacher) with."""
    averaged = run_dir / "checkpoints" / "averaged.ckpt"
    return averaged if averaged.is_file() else run_dir / "checkpoints" / "best.ckpt"


def load_module(checkpoint: str | Path, map_location: str = "cpu") -> tuple[Seq2SeqModule, object]:
    """A trained module in eval mode and its tokenizer, from an export directory (`atnat export`),
    a run directory (its checkpoints/best.ckpt) or a checkpoint file. Nothing is unpickled beyond
    tensors and plain containers (see modelfiles/checkpoints.py)."""
    path = Path(checkpoint)
    if is_export_dir(path):
        module = load_export(path, map_location)
    else:
        if path.is_dir():
            if (path / CT2_MARKER).is_file() and not (path / "checkpoints").is_dir():
                raise AtnatError(f"{path} is a CTranslate2 model folder (model.bin): atnat reads its own run folders, "
                                 "checkpoints and exports (`atnat export RUN DIR`, safetensors); give one of those "
                                 "(a CTranslate2 folder is run by CTranslate2's Translator)")
            path = evaluation_checkpoint(path)
        check_readable(path, "checkpoint")
        module = module_from_checkpoint(path, map_location)
    module.eval()
    if module.tokenizer_state is None:
        raise AtnatError(f"checkpoint {path} carries no tokenizer (not written by atnat train?)")
    try:
        tokenizer = tokenizer_from_state(module.tokenizer_state)
    except (TypeError, KeyError, ValueError, RuntimeError) as err:  # a state not written by atnat (sentencepiece: RuntimeError)
        raise AtnatError(f"{path}: its tokenizer cannot be read ({type(err).__name__}: {err})") from None
    if tokenizer.vocab_size != module.hparams.get("vocab_size", tokenizer.vocab_size):
        raise AtnatError(f"{path}: its tokenizer has {tokenizer.vocab_size} symbols, its model "
                         f"{module.hparams['vocab_size']}: not the tokenizer of these weights")
    module.detokenize = tokenizer.decode
    return module, tokenizer


def checkpoint_stamp(teacher: str | Path) -> str:
    """Identifies a model's weights: the sha256 recorded beside its evaluated checkpoint (or an export
    directory's); size and mtime for a checkpoint written before checksums."""
    path = Path(teacher)
    if is_export_dir(path):
        weights = read_config(path).get("weights")
        if not isinstance(weights, dict) or not isinstance(weights.get("sha256"), str):
            raise AtnatError(f"{path / 'config.json'}: its weights entry records no sha256: not an atnat export config")
        return "sha256-" + weights["sha256"]
    path = evaluation_checkpoint(path) if path.is_dir() else path
    if checksum_path(path).is_file():
        verify_checksum(path)  # CheckpointDamaged: a record that is not one, or weights changed since it was written
    return _recorded_or_size_and_time(path)


def recorded_stamp(run_dir: Path) -> str:
    """checkpoint_stamp of a run folder without reading its weights: the sha256 recorded beside its evaluated
    checkpoint as written (checkpoint_stamp verifies it), else size and mtime; "" without weights. For a
    quick look (atnat status)."""
    return _recorded_or_size_and_time(evaluation_checkpoint(run_dir))


def _recorded_or_size_and_time(path: Path) -> str:
    """"sha256-..." as recorded beside the checkpoint `path` (as written: unverified), else its size and mtime."""
    record = checksum_path(path)
    try:
        if path.is_file() and record.is_file() and not record.is_symlink():
            return "sha256-" + record.read_text(encoding="ascii").split()[0]
    except (OSError, UnicodeDecodeError, IndexError):
        pass
    return _size_and_time(path)


def checkpoint_stamps(teacher: str | Path) -> set[str]:
    """Every stamp that names these weights: checkpoint_stamp's, and the size-and-mtime stamp that
    versions before checksummed stamps recorded for the same file (a distillation cache of theirs
    stays valid while the file is untouched)."""
    path = Path(teacher)
    stamps = {checkpoint_stamp(path)}
    if not is_export_dir(path):
        stamps.add(_size_and_time(evaluation_checkpoint(path) if path.is_dir() else path))
    return stamps - {""}


def _size_and_time(path: Path) -> str:
    st = path.stat() if path.exists() else None
    return f"{st.st_size}-{st.st_mtime_ns}" if st else ""
