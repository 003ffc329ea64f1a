"""`atnat bench decode`: every strategy of ours and its peers timed at each shape of a Spec, as
one frame (the CSV's columns: COLUMNS), with speed ratios between rows that decode the same
sentences and a leak check at batch LEAK_BATCH."""
from __future__ import annotations

import pandas as pd
import torch

from atnat.experiments.bench import ct2_peer as ct2
from atnat.experiments.bench import hf
from atnat.experiments.bench.spec import FIRST_ORDINARY, OUT_LEN, Spec, start
from atnat.experiments.bench.systems import Models, leak_check, shape_systems, time_round_robin

COLUMNS = ["system", "strategy", "batch", "src_len", "out_len", "median_s", "emitted_tokens_per_s",
           "sents_per_s", "ratio_vs_hf", "ratio_vs_ct2", "speedup_vs_at_greedy", "passes", "peak_mem_mb",
           "device", "threads", "repeats", "min_s", "tokens_out", "slots", "first_call_s", "compile_s", "error"]
LEAK_BATCH, LEAK_STRATEGY = 64, "beam5"  # the shape whose memory growth over repeated calls we report


def add_ratios(df: pd.DataFrame) -> pd.DataFrame:
    """Speed ratios of rows that decode the same sentences (sentences/s, i.e. inverse time):
    ratio_vs_hf: our row / HF's for the same strategy and shape (our rows with a peer);
    ratio_vs_ct2: our row / CTranslate2's of the same precision (ours-int8[-engine] vs ct2-int8,
    our other rows, bf16 engines included, vs ct2-f32); speedup_vs_at_greedy: a row / our AT greedy's at the same shape."""
    shape, key = ["batch", "src_len", "out_len"], ["strategy", "batch", "src_len", "out_len"]
    peer = lambda system, col: df[df.system == system][[*key, "sents_per_s"]].rename(columns={"sents_per_s": col})
    at = df[(df.system == "ours") & (df.strategy == "greedy")][[*shape, "sents_per_s"]]
    out = (df.merge(peer("hf", "_hf"), on=key, how="left").merge(peer("ct2-f32", "_ct2"), on=key, how="left")
           .merge(peer("ct2-int8", "_ct2i8"), on=key, how="left")
           .merge(at.rename(columns={"sents_per_s": "_at"}), on=shape, how="left"))
    ours = out.system.str.startswith("ours")
    out["ratio_vs_hf"] = (out.sents_per_s / out._hf).where(ours)
    ct2_ref = out._ct2i8.where(out.system.str.startswith("ours-int8"), out._ct2)
    out["ratio_vs_ct2"] = (out.sents_per_s / ct2_ref).where(ours)
    out["speedup_vs_at_greedy"] = out.sents_per_s / out._at
    return out[COLUMNS]


def run_decode(spec: Spec, log=print, models: Models | None = None) -> pd.DataFrame:
    """Measure every strategy (and its HF peer) at every shape of spec; -> the CSV's frame."""
    start(spec)
    use_hf = spec.hf and hf.available()
    if spec.hf and not use_hf:
        log(f"transformers is not installed ({hf.INSTALL_HINT}): Hugging Face rows skipped")
    models = models if models is not None else Models(spec)
    hf_model = hf.build_marian(spec.model, spec.vocab).to(spec.device) if use_hf else None
    ct2_peer = make_ct2_peer(models, spec, log)
    gen = torch.Generator().manual_seed(0)
    rows, memory = [], []
    with torch.inference_mode():
        for batch, out_len in spec.shapes:
            src = torch.randint(FIRST_ORDINARY, spec.vocab, (batch, spec.src_len), generator=gen).to(spec.device)
            systems = shape_systems(models, hf_model, src, out_len, spec, ct2_peer)
            for system, stats in zip(systems, time_round_robin(systems, spec)):
                emitted = batch * stats.get("tokens_out", float("nan"))  # a system failed in its first call: NaN
                rows.append(dict(system=system.system, strategy=system.name, batch=batch, src_len=spec.src_len,
                                 out_len=out_len, emitted_tokens_per_s=emitted / stats["median_s"],
                                 sents_per_s=batch / stats["median_s"], device=spec.device,
                                 threads=spec.threads, **stats))
                log(f"  batch {batch:3d} len {out_len:3d} {system.system:9s} {system.name:16s} "
                    + (f"failed: {stats['error']}" if stats["error"] else f"{stats['median_s'] * 1e3:10.1f} ms"))
                if (batch, out_len, system.name) == (LEAK_BATCH, OUT_LEN, LEAK_STRATEGY) and not stats["error"]:
                    memory.append(leak_check(system, batch, spec))
    df = add_ratios(pd.DataFrame(rows))
    df.attrs["memory"] = memory  # leak-check rows (none without a batch-64 shape)
    return df


def make_ct2_peer(models: Models, spec: Spec, log):
    """The CTranslate2 peer on our AT model's random weights, or None (not asked, not installed,
    or no device for it: said in the log)."""
    if not spec.ct2:
        return None
    if not ct2.available():
        log(f"ctranslate2 is not installed ({ct2.INSTALL_HINT}): CTranslate2 rows skipped")
        return None
    problem = ct2.device_problem(spec.device)
    if problem:
        log(f"CTranslate2 rows skipped: {problem}")
        return None
    return ct2.Peer(models.get("at"), device=spec.device, threads=spec.threads)


def print_decode(df: pd.DataFrame) -> None:
    """The decode table (the CSV's columns less the constant and secondary ones) and the leak check."""
    memory = pd.DataFrame(df.attrs["memory"])
    cols = [c for c in COLUMNS if c not in ("src_len", "device", "threads", "min_s", "slots", "repeats")]
    print(df[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}", na_rep="-"))
    print("memory over repeated calls:\n" + memory.to_string(index=False, float_format="{:.1f}".format))
