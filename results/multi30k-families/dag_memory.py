"""Peak memory of the DAG decoder on the longest Multi30k sentence pair, beside the AT's, on the CPU.

For each model (the families grid's sizes: D=256, 3+3 layers, the grid's 8000-piece vocabulary), in order:
one training step (forward, backward, optimizer; the first, so Adam's state is allocated in it) on (a) the
longest training pair alone, then (b) a batch of the longest pairs filling train.max_tokens = 4000, then (c)
one decode of the longest source at batch 1. Each measurement runs in a fresh process (so no allocator
keeps memory from an earlier one); peak = the process's resident high-water mark during the call above
the resident size just before it (Linux: /proc/self/clear_refs resets VmHWM). Writes dag_memory.csv.
    python results/multi30k-families/dag_memory.py     (from the repository root, in .venv)
"""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import torch

import atnat.decoding  # noqa: F401
import atnat.models.decoders  # noqa: F401
from atnat.decoding.dag_walk import DAGLookahead
from atnat.decoding.greedy import Greedy
from atnat.experiments.config.run import load_task
from atnat.experiments.data.batching import collate
from atnat.experiments.running.grid import load_grid
from atnat.models.decoders.dag import graph_size
from atnat.models.seq2seq import Seq2SeqModule

OUT = Path(__file__).with_name("dag_memory.csv")


def rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(field)


def peak_mib(fn) -> float:
    Path("/proc/self/clear_refs").write_text("5")
    before = rss_kib("VmRSS")
    fn()
    return (rss_kib("VmHWM") - before) / 1024


MODELS = (("at", {}), ("dag", {"upsample": 4.0}), ("dag", {"upsample": 8.0}))
CASES = ("train_step_longest_mib", "train_step_full_batch_mib", "decode_longest_b1_mib")


def measure(model_index: int, case: str) -> dict:
    """One measurement, in this (fresh) process."""
    torch.set_num_threads(1)
    grid = load_grid("experiments/grids/multi30k-families.yaml")
    cfg = next(c.config for c in grid.cells if c.variant == "at")
    task = load_task(cfg)
    tok = task.tokenizer
    src, tgt = task.splits["train"]
    pairs = sorted(((tok.encode(s), tok.encode(t)) for s, t in zip(src, tgt)), key=lambda p: -max(len(p[0]), len(p[1])))
    longest = pairs[0]
    batch_pairs = []
    for s, t in pairs:  # the longest pairs that fit a 4000-token batch (the grid's budget, padded)
        width = max(len(s), len(t) + 1)
        if width * (len(batch_pairs) + 1) > 4000:
            break
        batch_pairs.append((s, t))
    decoder, options = MODELS[model_index]
    model = dict(d_model=256, n_heads=4, ffn_dim=1024, encoder_layers=3, decoder_layers=3, pre_ln=True)
    torch.manual_seed(0)
    m = Seq2SeqModule(vocab_size=tok.vocab_size, decoder=decoder, model=model, decoder_options=options)
    opt = torch.optim.Adam(m.parameters())
    strategy = Greedy() if decoder == "at" else DAGLookahead()

    def step(items):  # the first step: the optimizer's state is allocated in it too
        batch = collate([(i, s, t) for i, (s, t) in enumerate(items)])
        m.train()
        parts = m.decoder.loss(batch, m.encode(batch.src), step=0)
        loss = sum(p.weight * p.value for p in parts.values() if p.weight)
        opt.zero_grad()
        loss.backward()
        opt.step()

    def decode():
        m.eval()
        with torch.inference_mode():
            m.decode(torch.tensor([longest[0]]), torch.tensor([len(longest[0])]), strategy)
    call = {CASES[0]: lambda: step([longest]), CASES[1]: lambda: step(batch_pairs), CASES[2]: decode}[case]
    return {"peak": peak_mib(call), "longest_src": len(longest[0]), "longest_tgt": len(longest[1]),
            "batch_pairs": len(batch_pairs)}


def main() -> None:
    rows = []
    for index, (decoder, options) in enumerate(MODELS):
        name = decoder + (f" lambda={options['upsample']:g}" if options else "")
        row: dict = {"model": name}
        for case in CASES:
            out = subprocess.run([sys.executable, __file__, str(index), case], check=True,
                                 capture_output=True, text=True).stdout
            got = json.loads(out.strip().splitlines()[-1])
            row.update(longest_src=got["longest_src"], longest_tgt=got["longest_tgt"],
                       graph_vertices="" if not options else graph_size(got["longest_src"], options["upsample"]),
                       batch_pairs=got["batch_pairs"])
            row[case] = round(got["peak"], 1)
        rows.append(row)
        print(row, file=sys.stderr)
    with open(OUT, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["model", "longest_src", "longest_tgt", "graph_vertices",
                                               "batch_pairs", *CASES])
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    if len(sys.argv) == 3:
        print(json.dumps(measure(int(sys.argv[1]), sys.argv[2])))
    else:
        main()
