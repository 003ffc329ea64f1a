"""`atnat bench train`: training throughput (target tokens/s) of every decoder family on one
token-budget batch: forward + backward + clip + Adam step, in fp32 and bf16 autocast (on a CPU with
avx512_bf16/AMX, or a GPU), in each step form asked for (eager, fused, compiled: models/step_forms.py),
at the bench's model size, the GPU grid's or Transformer-base's (--size); every system timed in turn
(round robin, median per system); on CUDA MFU: the step's matrix-multiply FLOPs (encoder, decoder on
its positions, CTC's slots, GLAT's extra pass: bench/flops.py) against the device's dense bf16 peak
(by its exact model, or --peak-tflops)."""
from __future__ import annotations

import statistics
import time
from dataclasses import replace

import pandas as pd
import torch

from atnat.core.errors import AtnatError
from atnat.experiments.bench.flops import peak_tflops as known_peak
from atnat.experiments.bench.flops import train_step_flops
from atnat.experiments.bench.spec import FIRST_ORDINARY, OUT_LEN, SIZES, Spec, start
from atnat.experiments.config.precision import resolve_precision
from atnat.experiments.evaluation.metrics.speed import _synchronize
from atnat.models.batch import Batch
from atnat.models.losses import total_loss
from atnat.models.optim import OptimConfig
from atnat.models.seq2seq import Seq2SeqModule
from atnat.models.step_forms import STEP_FORMS, make_optimizer

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16}  # autocast dtype of each --precision value


def default_precisions(device: str) -> tuple[str, ...]:
    """fp32, plus bf16 where the device does it natively (what `train.precision: auto` would pick)."""
    return ("fp32", "bf16") if resolve_precision("auto", "gpu" if device == "cuda" else "cpu") == "bf16-mixed" \
        else ("fp32",)


class TrainSystem:
    """One decoder in one precision and step form: its own module and optimizer, and one timed step."""

    def __init__(self, decoder: str, precision: str, spec: Spec, batch, form: str = "eager"):
        torch.manual_seed(0)
        self.decoder, self.precision, self.batch, self.device, self.form = decoder, precision, batch, spec.device, form
        self.module = Seq2SeqModule(vocab_size=spec.vocab, decoder=decoder,
                                    model={**spec.model, "dropout": 0.1}).to(spec.device).train()
        self.module.step_form = form
        self.opt = make_optimizer(self.module.parameters(), OptimConfig(), form)
        self.times: list[float] = []
        self.losses: list[float] = []
        self.steps = 0

    def step(self, timed: bool) -> None:
        torch.manual_seed(self.steps)  # every system's step n draws the same dropout masks
        self.steps += 1
        self._step(timed)

    def loss(self):
        return total_loss(self.module.loss_parts(self.batch))

    def flops(self, spec: Spec) -> int:
        return step_flops(self.module, spec, len(self.batch), self.batch.tgt.size(1))

    def _step(self, timed: bool) -> None:
        dtype = PRECISIONS[self.precision]
        device_type = "cuda" if self.device == "cuda" else "cpu"
        _synchronize(torch.device(self.device))
        began = time.perf_counter()
        with torch.autocast(device_type, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = self.loss()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.module.parameters(), 1.0)
        self.opt.step()
        _synchronize(torch.device(self.device))
        if timed:
            self.times.append(time.perf_counter() - began)
            self.losses.append(float(loss.detach()))


class PeerTrainSystem(TrainSystem):
    """The peer: Hugging Face's MarianMTModel at our dimensions (bench/hf.py, dropout 0.1 as ours), one
    step on the same batch as our AT's: teacher-forced on BOS + target, label-smoothed cross-entropy (0.1,
    as ours) against target + EOS, gradient clipping and the same Adam."""

    def __init__(self, precision: str, spec: Spec, batch):
        from atnat.experiments.bench.hf import build_marian

        self.decoder, self.precision, self.batch, self.device, self.form = "hf-marian", precision, batch, spec.device, "eager"
        self.module = build_marian(spec.model, spec.vocab, dropout=0.1).to(spec.device).train()
        self.opt = make_optimizer(self.module.parameters(), OptimConfig(), "eager")
        eos, bos = torch.full_like(batch.tgt[:, :1], 2), torch.full_like(batch.tgt[:, :1], 1)  # hf.py's ids
        self.inputs, self.labels = torch.cat([bos, batch.tgt], 1), torch.cat([batch.tgt, eos], 1)
        self.times, self.losses, self.steps = [], [], 0

    def loss(self):
        logits = self.module(input_ids=self.batch.src, attention_mask=torch.ones_like(self.batch.src),
                             decoder_input_ids=self.inputs).logits
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), self.labels.flatten(),
                                                 label_smoothing=0.1)

    def flops(self, spec: Spec) -> int:
        return train_step_flops(spec.model, vocab=spec.vocab, decoder="at", batch=len(self.batch),
                                src_len=spec.src_len, tgt_len=self.batch.tgt.size(1))


def sized(spec: Spec, size: str) -> Spec:
    """The spec with the model of --size (the bench's own, or --tiny's, for "bench")."""
    if size not in SIZES:
        raise AtnatError(f"--size {size}: not one of {', '.join(SIZES)}")
    model = SIZES[size][0]
    return spec if model is None else replace(spec, model=dict(model))  # (each system sets its dropout)


def run_train(spec: Spec, *, steps: int, tokens: int | None = None, peak_tflops: float | None = None,
              precisions: tuple[str, ...] | None = None, forms: tuple[str, ...] = ("eager",),
              size: str = "bench", decoders: tuple[str, ...] = ("at", "nat", "cmlm", "ctc"),
              peer: bool = False, log=print) -> pd.DataFrame:
    """Training throughput of the AT and every NAT decoder on one token-budget batch (`tokens`, default
    by size), in each of `precisions` (default: fp32, and bf16 where the device does it natively) and
    step `forms`, all systems stepped in turn `steps` times after the warm-up; MFU against the dense
    bf16 peak (peak_tflops, else by CUDA device name; NaN when unknown or on CPU)."""
    spec = sized(spec, size)
    tokens = tokens or SIZES[size][1]
    start(spec)
    precisions = precisions or default_precisions(spec.device)
    unknown = [p for p in precisions if p not in PRECISIONS] + [f for f in forms if f not in STEP_FORMS]
    if steps < 1 or tokens < OUT_LEN or unknown or not forms:
        raise AtnatError(f"need --steps >= 1, --tokens >= {OUT_LEN}, --precision among {', '.join(PRECISIONS)} and "
                         f"--forms among {', '.join(STEP_FORMS)}; got {steps}, {tokens}, {', '.join(precisions)}, "
                         f"{', '.join(forms) or '(none)'}")
    b, gen = tokens // OUT_LEN, torch.Generator().manual_seed(1)
    src, tgt = (torch.randint(FIRST_ORDINARY, spec.vocab, (b, n), generator=gen) for n in (spec.src_len, OUT_LEN))
    batch = Batch(src, tgt, torch.full((b,), spec.src_len), torch.full((b,), OUT_LEN), torch.arange(b)).to(spec.device)
    peak = device_peak(spec.device, peak_tflops, log) * 1e12
    if peer:
        from atnat.experiments.bench import hf

        if not hf.available():
            raise AtnatError(f"--peer trains Hugging Face's Marian: transformers is not importable ({hf.INSTALL_HINT})")
    systems = [TrainSystem(d, p, spec, batch, f) for d in decoders for p in precisions for f in forms]
    if "compiled" in forms:  # every compiled system is an entry of one function's cache: a limit that holds
        # them all, and a system past it fails instead of timing eager as "compiled"
        torch._dynamo.config.recompile_limit = max(8, 2 * sum(s.form == "compiled" for s in systems))
        torch._dynamo.config.fail_on_recompile_limit_hit = True
    if peer:
        systems += [PeerTrainSystem(p, spec, batch) for p in precisions]
    for rnd in range(spec.warmup + steps):  # round robin: a slow moment of the machine hits every system
        for system in systems[rnd % len(systems):] + systems[: rnd % len(systems)]:
            system.step(timed=rnd >= spec.warmup)
    rows = []
    for s in systems:
        median = statistics.median(s.times)
        params = sum(p.numel() for p in s.module.parameters() if p.requires_grad)  # (Marian's positions: frozen)
        tokens_ = int(batch.tgt_lengths.sum())
        flops = s.flops(spec)
        rows.append(dict(decoder=s.decoder, precision=s.precision, form=s.form, size=size, batch=len(batch), src_len=spec.src_len,
                         tgt_len=batch.tgt.size(1), tgt_tokens=tokens_, median_s=median, tokens_per_s=tokens_ / median,
                         params=params, flops_per_step=flops, mfu=flops / median / peak, device=spec.device,
                         threads=spec.threads, steps=steps, last_loss=s.losses[-1]))
        log(f"  {s.decoder:5s} {s.precision} {s.form:8s} {median:.3f} s/step  "
            f"{rows[-1]['tokens_per_s']:.0f} tgt tokens/s")
    df = pd.DataFrame(rows)
    fp32 = df[df.precision == "fp32"].set_index(["decoder", "form"])["median_s"]
    eager = df[df.form == "eager"].set_index(["decoder", "precision"])["median_s"]
    df["speedup_vs_fp32"] = [fp32.get((d, f), float("nan")) / m for d, f, m in zip(df.decoder, df.form, df.median_s)]
    df["speedup_vs_eager"] = [eager.get((d, p), float("nan")) / m
                              for d, p, m in zip(df.decoder, df.precision, df.median_s)]
    return df


def step_flops(module, spec: Spec, batch: int, tgt_len: int) -> int:
    """The FLOPs of one training step of `module` on the benchmark batch (bench/flops.py)."""
    options = module.decoder.options
    return train_step_flops(spec.model, vocab=spec.vocab, decoder=module.hparams["decoder"], batch=batch,
                            src_len=spec.src_len, tgt_len=tgt_len, upsample=getattr(options, "upsample", 1),
                            extra_passes=int(bool(getattr(options, "glat", False))))


def device_peak(device: str, given: float | None, log=print) -> float:
    """TFLOPS that MFU divides by: `given` (--peak-tflops), else the peak of this GPU's exact model;
    NaN on the CPU or for a GPU name that does not say which card it is (noted, with what to do)."""
    if given:
        return given
    if device != "cuda":
        return float("nan")
    name = torch.cuda.get_device_name()
    peak = known_peak(name)
    if peak is None:
        log(f"  note: no bf16 peak known for {name!r} (H100 PCIe, NVL and SXM differ): MFU left empty; "
            "give --peak-tflops")
        return float("nan")
    log(f"  MFU against {peak:g} TFLOPS, the dense bf16 peak of {name}")
    return peak
