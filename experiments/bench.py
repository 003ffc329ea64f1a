"""`atnat bench`: decoding and training speed of our AT and NAT models, side by side with a
Hugging Face peer of identical dimensions (experiments/bench_hf.py) and CTranslate2 running our
own AT weights in float32 and int8 (experiments/bench_ct2.py); `--quantize int8` adds our AT and
NAT models with dynamic int8 linear layers (`ours-int8`, experiments/quantize.py).

decode: every system decodes the same random sources (B x S ids) with random weights and emits
exactly L tokens per sentence (AT: min = max length; NAT: the predicted length forced to L), so
throughputs compare equal work. A timed call is the whole decode, encoder included. Warm-up, CUDA
sync, median of repeats, decoder passes counted (design.md, "Measuring speed honestly"); per row
also the peak memory of its timed calls and the RSS growth over them (a leak: rss_delta_mb > 0).
train: target tokens/s of forward + backward + clip + Adam step per decoder; on CUDA bf16
autocast and MFU (6 x params x target tokens per step).
"""
from __future__ import annotations

import argparse
import gc
import math
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
import torch

import atnat.models.decoders  # noqa: F401  (registers the decoders)
from atnat.decoding import beam, ctc, greedy, mask_predict, parallel
from atnat.experiments import bench_ct2, bench_hf
from atnat.experiments.metrics.speed import current_rss_mb, measure, peak_memory_mb, reset_peak
from atnat.models.batch import Batch
from atnat.models.decoders.autoregressive import COMPILE_MODES
from atnat.core.errors import AtnatError
from atnat.models.losses import total_loss
from atnat.models.seq2seq import Seq2SeqModule

FULL = dict(d_model=256, n_heads=4, ffn_dim=1024, encoder_layers=3, decoder_layers=3, dropout=0.0)
TINY = dict(d_model=32, n_heads=2, ffn_dim=64, encoder_layers=1, decoder_layers=1, dropout=0.0)
SRC_LEN, OUT_LEN = 20, 30
SWEEP_LENGTHS, SWEEP_BATCHES = (10, 30, 50, 100), (1, 8, 64, 256)
STRATEGIES = ("greedy", "beam5", "parallel", "mask-predict-4", "mask-predict-10", "ctc")
HF_BEAMS = {"greedy": 1, "beam5": 5}  # our strategies that have a Hugging Face / CTranslate2 peer
COLUMNS = ["system", "strategy", "batch", "src_len", "out_len", "median_s", "emitted_tokens_per_s",
           "sents_per_s", "ratio_vs_hf", "ratio_vs_ct2", "speedup_vs_at_greedy", "passes", "peak_mem_mb",
           "device", "threads", "repeats", "min_s", "tokens_out", "slots"]
LEAK_BATCH, LEAK_STRATEGY = 64, "beam5"  # the shape whose memory growth over repeated calls we report
PEAK_TFLOPS = {"H100": 989.0, "H200": 989.0, "A100": 312.0}  # dense bf16 tensor-core peaks


@dataclass(frozen=True)
class Spec:
    """What one benchmark run measures and how."""

    model: dict  # ModelConfig fields
    vocab: int
    shapes: tuple[tuple[int, int], ...]  # (batch, out_len) pairs
    src_len: int = SRC_LEN
    repeats: int = 5
    warmup: int = 2
    device: str = "cpu"
    threads: int = 2
    hf: bool = True  # add the Hugging Face peer rows when transformers is importable
    compile: str | None = None  # torch.compile mode: adds "ours-compiled" rows (static-cache AT step)
    ct2: bool = True  # add the CTranslate2 rows (ct2-f32, ct2-int8) when ctranslate2 is importable
    quantize: str | None = None  # "int8": add "ours-int8" rows (dynamic int8 linear layers, CPU)


def make_spec(*, tiny=False, sweep=False, **kw) -> Spec:
    """The default (or --tiny) model and the default (or --sweep) shapes; kw overrides."""
    shapes = ((1, OUT_LEN), (64, OUT_LEN))
    if sweep:
        shapes = tuple(dict.fromkeys([(1, n) for n in SWEEP_LENGTHS] + [(b, OUT_LEN) for b in SWEEP_BATCHES]))
    base = Spec(model=TINY if tiny else FULL, vocab=64 if tiny else 8000, shapes=shapes,
                repeats=1 if tiny else 5, warmup=1 if tiny else 2)
    return replace(base, **{k: v for k, v in kw.items() if v is not None})


def check_spec(spec: Spec) -> None:
    """Refuse settings that cannot be measured, naming the option."""
    if spec.device != "cpu" and (spec.device != "cuda" or not torch.cuda.is_available()):
        raise AtnatError(f"--device {spec.device}: not available (cpu, or cuda with a CUDA device)")
    if spec.quantize not in (None, "none", "int8") or (spec.quantize == "int8" and spec.device != "cpu"):
        raise AtnatError(f"--quantize {spec.quantize}: int8 rows run on the CPU only (PyTorch's dynamic int8 kernels)")
    if spec.repeats < 1 or spec.warmup < 0 or spec.threads < 1:
        raise AtnatError(f"need --repeats >= 1, warm-up >= 0 and --threads >= 1; got repeats="
                         f"{spec.repeats}, warmup={spec.warmup}, threads={spec.threads}")


class ForcedLength:
    """A ParallelModel whose length distribution puts all mass on one length: NAT strategies then
    emit exactly `length` tokens. The real predictor still runs, so its cost stays in the timing."""

    def __init__(self, model, length: int):
        self.model, self.length = model, length

    def predict_length(self, memory):
        real = self.model.predict_length(memory)  # (B, Lmax+1)
        out = real.new_full((real.size(0), max(real.size(1), self.length + 1)), float("-inf"))
        out[:, self.length] = 0.0
        return out

    def __getattr__(self, name):  # forward_parallel, reorder_memory: the wrapped model's
        return getattr(self.model, name)


def ctc_upsample(out_len: int, src_len: int) -> int:
    """Upsampling factor giving at least 2 slots per output token: k = ceil(2 L / S) (3 at 30/20)."""
    return max(1, math.ceil(2 * out_len / src_len))


def our_strategy(name: str, out_len: int):
    """-> (decoder family, strategy object) of a benchmark strategy name, pinned to out_len."""
    pinned = dict(min_len=out_len, max_len_a=0.0, max_len_b=out_len, max_len_cap=out_len)
    if name == "greedy":
        return "at", greedy.Greedy(**pinned)
    if name == "beam5":
        return "at", beam.Beam(beam_size=5, **pinned)
    if name == "parallel":
        return "nat", parallel.Parallel()
    if name.startswith("mask-predict-"):  # early stop off: every iteration really runs
        return "cmlm", mask_predict.MaskPredict(iterations=int(name.rsplit("-", 1)[1]), early_stop=False)
    return "ctc", ctc.CTC()


class Models(dict):
    """Random-weight Seq2SeqModules of one size, built once per (decoder, CTC upsampling)."""

    def __init__(self, spec: Spec):
        super().__init__()
        self.spec = spec

    def get(self, decoder: str, upsample: int = 0, compile_mode: str | None = None, quantize: str | None = None):
        """compile_mode: the same weights (same seed) with the static-cache step under torch.compile;
        quantize="int8": the same weights with dynamic int8 linear layers."""
        key = (decoder, upsample, compile_mode, quantize)
        if quantize:
            from atnat.experiments.quantize import quantize_int8

            if key not in self:
                self[key] = quantize_int8(self.get(decoder, upsample))
            return self[key]
        if key not in self:
            torch.manual_seed(0)
            self[key] = Seq2SeqModule(
                vocab_size=self.spec.vocab, decoder=decoder, model=self.spec.model,
                decoder_options={"upsample": upsample} if decoder == "ctc" else None).eval().to(self.spec.device)
            if compile_mode:
                self[key].decoder.use_static_cache(True, compile_mode)
        return self[key]


def our_fn(module, strategy, src, out_len: int):
    """-> a no-argument callable decoding src (B, S) from scratch (encoder included); NAT
    strategies read a length forced to out_len."""
    lengths = src.ne(module.special.pad).sum(1)
    if strategy.requires != "parallel":
        return lambda: module.decode(src, lengths, strategy)
    model = ForcedLength(module.decoder, out_len)
    return lambda: strategy.search(model, module.encode(src), src_lengths=lengths, special=module.special)


def check_ours(hyps, name: str, out_len: int, special) -> float:
    """Refuse an output that is not exactly out_len tokens without EOS (CTC: any length);
    -> mean tokens per sentence."""
    lengths = hyps.lengths[:, 0]
    if name != "ctc" and bool((lengths != out_len).any() | (hyps.tokens[:, 0] == special.eos).any()):
        raise AtnatError(f"ours/{name} emitted lengths {sorted(set(lengths.tolist()))}, "
                         f"expected exactly {out_len} tokens and no EOS")
    return float(lengths.float().mean())


@dataclass
class System:
    """One row to measure: `fn` decodes the shape's batch; `first()` runs it once untimed, checks
    the output and returns its counts (passes, tokens_out, slots)."""

    system: str
    name: str
    fn: Callable
    first: Callable[[], dict]


def our_system(models: Models, name: str, src, out_len: int, spec: Spec, compiled: bool = False,
               int8: bool = False) -> System:
    """Our strategy `name` on its random-weight model, pinned to out_len tokens (`compiled`: the
    AT model with the static-cache step under torch.compile, spec.compile mode; `int8`: the model
    with dynamic int8 linear layers)."""
    decoder, strategy = our_strategy(name, out_len)
    k = ctc_upsample(out_len, spec.src_len) if decoder == "ctc" else 0
    module = models.get(decoder, k, spec.compile if compiled else None, "int8" if int8 else None)
    fn = our_fn(module, strategy, src, out_len)

    def first() -> dict:
        hyps = fn()
        return dict(passes=hyps.n_steps, tokens_out=check_ours(hyps, name, out_len, module.special),
                    slots=k * spec.src_len if k else out_len)
    return System("ours-compiled" if compiled else "ours-int8" if int8 else "ours", name, fn, first)


def peak_probe(spec: Spec):
    """Reset the peak-memory counter of spec.device; -> a callable reading the peak since (MiB).
    CPU: this process's VmHWM, reset via /proc/self/clear_refs (Linux >= 4.0; else peak since start)."""
    reset_peak(spec.device)
    if spec.device == "cpu":
        try:
            Path("/proc/self/clear_refs").write_text("5")
            status = Path("/proc/self/status")
            return lambda: int(re.search(r"VmHWM:\s+(\d+)", status.read_text()).group(1)) / 1024
        except OSError:
            pass
    return lambda: peak_memory_mb(spec.device)


def shape_systems(models: Models, hf_model, src, out_len: int, spec: Spec, ct2_peer=None) -> list[System]:
    """Every strategy of ours at one shape (and its int8 form with --quantize int8), each followed
    by its HF and CTranslate2 peers when it has them."""
    systems = []
    for name in STRATEGIES:
        systems.append(our_system(models, name, src, out_len, spec))
        if spec.compile and name in HF_BEAMS:  # the AT strategies, before/after side by side
            systems.append(our_system(models, name, src, out_len, spec, compiled=True))
        if spec.quantize == "int8":
            systems.append(our_system(models, name, src, out_len, spec, int8=True))
        if hf_model is not None and name in HF_BEAMS:
            systems.append(System("hf", name, *bench_hf.peer(hf_model, HF_BEAMS[name], src, out_len)))
        if ct2_peer is not None and name in HF_BEAMS:
            for system in bench_ct2.SYSTEMS:
                systems.append(System(system, name, *ct2_peer.peer(system, HF_BEAMS[name], src, out_len)))
    return systems


def timed_call(fn, spec: Spec) -> tuple[float, float]:
    """One timed call -> seconds, peak memory during it (MiB)."""
    gc.collect(1)  # young generations only: a full collection costs ~0.2 s here
    peak = peak_probe(spec)
    return measure(fn, warmup=0, repeats=1, device=spec.device).median_s, peak()


def leak_check(system: System, batch: int, spec: Spec) -> dict:
    """Memory in use (CPU: RSS; CUDA: allocated tensors) before and after `repeats` consecutive
    calls of an already warm system, and the peak during them: a leak grows call after call."""
    used = current_rss_mb if spec.device == "cpu" else lambda: torch.cuda.memory_allocated() / 2**20
    gc.collect()
    before, peak = used(), peak_probe(spec)
    for _ in range(spec.repeats):
        system.fn()
    gc.collect()
    after = used()
    return dict(system=system.system, strategy=system.name, batch=batch, calls=spec.repeats,
                before_mb=before, after_mb=after, delta_mb=after - before, peak_mb=peak(), device=spec.device)


def time_round_robin(systems: list[System], spec: Spec) -> list[dict]:
    """Time the systems of one shape in rounds (each round calls every system once), so a load
    change on a shared machine hits all alike; the checked first call is one warm-up. -> per
    system: counts, median/min seconds, repeats, peak memory of its timed calls."""
    stats = [dict(s.first(), times=[], peak_mem_mb=0.0, repeats=spec.repeats) for s in systems]
    for _ in range(spec.warmup - 1):
        for s in systems:
            s.fn()
    for _ in range(spec.repeats):
        for s, st in zip(systems, stats):
            seconds, peak = timed_call(s.fn, spec)
            st["times"].append(seconds)
            st["peak_mem_mb"] = max(st["peak_mem_mb"], peak)
    for st in stats:
        times = st.pop("times")
        st.update(median_s=statistics.median(times), min_s=min(times))
    return stats


def add_ratios(df: pd.DataFrame) -> pd.DataFrame:
    """Speed ratios of rows that decode the same sentences (sentences/s, i.e. inverse time):
    ratio_vs_hf: our row / HF's for the same strategy and shape (our rows with a peer);
    ratio_vs_ct2: our row / CTranslate2's of the same precision (ours-int8 vs ct2-int8, our
    float rows vs ct2-f32); speedup_vs_at_greedy: a row / our AT greedy's at the same shape."""
    shape, key = ["batch", "src_len", "out_len"], ["strategy", "batch", "src_len", "out_len"]
    peer = lambda system, col: df[df.system == system][[*key, "sents_per_s"]].rename(columns={"sents_per_s": col})
    at = df[(df.system == "ours") & (df.strategy == "greedy")][[*shape, "sents_per_s"]]
    out = (df.merge(peer("hf", "_hf"), on=key, how="left").merge(peer("ct2-f32", "_ct2"), on=key, how="left")
           .merge(peer("ct2-int8", "_ct2i8"), on=key, how="left")
           .merge(at.rename(columns={"sents_per_s": "_at"}), on=shape, how="left"))
    ours = out.system.str.startswith("ours")
    out["ratio_vs_hf"] = (out.sents_per_s / out._hf).where(ours)
    ct2_ref = out._ct2i8.where(out.system == "ours-int8", out._ct2)
    out["ratio_vs_ct2"] = (out.sents_per_s / ct2_ref).where(ours)
    out["speedup_vs_at_greedy"] = out.sents_per_s / out._at
    return out[COLUMNS]


def run_decode(spec: Spec, log=print, models: Models | None = None) -> pd.DataFrame:
    """Measure every strategy (and its HF peer) at every shape of spec; -> the CSV's frame."""
    check_spec(spec)
    torch.set_num_threads(spec.threads)
    use_hf = spec.hf and bench_hf.available()
    if spec.hf and not use_hf:
        log(f"transformers is not installed ({bench_hf.INSTALL_HINT}): Hugging Face rows skipped")
    models = models if models is not None else Models(spec)
    hf_model = bench_hf.build_marian(spec.model, spec.vocab).to(spec.device) if use_hf else None
    ct2_peer = make_ct2_peer(models, spec, log)
    gen = torch.Generator().manual_seed(0)
    rows, memory = [], []
    with torch.inference_mode():
        for batch, out_len in spec.shapes:
            src = torch.randint(6, spec.vocab, (batch, spec.src_len), generator=gen).to(spec.device)
            systems = shape_systems(models, hf_model, src, out_len, spec, ct2_peer)
            for system, stats in zip(systems, time_round_robin(systems, spec)):
                rows.append(dict(system=system.system, strategy=system.name, batch=batch, src_len=spec.src_len,
                                 out_len=out_len, emitted_tokens_per_s=batch * stats["tokens_out"] / stats["median_s"],
                                 sents_per_s=batch / stats["median_s"], device=spec.device,
                                 threads=spec.threads, **stats))
                log(f"  batch {batch:3d} len {out_len:3d} {system.system:9s} {system.name:16s} "
                    f"{stats['median_s'] * 1e3:10.1f} ms")
                if (batch, out_len, system.name) == (LEAK_BATCH, OUT_LEN, LEAK_STRATEGY):
                    memory.append(leak_check(system, batch, spec))
    df = add_ratios(pd.DataFrame(rows))
    df.attrs["memory"] = memory  # leak-check rows (none without a batch-64 shape)
    return df


def make_ct2_peer(models: Models, spec: Spec, log):
    """The CTranslate2 peer on our AT model's random weights, or None (not asked, not installed,
    or no device for it: said in the log)."""
    if not spec.ct2:
        return None
    if not bench_ct2.available():
        log(f"ctranslate2 is not installed ({bench_ct2.INSTALL_HINT}): CTranslate2 rows skipped")
        return None
    problem = bench_ct2.device_problem(spec.device)
    if problem:
        log(f"CTranslate2 rows skipped: {problem}")
        return None
    return bench_ct2.Peer(models.get("at"), device=spec.device, threads=spec.threads)


def plot_sweep(csv: str | Path) -> Path:
    """Latency vs output length (batch 1) and throughput vs batch (length 30) per system and
    strategy, as one PNG next to the CSV; -> its path."""
    import seaborn as sns
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    csv, fig = Path(csv), Figure(figsize=(13, 5))
    df = pd.read_csv(csv).assign(label=lambda d: d.system + " / " + d.strategy)
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    sns.lineplot(data=df[df.batch == 1], x="out_len", y="median_s", hue="label",
                 marker="o", ax=left, legend=False)
    left.set(yscale="log", xlabel="output tokens", ylabel="latency per batch-1 call (s)",
             title="latency vs output length (batch 1)")
    sns.lineplot(data=df[df.out_len == OUT_LEN], x="batch", y="sents_per_s", hue="label",
                 marker="o", ax=right)
    right.set(xscale="log", yscale="log", xlabel="batch size", ylabel="sentences / s",
              title=f"throughput vs batch size (length {OUT_LEN})")
    right.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    fig.savefig(csv.with_suffix(".png"), dpi=100)
    return csv.with_suffix(".png")


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
    check_spec(spec)
    if steps < 1 or tokens < OUT_LEN:
        raise AtnatError(f"need --steps >= 1 and --tokens >= {OUT_LEN}; got {steps}, {tokens}")
    torch.set_num_threads(spec.threads)
    b, gen = tokens // OUT_LEN, torch.Generator().manual_seed(1)
    src, tgt = (torch.randint(6, spec.vocab, (b, n), generator=gen) for n in (spec.src_len, OUT_LEN))
    batch = Batch(src, tgt, torch.full((b,), spec.src_len), torch.full((b,), OUT_LEN), torch.arange(b)).to(spec.device)
    name = torch.cuda.get_device_name() if spec.device == "cuda" else "-"
    peak = (peak_tflops or next((v for k, v in PEAK_TFLOPS.items() if k in name), float("nan"))) * 1e12
    rows = []
    for decoder in ("at", "nat", "cmlm", "ctc"):
        rows.append(train_row(decoder, spec, batch, steps, peak))
        log(f"  {decoder:5s} {rows[-1]['median_s']:.3f} s/step  {rows[-1]['tokens_per_s']:.0f} tgt tokens/s")
    return pd.DataFrame(rows)


def run_profile(spec: Spec, name: str, batch: int, out_len: int, *, calls: int = 5, top: int = 15) -> pd.DataFrame:
    """Where one of our strategies spends its time: torch.profiler over `calls` warm decodes of a
    (batch, out_len) shape -> the top ops by self time, with their share of the total."""
    from torch.profiler import ProfilerActivity, profile

    check_spec(spec)
    torch.set_num_threads(spec.threads)
    src = torch.randint(6, spec.vocab, (batch, spec.src_len), generator=torch.Generator().manual_seed(0))
    system = our_system(Models(spec), name, src.to(spec.device), out_len, spec, compiled=bool(spec.compile))
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


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="atnat bench", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    for name in ("decode", "train", "profile"):
        p = sub.add_parser(name)
        p.add_argument("--out", help="CSV to write (a --sweep also writes a PNG next to it)")
        p.add_argument("--threads", type=int, help="torch threads for every system (default 2)")
        p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
        p.add_argument("--tiny", action="store_true", help="tiny model, 1 repeat (tests)")
        p.add_argument("--warmup", type=int, help="untimed calls first (default 2; tiny 1)")
    dec, tr, prof = sub.choices["decode"], sub.choices["train"], sub.choices["profile"]
    prof.add_argument("--strategy", choices=STRATEGIES, default="greedy")
    prof.add_argument("--batch", type=int, default=1)
    prof.add_argument("--out-len", type=int, default=OUT_LEN)
    prof.add_argument("--calls", type=int, default=5, help="profiled calls (after one warm-up)")
    prof.add_argument("--compile", choices=COMPILE_MODES)
    prof.set_defaults(sweep=False, repeats=None, no_hf=True, no_ct2=True, quantize="none")
    dec.add_argument("--sweep", action="store_true", help=f"lengths {SWEEP_LENGTHS}, batches {SWEEP_BATCHES}")
    dec.add_argument("--repeats", type=int, help="timed calls per row (default 5; tiny 1)")
    dec.add_argument("--no-hf", action="store_true", help="skip the Hugging Face peer")
    dec.add_argument("--no-ct2", action="store_true", help="skip the CTranslate2 rows (ct2-f32, ct2-int8)")
    dec.add_argument("--quantize", choices=["none", "int8"], default="none",
                     help="int8: add ours-int8 rows (our models with dynamic int8 linear layers; CPU)")
    dec.add_argument("--compile", choices=COMPILE_MODES,
                     help="add ours-compiled rows: the AT step with a static cache under torch.compile "
                          "(reduce-overhead = CUDA graphs on a GPU)")
    tr.add_argument("--steps", type=int, default=5, help="timed training steps (default 5)")
    tr.add_argument("--tokens", type=int, help="target tokens per batch (default 4096; tiny 256)")
    tr.add_argument("--peak-tflops", type=float, help="device peak for MFU (default: by GPU name)")
    tr.set_defaults(sweep=False, repeats=None, no_hf=False, compile=None, no_ct2=True, quantize="none")
    return ap


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    spec = make_spec(tiny=args.tiny, sweep=args.sweep, threads=args.threads, device=args.device,
                     warmup=args.warmup, repeats=args.repeats, hf=not args.no_hf, compile=args.compile,
                     ct2=not args.no_ct2, quantize=None if args.quantize == "none" else args.quantize)
    check_spec(spec)
    print(f"atnat bench {args.what}: d_model {spec.model['d_model']}, vocab {spec.vocab}, "
          f"{spec.device}, {spec.threads} threads, torch {torch.__version__}")
    if args.what == "profile":
        df = run_profile(spec, args.strategy, args.batch, args.out_len, calls=args.calls)
        print(f"ours/{args.strategy}, batch {args.batch}, {args.out_len} tokens: self time per call by op")
        print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    elif args.what == "decode":
        df = run_decode(spec)
        memory = pd.DataFrame(df.attrs["memory"])
        cols = [c for c in COLUMNS if c not in ("src_len", "device", "threads", "min_s", "slots", "repeats")]
        print(df[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}", na_rep="-"))
        print("memory over repeated calls:\n" + memory.to_string(index=False, float_format="{:.1f}".format))
    else:
        df = run_train(spec, steps=args.steps, tokens=args.tokens or (256 if args.tiny else 4096),
                       peak_tflops=args.peak_tflops)
        print(df.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        df.to_csv(args.out, index=False)
        if df.attrs.get("memory"):
            memory.to_csv(Path(args.out).with_name(Path(args.out).stem + "_memory.csv"), index=False)
        print(f"wrote {args.out}")
        if args.sweep:
            print(f"wrote {plot_sweep(args.out)}")
