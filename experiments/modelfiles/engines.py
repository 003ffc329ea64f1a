"""Decoding engines: how a trained model's hot path runs, chosen by name (`--engine`, `speed:
{engine: ...}`), every one decoding the tokens eager decodes (tests/test_engines.py).

An engine is a name and options, written `name+option+option` (e.g. `aoti+autotune`):

- eager     the modules as trained; the AT step grows its KV cache (the reference)
- static    the AT step on a fixed-shape KV cache (models/decoders/static_cache.py), eager
- packed    every linear layer on a weight packed once for the CPU GEMM (packed.py: MKL's packed
            sgemm; oneDNN with +onednn or +bf16), eager
- inductor  the static AT step under torch.compile: inductor with cpp_wrapper and weight freezing
- aoti      the static AT step as an AOTInductor package (weights frozen in; cached on disk by the
            weights' sha256, shapes and machine: aoti.py); no Python per op while it runs

Options: +autotune (inductor, aoti: max-autotune, inductor's CPP GEMM templates compete with the
library GEMMs), +fused (static, inductor, aoti: the step's attention as broadcast products a
compiler fuses into loops over the cache), +onednn (packed: oneDNN's float32 GEMM instead of MKL's),
+bf16 (any: linear weights in bfloat16, a product in bfloat16; opt-in, outputs may differ).
Engines run on the CPU (static also elsewhere). `apply_engine` changes a module in place.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import torch

from atnat.core.errors import AtnatError

from atnat.experiments.modelfiles.aoti import CompiledStep, CompileRecord, PackageCache, weights_sha256
from atnat.experiments.modelfiles.packed import Bf16Linear, PackedLinear, replace_linears

ENGINES = {
    "eager": "the modules as trained, the AT step on a growing KV cache (the reference)",
    "static": "the AT step on a fixed-shape KV cache, eager",
    "packed": "every linear layer on a weight packed once for the CPU GEMM (MKL; oneDNN with +onednn/+bf16)",
    "inductor": "the static AT step under torch.compile (inductor, cpp_wrapper, weight freezing)",
    "aoti": "the static AT step as an AOTInductor package, weights frozen in, cached on disk",
}
OPTIONS = {  # option -> (engines it applies to, what it does)
    "autotune": (("inductor", "aoti"), "max-autotune: inductor's CPP GEMM templates compete with the library GEMMs"),
    "fused": (("static", "inductor", "aoti"), "the step's attention as broadcast products a compiler fuses"),
    "onednn": (("packed",), "oneDNN's packed float32 GEMM instead of MKL's"),
    "bf16": (tuple(ENGINES), "linear weights and products in bfloat16 (opt-in: outputs may differ from float32)"),
}
STEP_ENGINES = ("static", "inductor", "aoti")  # the engines that replace the AT step


@dataclass(frozen=True)
class Engine:
    """An engine name and its options (sorted)."""

    name: str = "eager"
    options: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return "+".join((self.name, *self.options))

    def has(self, option: str) -> bool:
        return option in self.options


def parse_engine(text: str | Engine | None) -> Engine:
    """`name+option+...` -> Engine; one error naming the bad part and the valid ones."""
    if isinstance(text, Engine):
        return text
    if text is None or text == "":
        return Engine()
    name, *options = str(text).strip().split("+")
    if name not in ENGINES:
        raise AtnatError(f"engine {text!r}: unknown engine {name!r}; valid: {', '.join(ENGINES)}")
    for opt in options:
        if opt not in OPTIONS:
            raise AtnatError(f"engine {text!r}: unknown option {opt!r}; valid: {', '.join(OPTIONS)}")
        if name not in OPTIONS[opt][0]:
            raise AtnatError(f"engine {text!r}: +{opt} applies to {', '.join(OPTIONS[opt][0])}, not {name}")
    return Engine(name, tuple(sorted(set(options))))


def touches(engine: Engine, capability: str) -> bool:
    """Whether `engine` changes how a decoder with `capability` ("step": AT; "parallel", "ctc":
    NAT) decodes: the linear layers' engines change every decoder, the step engines the AT."""
    if engine.name == "packed" or engine.has("bf16"):
        return True
    return capability == "step" and engine.name in STEP_ENGINES


def inductor_configs(engine: Engine) -> dict:
    """Inductor settings of a compiled engine: weights frozen (and packed), autotuned GEMMs on ask."""
    configs = {"freezing": True}
    if engine.has("autotune"):
        configs.update(max_autotune=True, max_autotune_gemm_backends="CPP,ATEN")
    return configs


@dataclass
class EngineInfo:
    """What apply_engine did: the engine, the linear maps it swapped, the packages it built or loaded
    (filled as they are first used: an AOTInductor step compiles at its first decode)."""

    engine: Engine
    swapped: int = 0
    records: list[CompileRecord] = field(default_factory=list)

    @property
    def compile_s(self) -> float:
        """Seconds spent compiling (or loading) packages so far; NaN when the engine has none."""
        return sum(r.seconds for r in self.records) if self.records else float("nan")


def apply_engine(module, engine: str | Engine | None, *, cache: PackageCache | None = None) -> EngineInfo:
    """Make `module` (a Seq2SeqModule in eval mode) decode with `engine`, in place; -> EngineInfo
    (also kept as module.engine_info)."""
    engine = parse_engine(engine)
    info = EngineInfo(engine)
    module.engine_info = info
    if engine.name == "eager" and not engine.options:
        return info
    if module.device.type != "cpu" and engine.name != "static":
        raise AtnatError(f"engine {engine.label}: runs on the CPU only; the model is on {module.device} "
                         "(use --compile there)")
    if module.training:
        raise AtnatError(f"engine {engine.label}: for inference only; the model is in training mode")
    if engine.name == "packed":
        make = partial(PackedLinear, backend="onednn" if engine.has("onednn") or engine.has("bf16") else "mkl",
                       dtype=torch.bfloat16 if engine.has("bf16") else torch.float32)
        info.swapped = replace_linears(module, make)
    elif engine.has("bf16"):
        info.swapped = replace_linears(module, Bf16Linear)
    decoder = module.decoder
    if engine.name in STEP_ENGINES and "step" in decoder.capabilities:
        attention = "fused" if engine.has("fused") else "sdpa"
        decoder.use_static_cache(True, step=_step(decoder, engine, info, cache), always_mask=engine.name != "static",
                                 attention=attention)
    return info


def _step(decoder, engine: Engine, info: EngineInfo, cache: PackageCache | None):
    """The static step callable of a step engine (None: the decoder's own, eager)."""
    if engine.name == "static":
        return None
    configs = inductor_configs(engine)
    if engine.name == "inductor":
        return torch.compile(decoder._static_step, options={**configs, "cpp_wrapper": True}, dynamic=None)
    step = CompiledStep(decoder, cache or PackageCache(), configs=configs,
                        fields={"weights": weights_sha256(decoder), "engine": engine.label,
                                "class": type(decoder).__qualname__, "model": repr(decoder.cfg)})
    step.records = info.records  # the engine's report sees each package as it is built
    return step
