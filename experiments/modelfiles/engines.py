"""Decoding engines: how a trained model's hot path runs, chosen by name (`--engine` of translate,
evaluate and bench; `speed: {engine: ...}` of a grid's timing phase). The names and options are
core/engine_names.py; exact engines decode the tokens eager decodes (tests/test_engines.py); where a model
keeps an engine from it (an int8 model's static step on batches), EngineInfo.exact is False and says why.

- eager     the modules as trained; the AT step grows its KV cache (the reference)
- static    the AT step on a fixed-shape KV cache (models/decoders/static_cache.py), eager
- packed    every linear layer (every decoder, the encoder too) on a weight packed once for the CPU
            GEMM (packed.py: MKL's packed sgemm; oneDNN with +onednn or +bf16), eager
- inductor  the static AT step under torch.compile: inductor with cpp_wrapper and weight freezing
- aoti      AOTInductor packages (weights frozen in), compiled in this process at first use and kept
            in memory (aoti.py; never loaded from disk), no Python per op while they run: the static
            AT step (one package per group size), the encoder and a NAT decoder's pass (one each,
            dynamic batch and lengths); an int8 model's layers as oneDNN int8 GEMMs (quantize.py)
- auto      the fastest exact engine per shape (results/bench/README.md): every linear layer packed
            for oneDNN (packed+onednn), each taking the packed product only from the row count where
            it measured faster than the plain one on this CPU (packed.py), and where the command
            decodes single sentences (the timing phase, evaluate's latency, translate --batch-size 1)
            aoti+fused's packages for the encoder and the NAT passes, aoti+cppgemm+fused's for the AT
            step of single-sentence decodes (an int8 model: its int8 layers traced as oneDNN int8
            GEMMs). On a GPU, for single-sentence decodes: CUDA graphs of the AT step, the encoder
            and every NAT pass (cuda_graphs.py: eager's kernels, one graph per shape); batches eager

Options: +autotune (inductor, aoti: max-autotune, inductor's CPP GEMM templates compete with the
library GEMMs), +cppgemm (inductor, aoti: the CPP GEMM template for every GEMM, nothing
benchmarked), +fused (static, inductor, aoti: the step's attention as broadcast products a
compiler fuses into loops over the cache), +onednn (packed: oneDNN's float32 GEMM instead of MKL's),
+bf16 (any: linear weights in bfloat16, a product in bfloat16; opt-in, outputs may differ).
Engines other than eager and static run on the CPU. `apply_engine` changes a module in place.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial

import torch

from atnat.core.compile_cache import private_compile_cache
from atnat.core.engine_names import (
    AUTO_GRAPH_ROWS,
    AUTO_INT8_STEP_ENGINE,
    AUTO_PASS_ENGINE,
    AUTO_STEP_ENGINE,
    AUTO_STEP_ROWS,
    DEFAULT_ENGINE,
    ENGINES,
    OPTIONS,
    STEP_ENGINES,
    Engine,
    parse_engine,
    touches,
)
from atnat.core.errors import AtnatError
from atnat.experiments.modelfiles.aoti import CompiledPass, CompiledStep, CompileRecord, PackageCache, weights_sha256
from atnat.experiments.modelfiles.cuda_graphs import Decode, GraphedPass
from atnat.experiments.modelfiles.packed import Bf16Linear, PackedLinear, replace_linears
from atnat.experiments.modelfiles.quantize import compilable_int8, is_quantized
from atnat.models.decoders.static_cache import static_step_problem

__all__ = ["DEFAULT_ENGINE", "ENGINES", "OPTIONS", "Engine", "EngineInfo", "apply_engine", "parse_engine", "touches"]


def inductor_configs(engine: Engine) -> dict:
    """Inductor settings of a compiled engine: weights frozen (and packed), autotuned GEMMs on ask."""
    configs = {"freezing": True}
    if engine.has("autotune"):
        configs.update(max_autotune=True, max_autotune_gemm_backends="CPP,ATEN")
    elif engine.has("cppgemm"):  # one choice per GEMM: max-autotune benchmarks nothing
        configs.update(max_autotune=True, max_autotune_gemm_backends="CPP")
    return configs


@dataclass
class EngineInfo:
    """What apply_engine did: the engine, the linear maps it swapped, the compilations it ran
    (filled as they happen: a compiled step compiles at its first decode of each group size)."""

    engine: Engine
    swapped: int = 0
    records: list[CompileRecord] = field(default_factory=list)
    fallback: str = ""  # the auto engine where it runs eager: why (a GPU)
    cuda_graphs: bool = False  # the auto engine on a GPU: single-sentence decodes replay CUDA graphs
    eager_step: str = ""  # why the AT step stays the decoder's own (eager): the static step would not compute it
    inexact: str = ""  # why this model's tokens may differ from eager's under an exact engine ("": they may not)
    eager_parts: list[str] = field(default_factory=list)  # compiled parts that could not be built, each with why

    @property
    def label(self) -> str:
        """The engine's name and options; `auto=eager` where auto ran eager (`fallback` says why),
        `auto=cudagraphs` where it replays CUDA graphs on a GPU; `(AT step eager: why)` where the engine
        left the step as the decoder's own."""
        base = (f"{self.engine.label}=cudagraphs" if self.cuda_graphs else
                f"{self.engine.label}=eager" if self.fallback else self.engine.label)
        notes = ([f"AT step eager: {self.eager_step}"] if self.eager_step else []) + self.eager_parts
        return f"{base} ({'; '.join(notes)})" if notes else base

    @property
    def exact(self) -> bool:
        return self.engine.exact and not self.inexact

    @property
    def inexact_reason(self) -> str:
        """Why outputs may differ from eager's ("" where they may not)."""
        return self.inexact or ("" if self.engine.exact else "bfloat16 products, outputs may differ from eager float32's")

    @property
    def compile_s(self) -> float:
        """Seconds spent compiling so far; NaN when the engine compiles nothing."""
        return sum(r.seconds for r in self.records) if self.records else float("nan")


INT8_STEP_INEXACT = ("int8 model: dynamic int8 scales each step's activations by the range of the whole batch, and "
                     "the static step keeps finished sentences in it where eager drops them: on batches of several "
                     "sentences tokens may differ from eager's")


def apply_engine(module, engine: str | Engine | None, *, cache: PackageCache | None = None,
                 step_rows: int = AUTO_STEP_ROWS) -> EngineInfo:
    """Make `module` (a Seq2SeqModule in eval mode) decode with `engine`, in place; -> EngineInfo
    (also kept as module.engine_info). Refused (one error) on a module in training mode, on a model that
    already decodes with another engine (eager too: load it again), and for every engine but eager and
    static on a device other than the CPU. `step_rows` (auto only):
    decodes of at most this many sentences run the compiled AT step; 0 compiles nothing (a caller
    whose decodes are batches, where a compile for a one-sentence remainder would not pay)."""
    engine = parse_engine(engine)
    info = EngineInfo(engine)
    if getattr(module, "engine_info", None) is not None and not module.engine_info.engine.is_eager:
        raise AtnatError(f"engine {engine.label}: the model already decodes with {module.engine_info.label}; "
                         "load it again to decode with another engine")
    if engine.is_eager:
        module.engine_info = info
        return info
    if module.training:
        raise AtnatError(f"engine {engine.label}: for inference only; the model is in training mode")
    if engine.name == "auto":
        return _apply_auto(module, info, cache, step_rows)
    if module.device.type != "cpu" and engine.name != "static":
        raise AtnatError(f"engine {engine.label}: runs on the CPU only; the model is on {module.device} "
                         "(eager, static, or --compile there)")
    decoder = module.decoder
    steps = engine.name in STEP_ENGINES and "step" in decoder.capabilities
    if steps:
        info.eager_step = static_step_problem(decoder) or ""  # read before any module is swapped
        steps = not info.eager_step
    int8 = is_quantized(module)
    if engine.name == "inductor" and int8:
        raise AtnatError(f"engine {engine.label}: does not compile int8 models (dynamic int8 layers); "
                         "use aoti or auto (or static) with --quantize int8")
    if (engine.has("autotune") or engine.has("cppgemm")) and int8:
        raise AtnatError(f"engine {engine.label}: +autotune and +cppgemm do not compile int8 models (benchmarking "
                         f"inductor's int8 GEMM templates aborted the process with heap corruption, torch "
                         f"{torch.__version__}); use aoti or aoti+fused")
    if engine.name == "aoti" and int8:
        info.swapped = compilable_int8(module)  # traced as decomposed int8 ops: oneDNN's int8 GEMM
    if engine.name == "packed":
        make = partial(PackedLinear, backend="onednn" if engine.has("onednn") or engine.has("bf16") else "mkl",
                       dtype=torch.bfloat16 if engine.has("bf16") else torch.float32)
        info.swapped = replace_linears(module, make)
    elif engine.has("bf16"):
        info.swapped = replace_linears(module, Bf16Linear)
    if steps and int8:
        info.inexact = INT8_STEP_INEXACT
    if steps:
        decoder.use_static_cache(True, step=_step(decoder, engine, info, cache), always_mask=engine.name != "static",
                                 attention="fused" if engine.has("fused") else "sdpa")
    if engine.name == "aoti":
        _compile_passes(module, engine, info, cache)
    module.engine_info = info
    return info


def package_fields(part, engine: Engine) -> dict:
    """What a compiled package of `part` (an encoder or a decoder) computes from, its key in the package
    cache: its weights, the engine, its class, its sizes and its decoder options (two NATs of equal weights
    differ by their inputs mode, a DAG by its lambda)."""
    return {"weights": weights_sha256(part), "engine": engine.label, "class": type(part).__qualname__,
            "model": repr(getattr(part, "cfg", None)), "options": repr(getattr(part, "options", None))}


def _compile_passes(module, engine: Engine, info: EngineInfo, cache: PackageCache | None) -> None:
    """The encoder and a NAT decoder's pass as AOTInductor packages (CompiledPass), each compiled at
    its first call and then run for every batch and length in its ranges."""
    for part in (module.encoder, module.decoder):
        kind = CompiledPass.kind_of(part)
        if kind is None:
            continue
        compiled = CompiledPass(part, kind, cache, configs=inductor_configs(engine), fields=package_fields(part, engine))
        compiled.records = info.records  # the engine's report sees each package as it is built
        compiled.on_fallback = info.eager_parts.append
        compiled.install()


def _apply_auto(module, info: EngineInfo, cache: PackageCache | None, step_rows: int) -> EngineInfo:
    """The auto engine: per shape, the exact engine the bench found fastest (results/bench/README.md):
    every linear layer on oneDNN's packed weights (packed+onednn), each taking the plain product below the
    rows from which the packed one measured faster on this CPU (packed.packed_from_rows; possibly none), and
    with `step_rows` > 0 compiled
    packages (traced from the plain products: PackedLinear under export): the encoder and a NAT
    decoder's pass at every batch size (AUTO_PASS_ENGINE), the AT step on decodes of at most `step_rows`
    sentences (AUTO_STEP_ENGINE: inductor's CPP GEMM templates, fastest exact at batch 1). On a GPU: the
    static AT step under torch.compile's "reduce-overhead" (CUDA graphs: eager's tokens, measured in
    results/bench/README.md) for decodes of at most `step_rows` sentences, and the encoder and a NAT
    decoder's passes replayed from CUDA graphs of eager's kernels (_graph_passes), everything else eager
    (with `step_rows` 0, or for an int8 model, all eager: `info.fallback` says why). An int8 model keeps
    FBGEMM's kernels eager, and its packages trace each int8 layer's arithmetic (CompilableInt8Linear:
    oneDNN's int8 GEMM, the same products), the AT step as AUTO_INT8_STEP_ENGINE. apply_engine checked
    the rest."""
    if module.device.type != "cpu":
        decoder = module.decoder
        if "step" in decoder.capabilities:
            info.eager_step = static_step_problem(decoder) or ""
        graphs = module.device.type == "cuda" and step_rows > 0 and not is_quantized(module)
        if graphs and "step" in decoder.capabilities and not info.eager_step:
            decoder.use_static_cache(True, "reduce-overhead", max_rows=step_rows)
            # its first call per group size compiles and records the graphs: timed into the engine's records
            decoder._static_impl = FirstCallTimer(decoder._static_impl, info.records,
                                                  "at step under torch.compile, CUDA graphs")
        if graphs:
            _graph_passes(module, step_rows)
            info.cuda_graphs = True
        else:
            info.fallback = f"eager: the model is on {module.device}"
        module.engine_info = info
        return info
    int8 = is_quantized(module)
    decoder = module.decoder
    if "step" in decoder.capabilities:
        info.eager_step = static_step_problem(decoder) or ""  # read before any module is swapped
    if int8:  # eager: FBGEMM's int8 kernels as before; traced: decomposed int8 ops (oneDNN's int8 GEMM)
        info.swapped = compilable_int8(module)
    else:
        info.swapped = replace_linears(module, partial(PackedLinear, backend="onednn", dtype=torch.float32, measured=True))
    if step_rows > 0:
        if "step" in decoder.capabilities and not info.eager_step:  # CPP GEMM templates: ~1.1x CTranslate2's time
            step = _step(decoder, parse_engine(AUTO_INT8_STEP_ENGINE if int8 else AUTO_STEP_ENGINE), info, cache)
            decoder.use_static_cache(True, step=step, always_mask=True, attention="fused", max_rows=step_rows)
            if int8 and step_rows > 1:  # one sentence: no finished row stays in the step's batch
                info.inexact = INT8_STEP_INEXACT
        _compile_passes(module, parse_engine(AUTO_PASS_ENGINE), info, cache)
    module.engine_info = info
    return info


def _graph_passes(module, step_rows: int) -> None:
    """The encoder and a NAT decoder's pass replayed from CUDA graphs (cuda_graphs.GraphedPass) in decodes of
    at most `step_rows` sentences (the encoder's batch), the decoder's passes of at most AUTO_GRAPH_ROWS rows
    (a sentence's length candidates)."""
    decode = Decode()
    for part in (module.encoder, module.decoder):
        kind = CompiledPass.kind_of(part)
        if kind is not None:
            GraphedPass(part, kind, max_rows=step_rows if kind == "encoder" else AUTO_GRAPH_ROWS,
                        decode=decode).install()


class FirstCallTimer:
    """A compiled step (torch.compile's) whose first call per group size, where it compiles, is
    timed into the engine's records."""

    def __init__(self, step, records: list[CompileRecord], what: str):
        self.step, self.records, self.what, self.seen = step, records, what, set()

    def __call__(self, *args):
        group = args[-1]
        if group in self.seen:
            return self.step(*args)
        began = time.perf_counter()
        out = self.step(*args)
        seconds = time.perf_counter() - began
        self.seen.add(group)
        self.records.append(CompileRecord(f"{self.what}, group {group} (first call)", "", True, seconds, seconds))
        return out


def _step(decoder, engine: Engine, info: EngineInfo, cache: PackageCache | None):
    """The static step callable of a step engine (None: the decoder's own, eager)."""
    if engine.name == "static":
        return None
    configs = inductor_configs(engine)
    if engine.name == "inductor":
        private_compile_cache()
        compiled = torch.compile(decoder._static_step, options={**configs, "cpp_wrapper": True}, dynamic=None)
        return FirstCallTimer(compiled, info.records, "at step under torch.compile")
    step = CompiledStep(decoder, cache, configs=configs, fields=package_fields(decoder, engine))
    step.records = info.records  # the engine's report sees each package as it is built
    step.on_fallback = info.eager_parts.append
    return step
