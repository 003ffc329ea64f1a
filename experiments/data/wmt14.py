"""`atnat data wmt14-en-de DIR`: WMT14 English-German as most NMT and NAT papers train on it: the 4.5 M
training pairs of the Stanford NLP group's release (Luong et al. 2015: Europarl v7, Common Crawl and News
Commentary, Moses-tokenised), newstest2013 for validation and newstest2014 for testing.

Files: `DIR/{train,newstest2013,newstest2014}.{en,de}`, as the release names them. Each is streamed into
`NAME.part` and renamed into place once whole, so a stopped download resumes where it stopped (an HTTP
range request, made only to the address the part came from and, where the server named the file's version,
only while it is still that version: `NAME.part.json`; otherwise the file is fetched again from the start). A
file that fails the sums it is checked against is never put in place: it is set aside as `NAME.bad`.
atnat does not pin the release's
sha256 (it has not fetched it from a machine with network): the first whole download of each file is
recorded in `DIR/SHA256SUMS`, every later run checks the files against it, and `--sha256 FILE` checks
them against sums you trust instead. A second download into the same folder waits for the first
(`DIR/.download.lock`). No distilled release is fetched: NAT papers' distilled WMT14 sets
have no stable public address with published checksums; distil with the grid's teacher instead.
"""
from __future__ import annotations

import http.client
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

from filelock import FileLock, Timeout

from atnat.core.errors import AtnatError
from atnat.experiments.files import read_json_object, sha256, write_json_atomic, write_text_atomic

BASE_URL = "https://nlp.stanford.edu/projects/nmt/data/wmt14.en-de"
URL_ENV = "ATNAT_WMT14_URL"  # another address of the same files (a mirror, a local copy)
FILES = tuple(f"{split}.{lang}" for split in ("train", "newstest2013", "newstest2014") for lang in ("en", "de"))
SUMS = "SHA256SUMS"
LOCK = ".download.lock"  # held while a download writes into the folder
BLOCK = 1 << 20


def read_sums(path: Path) -> dict[str, str]:
    """`sha256  name` lines (sha256sum's format) -> {file name: sha256}, each name without its folder (the
    sums of `sha256sum wmt/*` name wmt/train.en); one error naming a bad line."""
    sums = {}
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise AtnatError(f"{path}: not a text file of sums (byte {err.start} is no UTF-8)") from None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or len(parts[0]) != 64 or any(c not in "0123456789abcdef" for c in parts[0]):
            raise AtnatError(f"{path} line {number}: expected '<sha256>  <file name>', got {line!r}")
        sums[Path(parts[1].lstrip("*")).name] = parts[0]
    return sums


def _content_range(header: str | None) -> tuple[int | None, int | None]:
    """`bytes 100-999/1000` -> (100, 1000); `bytes */1000` -> (None, 1000); the total None where it is `*`
    or the header is missing or malformed."""
    _, _, spec = (header or "").partition(" ")
    span, _, total = spec.partition("/")
    start = span.split("-")[0]
    return (int(start) if start.isdigit() else None), (int(total) if total.isdigit() else None)


def _part_origin(part: Path) -> Path:
    """Where a part file's address and version are kept (NAME.part.json): a part is resumed only from them."""
    return part.with_name(part.name + ".json")


def _stream(url: str, part: Path, timeout: float, again: bool = True, probe: bool = False) -> int | None:
    """Append the rest of `url` to `part` (a range request from its size; from the start where the
    server ignores ranges, or where the file changed since the part began: If-Range with the version the
    server named then); ValueError where the part does not end up as long as the server said the file is
    (a connection closed early: the part is kept, a later run resumes it). -> the file's size where the
    server said it, else None. With `probe` (after a download of unsaid size) only a server that answers
    the range request can go on; ValueError where it ignores it (it cannot tell a whole file from a cut one).
    A part begun from another address, or of no recorded address (NAME.part.json), is not known to be this
    file's beginning: it starts over."""
    origin = read_json_object(_part_origin(part)) or {}
    if part.exists() and origin.get("url") != url:  # from elsewhere, or of unknown origin: not resumed
        part.unlink()
    have = part.stat().st_size if part.exists() else 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    if have and origin.get("version"):
        headers["If-Range"] = origin["version"]  # the server sends the whole file where it is another version now
    request = urllib.request.Request(url, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=timeout)  # noqa: S310  (http(s) of a release)
    except urllib.error.HTTPError as err:
        if err.code == 416 and have:  # the range starts at or past the end
            if _content_range(err.headers.get("Content-Range"))[1] == have:
                return have  # the part is whole
            if again and not probe:  # longer than the file, or of unknown length: not this file's beginning; start over
                part.unlink()
                return _stream(url, part, timeout, again=False)
        raise
    with response:
        if have and response.status == 206:
            start, total = _content_range(response.headers.get("Content-Range"))
            if start != have:
                raise ValueError(f"asked for the bytes from {have:,}, the server sent a range starting at {start}")
            mode = "ab"
        elif probe:
            raise ValueError("the server gave no length and ignores range requests, so a download cut short cannot be "
                             "told from a whole one, nor resumed; give the release's sums (--sha256) or another address")
        else:
            length = response.headers.get("Content-Length")
            total, mode = (int(length) if length and length.isdigit() else None), "wb"
            etag = response.headers.get("ETag")  # a weak one may not be sent in If-Range (RFC 9110)
            version = (etag if etag and not etag.startswith("W/") else None) or response.headers.get("Last-Modified")
            write_json_atomic(_part_origin(part), {"url": url, **({"version": version} if version else {})})
        with open(part, mode) as f:
            for block in iter(lambda: response.read(BLOCK), b""):
                f.write(block)
            f.flush()
            os.fsync(f.fileno())  # on disk before it is renamed into place: a crash never leaves a short target
    size = part.stat().st_size
    if total is not None and size != total:
        raise ValueError(f"the connection ended at {size:,} of its {total:,} bytes")
    return total


def download_wmt14(out_dir: str | Path, *, base_url: str | None = None, sums_file: str | Path | None = None,
                   timeout: float = 60.0, log: Callable[[str], None] = print) -> list[Path]:
    """Fetch every file of FILES into `out_dir` (resuming), check each against the trusted sums
    (`sums_file`, else DIR/SHA256SUMS from an earlier run), record first downloads. -> the files."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise AtnatError(f"{out}: this is a file; give a folder for the WMT14 files")
    given = read_sums(Path(sums_file)) if sums_file else None
    unlisted = [name for name in FILES if given is not None and name not in given]
    if unlisted:  # a file it does not list would be recorded unchecked, the command saying all is well
        raise AtnatError(f"{sums_file} gives no sum for {', '.join(unlisted)}: --sha256 must list every file "
                         f"({', '.join(FILES)})")
    out.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(out / LOCK))  # two downloads into one folder: one appends to a part file, the other waits
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log(f"{out}: another process is downloading into this folder; waiting for it to end (lock file {out / LOCK})")
        lock.acquire()
    try:
        return _download(out, base_url, given, sums_file, timeout, log)
    finally:
        lock.release()


def _download(out: Path, base_url: str | None, given: dict | None, sums_file: str | Path | None, timeout: float,
              log: Callable[[str], None]) -> list[Path]:
    """download_wmt14's work, with the folder held; `given`: the sums of --sha256 (`sums_file`), if any."""
    base = (base_url or os.environ.get(URL_ENV) or BASE_URL).rstrip("/")
    recorded_path = out / SUMS
    recorded = read_sums(recorded_path) if recorded_path.is_file() else {}
    trusted = given if given is not None else recorded
    for name in FILES:  # a folder (or other non-file) where a file goes: named before hours of downloading
        in_the_way = [p for p in (out / name, out / f"{name}.part") if p.exists() and not p.is_file()]
        if in_the_way:
            raise AtnatError(f"{in_the_way[0]} is a folder where {in_the_way[0].name} goes: move it aside")
    for name in FILES:
        target, part = out / name, out / f"{name}.part"
        found = None  # its sha256, where it was downloaded now
        if not target.is_file():
            url = f"{base}/{name}"
            log(f"{name}: downloading {url}" + (f" (resuming at {part.stat().st_size:,} bytes)" if part.exists() else ""))
            try:
                if _stream(url, part, timeout) is None and not (name in trusted and sha256(part) == trusted[name]):
                    _stream(url, part, timeout, probe=True)  # no length, and no sum it meets: ask for the rest
            except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as err:
                reason = getattr(err, "reason", None) or err
                raise AtnatError(f"{name}: could not download {url} ({reason}); what was downloaded is kept: run the "
                                 f"same command again to resume (another address: --base-url or ${URL_ENV})") from None
            found, expected = sha256(part), trusted.get(name)
            if expected is not None and found != expected:  # never put in place, where a later run would record it
                bad = out / f"{name}.bad"
                os.replace(part, bad)
                _part_origin(part).unlink(missing_ok=True)
                raise AtnatError(f"{name}: the file downloaded from {url} has sha256 {found}, expected {expected} ("
                                 f"{sums_file or recorded_path}); set aside as {bad}, nothing put in place. Run the "
                                 "command again to fetch it anew, or check the sums and the address")
            os.replace(part, target)
            _part_origin(part).unlink(missing_ok=True)
        found = found or sha256(target)
        expected = trusted.get(name)
        if expected is not None and found != expected:
            raise AtnatError(f"{target}: sha256 {found}, expected {expected} ("
                             f"{sums_file or recorded_path}); move it aside and run the command again to fetch it anew")
        if recorded.get(name) != found:  # a first download, or a file that passed the sums given with --sha256
            recorded[name] = found  # (a wrong first record is replaced; without them a mismatch raised above)
            write_text_atomic(recorded_path, "".join(f"{digest}  {file}\n" for file, digest in recorded.items()))
        log(f"{target}: {target.stat().st_size:,} bytes, sha256 {found[:16]}..."
            + (" checks" if expected else f" recorded in {SUMS} (first download: not checked against a pinned sum)"))
    return [out / name for name in FILES]

