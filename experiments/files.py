"""Files that outlive a process: every file the runner writes goes through a temporary file in
the same folder, fsynced and renamed into place, so a kill or a full disk never leaves half a file.
A file that cannot be written (disk full, read-only folder, a path that is a file) is one AtnatError
naming the path; what was there before stays whole."""
from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import stat
from pathlib import Path
from typing import BinaryIO, Callable

import pandas as pd

from atnat.core.errors import AtnatError

_UMASK = os.umask(0)
os.umask(_UMASK)
FILE_MODE = 0o666 & ~_UMASK  # what open() gives a new file: mkstemp-style writers (safetensors) give 0600


def path_part(name, key: str) -> str:
    """`name` (a grid, cell, axis label, run or strategy label) as one component of a path under a folder
    the user chose: refused, with one AtnatError naming `key`, when it is empty, `.` or `..`, or holds a
    path separator or a control character (an absolute path holds a separator). The one door by which
    names become paths, so that no name writes outside its folder."""
    text = str(name)
    bad = ("empty" if not text.strip() else "'.' or '..'" if text in (".", "..")
           else "a path separator" if "/" in text or "\\" in text or os.sep in text
           else "a control character" if any(ord(c) < 32 or ord(c) == 127 for c in text) else "")
    if bad:
        raise AtnatError(f"{key}: {text!r} cannot name a folder or file: it is {bad}" if bad.startswith(("empty", "'"))
                         else f"{key}: {text!r} cannot name a folder or file: it holds {bad} (a name stays inside "
                              "its results folder: letters, digits, '-', '_', '.', '=')")
    return text


class UnwritableError(AtnatError):
    """A file could not be written: the message names the path and the reason."""


def unwritable(path: Path, err: OSError) -> UnwritableError:
    """One message for a failed write, naming the path and what to do about the usual causes."""
    hint = {errno.ENOSPC: "the disk is full: free space and run the same command again (finished work is kept)",
            errno.EDQUOT: "the disk quota is exceeded: free space and run the same command again",
            errno.EROFS: "the file system is read-only: give another results folder",
            errno.EACCES: "permission denied: give a folder you can write to",
            errno.EPERM: "permission denied: give a folder you can write to",
            errno.ENOTDIR: "a part of the path is a file, not a folder",
            errno.EEXIST: "a part of the path is a file, not a folder",
            errno.EISDIR: "the path is a folder"}.get(err.errno, err.strerror or str(err))
    return UnwritableError(f"cannot write {path}: {hint}")


def atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Call `write(f)` on a temporary file in `path`'s folder, fsync, rename it to `path` (mode
    FILE_MODE). On any failure the temporary file is removed and `path` is left as it was."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except OSError as err:
        raise unwritable(path, err) from err
    finally:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically (see `atomic_write`)."""
    atomic_write(path, lambda f: f.write(data))


def write_text_atomic(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def _json_value(value):
    """What json cannot write itself: a numpy scalar as its number (not the string "4"), else its text."""
    item = getattr(value, "item", None)
    return item() if callable(item) and getattr(value, "shape", None) == () else str(value)


def write_json_atomic(path: Path, data) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, default=_json_value))


def write_strict_json_atomic(path: Path, data) -> None:
    """JSON for other programs to read (`atnat evaluate --json`): a value without a number (NaN, infinity) is
    null, not the bare NaN that Python writes and strict JSON readers refuse."""
    def finite(value):
        if isinstance(value, dict):
            return {k: finite(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [finite(v) for v in value]
        if getattr(value, "shape", None) == () and callable(getattr(value, "item", None)):
            value = value.item()  # a numpy scalar
        return None if isinstance(value, float) and not math.isfinite(value) else value
    write_text_atomic(path, json.dumps(finite(data), indent=2, default=_json_value, allow_nan=False))


def write_lines_atomic(path: Path, lines: list[str]) -> None:
    """One line per item, each ending in a newline."""
    write_text_atomic(path, "".join(line + "\n" for line in lines))


def write_csv(df: pd.DataFrame, path: Path) -> None:
    write_text_atomic(path, df.to_csv(index=False))


def check_readable(path: Path, what: str) -> Path:
    """`path` names a regular file this process can read; else one AtnatError saying what it is instead."""
    path = Path(path)
    if not path.exists():
        problem = "does not exist"
    elif path.is_dir():
        problem = "is a folder, not a file"
    elif not path.is_file():
        kind = "a FIFO" if stat.S_ISFIFO(path.stat().st_mode) else "a device or socket"
        problem = f"is {kind}, not a regular file"
    elif not os.access(path, os.R_OK):
        problem = "cannot be read (permission denied)"
    else:
        return path
    raise AtnatError(f"{what}: {path} {problem}")


def check_output_file(path: Path, what: str) -> Path:
    """`path` can take a new file (or replace one): not a folder, under a folder this process may write to
    (the missing folders between are made when the file is written), no file on the way; else one
    AtnatError naming `what` - checked before the work whose result it is to hold."""
    path = Path(path)
    folder = path.parent
    while not folder.exists() and folder != folder.parent:  # missing folders are made by the writer
        folder = folder.parent
    if path.is_dir():
        problem = "is a folder; give a file path"
    elif not folder.is_dir():
        problem = f"is in {folder}, which is a file"
    elif not os.access(folder, os.W_OK | os.X_OK):
        problem = f"cannot be written: {folder} is not writable (permission denied)"
    else:
        return path
    raise AtnatError(f"{what} {path} {problem}")


def read_utf8(path: Path, what: str) -> str:
    """A text file's contents; one AtnatError naming `what`, the file and the line of the first byte
    that is not UTF-8."""
    raw = Path(path).read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise AtnatError(f"{what}{path} line {line} is not valid UTF-8 ({err.reason} at byte {err.start}); "
                         "save it as UTF-8") from None


def written_lines(path: Path) -> list[str]:
    """The lines of a text file atnat wrote ("\n".join(lines) + "\n": hypotheses, references, distilled targets),
    exactly: split at "\n" only (Path.read_text would also split a line at a "\r" it holds, as universal newlines
    do, so that hypotheses and references no longer pair up)."""
    return path.read_bytes().decode("utf-8").split("\n")[:-1]


def read_json_object(path: Path, max_bytes: int = 64 << 20) -> dict | None:
    """A JSON object read back from a file written earlier (untrusted: it may be missing, a link, huge,
    garbled or another kind of value): the dict, or None."""
    path = Path(path)
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > max_bytes:
            return None
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def sha256(path: Path) -> str:
    """The sha256 of a file's bytes, in hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_no_carriage_return(line: str, what: str, path: Path, number: int) -> None:
    """One error for a carriage return inside a line (its line end cut): a file with old Mac line ends (\r
    alone) would otherwise be read as one sentence."""
    if "\r" in line:
        raise AtnatError(f"{what}: {path} line {number} holds a carriage return inside it (a file with old Mac line "
                         "ends, \\r alone?); save it with \\n (or \\r\\n) line ends")
