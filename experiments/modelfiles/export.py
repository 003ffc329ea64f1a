"""Model files for users: `atnat export` and loading that never unpickles arbitrary objects.

An export directory holds
- `model.safetensors`: the module's state dict (tied embeddings stored once: safetensors refuses
  shared tensors, so its `save_model` / `load_model` helpers drop and restore the duplicates),
- `config.json`: everything that rebuilds `Seq2SeqModule` (its saved hyper-parameters), the BLEU
  tokenize setting, the format version and the sha256 of every other file,
- the tokenizer as a file: `sentencepiece.model` or `symbols.json` (synthetic tasks).
Checkpoints load with `torch.load(weights_only=True)`: what atnat writes into them (tensors,
plain containers, the tokenizer's bytes, Lightning's callback and loop states) passes; a file with
other pickled objects is refused. A truncated or altered file is one AtnatError naming it.
"""
from __future__ import annotations

import json
import os
from pathlib import Path


from atnat.core.errors import AtnatError
from atnat.models.seq2seq import Seq2SeqModule
from atnat.experiments.modelfiles.checkpoints import read_checkpoint
from atnat.experiments.files import FILE_MODE, atomic_write_bytes, sha256

FORMAT = "atnat-export"
FORMAT_VERSION = 1
WEIGHTS = "model.safetensors"
CONFIG = "config.json"
TOKENIZER_FILES = {"sentencepiece": "sentencepiece.model", "symbols": "symbols.json"}


def is_export_dir(path: Path) -> bool:
    return path.is_dir() and (path / CONFIG).is_file() and (path / WEIGHTS).is_file()


def prepare_dir(out: Path, marker: str) -> None:
    """Create `out`, or reuse it when empty or already holding an export (`marker` file present)."""
    if out.exists() and not out.is_dir():
        raise AtnatError(f"export target {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not (out / marker).is_file():
        raise AtnatError(f"export target {out} is a non-empty directory that holds no atnat export; "
                         "give a new or empty directory")
    out.mkdir(parents=True, exist_ok=True)


def tokenizer_file(state: dict) -> tuple[str, bytes]:
    """The tokenizer state of a module -> (file name, file bytes)."""
    kind = state.get("kind")
    if kind == "sentencepiece":
        return TOKENIZER_FILES[kind], state["model_proto"]
    if kind == "symbols":
        return TOKENIZER_FILES[kind], json.dumps(state["symbols"], ensure_ascii=False, indent=0).encode()
    raise AtnatError(f"cannot export a tokenizer of kind {kind!r}; known: {', '.join(TOKENIZER_FILES)}")


def export_safetensors(module: Seq2SeqModule, out: str | Path) -> Path:
    """Write model.safetensors, the tokenizer file and config.json (last: it names the others'
    sha256, so a directory with a config.json is complete) into `out`; -> out."""
    from safetensors.torch import save_model

    out = Path(out)
    if module.tokenizer_state is None:
        raise AtnatError("the module carries no tokenizer: export needs one (a module from atnat train)")
    prepare_dir(out, CONFIG)
    (out / CONFIG).unlink(missing_ok=True)  # an interrupted re-export leaves no stale config
    tmp = out / (WEIGHTS + ".tmp")
    save_model(module, str(tmp), metadata={"format": FORMAT, "format_version": str(FORMAT_VERSION)})
    os.chmod(tmp, FILE_MODE)  # safetensors writes 0600; an export is for sharing
    os.replace(tmp, out / WEIGHTS)
    name, data = tokenizer_file(module.tokenizer_state)
    for other in set(TOKENIZER_FILES.values()) - {name}:
        (out / other).unlink(missing_ok=True)
    atomic_write_bytes(out / name, data)
    config = {"format": FORMAT, "format_version": FORMAT_VERSION,
              "hyper_parameters": _plain(dict(module.hparams)), "bleu_tokenize": module.bleu_tokenize,
              "tokenizer": {"kind": module.tokenizer_state["kind"], "file": name, "sha256": sha256(out / name)},
              "weights": {"file": WEIGHTS, "sha256": sha256(out / WEIGHTS)}}
    atomic_write_bytes(out / CONFIG, (json.dumps(config, indent=2) + "\n").encode())
    return out


def _plain(value):
    """Hyper-parameters as JSON values (tuples -> lists); anything else is a bug to report."""
    try:
        return json.loads(json.dumps(value))
    except TypeError as err:
        raise AtnatError(f"hyper-parameters are not JSON-serialisable, cannot export: {err}") from err


def read_config(directory: Path) -> dict:
    path = directory / CONFIG
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise AtnatError(f"{path}: not a readable atnat export config ({err})") from err
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise AtnatError(f"{path}: not an atnat export config (format is not {FORMAT!r})")
    if config.get("format_version") != FORMAT_VERSION:
        raise AtnatError(f"{path}: export format version {config.get('format_version')!r}; "
                         f"this atnat reads version {FORMAT_VERSION}")
    return config


def _checked_file(directory: Path, entry: dict, what: str) -> Path:
    """The file an export config names, after checking its recorded sha256."""
    path = directory / entry["file"]
    if not path.is_file():
        raise AtnatError(f"{path} is missing ({what} of the export in {directory})")
    if sha256(path) != entry["sha256"]:
        raise AtnatError(f"{path}: {entry['file']} does not match the sha256 recorded in {CONFIG}: "
                         "modified after export?")
    return path


def load_export(directory: str | Path, map_location: str = "cpu") -> Seq2SeqModule:
    """Rebuild the module of an export directory (weights and tokenizer checked against the
    sha256 in config.json); the tokenizer state is attached as after training."""
    from safetensors import SafetensorError
    from safetensors.torch import load_model

    directory = Path(directory)
    config = read_config(directory)
    try:
        weights = _checked_file(directory, config["weights"], "weights")
        tok_path = _checked_file(directory, config["tokenizer"], "tokenizer")
        module = Seq2SeqModule(**config["hyper_parameters"])
    except (KeyError, TypeError) as err:
        raise AtnatError(f"{directory / CONFIG}: incomplete or invalid export config ({err!r})") from err
    except AtnatError as err:  # a value the model refuses (d_model: -4): the config file is to blame
        raise AtnatError(f"{directory / CONFIG}: hyper_parameters: {err}") from err
    try:
        load_model(module, str(weights), strict=True)
    except (SafetensorError, RuntimeError, OSError, ValueError) as err:
        raise AtnatError(f"{weights}: cannot load the weights ({err})") from err
    module.tokenizer_state = tokenizer_state_from_file(tok_path, config["tokenizer"]["kind"])
    module.bleu_tokenize = config.get("bleu_tokenize", "13a")
    return module.to(map_location)


def tokenizer_state_from_file(path: Path, kind: str) -> dict:
    data = path.read_bytes()
    if kind == "sentencepiece":
        return {"kind": kind, "model_proto": data}
    if kind == "symbols":
        try:
            symbols = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise AtnatError(f"{path}: not a JSON list of symbols ({err})") from err
        if not isinstance(symbols, list) or not all(isinstance(s, str) for s in symbols):
            raise AtnatError(f"{path}: expected a JSON list of symbol strings")
        return {"kind": kind, "symbols": symbols}
    raise AtnatError(f"{path}: unknown tokenizer kind {kind!r}; known: {', '.join(TOKENIZER_FILES)}")


def read_run_checkpoint(path: Path, map_location: str = "cpu") -> dict:
    """A checkpoint written by atnat train, read checked and tensors-only (modelfiles/checkpoints.py);
    one that lacks the model's weights or hyper-parameters is one AtnatError naming it."""
    checkpoint = read_checkpoint(path, map_location)
    if "state_dict" not in checkpoint or "hyper_parameters" not in checkpoint:
        raise AtnatError(f"checkpoint {path} has no state_dict and hyper_parameters: not written by atnat train")
    return checkpoint


def module_from_checkpoint(path: Path, map_location: str = "cpu") -> Seq2SeqModule:
    """The module of a Lightning checkpoint written by atnat train, loaded with weights_only."""
    checkpoint = read_run_checkpoint(path, map_location)
    try:
        module = Seq2SeqModule(**checkpoint["hyper_parameters"])
        module.load_state_dict(checkpoint["state_dict"], strict=True)
    except AtnatError as err:
        raise AtnatError(f"checkpoint {path}: hyper_parameters: {err}") from err
    except (TypeError, RuntimeError, KeyError) as err:
        raise AtnatError(f"checkpoint {path}: its weights do not fit the model its hyper-parameters "
                         f"describe ({str(err).strip().splitlines()[0]})") from err
    module.on_load_checkpoint(checkpoint)
    return module.to(map_location)
