"""Evaluate a trained run: decode a split with each strategy, score, time, and probe it.

Writes `hyps/<strategy>.txt` and `references.txt` into the run directory and returns the rows and
curves the grid runner tabulates (the runner writes `metrics.json` last, as the completion mark).
Timings are medians of repeats after warm-up.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd
import sacrebleu
import torch

from atnat.decoding.base import STRATEGIES, Strategy
from atnat.models.errors import AtnatError
from atnat.models.seq2seq import Seq2SeqModule, check_compatible

from atnat.experiments.config import RunConfig, make, named
from atnat.experiments.data import EncodedSplit, collate, encode_split, make_loader
from atnat.experiments.metrics import (conditional_error_rate, corpus_quality, exact_match,
                                       length_accuracy, repetition_rate, variant_mixing_rate)
from atnat.experiments.metrics.error_propagation import bleu_by_length
from atnat.experiments.metrics.speed import measure, peak_memory_mb, reset_peak
from atnat.experiments.tasks import TaskData


@dataclass(frozen=True)
class SpeedSettings:
    """How decoding speed is measured."""

    latency_sentences: int = 32  # sentences decoded one at a time for latency at batch 1
    throughput_sentences: int = 512  # sentences decoded in large batches for throughput
    throughput_batch: int = 64  # sentences per batch in the throughput measurement
    repeats: int = 3  # timed repeats (median reported)
    warmup: int = 1  # untimed warm-up runs


def build_strategy(spec) -> tuple[str, Strategy]:
    """`{name: beam, beam_size: 5}` -> (label "beam5", strategy instance)."""
    name, opts = named(spec, "strategy")
    strategy = make(STRATEGIES.get(name), opts, f"strategy ({name})")
    return strategy_label(name, strategy), strategy


def strategy_label(name: str, s: Strategy) -> str:
    """A short, unique-enough label for tables: greedy, beam5, mask-predict-4, length-beam-3 ..."""
    if name == "beam":
        label = f"beam{s.beam_size}"
    elif name == "mask-predict":
        label = f"mask-predict-{s.iterations}" + (f"-lb{s.length_beam}" if s.length_beam > 1 else "")
    elif name in ("length-beam", "npd"):
        label = f"{name}-{s.length_beam}"
    elif name == "parallel":
        label = "parallel" + ("-fixed" if s.length == "fixed" else "") + (
            f"-lb{s.length_beam}" if s.length_beam > 1 else "")
    elif name == "ctc" and s.beam_size > 1:
        label = f"ctc-beam{s.beam_size}"
    else:
        label = name
    return label


def teacher_scorer(teacher: Seq2SeqModule | None, src: torch.Tensor) -> dict:
    """Keyword arguments for strategies that re-rank with an AT teacher (npd), else {}."""
    if teacher is None:
        return {}
    memory = teacher.encode(src)

    def score(tokens, padding_mask, sentence_index):
        return teacher.decoder.score_sequences(memory.index_select(sentence_index), tokens, padding_mask)

    return {"scorer": score}


@dataclass
class Decoded:
    hyps: list[list[int]]
    passes: int  # decoder passes over all batches
    history: list[list[list[int]]] | None = None  # per sentence, per iteration (mask-predict)


def decode_split(module: Seq2SeqModule, split: EncodedSplit, strategy: Strategy, *, max_tokens: int,
                 teacher: Seq2SeqModule | None = None, max_sentences: int | None = None) -> Decoded:
    """Decode every sentence of a split (token-budget batches); outputs in the split's order."""
    check_compatible(module.decoder, strategy)
    hyps: list = [None] * len(split)
    hist: list | None = None
    passes = 0
    dev = module.device
    for batch in make_loader(split, max_tokens, shuffle=False, max_sentences=max_sentences):
        src, lengths = batch.src.to(dev), batch.src_lengths.to(dev)
        out = module.decode(src, lengths, strategy, **needs_teacher(strategy, teacher, src))
        passes += out.n_steps
        for i, h in zip(batch.ids.tolist(), out.sequences(module.special)):
            hyps[i] = h
        if out.history is not None:
            hist = hist if hist is not None else [None] * len(split)
            n = out.lengths[:, 0].tolist()
            for row, i in enumerate(batch.ids.tolist()):
                hist[i] = [h[row, : n[row]].tolist() for h in out.history]
    return Decoded(hyps, passes, hist)


def needs_teacher(strategy: Strategy, teacher: Seq2SeqModule | None, src: torch.Tensor) -> dict:
    if getattr(strategy, "registered_name", "") != "npd":
        return {}
    if teacher is None:
        raise AtnatError("strategy npd re-ranks with an AT teacher: give the cell a distill.teacher "
                         "(grid: a teacher dependency) or pass --teacher")
    return teacher_scorer(teacher, src)


def time_decoding(module, split: EncodedSplit, strategy: Strategy, speed: SpeedSettings,
                  teacher=None) -> dict:
    """Latency at batch 1, throughput at a large batch, passes per sentence, peak memory."""
    dev = module.device
    n1 = min(speed.latency_sentences, len(split))
    singles = [collate([split[i]]) for i in range(n1)]
    passes = []

    def run_singles():
        passes.clear()
        for b in singles:
            src = b.src.to(dev)
            out = module.decode(src, b.src_lengths.to(dev), strategy, **needs_teacher(strategy, teacher, src))
            passes.append(out.n_steps + (1 if teacher is not None and needs_teacher(strategy, teacher, src) else 0))

    latency = measure(run_singles, warmup=speed.warmup, repeats=speed.repeats, device=dev)
    nt = min(speed.throughput_sentences, len(split))
    order = sorted(range(nt), key=lambda i: len(split.src[i]))
    batches = [collate([split[i] for i in order[j: j + speed.throughput_batch]])
               for j in range(0, nt, speed.throughput_batch)]

    def run_batches():
        for b in batches:
            src = b.src.to(dev)
            module.decode(src, b.src_lengths.to(dev), strategy, **needs_teacher(strategy, teacher, src))

    reset_peak(dev)
    through = measure(run_batches, warmup=speed.warmup, repeats=speed.repeats, device=dev)
    return {"latency_ms_b1": 1000 * latency.median_s / n1, "throughput_sents_s": nt / through.median_s,
            "decoder_passes": sum(passes) / max(len(passes), 1), "peak_memory_mb": peak_memory_mb(dev)}


def score_outputs(hyps: list[list[int]], refs: list[list[int]], ref_txt: list[str], task: TaskData, *,
                  n_bootstrap: int, detok: Callable[[list[int]], str]) -> tuple[dict, list[str]]:
    """Quality metrics of detokenised outputs against raw references; error metrics on ids."""
    hyp_txt = [detok(h) for h in hyps]
    q = corpus_quality(hyp_txt, ref_txt, tokenize=task.bleu_tokenize, n_bootstrap=n_bootstrap)
    lengths = length_accuracy([len(h) for h in hyps], [len(r) for r in refs])
    row = {"bleu": q.bleu, "chrf": q.chrf, "bleu_ci_low": q.bleu_ci_low, "bleu_ci_high": q.bleu_ci_high,
           "bleu_signature": q.bleu_signature, "exact_match": exact_match(hyps, refs),
           "repetition_rate": repetition_rate(hyps), "length_exact": lengths.exact,
           "length_within1": lengths.within_1, "length_mae": lengths.mean_abs_error,
           "cond_error_delta": conditional_error_rate(hyps, refs).delta,
           "mixing_rate": variant_mixing_rate(hyps, task.token_variant) if task.token_variant else float("nan")}
    return row, hyp_txt


def write_json_atomic(path: Path, data) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path)


@dataclass
class EvalResult:
    rows: list[dict]
    curves: dict[str, pd.DataFrame] = field(default_factory=dict)
    samples: pd.DataFrame | None = None


def evaluate(module: Seq2SeqModule, task: TaskData, cfg: RunConfig, run_dir: Path, *,
             teacher: Seq2SeqModule | None = None, speed: SpeedSettings = SpeedSettings(),
             n_samples: int = 5) -> EvalResult:
    """Decode cfg.eval.split with every strategy of the run; write hyps and references."""
    from atnat.experiments.probes import run_probes

    src, tgt = task.splits[cfg.eval.split]
    split = encode_split(task.tokenizer, src, tgt, name=cfg.eval.split, max_len=cfg.train.max_len)
    (run_dir / "hyps").mkdir(parents=True, exist_ok=True)
    refs_txt = list(tgt)  # raw references: BLEU is computed on detokenised text (sacrebleu default)
    (run_dir / "references.txt").write_text("\n".join(refs_txt) + "\n", encoding="utf-8")
    rows, curves, samples, first = [], {"bleu_by_length": [], "iterations": []}, [], None
    for spec in cfg.eval.strategies:
        label, strategy = build_strategy(spec)
        decoded = decode_split(module, split, strategy, max_tokens=cfg.eval.max_tokens, teacher=teacher)
        row, hyp_txt = score_outputs(decoded.hyps, split.tgt, refs_txt, task, n_bootstrap=cfg.eval.n_bootstrap,
                                     detok=task.tokenizer.decode)
        row.update(strategy=label, strategy_name=strategy.registered_name,
                   iterations=getattr(strategy, "iterations", float("nan")))
        row.update(time_decoding(module, split, strategy, speed, teacher))
        rows.append(row)
        first = first if first is not None else decoded.hyps
        (run_dir / "hyps" / f"{label}.txt").write_text("\n".join(hyp_txt) + "\n", encoding="utf-8")
        curves["bleu_by_length"].append(bleu_by_length(hyp_txt, refs_txt, tokenize=task.bleu_tokenize)
                                        .assign(strategy=label))
        if decoded.history:
            curves["iterations"].append(iteration_bleu(decoded.history, refs_txt, task).assign(strategy=label))
        samples += [{"strategy": label, "index": i, "source": src[i], "reference": refs_txt[i],
                     "hypothesis": hyp_txt[i]} for i in range(min(n_samples, len(src)))]
    frames = {k: pd.concat(v, ignore_index=True) for k, v in curves.items() if v}
    frames.update(run_probes(module, split, free_running=first, strategy=rows[0]["strategy"]))
    return EvalResult(rows, frames, pd.DataFrame(samples))  # the runner writes metrics.json last


def iteration_bleu(history: list[list[list[int]]], refs: list[str], task: TaskData) -> pd.DataFrame:
    """BLEU after each mask-predict iteration (sentences that stopped early keep their last output)."""
    n_iter = max(len(h) for h in history)
    out = []
    for it in range(n_iter):
        hyps = [task.tokenizer.decode(h[min(it, len(h) - 1)]) for h in history]
        out.append({"iteration": it + 1, "bleu": sacrebleu.corpus_bleu(hyps, [refs], tokenize=task.bleu_tokenize).score})
    return pd.DataFrame(out)
