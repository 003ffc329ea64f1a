"""auto's AT step for single-sentence decodes, four ways: max-autotune (`+autotune`: inductor's CPP
GEMM templates benchmarked against oneDNN's GEMM) or the CPP templates alone (`+cppgemm`: nothing
benchmarked), each exported with a dynamic row count (what the `aoti` engines do; the example has
3 rows per group, so beam 5's GEMMs are tuned at 15 rows) and with the row count fixed at one
sentence (1 row greedy, 5 rows beam 5). Bench size (D=256, 3+3 layers, V=8000), encoder on the
packed eager path for all four; one process: the four compiled one after another (compile seconds
per package), then greedy and beam 5 (30 tokens) timed interleaved, each timed call right after an
untimed call of the same variant, median of 9; tokens checked equal to eager's. 1 thread. Writes
step_variants.csv next to this file.

    .venv/bin/python results/bench/step_variants.py
"""
import copy
import statistics
import time
from pathlib import Path

import pandas as pd
import torch

from atnat.core.engine_names import parse_engine
from atnat.decoding.beam import Beam
from atnat.decoding.greedy import Greedy
from atnat.experiments.modelfiles.aoti import CompiledStep
from atnat.experiments.modelfiles.engines import _step, apply_engine
from atnat.models.decoders.static_cache import StaticStep
from atnat.models.seq2seq import Seq2SeqModule

torch.set_num_threads(1)
torch.manual_seed(0)


class OneSentenceStep(StaticStep):
    """StaticStep exported with static row counts: one memory row, `group` buffer rows."""

    def example(self, dtype=torch.float32):
        args, shapes = super().example(dtype)
        m = args[4].size(1)
        args = tuple(a.contiguous() for a in (args[0][: self.group], args[1], args[2][:, : self.group],
                                              args[3][:, : self.group], args[4][:, :1], args[5][:, :1], args[6][:1]))
        static = torch.export.Dim.STATIC
        shapes = ({0: static}, None, {1: static, 3: shapes[2][3]}, {1: static, 3: shapes[3][3]},
                  {1: static, 3: shapes[4][3]}, {1: static, 3: shapes[5][3]}, {0: static, 3: shapes[6][3]})
        assert m > 1
        return args, shapes


model = dict(d_model=256, n_heads=4, ffn_dim=1024, encoder_layers=3, decoder_layers=3)
base = Seq2SeqModule(vocab_size=8000, decoder="at", model=model).eval()
src, lengths = torch.randint(6, 8000, (1, 20)), torch.tensor([20])
strategies = {"greedy": Greedy(max_len_a=0.0, max_len_b=30, min_len=30),
              "beam5": Beam(beam_size=5, max_len_a=0.0, max_len_b=30, min_len=30)}
VARIANTS = {"cppgemm-one-sentence": ("aoti+cppgemm+fused", True), "cppgemm-dynamic-rows": ("aoti+cppgemm+fused", False),
            "autotune-one-sentence": ("aoti+autotune+fused", True), "autotune-dynamic-rows": ("aoti+autotune+fused", False)}
with torch.inference_mode():
    ref = {name: base.decode(src, lengths, s).tokens for name, s in strategies.items()}
models, compile_s = {}, {}
for variant, (engine, one) in VARIANTS.items():
    module = copy.deepcopy(base)
    info = apply_engine(module, "auto", step_rows=0)  # packed linear layers, nothing compiled
    step = _step(module.decoder, parse_engine(engine), info, None)
    assert isinstance(step, CompiledStep)
    if one:
        step.fields = {**step.fields, "one_sentence": True}  # its own packages
        real = StaticStep

        def runner(group, step=step):  # the package of OneSentenceStep for this group
            import atnat.experiments.modelfiles.aoti as aoti
            aoti.StaticStep = OneSentenceStep
            try:
                return CompiledStep.runner(step, group)
            finally:
                aoti.StaticStep = real
        step.runner = runner
    module.decoder.use_static_cache(True, step=step, always_mask=True, attention="fused", max_rows=1)
    with torch.inference_mode():
        for name, strategy in strategies.items():
            assert torch.equal(module.decode(src, lengths, strategy).tokens, ref[name]), (variant, name)
    compile_s[variant] = {r.what: r.seconds for r in info.records}
    print(variant, compile_s[variant], flush=True)
    models[variant] = module
times = {(v, s): [] for v in models for s in strategies}
with torch.inference_mode():
    for _ in range(9):
        for name, strategy in strategies.items():
            for variant, module in models.items():
                module.decode(src, lengths, strategy)
                began = time.perf_counter()
                module.decode(src, lengths, strategy)
                times[(variant, name)].append((time.perf_counter() - began) * 1000)
rows = []
for (variant, name), t in times.items():
    group = 1 if name == "greedy" else 5
    rows.append({"variant": variant, "engine": VARIANTS[variant][0], "rows": "one sentence" if VARIANTS[variant][1] else "dynamic",
                 "strategy": name, "median_ms": statistics.median(t),
                 "compile_s": compile_s[variant][f"at step, group {group}"]})
    print(rows[-1], flush=True)
pd.DataFrame(rows).to_csv(Path(__file__).with_name("step_variants.csv"), index=False, float_format="%.2f")
