"""Prepared splits: a split's token ids encoded once, kept on disk as memory-mapped arrays, mapped by every
process that needs them (cells, workers, timing, evaluate).

An entry of the cache (`$ATNAT_CACHE/prepared/<key>/`, the key a sha256 of both sides' text, the number of
pairs and the tokenizer) holds, per side, the ids of all sentences back to back (`src.ids`, uint16 where the
vocabulary allows, else uint32) and their lengths (`src.lengths`, uint32), and `meta.json` with the
sha256 of each file. It is written into a temporary folder and renamed into place (a kill leaves no
entry), and verified whenever it is opened: a damaged or partial entry is set aside and encoded again
(an I/O error of the machine is one error, the entry left as it is).

`PreparedSplit` is the view a run trains and decodes on: pairs longer than `train.max_len` dropped
(training) or cut (evaluation), batches built from the lengths arrays, and `__getitems__` padding a
whole batch from the mapped ids at once, without a Python object per sentence.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from itertools import islice
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
from filelock import FileLock, Timeout

from atnat.core.errors import AtnatError
from atnat.experiments.data.tokenize import SPECIAL
from atnat.experiments.files import atomic_write_bytes, check_no_carriage_return, check_readable, sha256, unwritable
from atnat.models.batch import Batch

FORMAT = 1
CHUNK = 50_000  # pairs encoded at a time: memory stays bounded whatever the corpus size
SIDES = ("src", "tgt")


_SAID: set[str] = set()


def cut_targets_note(name: str, long: int, total: int, max_len: int) -> str:
    return (f"split {name!r}: {long} of {total} targets longer than max_len={max_len} tokens were cut to it "
            "(train.max_len): its loss and the metrics over token ids see the cut target; BLEU and chrF score the whole "
            "reference text")


def say_once(text: str, count: int) -> None:
    """A note on stderr when `count` > 0, once per process (a split is encoded again by later phases)."""
    if count and text not in _SAID:
        _SAID.add(text)
        print(f"atnat: {text}", file=sys.stderr)


class SideText:
    """One side of a split: a UTF-8 text file (its first `limit` lines), or lines in memory."""

    def __init__(self, *, path: Path | str | None = None, lines: Sequence[str] | None = None,
                 limit: int | None = None, what: str = "text"):
        if (path is None) == (lines is None):
            raise ValueError("SideText needs a path or lines")
        self.path, self.lines, self.limit, self.what = (Path(path) if path is not None else None), lines, limit, what
        self._digest: tuple[str, int] | None = None
        self.read_digest: tuple[str, int] | None = None  # (sha256, lines) of what the last whole pass read

    def digest(self) -> tuple[str, int]:
        """(sha256 of the text used, its number of lines); a file is hashed up to its `limit`-th line."""
        if self._digest is None:
            if self.path is None:
                used = self.lines[: self.limit] if self.limit else self.lines
                h = hashlib.sha256()
                for line in used:  # line by line, each ended: no joined copy of millions of lines
                    h.update(line.encode("utf-8") + b"\n")
                self._digest = h.hexdigest(), len(used)
            else:
                self._digest = _remembered_digest(check_utf8_start(check_readable(self.path, self.what), self.what),
                                                  self.limit)
                if self._digest[1] == 0:
                    raise AtnatError(f"{self.what}: {self.path} is empty")
        return self._digest

    def __iter__(self) -> Iterator[str]:
        """The lines, as `read_lines` gives them (split on newlines, a trailing carriage return cut, a UTF-8
        byte-order mark at the start of the file dropped)."""
        if self.path is None:
            yield from (self.lines[: self.limit] if self.limit else self.lines)
            return
        read = hashlib.sha256()  # the bytes as read, to tell whether they are those digest() hashed
        self.read_digest, number = None, 0
        with open(self.path, "rb") as f:
            for number, raw in enumerate(f, 1):
                if self.limit and number > self.limit:
                    self.read_digest = read.hexdigest(), number - 1
                    return
                read.update(raw)
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    raise AtnatError(f"{self.what}: {self.path} line {number} is not valid UTF-8 ({err.reason}); "
                                     "save it as UTF-8") from None
                if number == 1:
                    line = line.removeprefix("\ufeff")
                line = line[:-1].rstrip("\r") if line.endswith("\n") else line.rstrip("\r")
                check_no_carriage_return(line, self.what, self.path, number)
                yield line
        self.read_digest = read.hexdigest(), number


def _digest_memo(path: Path, limit: int | None) -> tuple[dict, Path]:
    """The file's identity as it is now, and where the digest of that version is remembered."""
    from atnat.experiments.data.tokenize import CACHE_DIR

    stat = path.stat()
    identity = {"path": str(path.resolve()), "limit": limit, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
                "ctime_ns": stat.st_ctime_ns, "inode": stat.st_ino}  # ctime: no one sets it back (cp -p, touch -r)
    return identity, CACHE_DIR / "digests" / f"{hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:24]}.json"


def _forget_digest(path: Path, limit: int | None) -> None:
    """Drop the remembered digest of the file as it is now (it did not match what was read): the next run hashes it."""
    try:
        _digest_memo(path, limit)[1].unlink(missing_ok=True)
    except OSError:
        pass


def _remembered_digest(path: Path, limit: int | None) -> tuple[str, int]:
    """The file's digest, hashed once per version of the file: remembered in the cache under its path,
    size, modification time and inode (as make and git tell a changed file), so that a multi-GB corpus is
    not read whole by every process. What the digest keys (a prepared split) is itself verified on open."""
    identity, memo = _digest_memo(path, limit)
    try:
        known = json.loads(memo.read_text(encoding="utf-8"))
        if known["identity"] == identity and isinstance(known["lines"], int) and \
                isinstance(known["sha256"], str) and len(known["sha256"]) == 64:
            return known["sha256"], known["lines"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    digest, lines = _file_digest(path, limit)
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(memo, json.dumps({"identity": identity, "sha256": digest, "lines": lines}).encode())
    except (OSError, AtnatError):  # a read-only or full cache (atomic_write_bytes names it): hash again next time
        pass
    return digest, lines


UTF16_32_MARKS = (b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")  # byte-order marks of UTF-16 and UTF-32


def check_utf8_start(path: Path, what: str) -> Path:
    """`path`, refused where its first bytes say it is UTF-16 or UTF-32 text (a byte-order mark, NUL bytes): its
    lines are counted in bytes before they are decoded, which would blame a line-count mismatch instead."""
    with open(path, "rb") as f:
        head = f.read(4096)
    if head.startswith(UTF16_32_MARKS) or b"\x00" in head:
        sign = "a UTF-16 or UTF-32 byte-order mark" if head.startswith(UTF16_32_MARKS) else "NUL bytes"
        raise AtnatError(f"{what}: {path} is not UTF-8 text ({sign} at its start: UTF-16 or UTF-32?); save it as UTF-8")
    return path


def _file_digest(path: Path, limit: int | None) -> tuple[str, int]:
    digest, lines, last = hashlib.sha256(), 0, b"\n"
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            count = block.count(b"\n")
            if limit is not None and lines + count >= limit:
                end = -1
                for _ in range(limit - lines):
                    end = block.index(b"\n", end + 1)
                digest.update(block[: end + 1])
                return digest.hexdigest(), limit
            digest.update(block)
            lines, last = lines + count, block[-1:]
    return digest.hexdigest(), lines + (last != b"\n")  # a last line without a newline counts


def tokenizer_digest(tokenizer) -> str:
    state = tokenizer.to_state()
    body = state["model_proto"] if state["kind"] == "sentencepiece" else json.dumps(state, sort_keys=True).encode()
    return hashlib.sha256(body).hexdigest()


class Arrays:
    """A cache entry's arrays, mapped read-only: ids and lengths per side, offsets computed."""

    def __init__(self, folder: Path, meta: dict):
        self.folder, self.meta, self.n = folder, meta, int(meta["pairs"])
        dtype = np.dtype(meta["dtype"])
        for side in SIDES:
            lengths = np.fromfile(folder / f"{side}.lengths", dtype=np.uint32).astype(np.int64)
            offsets = np.zeros(self.n + 1, dtype=np.int64)
            np.cumsum(lengths, out=offsets[1:])
            ids = np.memmap(folder / f"{side}.ids", dtype=dtype, mode="r") if offsets[-1] else np.zeros(0, dtype)
            setattr(self, f"{side}_lengths", lengths)
            setattr(self, f"{side}_offsets", offsets)
            setattr(self, f"{side}_ids", ids)


def prepare(src: SideText, tgt: SideText, tokenizer, *, name: str, cache_dir: Path, threads: int = 1,
            on_chunk: Callable[[int, int], None] | None = None) -> Arrays:
    """The split's arrays from the cache, encoded into it first where absent (or damaged).
    `on_chunk(done, total)` follows the encoding."""
    (src_sha, n_src), (tgt_sha, n_tgt) = src.digest(), tgt.digest()
    if n_src != n_tgt:
        raise AtnatError(f"split {name!r}: {src.path or 'the sources'} has {n_src} lines but "
                         f"{tgt.path or 'the targets'} has {n_tgt}; parallel files need equal line counts")
    key = hashlib.sha256(json.dumps({"format": FORMAT, "src": src_sha, "tgt": tgt_sha, "pairs": n_src,
                                     "tokenizer": tokenizer_digest(tokenizer)}).encode()).hexdigest()[:24]
    root = cache_dir / "prepared"
    root.mkdir(parents=True, exist_ok=True)
    folder = root / key
    with FileLock(root / f"{key}.lock"):  # workers that start at once: one encodes, the others map it
        arrays = _open(folder, tokenizer.vocab_size, n_src)
        if arrays is None:
            _encode(folder, src, tgt, tokenizer, n_src, name=name, threads=threads, on_chunk=on_chunk)
            arrays = _open(folder, tokenizer.vocab_size, n_src, just_written=True)
            if arrays is None:
                raise AtnatError(f"split {name!r}: the prepared arrays written to {folder} do not verify")
    return arrays


def _open(folder: Path, vocab_size: int, pairs_expected: int, just_written: bool = False) -> Arrays | None:
    """The verified entry of `pairs_expected` pairs of a tokenizer of `vocab_size` ids, stored under its own key
    (the folder's name: an entry copied under another key is another split's), or None where there is none; a damaged one is set
    aside with a message (`just_written`: by the encoding that wrote it, which then fails: not encoded again). An
    id beyond the vocabulary (an entry rewritten, its sha256 too) would fail mid-training."""
    if not folder.exists():
        return None
    try:
        meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
        if not isinstance(meta, dict) or meta.get("format") != FORMAT or meta.get("dtype") not in ("uint16", "uint32"):
            raise ValueError("meta.json is not this version's")
        files = meta["files"]
        for file in (f"{side}.{part}" for side in SIDES for part in ("ids", "lengths")):
            path = folder / file
            if path.stat().st_size != int(files[file]["bytes"]):
                raise ValueError(f"{file} has {path.stat().st_size} bytes, {files[file]['bytes']} were written")
            if sha256(path) != files[file]["sha256"]:
                raise ValueError(f"{file} does not match the sha256 recorded when it was written")
        pairs = meta.get("pairs")
        if isinstance(pairs, bool) or not isinstance(pairs, int) or pairs < 0 or \
                any(int(files[f"{side}.lengths"]["bytes"]) != 4 * pairs for side in SIDES):
            raise ValueError(f"meta.json's pairs ({pairs!r}) does not match its lengths files")
        if meta.get("key", folder.name) != folder.name or pairs != pairs_expected:  # (no key: older entries)
            raise ValueError(f"meta.json describes another key's entry ({meta.get('key')!r}, {meta.get('pairs')!r} pairs; "
                             f"this key's holds {pairs_expected})")
        arrays = Arrays(folder, meta)
        itemsize = np.dtype(meta["dtype"]).itemsize
        for side in SIDES:
            if len(getattr(arrays, f"{side}_lengths")) != arrays.n or \
                    getattr(arrays, f"{side}_offsets")[-1] * itemsize != int(files[f"{side}.ids"]["bytes"]):
                raise ValueError(f"{side}: the lengths do not add up to the ids")
        recorded = meta.get("vocab_size")
        if isinstance(recorded, bool) or recorded != vocab_size:
            raise ValueError(f"meta.json's vocab_size ({recorded!r}) is not the tokenizer's ({vocab_size})")
        for side in SIDES:
            ids = getattr(arrays, f"{side}_ids")
            if len(ids) and int(ids.max()) >= vocab_size:
                raise ValueError(f"{side}.ids holds the id {int(ids.max())}, beyond the vocabulary of {vocab_size}")
        return arrays
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, ValueError, KeyError, TypeError,
            OverflowError, RecursionError) as err:  # (meta.json's "bytes": Infinity; a JSON nested too deep)
        earlier = sorted(folder.parent.glob(f"{folder.name}.damaged-*"))  # only the newest is kept: each is a split
        for old in earlier:  # of the corpus (gigabytes at WMT14's size)
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink(missing_ok=True)
        aside = folder.with_name(f"{folder.name}.damaged-{time.time_ns()}")
        os.replace(folder, aside)
        removed = f"; the one set aside before ({', '.join(p.name for p in earlier)}) removed" if earlier else ""
        then = "kept for a look (the disk may be failing)" if just_written else "encoded again"
        print(f"atnat: the prepared split {folder} is damaged ({err}); set aside as {aside.name} and {then}"
              f"{removed}", file=sys.stderr)
        return None
    except OSError as err:  # the machine's trouble, not the entry's (a failing disk, too many open files, a memory
        # limit on the maps): the entry is left as it is, not encoded again into the same trouble
        raise AtnatError(f"the prepared split {folder} cannot be read ({err}); it is left as it is: fix the cause "
                         "and run again") from None


def _remove_abandoned(root: Path, key: str) -> None:
    """Half-written entries of other keys (an encoder killed before its data, tokenizer or limit changed, so that
    its key never comes again: gigabytes at WMT14's size), each removed where its key's lock is free (no encoder
    of that key at work, here or on another machine sharing the cache)."""
    for left in root.glob("*.tmp-*"):
        other = left.name.partition(".tmp-")[0]
        if other == key or not left.is_dir() or left.is_symlink():
            continue
        lock = FileLock(root / f"{other}.lock")
        try:
            lock.acquire(timeout=0)
        except Timeout:  # being written now
            continue
        try:
            shutil.rmtree(left, ignore_errors=True)
        finally:
            lock.release()


def _encode(folder: Path, src: SideText, tgt: SideText, tokenizer, total: int, *, name: str, threads: int,
            on_chunk) -> None:
    dtype = np.dtype(np.uint16 if tokenizer.vocab_size <= 1 << 16 else np.uint32)
    for left in folder.parent.glob(f"{folder.name}.tmp-*"):  # a killed encoder's (the key's lock is held here)
        shutil.rmtree(left, ignore_errors=True)
    _remove_abandoned(folder.parent, folder.name)
    tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")

    def writing(what: Path, step: Callable):  # step's result; a failed write names the cache entry's file
        try:
            return step()
        except OSError as err:
            raise unwritable(what, err) from err

    writing(tmp, tmp.mkdir)
    outs: dict = {}
    try:
        for file in (f"{side}.{part}" for side in SIDES for part in ("ids", "lengths")):
            outs[file] = writing(tmp / file, lambda file=file: open(tmp / file, "wb"))
        done = 0
        try:
            for chunk_src, chunk_tgt in _chunks(src, tgt, name):
                for side, lines in (("src", chunk_src), ("tgt", chunk_tgt)):
                    encoded = encode_lines(tokenizer, lines, threads)
                    lengths = np.fromiter(map(len, encoded), dtype=np.uint32, count=len(encoded))
                    ids = np.fromiter((i for seq in encoded for i in seq), dtype=dtype, count=int(lengths.sum()))
                    writing(tmp / f"{side}.ids", lambda f=outs[f"{side}.ids"], b=ids.tobytes(): f.write(b))
                    writing(tmp / f"{side}.lengths", lambda f=outs[f"{side}.lengths"], b=lengths.tobytes(): f.write(b))
                done += len(chunk_src)
                if on_chunk:
                    on_chunk(done, total)
        except BaseException:
            _close_all(outs.values(), quiet=True)  # the error that stopped the encoding is the one to tell
            raise
        _close_all(outs.values())
        if done != total:
            raise AtnatError(f"split {name!r}: read {done} pairs where {total} lines were counted; a file changed "
                             "while it was read")
        for side in (src, tgt):  # the entry is stored under the digests of the text: it must hold that text's ids
            if side.path is not None and side.read_digest != side.digest():
                _forget_digest(side.path, side.limit)  # (a remembered digest of another text: rehashed next time)
                raise AtnatError(f"split {name!r}: {side.path} changed after it was first read (its sha256 now "
                                 f"differs); nothing was stored for it: run again")
        files = {file: {"bytes": (tmp / file).stat().st_size, "sha256": sha256(tmp / file)} for file in outs}
        meta = {"format": FORMAT, "pairs": done, "dtype": dtype.name, "split": name, "files": files,
                "vocab_size": tokenizer.vocab_size, "key": folder.name}
        writing(tmp / "meta.json", lambda: (tmp / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8"))
        for file in tmp.iterdir():
            writing(file, lambda file=file: _fsync(file))
        if folder.exists():  # set aside by _open, or left by a kill between rename and lock release
            shutil.rmtree(folder)
        writing(folder, lambda: os.rename(tmp, folder))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _close_all(files, quiet: bool = False) -> None:
    """Close every file, whatever another's close raises (a full disk can show at close, when the last buffer is
    written); then, unless `quiet`, the first failure as one error naming its file."""
    failed = None
    for f in files:
        try:
            f.close()
        except OSError as err:
            failed = failed or (Path(f.name), err)
    if failed and not quiet:
        raise unwritable(*failed) from failed[1]


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def encode_lines(tokenizer, lines: list[str], threads: int = 1) -> list[list[int]]:
    batch = getattr(tokenizer, "encode_batch", None)
    return batch(lines, threads) if batch else [tokenizer.encode(line) for line in lines]


def _chunks(src: SideText, tgt: SideText, name: str) -> Iterator[tuple[list[str], list[str]]]:
    a, b = iter(src), iter(tgt)
    while True:
        chunk_src = list(islice(a, CHUNK))
        chunk_tgt = list(islice(b, len(chunk_src))) if chunk_src else []
        if len(chunk_tgt) != len(chunk_src) or (not chunk_src and next(b, None) is not None):
            raise AtnatError(f"split {name!r}: the source and target sides have different numbers of lines")
        if not chunk_src:
            return
        yield chunk_src, chunk_tgt


class _Side(Sequence):
    """One side of a PreparedSplit as a sequence of id lists (what the probes and metrics read)."""

    def __init__(self, split: "PreparedSplit", side: str):
        self.split, self.side = split, side

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self.split.ids(self.side, i)


class PreparedSplit:
    """A split to train or decode on, over mapped arrays: index i is the i-th pair kept (its id in
    `Batch.ids`), pairs longer than `max_len` dropped (`drop_long`, training) or cut to it."""

    def __init__(self, arrays: Arrays, *, name: str, max_len: int | None = None, drop_long: bool = False):
        self.arrays, self.name, self.max_len = arrays, name, max_len
        src_len, tgt_len = arrays.src_lengths, arrays.tgt_lengths
        self.index = None
        if max_len is not None and drop_long:
            long = (src_len > max_len) | (tgt_len > max_len)
            empty = ~long & ((src_len == 0) | (tgt_len == 0))
            self.index = np.flatnonzero(~long & ~empty)
            say_once(f"split {name!r}: {int(long.sum())} of {arrays.n} pairs longer than max_len={max_len} tokens on "
                     "a side were left out (train.max_len)", int(long.sum()))
            say_once(f"split {name!r}: {int(empty.sum())} of {arrays.n} pairs empty on a side were left out",
                     int(empty.sum()))
        elif max_len is not None:
            long = int((src_len > max_len).sum())
            say_once(f"split {name!r}: {long} of {arrays.n} sources longer than max_len={max_len} tokens were cut to "
                     "it (train.max_len); their outputs see only the cut source", long)
            long_targets = int((tgt_len > max_len).sum())
            say_once(cut_targets_note(name, long_targets, arrays.n, max_len), long_targets)
        if len(self) == 0:
            raise AtnatError(f"split {name!r} has no usable sentence pairs: all {arrays.n} are empty on one side"
                             + (f" or longer than max_len={max_len} tokens" if max_len else ""))
        chosen = self.index if self.index is not None else slice(None)
        cut = max_len if max_len is not None else np.iinfo(np.int64).max
        self.src_lengths = np.minimum(src_len[chosen], cut)
        self.tgt_lengths = np.minimum(tgt_len[chosen], cut)
        self.src, self.tgt = _Side(self, "src"), _Side(self, "tgt")

    def __len__(self) -> int:
        return self.arrays.n if self.index is None else len(self.index)

    def _rows(self, i):
        return i if self.index is None else self.index[i]

    def ids(self, side: str, i: int) -> list[int]:
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        row = int(self._rows(i % len(self)))
        start = int(getattr(self.arrays, f"{side}_offsets")[row])
        length = int(getattr(self, f"{side}_lengths")[i])
        return getattr(self.arrays, f"{side}_ids")[start: start + length].astype(np.int64).tolist()

    def __getitem__(self, i: int) -> tuple[int, list[int], list[int]]:
        return i, self.ids("src", i), self.ids("tgt", i)

    def __getitems__(self, indices: list[int]) -> Batch:
        """A whole batch, padded from the mapped ids in a few array operations (the DataLoader calls this
        instead of one __getitem__ per sentence; `collate` passes the Batch through)."""
        chosen = np.asarray(indices, dtype=np.int64)
        rows = self._rows(chosen)
        src, src_lengths = self._pad("src", rows, self.src_lengths[chosen])
        tgt, tgt_lengths = self._pad("tgt", rows, self.tgt_lengths[chosen])
        return Batch(src, tgt, torch.from_numpy(np.maximum(src_lengths, 1)), torch.from_numpy(tgt_lengths),
                     torch.from_numpy(chosen))

    def _pad(self, side: str, rows: np.ndarray, lengths: np.ndarray) -> tuple[torch.Tensor, np.ndarray]:
        width = max(int(lengths.max()), 1)
        starts = getattr(self.arrays, f"{side}_offsets")[rows]
        columns = np.arange(width)
        inside = columns[None, :] < lengths[:, None]
        out = np.full((len(rows), width), SPECIAL.pad, dtype=np.int64)
        out[inside] = getattr(self.arrays, f"{side}_ids")[(starts[:, None] + columns[None, :])[inside]]
        return torch.from_numpy(out), lengths.astype(np.int64)


def prepared_split(task, split: str, *, max_len: int | None, drop_long: bool = False,
                   targets: Sequence[str] | None = None, threads: int = 1,
                   on_chunk: Callable[[int, int], None] | None = None) -> PreparedSplit:
    """Split `split` of a loaded task (TaskData), from the cache of prepared splits (encoded into it on first
    use); `targets` replace its targets (a teacher's distilled outputs)."""
    from atnat.experiments.data.tokenize import CACHE_DIR

    src, tgt = task.side_texts(split)
    if targets is not None:
        tgt = SideText(lines=targets, what=f"{split} distilled targets")
    arrays = prepare(src, tgt, task.tokenizer, name=split, cache_dir=CACHE_DIR, threads=threads, on_chunk=on_chunk)
    return PreparedSplit(arrays, name=split, max_len=max_len, drop_long=drop_long)
