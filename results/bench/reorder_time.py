"""Time reorder_state inside beam-5 decodes of 64 sentences (bench model, packed+onednn: the step
auto runs at batch 64), 3 calls, 1 thread: the total and the share spent reordering the growing KV
cache. Run at commit 2eb32ef (fresh cache tensors per reorder): 181-241 ms of 1,118-1,250 ms; at
275a887 (ATState.spare: the reorder writes into the caches freed by the one before): 101-122 ms of
1,015-1,125 ms (quiet machine, the long grid paused).

    .venv/bin/python results/bench/reorder_time.py
"""
import time, statistics, torch
from atnat.experiments.bench import Models, make_spec, our_strategy
from atnat.experiments.modelfiles.engines import apply_engine
torch.set_num_threads(1)
spec = make_spec(threads=1)
model = Models(spec).get("at")
apply_engine(model, "packed+onednn")
strategy = our_strategy("beam5", 30)[1]
dec = model.decoder
acc = []
real = type(dec).reorder_state
def timed(self, state, order):
    a = time.perf_counter(); out = real(self, state, order); acc.append(time.perf_counter() - a); return out
type(dec).reorder_state = timed
src = torch.randint(6, spec.vocab, (64, spec.src_len)); L = torch.full((64,), spec.src_len)
with torch.inference_mode():
    for i in range(3):
        acc.clear(); a = time.perf_counter(); model.decode(src, L, strategy); tot = time.perf_counter() - a
        print(f"total {tot*1000:.0f} ms, reorder {sum(acc)*1000:.0f} ms over {len(acc)} calls, max {max(acc)*1000:.1f}")
