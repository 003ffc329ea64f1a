"""The systems a decode benchmark times (ours on random weights, and their peers), and how:
round-robin over the systems of one shape, peak memory per call, and a leak check."""
from __future__ import annotations

import copy
import gc
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

import atnat.models.decoders  # noqa: F401  (registers the decoders)
from atnat.core.engine_names import parse_engine, touches
from atnat.core.errors import AtnatError
from atnat.experiments.bench import ct2_peer as ct2
from atnat.experiments.bench import hf
from atnat.experiments.bench.spec import HF_BEAMS, Spec, ctc_upsample, dag_upsample, our_strategy
from atnat.experiments.evaluation.metrics.speed import current_rss_mb, measure, peak_memory_mb, reset_peak
from atnat.experiments.modelfiles.engines import apply_engine
from atnat.experiments.modelfiles.quantize import quantize_int8
from atnat.models.decoders.dag import graph_size
from atnat.models.seq2seq import Seq2SeqModule


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


class ForcedPath:
    """A DAGModel whose links allow one path only: vertex 0, `length` middle vertices spread evenly over
    the graph, the last vertex. Every DAG strategy then emits exactly `length` tokens (with dedup off);
    the real pass still runs, so its cost, and the walk's over the whole graph, stay in the timing."""

    def __init__(self, model, length: int):
        self.model, self.length = model, length

    def forward_dag(self, memory):
        log_probs, links, padding_mask = self.model.forward_dag(memory)  # (B, L, V), (B, L, L), (B, L)
        L = links.size(-1)
        if bool(padding_mask.any()):
            raise AtnatError("a forced DAG path needs graphs of one size: sources without padding")
        if L < self.length + 2:
            raise AtnatError(f"a forced DAG path of {self.length} tokens needs a graph of at least "
                             f"{self.length + 2} vertices; got {L}")
        on = torch.linspace(0, L - 1, self.length + 2, device=links.device).round().long()  # (length + 2,)
        allowed = torch.zeros(L, L, dtype=torch.bool, device=links.device)
        allowed[on[:-1], on[1:]] = True
        return log_probs, links.masked_fill(~allowed, float("-inf")), padding_mask

    def __getattr__(self, name):  # reorder_memory and the rest: the wrapped model's
        return getattr(self.model, name)


class Models(dict):
    """Random-weight Seq2SeqModules of one size, built once per (decoder, CTC or DAG upsampling)."""

    def __init__(self, spec: Spec, cache=None):
        super().__init__()
        self.spec = spec
        self.cache = cache  # compiled engines' packages (aoti.PackageCache; None: the process's, aoti.PACKAGES)

    def get(self, decoder: str, upsample: int = 0, compile_mode: str | None = None, quantize: str | None = None,
            engine: str | None = None):
        """compile_mode: the same weights (same seed) with the static-cache step under torch.compile;
        quantize="int8": the same weights with dynamic int8 linear layers; engine: the same weights
        (quantized or not) decoding with that engine (modelfiles/engines.py)."""
        key = (decoder, upsample, compile_mode, quantize, engine)
        if engine:
            if key not in self:
                plain = self.get(decoder, upsample, compile_mode)  # the same weights, of its own (engines work in place)
                self[key] = quantize_int8(plain) if quantize else copy.deepcopy(plain)
                apply_engine(self[key], engine, cache=self.cache)
            return self[key]
        if quantize:
            if key not in self:
                self[key] = quantize_int8(self.get(decoder, upsample))
            return self[key]
        if key not in self:
            torch.manual_seed(0)
            self[key] = Seq2SeqModule(
                vocab_size=self.spec.vocab, decoder=decoder, model=self.spec.model,
                decoder_options={"upsample": upsample} if decoder in ("ctc", "dag") else None).eval().to(self.spec.device)
            if compile_mode:
                self[key].decoder.use_static_cache(True, compile_mode)
        return self[key]


def our_fn(module, strategy, src, out_len: int):
    """-> a no-argument callable decoding src (B, S) from scratch (encoder included); NAT
    strategies read a length forced to out_len, DAG strategies a path of out_len tokens."""
    lengths = src.ne(module.special.pad).sum(1)
    if strategy.requires not in ("parallel", "dag"):
        return lambda: module.decode(src, lengths, strategy)
    model = (ForcedLength if strategy.requires == "parallel" else ForcedPath)(module.decoder, out_len)
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
               int8: bool = False, engine: str | None = None) -> System:
    """Our strategy `name` on its random-weight model, pinned to out_len tokens (`compiled`: the
    AT model with the static-cache step under torch.compile, spec.compile mode; `int8`: the model
    with dynamic int8 linear layers; `engine`: decoding with that engine, row ours[-int8]-ENGINE).
    The checked first call also records its own time (`first_call_s`: an engine compiles or loads
    its packages there) and the compile/load time of the packages this call built (`compile_s`: 0 where it
    reused those of an earlier row of the model; NaN for an engine that compiles nothing)."""
    decoder, strategy = our_strategy(name, out_len)
    k = {"ctc": ctc_upsample, "dag": dag_upsample}.get(decoder, lambda *_: 0)(out_len, spec.src_len)
    module = models.get(decoder, k, spec.compile if compiled else None, "int8" if int8 else None, engine=engine)
    fn = our_fn(module, strategy, src, out_len)

    def first() -> dict:
        info = getattr(module, "engine_info", None)
        earlier = len(info.records) if info is not None else 0  # the model's packages built for earlier rows
        began = time.perf_counter()
        hyps = fn()
        took = time.perf_counter() - began
        own = float("nan") if info is None or not info.records else sum(r.seconds for r in info.records[earlier:])
        return dict(passes=hyps.n_steps, tokens_out=check_ours(hyps, name, out_len, module.special),
                    slots=graph_size(spec.src_len, k) if decoder == "dag" else k * spec.src_len if k else out_len,
                    first_call_s=took, compile_s=own)
    system = "ours-compiled" if compiled else "ours-int8" if int8 else "ours"
    return System(f"{system}-{parse_engine(engine).label}" if engine else system, name, fn, first)


def shape_systems(models: Models, hf_model, src, out_len: int, spec: Spec, ct2_peer=None) -> list[System]:
    """Every strategy of ours at one shape (and its int8 form with --quantize int8), each followed
    by its HF and CTranslate2 peers when it has them."""
    systems = []
    for name in spec.strategies:
        systems.append(our_system(models, name, src, out_len, spec))
        if spec.compile and name in HF_BEAMS:  # the AT strategies, before/after side by side
            systems.append(our_system(models, name, src, out_len, spec, compiled=True))
        capability = "step" if name in HF_BEAMS else "parallel"
        for engine in spec.engines:  # an engine that changes nothing for a strategy gets no row
            if touches(parse_engine(engine), capability):
                systems.append(our_system(models, name, src, out_len, spec, engine=engine))
        if spec.quantize == "int8":
            systems.append(our_system(models, name, src, out_len, spec, int8=True))
            for engine in spec.int8_engines:
                if touches(parse_engine(engine), capability):
                    systems.append(our_system(models, name, src, out_len, spec, int8=True, engine=engine))
        if hf_model is not None and name in HF_BEAMS:
            systems.append(System("hf", name, *hf.peer(hf_model, HF_BEAMS[name], src, out_len)))
        if ct2_peer is not None and name in HF_BEAMS:
            for system in ct2.SYSTEMS:
                systems.append(System(system, name, *ct2_peer.peer(system, HF_BEAMS[name], src, out_len)))
    return systems


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


def timed_call(fn, spec: Spec) -> tuple[float, float]:
    """One timed call -> seconds, the process's peak memory during it (MiB; every model loaded counts: method.md)."""
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
    change on a shared machine hits all alike; the checked first call is one warm-up. Each timed
    call right after an untimed call of the same system: in a fixed round a system always follows
    the same other one, and one that shares its weights (ours and an engine of ours at batch 1)
    would run on caches warmed for it. -> per system: counts, median/min seconds, repeats, peak
    memory of its timed calls. A system that raises is left out of the later rounds, its row keeps the
    error (`error`; empty for the others) and no time: the other rows are still measured."""
    stats = []
    for s in systems:
        st = dict(times=[], peak_mem_mb=0.0, repeats=spec.repeats, error="")
        stats.append({**guarded(s.first, st, {})[1], **st})
    live = lambda: [(s, st) for s, st in zip(systems, stats) if not st["error"]]
    for _ in range(spec.warmup - 1):
        for s, st in live():
            guarded(s.fn, st)
    for _ in range(spec.repeats):
        for s, st in live():
            if guarded(s.fn, st)[0]:  # untimed: the timed call runs on caches its own weights warmed
                ok, (seconds, peak) = guarded(lambda s=s: timed_call(s.fn, spec), st, (0.0, 0.0))
                if ok:
                    st["times"].append(seconds)
                    st["peak_mem_mb"] = max(st["peak_mem_mb"], peak)
    for st in stats:
        times = st.pop("times")
        if st["error"]:
            st.update(median_s=float("nan"), min_s=float("nan"), peak_mem_mb=float("nan"))
        else:
            st.update(median_s=statistics.median(times), min_s=min(times))
    return stats


def guarded(fn, st: dict, failed=None) -> tuple[bool, object]:
    """fn() -> (True, its result), or (False, `failed`) after writing the exception's type and first line
    into the row's `error` (one failing system must not lose the others' rows)."""
    try:
        return True, fn()
    except Exception as e:  # noqa: BLE001
        first = (str(e).strip().splitlines() or [""])[0]
        st["error"] = f"{type(e).__name__}: {first}" if first else type(e).__name__
        return False, failed
