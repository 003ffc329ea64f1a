"""`atnat data prepare CONFIG`: every split of a run config's or a grid's tasks encoded into the cache of
prepared splits up front, in sentencepiece's threads over all cores, with progress; runs then map them.
(`atnat train` and `atnat run` prepare what is missing on first use; a teacher's distilled targets are
prepared when the teacher has written them.)"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from atnat.core.cores import usable_cores
from atnat.experiments.config.run import load_run_config, load_task, load_yaml
from atnat.experiments.data.prepared import prepared_split


def configs_of(path: Path) -> list:
    """The run configs in a grid file (a mapping with `cells`), or the one run config."""
    data = load_yaml(path)
    if isinstance(data, dict) and "cells" in data:
        from atnat.experiments.running.grid import load_grid  # lazy: start-up

        return [cell.config for cell in load_grid(path).cells]
    return [load_run_config(path)]


def prepare_configs(path: Path, *, threads: int | None = None, log: Callable[[str], None] = print) -> list[dict]:
    """Prepare each distinct task's splits once; -> one summary row per split."""
    threads = threads or usable_cores()  # a job's cores, not the host's
    rows, seen = [], set()
    for cfg in configs_of(path):
        key = json.dumps(cfg.task, sort_keys=True, default=str)
        if key in seen:
            continue
        seen.add(key)
        started = time.perf_counter()
        task = load_task(cfg)  # the tokenizer is trained here (or found in the cache)
        log(f"task {key}: tokenizer ready in {time.perf_counter() - started:.1f} s")
        for split in task.splits:
            started = time.perf_counter()

            def follow(done: int, total: int, split=split) -> None:
                log(f"  {split}: {done:,} of {total:,} pairs encoded")
            prepared = prepared_split(task, split, max_len=None, threads=threads, on_chunk=follow)
            arrays = prepared.arrays
            rows.append({"split": split, "pairs": arrays.n, "src_tokens": int(arrays.src_offsets[-1]),
                         "tgt_tokens": int(arrays.tgt_offsets[-1]), "dtype": arrays.meta["dtype"],
                         "seconds": round(time.perf_counter() - started, 2), "folder": str(arrays.folder)})
            log(f"  {split}: {arrays.n:,} pairs, {rows[-1]['src_tokens']:,} + {rows[-1]['tgt_tokens']:,} tokens "
                f"({arrays.meta['dtype']}) in {arrays.folder}")
    return rows
