"""The output projection alone (256 -> 8,000, the largest layer of the bench model) at M = 1, 5 and
64 rows, 1 thread: oneDNN packed float32 (PackedLinear, what auto runs), oneDNN int8 with
activations quantized per call (torch.ops.onednn.qlinear_pointwise: CTranslate2's recipe), and
PyTorch's dynamic int8 Linear (FBGEMM: our `--quantize int8` path), and that layer as the compiled
engines run it (`aoti_int8_layer`: CompilableInt8Linear in an AOTInductor package, oneDNN's int8
GEMM with the quantization fused in; dynamic rows). Round-robin, median of 9 rounds of 200 calls
each. Writes int8_gemv.csv next to this file.

    .venv/bin/python results/bench/int8_gemv.py
"""
import statistics
import time
from pathlib import Path

import pandas as pd
import torch

from atnat.experiments.modelfiles.aoti import PACKAGES, Exportable
from atnat.experiments.modelfiles.packed import PackedLinear
from atnat.experiments.modelfiles.quantize import CompilableInt8Linear

torch.set_num_threads(1)
torch.manual_seed(0)
N, K = 8000, 256
w = torch.randn(N, K)
scales = (w.abs().amax(1) / 127).float()
wq = torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8)
onednn_f32 = PackedLinear(w, None, backend="onednn")
fbgemm = torch.ao.nn.quantized.dynamic.Linear(K, N)
fbgemm.set_weight_bias(torch.quantize_per_channel(w, scales.double(), torch.zeros(N, dtype=torch.long), 0, torch.qint8), None)
compiled_layer = CompilableInt8Linear(fbgemm)
aoti_int8, _ = PACKAGES.get_or_compile(
    "int8 layer", {"bench": "int8_gemv"},
    lambda: Exportable(compiled_layer, (torch.randn(3, K),), ({0: torch.export.Dim("rows", min=1, max=4096)},)),
    {"freezing": True})


def onednn_int8(x, packed):
    lo, hi = x.aminmax()
    lo, hi = lo.clamp(max=0), hi.clamp(min=0)
    scale = ((hi - lo) / 255).clamp(min=1e-8)
    zero = torch.round(-lo / scale).to(torch.int64)
    xq = torch.clamp(torch.round(x / scale) + zero, 0, 255).to(torch.uint8)
    return torch.ops.onednn.qlinear_pointwise(xq, float(scale), int(zero), packed, scales, torch.zeros(N, dtype=torch.int64),
                                              None, 1.0, 0, torch.float32, "none", [], "")


rows = []
with torch.inference_mode():
    for m in (1, 5, 64):
        x = torch.randn(m, K)
        packed = torch.ops.onednn.qlinear_prepack(wq, [m, K])
        systems = {"onednn_f32": lambda: onednn_f32(x), "onednn_int8_dynamic": lambda: onednn_int8(x, packed),
                   "fbgemm_int8_dynamic": lambda: fbgemm(x), "aoti_int8_layer": lambda: aoti_int8(x)}
        ref = x @ w.t()
        times = {k: [] for k in systems}
        for _ in range(9):
            for name, fn in systems.items():
                for _ in range(20):
                    fn()
                start = time.perf_counter()
                for _ in range(200):
                    fn()
                times[name].append((time.perf_counter() - start) / 200)
        for name, fn in systems.items():
            rows.append({"rows": m, "system": name, "median_us": statistics.median(times[name]) * 1e6,
                         "max_abs_error": (fn() - ref).abs().max().item()})
            print(rows[-1], flush=True)
pd.DataFrame(rows).to_csv(Path(__file__).with_name("int8_gemv.csv"), index=False, float_format="%.3f")
