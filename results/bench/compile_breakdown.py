"""Where a fresh process's compile time goes: the bench-size AT model (D=256, 3+3 layers, V=8000)
under `auto`, one single-sentence greedy decode (its encoder package and greedy step package), then
torch's own compile-phase timers (torch._dynamo.utils.compile_times, summed over both packages),
the phases that dominate written to compile_breakdown.csv next to this file. 1 thread.

    .venv/bin/python results/bench/compile_breakdown.py
"""
from pathlib import Path

import pandas as pd
import torch
from torch._dynamo.utils import compile_times

from atnat.decoding.greedy import Greedy
from atnat.experiments.modelfiles.engines import apply_engine
from atnat.models.seq2seq import Seq2SeqModule

PHASES = {  # torch's timer -> what it is
    "create_aot_dispatcher_function": "tracing the exported program for inductor (AOT dispatch)",
    "GraphLowering.run": "lowering the graph to inductor's IR",
    "GraphLowering.codegen": "generating the kernels' and wrapper's C++",
    "compile_file": "the C++ compiler (every compile, the final package's included)",
    "AotCodeCompiler.compile": "the C++ compiler: the final package (.so) alone",
    "compile_fx_inner": "inductor in all (lowering, codegen, compiling)",
}
torch.set_num_threads(1)
torch.manual_seed(1)
model = dict(d_model=256, n_heads=4, ffn_dim=1024, encoder_layers=3, decoder_layers=3)
module = Seq2SeqModule(vocab_size=8000, decoder="at", model=model).eval()
info = apply_engine(module, "auto")
with torch.inference_mode():
    module.decode(torch.randint(6, 8000, (1, 8)), torch.tensor([8]), Greedy())
times = dict(zip(*compile_times(repr="csv", aggregate=True)))
rows = [{"phase": name, "what": what, "seconds": float(times[name])} for name, what in PHASES.items()]
rows += [{"phase": f"package: {r.what}", "what": "export + compile + load, as the engine records it", "seconds": r.seconds}
         for r in info.records]
for row in rows:
    print(row, flush=True)
pd.DataFrame(rows).to_csv(Path(__file__).with_name("compile_breakdown.csv"), index=False, float_format="%.2f")
