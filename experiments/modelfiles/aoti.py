"""AOTInductor-compiled static AT steps (the `aoti` engine; see engines.py), compiled in this process
and kept in memory for its lifetime.

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
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import Tensor, nn

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
        text = json.dumps({"format": FORMAT, **fields, "torch": torch.__version__}, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def get_or_compile(self, what: str, fields: dict, build: Callable[[], Exportable], configs: dict,
                       context: Callable = torch.no_grad) -> tuple[Callable, CompileRecord]:
        """The runner of the package keyed by `fields`: the one this process compiled before, else
        exported from build(), compiled with inductor `configs` and loaded. -> (runner, record)."""
        key = self.key({**fields, "configs": configs})
        if key in self.runners:
            runner, seconds = self.runners[key]
            return runner, CompileRecord(what, key, False, 0.0, seconds)
        began = time.perf_counter()
        exportable = build()
        with tempfile.TemporaryDirectory(prefix="atnat-aoti-") as folder:  # private (0700), removed after loading
            path = Path(folder) / "step.pt2"
            with context():
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


class CompiledStep:
    """The static step of an AT decoder (its `_static_step` signature) run by one AOTInductor package
    per group size (1: greedy, K: a K-beam), each built on first use. Needs the decoder's static
    cache with `always_mask` (the packages take a memory mask)."""

    def __init__(self, decoder, cache: PackageCache | None = None, *, fields: dict, configs: dict):
        self.decoder, self.cache, self.fields, self.configs = decoder, cache or PACKAGES, fields, configs
        self.runners: dict[int, Callable] = {}
        self.records: list[CompileRecord] = []

    def runner(self, group: int) -> Callable:
        if group not in self.runners:
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
        return self.runners[group]

    def __call__(self, tokens: Tensor, pos: Tensor, self_k: Tensor, self_v: Tensor, cross_k: Tensor,
                 cross_v: Tensor, memory_mask: Tensor | None, group: int) -> Tensor:
        return self.runner(group)(tokens, pos, self_k, self_v, cross_k, cross_v, memory_mask)
