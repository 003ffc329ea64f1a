"""Tasks: built-in synthetic tasks generated from a seed, and parallel text files.

A task yields `TaskData`: sentences per split (strings), the tokenizer, and how BLEU tokenises.
Synthetic tasks are string-level too, so every metric and report treats them like real text.
"""
from __future__ import annotations

import hashlib
import json
import random
import re
import sys
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ClassVar

from atnat.core.errors import AtnatError
from atnat.core.options import require_at_least, require_optional_at_least
from atnat.core.registry import Registry
from atnat.experiments.data.prepared import SideText
from atnat.experiments.data.tokenize import MIN_SENTENCEPIECE_VOCAB, SPM_FORMAT, SentencePieceTokenizer, SymbolTokenizer
from atnat.experiments.files import check_no_carriage_return, check_readable, read_utf8, write_json_atomic

SPLITS = ("train", "valid", "test")


class LazySplits(Mapping):
    """splits[name] = (sources, targets), a split read from its files only when first asked for (a
    training split of millions of lines is read by the few steps that need its text, not by every run)."""

    def __init__(self, loaded: dict[str, tuple[list[str], list[str]]],
                 later: dict[str, Callable[[], tuple[list[str], list[str]]]]):
        self._loaded, self._later = dict(loaded), dict(later)

    def __getitem__(self, name: str) -> tuple[list[str], list[str]]:
        if name not in self._loaded:
            self._loaded[name] = self._later[name]()  # (a read that fails stays to be tried again)
            del self._later[name]
        return self._loaded[name]

    def __iter__(self):
        return iter(sorted({*self._loaded, *self._later}, key=lambda n: (SPLITS + (n,)).index(n)))

    def __len__(self) -> int:
        return len({*self._loaded, *self._later})


@dataclass
class TaskData:
    """Sentences per split: splits[name] = (sources, targets); plus the tokenizer and BLEU settings.
    `texts[name]`, where a task gives it, streams a split's two sides from their files (what a prepared
    split is encoded from, without reading the whole split into memory)."""

    splits: Mapping[str, tuple[list[str], list[str]]]
    tokenizer: object
    bleu_tokenize: str = "13a"  # sacrebleu tokenizer: "none" for symbol tasks
    token_variant: dict[int, int] = field(default_factory=dict)  # dialect: target id -> variant
    extra_references: dict[str, list[list[str]]] = field(default_factory=dict)  # split -> further
    # reference streams beside the targets (dialect: every variant of each sentence)
    lang: str = "en"  # target language (Moses tokenisation of the paper-comparable BLEU)
    texts: dict[str, tuple[SideText, SideText]] = field(default_factory=dict)

    def side_texts(self, split: str) -> tuple[SideText, SideText]:
        """The split's two sides to encode: streamed from its files where the task names them, else its
        sentences in memory."""
        if split in self.texts:
            return self.texts[split]
        src, tgt = self.splits[split]
        return SideText(lines=src, what=f"{split} source"), SideText(lines=tgt, what=f"{split} target")

    def references(self, split: str) -> list[list[str]]:
        """Every reference stream of a split: the targets first, then the extra ones."""
        return [list(self.splits[split][1]), *self.extra_references.get(split, [])]


class Task(ABC):
    Options: ClassVar[type]
    registered_name: ClassVar[str] = ""
    splits: ClassVar[tuple[str, ...]] = SPLITS  # the splits load() gives (eval.split is one of them)
    test_only: ClassVar[tuple[str, ...]] = ()  # options that choose only the test split: changing one re-evaluates
    # a finished run instead of training it again

    def __init__(self, options, *, cache_dir: Path):
        self.options, self.cache_dir = options, cache_dir

    @abstractmethod
    def load(self) -> TaskData:
        """Build or read the splits and the tokenizer."""

    def check_files(self) -> None:
        """Refuse, when the config is read, a file the task would read later (missing, a folder, a FIFO):
        one AtnatError naming it, before anything trains. Tasks that read no files have none to check."""

    def unequal_line_counts(self) -> list[str]:
        """Each split whose two files (both there) have unequal line counts, named with both counts; counted from the
        files' remembered digests (hashed once: the pass training makes anyway), nothing decoded."""
        problems = []
        for split in SPLITS:
            sides = [self.path(split, side) for side in ("src", "tgt")]
            if all(p.is_file() for p in sides):
                counts = [SideText(path=p, what=f"{split} {side}").digest()[1] for p, side in zip(sides, ("source", "target"))]
                if counts[0] != counts[1]:
                    problems.append(f"{split}: {sides[0]} has {counts[0]} lines but {sides[1]} has {counts[1]}; "
                                    "parallel files need equal line counts")
        return problems

    def extra_split(self, name: str) -> tuple[list[str], list[str]]:
        """(sources, targets) of a further test split (`eval.extra_tests`), e.g. test2017 beside test2016."""
        raise AtnatError(f"task {self.registered_name!r} has no further test splits (eval.extra_tests needs a "
                         "task that reads split files, e.g. parallel)")


TASKS: Registry[Task] = Registry("task", Task, entry_point_group="atnat.tasks")
register_task = TASKS.register


@dataclass(frozen=True)
class SyntheticOptions:
    """Size and seed of a generated task."""

    vocab: int = 16  # distinct source symbols
    min_len: int = 3  # shortest source sentence
    max_len: int = 12  # longest source sentence
    n_train: int = 20000  # training pairs
    n_valid: int = 200  # validation pairs
    n_test: int = 200  # test pairs
    seed: int = 1  # generator seed (data differ per seed, not per model seed)
    variants: int = 2  # dialect only: number M of consistent target variants

    def __post_init__(self) -> None:
        require_at_least(self.vocab, 2, "task", "vocab")
        for name in ("min_len", "n_train", "n_valid", "n_test", "variants"):
            require_at_least(getattr(self, name), 1, "task", name)
        require_at_least(self.max_len, self.min_len, "task", "max_len")


class SyntheticTask(Task):
    """Source: random symbol strings; target: a deterministic (or, for dialect, M-modal) function."""

    Options = SyntheticOptions
    test_only = ("n_test",)  # each split has its own generator: the test split's size changes no other

    def symbols(self) -> list[str]:
        return [f"w{i}" for i in range(self.options.vocab)]

    def target_symbols(self) -> list[str]:
        return self.symbols()

    @abstractmethod
    def transform(self, src: list[int], rng: random.Random) -> list[str]:
        """Source symbol indices -> target symbols."""

    def load(self) -> TaskData:
        o = self.options
        if not 1 <= o.min_len <= o.max_len:
            raise AtnatError(f"task options min_len={o.min_len}, max_len={o.max_len}: need 1 <= min_len <= max_len")
        sym = self.symbols()
        splits, extra = {}, {}
        for k, (name, n) in enumerate(zip(SPLITS, (o.n_train, o.n_valid, o.n_test))):
            rng = random.Random(o.seed * 1000 + k)
            pairs, sources = [], []
            for _ in range(n):
                src = [rng.randrange(o.vocab) for _ in range(rng.randint(o.min_len, o.max_len))]
                sources.append(src)
                pairs.append((" ".join(sym[i] for i in src), " ".join(self.checked_target(src, rng))))
            splits[name] = ([s for s, _ in pairs], [t for _, t in pairs])
            others = self.other_references(sources)
            if others:
                extra[name] = others
        tok = SymbolTokenizer(sym + [s for s in self.target_symbols() if s not in sym])
        return TaskData(splits, tok, bleu_tokenize="none", token_variant=self.token_variant(tok),
                        extra_references=extra)

    def checked_target(self, src: list[int], rng: random.Random) -> list[str]:
        """`transform`'s target when it is a list of symbol strings: a task that returns indices or one string is
        named here, not by a join that fails without saying whose output it was."""
        target = self.transform(src, rng)
        where = (f"task {self.registered_name!r} ({type(self).__module__}.{type(self).__qualname__}): transform() must "
                 "return the target as a list of symbol strings (e.g. ['w3', 'w1'])")
        if not isinstance(target, (list, tuple)):
            raise AtnatError(f"{where}, not {type(target).__name__} {target!r}")
        bad = [t for t in target if not isinstance(t, str)]
        if bad:
            raise AtnatError(f"{where}; it returned {type(bad[0]).__name__} {bad[0]!r} among them")
        return list(target)

    def token_variant(self, tok: SymbolTokenizer) -> dict[int, int]:
        return {}

    def other_references(self, sources: list[list[int]]) -> list[list[str]]:
        """Reference streams besides the sampled targets: every other correct output (none here)."""
        return []


@register_task("copy")
class CopyTask(SyntheticTask):
    """The target is the source: the easiest task, a sanity check of training. A NAT that copies its source into
    its inputs and is given the right length solves it untrained: judge such a decoder on `fertility` or `reverse`."""

    def transform(self, src, rng):
        return [f"w{i}" for i in src]


@register_task("reverse")
class ReverseTask(SyntheticTask):
    """The target is the source reversed: long-range reordering."""

    def transform(self, src, rng):
        return [f"w{i}" for i in reversed(src)]


@register_task("sort")
class SortTask(SyntheticTask):
    """The target is the source sorted: reordering that depends on the content."""

    def transform(self, src, rng):
        return [f"w{i}" for i in sorted(src)]


@register_task("fertility")
class FertilityTask(SyntheticTask):
    """Symbol i becomes 1 + i % 3 target symbols (i*7+j) % V, j < fertility: lengths differ."""

    def transform(self, src, rng):
        v = self.options.vocab
        return [f"w{(i * 7 + j) % v}" for i in src for j in range(1 + i % 3)]


@register_task("dialect")
class DialectTask(SyntheticTask):
    """Each sentence is written in one of M variants picked at random; variant m renders symbol i
    as `v{m}x{i}` (disjoint vocabularies). Multi-modal by construction: a knob for NAT studies."""

    def target_symbols(self) -> list[str]:
        return [f"v{m}x{i}" for m in range(self.options.variants) for i in range(self.options.vocab)]

    def transform(self, src, rng):
        m = rng.randrange(self.options.variants)
        return [f"v{m}x{i}" for i in src]

    def other_references(self, sources):
        """Every variant is a correct translation: scoring against the sampled one alone would make
        BLEU a coin flip (the variant of a test reference is drawn independently of its source)."""
        return [[" ".join(f"v{m}x{i}" for i in src) for src in sources] for m in range(self.options.variants)]

    def token_variant(self, tok: SymbolTokenizer) -> dict[int, int]:
        return {tok.index[s]: int(s[1:s.index("x")]) for s in self.target_symbols()}


DEFAULT_DATA_DIR = "../shared/data/multi30k"


@dataclass(frozen=True)
class ParallelOptions:
    """Parallel text files: `{data_dir}/{split}.{lang}` unless a file is named explicitly."""

    data_dir: str = DEFAULT_DATA_DIR  # folder of the split files (relative to the CWD)
    src: str = "en"  # source language suffix
    tgt: str = "de"  # target language suffix
    train: str = "train"  # split names (file stems)
    valid: str = "val"
    test: str = "test2016"
    files: dict | None = None  # explicit paths {train_src, train_tgt, valid_src, ...}; the rest from a data_dir given
    vocab_size: int = 8000  # joint sentencepiece vocabulary size
    max_train: int | None = None  # use only the first N training pairs (smoke runs)
    max_eval: int | None = None  # use only the first N valid/test pairs (smoke runs)
    tokenizer_sample: int = 300_000  # training pairs sentencepiece learns from: a seeded sample where there are more

    def __post_init__(self) -> None:
        require_at_least(self.vocab_size, MIN_SENTENCEPIECE_VOCAB, "task", "vocab_size")
        require_at_least(self.tokenizer_sample, 1, "task", "tokenizer_sample")
        require_optional_at_least(self.max_train, 1, "task", "max_train")
        require_optional_at_least(self.max_eval, 1, "task", "max_eval")
        if self.files is not None and (self.files != {} or not isinstance(self.files, dict)):  # {}: as none
            self._check_files_option()

    def _check_files_option(self) -> None:
        """task.files: known keys, each a path; a split file it leaves out is read from data_dir only where
        data_dir is given (the default folder holds another data set: a test split from there would be scored
        without a word)."""
        if not isinstance(self.files, dict):
            raise AtnatError(f"task.files: expected a mapping of {', '.join(ParallelTask.FILE_KEYS)} to paths, "
                             f"got {self.files!r}")
        unknown = sorted(set(self.files) - set(ParallelTask.FILE_KEYS))
        if unknown:
            raise AtnatError(f"task.files: unknown key(s) {unknown}; valid: {', '.join(ParallelTask.FILE_KEYS)}")
        for key, value in self.files.items():
            if not isinstance(value, str) or not value.strip():
                raise AtnatError(f"task.files.{key}: expected a file path, got {value!r}")
        missing = [k for k in ParallelTask.FILE_KEYS if k not in self.files]
        if missing and self.data_dir == DEFAULT_DATA_DIR:
            raise AtnatError(f"task.files names some split files but not {', '.join(missing)}: name every file, or "
                             f"give task.data_dir, the folder the others are read from (other than the default, "
                             f"{DEFAULT_DATA_DIR}, which holds another data set)")


def read_lines(path: Path, what: str) -> list[str]:
    """Read a UTF-8 text file, one sentence per line; one clear error for each bad input. A byte-order mark at
    its start (some editors write one) is no text of its first sentence."""
    text = read_utf8(check_readable(path, what), f"{what}: ").removeprefix("\ufeff")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise AtnatError(f"{what}: {path} is empty")
    lines = [line.rstrip("\r") for line in lines]
    for number, line in enumerate(lines, 1):
        check_no_carriage_return(line, what, path, number)
    return lines



FETCHABLE = {"multi30k": "multi30k", "wmt14-en-de": "wmt14-en-de"}  # a data_dir's folder name -> `atnat data`


@register_task("parallel")
class ParallelTask(Task):
    """Parallel text files (one sentence per line) with a joint sentencepiece vocabulary."""

    Options = ParallelOptions
    test_only = ("test",)  # the tokenizer learns from the training split only
    FILE_KEYS = tuple(f"{s}_{side}" for s in SPLITS for side in ("src", "tgt"))

    def path(self, split: str, side: str) -> Path:
        o = self.options
        files = o.files or {}  # keys and values checked with the options
        if f"{split}_{side}" in files:
            return Path(files[f"{split}_{side}"]).expanduser()
        stem = {"train": o.train, "valid": o.valid, "test": o.test}[split]
        return Path(o.data_dir).expanduser() / f"{stem}.{o.src if side == 'src' else o.tgt}"

    def check_files(self) -> None:
        for split in SPLITS:
            for side in ("src", "tgt"):
                path = self.path(split, side)
                try:
                    check_readable(path, f"task: {split} {'source' if side == 'src' else 'target'}")
                except AtnatError as err:
                    named = f"{split}_{side}" in (self.options.files or {})  # not from data_dir: nothing to fetch there
                    fetch = FETCHABLE.get(Path(self.options.data_dir).name) if not path.exists() and not named else None
                    if fetch is None:
                        raise
                    raise AtnatError(f"{err}; fetch the data set there first: atnat data {fetch} "
                                     f"{self.options.data_dir}") from None

    def extra_split(self, name: str) -> tuple[list[str], list[str]]:
        """`{data_dir}/{name}.{src}` and `.{tgt}`, read and checked like the other splits; with `files`, only
        from a data_dir given (the default one holds another data set)."""
        o = self.options
        if o.files and o.data_dir == DEFAULT_DATA_DIR:
            raise AtnatError(f"extra test split {name}: it is read from task.data_dir ({name}.{o.src} and {name}.{o.tgt} "
                             "there), and this task names its files (task.files) without one; give task.data_dir, "
                             "the folder that holds them")
        base = Path(o.data_dir).expanduser()
        src = read_lines(base / f"{name}.{o.src}", f"extra test split {name} source")
        tgt = read_lines(base / f"{name}.{o.tgt}", f"extra test split {name} target")
        if len(src) != len(tgt):
            raise AtnatError(f"extra test split {name}: {base / f'{name}.{o.src}'} has {len(src)} lines but "
                             f"{base / f'{name}.{o.tgt}'} has {len(tgt)}; parallel files need equal line counts")
        return (src[: o.max_eval], tgt[: o.max_eval]) if o.max_eval else (src, tgt)

    def load(self) -> TaskData:
        """Validation and test sentences read; the training split streamed from its files when encoded
        (and read whole only where a step needs its text, e.g. distillation)."""
        o = self.options
        self.check_files()  # every file there and readable before any is read
        splits = {}
        for split in ("valid", "test"):
            splits[split] = self._read(split, o.max_eval)
        train = (SideText(path=self.path("train", "src"), limit=o.max_train, what="train source"),
                 SideText(path=self.path("train", "tgt"), limit=o.max_train, what="train target"))
        tok = self._tokenizer(*train)
        texts = {"train": train}
        return TaskData(LazySplits(splits, {"train": lambda: self._read("train", o.max_train)}), tok,
                        bleu_tokenize="13a", lang=o.tgt, texts=texts)

    def _read(self, split: str, limit: int | None) -> tuple[list[str], list[str]]:
        src_path, tgt_path = self.path(split, "src"), self.path(split, "tgt")
        src = read_lines(src_path, f"{split} source")
        tgt = read_lines(tgt_path, f"{split} target")
        if len(src) != len(tgt):
            raise AtnatError(f"{split}: {src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}; "
                             "parallel files need equal line counts")
        return (src[:limit], tgt[:limit]) if limit else (src, tgt)

    def _tokenizer(self, src: SideText, tgt: SideText) -> SentencePieceTokenizer:
        """The joint sentencepiece model of the training split: learned from all its pairs, or from a seeded
        sample of `tokenizer_sample` pairs where it has more; cached, and found again from the files'
        sha256 (a memo in the cache names the model) without reading the split."""
        o = self.options
        (src_sha, n_src), (tgt_sha, n_tgt) = src.digest(), tgt.digest()
        # the whole files: a limit must not hide parallel files of unequal lengths (remembered digests)
        whole = [SideText(path=side.path, what=side.what).digest()[1] for side in (src, tgt)] if src.limit \
            else [n_src, n_tgt]
        if whole[0] != whole[1]:
            raise AtnatError(f"train: {src.path} has {whole[0]} lines but {tgt.path} has {whole[1]}; parallel files "
                             "need equal line counts")
        what = f"train split ({src.path}, {tgt.path})"
        settings = {"src": src_sha, "tgt": tgt_sha, "vocab_size": o.vocab_size, "sample": min(o.tokenizer_sample, n_src),
                    "seed": TOKENIZER_SAMPLE_SEED, "format": SPM_FORMAT}
        memo = self.cache_dir / f"corpus-{hashlib.sha256(json.dumps(settings).encode()).hexdigest()[:16]}.json"
        model = _memo_model(memo, self.cache_dir)
        if model is not None:
            cached = SentencePieceTokenizer.load_cached(model)
            if cached is not None:
                return cached
        if n_src <= o.tokenizer_sample:
            lines = [*src, *tgt]
        else:
            chosen = set(random.Random(TOKENIZER_SAMPLE_SEED).sample(range(n_src), o.tokenizer_sample))
            lines = [line for side in (src, tgt) for i, line in enumerate(side) if i in chosen]
            print(f"atnat: the sentencepiece vocabulary is learned from a seeded sample of {o.tokenizer_sample:,} of "
                  f"the {n_src:,} training pairs (task.tokenizer_sample)", file=sys.stderr)
        tok = SentencePieceTokenizer.train(lines, vocab_size=o.vocab_size, cache_dir=self.cache_dir, what=what)
        write_json_atomic(memo, {"model": tok.cache_path.name, **settings})
        return tok


TOKENIZER_SAMPLE_SEED = 0


def _memo_model(memo: Path, cache_dir: Path) -> Path | None:
    """The cached model a memo names, or None; a memo is only a name: the model it names is verified
    (sha256) when loaded, and a name that is not a cached model's is ignored."""
    try:
        name = json.loads(memo.read_text(encoding="utf-8"))["model"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return cache_dir / name if isinstance(name, str) and re.fullmatch(r"spm-[0-9a-f]{16}\.model", name) else None
