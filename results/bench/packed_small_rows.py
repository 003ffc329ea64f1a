"""PackedLinear (oneDNN's packed float32 weight, the auto engine's eager layers) against the plain product
(F.linear, eager's) for few rows: the bench's layer shapes (D = 256: q|k|v 768, FFN 1024 and back, the
8,000-piece output), N rows, 1 thread, both in turn, median of repeats.

    python results/bench/packed_small_rows.py OUT.csv
"""
from __future__ import annotations

import statistics
import sys
import time

import pandas as pd
import torch
import torch.nn.functional as F

from atnat.experiments.modelfiles.packed import PackedLinear

SHAPES = [(256, 768), (256, 1024), (1024, 256), (256, 8000)]  # (in, out)
ROWS = [1, 2, 4, 8, 16, 32, 64, 128]


def main(out: str, repeats: int = 200) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rows = []
    with torch.inference_mode():
        for fan_in, fan_out in SHAPES:
            w, b = torch.randn(fan_out, fan_in) / fan_in**0.5, torch.randn(fan_out)
            packed = PackedLinear(w, b, backend="onednn")
            for n in ROWS:
                x = torch.randn(n, fan_in)
                calls = {"plain": lambda: F.linear(x, w, b), "packed": lambda: packed(x)}
                times = {k: [] for k in calls}
                for _ in range(5):
                    for f in calls.values():
                        f()
                for _ in range(repeats):
                    for k, f in calls.items():
                        began = time.perf_counter()
                        f()
                        times[k].append(time.perf_counter() - began)
                plain, pk = (statistics.median(times[k]) for k in ("plain", "packed"))
                rows.append(dict(fan_in=fan_in, fan_out=fan_out, rows=n, plain_us=plain * 1e6, packed_us=pk * 1e6,
                                 packed_over_plain=pk / plain, threads=1, torch=torch.__version__))
    df = pd.DataFrame(rows)
    df.to_csv(out, index=False)
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3g}"))


if __name__ == "__main__":
    main(sys.argv[1])
