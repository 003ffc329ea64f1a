"""Locks that keep two runners out of one results folder, and two processes out of one cell.

The lock is filelock's OS lock (flock on Linux and macOS), which the kernel drops when its process
dies, so the lock of a killed runner never blocks the next one. Beside each lock a small JSON file
names its holder (pid, host, start time, command), so that a refusal can say who holds it. A lock in a
user's own folder (beside an export) is removed with its release, holder file and all.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from filelock import FileLock, Timeout

try:
    import fcntl
except ImportError:  # not on Windows: there a removable lock is filelock's, kept on disk
    fcntl = None

from atnat.core.errors import AtnatError
from atnat.experiments.files import write_json_atomic

FOLDER_LOCK = "runner.lock"  # in results/<grid>/: held by `atnat run` from start to report
CELL_LOCK = "cell.lock"  # in results/<grid>/runs/<cell>/: held by whoever trains the cell


class LockHeld(AtnatError):
    """Another live process holds a results folder or a cell."""


def holder_file(lock_path: Path) -> Path:
    return lock_path.with_name(lock_path.name + ".json")


def identity() -> dict:
    """Who this process is, for the holder file."""
    return {"pid": os.getpid(), "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv)}


def read_holder(lock_path: Path) -> dict | None:
    try:
        return json.loads(holder_file(lock_path).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def describe_holder(lock_path: Path) -> str:
    who = read_holder(lock_path)
    if not who:
        return "another process (it has not written its name yet)"
    return f"pid {who.get('pid')} on {who.get('host')} since {who.get('started')} ({who.get('command')})"


@contextmanager
def held(lock_path: Path, what: str, *, remove: bool = False) -> Iterator[None]:
    """Hold `lock_path` for the block, or raise LockHeld at once naming `what` and its holder. `remove`: the
    lock file goes with the lock, for a lock in a user's folder (beside an export), which keeps nothing of it."""
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    release = _take_removable(lock_path) if remove and fcntl is not None else _take(lock_path)
    if release is None:
        raise LockHeld(f"{what} is in use by {describe_holder(lock_path)}; wait for it to end or stop it "
                       f"(lock file {lock_path})")
    try:
        write_json_atomic(holder_file(lock_path), identity())
        yield
    finally:
        holder_file(lock_path).unlink(missing_ok=True)
        release()


def _take(lock_path: Path) -> Callable[[], None] | None:
    lock = FileLock(str(lock_path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return None
    return lock.release


def _take_removable(lock_path: Path) -> Callable[[], None] | None:
    """flock on the file at lock_path, removed again on release (before the unlock). A file its holder
    removed between our open and our lock is no lock any more: the file now at the path is taken instead."""
    for _ in range(100):
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            now = os.stat(lock_path)
            mine = os.fstat(fd)
            same = (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino)
        except FileNotFoundError:
            same = False
        if same:
            def release(fd: int = fd) -> None:
                try:
                    lock_path.unlink(missing_ok=True)
                finally:
                    os.close(fd)  # closing the file drops its flock
            return release
        os.close(fd)
    return None


def folder_lock(out: Path) -> Path:
    return out / FOLDER_LOCK


def cell_lock(run_dir: Path) -> Path:
    return run_dir / CELL_LOCK


def holder_alive(lock_path: Path) -> bool:
    """Whether the lock's holder file names a live process (one on another host counts as live).
    Reads only, so that a look (`atnat status`) never makes a starting worker find the lock taken."""
    who = read_holder(lock_path)
    if not who:
        return False
    if who.get("host") != socket.gethostname():
        return True
    pid = int(who.get("pid") or 0)
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def is_held(lock_path: Path) -> bool:
    """True while some process (this one included) holds the lock; probes by taking it for an instant."""
    if not lock_path.exists():
        return False
    lock = FileLock(str(lock_path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return True
    lock.release()
    return False
