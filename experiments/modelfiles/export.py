"""Model files for users: `atnat export` and loading that never unpickles arbitrary objects.

An export directory holds
- `model.safetensors`: the module's state dict (tied embeddings stored once: safetensors refuses
  shared tensors, so its `save_model` / `load_model` helpers drop and restore the duplicates),
- `config.json`: everything that rebuilds `Seq2SeqModule` (its saved hyper-parameters), the BLEU
  tokenize setting, the format version and the sha256 of every other file,
- the tokenizer as a file: `sentencepiece.model` or `symbols.json` (synthetic tasks).
A CTranslate2 export (ct2.py) holds CTranslate2's files, the tokenizer file and `atnat-export.json`, which
says atnat wrote the folder: only a folder an export wrote is ever replaced by the next.
Checkpoints load with `torch.load(weights_only=True)`: what atnat writes into them (tensors,
plain containers, the tokenizer's bytes, Lightning's callback and loop states) passes; a file with
other pickled objects is refused. A truncated or altered file is one AtnatError naming it.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import torch

from atnat.core.errors import AtnatError
from atnat.experiments.files import FILE_MODE, atomic_write_bytes, path_part, sha256
from atnat.experiments.modelfiles.checkpoints import read_checkpoint

if TYPE_CHECKING:
    from atnat.models.seq2seq import Seq2SeqModule

FORMAT = "atnat-export"
FORMAT_VERSION = 4  # 2: the weights' metadata records the sha256 of the hyper-parameters; 3: of all config.json
READABLE_VERSIONS = (1, 2, 3, 4)  # says of the model (RECORDED: hyper-parameters, BLEU tokenizer, plugins, tokenizer
RECORDED = ("hyper_parameters", "bleu_tokenize", "plugins", "tokenizer", "target_lang")  # file; 4: target language)
RECORDED_BY = {3: RECORDED[:4], 4: RECORDED}  # what each version's record_sha256 covers
TARGET_LANG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,31}")  # the task's target suffix (de, pt-BR, target, de.tok)
WEIGHTS = "model.safetensors"
CONFIG = "config.json"
CT2_MARKER = "model.bin"  # the file a CTranslate2 model folder is known by (ct2.py writes it)
CT2_STAMP = "atnat-export.json"  # beside it in a CTranslate2 export: atnat wrote the folder
CT2_FORMAT = "atnat-ctranslate2-export"
TOKENIZER_FILES = {"sentencepiece": "sentencepiece.model", "symbols": "symbols.json"}


def is_export_dir(path: Path) -> bool:
    return path.is_dir() and (path / CONFIG).is_file() and (path / WEIGHTS).is_file()


def is_ct2_export_dir(path: Path) -> bool:
    """A CTranslate2 export atnat wrote (its stamp beside model.bin)."""
    return path.is_dir() and (path / CT2_MARKER).is_file() and _stamped(path)


def stamp_ct2_export(stage: Path) -> None:
    """Mark a CTranslate2 export folder as atnat's (ct2.py, before the folder is put in place)."""
    (stage / CT2_STAMP).write_text(json.dumps({"format": CT2_FORMAT, "format_version": 1}) + "\n", encoding="utf-8")


def _stamped(path: Path) -> bool:
    try:
        stamp = json.loads((path / CT2_STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(stamp, dict) and stamp.get("format") == CT2_FORMAT


def _export_file(name: str, marker: str) -> bool:
    """Whether an export with this `marker` (ours: config.json; CTranslate2's: model.bin) writes a file of
    this name, or its temporary file."""
    name = name.removesuffix(".tmp")
    ours = {WEIGHTS, CONFIG, *TOKENIZER_FILES.values()}
    ct2 = marker != CONFIG and (name in (marker, CONFIG, CT2_STAMP) or re.fullmatch(r"\w*vocabulary\w*\.(json|txt)", name))
    return name in ours or bool(ct2) or (name.startswith(".") and name.endswith(".tmp"))


def _export_leftovers(out: Path, marker: str = CONFIG) -> bool:
    """Whether every entry of `out` is a file an export writes (or its temporary file) and the folder is one
    an export wrote: an export, or one an older atnat left half-written when it was killed (temporary files
    only). A user's own config.json or vocabulary.txt, under an export's names, is not one."""
    entries = list(out.iterdir())
    if not all(p.is_file() and not p.is_symlink() and _export_file(p.name, marker) for p in entries):
        return False
    whole = [p for p in entries if not p.name.endswith(".tmp")]
    return not whole or _written_by_an_export(out, marker)


def _written_by_an_export(out: Path, marker: str) -> bool:
    if marker != CONFIG:  # a CTranslate2 model is atnat's only with its stamp (another tool's looks the same)
        return _stamped(out)
    try:
        config = json.loads((out / CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("format") == FORMAT


def check_target(out: Path, marker: str = CONFIG) -> None:
    """An export may go to `out`: a new or empty directory, or one holding only an export's files, of either
    format (then replaced whole). Anything else in it - a run folder, a project with its own config.json -
    is refused: replacing it would delete it."""
    if out.exists() and not out.is_dir():
        raise AtnatError(f"export target {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not any(_export_leftovers(out, m) for m in (marker, CONFIG, CT2_MARKER)):
        others = sorted(p.name for p in out.iterdir() if not (p.is_file() and _export_file(p.name, marker)))
        what = ", ".join(others[:4]) + (", ..." if len(others) > 4 else "") if others else \
            f"{', '.join(sorted(p.name for p in out.iterdir()))}, not written by an atnat export" + \
            (f": no {CT2_STAMP}" if (out / CT2_MARKER).is_file() else "")  # names of an export's, written by another
        raise AtnatError(f"export target {out} holds other things than an export ({what}), which replacing it "
                         "would delete; give a new or empty directory")


def _remove(path: Path) -> None:
    """A leftover sibling of an export target, gone: a folder with what it holds, a link or file itself."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


@contextmanager
def staged(out: Path, marker: str = CONFIG) -> Iterator[Path]:
    """Write an export into a fresh hidden sibling of `out`, then put it in place of `out` in two renames,
    under a lock beside `out` (a second export to the same target is refused while this one runs; its file
    goes with it). A killed export leaves hidden siblings, which the next export to the target removes."""
    from atnat.experiments.locks import held  # lazy: start-up

    out = Path(out).resolve()  # `..` and a link: the folder they name (its name, its parent)
    here = Path.cwd().resolve()
    if out == here or out in here.parents:
        raise AtnatError(f"export target {out} is the current folder{'' if out == here else ' or holds it'}: an export "
                         "replaces its target folder whole; give a folder outside it (e.g. ./model)")
    out.parent.mkdir(parents=True, exist_ok=True)
    with held(out.parent / f".{out.name}.export.lock", f"export target {out}", remove=True):
        prefix = f".{out.name}.staged-"  # compared as text: a name's * or ? must not reach other targets' folders
        for stale in sorted(p for p in out.parent.iterdir() if p.name.startswith(prefix)):  # a killed export's
            if stale.name.endswith("-old") and not out.exists() and stale.is_dir() and not stale.is_symlink():
                os.replace(stale, out)  # killed between its two renames: the previous export, put back
            else:
                _remove(stale)
        check_target(out, marker)
        stage = out.parent / f"{prefix}{os.getpid()}"
        stage.mkdir()
        try:
            yield stage
            old = out.parent / f"{prefix}{os.getpid()}-old"
            if out.exists():
                os.replace(out, old)
            try:
                os.replace(stage, out)
            except BaseException:
                if old.exists() and not out.exists():
                    os.replace(old, out)  # the previous export stays in place
                raise
            _remove(old)
        finally:
            shutil.rmtree(stage, ignore_errors=True)


def tokenizer_file(state: dict) -> tuple[str, bytes]:
    """The tokenizer state of a module -> (file name, file bytes)."""
    kind = state.get("kind")
    if kind == "sentencepiece":
        return TOKENIZER_FILES[kind], state["model_proto"]
    if kind == "symbols":
        return TOKENIZER_FILES[kind], json.dumps(state["symbols"], ensure_ascii=False, indent=0).encode()
    raise AtnatError(f"cannot export a tokenizer of kind {kind!r}; known: {', '.join(TOKENIZER_FILES)}")


def canonical_header(path: Path) -> None:
    """Rewrite a safetensors file's JSON header with its keys sorted (same length, space-padded, as the
    format allows): safetensors writes its metadata in hash-map order, so two exports of one model would
    otherwise differ in bytes."""
    with open(path, "r+b") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
        text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
        if len(text) > size:  # cannot happen for the same content; keep the file as written if it did
            return
        f.seek(8)
        f.write(text + b" " * (size - len(text)))


def hyper_parameters_sha256(hyper_parameters: dict) -> str:
    """sha256 of the hyper-parameters' canonical JSON: what a format-2 weights file records of its config."""
    return hashlib.sha256(json.dumps(hyper_parameters, sort_keys=True).encode()).hexdigest()


def record_sha256(config: dict) -> str:
    """sha256 of the canonical JSON of what config.json says of the model (RECORDED, as its format version has
    it): what the weights file records of its config (format 3 on), so that neither can change without the
    other noticing."""
    keys = RECORDED_BY.get(config.get("format_version"), RECORDED)
    return hashlib.sha256(json.dumps({k: config.get(k) for k in keys}, sort_keys=True).encode()).hexdigest()


def export_safetensors(module: Seq2SeqModule, out: str | Path) -> Path:
    """Write model.safetensors, the tokenizer file and config.json into a staged copy of `out` and put
    it in place whole (`staged`); config.json names the other files' sha256, and the weights' metadata the
    sha256 of what config.json says of the model (`record_sha256`), so neither file can be changed without the
    other noticing. -> out."""
    from safetensors.torch import save_model

    out = Path(out)
    if module.tokenizer_state is None:
        raise AtnatError("the module carries no tokenizer: export needs one (a module from atnat train)")
    hyper = _plain(dict(module.hparams))
    checked_target_lang(module.target_lang, Path(out) / CONFIG)  # never an export that no reader would load
    refuse_export_inside_export(out)
    with staged(out) as stage:
        name, data = tokenizer_file(module.tokenizer_state)
        atomic_write_bytes(stage / name, data)
        config = {"format": FORMAT, "format_version": FORMAT_VERSION, "hyper_parameters": hyper,
                  "bleu_tokenize": module.bleu_tokenize, "plugins": list(getattr(module, "plugins", [])),
                  "target_lang": module.target_lang,
                  "tokenizer": {"kind": module.tokenizer_state["kind"], "file": name, "sha256": sha256(stage / name)}}
        save_model(module, str(stage / WEIGHTS), metadata={
            "format": FORMAT, "format_version": str(FORMAT_VERSION), "record_sha256": record_sha256(config)})
        canonical_header(stage / WEIGHTS)
        os.chmod(stage / WEIGHTS, FILE_MODE)  # safetensors writes 0600; an export is for sharing
        config["weights"] = {"file": WEIGHTS, "sha256": sha256(stage / WEIGHTS)}
        atomic_write_bytes(stage / CONFIG, (json.dumps(config, indent=2, sort_keys=True) + "\n").encode())
    return out


def refuse_export_inside_export(out: Path) -> None:
    """An export written inside another (`atnat export RUN EXPORT/inner`) would be a file the outer one does not
    hold (refused when it is loaded), and the outer could no longer be replaced."""
    named, written = Path(os.path.abspath(out)), Path(out).resolve()  # the folder a link leads to is written
    for parent in dict.fromkeys([*named.parents, *written.parents]):
        if is_export_dir(parent) or is_ct2_export_dir(parent):
            raise AtnatError(f"{out} is inside the export {parent}: give a folder outside it")


def refuse_planted_files(directory: Path, config: dict) -> None:
    """Every entry of an export folder is one of the files its config.json names (nothing planted beside them)."""
    names = [CONFIG, str(config["weights"]["file"]), str(config["tokenizer"]["file"])]
    others = sorted(p.name for p in directory.iterdir() if p.name not in names)
    if others:
        raise AtnatError(f"{directory}: {others[0]} is not a file of an atnat export ({', '.join(names)}): planted? "
                         f"Move it out of the folder" + (f" ({len(others) - 1} more: {', '.join(others[1:4])})"
                                                         if len(others) > 1 else ""))


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
    if config.get("format_version") not in READABLE_VERSIONS:
        raise AtnatError(f"{path}: export format version {config.get('format_version')!r}; "
                         f"this atnat reads versions {', '.join(map(str, READABLE_VERSIONS))}")
    return config


def _checked_file(directory: Path, entry: dict, what: str) -> Path:
    """The file an export config names, after checking its recorded sha256."""
    path = directory / path_part(entry["file"], f"{directory / CONFIG}: the {what} file")  # inside the export
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

    from atnat.models.seq2seq import Seq2SeqModule  # lazy: start-up (Lightning)

    directory = Path(directory)
    config = read_config(directory)
    try:
        weights = _checked_file(directory, config["weights"], "weights")
        tok_path, tok_kind = _checked_file(directory, config["tokenizer"], "tokenizer"), str(config["tokenizer"]["kind"])
        refuse_planted_files(directory, config)  # (after the names are known to be files inside it)
        missing_plugins(str(config["hyper_parameters"]["decoder"]), config.get("plugins"), str(directory / CONFIG))
        bleu_tokenize = checked_bleu_tokenize(config.get("bleu_tokenize", "13a"), directory / CONFIG)
        target_lang = checked_target_lang(config.get("target_lang", "en"), directory / CONFIG)  # (before format 4: en)
        check_against_weights(config, weights, directory / CONFIG)  # before any tensor is allocated
        module = Seq2SeqModule(**config["hyper_parameters"])
    except (KeyError, TypeError) as err:
        raise AtnatError(f"{directory / CONFIG}: incomplete or invalid export config ({err!r})") from err
    try:
        load_model(module, str(weights), strict=True)
    except (SafetensorError, RuntimeError, OSError, ValueError) as err:
        raise AtnatError(f"{weights}: cannot load the weights ({err})") from err
    module.tokenizer_state = tokenizer_state_from_file(tok_path, tok_kind)
    module.bleu_tokenize = bleu_tokenize
    module.target_lang = target_lang
    module.plugins = [str(p) for p in config.get("plugins") or []]
    return module.to(map_location)


def checked_target_lang(value, where: Path) -> str:
    if not isinstance(value, str) or not TARGET_LANG.fullmatch(value):
        raise AtnatError(f"{where}: target_lang {value!r} is not a target language's name (up to 32 letters, "
                         "digits, '.', '_' or '-', e.g. de, pt-BR)")
    return value


def checked_bleu_tokenize(value, where: Path) -> str:
    """A model file's BLEU tokenizer, refused unless sacrebleu has it: scoring a whole test set would end
    in sacrebleu's KeyError, after every sentence was decoded."""
    from sacrebleu.metrics import BLEU

    names = sorted(BLEU.TOKENIZERS, key=lambda name: (name != "13a", name))
    if not isinstance(value, str) or value not in names:
        raise AtnatError(f"{where}: bleu_tokenize {value!r} is none of sacrebleu's tokenizers ({', '.join(names)}): "
                         "not a file atnat wrote, or edited since")
    return value


def missing_plugins(decoder: str, recorded, where: str) -> None:
    """A model file whose decoder is not registered here: one error naming the plugin modules it was trained
    with (recorded in the file), to load with --plugins. The file only names them: nothing is imported."""
    from atnat.models.decoders.base import DECODERS

    if decoder in DECODERS.names():
        return
    recorded = [str(p) for p in recorded or []]
    hint = (f"it was trained with the plugin module(s) {', '.join(recorded)}: load them with --plugins "
            f"{','.join(recorded)}" if recorded else "install the plugin package that defines it")
    raise AtnatError(f"{where}: decoder {decoder!r} is not registered here; {hint}")


def check_against_weights(config: dict, weights: Path, where: Path) -> None:
    """The export's hyper-parameters against its weights, with nothing allocated: the declared ranges
    (the model's config refuses a size out of range), the weights' record of the hyper-parameters
    (format 2), and every tensor's shape in the safetensors header against the model those
    hyper-parameters describe, built on the meta device."""
    from safetensors import SafetensorError, safe_open

    from atnat.models.seq2seq import Seq2SeqModule  # lazy: start-up (Lightning)

    hyper = config["hyper_parameters"]
    try:
        with safe_open(str(weights), "pt") as f:
            metadata = f.metadata() or {}
            shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
            dtypes = {k: str(f.get_slice(k).get_dtype()) for k in f.keys()}
    except (SafetensorError, OSError, ValueError) as err:
        raise AtnatError(f"{weights}: not a readable safetensors file ({err})") from err
    try:
        with torch.device("meta"):  # sizes out of range are refused here, before any memory is taken
            module = Seq2SeqModule(**hyper)
    except AtnatError as err:  # a value the model refuses (d_model: -4, vocab_size: 1e9): the config is to blame
        raise AtnatError(f"{where}: hyper_parameters: {err}") from err
    except (AssertionError, ValueError, TypeError, IndexError) as err:  # one torch refuses (special.pad: 500)
        raise AtnatError(f"{where}: hyper_parameters describe no model that can be built ({type(err).__name__}: "
                         f"{err}): modified after export?") from err
    version = config.get("format_version", 1)
    if str(version) != metadata.get("format_version", str(version)):  # a config set back to an older format
        raise AtnatError(f"{where} says format version {version}, its weights ({weights.name}) were written as "
                         f"version {metadata['format_version']}: modified after export?")
    if version == 2 and metadata.get("hyper_parameters_sha256") != hyper_parameters_sha256(hyper):
        raise AtnatError(f"{where}: its hyper_parameters are not those the weights ({weights.name}) were exported "
                         "with: modified after export?")
    if version >= 3 and metadata.get("record_sha256") != record_sha256(config):
        raise AtnatError(f"{where}: what it says of the model ({', '.join(RECORDED)}) is not what the weights "
                         f"({weights.name}) were exported with: modified after export?")
    expected = module.state_dict(keep_vars=True)
    for name, shape in shapes.items():
        if name not in expected or tuple(expected[name].shape) != shape:
            want = tuple(expected[name].shape) if name in expected else "no such tensor"
            raise AtnatError(f"{where}: hyper_parameters describe another model than the weights: {name} is {shape} "
                             f"in {weights.name}, {want} in the model they describe")
        if (dtypes[name] in FLOAT_DTYPES) != expected[name].is_floating_point():  # loading would cast it silently
            raise AtnatError(f"{weights}: {name} is stored as {dtypes[name]}, the model holds it as "
                             f"{expected[name].dtype}: not this model's weights")
    groups: dict[int, list[str]] = {}
    for name, tensor in expected.items():
        groups.setdefault(id(tensor), []).append(name)
    missing = [names[0] for names in groups.values() if not any(n in shapes for n in names)]
    if missing:
        raise AtnatError(f"{where}: the weights in {weights.name} lack {', '.join(missing[:3])} of the model the "
                         "hyper_parameters describe")


FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")  # safetensors' names of the floating dtypes


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
    if not isinstance(checkpoint.get("state_dict"), dict) or not isinstance(checkpoint.get("hyper_parameters"), dict):
        raise AtnatError(f"checkpoint {path} has no state_dict and hyper_parameters: not written by atnat train")
    return checkpoint


def state_dict_problem(expected: dict, given: dict) -> str | None:
    """What keeps the weights `given` from loading into a model whose own are `expected`, each tensor
    named (at most three of a kind): missing, of no such parameter, or of another shape; None when they fit."""
    def named(names: list[str]) -> str:
        return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")

    missing = [k for k in expected if k not in given]
    unknown = [k for k in given if k not in expected]
    reshaped = [f"{k} is {tuple(v.shape)}, the model's {tuple(expected[k].shape)}" for k, v in given.items()
                if k in expected and hasattr(v, "shape") and tuple(v.shape) != tuple(expected[k].shape)]
    parts = [f"missing {named(missing)}" if missing else "", f"no such parameter: {named(unknown)}" if unknown else "",
             named(reshaped) if reshaped else ""]
    return "; ".join(p for p in parts if p) or None


def module_from_checkpoint(path: Path, map_location: str = "cpu") -> Seq2SeqModule:
    """The module of a Lightning checkpoint written by atnat train, loaded with weights_only."""
    from atnat.models.seq2seq import Seq2SeqModule  # lazy: start-up (Lightning)
    checkpoint = read_run_checkpoint(path, map_location)
    missing_plugins(str(checkpoint["hyper_parameters"].get("decoder")), checkpoint.get("atnat_plugins"),
                    f"checkpoint {path}")
    try:
        module = Seq2SeqModule(**checkpoint["hyper_parameters"])
        try:  # first: a layer may map an older checkpoint's names onto its own while loading
            module.load_state_dict(checkpoint["state_dict"], strict=True)
        except RuntimeError as err:  # torch's message names no tensor on its first line: ours does
            raise RuntimeError(state_dict_problem(module.state_dict(), checkpoint["state_dict"]) or str(err)) from err
    except AtnatError as err:
        raise AtnatError(f"checkpoint {path}: hyper_parameters: {err}") from err
    except (TypeError, RuntimeError, KeyError) as err:
        raise AtnatError(f"checkpoint {path}: its weights do not fit the model its hyper-parameters "
                         f"describe ({str(err).strip().splitlines()[0]})") from err
    module.on_load_checkpoint(checkpoint)
    checked_bleu_tokenize(module.bleu_tokenize, path)
    return module.to(map_location)
