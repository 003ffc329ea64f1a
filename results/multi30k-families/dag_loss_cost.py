"""What the exact DAG loss costs in a training step, beside the loss the grid's first DA-Transformer attempts
trained with (float32 only, read from git at the commit they ran): one checkpoint, 4 batches of the grid's
size (train.max_tokens 4000) from the first 3,000 training pairs, forward and backward at 1 thread in
float32, the two losses interleaved, 3 rounds; medians of the whole step and of the loss's forward pass.
    python results/multi30k-families/dag_loss_cost.py OUT.csv RUN_DIR/checkpoints/top-STEP.ckpt
(from the repository root, in .venv; nothing else running)
"""
from __future__ import annotations

import csv
import statistics
import sys
import time
from pathlib import Path

import torch

import atnat.models.decoders.dag as dag
from atnat.experiments.data.batching import encode_split, make_loader
from atnat.experiments.modelfiles.loading import load_module
from atnat.models.decoders.dag_paths import dag_log_likelihood

sys.path.insert(0, str(Path(__file__).parent))
from dag_loss_exactness import DATA, TRAINED_AT, loss_trained_with  # noqa: E402


def main(out: str, checkpoint: str) -> None:
    torch.set_num_threads(1)
    module, tokenizer = load_module(checkpoint)
    module.train()
    src = (DATA / "train.en").read_text(encoding="utf-8").splitlines()[:3000]
    tgt = (DATA / "train.de").read_text(encoding="utf-8").splitlines()[:3000]
    loader = make_loader(encode_split(tokenizer, src, tgt, name="train"), 4000, shuffle=True, seed=2)
    batches = [b for _, b in zip(range(4), loader)]
    losses = {f"float32 only ({TRAINED_AT})": loss_trained_with(), "exact (now)": dag_log_likelihood}
    step, forward = {k: [] for k in losses}, {k: [] for k in losses}
    for _ in range(3):
        for name, loss in losses.items():
            spent = []

            def timed(*tables, loss=loss, spent=spent):
                began = time.perf_counter()
                value = loss(*tables)
                spent.append(time.perf_counter() - began)
                return value

            dag.dag_log_likelihood = timed
            for batch in batches:
                spent.clear()
                began = time.perf_counter()
                module.loss_parts(batch)["tokens"].value.backward()
                step[name].append(time.perf_counter() - began)
                forward[name].append(sum(spent))
                module.zero_grad()
    dag.dag_log_likelihood = dag_log_likelihood
    rows = [{"loss": name, "checkpoint": "/".join(Path(checkpoint).parts[-3:]), "threads": 1, "steps": len(step[name]),
             "median_step_s": statistics.median(step[name]), "median_loss_forward_s": statistics.median(forward[name]),
             "torch": torch.__version__} for name in losses]
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    for row in rows:
        print(row)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
