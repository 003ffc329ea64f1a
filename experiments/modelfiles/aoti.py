"""AOTInductor packages of a model's hot functions (the `aoti` engine; see engines.py), compiled once
and cached on disk.

A package (`torch._inductor.aoti_compile_and_package`) is a shared library with the weights frozen
in, so it is keyed by everything it was built from: the sha256 of the weights, the exported
function and its dynamic shapes, the inductor settings, and the machine's code (torch version,
the vector ISA inductor picked, the environment variables that steer the CPU kernels). A changed
weight or another CPU builds a new package; the same ones load in a second or so. Each package has
a sidecar `<key>.json` with its sha256 and compile time, checked before it is loaded; a package
that does not check is compiled again. Loading a package runs its code: the cache folder
(ATNAT_ENGINE_CACHE, else $ATNAT_CACHE/engines, else ~/.cache/atnat/engines) must be as private
as the user's home.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import Tensor, nn

from atnat.models.decoders.static_cache import StaticStep

from atnat.experiments.files import sha256, write_json_atomic

FORMAT = 1  # bump when what a package holds changes
ISA_ENV = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def cache_root() -> Path:
    env = os.environ.get("ATNAT_ENGINE_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("ATNAT_CACHE", Path.home() / ".cache" / "atnat")) / "engines"


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


def code_sha256() -> str:
    """sha256 of the model code a package is traced from (every file of atnat.models)."""
    import atnat.models

    digest = hashlib.sha256()
    for path in sorted(Path(atnat.models.__file__).parent.rglob("*.py")):
        digest.update(path.name.encode() + b"|" + path.read_bytes())
    return digest.hexdigest()


def machine_key() -> dict:
    """What decides the code a package holds, besides the model: torch, the ISA, the kernels' env."""
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    return {"torch": torch.__version__, "isa": str(pick_vec_isa()), "capability": torch.backends.cpu.get_cpu_capability(),
            "env": {k: os.environ[k] for k in ISA_ENV if k in os.environ}}


@dataclass
class CompileRecord:
    """One package in use: what it runs, its cache key, and whether it was compiled or loaded."""

    what: str  # e.g. "at step, group 5"
    key: str  # sha256 of the key fields (the package's file name)
    compiled: bool  # True: compiled in this process; False: loaded from the cache
    seconds: float  # export + compile (or load) time
    compile_seconds: float  # the compile time recorded when the package was built


@dataclass(frozen=True)
class Exportable:
    """A module to export with example inputs and their dynamic dimensions (torch.export.Dim)."""

    module: nn.Module
    args: tuple
    dynamic_shapes: tuple


class PackageCache:
    """Packages under `root`, by key; `load_or_compile` returns a callable runner."""

    def __init__(self, root: Path | None = None, log: Callable[[str], None] | None = None):
        self.root = Path(root) if root is not None else cache_root()
        self.log = log or (lambda text: print(text, file=sys.stderr))

    def key(self, fields: dict) -> str:
        text = json.dumps({"format": FORMAT, **fields, "code": code_sha256(), "machine": machine_key()},
                          sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def load_or_compile(self, what: str, fields: dict, build: Callable[[], Exportable], configs: dict,
                        context: Callable = torch.no_grad):
        """The runner of the package keyed by `fields` (+ the machine): loaded when the cache has it
        and it checks, else exported from build(), compiled with inductor `configs`, and cached.
        -> (runner, CompileRecord)."""
        key = self.key({**fields, "configs": configs})
        path, meta_path = self.root / f"{key}.pt2", self.root / f"{key}.json"
        began = time.perf_counter()
        meta = _read_meta(meta_path)
        if meta is not None and path.is_file() and sha256(path) == meta.get("sha256"):
            runner = torch._inductor.aoti_load_package(str(path))
            return runner, CompileRecord(what, key, False, time.perf_counter() - began, meta.get("compile_s", float("nan")))
        if meta is not None or path.exists():
            self.log(f"atnat: engine cache {path} does not match its {meta_path.name}: compiling it again")
        exportable = build()
        tmp = self.root / f".{key}.{os.getpid()}.pt2"
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            with context():
                program = torch.export.export(exportable.module, exportable.args,
                                              dynamic_shapes=exportable.dynamic_shapes, strict=False)
                torch._inductor.aoti_compile_and_package(program, package_path=str(tmp),
                                                        inductor_configs=dict(configs))  # it adds keys
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        seconds = time.perf_counter() - began
        write_json_atomic(meta_path, {"what": what, "fields": fields, "configs": configs, "machine": machine_key(),
                                      "sha256": sha256(path), "compile_s": seconds,
                                      "created": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())})
        self.log(f"atnat: compiled {what} in {seconds:.1f} s (cached as {path})")
        return torch._inductor.aoti_load_package(str(path)), CompileRecord(what, key, True, seconds, seconds)


def _read_meta(path: Path) -> dict | None:
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


class CompiledStep:
    """The static step of an AT decoder (its `_static_step` signature) run by one AOTInductor package
    per group size (1: greedy, K: a K-beam), each built on first use. Needs the decoder's static
    cache with `always_mask` (the packages take a memory mask)."""

    def __init__(self, decoder, cache: PackageCache, *, fields: dict, configs: dict):
        self.decoder, self.cache, self.fields, self.configs = decoder, cache, fields, configs
        self.runners: dict[int, Callable] = {}
        self.records: list[CompileRecord] = []

    def runner(self, group: int) -> Callable:
        if group not in self.runners:
            def build() -> Exportable:
                step = StaticStep(self.decoder, group)
                args, shapes = step.example()
                return Exportable(step, args, shapes)
            runner, record = self.cache.load_or_compile(f"at step, group {group}", {**self.fields, "group": group},
                                                        build, self.configs)
            self.runners[group] = runner
            self.records.append(record)
        return self.runners[group]

    def __call__(self, tokens: Tensor, pos: Tensor, self_k: Tensor, self_v: Tensor, cross_k: Tensor,
                 cross_v: Tensor, memory_mask: Tensor | None, group: int) -> Tensor:
        return self.runner(group)(tokens, pos, self_k, self_v, cross_k, cross_v, memory_mask)
