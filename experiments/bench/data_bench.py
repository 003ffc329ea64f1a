"""`atnat bench data`: what a corpus of N sentence pairs costs before and during training.

A synthetic parallel corpus (`synthetic_corpus`: 8-40 words a sentence from a 20,000-word vocabulary on
each side, seeded; 1,000 validation and test pairs) is written once into the bench folder; then, each in a
fresh process with its own empty cache (`ATNAT_CACHE`):
- `prepare`: `atnat data prepare` of a run config over it (tokenizer sample + encoding), wall time and peak
  resident memory;
- `train`: `atnat train` of a tiny AT for 2 steps on the prepared corpus: seconds from the command's start
  to the end of its first training step (progress.json's `first_step_at`), the whole command's wall time
  (evaluation included) and its peak memory;
- `loader`: one shuffled epoch of the training loader on one thread (4,096-token batches): target tokens
  per second, and the seconds to build the epoch's batches.
With `--baseline-python PY` the `train` phase also runs with another installation's Python (an older
version of atnat), on a cache of its own, so that both sit in one table.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from atnat.core.errors import AtnatError
from atnat.experiments.files import atomic_write_bytes, sha256

WORDS = 20_000
MIN_WORDS, MAX_WORDS = 8, 40
HELD_OUT = 1_000  # validation and test pairs


def _vocabulary(rng: np.random.Generator, n: int) -> np.ndarray:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    words = set()
    while len(words) < n:
        for length in rng.integers(3, 11, size=n):
            words.add("".join(rng.choice(letters, size=length)))
    return np.array(sorted(words)[:n], dtype=object)


def synthetic_corpus(folder: Path, pairs: int, *, seed: int = 0, log=print) -> Path:
    """train/val/test2016 .en/.de in `folder`, kept where its stamp says they were written for these settings and
    every file is still as written (its size and sha256); else written again."""
    folder.mkdir(parents=True, exist_ok=True)
    stamp = folder / "corpus.json"
    settings = {"pairs": pairs, "seed": seed, "words": WORDS, "lengths": [MIN_WORDS, MAX_WORDS], "held_out": HELD_OUT}
    names = [f"{split}.{side}" for split in ("train", "val", "test2016") for side in ("en", "de")]
    try:
        recorded = json.loads(stamp.read_text())
    except (OSError, ValueError):
        recorded = None
    if isinstance(recorded, dict) and recorded.get("settings") == settings:
        if recorded.get("files") == _file_records(folder, names):
            return folder
        log(f"corpus {folder}: its files are not as written (changed, cut short or gone): writing them again")
    stamp.unlink(missing_ok=True)
    rng = np.random.default_rng(seed)
    source, target = _vocabulary(rng, WORDS), _vocabulary(rng, WORDS)
    for split, n in (("train", pairs), ("val", HELD_OUT), ("test2016", HELD_OUT)):
        with open(folder / f"{split}.en", "w") as en, open(folder / f"{split}.de", "w") as de:
            for start in range(0, n, 100_000):
                count = min(100_000, n - start)
                lengths = rng.integers(MIN_WORDS, MAX_WORDS + 1, size=count)
                ids = rng.integers(0, WORDS, size=int(lengths.sum()))
                ends = np.cumsum(lengths)
                src_words, tgt_words = source[ids], target[ids]
                en.write("".join(" ".join(src_words[e - k: e]) + "\n" for e, k in zip(ends, lengths)))
                # the target: the same words in the other vocabulary, in reverse order
                de.write("".join(" ".join(tgt_words[e - k: e][::-1]) + "\n" for e, k in zip(ends, lengths)))
                log(f"corpus {split}: {start + count:,} of {n:,} pairs written")
    atomic_write_bytes(stamp, json.dumps({"settings": settings, "files": _file_records(folder, names)}).encode())
    return folder


def _file_records(folder: Path, names: list[str]) -> dict | None:
    """Each file's size and sha256, or None where one is missing."""
    if not all((folder / name).is_file() for name in names):
        return None
    return {name: [(folder / name).stat().st_size, sha256(folder / name)] for name in names}


def run_config(corpus: Path, name: str = "data-bench") -> dict:
    return {"name": name,
            "task": {"name": "parallel", "data_dir": str(corpus), "src": "en", "tgt": "de", "train": "train",
                     "valid": "val", "test": "test2016", "vocab_size": 8000, "max_eval": 100},
            "decoder": {"name": "at"},
            "model": {"d_model": 32, "n_heads": 2, "ffn_dim": 64, "encoder_layers": 1, "decoder_layers": 1},
            "train": {"max_steps": 2, "max_tokens": 4096, "val_every_steps": 1000, "num_threads": 1,
                      "progress_bar": False},
            "eval": {"strategies": ["greedy"], "max_tokens": 8000, "n_bootstrap": 10, "probe_sentences": 0}}


_PREPARE = """
import json, resource, sys, time
from pathlib import Path
from atnat.experiments.running.data_prepare import prepare_configs
start = time.time()
rows = prepare_configs(Path(sys.argv[1]), threads=int(sys.argv[2]), log=lambda line: print(line, file=sys.stderr))
print(json.dumps({"seconds": time.time() - start, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "rows": rows}))
"""

_LOADER = """
import json, sys, time
import torch
torch.set_num_threads(1)
from atnat.experiments.config.run import load_run_config, load_task
from atnat.experiments.data.batching import make_loader
from atnat.experiments.data.prepared import prepared_split
cfg = load_run_config(sys.argv[1])
split = prepared_split(load_task(cfg), "train", max_len=cfg.train.max_len, drop_long=True)
start = time.perf_counter()
loader = make_loader(split, 4096, shuffle=True, seed=1)
batches = len(loader)
built = time.perf_counter() - start
tokens, start = 0, time.perf_counter()
for batch in loader:
    tokens += int(batch.tgt_lengths.sum())
seconds = time.perf_counter() - start
print(json.dumps({"batches": batches, "build_batches_s": built, "target_tokens": tokens, "epoch_s": seconds,
                  "target_tokens_per_s": tokens / seconds}))
"""


def _run(command: list[str], env: dict, log) -> tuple[dict, float, float]:
    """Run a phase; -> (its JSON line or {}, wall seconds, peak RSS of the process tree's largest, MB)."""
    started = time.time()
    wrapped = ["/usr/bin/time", "-f", "%M", *command] if Path("/usr/bin/time").exists() else command
    proc = subprocess.run(wrapped, env=env, capture_output=True, text=True)
    wall = time.time() - started
    if proc.returncode:
        raise AtnatError(f"bench data: a phase failed (exit {proc.returncode}): {' '.join(command)}; its error output "
                         f"ends:\n{proc.stderr[-3000:]}")
    peak = float(proc.stderr.strip().splitlines()[-1]) / 1024 if wrapped is not command else float("nan")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    return (json.loads(lines[-1]) if lines else {}), wall, peak


def bench_data(pairs: list[int], folder: Path, *, baseline_python: str | None = None,
               baseline_max_pairs: int = 1_000_000, threads: int = 2, out: Path | None = None,
               log=print) -> pd.DataFrame:
    """Every phase for each corpus size; `out` is rewritten after each row, so a failed phase loses none of
    the rows before it. The baseline runs only up to `baseline_max_pairs` (older code holds the whole
    corpus in memory)."""
    import yaml

    rows = _Rows(out)
    for n in pairs:
        corpus = synthetic_corpus(folder / f"corpus-{n}", n, log=log)
        config = folder / f"data-bench-{n}.yaml"
        config.write_text(yaml.safe_dump(run_config(corpus)))
        base = {"pairs": n, "machine": platform.processor() or platform.machine(), "cores": os.cpu_count()}
        cache = folder / f"cache-{n}"
        subprocess.run(["rm", "-rf", str(cache)], check=True)
        env = {**os.environ, "ATNAT_CACHE": str(cache), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        out, wall, peak = _run([sys.executable, "-c", _PREPARE, str(config), str(threads)], env, log)
        tokens = sum(r["src_tokens"] + r["tgt_tokens"] for r in out["rows"])
        rows.append({**base, "phase": "prepare", "code": "prepared", "seconds": wall, "peak_rss_mb": peak,
                     "tokens": tokens, "threads": threads})
        log(f"{n:,} pairs: prepared in {wall:.1f} s, peak {peak:.0f} MB")
        for code, python in (("prepared", sys.executable), ("baseline", baseline_python)):
            if python is None or (code == "baseline" and n > baseline_max_pairs):
                continue
            run_env = env if code == "prepared" else {**env, "ATNAT_CACHE": str(folder / f"cache-{n}-baseline")}
            if code == "baseline":  # the older code trains its tokenizer on first use: once, untimed
                _run([python, "-m", "atnat.experiments.cli", "train", str(config), "--output-dir",
                      str(folder / f"run-{n}-{code}-warm")], run_env, log)
            run_dir = folder / f"run-{n}-{code}"
            subprocess.run(["rm", "-rf", str(run_dir)], check=True)
            started = time.time()
            _, wall, peak = _run([python, "-m", "atnat.experiments.cli", "train", str(config), "--output-dir",
                                  str(run_dir)], run_env, log)
            progress = json.loads((run_dir / "progress.json").read_text())
            first = progress.get("first_step_at")
            rows.append({**base, "phase": "train 2 steps", "code": code, "seconds": wall, "peak_rss_mb": peak,
                         "first_step_s": (first - started) if first else float("nan"), "threads": 1})
            log(f"{n:,} pairs, {code}: atnat train {wall:.1f} s, first step at "
                f"{rows[-1]['first_step_s']:.1f} s, peak {peak:.0f} MB")
        out, wall, peak = _run([sys.executable, "-c", _LOADER, str(config)], env, log)
        rows.append({**base, "phase": "loader epoch", "code": "prepared", "seconds": out["epoch_s"], "peak_rss_mb": peak,
                     "tokens": out["target_tokens"], "target_tokens_per_s": out["target_tokens_per_s"],
                     "build_batches_s": out["build_batches_s"], "threads": 1})
        log(f"{n:,} pairs: loader {out['target_tokens_per_s'] / 1e6:.2f} M target tokens/s")
    return pd.DataFrame(list(rows))


class _Rows(list):
    """The bench's rows, written to `out` (CSV) after each one."""

    def __init__(self, out: Path | None):
        super().__init__()
        self.out = out

    def append(self, row: dict) -> None:
        super().append(row)
        if self.out is not None:
            Path(self.out).parent.mkdir(parents=True, exist_ok=True)
            pd.DataFrame(list(self)).to_csv(self.out, index=False)
