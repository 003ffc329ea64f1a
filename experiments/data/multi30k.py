"""`atnat data multi30k DIR`: the Multi30k release (WMT16-17 multimodal task 1) fetched from its
public repository, checked and unpacked, so that a fresh clone can run the Multi30k grids.

Source: github.com/multi30k/dataset at commit a3d2e0d (`data/task1/raw/*.gz`), gunzipped to
`DIR/{train,val,test2016,test2017}.{en,de,fr}`. Every file is checked against the sha256 of its
unpacked bytes below (the list the project's copy was made with) before it is written, and written
atomically (files.atomic_write): a kill leaves whole files or none. Running the command again keeps
the files that check and fetches only the others (resumable per file). A failed download, a file
that is not gzip, or a checksum that differs is one AtnatError naming the file and the address.
The data's terms (non-commercial research and education; cite Elliott et al. 2016/2017) are the
release's: see its README.
"""
from __future__ import annotations

import gzip
import hashlib
import http.client
import os
import urllib.error
import urllib.request
import zlib
from pathlib import Path
from typing import Callable

from atnat.core.errors import AtnatError
from atnat.experiments.files import atomic_write_bytes, sha256

COMMIT = "a3d2e0d26b56f3846f66a952536ffed4e401d05a"
BASE_URL = f"https://raw.githubusercontent.com/multi30k/dataset/{COMMIT}/data/task1/raw"
URL_ENV = "ATNAT_MULTI30K_URL"  # another address of the same files (a mirror, a local copy)
SPLITS = {"train": "train", "val": "val", "test2016": "test_2016_flickr", "test2017": "test_2017_flickr"}  # ours -> release
LANGS = ("en", "de", "fr")
SHA256 = {  # of the unpacked files, as /work/shared/data/multi30k/SOURCE.md lists them
    "train.en": "460a15fbd157e34a7a9957ee388c1ca247fe47af3ef25fb50442af6c274e0fc6",
    "train.de": "2c2b73fd2b548fbcde3a875e0a78d6ee94d498bfdee6bd3eae3945779e9ddf72",
    "train.fr": "5925a3c18f1587b6b54b87743106e6e8ab93618edb6f65d19eac0621f853a10d",
    "val.en": "1f2a23d992769b5b3d209b0a10dd0b77c08cceb1f20dfb97ed0aafa49d107227",
    "val.de": "660e09eb7e1da2f856ea13ee5ad3cf6d36b3d5b0b733c857e94c5747a3dfc660",
    "val.fr": "5304e444d842e962b2dda4d816b70b22a1765b15401642b7ca37a67477e708dc",
    "test2016.en": "399a4382932c1aadd3ceb9bef1008d388a64c76d4ae4e9d4728c6f4301cac182",
    "test2016.de": "4be6b5b3236b79c25475c6bb829800a7ce559e9ba7a1f6c2394fe4d40be46d16",
    "test2016.fr": "cb3160d69b002bb638e66cc7612fcd56cb0af82eadc9c142dedc438afb885ef6",
    "test2017.en": "ce1450ddc5ab0834502579d77a170849952e15a2938b34cc503bdc25ebb4fb98",
    "test2017.de": "c3078bc3b36808bf9d20eb2347ed6137016179ef59ec0d2b9b8ecc3fb2880081",
    "test2017.fr": "6f3764e31dac41e9455e612958bcfd4e877c5e15cd66df2c2b2be6d9bd83e5b6",
}


def release_name(name: str) -> str:
    """Our file name -> the release's gzip file: `test2016.en` -> `test_2016_flickr.en.gz`."""
    split, lang = name.rsplit(".", 1)
    return f"{SPLITS[split]}.{lang}.gz"


def fetch(url: str, timeout: float) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310  (http(s) of a release)
        return response.read()


def download_multi30k(out_dir: str | Path, *, base_url: str | None = None, checksums: dict[str, str] = SHA256,
                      langs: tuple[str, ...] = LANGS, timeout: float = 60.0,
                      log: Callable[[str], None] = print) -> list[Path]:
    """Fetch, gunzip, check and write every file of `checksums` (our name -> sha256 of the unpacked
    bytes) whose language is in `langs` into `out_dir`; files already there that check are kept.
    `base_url` (else $ATNAT_MULTI30K_URL, else the release) is where `<release name>.gz` are.
    -> the files, in `checksums` order."""
    out = Path(out_dir)
    base = (base_url or os.environ.get(URL_ENV) or BASE_URL).rstrip("/")
    unknown = [lang for lang in langs if lang not in LANGS]
    if unknown:
        raise AtnatError(f"--langs {','.join(langs)}: Multi30k has no {', '.join(unknown)} (valid: {', '.join(LANGS)})")
    wanted = [name for name in checksums if name.rsplit(".", 1)[1] in langs]
    if not wanted:
        raise AtnatError(f"--langs {','.join(langs)}: no Multi30k file in these languages (valid: {', '.join(LANGS)})")
    if out.exists() and not out.is_dir():
        raise AtnatError(f"{out}: this is a file; give a folder for the Multi30k files")
    for name in wanted:
        target, expected = out / name, checksums[name]
        if target.is_file():
            found = sha256(target)
            if found == expected:
                log(f"{target}: present, sha256 checks")
                continue
            raise AtnatError(f"{target} exists but is not the release's file (sha256 {found}, expected {expected}); "
                             "move it aside and run the command again")
        url = f"{base}/{release_name(name)}"
        try:
            packed = fetch(url, timeout)
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as err:
            reason = getattr(err, "reason", None) or err
            raise AtnatError(f"{name}: could not download {url} ({reason}); the files already written are kept: "
                             f"run the same command again to resume (another address: --base-url or ${URL_ENV})") from None
        try:
            data = gzip.decompress(packed)
        except (OSError, EOFError, zlib.error) as err:
            raise AtnatError(f"{name}: {url} is not a whole gzip file ({err}); nothing was written for it") from None
        found = hashlib.sha256(data).hexdigest()
        if found != expected:
            raise AtnatError(f"{name}: the file downloaded from {url} has sha256 {found}, expected {expected}; "
                             "it was not written (a changed or damaged download)")
        atomic_write_bytes(target, data)
        log(f"{target}: {len(data):,} bytes, sha256 checks")
    return [out / name for name in wanted]
