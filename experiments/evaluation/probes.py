"""Model probes for the error-propagation study: accuracy by position (teacher-forced vs free
running), the prefix-corruption probe (AT), and a cross-attention map per run.

Teacher forcing needs a decoder that can be given the gold context: the gold prefix (AT) or the
gold length (NAT decoders with a length predictor). A fixed-length NAT (trained on floor(a*S+b)
slots ending in END tokens) never saw gold-length inputs, so it has no teacher-forced curve.
Every tensor is made on the module's device; results leave through .cpu().
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from atnat.models.batch import Batch
from atnat.models.encoder import lengths_to_padding_mask
from atnat.models.seq2seq import Seq2SeqModule

from atnat.experiments.data.batching import EncodedSplit, collate, make_loader
from atnat.experiments.evaluation.metrics import accuracy_by_position, corruption_effect

CORRUPTED = (1, 2, 4)  # prefix tokens corrupted in the probe
DISTANCES = 8  # positions followed after the corruption


def teacher_forceable(module: Seq2SeqModule) -> bool:
    """True when the decoder can be run on gold context (AT, or NAT with a length predictor)."""
    dec = module.decoder
    return "step" in dec.capabilities or ("parallel" in dec.capabilities and dec.predicts_length)


@torch.inference_mode()
def oracle_predictions(module: Seq2SeqModule, batch: Batch) -> list[list[int]] | None:
    """Arg-max outputs given the gold context: the gold prefix (AT) or the gold length (NAT with a
    length predictor); None for decoders that cannot take it (CTC, fixed-length NAT)."""
    if not teacher_forceable(module):
        return None
    dec, sp = module.decoder, module.special
    memory = module.encode(batch.src)
    if "step" in dec.capabilities:
        prev, _ = dec.shift(batch)
        pred = dec(prev, memory)[0].argmax(-1)  # (B, T+1)
    else:
        mask = lengths_to_padding_mask(batch.tgt_lengths, batch.tgt.size(1))  # (B, T)
        tokens = torch.full_like(batch.tgt, sp.mask).masked_fill(mask, sp.pad)
        pred = dec.forward_parallel(tokens, memory, mask).argmax(-1)  # (B, T)
    return [p[:n] for p, n in zip(pred.cpu().tolist(), batch.tgt_lengths.cpu().tolist())]


@torch.inference_mode()
def prefix_corruption(module: Seq2SeqModule, batch: Batch, k: int, seed: int = 0):
    """Corrupt k gold-prefix tokens before a cut t (len/3) and follow accuracy for DISTANCES tokens,
    relative to the clean prefix. AT decoders only. Returns (clean, corrupt, valid) (B, D) bools."""
    dec = module.decoder
    memory = module.encode(batch.src)
    prev, out = dec.shift(batch)  # (B, T+1) each
    lengths = batch.tgt_lengths
    cut = torch.maximum(lengths // 3, torch.full_like(lengths, k))  # first predicted position t
    g = torch.Generator().manual_seed(seed)  # on the CPU: the same corruptions on every device
    noisy = prev.cpu().clone()
    first = module.special.first_ordinary  # ids below are special symbols
    cut_host, len_host = cut.cpu().tolist(), lengths.cpu().tolist()
    for b in range(noisy.size(0)):
        for j in range(cut_host[b] - k + 1, cut_host[b] + 1):  # input j carries gold token y[j-1]
            if 1 <= j <= len_host[b]:
                r = int(torch.randint(first, dec.vocab_size - 1, (1,), generator=g))
                noisy[b, j] = r + int(r >= int(noisy[b, j]))  # any ordinary token but the gold one
    noisy = noisy.to(prev.device)
    clean_pred = dec(prev, memory)[0].argmax(-1)  # (B, T+1)
    noisy_pred = dec(noisy, memory)[0].argmax(-1)
    pos = cut[:, None] + torch.arange(DISTANCES, device=cut.device)[None, :]  # (B, D)
    valid = pos < lengths[:, None]
    pos = pos.clamp(max=out.size(1) - 1)
    gold = out.gather(1, pos)
    clean = (clean_pred.gather(1, pos) == gold) & valid
    noisy_ok = (noisy_pred.gather(1, pos) == gold) & valid
    return clean.cpu().numpy(), noisy_ok.cpu().numpy(), valid.cpu().numpy()


@torch.inference_mode()
def attention_map(module: Seq2SeqModule, split: EncodedSplit, index: int = 0) -> pd.DataFrame | None:
    """Last-layer cross-attention (mean over heads) of one sentence: under gold context, or for CTC
    its one pass over the upsampled source (None for a fixed-length NAT)."""
    dec = module.decoder
    if not teacher_forceable(module) and "ctc" not in dec.capabilities:
        return None
    batch = collate([split[index]]).to(module.device)
    with dec.recording_attention() as latest:
        if "ctc" in dec.capabilities:
            dec.forward_ctc(module.encode(batch.src))
        else:
            oracle_predictions(module, batch)
        attn = latest()
    if attn is None:
        return None
    m = attn[0].mean(0).float().cpu()  # (T, S)
    t, s = m.shape
    return pd.DataFrame({"sentence": index, "target_pos": torch.arange(t).repeat_interleave(s).numpy(),
                         "source_pos": torch.arange(s).repeat(t).numpy(), "weight": m.flatten().numpy()})


def run_probes(module: Seq2SeqModule, split: EncodedSplit, *, free_running: list[list[int]] | None,
               strategy: str, max_tokens: int = 4000) -> dict[str, pd.DataFrame]:
    """All probes of one run, as long-format frames keyed by curve name; `strategy` labels the
    free-running outputs (the run's first strategy). position_accuracy has a `count` column: the
    sentences each position's accuracy rests on."""
    oracle, corr = [], {k: [] for k in CORRUPTED}
    is_at = "step" in module.decoder.capabilities
    for batch in make_loader(split, max_tokens, shuffle=False):
        batch = batch.to(module.device)
        pred = oracle_predictions(module, batch)
        if pred is not None:
            oracle += list(zip(batch.ids.cpu().tolist(), pred))
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
