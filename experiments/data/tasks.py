"""Tasks: built-in synthetic tasks generated from a seed, and parallel text files.

A task yields `TaskData`: sentences per split (strings), the tokenizer, and how BLEU tokenises.
Synthetic tasks are string-level too, so every metric and report treats them like real text.
"""
from __future__ import annotations

import random
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from atnat.core.errors import AtnatError
from atnat.core.options import require_at_least, require_optional_at_least
from atnat.core.registry import Registry
from atnat.experiments.data.tokenize import MIN_SENTENCEPIECE_VOCAB, SentencePieceTokenizer, SymbolTokenizer
from atnat.experiments.files import check_readable, read_utf8

SPLITS = ("train", "valid", "test")


@dataclass
class TaskData:
    """Sentences per split: splits[name] = (sources, targets); plus the tokenizer and BLEU settings."""

    splits: dict[str, tuple[list[str], list[str]]]
    tokenizer: object
    bleu_tokenize: str = "13a"  # sacrebleu tokenizer: "none" for symbol tasks
    token_variant: dict[int, int] = field(default_factory=dict)  # dialect: target id -> variant
    extra_references: dict[str, list[list[str]]] = field(default_factory=dict)  # split -> further
    # reference streams beside the targets (dialect: every variant of each sentence)
    lang: str = "en"  # target language (Moses tokenisation of the paper-comparable BLEU)

    def references(self, split: str) -> list[list[str]]:
        """Every reference stream of a split: the targets first, then the extra ones."""
        return [list(self.splits[split][1]), *self.extra_references.get(split, [])]


class Task(ABC):
    Options: ClassVar[type]
    registered_name: ClassVar[str] = ""

    def __init__(self, options, *, cache_dir: Path):
        self.options, self.cache_dir = options, cache_dir

    @abstractmethod
    def load(self) -> TaskData:
        """Build or read the splits and the tokenizer."""

    def check_files(self) -> None:
        """Refuse, when the config is read, a file the task would read later (missing, a folder, a FIFO):
        one AtnatError naming it, before anything trains. Tasks that read no files have none to check."""

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
                pairs.append((" ".join(sym[i] for i in src), " ".join(self.transform(src, rng))))
            splits[name] = ([s for s, _ in pairs], [t for _, t in pairs])
            others = self.other_references(sources)
            if others:
                extra[name] = others
        tok = SymbolTokenizer(sym + [s for s in self.target_symbols() if s not in sym])
        return TaskData(splits, tok, bleu_tokenize="none", token_variant=self.token_variant(tok),
                        extra_references=extra)

    def token_variant(self, tok: SymbolTokenizer) -> dict[int, int]:
        return {}

    def other_references(self, sources: list[list[int]]) -> list[list[str]]:
        """Reference streams besides the sampled targets: every other correct output (none here)."""
        return []


@register_task("copy")
class CopyTask(SyntheticTask):
    """The target is the source: the easiest task, a sanity check of any decoder."""

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


@dataclass(frozen=True)
class ParallelOptions:
    """Parallel text files: `{data_dir}/{split}.{lang}` unless a file is named explicitly."""

    data_dir: str = "../shared/data/multi30k"  # folder of the split files (relative to the CWD)
    src: str = "en"  # source language suffix
    tgt: str = "de"  # target language suffix
    train: str = "train"  # split names (file stems)
    valid: str = "val"
    test: str = "test2016"
    files: dict | None = None  # explicit paths {train_src, train_tgt, valid_src, ...}; override data_dir
    vocab_size: int = 8000  # joint sentencepiece vocabulary size
    max_train: int | None = None  # use only the first N training pairs (smoke runs)
    max_eval: int | None = None  # use only the first N valid/test pairs (smoke runs)

    def __post_init__(self) -> None:
        require_at_least(self.vocab_size, MIN_SENTENCEPIECE_VOCAB, "task", "vocab_size")
        require_optional_at_least(self.max_train, 1, "task", "max_train")
        require_optional_at_least(self.max_eval, 1, "task", "max_eval")


def read_lines(path: Path, what: str) -> list[str]:
    """Read a UTF-8 text file, one sentence per line; one clear error for each bad input."""
    text = read_utf8(check_readable(path, what), f"{what}: ")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise AtnatError(f"{what}: {path} is empty")
    return [line.rstrip("\r") for line in lines]


@register_task("parallel")
class ParallelTask(Task):
    """Parallel text files (one sentence per line) with a joint sentencepiece vocabulary."""

    Options = ParallelOptions
    FILE_KEYS = tuple(f"{s}_{side}" for s in SPLITS for side in ("src", "tgt"))

    def path(self, split: str, side: str) -> Path:
        o = self.options
        files = o.files or {}
        unknown = sorted(set(files) - set(self.FILE_KEYS))
        if unknown:
            raise AtnatError(f"task.files: unknown key(s) {unknown}; valid: {', '.join(self.FILE_KEYS)}")
        if f"{split}_{side}" in files:
            return Path(files[f"{split}_{side}"]).expanduser()
        stem = {"train": o.train, "valid": o.valid, "test": o.test}[split]
        return Path(o.data_dir).expanduser() / f"{stem}.{o.src if side == 'src' else o.tgt}"

    def check_files(self) -> None:
        for split in SPLITS:
            for side in ("src", "tgt"):
                check_readable(self.path(split, side), f"task: {split} {'source' if side == 'src' else 'target'}")

    def extra_split(self, name: str) -> tuple[list[str], list[str]]:
        """`{data_dir}/{name}.{src}` and `.{tgt}`, read and checked like the other splits."""
        o = self.options
        base = Path(o.data_dir).expanduser()
        src = read_lines(base / f"{name}.{o.src}", f"extra test split {name} source")
        tgt = read_lines(base / f"{name}.{o.tgt}", f"extra test split {name} target")
        if len(src) != len(tgt):
            raise AtnatError(f"extra test split {name}: {base / f'{name}.{o.src}'} has {len(src)} lines but "
                             f"{base / f'{name}.{o.tgt}'} has {len(tgt)}; parallel files need equal line counts")
        return (src[: o.max_eval], tgt[: o.max_eval]) if o.max_eval else (src, tgt)

    def load(self) -> TaskData:
        o = self.options
        splits = {}
        for split in SPLITS:
            src_path, tgt_path = self.path(split, "src"), self.path(split, "tgt")
            src = read_lines(src_path, f"{split} source")
            tgt = read_lines(tgt_path, f"{split} target")
            if len(src) != len(tgt):
                raise AtnatError(f"{split}: {src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}; "
                                 "parallel files need equal line counts")
            limit = o.max_train if split == "train" else o.max_eval
            splits[split] = (src[:limit], tgt[:limit]) if limit else (src, tgt)
        train_src, train_tgt = splits["train"]
        tok = SentencePieceTokenizer.train(train_src + train_tgt, vocab_size=o.vocab_size, cache_dir=self.cache_dir,
                                           what=f"train split ({self.path('train', 'src')}, {self.path('train', 'tgt')})")
        return TaskData(splits, tok, bleu_tokenize="13a", lang=o.tgt)
