"""The CTranslate2 twin of a plain AT cell, scored like any system: the same weights exported and
decoded by CTranslate2 over the whole test split, its outputs written beside the cell's own
(`runs/<cell>/hyps/<strategy>-ct2.txt`) and scored by every registered metric
(`runs/<cell>/exported/<strategy>-ct2.json`), so that the fastest AT a user could deploy has a BLEU,
a place on the quality-vs-speed figure and on the front, and enters the paired tests.

Written once per cell and weights (the file records the weights' fingerprint); the timing phase's
speed rows of the same twin come from evaluation/timing.py.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from atnat.experiments.config.run import build_strategy, load_task
from atnat.experiments.config.speed import SpeedSettings
from atnat.experiments.data.batching import encode_split
from atnat.experiments.evaluation.baseline import ENGINE_TWIN
from atnat.experiments.evaluation.evaluate import score_outputs
from atnat.experiments.evaluation.timing import exportable
from atnat.experiments.files import write_json_atomic, write_text_atomic
from atnat.experiments.modelfiles import ct2
from atnat.experiments.modelfiles.loading import checkpoint_stamp, evaluation_checkpoint, load_module

SUFFIX = ENGINE_TWIN
BATCH = 64  # sentences per CTranslate2 call


def exported_record(run_dir: Path, label: str) -> Path:
    return run_dir / "exported" / f"{label}{SUFFIX}.json"


def score_exported_twins(cells: list, device: str, speed: SpeedSettings) -> list[Path]:
    """For each plain AT cell (when speed.ct2_baseline), decode its test split with its CTranslate2
    twin for every strategy CTranslate2 can run, and record the twin's scores. -> records written."""
    if not speed.ct2_baseline or not ct2.available():
        return []
    written = []
    for cell in (c for c in cells if exportable(c)):
        cfg, run_dir = cell.config, Path(cell.config.output_dir)
        if not evaluation_checkpoint(run_dir).is_file():
            continue
        stamp = checkpoint_stamp(run_dir)
        todo = [spec for spec in cfg.eval.strategies if _stale(exported_record(run_dir, build_strategy(spec)[0]), stamp)]
        if not todo:
            continue
        module, tokenizer = load_module(evaluation_checkpoint(run_dir), map_location="cpu")
        task = load_task(cfg)
        src, tgt = task.splits[cfg.eval.split]
        split = encode_split(task.tokenizer, src, tgt, name=cfg.eval.split, max_len=cfg.train.max_len)
        refs_txt = task.references(cfg.eval.split)
        refs_ids = [split.tgt] + [[task.tokenizer.encode(r)[: cfg.train.max_len] for r in s] for s in refs_txt[1:]]
        for spec in todo:
            label, strategy = build_strategy(spec)
            try:
                decoder = ct2.ct2_decoder((module, tokenizer), strategy, compute_type="float32", device=device,
                                          threads=speed.threads or torch.get_num_threads(), exact=False)
            except Exception as err:  # noqa: BLE001 - a strategy CTranslate2 cannot run is named, not fatal
                print(f"atnat: {cell.name} / {label}: no CTranslate2 twin to score ({err})", file=sys.stderr)
                continue
            hyps = [h for i in range(0, len(split.src), BATCH) for h in decoder(split.src[i: i + BATCH])]
            row, hyp_txt = score_outputs(hyps, refs_ids, refs_txt, task, n_bootstrap=cfg.eval.n_bootstrap,
                                         detok=task.tokenizer.decode, compound_split=cfg.eval.compound_split)
            write_text_atomic(run_dir / "hyps" / f"{label}{SUFFIX}.txt", "\n".join(hyp_txt) + "\n")
            record = exported_record(run_dir, label)
            write_json_atomic(record, {"fingerprint": stamp, "engine": "ctranslate2 float32", "exact": False,
                                       "row": {**row, "strategy_name": strategy.registered_name}})
            written.append(record)
    return written


def _stale(record: Path, stamp: str) -> bool:
    try:
        return json.loads(record.read_text())["fingerprint"] != stamp
    except (OSError, ValueError, KeyError, TypeError):
        return True


def exported_rows(run_dir: Path) -> dict[str, dict]:
    """strategy label (`greedy-ct2`) -> the scores recorded for a cell's CTranslate2 twin."""
    out = {}
    for path in sorted((run_dir / "exported").glob(f"*{SUFFIX}.json")):
        try:
            out[path.stem] = json.loads(path.read_text())["row"]
        except (OSError, ValueError, KeyError, TypeError):
            print(f"atnat: {path} is unreadable; the CTranslate2 twin's scores are left out", file=sys.stderr)
    return out
