"""How often the compiled training step (`train.step: compiled`) compiles as a run's batch shapes change: a tiny
model of each decoder trained N steps on random padded batches of changing lengths, with torch.compile's
counters read at the end (graphs made, frames tried, frames compiled: a frame tried but not compiled runs eager).
`--loops compiled` puts back the alignment functions as they were before they ran eagerly inside the step
(CTC's Viterbi alignment for GLAT, the DA-Transformer's path programmes), to show what that cost.

    python results/bench/compiled_step_graphs.py OUT.csv [--loops eager|compiled]

Counts, not times: a busy machine gives the same numbers. 1 thread.
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path
from unittest import mock

import torch
import torch._dynamo.utils

from atnat.models.batch import Batch
from atnat.models.decoders import ctc as ctc_module
from atnat.models.decoders import dag as dag_module
from atnat.models.losses import total_loss
from atnat.models.seq2seq import Seq2SeqModule

TINY = dict(d_model=32, n_heads=2, ffn_dim=64, encoder_layers=1, decoder_layers=1, dropout=0.1)
CASES = [("ctc", {"glat": True}, 14), ("dag", {"glat": True, "upsample": 2.0}, 20),
         ("at", {"scheduled_sampling": "inverse_sigmoid", "sampling_k": 500.0}, 14)]


def loops_compiled() -> None:
    """The alignment functions without their torch.compiler.disable (compiled with the step, as before)."""
    ctc_module.ctc_viterbi = ctc_module.ctc_viterbi.__wrapped__
    dag_module.dag_best_alignment = dag_module.dag_best_alignment.__wrapped__
    dag_module.dag_log_likelihood = dag_module.dag_log_likelihood.__wrapped__


def count(decoder: str, options: dict, steps: int) -> dict:
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    torch.manual_seed(0)
    module = Seq2SeqModule(vocab_size=40, decoder=decoder, model=TINY, decoder_options=options,
                           optim={"schedule": "constant"}).train()
    module.step_form = "compiled"
    gen = torch.Generator().manual_seed(3)
    for step in range(steps):
        b, s, t = 4, *(int(n) for n in torch.randint(4, 12, (2,), generator=gen))
        src, tgt = torch.randint(5, 40, (b, s), generator=gen), torch.randint(5, 40, (b, t), generator=gen)
        with mock.patch.object(Seq2SeqModule, "global_step", property(lambda self: 100 * step)):
            loss = total_loss(module.loss_parts(Batch(src, tgt, torch.full((b,), s), torch.full((b,), t),
                                                      torch.arange(b))))
        loss.backward()
    counters = torch._dynamo.utils.counters
    return {"decoder": decoder, "options": options, "steps": steps, "graphs": counters["stats"]["unique_graphs"],
            "frames_tried": counters["frames"]["total"], "frames_compiled": counters["frames"]["ok"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--loops", choices=["eager", "compiled"], default="eager")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.loops == "compiled":
        loops_compiled()
    rows = [{"loops": args.loops, **count(*case)} for case in CASES]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    for row in rows:
        print(row, flush=True)


if __name__ == "__main__":
    main()
