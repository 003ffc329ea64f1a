"""A/B of the output projection in one process, round-robin: `OutputProjection` (cached transposed
weight at CPU inference) against a plain `nn.Linear` with the same weights, on the benchmark's
random-weight AT and NAT models. Prints medians and the ratio, and checks the tokens are identical.

    .venv/bin/python results/bench/ab_output_projection.py
"""
import statistics
import time

import torch
from torch import nn

from atnat.experiments.bench import Models, make_spec, our_fn, our_strategy

torch.set_num_threads(2)
spec = make_spec()
models = Models(spec)
torch.manual_seed(1)
for batch, name in ((1, "greedy"), (1, "beam5"), (64, "greedy"), (1, "parallel")):
    src = torch.randint(6, spec.vocab, (batch, spec.src_len))
    decoder, strategy = our_strategy(name, 30)
    module = models.get(decoder)
    fn = our_fn(module, strategy, src, 30)
    fast = module.decoder.output
    plain = nn.Linear(fast.in_features, fast.out_features).eval()
    plain.load_state_dict(fast.state_dict())
    times, tokens = {"nn.Linear": [], "OutputProjection": []}, {}
    with torch.inference_mode():
        for _ in range(12 if batch == 1 else 6):
            for label, layer in (("nn.Linear", plain), ("OutputProjection", fast)):
                module.decoder.output = layer
                start = time.perf_counter()
                tokens[label] = fn().tokens
                times[label].append(time.perf_counter() - start)
    module.decoder.output = fast
    med = {k: statistics.median(v[2:]) * 1000 for k, v in times.items()}  # first two rounds: warm-up
    print(f"batch {batch:3d} {name:9s}: nn.Linear {med['nn.Linear']:.1f} ms, OutputProjection "
          f"{med['OutputProjection']:.1f} ms, ratio {med['nn.Linear'] / med['OutputProjection']:.3f}, "
          f"same tokens {torch.equal(tokens['nn.Linear'], tokens['OutputProjection'])}")
