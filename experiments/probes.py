"""Model probes for the error-propagation study: accuracy by position (teacher-forced vs free
running), the prefix-corruption probe (AT), and a cross-attention map per run."""
from __future__ import annotations

import pandas as pd
import torch

from atnat.models.batch import Batch
from atnat.models.encoder import lengths_to_padding_mask
from atnat.models.seq2seq import Seq2SeqModule

from atnat.experiments.data import EncodedSplit, collate, make_loader
from atnat.experiments.metrics import accuracy_by_position, corruption_effect

CORRUPTED = (1, 2, 4)  # prefix tokens corrupted in the probe
DISTANCES = 8  # positions followed after the corruption


@torch.no_grad()
def oracle_predictions(module: Seq2SeqModule, batch: Batch) -> list[list[int]] | None:
    """Arg-max outputs given the gold context: the gold prefix (AT) or the gold length (NAT)."""
    dec, sp = module.decoder, module.special
    memory = module.encode(batch.src)
    if "step" in dec.capabilities:
        prev, _ = dec.shift(batch)
        pred = dec(prev, memory)[0].argmax(-1)  # (B, T+1)
    elif "parallel" in dec.capabilities and hasattr(dec, "predict_length"):
        mask = lengths_to_padding_mask(batch.tgt_lengths, batch.tgt.size(1))
        tokens = torch.full_like(batch.tgt, sp.mask).masked_fill(mask, sp.pad)
        try:
            pred = dec.forward_parallel(tokens, memory, mask).argmax(-1)  # (B, T)
        except Exception:  # a decoder without gold-length decoding (fixed-length NAT)
            return None
    else:
        return None
    return [p[:n] for p, n in zip(pred.tolist(), batch.tgt_lengths.tolist())]


@torch.no_grad()
def prefix_corruption(module: Seq2SeqModule, batch: Batch, k: int, seed: int = 0):
    """Corrupt k gold-prefix tokens before a cut t (len/3) and follow accuracy for DISTANCES tokens,
    relative to the clean prefix. AT decoders only. Returns (clean, corrupt, valid) (B, D) bools."""
    dec = module.decoder
    memory = module.encode(batch.src)
    prev, out = dec.shift(batch)  # (B, T+1) each
    lengths = batch.tgt_lengths
    cut = torch.maximum(lengths // 3, torch.full_like(lengths, k))  # first predicted position t
    g = torch.Generator().manual_seed(seed)
    noisy = prev.clone()
    first = 6  # ids below are special symbols
    for b in range(prev.size(0)):
        for j in range(int(cut[b]) - k + 1, int(cut[b]) + 1):  # input j carries gold token y[j-1]
            if 1 <= j <= int(lengths[b]):
                r = int(torch.randint(first, dec.vocab_size - 1, (1,), generator=g))
                noisy[b, j] = r + int(r >= int(prev[b, j]))  # any ordinary token but the gold one
    clean_pred = dec(prev, memory)[0].argmax(-1)  # (B, T+1)
    noisy_pred = dec(noisy, memory)[0].argmax(-1)
    pos = cut[:, None] + torch.arange(DISTANCES)[None, :]  # (B, D)
    valid = pos < lengths[:, None]
    pos = pos.clamp(max=out.size(1) - 1)
    gold = out.gather(1, pos)
    clean = (clean_pred.gather(1, pos) == gold) & valid
    noisy_ok = (noisy_pred.gather(1, pos) == gold) & valid
    return clean.numpy(), noisy_ok.numpy(), valid.numpy()


@torch.no_grad()
def attention_map(module: Seq2SeqModule, split: EncodedSplit, index: int = 0) -> pd.DataFrame | None:
    """Last-layer cross-attention (mean over heads) of one sentence under gold context."""
    batch = collate([split[index]])
    dec = module.decoder
    dec.record_attention, dec.recorded_attention = True, None
    try:
        oracle_predictions(module, batch)
        attn = dec.recorded_attention
    finally:
        dec.record_attention = False
    if attn is None:
        return None
    m = attn[0].mean(0)  # (T, S)
    t, s = m.shape
    return pd.DataFrame({"sentence": index, "target_pos": torch.arange(t).repeat_interleave(s).numpy(),
                         "source_pos": torch.arange(s).repeat(t).numpy(), "weight": m.flatten().numpy()})


def run_probes(module: Seq2SeqModule, split: EncodedSplit, *, free_running: list[list[int]] | None,
               strategy: str, max_tokens: int = 4000) -> dict[str, pd.DataFrame]:
    """All probes of one run, as long-format frames keyed by curve name; `strategy` labels the
    free-running outputs (the run's first strategy)."""
    oracle, corr = [], {k: [] for k in CORRUPTED}
    is_at = "step" in module.decoder.capabilities
    for batch in make_loader(split, max_tokens, shuffle=False):
        batch = batch.to(module.device)
        pred = oracle_predictions(module, batch)
        if pred is not None:
            oracle += list(zip(batch.ids.tolist(), pred))
        if is_at:
            for k in CORRUPTED:
                corr[k].append(prefix_corruption(module, batch, k))
    out = {}
    frames = []
    if oracle:
        oracle.sort()
        frames.append(accuracy_by_position([p for _, p in oracle], split.tgt).assign(mode="teacher_forced"))
    if free_running is not None:
        frames.append(accuracy_by_position(free_running, split.tgt).assign(mode="free_running"))
    if frames:
        out["position_accuracy"] = pd.concat(frames, ignore_index=True).assign(strategy=strategy)
    if is_at:
        import numpy as np

        rows = []
        for k, parts in corr.items():
            clean, noisy, valid = (np.concatenate([p[i] for p in parts]) for i in range(3))
            rel = corruption_effect(clean, noisy, valid)
            rows += [{"corrupted": k, "distance": d, "relative_accuracy": float(r)} for d, r in enumerate(rel)]
        out["prefix_corruption"] = pd.DataFrame(rows)
    attn = attention_map(module, split)
    if attn is not None:
        out["attention"] = attn
    return out
