"""Where a decode call of the auto engine spends its time, at batch 1 and 64 (1 thread): the
compiled packages (encoder pass, AT step, NAT pass) timed inside real decodes by wrapping their
calls, the rest of the call (search loop, state updates, length prediction: Python and eager ops)
by difference. The benchmark's model and 30-token strategies (experiments/bench); medians over
10 calls after 3 warm-up calls. Then the greedy AT step's package alone, called 30 times in a
tight loop on the buffers of a real decode (row "at-step-loop"), and the packed output projection
alone at one row (row "output-projection"), per step, medians of 20 loops. Writes
where_auto_time_goes.csv next to this file.

    .venv/bin/python results/bench/where_auto_time_goes.py
"""
import statistics
import time
from pathlib import Path

import pandas as pd
import torch

from atnat.experiments.bench import Models, make_spec, our_fn, our_strategy
from atnat.experiments.bench.spec import ctc_upsample
from atnat.experiments.modelfiles import aoti

torch.set_num_threads(1)
spec = make_spec(threads=1)
models = Models(spec)
spent: dict[str, float] = {}


def timed(cls):
    """Wrap cls.__call__ so that each call's seconds add up under its package's name."""
    call = cls.__call__

    def wrapper(self, *args):
        name = f"{self.kind} pass" if isinstance(self, aoti.CompiledPass) else "at step"
        start = time.perf_counter()
        out = call(self, *args)
        spent[name] = spent.get(name, 0.0) + time.perf_counter() - start
        return out
    cls.__call__ = wrapper


timed(aoti.CompiledPass)
timed(aoti.CompiledStep)
rows = []
torch.manual_seed(1)
upsample = {"ctc": ctc_upsample(30, spec.src_len)}  # 3 slots per source token, as the bench
for batch in (1, 64):
    for name in ("greedy", "beam5", "parallel", "ctc"):
        src = torch.randint(6, spec.vocab, (batch, spec.src_len))
        decoder, strategy = our_strategy(name, 30)
        fn = our_fn(models.get(decoder, upsample.get(decoder, 0), engine="auto"), strategy, src, 30)
        totals, parts = [], []
        with torch.inference_mode():
            for i in range(13):
                spent.clear()
                start = time.perf_counter()
                fn()
                total = time.perf_counter() - start
                if i >= 3:
                    totals.append(total)
                    parts.append(dict(spent))
        total = statistics.median(totals)
        row = {"strategy": name, "batch": batch, "total_ms": total * 1000}
        for part in sorted({k for p in parts for k in p}):
            row[f"{part.replace(' ', '_')}_ms"] = statistics.median(p.get(part, 0.0) for p in parts) * 1000
        row["rest_ms"] = row["total_ms"] - sum(v for k, v in row.items() if k.endswith("_ms") and k != "total_ms")
        rows.append(row)
        print({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}, flush=True)

module = models.get("at", engine="auto")
src = torch.randint(6, spec.vocab, (1, spec.src_len))
decoder, strategy = our_strategy("greedy", 30)
fn = our_fn(module, strategy, src, 30)
step = module.decoder._static_impl
captured = {}


def spy(*args):
    captured["args"] = args
    return step(*args)


module.decoder._static_impl = spy
with torch.inference_mode():
    fn()
    module.decoder._static_impl = step
    args = captured["args"]  # the buffers of the decode's last step: tokens, pos, caches, mask, group
    pos, x = args[1], torch.randn(1, module.decoder.output.in_features)

    def per_step(f, n=30):
        start = time.perf_counter()
        for _ in range(n):
            pos.zero_()  # every call writes cache position 0: in bounds however often it runs
            f()
        return (time.perf_counter() - start) / n * 1000

    for name, f in (("at-step-loop", lambda: step(*args)), ("output-projection", lambda: module.decoder.output(x))):
        rows.append({"strategy": name, "batch": 1, "total_ms": statistics.median(per_step(f) for _ in range(20))})
        print(rows[-1], flush=True)
pd.DataFrame(rows).to_csv(Path(__file__).with_name("where_auto_time_goes.csv"), index=False, float_format="%.3f")
