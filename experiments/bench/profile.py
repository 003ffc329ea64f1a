"""`atnat bench profile`: where one of our strategies spends a call's time, by operator."""
from __future__ import annotations

import pandas as pd
import torch

from atnat.experiments.bench.spec import FIRST_ORDINARY, Spec, start
from atnat.experiments.bench.systems import Models, our_system


def run_profile(spec: Spec, name: str, batch: int, out_len: int, *, calls: int = 5, top: int = 15) -> pd.DataFrame:
    """Where one of our strategies spends its time: torch.profiler over `calls` warm decodes of a
    (batch, out_len) shape -> the top ops by self time, with their share of the total."""
    from torch.profiler import ProfilerActivity, profile

    start(spec)
    src = torch.randint(FIRST_ORDINARY, spec.vocab, (batch, spec.src_len), generator=torch.Generator().manual_seed(0))
    system = our_system(Models(spec), name, src.to(spec.device), out_len, spec, compiled=bool(spec.compile),
                        engine=spec.engines[0] if spec.engines else None)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if spec.device == "cuda" else [])
    with torch.inference_mode():
        system.first()
        with profile(activities=activities, record_shapes=True) as prof:
            for _ in range(calls):
                system.fn()
    rows = [dict(op=e.key, shapes=str(e.input_shapes)[:60], calls=e.count // calls,
                 self_ms=e.self_device_time_total / 1e3 / calls if spec.device == "cuda" else e.self_cpu_time_total / 1e3 / calls)
            for e in prof.key_averages(group_by_input_shape=True)]
    df = pd.DataFrame(rows).sort_values("self_ms", ascending=False)
    df["share"] = df.self_ms / df.self_ms.sum()
    return df.head(top).reset_index(drop=True)
