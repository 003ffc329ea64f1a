"""Prepared splits: encoded once into memory-mapped arrays, verified on open, the same tokens and batches as
encoding in memory; the sentencepiece vocabulary learned from a seeded sample of a large training split."""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from atnat.core.errors import AtnatError
from atnat.experiments.data import prepared as prep
from atnat.experiments.data.batching import TokenBudgetSampler, collate, encode_split
from atnat.experiments.data.prepared import PreparedSplit, SideText, prepare
from atnat.experiments.data.tasks import ParallelOptions, ParallelTask
from atnat.experiments.data.tokenize import CACHE_DIR, SentencePieceTokenizer, SymbolTokenizer

ROOT = Path(__file__).resolve().parents[1]
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"
WORDS = [f"w{i}" for i in range(50)]


def corpus(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    src = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 30))) for _ in range(n)]
    return src, [" ".join(reversed(s.split())) + (" w1" * rng.randint(0, 3)) for s in src]


def reference_batches(sizes: list[int], max_tokens: int, rng: random.Random | None,
                      max_sentences: int | None = None) -> list[list[int]]:
    """The token-budget batching as it was written over Python lists, before the lengths arrays."""
    noise = [rng.random() if rng else 0.0 for _ in sizes]
    order = sorted(range(len(sizes)), key=lambda i: (sizes[i] + noise[i], i))
    batches, cur, longest = [], [], 0
    for i in order:
        longest_new = max(longest, sizes[i])
        full = max_sentences is not None and len(cur) >= max_sentences
        if cur and (longest_new * (len(cur) + 1) > max_tokens or full):
            batches.append(cur)
            cur, longest_new = [], sizes[i]
        cur.append(i)
        longest = longest_new
    if cur:
        batches.append(cur)
    if rng:
        rng.shuffle(batches)
    return batches


def test_a_prepared_split_holds_the_same_tokens_batches_and_padding_as_one_encoded_in_memory(tmp_path):
    src, tgt = corpus(3000)
    tok = SymbolTokenizer(WORDS)
    arrays = prepare(SideText(lines=src), SideText(lines=tgt), tok, name="train", cache_dir=tmp_path)
    for max_len, drop in ((None, False), (12, True), (12, False)):
        ours = PreparedSplit(arrays, name="train", max_len=max_len, drop_long=drop)
        theirs = encode_split(tok, src, tgt, name="train", max_len=max_len, drop_long=drop)
        assert len(ours) == len(theirs)
        assert list(ours.src) == theirs.src and list(ours.tgt) == theirs.tgt
        assert ours.src_lengths.tolist() == [len(s) for s in theirs.src]
        for shuffle, budget, most in ((False, 200, None), (True, 200, None), (True, 30, None), (True, 400, 7)):
            sampler = TokenBudgetSampler(ours, budget, shuffle=shuffle, seed=3, max_sentences=most)
            sampler.set_epoch(2)
            sizes = [max(len(s), len(t) + 1) for s, t in zip(theirs.src, theirs.tgt)]
            expected = reference_batches(sizes, budget, random.Random(5) if shuffle else None, most)
            assert list(sampler) == expected and len(sampler) == len(expected)
        for batch in expected[:20]:
            a, b = ours.__getitems__(batch), collate([theirs[i] for i in batch])
            for field in ("src", "tgt", "src_lengths", "tgt_lengths", "ids"):
                assert torch.equal(getattr(a, field), getattr(b, field)), field


def test_the_cache_is_encoded_once_verified_on_open_and_a_damaged_entry_encoded_again(tmp_path, monkeypatch, capsys):
    src, tgt = corpus(500)
    tok = SymbolTokenizer(WORDS)
    calls = []
    real = prep.encode_lines
    monkeypatch.setattr(prep, "encode_lines", lambda *a: calls.append(1) or real(*a))
    first = prepare(SideText(lines=src), SideText(lines=tgt), tok, name="train", cache_dir=tmp_path)
    encoded = len(calls)
    assert encoded and first.meta["dtype"] == "uint16"
    again = prepare(SideText(lines=src), SideText(lines=tgt), tok, name="train", cache_dir=tmp_path)
    assert len(calls) == encoded  # mapped, not encoded again
    ids, before = first.folder / "tgt.ids", np.array(again.tgt_ids)
    data = bytearray(ids.read_bytes())
    data[7] ^= 1  # one bit flipped in place: same size, other contents
    ids.write_bytes(bytes(data))
    healed = prepare(SideText(lines=src), SideText(lines=tgt), tok, name="train", cache_dir=tmp_path)
    assert len(calls) == 2 * encoded
    assert "is damaged (tgt.ids does not match the sha256 recorded when it was written)" in capsys.readouterr().err
    assert np.array_equal(healed.tgt_ids, before)
    (healed.folder / "meta.json").unlink()  # a partial entry (no record of what was written)
    prepare(SideText(lines=src), SideText(lines=tgt), tok, name="train", cache_dir=tmp_path)
    assert len(calls) == 3 * encoded
    changed = prepare(SideText(lines=src), SideText(lines=tgt[:-1] + ["w3"]), tok, name="train", cache_dir=tmp_path)
    assert changed.folder != first.folder and changed.n == 500
    # a trial's finding: each damaged entry was kept for good (at WMT14's size 2.6 GB each): only the newest stays
    asides = list(first.folder.parent.glob(f"{first.folder.name}.damaged-*"))
    assert len(asides) == 1, asides
    assert "the one set aside before" in capsys.readouterr().err


@pytest.mark.parametrize("pairs", [-1, 10**12, 499, "500", True])
def test_an_entry_whose_meta_miscounts_its_pairs_is_set_aside_and_encoded_again(tmp_path, capsys, pairs):
    src, tgt = corpus(500)
    tok = SymbolTokenizer(WORDS)
    entry = prepare(SideText(lines=src), SideText(lines=tgt), tok, name="train", cache_dir=tmp_path)
    before = np.array(entry.src_ids)
    meta = json.loads((entry.folder / "meta.json").read_text())
    (entry.folder / "meta.json").write_text(json.dumps({**meta, "pairs": pairs}))
    healed = prepare(SideText(lines=src), SideText(lines=tgt), tok, name="train", cache_dir=tmp_path)
    assert "does not match its lengths files" in capsys.readouterr().err
    assert healed.n == 500 and np.array_equal(healed.src_ids, before)


def test_files_are_streamed_like_read_lines_and_bad_files_named(tmp_path):
    (tmp_path / "a.en").write_bytes(b"w1 w2\r\nw3\n\nw4 w5 w6")  # CRLF, an empty line, no final newline
    (tmp_path / "a.de").write_bytes(b"w2 w1\nw3\nw9\nw6 w5 w4\n")
    (tmp_path / "short.de").write_bytes(b"w2 w1\nw3\n")
    (tmp_path / "bad.de").write_bytes(b"w2 w1\n\xff\nw9\nw6\n")
    side = SideText(path=tmp_path / "a.en", what="train source")
    assert list(side) == ["w1 w2", "w3", "", "w4 w5 w6"] and side.digest()[1] == 4
    limited = SideText(path=tmp_path / "a.de", limit=2)
    assert list(limited) == ["w2 w1", "w3"] and limited.digest()[1] == 2
    assert limited.digest()[0] != SideText(path=tmp_path / "a.de").digest()[0]
    tok = SymbolTokenizer(WORDS)
    arrays = prepare(side, SideText(path=tmp_path / "a.de"), tok, name="train", cache_dir=tmp_path / "c")
    assert list(PreparedSplit(arrays, name="train").tgt) == [tok.encode(t) for t in ["w2 w1", "w3", "w9", "w6 w5 w4"]]
    with pytest.raises(AtnatError, match=r"a.en has 4 lines but .*short.de has 2"):
        prepare(side, SideText(path=tmp_path / "short.de"), tok, name="train", cache_dir=tmp_path / "c")
    with pytest.raises(AtnatError, match=r"bad.de line 2 is not valid UTF-8"):
        prepare(side, SideText(path=tmp_path / "bad.de", what="train target"), tok, name="train",
                cache_dir=tmp_path / "c")
    (tmp_path / "a.de").write_bytes(b"w2 w1\nw3\nw9\nw6 w5 w5\n")  # changed, same size: hashed again
    assert SideText(path=tmp_path / "a.de").digest()[0] != SideText(path=tmp_path / "short.de").digest()[0]
    changed = prepare(side, SideText(path=tmp_path / "a.de"), tok, name="train", cache_dir=tmp_path / "c")
    assert list(PreparedSplit(changed, name="train").tgt)[3] == tok.encode("w6 w5 w5")
    with pytest.raises(AtnatError, match="missing.de does not exist"):
        SideText(path=tmp_path / "missing.de", what="train target").digest()
    (tmp_path / "wide.de").write_bytes("w2 w1\nw3\nw9\nw6\n".encode("utf-16"))  # it was "has 5 lines but ... 4"
    with pytest.raises(AtnatError, match=r"train target: .*wide.de is not UTF-8 text \(a UTF-16 or UTF-32 byte-order mark"):
        prepare(side, SideText(path=tmp_path / "wide.de", what="train target"), tok, name="train", cache_dir=tmp_path / "c")


def test_the_vocabulary_of_a_large_split_is_learned_from_a_seeded_sample_and_found_again_without_reading_it(
        tmp_path, monkeypatch, capsys):
    src, tgt = corpus(4000, seed=1)
    (tmp_path / "train.en").write_text("\n".join(src) + "\n")
    (tmp_path / "train.de").write_text("\n".join(tgt) + "\n")
    for split in ("val", "test2016"):
        (tmp_path / f"{split}.en").write_text("w1 w2\n")
        (tmp_path / f"{split}.de").write_text("w2 w1\n")
    options = ParallelOptions(data_dir=str(tmp_path), vocab_size=60, tokenizer_sample=1000)
    task = ParallelTask(options, cache_dir=tmp_path / "spm").load()
    assert "seeded sample of 1,000 of the 4,000 training pairs (task.tokenizer_sample)" in capsys.readouterr().err
    whole = ParallelTask(ParallelOptions(data_dir=str(tmp_path), vocab_size=60), cache_dir=tmp_path / "spm").load()
    assert task.tokenizer.proto != whole.tokenizer.proto  # learned from other lines

    def unread(self):
        raise AssertionError("the training text was read")
    monkeypatch.setattr(SideText, "__iter__", unread)
    again = ParallelTask(options, cache_dir=tmp_path / "spm").load()  # the memo names the cached model
    assert again.tokenizer.proto == task.tokenizer.proto
    assert isinstance(again.tokenizer, SentencePieceTokenizer)


@pytest.mark.skipif(not MULTI30K.is_dir(), reason="../shared/data/multi30k is not beside this checkout")
def test_multi30k_prepared_gives_the_tokens_of_encoding_line_by_line(tmp_path):
    task = ParallelTask(ParallelOptions(data_dir=str(MULTI30K)), cache_dir=CACHE_DIR / "spm").load()  # cached model
    src, tgt = task.splits["train"]
    arrays = prepare(*task.side_texts("train"), task.tokenizer, name="train", cache_dir=tmp_path)
    split = PreparedSplit(arrays, name="train", max_len=100, drop_long=True)
    theirs = encode_split(task.tokenizer, src, tgt, name="train", max_len=100, drop_long=True)
    assert list(split.src) == theirs.src and list(split.tgt) == theirs.tgt


def test_atnat_data_prepare_encodes_a_grids_tasks_once_and_runs_then_map_them(tmp_path, monkeypatch):
    from atnat.experiments.config.run import load_task
    from atnat.experiments.running.data_prepare import configs_of, prepare_configs
    from atnat.experiments.training.train import prepare_data
    from tests.test_grid import write_grid

    monkeypatch.setattr("atnat.experiments.data.tokenize.CACHE_DIR", tmp_path / "cache")
    grid = write_grid(tmp_path)
    lines = []
    rows = prepare_configs(grid, threads=1, log=lines.append)
    assert [r["split"] for r in rows] == ["train", "valid", "test"]  # one task, shared by every cell
    assert any("train: " in line and "pairs encoded" in line for line in lines)
    calls = []
    monkeypatch.setattr(prep, "encode_lines", lambda *a: calls.append(1))
    cfg = configs_of(grid)[0]
    data = prepare_data(cfg, load_task(cfg))
    assert not calls  # mapped from the cache, nothing encoded again
    assert str(data.encoded["train"].arrays.folder) == rows[0]["folder"]


def test_a_corpus_digest_is_remembered_and_an_unwritable_memo_costs_only_a_rehash(tmp_path, monkeypatch):
    """The digest memo (under $ATNAT_CACHE/digests) is an optimisation: where it cannot be written (a full disk, a
    read-only cache: atomic_write_bytes raises atnat's error naming it) the digest is still returned."""
    from atnat.core.errors import AtnatError
    from atnat.experiments.data import prepared

    corpus = tmp_path / "train.en"
    corpus.write_text("a b\nc d\n")
    monkeypatch.setattr("atnat.experiments.data.tokenize.CACHE_DIR", tmp_path / "cache")
    first = prepared._remembered_digest(corpus, None)
    assert first[1] == 2 and list((tmp_path / "cache" / "digests").glob("*.json"))

    def full(*args, **kwargs):
        raise AtnatError("cannot write the memo: the disk is full")

    monkeypatch.setattr(prepared, "atomic_write_bytes", full)
    corpus.write_text("a b\nc d\ne f\n")  # a new version: not remembered yet, and cannot be
    assert prepared._remembered_digest(corpus, None)[1] == 3


def test_an_entry_the_machine_cannot_read_is_left_as_it_is_and_a_killed_encoders_folder_is_removed(tmp_path,
                                                                                                   monkeypatch):
    """An I/O error of the machine (EIO, too many open files, a memory limit on the maps) is not damage: one
    error naming the entry, which stays (it is not encoded again into the same trouble); a temporary folder a
    killed encoder left beside an entry is removed by the next encoding of that key."""
    import errno

    from atnat.core.errors import AtnatError

    src, tgt = corpus(50)
    tok = SymbolTokenizer(WORDS)
    entry = prepare(SideText(lines=src), SideText(lines=tgt), tok, name="train", cache_dir=tmp_path).folder
    real = prep.sha256

    def failing(path):
        raise OSError(errno.EIO, "Input/output error", str(path))

    monkeypatch.setattr(prep, "sha256", failing)
    with pytest.raises(AtnatError, match=r"the prepared split .* cannot be read \(\[Errno 5\] Input/output error.*"
                                         r"it is left as it is"):
        prepare(SideText(lines=src), SideText(lines=tgt), tok, name="train", cache_dir=tmp_path)
    assert entry.is_dir() and not list(tmp_path.rglob("*.damaged-*"))
    monkeypatch.setattr(prep, "sha256", real)
    left = entry.with_name(f"{entry.name}.tmp-99999999")
    left.mkdir()
    (left / "src.ids").write_bytes(b"half")
    (entry / "meta.json").unlink()  # the entry must be encoded again
    prepare(SideText(lines=src), SideText(lines=tgt), tok, name="train", cache_dir=tmp_path)
    assert not left.exists() and (entry / "meta.json").is_file()


def test_lines_given_in_memory_are_told_apart_by_their_count(tmp_path):
    """Two pairs, and one pair whose lines hold a newline each, are different splits: not one cache entry."""
    tok = SymbolTokenizer(WORDS)
    two = prepare(SideText(lines=["w1", "w2"]), SideText(lines=["w3", "w4"]), tok, name="a", cache_dir=tmp_path)
    one = prepare(SideText(lines=["w1\nw2"]), SideText(lines=["w3\nw4"]), tok, name="b", cache_dir=tmp_path)
    assert two.folder != one.folder and (two.n, one.n) == (2, 1)
    assert SideText(lines=["a", "b", "c"], limit=2).digest() == SideText(lines=["a", "b"]).digest()


def test_a_file_rewritten_between_its_digest_and_its_encoding_stores_nothing(tmp_path):
    """The entry's key is the digest taken when the task was loaded; hours may pass before the split is
    encoded (a tokenizer trained, a teacher distilled). A file rewritten meanwhile with as many lines would
    have stored the new text's ids under the old text's key, served later for the old text."""
    src, tgt = corpus(300)
    (tmp_path / "train.en").write_text("\n".join(src) + "\n")
    (tmp_path / "train.de").write_text("\n".join(tgt) + "\n")
    sides = SideText(path=tmp_path / "train.en"), SideText(path=tmp_path / "train.de")
    for side in sides:
        side.digest()  # as ParallelTask.load() takes it
    (tmp_path / "train.de").write_text("\n".join(["w7 w8"] * 300) + "\n")  # the same number of lines
    with pytest.raises(AtnatError, match=r"split 'train': .*train.de changed after it was first read"):
        prepare(*sides, SymbolTokenizer(WORDS), name="train", cache_dir=tmp_path / "cache")
    assert not [p for p in (tmp_path / "cache" / "prepared").iterdir() if not p.name.endswith(".lock")]
    limited = SideText(path=tmp_path / "train.en", limit=100), SideText(path=tmp_path / "train.de", limit=100)
    arrays = prepare(*limited, SymbolTokenizer(WORDS), name="train", cache_dir=tmp_path / "cache")  # unchanged: kept
    assert arrays.n == 100 and limited[1].read_digest == limited[1].digest()


def test_a_training_limit_does_not_hide_parallel_files_of_unequal_lengths(tmp_path):
    src, tgt = corpus(7)
    (tmp_path / "train.en").write_text("\n".join(src[:5]) + "\n")
    (tmp_path / "train.de").write_text("\n".join(tgt) + "\n")
    for split in ("val", "test2016"):
        (tmp_path / f"{split}.en").write_text("w1 w2\n")
        (tmp_path / f"{split}.de").write_text("w2 w1\n")
    options = ParallelOptions(data_dir=str(tmp_path), vocab_size=60, max_train=3)
    with pytest.raises(AtnatError, match=r"train: .*train.en has 5 lines but .*train.de has 7; parallel files need "
                                         "equal line counts"):
        ParallelTask(options, cache_dir=tmp_path / "spm").load()


@pytest.mark.parametrize("damage", ["infinity", "deep"])
def test_a_meta_json_python_cannot_turn_into_numbers_is_set_aside(tmp_path, capsys, damage):
    src, tgt = corpus(200)
    tok = SymbolTokenizer(WORDS)
    entry = prepare(SideText(lines=src), SideText(lines=tgt), tok, name="train", cache_dir=tmp_path)
    meta = (entry.folder / "meta.json").read_text()
    broken = (meta.replace('"bytes": ', '"bytes": Infinity, "was": ', 1) if damage == "infinity"
              else "[" * 100_000 + "]" * 100_000)
    (entry.folder / "meta.json").write_text(broken)
    healed = prepare(SideText(lines=src), SideText(lines=tgt), tok, name="train", cache_dir=tmp_path)
    assert "is damaged" in capsys.readouterr().err and healed.n == 200


def test_pairs_empty_on_a_side_are_counted_when_left_out(tmp_path, capsys):
    src, tgt = ["w1 w2", "", "w3", "w4 w5 w6 w7 w8"], ["w2 w1", "w9", "", "w1"]
    arrays = prepare(SideText(lines=src), SideText(lines=tgt), SymbolTokenizer(WORDS), name="t", cache_dir=tmp_path)
    assert len(PreparedSplit(arrays, name="t", max_len=4, drop_long=True)) == 1
    err = capsys.readouterr().err
    assert "1 of 4 pairs longer than max_len=4" in err and "2 of 4 pairs empty on a side were left out" in err
    assert len(encode_split(SymbolTokenizer(WORDS), src, tgt, name="u", max_len=4, drop_long=True)) == 1
    assert "2 of 4 pairs empty on a side were left out" in capsys.readouterr().err


def test_a_split_whose_read_failed_is_read_again_when_asked_again():
    from atnat.experiments.data.tasks import LazySplits

    attempts = []

    def read():
        attempts.append(1)
        if len(attempts) == 1:
            raise AtnatError("train.en: a read error")
        return ["a"], ["b"]
    splits = LazySplits({}, {"train": read})
    with pytest.raises(AtnatError, match="a read error"):
        splits["train"]
    assert list(splits) == ["train"] and splits["train"] == (["a"], ["b"])


def test_an_empty_cache_variable_is_no_folder(tmp_path):
    """ATNAT_CACHE set from an unset variable is "": the cache went into the current folder (a data folder)."""
    import os
    import subprocess
    import sys

    def cache_dir(value: str, home: Path = Path.home()) -> Path:
        code = "from atnat.experiments.data.tokenize import CACHE_DIR; print(CACHE_DIR)"
        return Path(subprocess.run([sys.executable, "-c", code], env={**os.environ, "ATNAT_CACHE": value, "HOME": str(home)},
                                   cwd=tmp_path, capture_output=True, text=True, check=True).stdout.strip())

    assert cache_dir("") == Path.home() / ".cache" / "atnat"
    # `~/c` was used as written: a folder named `~` in the current folder (and `rm -rf ~` to tidy it away)
    assert cache_dir("~/c", home=tmp_path / "home") == tmp_path / "home" / "c"
    assert cache_dir("rel") == tmp_path / "rel"  # made absolute: the same folder wherever the process goes


@pytest.mark.parametrize("forge", ["ids", "vocab_size"])
def test_an_entry_with_ids_beyond_the_vocabulary_is_set_aside_and_encoded_again(tmp_path, capsys, forge):
    """An entry rewritten with ids of another vocabulary and its meta.json's sha256 updated to match (or a meta.json
    naming another vocabulary) verified, and training failed mid-way with an IndexError in the embedding."""
    import hashlib

    src, tgt = corpus(300)
    tok = SymbolTokenizer(WORDS)
    entry = prepare(SideText(lines=src), SideText(lines=tgt), tok, name="train", cache_dir=tmp_path)
    before = np.array(entry.tgt_ids)
    meta = json.loads((entry.folder / "meta.json").read_text())
    if forge == "ids":
        ids = entry.folder / "tgt.ids"
        forged = np.array(entry.tgt_ids)
        forged[3] = tok.vocab_size + 100
        del entry
        ids.write_bytes(forged.tobytes())
        meta["files"]["tgt.ids"]["sha256"] = hashlib.sha256(ids.read_bytes()).hexdigest()
    else:
        meta["vocab_size"] = tok.vocab_size + 1
    (tmp_path / "prepared" / meta_folder(tmp_path) / "meta.json").write_text(json.dumps(meta))
    healed = prepare(SideText(lines=src), SideText(lines=tgt), tok, name="train", cache_dir=tmp_path)
    err = capsys.readouterr().err
    assert "is damaged" in err and ("beyond the vocabulary" in err or "vocab_size" in err), err
    assert np.array_equal(healed.tgt_ids, before)


def meta_folder(cache: Path) -> str:
    (folder,) = [p.name for p in (cache / "prepared").iterdir() if p.is_dir()]
    return folder


def test_text_that_spells_a_special_symbol_is_text_not_that_symbol(tmp_path):
    """`<mask>` and `<blank>` were sentencepiece user-defined symbols, which the encoder extracts wherever the text
    spells them: a line with the literal `<blank>` trained a CTC model on its own blank, and decoding dropped it."""
    lines = [f"a <mask> b <blank> c {w} dog sat on the mat, 2 < 3 > 1, kite" for w in ("red", "big", "old", "new")] * 40
    tok = SentencePieceTokenizer.train(lines, vocab_size=40, cache_dir=tmp_path)
    assert [tok.sp.id_to_piece(i) for i in range(6)] == ["<pad>", "<s>", "</s>", "<unk>", "<mask>", "<blank>"]
    ids = tok.encode("a <mask> b <blank> c")
    assert not {4, 5} & set(ids)
    assert tok.decode(ids) == "a <mask> b <blank> c"


def test_a_full_disk_while_encoding_names_the_cache_entry_and_leaves_nothing_half_written(tmp_path, monkeypatch):
    """The write's bare OSError reached the user as "No space left on device", naming no file and no remedy."""
    import builtins
    import errno

    from atnat.experiments.files import UnwritableError

    src, tgt = corpus(100)
    tok = SymbolTokenizer(WORDS)

    class Full:
        def __init__(self, path, mode):
            self.file, self.name = builtins.open(path, mode), str(path)

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def close(self):
            self.file.close()

    def full_disk(path, mode="r", *args, **kwargs):
        return Full(path, mode) if "w" in mode else builtins.open(path, mode, *args, **kwargs)

    monkeypatch.setattr(prep, "open", full_disk, raising=False)
    with pytest.raises(UnwritableError, match=r"cannot write .*prepared/.*\.tmp-\d+/src\.ids: the disk is full: free "
                                              r"space and run the same command again"):
        prepare(SideText(lines=src), SideText(lines=tgt), tok, name="train", cache_dir=tmp_path)
    assert [p.name for p in (tmp_path / "prepared").iterdir() if p.is_dir()] == []  # no entry, whole or half
    monkeypatch.undo()
    assert prepare(SideText(lines=src), SideText(lines=tgt), tok, name="train", cache_dir=tmp_path).n == 100


def test_a_tokenizer_cached_in_another_format_is_not_reused_through_its_memo(tmp_path, monkeypatch):
    """The memo that maps a training text to its cached model did not name how the model was made: a model
    cached with user-defined special symbols would have been found again after they became control symbols."""
    from atnat.experiments.data import tasks, tokenize

    for name, text in {"train.en": "w1 w2 w3\nw3 w2\n" * 30, "train.de": "w3 w2 w1\nw2 w3\n" * 30,
                       "val.en": "w1\n", "val.de": "w1\n", "test2016.en": "w2\n", "test2016.de": "w2\n"}.items():
        (tmp_path / name).write_text(text)
    options = ParallelOptions(data_dir=str(tmp_path), vocab_size=20)
    first = ParallelTask(options, cache_dir=tmp_path / "spm").load().tokenizer
    assert ParallelTask(options, cache_dir=tmp_path / "spm").load().tokenizer.cache_path == first.cache_path
    monkeypatch.setattr(tokenize, "SPM_FORMAT", "next")
    monkeypatch.setattr(tasks, "SPM_FORMAT", "next")
    assert ParallelTask(options, cache_dir=tmp_path / "spm").load().tokenizer.cache_path != first.cache_path


def test_a_cached_tokenizer_is_read_under_the_lock_its_writer_holds(tmp_path):
    """Workers started at once read the cached model without the lock `train` writes it under: one could set
    aside a model another was still recording, or fail setting aside one the other had already moved."""
    import threading

    from filelock import FileLock

    tok = SentencePieceTokenizer.train([f"w{i} w{i + 1} w{i + 2}" for i in range(60)], vocab_size=30, cache_dir=tmp_path)
    path, got = tok.cache_path, []
    with FileLock(path.with_suffix(".lock")):  # a writer at work
        reader = threading.Thread(target=lambda: got.append(SentencePieceTokenizer.load_cached(path)))
        reader.start()
        reader.join(0.5)
        assert reader.is_alive() and not got  # waits for the writer
    reader.join(10)
    assert got and got[0].proto == tok.proto and got[0].cache_path == path


def test_a_byte_order_mark_is_dropped_from_streamed_text_as_from_read_lines(tmp_path):
    """read_lines dropped a UTF-8 byte-order mark, but the training text streamed into the tokenizer and the
    prepared arrays kept it on the first line."""
    from atnat.experiments.data.tasks import read_lines

    path = tmp_path / "train.en"
    path.write_bytes("\ufeffw1 w2\r\nw3\n".encode())
    assert list(SideText(path=path, what="train source")) == read_lines(path, "train source") == ["w1 w2", "w3"]


def test_arrays_that_do_not_verify_right_after_they_were_written_are_not_said_to_be_encoded_again(tmp_path, monkeypatch,
                                                                                                 capsys):
    src, tgt = corpus(50)
    monkeypatch.setattr(prep, "_open", lambda folder, vocab, pairs, just_written=False, real_open=prep._open:
                        real_open(folder, vocab + 1 if just_written else vocab, pairs, just_written))  # it disagrees
    with pytest.raises(AtnatError, match=r"split 'train': the prepared arrays written to .* do not verify"):
        prepare(SideText(lines=src), SideText(lines=tgt), SymbolTokenizer(WORDS), name="train", cache_dir=tmp_path)
    said = capsys.readouterr().err
    assert "is damaged (meta.json's vocab_size" in said and "kept for a look" in said and "encoded again" not in said


def test_a_remembered_digest_that_does_not_match_the_file_is_forgotten_so_that_running_again_works(tmp_path):
    """A stale or planted digest memo made every run fail with "changed after it was first read; run again"."""
    src, tgt = corpus(100)
    (tmp_path / "train.en").write_text("\n".join(src) + "\n")
    (tmp_path / "train.de").write_text("\n".join(tgt) + "\n")
    SideText(path=tmp_path / "train.de").digest()  # remembered
    (memo,) = [p for p in (CACHE_DIR / "digests").glob("*.json")
               if json.loads(p.read_text())["identity"]["path"] == str((tmp_path / "train.de").resolve())]
    planted = json.loads(memo.read_text())
    memo.write_text(json.dumps({**planted, "sha256": "0" * 64}))  # the same file, another text's digest

    def sides():
        return SideText(path=tmp_path / "train.en"), SideText(path=tmp_path / "train.de")
    with pytest.raises(AtnatError, match=r"train.de changed after it was first read .*run again"):
        prepare(*sides(), SymbolTokenizer(WORDS), name="train", cache_dir=tmp_path / "cache")
    assert prepare(*sides(), SymbolTokenizer(WORDS), name="train", cache_dir=tmp_path / "cache").n == 100  # run again


def test_a_cached_tokenizer_that_cannot_be_read_is_left_as_it_is_and_an_empty_record_is_damage(tmp_path, monkeypatch):
    """Any OSError reading a cached model set it aside as damaged (a failing disk, no permission: a good model moved
    away); an empty .sha256 record raised IndexError."""
    lines = [f"w{i} w{i + 1} w{i + 2}" for i in range(60)]
    path = SentencePieceTokenizer.train(lines, vocab_size=30, cache_dir=tmp_path).cache_path
    real = Path.read_bytes

    def failing(self):
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)
    monkeypatch.setattr(Path, "read_bytes", failing)
    with pytest.raises(AtnatError, match=r"cached sentencepiece model .* cannot be read .*Permission denied.*left as it is"):
        SentencePieceTokenizer.load_cached(path)
    monkeypatch.undo()
    assert path.is_file() and not list(tmp_path.glob("*.damaged-*"))
    path.with_name(path.name + ".sha256").write_text("")
    assert SentencePieceTokenizer.load_cached(path) is None and list(tmp_path.glob("*.damaged-*"))


def test_a_half_written_entry_of_another_key_is_removed_unless_it_is_being_written(tmp_path):
    """A preparation killed before its data (or tokenizer, or limit) changed left its temporary folder for good:
    only the same key's encoding removed it, and that key never came again (gigabytes at WMT14's size)."""
    from filelock import FileLock

    src, tgt = corpus(50)
    tok = SymbolTokenizer(WORDS)
    root = tmp_path / "prepared"
    root.mkdir()
    abandoned, busy = root / ("a" * 24 + ".tmp-123"), root / ("b" * 24 + ".tmp-456")
    for left in (abandoned, busy):
        left.mkdir()
        (left / "src.ids").write_bytes(b"half")
    with FileLock(root / f"{'b' * 24}.lock"):  # another encoder writing its entry now
        entry = prepare(SideText(lines=src), SideText(lines=tgt), tok, name="train", cache_dir=tmp_path).folder
    assert entry.is_dir() and not abandoned.exists() and busy.is_dir()


def test_an_entry_copied_under_another_splits_key_is_not_that_split(tmp_path, capsys):
    """A review's finding: an entry verified only against itself; the valid split's 50 pairs copied into the
    train split's folder were returned as the training data, 50 pairs where the files hold 400."""
    import shutil

    tok = SymbolTokenizer(WORDS)
    train_src, train_tgt = corpus(400, seed=1)
    valid_src, valid_tgt = corpus(50, seed=2)
    train = prepare(SideText(lines=train_src), SideText(lines=train_tgt), tok, name="train", cache_dir=tmp_path)
    valid = prepare(SideText(lines=valid_src), SideText(lines=valid_tgt), tok, name="valid", cache_dir=tmp_path)
    folder = train.folder
    shutil.rmtree(folder)
    shutil.copytree(valid.folder, folder)
    again = prepare(SideText(lines=train_src), SideText(lines=train_tgt), tok, name="train", cache_dir=tmp_path)
    assert again.n == 400 and "another key's entry" in capsys.readouterr().err


@pytest.mark.parametrize("how", ["streamed", "read whole"])
def test_a_file_with_carriage_returns_for_line_ends_is_one_clear_error(tmp_path, how):
    """A review's finding: a test split saved with old Mac line ends (\\r alone) was read as one sentence, and
    evaluated as a 1-pair test set without a word."""
    from atnat.experiments.data.tasks import read_lines

    path = tmp_path / "test.de"
    path.write_bytes(b"ein Hund\rzwei Katzen\rdrei\r")
    with pytest.raises(AtnatError, match=r"test target: .*test\.de line 1 holds a carriage return inside it .*\\n"):
        list(SideText(path=path, what="test target")) if how == "streamed" else read_lines(path, "test target")
    path.write_bytes(b"ein Hund\r\nzwei Katzen\r\n")  # Windows line ends: fine
    assert list(SideText(path=path, what="test target")) == read_lines(path, "test target") == ["ein Hund", "zwei Katzen"]


def test_atnat_data_prepare_encodes_with_the_cores_the_job_may_use(monkeypatch, tmp_path):
    """A review's finding: the default thread count was every core of the host (os.cpu_count), not the job's: under
    taskset or a cluster allotment of 1 core it encoded with the host's count, oversubscribed."""
    import os

    from atnat.core.cores import usable_cores
    from atnat.experiments.running import data_prepare

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert usable_cores() == 1
    from types import SimpleNamespace as NS

    threads = []
    arrays = NS(n=1, src_offsets=[0, 1], tgt_offsets=[0, 1], meta={"dtype": "uint16"}, folder=tmp_path)
    monkeypatch.setattr(data_prepare, "configs_of", lambda path: [NS(task={"name": "copy"})])
    monkeypatch.setattr(data_prepare, "load_task", lambda cfg: NS(splits={"train": None}))
    monkeypatch.setattr(data_prepare, "prepared_split", lambda task, split, **kw: threads.append(kw["threads"])
                        or NS(arrays=arrays))
    data_prepare.prepare_configs(tmp_path / "g.yaml", log=lambda text: None)
    assert threads == [1]
