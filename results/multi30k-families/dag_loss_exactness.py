"""How far the loss that trained the families grid's DA-Transformer cells is from the exact one, on their own
checkpoints. Those cells trained at a commit whose path-marginal likelihood ran in float32 only, with each
sum of probabilities floored at float32's tiny; the loss now redoes such rows in float64 (and in log space).

For each checkpoint: N batches of the grid's size (train.max_tokens 4000) from the first 4,000 training
pairs (shuffled with seed 1), one training-mode pass under bf16 autocast (as the cells trained on this
machine; dropout and glancing as in training, no gradient through the model), then the per-sentence
log-likelihood and its gradient with respect to the pass's token and link tables, by the float32 pass
alone as the cells' commit computed it (read from git) and by the exact loss. One CSV row per
checkpoint; the numbers in this folder's README come from it.
    python results/multi30k-families/dag_loss_exactness.py OUT.csv N_BATCHES RUN_DIR/checkpoints/top-STEP.ckpt ...
(from the repository root, in .venv; 1 thread)
"""
from __future__ import annotations

import csv
import subprocess
import sys
import types
from pathlib import Path

import torch

import atnat.models.decoders.dag as dag
from atnat.experiments.data.batching import encode_split, make_loader
from atnat.experiments.modelfiles.loading import load_module
from atnat.models.decoders.dag_paths import _scaled_forward, dag_log_likelihood

DATA = Path("../shared/data/multi30k")
TRAINED_AT = "98b374e"  # the commit the grid's cells trained at (their attempts.json)


def loss_trained_with():
    """The likelihood function of models/decoders/dag_paths.py as the cells trained with it, from git."""
    source = subprocess.run(["git", "show", f"{TRAINED_AT}:models/decoders/dag_paths.py"], check=True,
                            capture_output=True, text=True).stdout
    module = types.ModuleType("dag_paths_trained_with")
    exec(compile(source, f"{TRAINED_AT}:models/decoders/dag_paths.py", "exec"), module.__dict__)
    return module.dag_log_likelihood


def compare(match, links, sizes, lengths, row: dict, trained_with) -> None:
    """Both likelihoods of one batch and their gradients; accumulates into row. Outside autocast, as
    training's backward is: on a CPU a backward under autocast would run its products in bf16."""
    with torch.enable_grad(), torch.autocast("cpu", enabled=False):
        _compare(match, links, sizes, lengths, row, trained_with)


def _compare(match, links, sizes, lengths, row: dict, trained_with) -> None:
    match, links = match.detach().float().requires_grad_(), links.detach().float().requires_grad_()
    exact = dag_log_likelihood(match, links, sizes, lengths)
    floored = trained_with(match, links, sizes, lengths)
    _, doubtful = _scaled_forward(match.detach(), links.detach(), sizes, lengths)  # rows the exact loss redoes
    fits = torch.isfinite(exact)
    loss = lambda ll: -(ll / lengths.float())[fits].sum() / fits.sum().clamp(min=1)  # the training loss's form
    g_exact = torch.autograd.grad(loss(exact), [match, links])
    g_floored = torch.autograd.grad(loss(floored), [match, links])
    diff = (exact - floored).detach()[fits].abs()
    row["sentences"] += int(fits.sum())
    row["doubtful_rows"] += int((doubtful & fits).sum())
    row["max_abs_diff_nats"] = max(row["max_abs_diff_nats"], float(diff.max()) if len(diff) else 0.0)
    row["rows_diff_over_1e-3"] += int((diff > 1e-3).sum())
    row["max_loss_diff"] = max(row["max_loss_diff"], abs((loss(exact) - loss(floored)).item()))
    for name, a, b in zip(("match", "links"), g_exact, g_floored):
        finite = torch.isfinite(a) & torch.isfinite(b)
        scale = float(a[finite].abs().max())
        row[f"max_grad_diff_{name}_rel"] = max(row[f"max_grad_diff_{name}_rel"],
                                              float((a - b)[finite].abs().max()) / scale if scale else 0.0)


def main(out: str, n_batches: int, checkpoints: list[str]) -> None:
    torch.set_num_threads(1)
    src = (DATA / "train.en").read_text(encoding="utf-8").splitlines()[:4000]
    tgt = (DATA / "train.de").read_text(encoding="utf-8").splitlines()[:4000]
    rows, trained_with = [], loss_trained_with()
    for path in checkpoints:
        module, tokenizer = load_module(path)
        module.train()
        torch.manual_seed(0)  # dropout and glancing draw the same for every checkpoint
        loader = make_loader(encode_split(tokenizer, src, tgt, name="train"), 4000, shuffle=True, seed=1)
        row = {"checkpoint": "/".join(Path(path).parts[-3:]), "batches": n_batches, "sentences": 0, "doubtful_rows": 0,
               "max_abs_diff_nats": 0.0, "rows_diff_over_1e-3": 0, "max_loss_diff": 0.0,
               "max_grad_diff_match_rel": 0.0, "max_grad_diff_links_rel": 0.0, "torch": torch.__version__}
        real = dag.dag_log_likelihood
        dag.dag_log_likelihood = lambda *tables: (compare(*tables, row, trained_with), real(*tables))[1]
        try:
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):  # as the cells trained here
                for _, batch in zip(range(n_batches), loader):
                    module.loss_parts(batch)
        finally:
            dag.dag_log_likelihood = real
        print(row, flush=True)
        rows.append(row)
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3:])
