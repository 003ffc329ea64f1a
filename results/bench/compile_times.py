"""Compile time of each package the auto engine builds, for the quickstart's model size (D=64, 2+2
layers, 4 heads, FFN 256, vocabulary 16) and the bench's (D=256, 3+3, V=8000): a NAT (parallel)
and an AT model each, one single-sentence decode (greedy) and, for the AT, one beam-5 decode, in a
fresh process (so inductor's private cache starts empty, as every atnat process's does); at the
bench size also the AT model in int8 (`--quantize int8`). 1 thread.
Writes compile_times.csv next to this file.

    .venv/bin/python results/bench/compile_times.py
"""
from pathlib import Path

import pandas as pd
import torch

from atnat.decoding.beam import Beam
from atnat.decoding.greedy import Greedy
from atnat.decoding.parallel import Parallel
from atnat.experiments.modelfiles.engines import apply_engine
from atnat.experiments.modelfiles.quantize import quantize_int8
from atnat.models.seq2seq import Seq2SeqModule

torch.set_num_threads(1)
SIZES = {"quickstart": (dict(d_model=64, n_heads=4, ffn_dim=256, encoder_layers=2, decoder_layers=2), 16),
         "bench": (dict(d_model=256, n_heads=4, ffn_dim=1024, encoder_layers=3, decoder_layers=3), 8000)}
rows = []
for size, (model, vocab) in SIZES.items():
    at = [Greedy(), Beam(beam_size=5)]
    cases = [("nat", [Parallel()]), ("at", at)] + ([("at-int8", at)] if size == "bench" else [])
    for seed, (decoder, strategies) in enumerate(cases):
        torch.manual_seed(seed)  # other weights: no package reused from the model before
        module = Seq2SeqModule(vocab_size=vocab, decoder=decoder.removesuffix("-int8"), model=model).eval()
        if decoder.endswith("-int8"):
            module = quantize_int8(module)
        info = apply_engine(module, "auto")
        src = torch.randint(6, vocab, (1, 8))
        with torch.inference_mode():
            for strategy in strategies:
                module.decode(src, torch.tensor([8]), strategy)
        for record in info.records:
            rows.append({"size": size, "decoder": decoder, "package": record.what, "seconds": record.seconds,
                         "compiled": record.compiled})
            print(rows[-1], flush=True)
pd.DataFrame(rows).to_csv(Path(__file__).with_name("compile_times.csv"), index=False, float_format="%.2f")
