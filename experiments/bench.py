"""`atnat bench`: decoding and training speed of our AT and NAT models, side by side with a
Hugging Face peer of identical dimensions (experiments/bench_hf.py).

decode: every system decodes the same random sources (B x S ids) with random weights and emits
exactly L tokens per sentence (AT: min = max length; NAT: the predicted length forced to L), so
throughputs compare equal work. A timed call is the whole decode, encoder included. We warm up,
synchronise (CUDA), take the median of repeats and count decoder passes (design.md, "Measuring
speed honestly"). Per row we also record the peak resident memory during the timed repeats and
the RSS growth over them (a leak shows up as a positive rss_delta_mb).
train: target tokens/s of forward + backward + clip + Adam step per decoder, bf16 autocast and
MFU (6 x params x target tokens per step) on CUDA.
"""
from __future__ import annotations

import argparse
import gc
import math
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
import torch

from atnat.experiments import bench_hf
from atnat.experiments.metrics.speed import current_rss_mb, measure, peak_memory_mb, reset_peak
from atnat.models.errors import AtnatError

FULL = dict(d_model=256, n_heads=4, ffn_dim=1024, encoder_layers=3, decoder_layers=3, dropout=0.0)
TINY = dict(d_model=32, n_heads=2, ffn_dim=64, encoder_layers=1, decoder_layers=1, dropout=0.0)
SRC_LEN, OUT_LEN = 20, 30
SWEEP_LENGTHS, SWEEP_BATCHES = (10, 30, 50, 100), (1, 8, 64, 256)
STRATEGIES = ("greedy", "beam5", "parallel", "mask-predict-4", "mask-predict-10", "ctc")
HF_BEAMS = {"greedy": 1, "beam5": 5}  # our strategies that have a Hugging Face peer
COLUMNS = ["system", "strategy", "batch", "src_len", "out_len", "median_s", "tokens_per_s",
           "sents_per_s", "ratio_vs_hf", "speedup_vs_at_greedy", "passes", "peak_mem_mb",
           "device", "threads", "repeats", "min_s", "tokens_out", "slots", "rss_delta_mb"]
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
    budget_s: float = 60.0  # per row: fewer repeats (>= min(3, repeats)) when a call is this slow
    device: str = "cpu"
    threads: int = 2
    hf: bool = True  # add the Hugging Face peer rows when transformers is importable


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
    if spec.device not in ("cpu", "cuda"):
        raise AtnatError(f"--device must be cpu or cuda, got {spec.device!r}")
    if spec.device == "cuda" and not torch.cuda.is_available():
        raise AtnatError("--device cuda: no CUDA device is available to torch")
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
    from atnat.decoding.beam import Beam
    from atnat.decoding.ctc import CTC
    from atnat.decoding.greedy import Greedy
    from atnat.decoding.mask_predict import MaskPredict
    from atnat.decoding.parallel import Parallel

    pinned = dict(min_len=out_len, max_len_a=0.0, max_len_b=out_len, max_len_cap=out_len)
    if name == "greedy":
        return "at", Greedy(**pinned)
    if name == "beam5":
        return "at", Beam(beam_size=5, **pinned)
    if name == "parallel":
        return "nat", Parallel()
    if name.startswith("mask-predict-"):  # early stop off: every iteration really runs
        return "cmlm", MaskPredict(iterations=int(name.rsplit("-", 1)[1]), early_stop=False)
    return "ctc", CTC()


class Models:
    """Random-weight Seq2SeqModules of one size, built once per (decoder, CTC upsampling)."""

    def __init__(self, spec: Spec):
        self.spec, self.cache = spec, {}

    def get(self, decoder: str, upsample: int = 0):
        key = (decoder, upsample)
        if key not in self.cache:
            import atnat.models.decoders  # noqa: F401  (registers the decoders)
            from atnat.models.seq2seq import Seq2SeqModule

            torch.manual_seed(0)
            self.cache[key] = Seq2SeqModule(
                vocab_size=self.spec.vocab, decoder=decoder, model=self.spec.model,
                decoder_options={"upsample": upsample} if decoder == "ctc" else None,
            ).eval().to(self.spec.device)
        return self.cache[key]


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
    if name != "ctc":
        if bool((lengths != out_len).any()) or bool((hyps.tokens[:, 0] == special.eos).any()):
            raise AtnatError(f"ours/{name} emitted lengths {sorted(set(lengths.tolist()))}, "
                             f"expected exactly {out_len} tokens and no EOS")
    return float(lengths.float().mean())


def _cpu_peak_mb(reset: bool = False) -> float | None:
    """Peak RSS (VmHWM, MiB) of this process, first reset to the current RSS when asked (Linux
    >= 4.0: /proc/self/clear_refs); None where /proc refuses."""
    try:
        if reset:
            Path("/proc/self/clear_refs").write_text("5")
        return int(re.search(r"VmHWM:\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) / 1024
    except (OSError, AttributeError):
        return None


def timed(fn, spec: Spec) -> dict:
    """Run fn once untimed (its output is returned for checks; it counts as one warm-up), then
    measure; -> timing, peak memory during the timed repeats and RSS growth over them."""
    start = time.perf_counter()
    out = fn()
    first = time.perf_counter() - start
    repeats = max(min(3, spec.repeats), min(spec.repeats, int(spec.budget_s / max(first, 1e-9))))
    for _ in range(max(0, spec.warmup - 1)):
        fn()
    gc.collect(1)  # young generations only: a full collection costs ~0.2 s here
    rss = current_rss_mb()
    reset_peak(spec.device)
    hwm = spec.device == "cpu" and _cpu_peak_mb(reset=True) is not None
    t = measure(fn, warmup=0, repeats=repeats, device=spec.device)
    peak = _cpu_peak_mb() if hwm else peak_memory_mb(spec.device)
    gc.collect(1)
    return dict(out=out, median_s=t.median_s, min_s=t.min_s, repeats=repeats, peak_mem_mb=peak,
                rss_delta_mb=current_rss_mb() - rss)


def row(system: str, name: str, batch: int, out_len: int, spec: Spec, t: dict, **counts) -> dict:
    """One CSV row; counts: passes, tokens_out, slots (ratios are added once all rows exist)."""
    t = {k: v for k, v in t.items() if k != "out"}
    return dict(system=system, strategy=name, batch=batch, src_len=spec.src_len, out_len=out_len,
                tokens_per_s=batch * out_len / t["median_s"], sents_per_s=batch / t["median_s"],
                device=spec.device, threads=spec.threads, **t, **counts)


def our_row(models: Models, name: str, src, out_len: int, spec: Spec) -> dict:
    decoder, strategy = our_strategy(name, out_len)
    k = ctc_upsample(out_len, spec.src_len) if decoder == "ctc" else 0
    module = models.get(decoder, k)
    t = timed(our_fn(module, strategy, src, out_len), spec)
    tokens = check_ours(t["out"], name, out_len, module.special)
    return row("ours", name, src.size(0), out_len, spec, t, passes=t["out"].n_steps,
               tokens_out=tokens, slots=k * spec.src_len if k else out_len)


def hf_row(hf_model, name: str, src, out_len: int, spec: Spec) -> dict:
    fn = bench_hf.generate_fn(hf_model, src, HF_BEAMS[name], out_len)
    ids, passes = bench_hf.count_decoder_passes(hf_model, fn)
    tokens = bench_hf.check_output(ids, src.size(0), out_len)
    t = timed(fn, spec)
    return row("hf", name, src.size(0), out_len, spec, t, passes=passes, tokens_out=tokens, slots=out_len)


def add_ratios(df: pd.DataFrame) -> pd.DataFrame:
    """ratio_vs_hf: our throughput / HF's for the same strategy and shape (our rows with a peer);
    speedup_vs_at_greedy: a row's throughput / our AT greedy's at the same shape."""
    shape = ["batch", "src_len", "out_len"]
    hf = df[df.system == "hf"][["strategy", *shape, "tokens_per_s"]].rename(columns={"tokens_per_s": "_hf"})
    at = df[(df.system == "ours") & (df.strategy == "greedy")][[*shape, "tokens_per_s"]]
    out = df.merge(hf, on=["strategy", *shape], how="left").merge(
        at.rename(columns={"tokens_per_s": "_at"}), on=shape, how="left")
    out["ratio_vs_hf"] = (out.tokens_per_s / out._hf).where(out.system == "ours")
    out["speedup_vs_at_greedy"] = out.tokens_per_s / out._at
    return out[COLUMNS]


def run_decode(spec: Spec, log=print) -> pd.DataFrame:
    """Measure every strategy (and its HF peer) at every shape of spec; -> the CSV's frame."""
    check_spec(spec)
    torch.set_num_threads(spec.threads)
    use_hf = spec.hf and bench_hf.available()
    if spec.hf and not use_hf:
        log(f"transformers is not installed ({bench_hf.INSTALL_HINT}): Hugging Face rows skipped")
    models = Models(spec)
    hf_model = bench_hf.build_marian(spec.model, spec.vocab).to(spec.device) if use_hf else None
    gen = torch.Generator().manual_seed(0)
    rows = []
    with torch.inference_mode():
        for batch, out_len in spec.shapes:
            src = torch.randint(6, spec.vocab, (batch, spec.src_len), generator=gen).to(spec.device)
            for name in STRATEGIES:
                rows.append(our_row(models, name, src, out_len, spec))
                if use_hf and name in HF_BEAMS:
                    rows.append(hf_row(hf_model, name, src, out_len, spec))
                log(f"  batch {batch:3d} len {out_len:3d} {name:16s} " + "  ".join(
                    f"{r['system']} {r['median_s'] * 1e3:9.1f} ms" for r in rows if
                    (r["strategy"], r["batch"], r["out_len"]) == (name, batch, out_len)))
    return add_ratios(pd.DataFrame(rows))


def format_table(df: pd.DataFrame) -> str:
    """The printed table: the main columns, rounded."""
    cols = ["system", "strategy", "batch", "out_len", "median_s", "tokens_per_s", "sents_per_s",
            "ratio_vs_hf", "speedup_vs_at_greedy", "passes", "peak_mem_mb", "rss_delta_mb"]
    return df[cols].to_string(index=False, float_format=lambda v: f"{v:.4g}", na_rep="-")


def plot_sweep(csv: str | Path) -> Path:
    """Latency vs output length (batch 1) and throughput vs batch (length 30) per system and
    strategy, as one PNG next to the CSV; -> its path."""
    import seaborn as sns
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    csv = Path(csv)
    df = pd.read_csv(csv)
    df["system / strategy"] = df.system + " / " + df.strategy
    fig = Figure(figsize=(13, 5))
    FigureCanvasAgg(fig)
    left, right = fig.subplots(1, 2)
    sns.lineplot(data=df[df.batch == 1], x="out_len", y="median_s", hue="system / strategy",
                 marker="o", ax=left, legend=False)
    left.set(yscale="log", xlabel="output tokens", ylabel="latency per batch-1 call (s)",
             title="latency vs output length (batch 1)")
    sns.lineplot(data=df[df.out_len == OUT_LEN], x="batch", y="sents_per_s", hue="system / strategy",
                 marker="o", ax=right)
    right.set(xscale="log", yscale="log", xlabel="batch size", ylabel="sentences / s",
              title=f"throughput vs batch size (length {OUT_LEN})")
    right.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    png = csv.with_suffix(".png")
    fig.savefig(png, dpi=100)
    return png


def random_batch(batch: int, spec: Spec, tgt_len: int):
    """A Batch of random ids (no padding) on spec.device."""
    from atnat.models.batch import Batch

    gen = torch.Generator().manual_seed(1)
    src = torch.randint(6, spec.vocab, (batch, spec.src_len), generator=gen)
    tgt = torch.randint(6, spec.vocab, (batch, tgt_len), generator=gen)
    full = lambda n: torch.full((batch,), n, dtype=torch.long)  # noqa: E731
    return Batch(src, tgt, full(spec.src_len), full(tgt_len), torch.arange(batch)).to(spec.device)


def peak_flops(device: str, override_tflops: float | None) -> float:
    """Dense bf16 peak FLOP/s of the CUDA device (by name), or NaN when unknown / on CPU."""
    if override_tflops:
        return override_tflops * 1e12
    if device != "cuda":
        return float("nan")
    name = torch.cuda.get_device_name()
    return next((v * 1e12 for k, v in PEAK_TFLOPS.items() if k in name), float("nan"))


def train_row(decoder: str, spec: Spec, batch, steps: int, peak: float) -> dict:
    """Time forward + backward + grad clip (1.0, as the Trainer) + Adam step of one decoder."""
    from atnat.models.losses import total_loss
    from atnat.models.seq2seq import Seq2SeqModule

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
    params = sum(p.numel() for p in module.parameters())
    tokens = int(batch.tgt_lengths.sum())
    flops = 6 * params * tokens
    return dict(decoder=decoder, batch=len(batch), src_len=spec.src_len, tgt_len=batch.tgt.size(1),
                tgt_tokens=tokens, median_s=t.median_s, tokens_per_s=tokens / t.median_s, params=params,
                flops_per_step=flops, mfu=flops / t.median_s / peak, device=spec.device,
                dtype="bf16-autocast" if cuda else "fp32", threads=spec.threads, steps=steps)


def run_train(spec: Spec, *, steps: int, tokens: int, peak_tflops: float | None = None,
              log=print) -> pd.DataFrame:
    """Training throughput of the AT and every NAT decoder on one token-budget batch."""
    check_spec(spec)
    if steps < 1 or tokens < OUT_LEN:
        raise AtnatError(f"need --steps >= 1 and --tokens >= {OUT_LEN}; got {steps}, {tokens}")
    torch.set_num_threads(spec.threads)
    batch = random_batch(tokens // OUT_LEN, spec, OUT_LEN)
    rows = []
    for decoder in ("at", "nat", "cmlm", "ctc"):
        rows.append(train_row(decoder, spec, batch, steps, peak_flops(spec.device, peak_tflops)))
        log(f"  {decoder:5s} {rows[-1]['median_s']:.3f} s/step  {rows[-1]['tokens_per_s']:.0f} tgt tokens/s")
    return pd.DataFrame(rows)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="atnat bench", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    for name in ("decode", "train"):
        p = sub.add_parser(name)
        p.add_argument("--out", help="CSV to write (a --sweep also writes a PNG next to it)")
        p.add_argument("--threads", type=int, help="torch threads for every system (default 2)")
        p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
        p.add_argument("--tiny", action="store_true", help="tiny model, 1 repeat (tests)")
        p.add_argument("--warmup", type=int, help="untimed calls first (default 2; tiny 1)")
    dec, tr = sub.choices["decode"], sub.choices["train"]
    dec.add_argument("--sweep", action="store_true", help=f"lengths {SWEEP_LENGTHS} at batch 1, "
                     f"batches {SWEEP_BATCHES} at length {OUT_LEN}")
    dec.add_argument("--repeats", type=int, help="timed calls per row (default 5; tiny 1)")
    dec.add_argument("--budget-s", type=float, help="per row: cut repeats (not below 3) when "
                     "repeats x first call would exceed this (default 60)")
    dec.add_argument("--no-hf", action="store_true", help="skip the Hugging Face peer")
    tr.add_argument("--steps", type=int, default=5, help="timed training steps (default 5)")
    tr.add_argument("--tokens", type=int, help="target tokens per batch (default 4096; tiny 256)")
    tr.add_argument("--peak-tflops", type=float, help="device peak for MFU (default: by GPU name)")
    return ap


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    spec = make_spec(tiny=args.tiny, sweep=getattr(args, "sweep", False), threads=args.threads,
                     device=args.device, warmup=args.warmup, repeats=getattr(args, "repeats", None),
                     budget_s=getattr(args, "budget_s", None), hf=not getattr(args, "no_hf", False))
    check_spec(spec)
    print(f"atnat bench {args.what}: d_model {spec.model['d_model']}, vocab {spec.vocab}, "
          f"{spec.device}, {spec.threads} threads, torch {torch.__version__}")
    if args.what == "decode":
        df = run_decode(spec)
        print(format_table(df))
    else:
        df = run_train(spec, steps=args.steps, tokens=args.tokens or (256 if args.tiny else 4096),
                       peak_tflops=args.peak_tflops)
        print(df.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        df.to_csv(args.out, index=False)
        print(f"wrote {args.out}")
        if getattr(args, "sweep", False):
            print(f"wrote {plot_sweep(args.out)}")
