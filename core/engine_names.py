"""The names of the decoding engines: what `--engine` (translate, evaluate, bench) and a grid's
`speed: {engine: ...}` accept, checked when the command line or the config is read. What each
engine does to a model is experiments/modelfiles/engines.py; this is only the vocabulary, here so
that config/ and modelfiles/ (sibling packages) both read the same list.

An engine is a name and options, written `name+option+option` (e.g. `aoti+autotune`).
"""
from __future__ import annotations

from dataclasses import dataclass

from atnat.core.errors import AtnatError

ENGINES = {
    "eager": "the modules as trained, the AT step on a growing KV cache (the reference)",
    "static": "the AT step on a fixed-shape KV cache, eager",
    "packed": "every linear layer on a weight packed once for the CPU GEMM (MKL; oneDNN with +onednn/+bf16)",
    "inductor": "the static AT step under torch.compile (inductor, cpp_wrapper, weight freezing)",
    "aoti": "AOTInductor packages compiled in this process, weights frozen in: the static AT step, the "
            "encoder and a NAT decoder's pass (dynamic batch and lengths)",
    "auto": "the fastest exact engine per shape: every linear layer packed for oneDNN, its packed product taken "
            "from the rows where it measured faster than the plain one on this CPU, and where a command "
            "decodes single sentences (timing, evaluate, translate --batch-size 1) aoti+fused for the encoder "
            "and the NAT passes, aoti+cppgemm+fused for single-sentence AT steps (aoti+fused for an int8 model's, "
            "its int8 layers on oneDNN's int8 GEMM); on a GPU, CUDA graphs of single-sentence decodes: the AT "
            "step, the encoder and the NAT passes",
}
AUTO_STEP_ROWS = 1  # auto: decodes of at most this many sentences run the compiled AT step
AUTO_GRAPH_ROWS = 16  # auto on a GPU: NAT passes of at most this many rows (a sentence's length candidates) replay graphs
AUTO_STEP_ENGINE = "aoti+cppgemm+fused"  # auto's AT step: +autotune's kernels at single sentences, no benchmarking
# (results/bench/step_variants.csv: as fast as +autotune, beam 5 faster; half the compile time)
AUTO_INT8_STEP_ENGINE = "aoti+fused"  # auto's AT step of an int8 model
AUTO_PASS_ENGINE = "aoti+fused"  # auto's encoder and NAT passes (autotune gained nothing there)
OPTIONS = {  # option -> (engines it applies to, what it does)
    "autotune": (("inductor", "aoti"), "max-autotune: inductor's CPP GEMM templates compete with the library GEMMs"),
    "cppgemm": (("inductor", "aoti"), "inductor's CPP GEMM template for every GEMM, nothing benchmarked (what +autotune "
                "picked at a single sentence's shapes, in half its compile time)"),
    "fused": (("static", "inductor", "aoti"), "the step's attention as broadcast products a compiler fuses"),
    "onednn": (("packed",), "oneDNN's packed float32 GEMM instead of MKL's"),
    "bf16": (tuple(e for e in ENGINES if e != "auto"),
             "linear weights and products in bfloat16 (opt-in: outputs may differ from float32)"),
}
STEP_ENGINES = ("static", "inductor", "aoti")  # the engines that replace the AT step
INEXACT_OPTIONS = ("bf16",)  # options whose tokens may differ from eager's
DEFAULT_ENGINE = "auto"  # of translate, evaluate and the grid's timing phase (one place to change it): the
# fastest exact engine per shape in results/bench/decode_auto_t1.csv; eager is the reference, one flag away


@dataclass(frozen=True)
class Engine:
    """An engine name and its options (sorted)."""

    name: str = "eager"
    options: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return "+".join((self.name, *self.options))

    @property
    def exact(self) -> bool:
        """Whether its tokens are meant to equal eager's (tests/test_engines.py checks it); bf16 is not."""
        return not any(o in INEXACT_OPTIONS for o in self.options)

    @property
    def is_eager(self) -> bool:
        return self.name == "eager" and not self.options

    def has(self, option: str) -> bool:
        return option in self.options


def engine_choices() -> str:
    return f"engines {', '.join(ENGINES)}; options {', '.join('+' + o for o in OPTIONS)}"


def parse_engine(text: str | Engine | None, what: str = "engine") -> Engine:
    """`name+option+...` -> Engine; one error naming the bad part and the valid ones (`what`: where
    the value came from, e.g. "--engine" or "speed.engine")."""
    if isinstance(text, Engine):
        return text
    if text is None or text == "":
        return parse_engine(DEFAULT_ENGINE, what)
    if not isinstance(text, str):
        raise AtnatError(f"{what} {text!r}: expected a name such as aoti or packed+onednn; {engine_choices()}")
    name, *options = text.strip().split("+")
    if name not in ENGINES:
        raise AtnatError(f"{what} {text!r}: unknown engine {name!r}; valid: {engine_choices()}")
    if {"autotune", "cppgemm"} <= set(options):
        raise AtnatError(f"{what} {text!r}: +autotune and +cppgemm exclude each other (+cppgemm is +autotune "
                         "with the CPP templates only)")
    for opt in options:
        if opt not in OPTIONS:
            raise AtnatError(f"{what} {text!r}: unknown option {opt!r}; valid: {engine_choices()}")
        if name not in OPTIONS[opt][0]:
            raise AtnatError(f"{what} {text!r}: +{opt} applies to {', '.join(OPTIONS[opt][0])}, not {name}")
    return Engine(name, tuple(sorted(set(options))))


def touches(engine: Engine, capability: str) -> bool:
    """Whether `engine` changes how a decoder with `capability` ("step": AT; "parallel", "ctc":
    NAT) decodes: the linear layers' engines change every decoder, the step engines the AT."""
    if engine.name in ("packed", "auto", "aoti") or engine.has("bf16"):
        return True
    return capability == "step" and engine.name in STEP_ENGINES
