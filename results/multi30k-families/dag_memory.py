"""Peak memory of the DAG decoder on the longest Multi30k sentence pair, beside the AT's, on the CPU.

For each model (the families grid's sizes: D=256, 3+3 layers, the grid's 8000-piece vocabulary), in order:
one training step (forward, backward, optimizer; the first, so Adam's state is allocated in it) on (a) the
longest training pair alone, then (b) a batch of the longest pairs filling train.max_tokens = 4000, then (c)
one decode of the longest source at batch 1. Peak = the process's resident high-water mark during the call
above the resident size before it (Linux: /proc/self/clear_refs resets VmHWM); memory the allocator kept
from an earlier call is not counted again. Writes dag_memory.csv beside this file.
    python results/multi30k-families/dag_memory.py     (from the repository root, in .venv)
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

import torch

import atnat.decoding  # noqa: F401
import atnat.models.decoders  # noqa: F401
from atnat.decoding.dag_walk import DAGLookahead
from atnat.decoding.greedy import Greedy
from atnat.experiments.data.batching import collate
from atnat.experiments.running.grid import load_grid
from atnat.experiments.config.run import load_task
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


def main() -> None:
    torch.set_num_threads(1)
    grid = load_grid("experiments/grids/multi30k-families.yaml")
    cfg = next(c.config for c in grid.cells if c.variant == "at")
    task = load_task(cfg)
    tok = task.tokenizer
    src, tgt = task.splits["train"]
    pairs = sorted(((tok.encode(s), tok.encode(t)) for s, t in zip(src, tgt)), key=lambda p: -max(len(p[0]), len(p[1])))
    longest = pairs[0]
    budget, batch_pairs = 0, []
    for s, t in pairs:  # the longest pairs that fit a 4000-token batch (the grid's budget, padded)
        width = max(len(s), len(t) + 1)
        if width * (len(batch_pairs) + 1) > 4000:
            break
        batch_pairs.append((s, t))
    print(f"longest pair: {len(longest[0])} source / {len(longest[1])} target tokens; "
          f"a full batch of the longest: {len(batch_pairs)} pairs", file=sys.stderr)
    model = dict(d_model=256, n_heads=4, ffn_dim=1024, encoder_layers=3, decoder_layers=3, pre_ln=True)
    rows = []
    for decoder, options, strategy in (("at", {}, Greedy()), ("dag", {"upsample": 4.0}, DAGLookahead()),
                                       ("dag", {"upsample": 8.0}, DAGLookahead())):
        torch.manual_seed(0)
        m = Seq2SeqModule(vocab_size=tok.vocab_size, decoder=decoder, model=model, decoder_options=options)
        opt = torch.optim.Adam(m.parameters())

        def step(items):
            batch = collate([(i, s, t) for i, (s, t) in enumerate(items)])
            m.train()
            parts = m.decoder.loss(batch, m.encode(batch.src), step=0)
            loss = sum(p.weight * p.value for p in parts.values() if p.weight)
            opt.zero_grad()
            loss.backward()
            opt.step()

        def decode():
            m.eval()
            src_ids = torch.tensor([longest[0]])
            with torch.inference_mode():
                m.decode(src_ids, torch.tensor([len(longest[0])]), strategy)
        one = peak_mib(lambda: step([longest]))  # the first step: the optimizer's state is allocated too
        full = peak_mib(lambda: step(batch_pairs))
        dec = peak_mib(decode)
        name = decoder + (f" lambda={options['upsample']:g}" if options else "")
        vertices = "" if not options else int(len(longest[0]) * options["upsample"]) + 2
        rows.append({"model": name, "longest_src": len(longest[0]), "longest_tgt": len(longest[1]),
                     "graph_vertices": vertices, "batch_pairs": len(batch_pairs),
                     "train_step_longest_mib": round(one, 1), "train_step_full_batch_mib": round(full, 1),
                     "decode_longest_b1_mib": round(dec, 1)})
        print(rows[-1], file=sys.stderr)
    with open(OUT, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main()
