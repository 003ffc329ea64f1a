"""Checkpoint files that survive a kill and cannot be planted: atomic writes, checksums, tensors-only
loading, averaging (resuming from them: experiments/training/resume.py).

- `save_checkpoint_file` writes every checkpoint to a temporary file in its own folder, fsyncs it and
  renames it into place, then writes its sha256 beside it (`<name>.sha256`, sha256sum's format), so
  a kill or a full disk leaves the previous file whole. Lightning writes and reads its checkpoints
  through it (training/resume.py AtomicCheckpointIO).
- `read_checkpoint` is the one way a checkpoint is read (resume, averaging, evaluation, translate,
  distill, export): the sha256 is checked first (a mismatch or a damaged file is `CheckpointDamaged`),
  then `torch.load(weights_only=True)`: nothing but tensors and plain containers is unpickled, a file
  holding anything else is `CheckpointRefused` and nothing in it runs.
- `average_checkpoints` averages the weights of several checkpoints (Vaswani et al. 2017 average the
  last 5 or 20; NAT toolkits the best 5 by validation BLEU).
"""
from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import torch

from atnat.core.errors import AtnatError
from atnat.experiments.files import atomic_write, atomic_write_bytes, sha256

CHECKSUM_SUFFIX = ".sha256"


class CheckpointDamaged(AtnatError):
    """A checkpoint that is truncated, corrupt, or does not match its recorded sha256."""


class CheckpointUnverified(CheckpointDamaged):
    """A checkpoint with no sha256 recorded beside it: damage to it could not be detected (resume sets it aside:
    a kill between the checkpoint's rename and its record leaves one)."""


class CheckpointRefused(AtnatError):
    """A checkpoint holding pickled objects beyond tensors and plain containers: never loaded."""


def checksum_path(path: Path) -> Path:
    return Path(path).with_name(Path(path).name + CHECKSUM_SUFFIX)


def write_checksum(path: Path) -> None:
    """Record `path`'s sha256 beside it (atomically), in the format `sha256sum -c` reads."""
    path = Path(path)
    atomic_write_bytes(checksum_path(path), f"{sha256(path)}  {path.name}\n".encode())


def verify_checksum(path: Path) -> bool:
    """True when `path` matches its recorded sha256; False when none is recorded (read_checkpoint then refuses
    it). CheckpointDamaged on a mismatch."""
    path = Path(path)
    recorded = checksum_path(path)
    if not recorded.is_file():
        return False
    try:
        expected = recorded.read_text(encoding="ascii").split()[0]
    except (OSError, UnicodeDecodeError, IndexError) as err:
        raise CheckpointDamaged(f"checkpoint {path}: its checksum file {recorded.name} is unreadable ({err})") from err
    try:
        actual = sha256(path)
    except OSError as err:
        raise CheckpointDamaged(f"checkpoint {path} cannot be read ({err.strerror or err})") from err
    if actual != expected:
        raise CheckpointDamaged(f"checkpoint {path} does not match the sha256 recorded in {recorded.name} when it "
                                "was written: damaged or altered since")
    return True


def unpickling_problem(path: Path, message: str) -> CheckpointDamaged | CheckpointRefused:
    """torch's tensors-only unpickler's refusal, in atnat's words: the object or opcode it refused, without
    torch's advice to load the file with weights_only=False (which would run what it holds)."""
    text = " ".join(message.split())
    found = re.search(r"(?:Unsupported global: GLOBAL|unsupported GLOBAL) ([\w.]+)", text)
    if found:
        return CheckpointRefused(f"checkpoint {path} holds a pickled object ({found.group(1)}) that tensors-only "
                                 "loading refuses; nothing in it was run. atnat writes no such object: was the file "
                                 "written by another program, or planted?")
    opcode = re.search(r"Unsupported operand (\d+)", text)
    if opcode:
        return CheckpointRefused(f"checkpoint {path} holds a pickle opcode ({opcode.group(1)}) that tensors-only loading "
                                 "refuses; nothing in it was run. atnat writes no such file: is it damaged, written by "
                                 "another program, or planted?")
    detail = text.split("WeightsUnpickler error:")[-1].split("Check the documentation")[0].strip()
    if "weights_only" in detail:  # none of torch's own detail left without its advice
        detail = "the tensors-only unpickler could not read it"
    return CheckpointDamaged(f"checkpoint {path} is truncated or corrupt: not a readable PyTorch checkpoint "
                             f"({detail[:200]})")


def read_checkpoint(path: Path, map_location: Any = "cpu") -> dict:
    """A checkpoint's contents after its sha256 is checked, loaded tensors-only (weights_only=True).

    CheckpointDamaged: truncated, corrupt or not matching its checksum; CheckpointUnverified: no checksum is
    recorded beside it (atnat writes one with every checkpoint); CheckpointRefused: it holds pickled objects
    beyond tensors and plain containers (nothing in it was run). A file that is no checkpoint at all, or is
    damaged beyond loading, is named as such before a missing checksum is."""
    path = Path(path)
    verified = verify_checksum(path)
    with open(path, "rb") as f:
        head = f.read(4)
    if not (head.startswith(b"PK\x03\x04") or head[:1] == b"\x80"):  # a zip archive, or a bare pickle
        kind = "text" if head and all(32 <= b < 127 or b in (9, 10, 13) for b in head) else "binary data"
        what = (f"it begins with {kind} ({head!r}; a results table, a checksum or another file given by mistake?)"
                if head else "it is empty (0 bytes: a write cut short, or a file made by hand?)")
        raise CheckpointDamaged(f"checkpoint {path} is not a PyTorch checkpoint: {what}")
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        raise unpickling_problem(path, str(err)) from err
    except Exception as err:  # noqa: BLE001 - any failure to read the file is the file's problem
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise CheckpointDamaged(f"checkpoint {path} is truncated or corrupt: not a readable PyTorch checkpoint "
                                f"({type(err).__name__}: {first})") from err
    if not isinstance(checkpoint, dict):
        raise CheckpointDamaged(f"checkpoint {path} holds a {type(checkpoint).__name__}, not a checkpoint mapping")
    if not verified:
        record = checksum_path(path).name
        raise CheckpointUnverified(
            f"checkpoint {path} has no {record} beside it, so damage to it cannot be detected, and it is not used "
            f"(atnat records one with every checkpoint it writes). A checkpoint from another program or an older "
            f"atnat: if you trust the file as it is, record its sha256 (in its folder: sha256sum {path.name} > "
            f"{record}) and give it again")
    return checkpoint


def save_checkpoint_file(checkpoint: dict, path: Path) -> None:
    """torch.save atomically, then the sha256 beside it (a kill in between leaves a checkpoint whose
    checksum is stale: resume sets it aside and falls back to the one before; a failed save leaves
    the previous file and its checksum whole)."""
    path = Path(path)
    atomic_write(path, lambda f: torch.save(checkpoint, f))
    write_checksum(path)


def moved_here(checkpoint: dict, folder: Path) -> dict:
    """A checkpoint read from `folder`, its checkpoint callbacks' record of files (the best k, the last) pointed
    at `folder` where it names another one: a run folder moved (or copied) between two attempts. Lightning
    drops such a record with a warning, and the resumed run then averaged or kept only the checkpoints it
    wrote itself."""
    for state in (checkpoint.get("callbacks") or {}).values():
        old = state.get("dirpath") if isinstance(state, dict) else None
        if not isinstance(old, str) or not old or Path(old) == folder:
            continue
        here = lambda name: str(folder / Path(name).name) if isinstance(name, str) and name and \
            Path(name).parent == Path(old) else name  # noqa: E731
        state["dirpath"] = str(folder)
        for key in ("best_model_path", "kth_best_model_path", "last_model_path"):
            if key in state:
                state[key] = here(state[key])
        if isinstance(state.get("best_k_models"), dict):
            state["best_k_models"] = {here(name): score for name, score in state["best_k_models"].items()}
    return checkpoint


def checkpoint_step(path: Path) -> int:
    """The global step stored in a training checkpoint (read checked and tensors-only: CheckpointDamaged
    or CheckpointRefused when it cannot be trusted, or holds no weights)."""
    checkpoint = read_checkpoint(path)
    step = checkpoint.get("global_step", 0)
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise CheckpointDamaged(f"checkpoint {path}: global_step is {step!r}, not a step number")
    if not isinstance(checkpoint.get("state_dict"), dict):
        raise CheckpointDamaged(f"checkpoint {path}: it holds no state_dict (no weights): not a training checkpoint")
    return step


def average_state_dicts(states: list[dict[str, torch.Tensor]], names: list[str] | None = None) -> dict[str, torch.Tensor]:
    """Element-wise mean of floating-point tensors (accumulated in float64, so averaging N copies of
    one model gives it back exactly); other tensors are taken from the last state. Every state must hold
    the same tensors, of the same shapes and dtypes (`names`: the checkpoints', for the error)."""
    if not states:
        raise AtnatError("checkpoint averaging needs at least one checkpoint")
    names = names or [f"checkpoint {i}" for i in range(len(states))]
    keys = list(states[-1])
    for name, s in zip(names, states):
        if list(s) != keys:
            raise AtnatError(f"checkpoint averaging: {name} has different parameters than the others")
        for key in keys:
            mine, last = s[key], states[-1][key]
            if not isinstance(mine, torch.Tensor) or mine.shape != last.shape or mine.dtype != last.dtype:
                what = f"{tuple(mine.shape)} {mine.dtype}" if isinstance(mine, torch.Tensor) else type(mine).__name__
                raise AtnatError(f"checkpoint averaging: {name}: {key} is {what}, {names[-1]} holds "
                                 f"{tuple(last.shape)} {last.dtype}: not checkpoints of one model")
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
    ckpts = [read_checkpoint(p) for p in paths]
    for path, ckpt in zip(paths, ckpts):
        if not isinstance(ckpt.get("state_dict"), dict):
            raise CheckpointDamaged(f"checkpoint {path}: it holds no state_dict (no weights) to average")
    merged = dict(ckpts[-1])
    merged["state_dict"] = average_state_dicts([c["state_dict"] for c in ckpts], [f"checkpoint {p}" for p in paths])
    merged["atnat_selection"] = note
    save_checkpoint_file(merged, out)
