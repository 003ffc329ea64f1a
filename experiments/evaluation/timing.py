"""The timing phase: every decoding system of a task and seed timed side by side, in one process, after training.

Speed-ups are ratios, so both sides of a ratio are measured under the same conditions: once every cell of a
task and seed has finished, all its systems (cell x strategy, its AT baseline among them) decode the same
sentences interleaved, one system after another per sentence (latency, batch 1) or batch (throughput), in a
seeded random order at every call (no two systems side by side more often than any others), each call repeated
after warm-up and its median used. Each timed call follows an untimed call of the same system, so that no
system runs on caches another system's weights warmed (results/quickstart/notes.md measured that bias).

Per system: latency, throughput, decoder passes per sentence (a speculative system's verifier passes and
tokens per pass apart), its own decoding memory, whether its timed outputs equal the evaluated hypotheses,
and speed-ups over the task's AT greedy baseline and its further references (the CTranslate2 twin, the
baseline's beam search, `speed.reference_at`), each a ratio of total times of the same sentences with a 95%
paired interval (a bootstrap over the calls, widened to the ratio estimator's t interval where wider). The A/A
control times the baseline twice as two systems: the interval of that
ratio is the noise floor of the task's speed ratios, one for batch-1 latency and one for throughput.
"""
from __future__ import annotations

import ctypes
import dataclasses
import functools
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from atnat.core.cores import usable_cores
from atnat.core.errors import AtnatError
from atnat.experiments.config.devices import device_name
from atnat.experiments.config.run import build_strategy, load_task
from atnat.experiments.config.speed import SpeedSettings
from atnat.experiments.data.batching import collate
from atnat.experiments.evaluation.assemble import needs_teacher
from atnat.experiments.evaluation.baseline import (
    ENGINE_TWIN,
    is_baseline_cell,
    plain_at_config,
    task_of,
    timing_group,
    timing_groups,
)
from atnat.experiments.evaluation.columns import read_timing
from atnat.experiments.evaluation.metrics.speed import _synchronize, current_rss_mb, peak_memory_mb, reset_peak
from atnat.experiments.evaluation.schema import SPEED
from atnat.experiments.files import write_csv, write_json_atomic, written_lines
from atnat.experiments.modelfiles import ct2
from atnat.experiments.modelfiles.engines import apply_engine
from atnat.experiments.modelfiles.loading import checkpoint_stamp, evaluation_checkpoint, load_module
from atnat.experiments.modelfiles.packed import packing_summary
from atnat.experiments.provenance import code_version, label

COLUMNS = ["cell", "strategy", *[c.name for c in SPEED], "fingerprint", "control"]  # timing.csv
AA_SUFFIX = "-aa"  # the A/A control's twin of the baseline (timing.csv only, not a results row)


@dataclass
class System:
    """One decoding system to time: a trained module, a strategy, and its encoded test sources."""

    cell: str
    strategy: str  # the strategy's label (greedy, beam5, mask-predict-4 ...)
    module: object  # Seq2SeqModule in eval mode, on the timing device
    search: object  # the Strategy instance
    sources: list[list[int]]  # test sources encoded with this module's tokenizer, in split order
    teacher: object | None = None  # AT teacher of npd
    fingerprint: str = ""  # identifies the weights (a stale timing is redone when it changes)
    expected: list[str] | None = None  # the evaluated hypotheses (hyps/<label>.txt), in split order: what the
    # timed computation must reproduce, sentence by sentence

    def call(self, indices: list[int]):
        """A no-argument callable decoding the given sentences as one batch -> Hypotheses."""
        dev = self.module.device
        batch = collate([(i, self.sources[i], []) for i in indices])
        src, lengths = batch.src.to(dev), batch.src_lengths.to(dev)

        # a verifier is checked here, once, and built inside each timed search (its encoder is the strategy's time);
        # a scorer runs its teacher's encoder when it is made: inside each timed call
        verifier = needs_teacher(self.search, self.teacher, src) if getattr(self.search, "needs_verifier", False) else None

        def run():
            with torch.inference_mode():
                teacher = verifier if verifier is not None else needs_teacher(self.search, self.teacher, src)
                return self.module.decode(src, lengths, self.search, **teacher)
        return run


@dataclass
class ExportedSystem(System):
    """A plain AT cell's strategy run by CTranslate2 on the same weights (the fastest AT a user
    could deploy); `module` is a ct2.CT2Decoder. Its passes are not observable: NaN."""

    def call(self, indices: list[int]):
        sources = [self.sources[i] for i in indices]
        return lambda: (self.module(sources), _NO_STEPS)[1]


class _NoSteps:
    n_steps = float("nan")


_NO_STEPS = _NoSteps()


class PeakMemory:
    """Peak memory of one call above what was resident before it (MiB). On the CPU the call's peak
    resident size, after the C allocator has given back the memory earlier calls freed: otherwise it
    serves the call from pages it kept, the resident size does not grow, and a repeated call reads ~0."""

    def __init__(self, device: torch.device):
        self.device = device
        self.hwm = Path("/proc/self/status") if device.type == "cpu" and Path("/proc/self/clear_refs").exists() else None

    def start(self) -> float:
        if self.device.type == "cuda":
            reset_peak(self.device)
            return torch.cuda.memory_allocated(self.device) / 2**20
        if self.hwm is not None:
            _release_freed_memory()
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
        return current_rss_mb()

    def stop(self, before: float) -> float:
        if self.device.type == "cuda":
            return peak_memory_mb(self.device) - before
        if self.hwm is None:
            return float("nan")
        for line in self.hwm.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024 - before
        return float("nan")


@functools.cache
def _malloc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc's; absent from other C libraries
    except (AttributeError, OSError):
        return None


def _release_freed_memory() -> None:
    """Give the memory the C allocator holds free back to the system (glibc: every arena, every
    whole free page), so that the next call's allocations show in the resident size."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _call_orders(n_sys: int, repeats: int, n_calls: int, seed: int = 0):
    """The order the systems take turns in, for each repeat and call: a seeded random permutation each time, so
    that no two systems (the baseline and its A/A twin above all) are timed side by side more often than any
    other two (a fixed cycle kept the twin next to the baseline, and the A/A floor narrower than the noise)."""
    rng = np.random.default_rng(seed)
    for _ in range(repeats * n_calls):
        yield [int(s) for s in rng.permutation(n_sys)]


def _interleaved(calls: list[list], speed: SpeedSettings, device: torch.device, memory: PeakMemory | None = None):
    """calls[s][j]: system s's j-th call. -> times[s][j] (median over repeats), mem[s] (max MiB, each call
    run once more after the timed ones: measuring makes a call pay for fresh pages), spread[s] (median over
    calls of (max - min) / median over repeats)."""
    n_sys, n_calls = len(calls), len(calls[0])
    for _ in range(speed.warmup):
        for s in range(n_sys):
            for j in range(n_calls):
                calls[s][j]()
    raw = np.zeros((n_sys, speed.repeats, n_calls))
    mem = np.zeros(n_sys)
    orders = _call_orders(n_sys, speed.repeats, n_calls)
    for r in range(speed.repeats):
        for j in range(n_calls):
            for s in next(orders):
                calls[s][j]()  # untimed: the timed call then runs on caches its own weights warmed
                _synchronize(device)
                start = time.perf_counter()
                calls[s][j]()
                _synchronize(device)
                raw[s, r, j] = time.perf_counter() - start
    for s in range(n_sys if memory else 0):
        for j in range(n_calls):
            before = memory.start()
            calls[s][j]()
            _synchronize(device)
            mem[s] = max(mem[s], memory.stop(before))
    med = np.median(raw, axis=1)  # (S, J)
    spread = np.median((raw.max(axis=1) - raw.min(axis=1)) / np.maximum(med, 1e-12), axis=1)  # (S,)
    return med, mem, spread


def _ratio_ci(base: np.ndarray, other: np.ndarray, n: int, seed: int = 12345) -> tuple[float, float, float]:
    """sum(base) / sum(other) and its 95% interval over the paired calls: the paired percentile bootstrap, widened
    to the ratio estimator's Student-t interval (n - 1 degrees of freedom) where that is wider. Over few calls (a
    throughput's few batches) the bootstrap alone covered the true ratio in about 75% of simulated timings."""
    ratio = float(base.sum() / other.sum())
    if n < 2 or len(base) < 2:
        return ratio, float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(base), size=(n, len(base)))
    boots = base[idx].sum(axis=1) / other[idx].sum(axis=1)
    low, high = float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))
    from scipy.stats import t as student_t  # lazy: start-up

    k = len(base)  # the ratio estimator's standard error (residuals of base against ratio x other), on the log
    se = float(np.sqrt(np.sum((base - ratio * other) ** 2) / (k - 1) / k) / other.mean())  # scale: never below 0x
    spread = math.exp(float(student_t.ppf(0.975, k - 1)) * se / ratio) if ratio > 0 else float("inf")
    return ratio, min(low, ratio / spread), max(high, ratio * spread)


def _mean_ci(values: np.ndarray, n: int, seed: int = 12345) -> tuple[float, float]:
    if n < 2 or len(values) < 2:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    boots = values[rng.integers(0, len(values), size=(n, len(values)))].mean(axis=1)
    return float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))


def time_systems(systems: list[System], speed: SpeedSettings, baselines: dict[str, tuple[str, str]],
                 references: dict[str, dict[str, tuple[str, str]]] | None = None) -> pd.DataFrame:
    """Time `systems` side by side (see the module docstring); `baselines` maps a cell to the
    (cell, strategy) of its AT greedy baseline; `references` names further systems every speed is also
    a ratio to: {name: {cell: (cell, strategy)}}, each giving the columns speedup_vs_<name>,
    throughput_speedup_vs_<name> (with their intervals) and <name>_baseline (REFERENCES).
    -> one row per system, COLUMNS. Timed at speed.threads CPU threads (the caller's count given back after)."""
    if not systems:
        return pd.DataFrame(columns=COLUMNS)
    threads = torch.get_num_threads()
    if speed.threads:
        cores = usable_cores()
        if speed.threads > cores:
            print(f"atnat: timing with speed.threads {speed.threads} where this process may use {cores} CPU core(s): "
                  "the threads take turns, and the speed figures measure that", file=sys.stderr)
        torch.set_num_threads(speed.threads)
    try:
        return _time_systems(systems, speed, baselines, references)
    finally:
        torch.set_num_threads(threads)


def _time_systems(systems: list[System], speed: SpeedSettings, baselines: dict[str, tuple[str, str]],
                  references: dict[str, dict[str, tuple[str, str]]] | None) -> pd.DataFrame:
    device = next(s.module.device for s in systems if not isinstance(s, ExportedSystem))
    n = min(len(s.sources) for s in systems)
    n1, nt = min(speed.latency_sentences, n), min(speed.throughput_sentences, n)
    singles = [[s.call([i]) for i in range(n1)] for s in systems]
    order = sorted(range(nt), key=lambda i: len(systems[0].sources[i]))
    groups = [order[j: j + speed.throughput_batch] for j in range(0, nt, speed.throughput_batch)]
    batches = [[s.call(g) for g in groups] for s in systems]
    outputs = [[c() for c in calls] for calls in singles]
    passes = [statistics.mean(o.n_steps + _teacher_pass(s) for o in outs) for s, outs in zip(systems, outputs)]
    lat, _, spread = _interleaved(singles, speed, device)
    thr, mem, _ = _interleaved(batches, speed, device, PeakMemory(device))
    index = {(s.cell, s.strategy): k for k, s in enumerate(systems)}
    threads = torch.get_num_threads() if device.type == "cpu" else float("nan")
    noise = {}  # baseline (cell, strategy) -> the A/A intervals of its task: (batch-1 latency, throughput)
    for (cell, strategy), k in index.items():
        twin = index.get((cell, strategy + AA_SUFFIX))
        if twin is not None:
            noise[(cell, strategy)] = (_ratio_ci(lat[k], lat[twin], speed.bootstrap)[1:],
                                       _ratio_ci(thr[k], thr[twin], speed.bootstrap)[1:])
    rows = []
    for k, s in enumerate(systems):
        low, high = _mean_ci(lat[k], speed.bootstrap)
        row = {"cell": s.cell, "strategy": s.strategy, "latency_ms_b1": 1000 * float(lat[k].mean()),
               "latency_ms_b1_ci_low": 1000 * low, "latency_ms_b1_ci_high": 1000 * high,
               "throughput_sents_s": nt / float(thr[k].sum()), "decoder_passes": passes[k],
               "decode_memory_mb": float(mem[k]) if memory_measured(s, device) else float("nan"),
               "decode_memory_basis": memory_basis(s, device),
               "timing_spread": float(spread[k]), "fingerprint": s.fingerprint,
               "timing_threads": threads, "timing_engine": engine_of(s), "timing_engine_packed": packed_of(s),
               "control": "A/A" if s.strategy.endswith(AA_SUFFIX) else "", **_speculation(outputs[k]),
               "timed_equals_evaluated": _agreement(s, outputs[k])}
        base = index.get(baselines.get(s.cell, ("", "")))
        if base is not None:
            b = systems[base]
            row["speed_baseline"] = f"{b.cell} / {b.strategy}"
            row["speedup_vs_at"], row["speedup_ci_low"], row["speedup_ci_high"] = _ratio_ci(lat[base], lat[k], speed.bootstrap)
            (row["throughput_speedup_vs_at"], row["throughput_speedup_ci_low"],
             row["throughput_speedup_ci_high"]) = _ratio_ci(thr[base], thr[k], speed.bootstrap)
            if (b.cell, b.strategy) in noise:
                latency, throughput = noise[(b.cell, b.strategy)]
                row["speed_noise_low"], row["speed_noise_high"] = latency
                row["throughput_noise_low"], row["throughput_noise_high"] = throughput
                if k == base:  # the baseline's own speed-ups are 1 by construction: their spread is the noise
                    # (held to contain 1: an A/A interval that excludes 1 is a bias of the timing, not the baseline's)
                    row["speedup_ci_low"], row["speedup_ci_high"] = min(latency[0], 1.0), max(latency[1], 1.0)
                    row["throughput_speedup_ci_low"], row["throughput_speedup_ci_high"] = \
                        min(throughput[0], 1.0), max(throughput[1], 1.0)
        for name, mapping in (references or {}).items():
            ref = index.get(mapping.get(s.cell, ("", "")))
            if ref is None:
                continue
            r = systems[ref]
            if f"{name}_baseline" in COLUMNS:
                row[f"{name}_baseline"] = f"{r.cell} / {r.strategy}"
            (row[f"speedup_vs_{name}"], row[f"speedup_vs_{name}_ci_low"],
             row[f"speedup_vs_{name}_ci_high"]) = _ratio_ci(lat[ref], lat[k], speed.bootstrap)
            (row[f"throughput_speedup_vs_{name}"], row[f"throughput_speedup_vs_{name}_ci_low"],
             row[f"throughput_speedup_vs_{name}_ci_high"]) = _ratio_ci(thr[ref], thr[k], speed.bootstrap)
        rows.append(row)
    return pd.DataFrame(rows).reindex(columns=COLUMNS)


def _agreement(system: System, outputs: list) -> float:
    """The share of the batch-1 timed sentences whose output equals the hypothesis evaluated for them: what
    was timed is what was scored (NaN where no evaluated hypotheses are at hand, or for a twin)."""
    detok = getattr(system.module, "detokenize", None)
    if system.expected is None or detok is None or isinstance(system, ExportedSystem) or not outputs:
        return float("nan")
    special = system.module.special
    same = [detok(out.sequences(special)[0]) == system.expected[i] for i, out in enumerate(outputs)
            if i < len(system.expected)]
    return sum(same) / len(same) if same else float("nan")


def _speculation(outputs: list) -> dict:
    """A speculative system's verifier passes per sentence and tokens kept per verifier pass, from its
    batch-1 calls; {} for the other systems."""
    split = [o for o in outputs if getattr(o, "passes", None) and "verifier" in o.passes]
    if not split:
        return {}
    kept = sum(o.accepted[0] for o in split if o.accepted)
    rounds = sum(o.accepted[1] for o in split if o.accepted)
    return {"verifier_passes": statistics.mean(o.passes["verifier"] for o in split),
            "acceptance_length": kept / rounds if rounds else float("nan")}


def engine_of(system: System) -> str:
    """The decoding engine a system ran with: its module's (modelfiles/engines.py), ctranslate2 for a twin."""
    if isinstance(system, ExportedSystem):
        return "ctranslate2"
    info = getattr(system.module, "engine_info", None)
    return info.label if info is not None else "eager"


def packed_of(system: System) -> str:
    """The auto engine's packed weight shapes in a system's models (packed.packing_summary; the teacher's too)."""
    if isinstance(system, ExportedSystem):
        return ""
    parts = [packing_summary(m) for m in (system.module, system.teacher) if hasattr(m, "modules")]
    return " | ".join(p for p in parts if p)


def memory_measured(system: System, device: torch.device) -> bool:
    """CTranslate2 allocates GPU memory outside torch's allocator, which PeakMemory reads on CUDA:
    its twin's GPU memory is not measured (NaN, not ~0 MB). On the CPU the process's peak RSS sees both."""
    return not (isinstance(system, ExportedSystem) and device.type == "cuda")


def memory_basis(system: System, device: torch.device) -> str:
    """How a system's decode_memory_mb is read (PeakMemory), "" where it is not."""
    if not memory_measured(system, device):
        return ""
    if device.type == "cuda":
        return "cuda-allocator"
    return "cpu-resident" if Path("/proc/self/clear_refs").exists() else ""


def _teacher_pass(system: System) -> int:
    """npd adds one teacher pass per call to its NAT passes (speculative counts its own verifier's)."""
    return 1 if system.teacher is not None and system.search.needs_scorer else 0


def grid_systems(cells: list, device: str, speed: SpeedSettings | None = None, baseline: str | None = None
                 ) -> tuple[list[System], dict[str, tuple[str, str]], dict[str, dict[str, tuple[str, str]]]]:
    """The systems of finished cells (each of its eval strategies; with speed.ct2_baseline also
    the plain AT cells' strategies run by CTranslate2), each cell's speed baseline (its task's
    baseline cell: evaluation/baseline.py; its greedy strategy, else its first), and its further speed
    references (time_systems): ct2, the CTranslate2 twin's greedy; at_beam, the baseline cell's beam search;
    ref_at, speed.reference_at's greedy (same task and seed)."""
    systems, teachers, plain = [], {}, {}
    for cell in cells:
        cfg, run_dir = cell.config, Path(cell.config.output_dir)
        module, tokenizer = load_module(evaluation_checkpoint(run_dir), map_location=device)
        src = load_task(cfg).splits[cfg.eval.split][0]
        sources = [tokenizer.encode(line)[: cfg.train.max_len] for line in src]
        teacher = None
        if cfg.distill is not None and any(build_strategy(s)[1].uses_teacher for s in cfg.eval.strategies):
            key = str(cfg.distill.teacher)
            if key not in teachers:
                teachers[key] = load_module(cfg.distill.teacher, map_location=device)[0]
                if speed is not None:  # the teacher's part of npd and speculative runs on the same engine
                    apply_engine(teachers[key], speed.engine)
            teacher = teachers[key]
        for spec in cfg.eval.strategies:
            label, strategy = build_strategy(spec)
            hyps = run_dir / "hyps" / f"{label}.txt"
            expected = written_lines(hyps) if hyps.is_file() else None
            systems.append(System(cell.name, label, module, strategy, sources, teacher,
                                  checkpoint_stamp(run_dir), expected))
            if speed is not None and speed.ct2_baseline and exportable(cell):
                systems.append(exported_twin(systems[-1], tokenizer, device, speed))
            if speed is not None and speed.aa_control and is_baseline_cell(cell, baseline) and label == "greedy":
                systems.append(dataclasses.replace(systems[-2 if systems[-1].strategy.endswith(ENGINE_TWIN) else -1],
                                                   strategy=label + AA_SUFFIX))
        if speed is not None:  # after the CTranslate2 twins: they are exported from the plain modules
            apply_engine(module, speed.engine)
        if is_baseline_cell(cell, baseline):
            labels = [build_strategy(s)[0] for s in cfg.eval.strategies]
            plain.setdefault((task_of(cell), cell.seed),
                             (cell.name, "greedy" if "greedy" in labels else labels[0], exportable(cell)))
    refs = {timing_group(c): (c.name, "greedy") for c in cells
            if speed is not None and speed.reference_at and c.variant == speed.reference_at}
    chosen = {key: name for key, (name, _, _) in plain.items()}  # the one baseline cell of each task and seed
    beams = {timing_group(c): (c.name, label) for c in cells if chosen.get(timing_group(c)) == c.name
             for label, strategy in [next(((lab, st) for lab, st in map(build_strategy, c.config.eval.strategies)
                                           if st.registered_name == "beam"), ("", None))] if strategy is not None}
    baselines, ct2, ref, beam = {}, {}, {}, {}
    for cell in cells:
        if timing_group(cell) in refs:
            ref[cell.name] = refs[timing_group(cell)]
        if timing_group(cell) in beams:
            beam[cell.name] = beams[timing_group(cell)]
        base = plain.get((task_of(cell), cell.seed))
        if base is not None:
            baselines[cell.name] = base[:2]
            if speed is not None and speed.ct2_baseline and base[2] and base[1] == "greedy":
                ct2[cell.name] = (base[0], f"greedy{ENGINE_TWIN}")
    return systems, baselines, {"ct2": ct2, "at_beam": beam, "ref_at": ref}


def exportable(cell) -> bool:
    """A plain AT cell of the built-in `at` decoder: what CTranslate2 can run (modelfiles/ct2.py)."""
    return plain_at_config(cell.config) and cell.config.decoder_name == "at"


def system_keys(cells: list, speed: SpeedSettings, baseline: str | None = None) -> list[tuple[str, str, str]]:
    """(cell, strategy label, weights fingerprint) of every system `grid_systems` would build, sorted,
    without loading a model or exporting one: what decides whether an earlier timing still holds."""
    keys = []
    for cell in cells:
        stamp = checkpoint_stamp(Path(cell.config.output_dir))
        for spec in cell.config.eval.strategies:
            label = build_strategy(spec)[0]
            keys.append((cell.name, label, stamp))
            if speed.ct2_baseline and exportable(cell):
                keys.append((cell.name, f"{label}{ENGINE_TWIN}", stamp))
            if speed.aa_control and is_baseline_cell(cell, baseline) and label == "greedy":
                keys.append((cell.name, label + AA_SUFFIX, stamp))
    return sorted(keys)


def exported_twin(system: System, tokenizer, device: str, speed: SpeedSettings) -> ExportedSystem:
    """The same weights and search in CTranslate2 float32 (the nearest CTranslate2 search where
    ours has no exact equivalent, e.g. GNMT length normalisation: for timing only)."""
    ct2.require()
    decoder = ct2.ct2_decoder((system.module, tokenizer), system.search, compute_type="float32", device=device,
                              threads=speed.threads or torch.get_num_threads(), exact=False)
    return ExportedSystem(system.cell, f"{system.strategy}{ENGINE_TWIN}", decoder, system.search, system.sources,
                          fingerprint=system.fingerprint)


def _timed_as_they_are(group: list, old: pd.DataFrame | None, speed: SpeedSettings, baseline: str | None) -> list:
    """The cells of `group` whose rows in an earlier timing.csv are those of their present systems,
    weights and settings (system_keys)."""
    if old is None:
        return []
    def rows(cell) -> list[tuple[str, str, str]]:
        mine = old[old.cell == cell.name]
        return sorted(zip(mine.cell, mine.strategy, mine.fingerprint.astype(str)))

    return [c for c in group if rows(c) == system_keys([c], speed, baseline)]


def timing_settings_key(settings: dict) -> str:
    """A timing.json's settings as compared: the device by its kind and model (`cuda:0` and `cuda` on the same
    GPU model are one device; `atnat time --devices 0` spells it one way, the runner the other), the rest as
    written."""
    return json.dumps({**settings, "device": str(settings.get("device", "")).split(":")[0]}, sort_keys=True)


def same_timing_settings(recorded: dict | None, now: dict) -> bool:
    return isinstance(recorded, dict) and timing_settings_key(recorded) == timing_settings_key(now)


def time_grid(cells: list, out: Path, speed: SpeedSettings, device: str, baseline: str | None = None, *,
              keep_others: bool = False, anew: bool = False) -> pd.DataFrame:
    """The timing phase of a grid: the finished cells of each task and seed timed together (timing_group);
    written to out/timing.csv (its speed settings, device and the device's model in out/timing.json).
    A group whose systems, weights and settings are unchanged keeps its timing (a resumed grid whose
    cells were all done does not time again, and a group timed before the grid finished, by `atnat
    time`, is not timed again). A group with new or changed cells times those beside its baseline
    cell (and speed.reference_at's), which are timed again with them; its other cells keep their rows (a student timed by `atnat
    time --partial` when it finished is not timed again each time another student of its seed
    finishes). Every ratio is still measured within one session: a kept row's speed-ups were measured
    beside the baseline as it was timed then. A group whose baseline changed (or that has none) is
    timed anew as a whole. Rows of one group may so come from different sessions (`timing_session`;
    the report says so). A cell whose checkpoints are gone keeps its earlier timing (named on stderr).
    `keep_others`: rows of cells not in `cells` are kept too (a partial timing); otherwise they are
    dropped. `anew`: every group of `cells` is timed again as a whole, in one session, whatever was timed
    before (the last timing of a grid whose students were timed one by one: the same weights timed in
    two sessions moved a ratio by more than its interval within either, results/multi30k-deep/session_drift.csv);
    cells whose checkpoints are gone still keep their rows, and so does a group whose baseline's are."""
    path, settings_path = out / "timing.csv", out / "timing.json"
    settings = {"speed": speed.record(), "device": device, "device_name": device_name(device),
                **({"baseline": baseline} if baseline else {})}  # another GPU (or CPU) model times anew
    try:
        old = read_timing(path) if path.exists() else None
        recorded = json.loads(settings_path.read_text(encoding="utf-8")) if settings_path.is_file() else None
    except (OSError, ValueError) as err:  # cut short or hand-edited (json's and pandas' parse errors are ValueErrors)
        if keep_others:  # a partial timing keeps the other seeds' rows: it cannot go on without them
            raise AtnatError(f"{path} or {settings_path} cannot be read ({type(err).__name__}: {err}); move both away "
                             "to time every seed anew") from None
        print(f"atnat: {path} or {settings_path} cannot be read ({type(err).__name__}: {err}); every system is timed "
              "anew", file=sys.stderr)
        old = recorded = None
    timeable = [c for c in cells if evaluation_checkpoint(Path(c.config.output_dir)).is_file()]
    gone = [c.name for c in cells if c not in timeable]
    if old is not None and not same_timing_settings(recorded, settings):
        lost = sorted(set(old.cell) & set(gone))  # rows that cannot be taken again: never dropped without a word
        if keep_others or lost:  # a partial timing (`atnat time`) must not wipe the other seeds' rows either
            raise AtnatError(f"{path} was timed with other speed settings or on another device than now "
                             f"({settings_path}: {settings_path.read_text() if settings_path.is_file() else 'missing'}; "
                             f"now {json.dumps(settings)})"
                             + (f", and {', '.join(lost)} have no checkpoint left to be timed again: timing anew would "
                                "drop their rows" if lost else ": timing only some seeds would drop the others' rows")
                             + ". Time with the same settings and device (the same --devices as the run), or move "
                             "timing.csv away (keeping a copy) to time every seed anew")
        old = None  # other speed settings: nothing kept, everything timed anew
    if gone:
        print(f"atnat: no checkpoint left for {', '.join(gone)}: not timed again (their earlier timings, if "
              "any, are kept)", file=sys.stderr)
    groups = timing_groups(timeable)
    kept_cells = set(gone)
    if keep_others and old is not None:
        kept_cells |= set(old.cell) - {c.name for c in cells}
    todo = []  # decided before any model is loaded: a resumed, finished grid loads nothing
    no_baseline = {timing_group(c) for c in cells if c.name in gone and is_baseline_cell(c, baseline)}
    for key, group in groups.items():
        if key in no_baseline:  # nothing to time beside: its cells keep what they had (their ratios stand)
            kept_cells |= {c.name for c in group}
            print(f"atnat: the baseline of {key[0]} seed {key[1]} has no checkpoint left: its cells keep their "
                  "earlier timings, and none is timed anew", file=sys.stderr)
            continue
        held = [] if anew else _timed_as_they_are(group, old, speed, baseline)
        if len(held) == len(group):
            kept_cells |= {c.name for c in group}
            continue
        bases = [c for c in group if is_baseline_cell(c, baseline)] if held else []
        if bases and all(c in held for c in bases):  # the new cells beside the baseline, timed again
            again = bases + [c for c in group if speed.reference_at and c.variant == speed.reference_at
                             and c not in bases]  # and beside the reference AT: its ratios too within the session
            kept_cells |= {c.name for c in held if c not in again}
            todo += [c for c in group if c in again or c not in held]
        else:
            todo += group
    kept = old[old.cell.isin(kept_cells)] if old is not None else None
    if not todo and old is not None and len(kept) == len(old):
        return old
    frames = [kept] if kept is not None and len(kept) else []
    if todo:
        systems, baselines, references = grid_systems(todo, device, speed, baseline)
        groups = timing_groups(todo)
        code = label(code_version())  # the code that times, beside the commits that trained and evaluated
        waiting = old[old.cell.isin({c.name for c in todo})] if old is not None else None  # their earlier rows
        for i, ((task, seed), group) in enumerate(groups.items(), 1):
            names = {c.name for c in group}
            session = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
            timed = [s for s in systems if s.cell in names]
            print(f"atnat: timing {i} of {len(groups)} ({task}, seed {seed}): {len(timed)} systems side by side, "
                  f"{speed.latency_sentences} sentences one at a time and {speed.throughput_sentences} in batches, "
                  f"{speed.repeats} repeats; started {session}", file=sys.stderr, flush=True)
            frames.append(time_systems(timed, speed, baselines, references).assign(task=task, timing_session=session,
                                                                                   timed_with=code))
            if i < len(groups):  # written after each group: a timing stopped later keeps the groups it timed
                if waiting is not None:
                    waiting = waiting[~waiting.cell.isin(names)]
                write_csv(pd.concat(frames + ([waiting] if waiting is not None and len(waiting) else []),
                                    ignore_index=True), path)
                write_json_atomic(settings_path, settings)
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS)
    write_csv(table, path)
    write_json_atomic(settings_path, settings)
    return table
