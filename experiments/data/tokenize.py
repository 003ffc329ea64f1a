"""Tokenizers: whitespace symbols (synthetic tasks) and sentencepiece (real text).

Every vocabulary starts with the special symbols of atnat.core.special.SpecialTokens (ids 0..5),
so all decoders share one id convention. A tokenizer serialises to a dict stored in checkpoints.
"""
from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path
from typing import Iterable

from filelock import FileLock

from atnat.core.errors import AtnatError
from atnat.core.special import SpecialTokens
from atnat.experiments.files import atomic_write_bytes

SPECIAL_SYMBOLS = ("<pad>", "<s>", "</s>", "<unk>", "<mask>", "<blank>")
MIN_SENTENCEPIECE_VOCAB = len(SPECIAL_SYMBOLS) + 2  # the special symbols and at least two pieces
SPECIAL = SpecialTokens()
# how cached sentencepiece models are made, in their cache keys: "control" = the special symbols are control
# symbols (text that spells `<mask>` stays text); models cached before, with user-defined symbols, are not reused
SPM_FORMAT = "control"
CACHE_DIR = Path(os.environ.get("ATNAT_CACHE") or Path.home() / ".cache" / "atnat").expanduser().absolute()
# sentencepiece models, prepared splits, digests. An empty $ATNAT_CACHE (set from an unset variable) is no folder,
# not the current one; `~/c` is the home's, not a folder named `~` here


def one_line(text: str) -> str:
    """`text` with every line break (each that str.splitlines knows) made a space: one output line per input line,
    whatever a model's pieces hold."""
    return " ".join(text.splitlines())


class SymbolTokenizer:
    """Whitespace-separated symbols from a fixed list (synthetic tasks): exact round trip."""

    kind = "symbols"

    def __init__(self, symbols: list[str]):
        self.symbols = list(SPECIAL_SYMBOLS) + [s for s in symbols if s not in SPECIAL_SYMBOLS]
        self.index = {s: i for i, s in enumerate(self.symbols)}
        for number, symbol in enumerate(symbols, 1):  # each must come back from its own text, as itself
            problem = "is empty" if not symbol else "holds white space" if symbol.split() != [symbol] else ""
            if problem:
                raise AtnatError(f"symbol {symbol!r} (number {number}) {problem}: symbols are read back split at "
                                 "white space")
        if len(self.index) != len(self.symbols):
            twice = next(s for i, s in enumerate(self.symbols) if self.index[s] != i)
            raise AtnatError(f"symbol {twice!r} comes twice: two ids would print as one")

    @property
    def vocab_size(self) -> int:
        return len(self.symbols)

    def encode(self, text: str) -> list[int]:
        return [self.index.get(tok, SPECIAL.unk) for tok in text.split()]

    def encode_batch(self, texts: list[str], threads: int = 1) -> list[list[int]]:
        return [self.encode(text) for text in texts]

    def decode(self, ids: Iterable[int]) -> str:
        return " ".join(self.symbols[i] for i in ids if i >= len(SPECIAL_SYMBOLS))  # (no symbol holds a break)

    def to_state(self) -> dict:
        return {"kind": self.kind, "symbols": self.symbols[len(SPECIAL_SYMBOLS):]}


class SentencePieceTokenizer:
    """A sentencepiece model (unigram by default) with atnat's special ids; detokenises exactly."""

    kind = "sentencepiece"

    def __init__(self, model_proto: bytes):
        import sentencepiece as spm

        self.proto = model_proto
        self.sp = spm.SentencePieceProcessor(model_proto=model_proto)
        if self.sp.get_piece_size() < MIN_SENTENCEPIECE_VOCAB:  # an empty proto loads, and fails at encode
            raise AtnatError(f"not a usable sentencepiece model ({len(model_proto)} bytes, "
                             f"{self.sp.get_piece_size()} pieces)")

    @classmethod
    def train(cls, texts: Iterable[str], *, vocab_size: int, cache_dir: Path, model_type: str = "unigram",
              what: str = "training text") -> "SentencePieceTokenizer":
        """Train on `texts` (or load the cached model trained on the same texts and settings);
        `what` names the texts (files, split) in errors."""
        lines = [t for t in texts if t.strip()]
        if not lines:
            raise AtnatError(f"{what}: only blank lines, no text to train the sentencepiece vocabulary on")
        key = hashlib.sha256("\n".join(lines).encode() + f"|{vocab_size}|{model_type}|{SPM_FORMAT}".encode()).hexdigest()[:16]
        cache_dir.mkdir(parents=True, exist_ok=True)
        path = cache_dir / f"spm-{key}.model"
        with FileLock(path.with_suffix(".lock")):  # cells started at once by parallel workers: one trains
            tokenizer = cls._cached(path)
            if tokenizer is None:
                cls._train_to(path, lines, vocab_size, model_type)
                tokenizer = cls(path.read_bytes())
            tokenizer.cache_path = path
            return tokenizer

    @classmethod
    def load_cached(cls, path: Path) -> "SentencePieceTokenizer | None":
        """The cached model at `path` (verified), or None; under the model's lock, as `train` writes it, so that
        processes started at once neither read it half-recorded nor set it aside twice."""
        with FileLock(path.with_suffix(".lock")):
            tokenizer = cls._cached(path)
            if tokenizer is not None:
                tokenizer.cache_path = path
            return tokenizer

    @classmethod
    def _cached(cls, path: Path) -> "SentencePieceTokenizer | None":
        """The cached model at `path`, or None when there is none; a damaged one (empty, truncated,
        without or not matching its recorded sha256) is set aside with a message naming it, and trained again."""
        if not path.exists():
            return None
        recorded = path.with_name(path.name + ".sha256")
        try:  # the machine's trouble (a failing disk, no permission) is not the model's: it is left as it is
            data = path.read_bytes()
            record = recorded.read_text(encoding="utf-8", errors="replace") if recorded.is_file() else None
        except OSError as err:
            raise AtnatError(f"the cached sentencepiece model {path} cannot be read ({err}); it is left as it is: fix "
                             "the cause and run again") from None
        try:
            if record is None:  # (killed between the two writes, or replaced by hand)
                raise ValueError(f"no sha256 recorded for it in {recorded.name}")
            if (record.split() or [""])[0] != hashlib.sha256(data).hexdigest():
                raise ValueError("it does not match the sha256 recorded when it was written")
            return cls(data)
        except Exception as err:  # noqa: BLE001 - sentencepiece raises RuntimeError/OSError on a bad proto
            aside = path.with_name(f"{path.name}.damaged-{int(time.time())}")
            os.replace(path, aside)
            print(f"atnat: the cached sentencepiece model {path} is damaged ({err}); set aside as {aside.name} "
                  "and trained again", file=sys.stderr)
            return None

    @staticmethod
    def _train_to(path: Path, lines: list[str], vocab_size: int, model_type: str) -> None:
        import io

        import sentencepiece as spm

        buf = io.BytesIO()
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(lines), model_writer=buf, vocab_size=vocab_size,
                model_type=model_type, character_coverage=1.0, pad_id=0, bos_id=1, eos_id=2, unk_id=3,
                control_symbols=list(SPECIAL_SYMBOLS[4:]), minloglevel=2,
                hard_vocab_limit=False, num_threads=2)
        except RuntimeError as err:
            raise AtnatError(f"sentencepiece training failed (vocab_size={vocab_size}): {err}") from err
        data = buf.getvalue()
        atomic_write_bytes(path, data)
        digest = hashlib.sha256(data).hexdigest()
        atomic_write_bytes(path.with_name(path.name + ".sha256"), f"{digest}  {path.name}\n".encode())

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(text)

    def encode_batch(self, texts: list[str], threads: int = 1) -> list[list[int]]:
        """Many lines at once, in sentencepiece's own threads: the same ids as encode, line by line."""
        return self.sp.encode(texts, num_threads=threads)

    def decode(self, ids: Iterable[int]) -> str:
        return one_line(self.sp.decode([i for i in ids if i >= len(SPECIAL_SYMBOLS)]))

    def to_state(self) -> dict:
        return {"kind": self.kind, "model_proto": self.proto}


def tokenizer_from_state(state: dict):
    if state["kind"] == "symbols":
        return SymbolTokenizer(state["symbols"])
    if state["kind"] == "sentencepiece":
        return SentencePieceTokenizer(state["model_proto"])
    raise AtnatError(f"unknown tokenizer kind {state['kind']!r} in checkpoint")
