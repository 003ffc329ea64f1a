"""Evaluate a trained run: decode a split with each strategy, score it, and probe the model.

Writes `hyps/<strategy>.txt` and `references.txt` (plus `references-<k>.txt` for further reference
streams) into the run directory and returns the rows and curves the grid runner tabulates (the
runner writes `metrics.json` last, as the completion mark). Speed is measured apart, by the timing
phase (evaluation/timing.py): each system side by side with its task and seed's AT baseline in one process.
"""
from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import pandas as pd
import sacrebleu

from atnat.core.errors import AtnatError
from atnat.decoding.base import STRATEGIES
from atnat.experiments.config.run import RunConfig, extra_test_split
from atnat.experiments.config.speed import SpeedSettings
from atnat.experiments.data.batching import encode_split
from atnat.experiments.data.prepared import prepared_split
from atnat.experiments.data.tasks import TaskData
from atnat.experiments.evaluation.assemble import build_strategy, validation_search
from atnat.experiments.evaluation.decode import decode_split
from atnat.experiments.evaluation.metrics import closest_references
from atnat.experiments.evaluation.metrics.error_propagation import bleu_by_length
from atnat.experiments.evaluation.metrics.quality import corpus_quality, tokenized_bleu
from atnat.experiments.evaluation.metrics.row import Outputs, score
from atnat.experiments.evaluation.probes import injected_error_drop, run_probes
from atnat.experiments.evaluation.references import write_references
from atnat.experiments.evaluation.timing import System, time_systems
from atnat.experiments.evaluation.translate import check_source_lengths
from atnat.experiments.files import write_text_atomic

if TYPE_CHECKING:  # for annotations only: importing it imports Lightning
    from atnat.models.seq2seq import Seq2SeqModule


def score_outputs(hyps: list[list[int]], refs: list[list[list[int]]], ref_txt: list[list[str]], task: TaskData, *,
                  n_bootstrap: int, detok: Callable[[list[int]], str],
                  compound_split: bool = False) -> tuple[dict, list[str]]:
    """Every registered metric (metrics/row.py) of one system: text metrics of the detokenised
    outputs against the raw reference streams (`ref_txt`: one or more lists of strings), id metrics
    against the closest of the reference streams `refs` (each a list of id lists)."""
    hyp_txt = [detok(h) for h in hyps]
    outputs = Outputs(hyps, hyp_txt, closest_references(hyps, refs), ref_txt, task, n_bootstrap, compound_split)
    return score(outputs), hyp_txt


@dataclass
class EvalResult:
    rows: list[dict]
    curves: dict[str, pd.DataFrame] = field(default_factory=dict)
    samples: pd.DataFrame | None = None
    extra_tests: list[dict] = field(default_factory=list)  # scores on eval.extra_tests, per strategy and split


SAMPLES_PER_STRATEGY = 5  # sample outputs per strategy in samples.csv: the split's first sentences


def sample_rows(label: str, sources: list[str], references: list[str], hypotheses: list[str],
                n: int = SAMPLES_PER_STRATEGY) -> list[dict]:
    """samples.csv's rows of one strategy: its first n hypotheses beside their sources and first references."""
    return [{"strategy": label, "index": i, "source": sources[i], "reference": references[i],
             "hypothesis": hypotheses[i]} for i in range(min(n, len(sources)))]


def evaluate(module: Seq2SeqModule, task: TaskData, cfg: RunConfig, run_dir: Path, *,
             teacher: Seq2SeqModule | None = None, n_samples: int = SAMPLES_PER_STRATEGY) -> EvalResult:
    """Decode cfg.eval.split with every strategy of the run; score it; write hyps and references."""
    split = prepared_split(task, cfg.eval.split, max_len=cfg.train.max_len)
    refs_txt = task.references(cfg.eval.split)  # raw references: BLEU on detokenised text (sacrebleu default)
    refs_ids = [split.tgt] + [[task.tokenizer.encode(r)[: cfg.train.max_len] for r in stream]
                              for stream in refs_txt[1:]]
    write_references(run_dir, refs_txt)
    (run_dir / "hyps").mkdir(parents=True, exist_ok=True)
    rows, curves, samples, first = [], {"bleu_by_length": [], "iterations": []}, [], None
    for spec in cfg.eval.strategies:
        label, strategy = build_strategy(spec)
        decoded = decode_split(module, split, strategy, max_tokens=cfg.eval.max_tokens, teacher=teacher)
        row, hyp_txt = score_outputs(decoded.hyps, refs_ids, refs_txt, task, n_bootstrap=cfg.eval.n_bootstrap,
                                     detok=task.tokenizer.decode, compound_split=cfg.eval.compound_split)
        row.update(strategy=label, strategy_name=strategy.registered_name,
                   iterations=getattr(strategy, "iterations", float("nan")),
                   strategy_settings=json.dumps({"name": strategy.registered_name, **dataclasses.asdict(strategy)},
                                                default=str))
        row.update(verifier_agreement(strategy, decoded, split, teacher, cfg.eval.max_tokens))
        if cfg.eval.probe_sentences:
            row.update(injected_error_drop(module, split, strategy, teacher=teacher, n=cfg.eval.probe_sentences,
                                           bootstrap=cfg.eval.n_bootstrap, references=refs_ids))
        rows.append(row)
        first = first if first is not None else decoded.hyps
        write_text_atomic(run_dir / "hyps" / f"{label}.txt", "\n".join(hyp_txt) + "\n")
        curves["bleu_by_length"].append(bleu_by_length(hyp_txt, refs_txt, tokenize=task.bleu_tokenize)
                                        .assign(strategy=label))
        if decoded.history:
            curves["iterations"].append(iteration_bleu(decoded.history, refs_txt, task).assign(strategy=label))
        samples += sample_rows(label, task.splits[cfg.eval.split][0], refs_txt[0], hyp_txt, n_samples)
    frames = {k: pd.concat(v, ignore_index=True) for k, v in curves.items() if v}
    frames.update(run_probes(module, split, free_running=first, strategy=rows[0]["strategy"], references=refs_ids))
    extra = [score for name in cfg.eval.extra_tests
             for score in evaluate_extra_test(module, task, cfg, run_dir, name, teacher=teacher)]
    return EvalResult(rows, frames, pd.DataFrame(samples), extra)  # the runner writes metrics.json last


def verifier_agreement(strategy, decoded, split, teacher: Seq2SeqModule | None, max_tokens: int) -> dict:
    """For a strategy whose AT verifier decides every token (speculative): the share of sentences whose
    output equals the verifier's own greedy output under the same length rules (lossless: 1.0); {} otherwise.
    Its passes (drafter and verifier apart) and tokens kept per verifier pass are measured at batch 1 by the
    timing phase (evaluation/timing.py)."""
    if not strategy.needs_verifier or teacher is None:
        return {}
    greedy = STRATEGIES.get("greedy")(max_len_a=strategy.max_len_a, max_len_b=strategy.max_len_b,
                                      max_len_cap=strategy.max_len_cap)
    plain = decode_split(teacher, split, greedy, max_tokens=max_tokens)
    same = sum(a == b for a, b in zip(decoded.hyps, plain.hyps))
    return {"verifier_greedy_match": same / max(len(plain.hyps), 1)}


def evaluate_extra_test(module: Seq2SeqModule, task: TaskData, cfg: RunConfig, run_dir: Path, name: str, *,
                        teacher: Seq2SeqModule | None = None) -> list[dict]:
    """Every strategy of the run on a further test split (eval.extra_tests): hypotheses in
    `hyps/<label>@<name>.txt` (references in `references@<name>.txt`, for the report's paired
    comparisons), sacreBLEU with its interval, chrF and tokenised BLEU per strategy (and a speculative one's share
    of outputs equal to its verifier's greedy output, as on the test split)."""
    src, tgt = extra_test_split(cfg, name)
    write_text_atomic(run_dir / f"references@{name}.txt", "\n".join(tgt) + "\n")
    split = encode_split(task.tokenizer, src, tgt, name=name, max_len=cfg.train.max_len)
    out = []
    for spec in cfg.eval.strategies:
        label, strategy = build_strategy(spec)
        decoded = decode_split(module, split, strategy, max_tokens=cfg.eval.max_tokens, teacher=teacher)
        hyps = [task.tokenizer.decode(h) for h in decoded.hyps]
        write_text_atomic(run_dir / "hyps" / f"{label}@{name}.txt", "\n".join(hyps) + "\n")
        q = corpus_quality(hyps, [tgt], tokenize=task.bleu_tokenize, n_bootstrap=cfg.eval.n_bootstrap)
        out.append({"strategy": label, "test_set": name, "sentences": len(src), "bleu": q.bleu,
                    "bleu_ci_low": q.bleu_ci_low, "bleu_ci_high": q.bleu_ci_high, "chrf": q.chrf,
                    "bleu_tok": tokenized_bleu(hyps, [tgt], lang=task.lang, compound_split=cfg.eval.compound_split),
                    **verifier_agreement(strategy, decoded, split, teacher, cfg.eval.max_tokens)})
    return out


def validation_bleu(module: Seq2SeqModule, task: TaskData, cfg: RunConfig) -> float:
    """BLEU on the validation split of the weights being evaluated (e.g. the average of several
    checkpoints), decoded as validation decodes during training (greedy / one pass): comparable with
    the validation curve, so the effect of averaging is visible before any test number."""
    split = prepared_split(task, "valid", max_len=cfg.train.max_len)
    decoded = decode_split(module, split, validation_search(module.decoder), max_tokens=cfg.eval.max_tokens)
    hyps = [task.tokenizer.decode(h) for h in decoded.hyps]
    return sacrebleu.corpus_bleu(hyps, task.references("valid"), tokenize=task.bleu_tokenize).score


def iteration_bleu(history: list[list[list[int]]], refs: list[list[str]], task: TaskData) -> pd.DataFrame:
    """BLEU after each mask-predict iteration (sentences that stopped early keep their last output)."""
    n_iter = max(len(h) for h in history)
    out = []
    for it in range(n_iter):
        hyps = [task.tokenizer.decode(h[min(it, len(h) - 1)]) for h in history]
        out.append({"iteration": it + 1, "bleu": sacrebleu.corpus_bleu(hyps, refs, tokenize=task.bleu_tokenize).score})
    return pd.DataFrame(out)


def evaluate_files(module: Seq2SeqModule, tokenizer, sources: list[str], references: list[list[str]],
                   specs: list, *, teacher: Seq2SeqModule | None = None, max_tokens: int = 6000,
                   n_bootstrap: int = 1000, compound_split: bool = False, lang: str | None = None,
                   speed: SpeedSettings | None = None, say: Callable[[str], None] = lambda text: None,
                   source_name: str = "source") -> list[dict]:
    """Score a trained model on any test set (`atnat evaluate`): per strategy spec, sacreBLEU (all
    reference streams), chrF, tokenised BLEU, exact match; with `speed`, the strategies are also
    timed side by side on these sentences. -> one row per strategy, with its hypotheses."""
    for k, stream in enumerate(references, 1):
        if len(stream) != len(sources):
            raise AtnatError(f"reference file {k} has {len(stream)} lines but the source has {len(sources)}")
    task = TaskData({"test": (sources, references[0])}, tokenizer, bleu_tokenize=module.bleu_tokenize,
                    extra_references={"test": references[1:]}, lang=lang or module.target_lang)
    split = encode_split(tokenizer, sources, references[0], name="test")
    check_source_lengths(module, split.src, source_name, teacher)  # before any decoding: one error naming the line
    refs_ids = [split.tgt] + [[tokenizer.encode(r) for r in stream] for stream in references[1:]]
    rows, systems = [], []
    for spec in specs:
        label, strategy = build_strategy(spec)
        started, shown = time.time(), [0]

        def progress(done: int) -> None:  # about every tenth of the sentences
            if done - shown[0] >= max(1, len(sources) // 10) or done == len(sources):
                shown[0] = done
                say(f"{label}: {done} of {len(sources)} sentences decoded ({time.time() - started:.0f} s)")
        decoded = decode_split(module, split, strategy, max_tokens=max_tokens, teacher=teacher, on_batch=progress)
        row, hyps = score_outputs(decoded.hyps, refs_ids, references, task, n_bootstrap=n_bootstrap,
                                  detok=tokenizer.decode, compound_split=compound_split)
        row.update(verifier_agreement(strategy, decoded, split, teacher, max_tokens))
        rows.append(row | {"strategy": label, "hypotheses": hyps})
        systems.append((label, strategy))
    if speed is not None:
        one, many = min(speed.latency_sentences, len(sources)), min(speed.throughput_sentences, len(sources))
        say(f"timing {len(systems)} strategies side by side ({one} sentences one at a time, "
            f"{many} in batches of {speed.throughput_batch}, {speed.repeats} repeats, "
            f"{speed.threads} thread{'s' if speed.threads != 1 else ''})")
        timed = time_systems([System("model", label, module, strategy, split.src, teacher)
                              for label, strategy in systems], speed, {}).set_index("strategy")
        for row in rows:
            keep = [c for c in ("latency_ms_b1", "throughput_sents_s", "decoder_passes", "verifier_passes", "timing_threads",
                                "acceptance_length") if c in timed]
            row.update(timed.loc[row["strategy"], keep].to_dict())
    return rows
