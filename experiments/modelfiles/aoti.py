"""AOTInductor-compiled code (the `aoti` and `auto` engines; see engines.py): the static AT step
(CompiledStep, one package per group size), and whole-sequence passes with dynamic batch and
lengths (CompiledPass: the encoder, a NAT decoder's parallel or CTC pass, one package each),
compiled in this process and kept in memory for its lifetime.

A package (`torch._inductor.aoti_compile_and_package`) is a shared library with the weights frozen
in. Loading one runs its code, so nothing here loads a package that this process did not compile
itself a moment before: each is written to a private temporary folder (mode 0700, removed once the
package is loaded) and never read from a cache on disk. Packages are kept in memory by a key of
everything they were built from: the sha256 of the weights, the decoder's class and dimensions,
the group size (rows per memory row: 1 greedy, K a K-beam), the dynamic shapes of the export, the
inductor settings, the dtype and torch's version; a second model with the same weights and engine
in the same process reuses the package instead of compiling it again. The compile time of each
package is recorded (CompileRecord; `compile_s` of the bench rows).
"""
from __future__ import annotations

import hashlib
import json
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import Tensor, nn

from atnat.core.compile_cache import private_compile_cache
from atnat.core.errors import AtnatError
from atnat.models.decoders.static_cache import StaticStep

FORMAT = 2  # bump when what a package holds changes


def weights_sha256(module: nn.Module) -> str:
    """sha256 over every parameter and buffer of `module` (name, dtype, shape and bytes)."""
    digest = hashlib.sha256()
    tensors = dict(module.named_parameters(remove_duplicate=False))
    tensors.update(module.named_buffers(remove_duplicate=False))
    for name in sorted(tensors):
        t = tensors[name].detach()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


@dataclass
class CompileRecord:
    """One package in use: what it runs, its key, and whether this use compiled it."""

    what: str  # e.g. "at step, group 5"
    key: str  # sha256 of the key fields
    compiled: bool  # True: compiled for this use; False: the process had compiled it already
    seconds: float  # export + compile + load time of this use (~0 when it was in memory)
    compile_seconds: float  # the time it took when it was compiled


@dataclass(frozen=True)
class Exportable:
    """A module to export with example inputs and their dynamic dimensions (torch.export.Dim)."""

    module: nn.Module
    args: tuple
    dynamic_shapes: tuple


class PackageCache:
    """Compiled packages of this process, in memory, by key; `get_or_compile` returns a runner.
    One shared instance (PACKAGES) serves every model of the process."""

    def __init__(self):
        self.runners: dict[str, tuple[Callable, float]] = {}  # key -> (runner, compile seconds)

    @staticmethod
    def key(fields: dict) -> str:
        text = json.dumps({"format": FORMAT, **fields, "torch": torch.__version__,
                           "threads": torch.get_num_threads()},  # inductor builds a CPU package for its thread count
                          sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def get_or_compile(self, what: str, fields: dict, build: Callable[[], Exportable], configs: dict,
                       context: Callable = torch.no_grad) -> tuple[Callable, CompileRecord]:
        """The runner of the package keyed by `fields`: the one this process compiled before, else
        exported from build(), compiled with inductor `configs` and loaded. -> (runner, record)."""
        key = self.key({**fields, "configs": configs})
        if key in self.runners:
            runner, seconds = self.runners[key]
            return runner, CompileRecord(what, key, False, 0.0, seconds)
        private_compile_cache()  # nothing inductor finds on disk from before this process is used
        began = time.perf_counter()
        exportable = build()
        with tempfile.TemporaryDirectory(prefix="atnat-aoti-") as folder:  # private (0700), removed after loading
            path = Path(folder) / "step.pt2"
            with context(), warnings.catch_warnings():
                # inductor's own int8 lowering copy-constructs a tensor: its warning is not the user's
                warnings.filterwarnings("ignore", "To copy construct from a tensor", UserWarning, r"torch\._inductor")
                program = torch.export.export(exportable.module, exportable.args,
                                              dynamic_shapes=exportable.dynamic_shapes, strict=False)
                torch._inductor.aoti_compile_and_package(program, package_path=str(path),
                                                        inductor_configs=dict(configs))  # it adds keys
            runner = torch._inductor.aoti_load_package(str(path))
        seconds = time.perf_counter() - began
        self.runners[key] = (runner, seconds)
        return runner, CompileRecord(what, key, True, seconds, seconds)

    def clear(self) -> None:
        self.runners.clear()


PACKAGES = PackageCache()  # the process's packages


def failure_text(err: BaseException) -> str:
    """An export's or compile's failure in one short line: its type and its message's first line."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0][:160]}" if text else type(err).__name__


class CompiledStep:
    """The static step of an AT decoder (its `_static_step` signature) run by one AOTInductor package
    per group size (1: greedy, K: a K-beam), each built on first use. Needs the decoder's static
    cache with `always_mask` (the packages take a memory mask)."""

    def __init__(self, decoder, cache: PackageCache | None = None, *, fields: dict, configs: dict):
        self.decoder, self.cache, self.fields, self.configs = decoder, cache or PACKAGES, fields, configs
        self.runners: dict[int, Callable] = {}
        self.records: list[CompileRecord] = []
        self.on_fallback: Callable[[str], None] = lambda why: None  # told why a step runs eager instead

    def runner(self, group: int) -> Callable:
        if group not in self.runners:
            try:
                self._build(group)
            except Exception as err:  # noqa: BLE001  (a step export cannot take: the static step, eager, as it was)
                why = failure_text(err)
                print(f"atnat: the AT step could not be compiled ({why}); it runs eager", file=sys.stderr)
                self.on_fallback(f"AT step eager: {why}")
                self.runners[group] = lambda *args: self.decoder._static_step(*args, group)
        return self.runners[group]

    def _build(self, group: int) -> None:
        def build() -> Exportable:
            step = StaticStep(self.decoder, group)
            args, shapes = step.example()
            return Exportable(step, args, shapes)
        dtype = self.decoder.output.weight.dtype if hasattr(self.decoder.output, "weight") else None
        runner, record = self.cache.get_or_compile(
            f"at step, group {group}", {**self.fields, "group": group, "dtype": str(dtype),
                                        "dims": StaticStep.DIMS}, build, self.configs)
        self.runners[group] = runner
        self.records.append(record)

    def __call__(self, tokens: Tensor, pos: Tensor, self_k: Tensor, self_v: Tensor, cross_k: Tensor,
                 cross_v: Tensor, memory_mask: Tensor | None, group: int) -> Tensor:
        sizes = {"M": cross_k.size(1), "S": cross_k.size(3), "C": self_k.size(3)} \
            if isinstance(cross_k, Tensor) and isinstance(self_k, Tensor) else {}
        if sizes and not all(low <= sizes[n] <= high for n, (low, high) in StaticStep.DIMS.items()):  # past its range
            return self.decoder._static_step(tokens, pos, self_k, self_v, cross_k, cross_v, memory_mask, group)
        return self.runner(group)(tokens, pos, self_k, self_v, cross_k, cross_v, memory_mask)


class TensorPass(nn.Module):
    """A whole-sequence pass of a model part as a module of tensors only, for torch.export /
    AOTInductor, with dynamic batch and lengths: the encoder (`encoder`), a NAT decoder's
    forward_parallel (`parallel`) or forward_ctc (`ctc`). `DIMS`: each dynamic dimension's range;
    a length of 1 is outside (export specialises it), such calls run eager."""

    METHODS = {"encoder": "forward", "parallel": "forward_parallel", "ctc": "forward_ctc",
               "dag": "forward_dag"}  # kind -> the part's method

    def __init__(self, part: nn.Module, kind: str):
        super().__init__()
        self.part, self.kind = part, kind
        longest = {"encoder": lambda: part.embed.max_positions, "ctc": lambda: part.max_source_length,
                   "dag": lambda: part.max_source_length, "parallel": lambda: part.cfg.max_positions}[kind]()
        self.DIMS = {"B": (1, 65536), "S": (2, longest)}
        if kind == "parallel":
            self.DIMS["T"] = (2, longest)

    def method(self):
        """The part's own (eager) method this pass runs, unbound."""
        return getattr(type(self.part), self.METHODS[self.kind])

    def install(self, runner) -> None:
        """Set `runner` on the part in place of this pass's method (an instance attribute: nn.Module.__call__
        finds forward there)."""
        object.__setattr__(self.part, self.METHODS[self.kind], runner)

    def refuse_training(self, what: str) -> None:
        if self.part.training:
            raise AtnatError(f"the {what} {self.kind} pass is for inference; the model was put back in "
                             "training mode (train a model without an engine)")

    def outputs(self, out, args):
        """What the part's own method returns, from this pass's tensors `out` for a call with `args`."""
        if self.kind == "encoder":
            from atnat.models.encoder import EncoderOut

            return EncoderOut(out, args[1])
        return tuple(out) if self.kind in ("ctc", "dag") else out

    def forward(self, *tensors: Tensor):
        from atnat.models.encoder import EncoderOut

        run = self.method()
        if self.kind == "encoder":  # (src (B, S), padding (B, S)) -> states (B, S, D)
            return run(self.part, *tensors).states
        if self.kind in ("ctc", "dag"):  # (states, memory padding) -> ctc: log-probs (B, k S, V), slot padding
            return run(self.part, EncoderOut(*tensors))  # (B, k S); dag: log-probs (B, L, V), links (B, L, L), padding
        tokens, states, memory_padding, padding_mask = tensors  # -> log-probs (B, T, V)
        return run(self.part, tokens, EncoderOut(states, memory_padding), padding_mask)

    def sizes(self, *args) -> dict[str, int]:
        """The dynamic sizes of a call with the part's own arguments."""
        if self.kind == "encoder":
            return {"B": args[0].size(0), "S": args[0].size(1)}
        memory = args[0] if self.kind in ("ctc", "dag") else args[1]
        sizes = {"B": memory.states.size(0), "S": memory.states.size(1)}
        if self.kind == "parallel":
            sizes["T"] = args[0].size(1)
        return sizes

    def tensors(self, *args) -> tuple[Tensor, ...]:
        """The package's inputs from the part's own arguments."""
        if self.kind == "encoder":
            return args
        if self.kind in ("ctc", "dag"):
            return args[0].states, args[0].padding_mask
        tokens, memory, padding_mask = args
        return tokens, memory.states, memory.padding_mask, padding_mask

    def example(self) -> tuple[tuple[Tensor, ...], tuple]:
        """Example inputs of distinct sizes above 1 (so that export specialises none), with padding
        as real batches have, and their dynamic dimensions (torch.export.Dim; one tuple, for
        forward's *tensors)."""
        args, shapes = self._example()
        return args, (shapes,)

    def _example(self) -> tuple[tuple[Tensor, ...], tuple]:
        dim = torch.export.Dim
        b, s, t = 3, 5, 7
        dev = next(self.part.parameters()).device
        dims = {name: dim(f"{self.kind}_{name}", min=low, max=high) for name, (low, high) in self.DIMS.items()}
        memory_padding = torch.zeros(b, s, dtype=torch.bool, device=dev)
        memory_padding[1, -1:] = True
        bs = {0: dims["B"], 1: dims["S"]}
        if self.kind == "encoder":
            return (torch.randint(4, 9, (b, s), device=dev), memory_padding), (bs, bs)
        states = torch.randn(b, s, self.part.cfg.d_model, device=dev)
        if self.kind in ("ctc", "dag"):
            return (states, memory_padding), ({0: dims["B"], 1: dims["S"]}, bs)
        padding = torch.zeros(b, t, dtype=torch.bool, device=dev)
        padding[0, -2:] = True
        tokens = torch.full((b, t), self.part.special.mask, dtype=torch.long, device=dev)
        bt = {0: dims["B"], 1: dims["T"]}
        return (tokens, states, memory_padding, padding), (bt, {0: dims["B"], 1: dims["S"]}, bs, bt)


class CompiledPass:
    """A model part's pass (TensorPass: the encoder, or a NAT decoder's protocol method) run by one
    AOTInductor package with dynamic batch and lengths, built at its first call; calls outside the
    package's ranges run the part's own method. Set on the part in place of that method
    (`install`)."""

    def __init__(self, part: nn.Module, kind: str, cache: PackageCache | None = None, *, fields: dict, configs: dict):
        self.module = TensorPass(part, kind)
        self.kind, self.cache, self.fields, self.configs = kind, cache or PACKAGES, fields, configs
        self.runner_: Callable | None = None
        self.records: list[CompileRecord] = []
        self.broken = ""  # why the package could not be built: the part's own method runs from then on
        self.on_fallback: Callable[[str], None] = lambda why: None  # told that reason once

    @staticmethod
    def kind_of(part: nn.Module) -> str | None:
        """encoder, ctc, dag or parallel: the pass this part would compile, or None (an AT decoder)."""
        from atnat.models.encoder import TransformerEncoder

        if isinstance(part, TransformerEncoder):
            return "encoder"
        caps = getattr(part, "capabilities", ())
        return next((kind for kind in ("ctc", "dag", "parallel") if kind in caps), None)

    def install(self) -> None:
        self.module.install(self)

    def fits(self, sizes: dict[str, int]) -> bool:
        return all(low <= sizes[name] <= high for name, (low, high) in self.module.DIMS.items())

    def runner(self) -> Callable:
        if self.runner_ is None:
            def build() -> Exportable:
                args, shapes = self.module.example()
                return Exportable(self.module, args, shapes)
            self.runner_, record = self.cache.get_or_compile(
                f"{self.kind} pass", {**self.fields, "pass": self.kind, "dims": self.module.DIMS}, build, self.configs)
            self.records.append(record)
        return self.runner_

    def __call__(self, *args):
        part = self.module.part
        self.module.refuse_training("compiled")
        if self.broken or getattr(part, "record_attention", False) or not self.fits(self.module.sizes(*args)):
            return self.module.method()(part, *args)  # eager: attention maps recorded, or sizes outside the ranges
        try:
            runner = self.runner()
        except Exception as err:  # noqa: BLE001  (a pass export cannot take, e.g. a plugin's data-dependent branch)
            self.broken = failure_text(err)
            print(f"atnat: the {self.kind} pass could not be compiled ({self.broken}); it runs eager", file=sys.stderr)
            self.on_fallback(f"{self.kind} pass eager: {self.broken}")
            return self.module.method()(part, *args)
        return self.module.outputs(runner(*self.module.tensors(*args)), args)
