"""`atnat data multi30k DIR`: the release's .gz files fetched over HTTP, unpacked, checked against
their sha256 and written whole; served here from a local folder on the loopback address (no real
download: the tests pass their own checksum table for small fake files)."""
import functools
import gzip
import hashlib
import http.server
import socket
import threading

import pytest

from atnat.core.errors import AtnatError
from atnat.experiments.cli.commands import main
from atnat.experiments.data.multi30k import SHA256, download_multi30k, release_name

FAKE = {"train.en": "A dog runs .\nTwo men .\n", "train.de": "Ein Hund rennt .\nZwei Männer .\n",
        "val.en": "A cat .\n", "val.de": "Eine Katze .\n",
        "test2016.en": "A bird .\n", "test2016.de": "Ein Vogel .\n"}
TABLE = {name: hashlib.sha256(text.encode()).hexdigest() for name, text in FAKE.items()}


class Recorder(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):
        self.server.requested.append(self.path.rsplit("/", 1)[-1])
        super().do_GET()


@pytest.fixture
def server(tmp_path):
    """An HTTP server on 127.0.0.1 serving tmp_path/release (the fake files, gzipped, release names)."""
    release = tmp_path / "release" / "raw"
    release.mkdir(parents=True)
    for name, text in FAKE.items():
        (release / release_name(name)).write_bytes(gzip.compress(text.encode()))
    handler = functools.partial(Recorder, directory=str(tmp_path / "release"))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.requested = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd, release, f"http://127.0.0.1:{httpd.server_address[1]}/raw"
    httpd.shutdown()
    httpd.server_close()


def test_release_names_and_the_embedded_checksums():
    assert release_name("test2016.en") == "test_2016_flickr.en.gz" and release_name("train.fr") == "train.fr.gz"
    assert release_name("test2017.de") == "test_2017_flickr.de.gz" and release_name("val.de") == "val.de.gz"
    assert sorted(SHA256) == sorted(f"{s}.{l}" for s in ("train", "val", "test2016", "test2017")
                                    for l in ("en", "de", "fr"))
    assert SHA256["train.en"] == "460a15fbd157e34a7a9957ee388c1ca247fe47af3ef25fb50442af6c274e0fc6"


def test_download_unpacks_checks_writes_and_resumes(server, tmp_path):
    httpd, _, url = server
    out = tmp_path / "data"
    files = download_multi30k(out, base_url=url, checksums=TABLE, log=lambda line: None)
    assert [f.name for f in files] == list(FAKE)
    assert {f.name: f.read_text(encoding="utf-8") for f in files} == FAKE
    assert sorted(httpd.requested) == sorted(release_name(n) for n in FAKE)
    # resumed: the files that check are kept, only the missing one is fetched again
    (out / "val.de").unlink()
    httpd.requested.clear()
    download_multi30k(out, base_url=url, checksums=TABLE, log=lambda line: None)
    assert httpd.requested == ["val.de.gz"] and (out / "val.de").read_text(encoding="utf-8") == FAKE["val.de"]
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporary file left
    # the languages asked for only
    httpd.requested.clear()
    assert [f.name for f in download_multi30k(tmp_path / "en", base_url=url, checksums=TABLE, langs=("en",),
                                              log=lambda line: None)] == ["train.en", "val.en", "test2016.en"]


def test_a_corrupted_file_is_refused_by_name_and_nothing_is_written_for_it(server, tmp_path):
    _, release, url = server
    (release / "val.en.gz").write_bytes(gzip.compress(b"A cat !\n"))  # one byte changed
    out = tmp_path / "data"
    with pytest.raises(AtnatError, match=r"val\.en: the file downloaded from .*/raw/val\.en\.gz has sha256 [0-9a-f]{64}, "
                                         f"expected {TABLE['val.en']}"):
        download_multi30k(out, base_url=url, checksums=TABLE, log=lambda line: None)
    assert not (out / "val.en").exists() and (out / "train.de").is_file()  # what checked before it is kept
    (release / "val.en.gz").write_bytes(b"not gzip")
    with pytest.raises(AtnatError, match=r"val\.en: .*val\.en\.gz is not a whole gzip file"):
        download_multi30k(out, base_url=url, checksums=TABLE, log=lambda line: None)
    packed = bytearray(gzip.compress(b"A cat .\n"))
    packed[10] ^= 0xFF  # a damaged deflate block: zlib's error, neither OSError nor EOFError
    (release / "val.en.gz").write_bytes(bytes(packed))
    with pytest.raises(AtnatError, match=r"val\.en: .*val\.en\.gz is not a whole gzip file"):
        download_multi30k(out, base_url=url, checksums=TABLE, log=lambda line: None)
    (out / "train.en").write_text("edited by hand\n")
    with pytest.raises(AtnatError, match=r"data/train\.en exists but is not the release's file"):
        download_multi30k(out, base_url=url, checksums=TABLE, log=lambda line: None)


def test_a_language_multi30k_lacks_is_refused(server, tmp_path):
    _, _, url = server
    with pytest.raises(AtnatError, match=r"--langs en,dee: Multi30k has no dee \(valid: en, de, fr\)"):
        download_multi30k(tmp_path / "data", base_url=url, checksums=TABLE, langs=("en", "dee"), log=lambda line: None)
    assert not (tmp_path / "data").exists()


def test_network_failure_names_the_file(tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(AtnatError, match=r"train\.en: could not download http://127\.0\.0\.1:\d+/train\.en\.gz .*"
                                         "run the same command again to resume"):
        download_multi30k(tmp_path / "data", base_url=f"http://127.0.0.1:{port}", checksums=TABLE, timeout=5,
                          log=lambda line: None)


def test_cli_checks_the_release_checksums_and_takes_the_address_from_the_environment(server, tmp_path, monkeypatch,
                                                                                     capsys):
    _, _, url = server
    monkeypatch.setenv("ATNAT_MULTI30K_URL", url)
    assert main(["data", "multi30k", str(tmp_path / "data")]) == 2  # the fake files are not the release's
    err = capsys.readouterr().err
    assert "atnat: error: train.en: the file downloaded from " + url + "/train.en.gz has sha256" in err
    assert not (tmp_path / "data" / "train.en").exists()


SHARED = __import__("pathlib").Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data/multi30k is not beside this checkout")
def test_the_embedded_checksums_are_those_of_the_projects_copy():
    from atnat.experiments.files import sha256

    assert {name: sha256(SHARED / name) for name in SHA256} == SHA256
