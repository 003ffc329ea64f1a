"""`atnat bench train`: training throughput (target tokens/s) of every decoder family on one
token-budget batch: forward + backward + clip + Adam step; on CUDA bf16 autocast and MFU
(6 x params x target tokens per step against the device's dense bf16 peak)."""
from __future__ import annotations

import pandas as pd
import torch

from atnat.experiments.bench.spec import OUT_LEN, Spec, start, FIRST_ORDINARY
from atnat.experiments.metrics.speed import measure
from atnat.models.batch import Batch
from atnat.core.errors import AtnatError
from atnat.models.losses import total_loss
from atnat.models.seq2seq import Seq2SeqModule

PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}  # dense bf16 tensor-core peaks


def train_row(decoder: str, spec: Spec, batch, steps: int, peak: float) -> dict:
    """Time forward + backward + grad clip (1.0, as the Trainer) + Adam step of one decoder."""
    torch.manual_seed(0)
    module = Seq2SeqModule(vocab_size=spec.vocab, decoder=decoder,
                           model={**spec.model, "dropout": 0.1}).to(spec.device).train()
    opt = torch.optim.Adam(module.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-9)
    cuda = spec.device == "cuda"

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=cuda):
            loss = total_loss(module.decoder.loss(batch, module.encode(batch.src)))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
        opt.step()
    t = measure(step, warmup=spec.warmup, repeats=steps, device=spec.device)
    params, tokens = sum(p.numel() for p in module.parameters()), int(batch.tgt_lengths.sum())
    flops = 6 * params * tokens
    return dict(decoder=decoder, batch=len(batch), src_len=spec.src_len, tgt_len=batch.tgt.size(1),
                tgt_tokens=tokens, median_s=t.median_s, tokens_per_s=tokens / t.median_s, params=params,
                flops_per_step=flops, mfu=flops / t.median_s / peak, device=spec.device,
                dtype="bf16-autocast" if cuda else "fp32", threads=spec.threads, steps=steps)


def run_train(spec: Spec, *, steps: int, tokens: int, peak_tflops: float | None = None,
              log=print) -> pd.DataFrame:
    """Training throughput of the AT and every NAT decoder on one token-budget batch; MFU against
    the dense bf16 peak (peak_tflops, else by CUDA device name; NaN when unknown or on CPU)."""
    start(spec)
    if steps < 1 or tokens < OUT_LEN:
        raise AtnatError(f"need --steps >= 1 and --tokens >= {OUT_LEN}; got {steps}, {tokens}")
    b, gen = tokens // OUT_LEN, torch.Generator().manual_seed(1)
    src, tgt = (torch.randint(FIRST_ORDINARY, spec.vocab, (b, n), generator=gen) for n in (spec.src_len, OUT_LEN))
    batch = Batch(src, tgt, torch.full((b,), spec.src_len), torch.full((b,), OUT_LEN), torch.arange(b)).to(spec.device)
    name = torch.cuda.get_device_name() if spec.device == "cuda" else "-"
    peak = (peak_tflops or next((v for k, v in PEAK_TFLOPS.items() if k in name), float("nan"))) * 1e12
    rows = []
    for decoder in ("at", "nat", "cmlm", "ctc"):
        rows.append(train_row(decoder, spec, batch, steps, peak))
        log(f"  {decoder:5s} {rows[-1]['median_s']:.3f} s/step  {rows[-1]['tokens_per_s']:.0f} tgt tokens/s")
    return pd.DataFrame(rows)
