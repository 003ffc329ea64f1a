"""Sequence-level knowledge distillation (Kim & Rush 2016): an AT teacher re-writes the training
targets; students train on its outputs. Results are cached in the teacher's run directory (a teacher
outside a run: in the atnat cache)."""
from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import shutil
import sys
from pathlib import Path

from filelock import FileLock

from atnat.core.errors import AtnatError
from atnat.experiments.config.run import build_strategy
from atnat.experiments.data.batching import EncodedSplit
from atnat.experiments.data.tokenize import CACHE_DIR
from atnat.experiments.evaluation.decode import decode_split
from atnat.experiments.evaluation.metrics.quality import bleu_metric
from atnat.experiments.evaluation.translate import check_source_lengths, source_limit
from atnat.experiments.files import write_json_atomic, write_lines_atomic, written_lines
from atnat.experiments.modelfiles.loading import checkpoint_stamp, checkpoint_stamps, load_module


def distill_sources(teacher, tokenizer, sources: list[str], strategy_spec, *, max_tokens: int = 8000,
                    on_batch=None, beyond_reach: str = "refuse") -> list[str]:
    """Teacher outputs (detokenised) for `sources`, in order; one line per source, checked.
    `on_batch(sentences done)` follows the progress. A source longer than the teacher reads is refused
    (`beyond_reach="refuse"`: a user's input file), or left undecoded with an empty line (`"skip"`: a task's
    training split, whose pairs with an empty target the student leaves out, as the teacher left them out)."""
    label, strategy = build_strategy(strategy_spec)
    if not sources:
        raise AtnatError("distillation input: no sentences to distil")
    ids = [tokenizer.encode(s) for s in sources]  # once: the decode reads no targets (each batch's are empty)
    if beyond_reach == "refuse":
        check_source_lengths(teacher, ids, "distillation input")
    limit = source_limit(teacher)[0]
    within = [i for i, source in enumerate(ids) if len(source) <= limit]  # every one where refused above
    lines = [""] * len(sources)
    if within:
        split = EncodedSplit([ids[i] for i in within], [[] for _ in within])
        out = decode_split(teacher, split, strategy, max_tokens=max_tokens, on_batch=on_batch)
        if len(out.hyps) != len(within):
            raise AtnatError(f"distillation produced {len(out.hyps)} lines for {len(within)} sources")
        for i, hyp in zip(within, out.hyps):
            lines[i] = tokenizer.decode(hyp).replace("\n", " ")
    return lines


def teacher_run_dir(teacher: str | Path) -> Path | None:
    """The run directory of a teacher given as a run directory (it has checkpoints/ and config.json) or as a
    checkpoint file in its checkpoints/ folder; None for any other file or folder (a folder that happens to
    be named checkpoints/ is no run) or an export directory."""
    path = Path(teacher)
    run = path if path.is_dir() else path.parent.parent if path.parent.name == "checkpoints" else None
    return run if run is not None and (run / "checkpoints").is_dir() and (run / "config.json").is_file() else None


def teacher_dir(teacher: str | Path) -> Path:
    """Where a teacher's distillation caches live: its run directory; for a checkpoint file outside a run
    or an export directory, a folder of the atnat cache named by its resolved path, never the folder
    around it (a data or model folder, which two teachers would share)."""
    run = teacher_run_dir(teacher)
    if run is not None:
        return run
    path = Path(teacher).resolve()
    return CACHE_DIR / "teachers" / f"{path.name}-{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"


def all_options(strategy_spec) -> tuple[str, dict]:
    """(label, every option of the strategy with its value, defaults included)."""
    label, strategy = build_strategy(strategy_spec)
    return label, {"name": strategy.registered_name, **json.loads(json.dumps(dataclasses.asdict(strategy), default=str))}


def cache_dir(teacher_path: str | Path, strategy_spec) -> Path:
    """`<teacher run>/distill/<label>-<hash of every option>`: the label (beam5) is readable, the hash
    keeps apart two strategies that differ in an option the label does not show (alpha, length limits).
    A teacher given as one checkpoint of a run (run/checkpoints/last.ckpt) adds `@<its name>`: the run's
    own weights and each of its checkpoints keep caches of their own."""
    return _cache_dir(teacher_path, *all_options(strategy_spec))


def _cache_dir(teacher_path: str | Path, label: str, options: dict) -> Path:
    """The hash alone identifies a cache: a folder written under an older label of the same options
    (labels grow as strategies gain shown options: beam5 -> beam5-alpha=0.6) is the one reused."""
    digest = hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:8]
    if not Path(teacher_path).is_dir() and teacher_run_dir(teacher_path) is not None:
        digest += "@" + Path(teacher_path).stem  # one checkpoint of a run: its own cache beside the run's
    root = teacher_dir(teacher_path) / "distill"
    named = root / f"{label}-{digest}"
    if not (named / "train.txt").is_file() and root.is_dir():
        earlier = sorted(p for p in root.glob(f"*-{glob.escape(digest)}") if (p / "train.txt").is_file())
        if earlier:
            return earlier[0]
    return named


def distilled_targets(teacher_path: str | Path, sources: list[str], references: list[str], strategy_spec,
                      *, max_tokens: int = 8000, device: str = "cpu", on_batch=None) -> tuple[list[str], dict]:
    """Distilled training targets, cached as `train.txt` in `cache_dir(teacher, strategy)` with a
    `meta.json` recording the teacher, the strategy and its options, the line count and BLEU against
    the references. Reused only for the same teacher weights, options and sources, and only while
    train.txt matches its recorded sha256 (`targets_sha256`); a damaged cache is decoded again.
    `on_batch(sentences done)` follows a decode."""
    label, options = all_options(strategy_spec)
    cache = _cache_dir(teacher_path, label, options)
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(cache / ".lock"):  # students started at once by parallel workers: one decodes
        lines, meta = _cached_or_decoded(teacher_path, cache, (label, options), sources, references, strategy_spec,
                                         max_tokens, device, on_batch)
    if not any(line.strip() for line in lines):
        raise AtnatError(f"distillation: the teacher {teacher_path} produced only empty lines for the {len(lines)} "
                         f"training sources (strategy {label}; see {cache / 'train.txt'}), so the student has no "
                         "targets to learn from; train the teacher longer or check its run")
    return lines, meta


def _cached_or_decoded(teacher_path, cache: Path, described: tuple[str, dict], sources, references, strategy_spec,
                       max_tokens, device, on_batch=None):

    text_path, meta_path = cache / "train.txt", cache / "meta.json"
    stamp, (label, options), digest = checkpoint_stamp(teacher_path), described, _digest(sources)
    if text_path.exists() and meta_path.exists():  # reuse only for the same teacher weights
        try:
            lines = written_lines(text_path)
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            if not isinstance(meta, dict) or not isinstance(meta.get("checkpoint"), str):
                raise ValueError("meta.json is no record of a distillation")
            recorded = meta.get("targets_sha256")  # (none in a cache written before the sum)
            if recorded is not None and recorded != _digest(lines):
                raise ValueError("train.txt does not match its checksum")
            if (len(lines) == len(sources) and meta["checkpoint"] in checkpoint_stamps(teacher_path)
                    and meta.get("options") == options and meta.get("sources_sha256") == digest):
                if meta.get("references_sha256") != _digest(references):  # scored against another caller's
                    tokenize = meta.get("bleu_tokenize") or load_module(teacher_path, map_location="cpu")[0].bleu_tokenize
                    meta = {**meta, **_scored(lines, references, tokenize, meta.get("beyond_teacher_reach_lines") or [])}
                return lines, meta
        except ValueError as err:  # not UTF-8, not JSON: decoded again, and written over
            print(f"atnat: the distillation cache {cache} is damaged ({err}); the teacher decodes again", file=sys.stderr)
    module, tokenizer = load_module(teacher_path, map_location=device)
    lines = _in_chunks(cache, {"checkpoint": stamp, "options": options}, sources,
                       lambda part, follow: distill_sources(module, tokenizer, part, strategy_spec, max_tokens=max_tokens,
                                                            on_batch=follow, beyond_reach="skip"), on_batch)
    limit = source_limit(module)[0]
    beyond = [i for i, ids in enumerate(map(tokenizer.encode, sources)) if len(ids) > limit]
    meta = {"teacher": str(teacher_path), "checkpoint": stamp, "strategy": label,
            "options": options, "sources_sha256": digest, "lines": len(lines), "targets_sha256": _digest(lines),
            "device": str(device),  # where it decoded (a later caller on another device reuses these lines)
            "beyond_teacher_reach": len(beyond), "beyond_teacher_reach_lines": beyond,  # 0-based, left undecoded
            **_scored(lines, references, module.bleu_tokenize, beyond)}
    write_lines_atomic(text_path, lines)
    write_json_atomic(meta_path, meta)
    shutil.rmtree(cache / "chunks", ignore_errors=True)
    return lines, meta


def _scored(lines: list[str], references: list[str], tokenize: str, left_out: list[int] = ()) -> dict:
    """BLEU of the distilled lines against the training references (the sources left undecoded, beyond the
    teacher's reach, left out: their empty lines are no output of the teacher), and which references they were."""
    metric = bleu_metric(tokenize)
    skip = set(left_out)
    kept = [i for i in range(len(lines)) if i not in skip]
    return {"bleu_vs_references": metric.corpus_score([lines[i] for i in kept], [[references[i] for i in kept]]).score,
            "bleu_signature": str(metric.get_signature()), "bleu_tokenize": tokenize,
            "references_sha256": _digest(references)}


CHUNK = 100_000  # sentences a chunk: what an interrupted distillation decodes again at most


def _in_chunks(cache: Path, identity: dict, sources: list[str], decode, on_batch=None) -> list[str]:
    """decode(sources[a:b], follow) chunk by chunk, each chunk's lines kept in `cache/chunks/` with what
    made them (teacher weights, options, the chunk's sources); a rerun after an interruption takes the
    chunks that check and decodes only the rest."""
    folder = cache / "chunks"
    folder.mkdir(exist_ok=True)
    lines: list[str] = []
    for start in range(0, len(sources), CHUNK):
        part = sources[start: start + CHUNK]
        key = {**identity, "start": start, "sources_sha256": _digest(part)}
        text, meta = folder / f"{start:012d}.txt", folder / f"{start:012d}.json"
        done = None
        try:
            recorded = json.loads(meta.read_text(encoding="utf-8"))
            if isinstance(recorded, dict) and {k: v for k, v in recorded.items() if k != "targets_sha256"} == key:
                done = written_lines(text)
                if recorded.get("targets_sha256") != _digest(done):  # cut short or edited since
                    done = None
        except (OSError, ValueError):
            pass
        if done is None or len(done) != len(part):
            follow = (lambda n, start=start: on_batch(start + n)) if on_batch else None
            done = decode(part, follow)
            write_lines_atomic(text, done)
            write_json_atomic(meta, {**key, "targets_sha256": _digest(done)})
        elif on_batch:
            on_batch(start + len(part))
        lines += done
    return lines


def _digest(lines: list[str]) -> str:
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()
