"""The auto engine's linear layers as they were (every layer on oneDNN's packed weight from 16 rows) against
the measured rule (packed only from the rows where the packed product measured faster on this CPU:
experiments/modelfiles/packed.py) and eager, on the bench's AT (D = 256, 3+3 layers, 8,000 pieces, random
weights): greedy and beam 5 at batches of 16 and 64 sources of 20 tokens, outputs of 30. 1 thread, the three
systems in turn on each case, median of repeats; every output equals eager's (checked).

    python results/bench/measured_packing.py OUT.csv [REPEATS]
"""
from __future__ import annotations

import copy
import statistics
import sys
import time

import pandas as pd
import torch

from atnat.decoding.beam import Beam
from atnat.decoding.greedy import Greedy
from atnat.experiments.bench.spec import FULL
from atnat.experiments.modelfiles import packed
from atnat.experiments.modelfiles.engines import apply_engine
from atnat.models.seq2seq import Seq2SeqModule

SHAPES = [(256, 768), (256, 256), (256, 512), (256, 1024), (1024, 256), (256, 8000)]  # the model's (in, out)


def main(out: str, repeats: int = 7) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    packed.forget_measurements()
    began = time.perf_counter()  # the measured rule's one-off cost: every shape of the model, measured now
    decisions = {(i, o): packed.packed_from_rows(i, o, "onednn") for i, o in SHAPES}
    calibration_s = time.perf_counter() - began
    eager = Seq2SeqModule(vocab_size=8000, decoder="at", model=FULL).eval()
    systems = {"eager": eager}
    for name, measured in (("auto, every layer packed", False), ("auto, packed where measured faster", True)):
        module = copy.deepcopy(eager)
        apply_engine(module, "auto")
        for layer in module.modules():
            if isinstance(layer, packed.PackedLinear):
                layer.measured = measured
        systems[name] = module
    gen = torch.Generator().manual_seed(1)
    cases = {}
    for batch in (16, 64):
        src, lengths = torch.randint(10, 8000, (batch, 20), generator=gen), torch.full((batch,), 20)
        cases[("greedy", batch)] = (src, lengths, Greedy(max_len_a=0.0, max_len_b=30))
        cases[("beam5", batch)] = (src, lengths, Beam(beam_size=5, max_len_a=0.0, max_len_b=30))
    times = {(case, name): [] for case in cases for name in systems}
    with torch.inference_mode():
        for case, (src, lengths, strategy) in cases.items():  # untimed first calls, outputs checked
            expected = eager.decode(src, lengths, strategy).tokens
            for name, module in systems.items():
                if not torch.equal(module.decode(src, lengths, strategy).tokens, expected):
                    raise SystemExit(f"{name}, {case}: tokens differ from eager's")
        for _ in range(repeats):
            for case, (src, lengths, strategy) in cases.items():
                for name, module in systems.items():
                    began = time.perf_counter()
                    module.decode(src, lengths, strategy)
                    times[case, name].append(time.perf_counter() - began)
    rows = []
    for (strategy, batch) in cases:
        base = statistics.median(times[(strategy, batch), "eager"])
        for name in systems:
            median = statistics.median(times[(strategy, batch), name])
            rows.append(dict(strategy=strategy, batch=batch, system=name, median_s=median, over_eager=median / base,
                             threads=1, repeats=repeats, torch=torch.__version__))
    table = pd.DataFrame(rows)
    table["packed_from_rows"] = str(decisions)
    table["calibration_s"] = calibration_s
    table.to_csv(out, index=False)
    print(table.drop(columns="packed_from_rows").to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print("packed from rows, per (in, out) shape:", decisions, f"(measured in {calibration_s:.2f} s)")


if __name__ == "__main__":
    main(sys.argv[1], *(int(x) for x in sys.argv[2:3]))
