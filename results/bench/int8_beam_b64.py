"""The int8 model at beam 5, batch 64 (where `auto` was 6-9% slower than eager int8 in bench runs 5
and 6): eager int8, int8 with the compilable wrappers only (`auto` with step_rows=0: nothing
compiled), and int8 `auto` (its encoder package; the step is FBGEMM's eager step at 64 sentences),
interleaved, each timed call right after an untimed one, median of 5, plus each one's encoder
alone. 1 thread; run at commit 8c16640 with the long grid paused: 764 / 780 / 760 ms (encoder 17.9 /
16.7 / 28.4 ms): no slowdown of `auto` here.

    .venv/bin/python results/bench/int8_beam_b64.py
"""
import copy, statistics, time, torch
from atnat.experiments.bench import Models, make_spec, our_strategy
from atnat.experiments.modelfiles.engines import apply_engine
from atnat.experiments.modelfiles.quantize import quantize_int8
torch.set_num_threads(1)
spec = make_spec(threads=1)
base = quantize_int8(Models(spec).get("at"))
wrapped = copy.deepcopy(base); apply_engine(wrapped, "auto", step_rows=0)   # wrappers, nothing compiled
auto = copy.deepcopy(base); apply_engine(auto, "auto")                       # + encoder package
plain = copy.deepcopy(base)
strategy = our_strategy("beam5", 30)[1]
g = torch.Generator().manual_seed(0)
src = torch.randint(6, spec.vocab, (64, spec.src_len), generator=g); L = torch.full((64,), spec.src_len)
ms = {"eager": [], "wrapped": [], "auto": []}
with torch.inference_mode():
    for m in (plain, wrapped, auto):
        m.decode(src, L, strategy)
    for _ in range(5):
        for name, m in (("eager", plain), ("wrapped", wrapped), ("auto", auto)):
            m.decode(src, L, strategy)
            t = time.perf_counter(); m.decode(src, L, strategy); ms[name].append((time.perf_counter() - t) * 1000)
            t = time.perf_counter(); m.encode(src); ms.setdefault(name + "-encode", []).append((time.perf_counter() - t) * 1000)
for k, v in ms.items():
    print(k, round(statistics.median(v), 1), [round(x) for x in v])
