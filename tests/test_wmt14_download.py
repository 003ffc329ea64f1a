"""`atnat data wmt14-en-de DIR`: served here from a local folder on the loopback address (small fake files
under the release's names); a download resumes with a range request, first downloads are recorded in
SHA256SUMS and checked on every later run."""
import functools
import hashlib
import http.server
import json
import threading

import pytest

from atnat.core.errors import AtnatError
from atnat.experiments.cli.commands import main
from atnat.experiments.data.wmt14 import FILES, download_wmt14

FAKE = {name: (f"{name} line {i} .\n" * 50).encode() for i, name in enumerate(FILES)}


def sums(wrong: str = "", folder: str = "") -> str:
    """sha256sum's lines for the fake files, `wrong`'s sum all zeros, each name under `folder`."""
    return "".join(f"{'0' * 64 if n == wrong else hashlib.sha256(FAKE[n]).hexdigest()}  {folder}{n}\n" for n in FILES)


class Ranged(http.server.SimpleHTTPRequestHandler):
    """Serves the fake files; honours `Range: bytes=N-` unless the server says it ignores ranges."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        name = self.path.rsplit("/", 1)[-1]
        if_range = self.headers.get("If-Range")
        self.server.requested.append((name, self.headers.get("Range") + (f" if-range {if_range}" if if_range else "")
                                      if self.headers.get("Range") else None))
        body = FAKE.get(name)
        if body is None:
            self.send_error(404)
            return
        start = int(self.headers["Range"][6:-1]) if self.headers.get("Range") and self.server.ranges else 0
        if if_range is not None and if_range != self.server.etag:  # another version now: the whole file
            start = 0
        if start >= len(body):
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{len(body)}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(206 if start else 200)
        if self.server.etag:
            self.send_header("ETag", self.server.etag)
        if start or self.server.lengths:  # `lengths` False: a 200 without its length, ended by closing
            self.send_header("Content-Length", str(len(body) - start))
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.end_headers()
        self.wfile.write(body[start:][: self.server.cut.pop(name, None)])  # `cut`: the connection ends early


@pytest.fixture
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Ranged))
    httpd.requested, httpd.ranges, httpd.cut, httpd.lengths, httpd.etag = [], True, {}, True, None
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd, f"http://127.0.0.1:{httpd.server_address[1]}/wmt14"
    httpd.shutdown()
    httpd.server_close()


def test_first_download_is_recorded_and_checked_by_every_later_run(server, tmp_path):
    httpd, url = server
    lines = []
    files = download_wmt14(tmp_path / "d", base_url=url, log=lines.append)
    assert [f.read_bytes() for f in files] == [FAKE[name] for name in FILES]
    sums = (tmp_path / "d" / "SHA256SUMS").read_text().splitlines()
    assert sums == [f"{hashlib.sha256(FAKE[n]).hexdigest()}  {n}" for n in FILES]
    assert sum("recorded in SHA256SUMS (first download: not checked against a pinned sum)" in x for x in lines) == 6
    httpd.requested.clear()
    lines.clear()
    download_wmt14(tmp_path / "d", base_url=url, log=lines.append)
    assert httpd.requested == [] and sum(line.endswith(" checks") for line in lines) == 6
    (tmp_path / "d" / "newstest2014.de").write_bytes(b"changed\n")
    with pytest.raises(AtnatError, match=r"newstest2014.de: sha256 .*, expected .*SHA256SUMS\); move it aside"):
        download_wmt14(tmp_path / "d", base_url=url, log=lines.append)


@pytest.mark.parametrize("ranges", [True, False])
def test_a_stopped_download_resumes_from_its_part_file(server, tmp_path, ranges):
    httpd, url = server
    httpd.ranges = ranges
    out = tmp_path / "d"
    out.mkdir()
    (out / "train.en.part").write_bytes(FAKE["train.en"][:100])  # a download that stopped at 100 bytes
    (out / "train.en.part.json").write_text(json.dumps({"url": f"{url}/train.en"}))
    download_wmt14(out, base_url=url, log=lambda _: None)
    assert (out / "train.en").read_bytes() == FAKE["train.en"] and not (out / "train.en.part").exists()
    assert ("train.en", "bytes=100-") in httpd.requested


def test_sums_given_by_the_user_are_checked_and_a_failed_download_keeps_what_it_has(server, tmp_path):
    httpd, url = server
    trusted = tmp_path / "sums"
    trusted.write_text(sums(wrong="train.de"))
    with pytest.raises(AtnatError, match=r"train.de: the file downloaded from .* has sha256 .*, expected 0{64} "
                                         r".*set aside as .*train.de.bad, nothing put in place"):
        download_wmt14(tmp_path / "d", base_url=url, sums_file=trusted, log=lambda _: None)
    assert (tmp_path / "d" / "train.en").read_bytes() == FAKE["train.en"]  # the file before it is kept
    # not in place under its name, where a run without the sums would record it as a first download
    assert not (tmp_path / "d" / "train.de").exists() and (tmp_path / "d" / "train.de.bad").read_bytes() == FAKE["train.de"]
    download_wmt14(tmp_path / "d", base_url=url, log=lambda _: None)  # without the sums: fetched anew
    assert (tmp_path / "d" / "train.de").read_bytes() == FAKE["train.de"]
    with pytest.raises(AtnatError, match=r"train.en: could not download http://127.0.0.1:9/x/train.en .* run the same "
                                         r"command again to resume"):
        download_wmt14(tmp_path / "e", base_url="http://127.0.0.1:9/x", log=lambda _: None)
    trusted.write_text("not a sum line\n")
    with pytest.raises(AtnatError, match=r"sums line 1: expected '<sha256>  <file name>'"):
        download_wmt14(tmp_path / "f", base_url=url, sums_file=trusted, log=lambda _: None)


def test_cli_takes_the_address_from_the_environment(server, tmp_path, monkeypatch, capsys):
    _, url = server
    monkeypatch.setenv("ATNAT_WMT14_URL", url)
    main(["data", "wmt14-en-de", str(tmp_path / "d")])
    assert "6 WMT14 en-de files in" in capsys.readouterr().out
    assert (tmp_path / "d" / "newstest2013.de").read_bytes() == FAKE["newstest2013.de"]


def test_a_connection_that_ends_early_is_an_error_and_the_next_run_resumes_it(server, tmp_path):
    """The server declares the whole length and closes after 300 bytes: not renamed into place, not recorded as
    the file's sum; the part is kept and the next run asks for the rest."""
    httpd, url = server
    httpd.cut["train.de"] = 300
    out = tmp_path / "d"
    with pytest.raises(AtnatError, match=r"train.de: could not download .*the connection ended at 300 of its "
                                         rf"{len(FAKE['train.de']):,} bytes.*run the same command again to resume"):
        download_wmt14(out, base_url=url, log=lambda _: None)
    assert not (out / "train.de").exists() and (out / "train.de.part").stat().st_size == 300
    assert "train.de" not in (out / "SHA256SUMS").read_text()
    download_wmt14(out, base_url=url, log=lambda _: None)
    assert (out / "train.de").read_bytes() == FAKE["train.de"] and ("train.de", "bytes=300-") in httpd.requested
    assert f"{hashlib.sha256(FAKE['train.de']).hexdigest()}  train.de" in (out / "SHA256SUMS").read_text()


def test_a_part_longer_than_the_file_is_fetched_again_and_a_whole_one_is_kept(server, tmp_path):
    httpd, url = server
    out = tmp_path / "d"
    out.mkdir()
    (out / "newstest2014.de.part").write_bytes(b"x" * (len(FAKE["newstest2014.de"]) + 500))  # not this file
    (out / "newstest2014.en.part").write_bytes(FAKE["newstest2014.en"])  # whole, not yet renamed
    for name in ("newstest2014.de", "newstest2014.en"):  # both begun from this address
        (out / f"{name}.part.json").write_text(json.dumps({"url": f"{url}/{name}"}))
    download_wmt14(out, base_url=url, log=lambda _: None)
    assert (out / "newstest2014.de").read_bytes() == FAKE["newstest2014.de"]
    assert (out / "newstest2014.en").read_bytes() == FAKE["newstest2014.en"]
    assert [r for r in httpd.requested if r[0] == "newstest2014.en"] == [
        ("newstest2014.en", f"bytes={len(FAKE['newstest2014.en'])}-")]  # the 416 said it was whole


def test_a_file_that_passes_the_given_sums_replaces_a_wrong_first_record(server, tmp_path):
    httpd, url = server
    out = tmp_path / "d"
    download_wmt14(out, base_url=url, log=lambda _: None)
    recorded = (out / "SHA256SUMS").read_text()
    (out / "SHA256SUMS").write_text(recorded.replace(hashlib.sha256(FAKE["train.de"]).hexdigest(), "1" * 64))
    trusted = tmp_path / "sums"
    trusted.write_text(recorded)
    download_wmt14(out, base_url=url, sums_file=trusted, log=lambda _: None)
    assert (out / "SHA256SUMS").read_text() == recorded
    download_wmt14(out, base_url=url, log=lambda _: None)  # checked against the corrected record


@pytest.mark.parametrize("ranges", [True, False])
def test_a_download_of_unsaid_length_is_checked_for_its_end_before_it_is_kept(server, tmp_path, ranges):
    """The server sends no length and closes after 300 bytes: a server that answers a range request for
    the rest completes the file; one that ignores ranges cannot tell a cut file from a whole one, so the
    download is an error and nothing is recorded."""
    httpd, url = server
    httpd.lengths, httpd.ranges, httpd.cut["train.de"] = False, ranges, 300
    out = tmp_path / "d"
    if ranges:
        download_wmt14(out, base_url=url, log=lambda _: None)
        assert (out / "train.de").read_bytes() == FAKE["train.de"] and ("train.de", "bytes=300-") in httpd.requested
        assert (out / "train.en").read_bytes() == FAKE["train.en"]  # whole at once: the probe finds its end
        return
    with pytest.raises(AtnatError, match="train.en: could not download .*the server gave no length and ignores range "
                                         "requests"):
        download_wmt14(out, base_url=url, log=lambda _: None)
    assert not (out / "train.en").exists() and not (out / "SHA256SUMS").exists()


def test_given_sums_name_files_with_their_folders_and_must_list_every_file(server, tmp_path):
    """`sha256sum wmt/*` writes wmt/train.en: the file is train.en. A sums file that lists no sum for a
    file checked nothing for it (it was recorded as a first download and the command succeeded)."""
    httpd, url = server
    trusted = tmp_path / "sums"
    trusted.write_text(sums(wrong="train.de", folder="wmt/"))
    with pytest.raises(AtnatError, match=r"train.de: the file downloaded from .* has sha256 .*, expected 0{64}"):
        download_wmt14(tmp_path / "d", base_url=url, sums_file=trusted, log=lambda _: None)
    trusted.write_text(f"{hashlib.sha256(FAKE['train.en']).hexdigest()}  train.en\n")
    with pytest.raises(AtnatError, match=r"sums gives no sum for train.de, newstest2013.en, .*must list every file"):
        download_wmt14(tmp_path / "e", base_url=url, sums_file=trusted, log=lambda _: None)
    assert not (tmp_path / "e").exists() or not list((tmp_path / "e").iterdir())  # refused before any download
    trusted.write_bytes(b"\xff\xfe sums\n")
    with pytest.raises(AtnatError, match=r"sums: not a text file of sums \(byte 0 is no UTF-8\)"):
        download_wmt14(tmp_path / "f", base_url=url, sums_file=trusted, log=lambda _: None)


def test_a_cut_download_of_unsaid_length_with_given_sums_resumes(server, tmp_path):
    """With sums given, a download of unsaid length that closed early fails its sum: it asks for the rest
    (it was renamed into place, failed, and the bytes downloaded were lost)."""
    httpd, url = server
    httpd.lengths, httpd.cut["train.de"] = False, 300
    trusted = tmp_path / "sums"
    trusted.write_text(sums())
    download_wmt14(tmp_path / "d", base_url=url, sums_file=trusted, log=lambda _: None)
    assert (tmp_path / "d" / "train.de").read_bytes() == FAKE["train.de"] and ("train.de", "bytes=300-") in httpd.requested
    assert not [r for r in httpd.requested if r[0] == "train.en" and r[1]]  # a whole one meets its sum: no probe


def test_a_second_download_into_the_folder_waits_for_the_first(server, tmp_path):
    """Two downloads into one folder appended to one part file: the first said it had all six files, while
    train.en held its bytes and the second's (and lines that train.de had not)."""
    from filelock import FileLock

    from atnat.experiments.data.wmt14 import LOCK

    _, url = server
    folder = tmp_path / "d"
    folder.mkdir()
    lines, done = [], []
    first = FileLock(str(folder / LOCK))
    first.acquire()  # a first download holds the folder
    second = threading.Thread(target=lambda: done.append(download_wmt14(folder, base_url=url, log=lines.append)))
    second.start()
    for _ in range(200):
        if lines:
            break
        second.join(0.05)
    assert lines == [f"{folder}: another process is downloading into this folder; waiting for it to end (lock file "
                     f"{folder / LOCK})"]
    assert sorted(p.name for p in folder.iterdir()) == [LOCK]  # nothing written while it waits
    first.release()
    second.join(30)
    assert [f.read_bytes() for f in done[0]] == [FAKE[name] for name in FILES]


def test_a_folder_where_a_file_goes_is_named_before_anything_is_downloaded(server, tmp_path):
    """A trial's finding: a folder named train.de in the output gave `out/train.de.part: Is a directory` (the
    wrong path) after the whole download, and left the part file behind."""
    _, url = server
    (tmp_path / "d" / FILES[1]).mkdir(parents=True)
    with pytest.raises(AtnatError, match=f"{tmp_path / 'd' / FILES[1]} is a folder where {FILES[1]} goes: move it"):
        download_wmt14(tmp_path / "d", base_url=url, log=lambda _: None)
    assert not list((tmp_path / "d").glob("*.part"))


def test_every_download_is_on_disk_before_it_is_renamed_into_place(server, tmp_path, monkeypatch):
    """A download was renamed from its .part without an fsync (and SHA256SUMS likewise): after a crash the rename
    could survive the data, and the next run found a short file under the release's name and recorded its sum."""
    import os

    from atnat.experiments import files
    from atnat.experiments.data import wmt14

    _, url = server
    synced, events = set(), []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        synced.add(os.path.realpath(f"/proc/self/fd/{fd}"))
        return real_fsync(fd)

    def replace(src, dst):
        events.append((os.path.realpath(src) in synced, os.path.basename(dst)))
        return real_replace(src, dst)

    for module in (wmt14.os, files.os):
        monkeypatch.setattr(module, "fsync", fsync)
        monkeypatch.setattr(module, "replace", replace)
    download_wmt14(tmp_path / "wmt14", base_url=url)
    assert {name for _, name in events} == {*FILES, "SHA256SUMS", *(f"{n}.part.json" for n in FILES)}
    assert all(synced_first for synced_first, _ in events), events


def test_a_part_from_another_address_or_of_another_version_is_not_resumed(server, tmp_path):
    """A part file was resumed whatever it came from: the rest of one file appended to the beginning of another
    (another mirror, or the file changed on the server since), kept where no sums check it."""
    httpd, url = server
    out = tmp_path / "d"
    out.mkdir()
    (out / "train.en.part").write_bytes(b"x" * 100)  # begun from another address
    (out / "train.en.part.json").write_text('{"url": "http://elsewhere.example/train.en"}')
    (out / "train.de.part").write_bytes(b"y" * 100)  # begun from here, when the file was another version
    (out / "train.de.part.json").write_text(f'{{"url": "{url}/train.de", "version": "\\"v1\\""}}')
    (out / "newstest2013.en.part").write_bytes(b"z" * 100)  # of no recorded origin (its .json lost)
    httpd.etag = '"v2"'
    download_wmt14(out, base_url=url, log=lambda _: None)
    assert all((out / name).read_bytes() == FAKE[name] for name in FILES)
    assert ("train.en", None) in httpd.requested and ("train.de", 'bytes=100- if-range "v1"') in httpd.requested
    assert ("newstest2013.en", None) in httpd.requested
    assert not list(out.glob("*.part*"))


def test_a_weak_etag_is_not_sent_in_if_range(server, tmp_path):
    """A weak ETag (W/"...") may not be sent in If-Range; a server then always sends the whole file again."""
    httpd, url = server
    httpd.etag, httpd.cut["train.en"] = 'W/"v1"', 300
    with pytest.raises(AtnatError, match="run the same command again to resume"):
        download_wmt14(tmp_path / "d", base_url=url, log=lambda _: None)
    httpd.requested.clear()
    download_wmt14(tmp_path / "d", base_url=url, log=lambda _: None)
    assert ("train.en", "bytes=300-") in httpd.requested  # resumed, with no If-Range
