"""Run configuration: YAML -> frozen dataclasses, validated before anything trains.

Every unknown key, unknown name or incompatible decoder/strategy pair fails here with one
message naming the file, the key and the valid choices.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from atnat.core.errors import AtnatError
from atnat.core.options import (
    OptionTypeError,
    build_config,
    check_fields,
    require,
    require_at_least,
    require_between,
    require_choice,
    require_non_negative,
    require_optional_at_least,
    require_threads,
)
from atnat.decoding.base import STRATEGIES, compatibility_problem
from atnat.experiments.config.plugins import load_plugins
from atnat.experiments.config.precision import PRECISIONS
from atnat.experiments.data.tasks import SPLITS, TASKS, TaskData
from atnat.experiments.data.tokenize import CACHE_DIR
from atnat.experiments.files import path_part, read_utf8
from atnat.models.decoders.base import DECODERS, LossConfig, guided_attention_problem
from atnat.models.optim import OptimConfig
from atnat.models.sizes import ModelConfig
from atnat.models.step_forms import STEP_FORMS


class ConfigError(AtnatError):
    """A configuration mistake; the message names the file and key."""


def check_keys(cls, data: Any, where: str) -> dict:
    """Ensure `data` is a mapping whose keys are fields of dataclass `cls`."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__} {data!r}")
    valid = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in data if k not in valid]
    if unknown:
        raise unknown_key(where, unknown[0], valid)
    return data


def unknown_key(where: str, key: Any, valid: list[str] | tuple[str, ...]) -> ConfigError:
    """The error for a key `where` does not know: the closest valid one suggested, then every valid one."""
    close = difflib.get_close_matches(str(key), list(valid), n=1)
    return ConfigError(f"{where}: unknown key {key!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                       + f"; valid keys: {', '.join(valid) or '(none)'}")


def checked(cls, data: Any, where: str, *, section: bool = True) -> dict:
    """`data` with its keys and value types checked against dataclass `cls` (numeric strings
    that YAML leaves as str become numbers); errors name `where`, the key path and the type.
    With `section`, `where` ends in the section's key (`...: train` -> `...: train.max_steps`)."""
    data = check_keys(cls, data, where)
    try:
        return check_fields(cls, data)
    except OptionTypeError as err:
        dotted = section and not where.endswith(")")  # `decoder (ctc)` reads better as `decoder (ctc): k`
        raise ConfigError(f"{where}{'.' if dotted else ': '}{err.key}: {err.problem}") from None


def make(cls, data: Any, where: str):
    """Build dataclass `cls` from `data`, turning type/value errors into ConfigErrors at `where`."""
    data = checked(cls, data, where)
    try:
        return build_config(cls, data)
    except ConfigError:
        raise
    except AtnatError as err:
        head, _, section = where.rpartition(": ")
        text = str(err)
        if head and section and text.startswith(section + ":"):  # `file: train` + `train: keep ...`
            raise ConfigError(f"{head}: {text}") from None
        raise ConfigError(f"{where}: {text}") from None
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{where}: {err}") from None


def named(section: Any, where: str) -> tuple[str, dict]:
    """`{name: x, **options}` (or a bare string) -> (name, options)."""
    if isinstance(section, str):
        return section, {}
    if not isinstance(section, dict) or "name" not in section:
        raise ConfigError(f"{where}: expected a name or a mapping with a 'name' key, got {section!r}")
    opts = dict(section)
    return opts.pop("name"), opts


LOGGERS = ("csv", "tensorboard")


ACCELERATORS = ("auto", "cpu", "gpu", "cuda")  # of Lightning's, those atnat trains, decodes and times on


def _devices_ok(devices: Any) -> bool:
    """Lightning's `devices`: an int >= 1 or -1, "auto", a list of indices, or a string of them ("0,1", "-1")."""
    if isinstance(devices, bool):
        return False
    if isinstance(devices, int):
        return devices >= 1 or devices == -1
    if isinstance(devices, (list, tuple)):
        return bool(devices) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devices)
    if isinstance(devices, str):
        parts = [p.strip() for p in devices.strip().strip(",").split(",")]
        return devices.strip() == "auto" or (bool(parts) and all(p.lstrip("-").isdigit() for p in parts))
    return False


@dataclass(frozen=True)
class TrainSettings:
    """How long and on what to train."""

    max_steps: int = 2000  # optimizer steps
    max_epochs: int = 10000  # upper bound on epochs (max_steps usually ends training first)
    max_time_s: float | None = None  # wall-clock training budget in seconds (resumed runs count the time spent)
    max_tokens: int = 4096  # token budget of a training (and validation) batch (padded source or target tokens)
    max_sentences: int | None = None  # cap on sentences per batch
    max_len: int = 256  # training pairs longer than this (in tokens) are dropped
    val_every_steps: int = 500  # validation (and checkpoint) interval in optimizer steps
    save_every_s: float | None = 600.0  # also write last.ckpt at the first step this many seconds after the
    # last checkpoint, so a run killed without warning (a lost machine, SIGKILL) trains about this much again
    # at most; null: last.ckpt only at validations and on SIGTERM (the weights are the same either way)
    accelerator: str = "auto"  # Lightning accelerator: auto | cpu | gpu
    devices: Any = 1  # devices for one run (>1 uses DDP)
    num_nodes: int = 1  # machines for one run (DDP across nodes; `--launcher slurm` asks SLURM for them)
    precision: str = "32-true"  # Lightning precision (32-true, bf16-mixed on GPU or CPU, ...) or auto: bf16-mixed
    # where the device does bf16 natively (a CUDA GPU that supports it; a CPU with avx512_bf16 or AMX), else 32-true
    early_stop_patience: int | None = None  # stop after this many validations without checkpoint_metric gain
    early_stop_min_delta: float = 0.0  # a validation gains only when it beats the best so far by more than this
    # (e.g. 0.3 BLEU with patience 3: stop once 3 validations in a row add no more than 0.3 to the best)
    num_threads: int | None = None  # torch CPU threads (None: torch's default)
    step: str = "eager"  # how a training step runs: eager | fused (fused Adam) | compiled (torch.compile of the
    # loss, fused Adam); equal up to float rounding, speed by device (models/step_forms.py, `atnat bench train`)
    progress_bar: bool = True  # Lightning's progress bar
    checkpoint_metric: str = "loss"  # selects checkpoints: "loss" (val/loss, lowest) or "bleu" (val/bleu,
    # highest; validation decodes greedily (AT) or in one pass (NAT))
    keep: int = 1  # checkpoints kept: the `keep` best by checkpoint_metric (average: best), or the last
    # `keep` validation checkpoints (average: last)
    average: str = "none"  # "none": evaluate the best checkpoint; "best"/"last": the mean of the weights of
    # the `keep` best / last checkpoints (written to checkpoints/averaged.ckpt)
    average_window: float = 0.5  # average: only checkpoints from the last `average_window` of training (step >=
    # (1 - window) x the last step) and past the warm-up; a mean with early weights is worse than either
    ema: float | None = None  # exponential moving average of the weights with this decay (e.g. 0.999),
    # updated every step; validation, checkpoints and evaluation use the averaged weights
    loggers: tuple[str, ...] = ("csv",)  # training logs under logs/: "csv" (metrics.csv), "tensorboard"
    init_from: str | None = None  # start from another run's weights wherever names and shapes match
    # (encoder, embeddings, decoder layers, output projection): "teacher" (distill.teacher) or a run/checkpoint path
    divergence_factor: float | None = 10.0  # fail the run when the training loss exceeds this multiple of
    # ln V, a uniform guess's loss (null: only a NaN/inf loss fails it); see training/divergence.py

    def __post_init__(self) -> None:
        for name in ("max_steps", "max_epochs", "max_tokens", "max_len", "val_every_steps"):
            require_between(getattr(self, name), 1, MAX_COUNT, "train", name)
        for name in ("max_sentences", "early_stop_patience"):
            require_optional_at_least(getattr(self, name), 1, "train", name)
        require_threads(self.num_threads, "train", "num_threads")
        require(self.divergence_factor is None or (isinstance(self.divergence_factor, (int, float))
                                                   and math.isfinite(self.divergence_factor)
                                                   and self.divergence_factor >= 2),
                "train", "divergence_factor", "a number >= 2 (the bound is this multiple of the loss of a uniform "
                "guess, ln V) or null", self.divergence_factor)
        require(self.max_time_s is None or (isinstance(self.max_time_s, (int, float)) and not isinstance(self.max_time_s, bool)
                                            and math.isfinite(self.max_time_s) and self.max_time_s > 0),
                "train", "max_time_s", "a positive, finite number of seconds or null (no limit)", self.max_time_s)
        require(self.save_every_s is None or (isinstance(self.save_every_s, (int, float))
                                              and not isinstance(self.save_every_s, bool)
                                              and math.isfinite(self.save_every_s) and self.save_every_s > 0),
                "train", "save_every_s", "a positive number of seconds or null", self.save_every_s)
        require_choice(self.checkpoint_metric, ("loss", "bleu"), "train", "checkpoint_metric")
        require_choice(self.accelerator, ACCELERATORS, "train", "accelerator")
        require(_devices_ok(self.devices), "train", "devices", "an integer >= 1 (or -1: all), 'auto', a list of "
                "device indices or a string of them ('0,1')", self.devices)
        require_choice(self.precision, PRECISIONS, "train", "precision")
        require_choice(self.step, STEP_FORMS, "train", "step")
        require(not (self.step != "eager" and self.precision == "16-mixed"), "train", "step",
                "eager with precision 16-mixed (a fused optimizer unscales fp16 gradients itself, after the "
                "clipping; bf16-mixed needs no scaler)", self.step)
        require_non_negative("train", early_stop_min_delta=self.early_stop_min_delta)
        require_choice(self.average, ("none", "best", "last"), "train", "average")
        require(isinstance(self.average_window, (int, float)) and 0 < self.average_window <= 1, "train",
                "average_window", "a share of training in (0, 1]", self.average_window)
        require_at_least(self.keep, 1, "train", "keep")
        require(self.ema is None or (isinstance(self.ema, (int, float)) and 0 < self.ema < 1), "train", "ema",
                "a decay between 0 and 1 (e.g. 0.999) or null", self.ema)
        for name in self.loggers:
            require_choice(name, LOGGERS, "train", "loggers")
        require_at_least(self.num_nodes, 1, "train", "num_nodes")


MAX_COUNT = 10**9  # the declared range of step, epoch and token counts (a larger one is a typo)
MAX_SEED = 2**32 - 1  # seeds are 32-bit (numpy's and Lightning's seed_everything's range)


@dataclass(frozen=True)
class EvalSettings:
    """What to decode after training."""

    split: str = "test"  # split decoded and scored
    strategies: tuple = ({"name": "greedy"},)  # each {name: ..., options...}; none given: the decoder's own (greedy for an AT)
    max_tokens: int = 6000  # token budget of a test-decoding batch (validation in training batches by train.max_tokens)
    n_bootstrap: int = 1000  # resamples for BLEU confidence intervals and the paired significance tests
    significance: str = "bs"  # paired test against the AT baseline: "bs" bootstrap resampling (Koehn 2004)
    # or "ar" approximate randomisation (Riezler & Maxwell 2005); Holm-corrected per task
    compound_split: bool = False  # tokenised BLEU splits hyphenated compounds (##AT##), as WMT en-de papers
    probe_sentences: int = 100  # test sentences the injected-error probe decodes twice per system (0: off)
    extra_tests: tuple[str, ...] = ()  # further test splits scored beside `split` (parallel task: file stems,
    # e.g. [test2017]); results in extra_tests.csv and the report's "Other test sets"

    def __post_init__(self) -> None:
        require_choice(self.significance, ("bs", "ar"), "eval", "significance")
        require_at_least(self.max_tokens, 1, "eval", "max_tokens")
        require_at_least(self.probe_sentences, 0, "eval", "probe_sentences")
        require_at_least(self.n_bootstrap, 1, "eval", "n_bootstrap")


@dataclass(frozen=True)
class DistillSettings:
    """Sequence-level knowledge distillation (Kim & Rush 2016) from a teacher run."""

    teacher: str  # the AT teacher: its run directory, a checkpoint file or an export (`atnat export`)
    targets: bool = True  # train on the teacher's outputs; false: train on the references (the teacher then
    # only serves train.init_from: teacher and npd re-ranking: the no-distillation control of a grid)
    strategy: dict | str = field(default_factory=lambda: {"name": "beam", "beam_size": 5})  # teacher decoding


@dataclass(frozen=True)
class RunConfig:
    """One training run: a task, a decoder, sizes, and how to train and evaluate."""

    name: str  # the run's name (atnat train: its folder runs/<name> unless output_dir or --output-dir says; refused in a grid)
    task: dict | str  # {name: ..., **options}, or a bare task name
    decoder: dict | str  # {name: ..., **options}, or a bare decoder name
    model: dict = field(default_factory=dict)  # sizes (the model: section)
    loss: dict = field(default_factory=dict)  # loss weights (the loss: section)
    optim: dict = field(default_factory=dict)  # the optimizer and its schedule (the optim: section)
    train: TrainSettings = TrainSettings()  # how training goes (the train: section)
    eval: EvalSettings = EvalSettings()  # what is decoded and scored after training (the eval: section)
    distill: DistillSettings | None = None  # a student's teacher and how it distils (the distill: section)
    seed: int = 1  # the training seed (0 .. 2^32-1); a grid sets it per cell from seeds: (refused in a grid)
    output_dir: str = ""  # atnat train's run folder (refused in a grid: cells go under --results)
    plugins: tuple[str, ...] = ()  # modules to import first (they register decoders, strategies, metrics,
    # tasks); installed packages' entry points need no mention (experiments/config/plugins.py)

    @property
    def task_name(self) -> str:
        return named(self.task, "task")[0]

    @property
    def decoder_name(self) -> str:
        return named(self.decoder, "decoder")[0]

    def strategy_specs(self) -> list[tuple[str, dict]]:
        return [named(s, f"eval.strategies[{i}]") for i, s in enumerate(self.eval.strategies)]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def validate(cfg: RunConfig, where: str) -> RunConfig:
    """Instantiate every named part once so a mistake fails before training starts; returns cfg
    with every option value converted to its declared type (see `checked`)."""
    try:
        require_between(cfg.seed, 0, MAX_SEED, where, "seed")
    except AtnatError as err:
        raise ConfigError(str(err)) from None
    task_name, task_opts = named(cfg.task, f"{where}: task")
    task_cls = _lookup(TASKS, task_name, f"{where}: task.name")
    task_opts = checked(task_cls.Options, task_opts, f"{where}: task ({task_name})")
    make(task_cls.Options, task_opts, f"{where}: task ({task_name})")
    splits = getattr(task_cls, "splits", SPLITS)
    if cfg.eval.split not in splits:
        raise ConfigError(f"{where}: eval.split must be one of {', '.join(splits)} (task {task_name}), got "
                          f"{cfg.eval.split!r}" + (" (further test sets: eval.extra_tests)" if cfg.eval.split != "valid"
                                                   else ""))
    dec_name, dec_opts = named(cfg.decoder, f"{where}: decoder")
    dec_cls = _lookup(DECODERS, dec_name, f"{where}: decoder.name")
    dec_opts = checked(dec_cls.Options, dec_opts, f"{where}: decoder ({dec_name})")
    dec_options = make(dec_cls.Options, dec_opts, f"{where}: decoder ({dec_name})")
    sections = {key: checked(cls, getattr(cfg, key), f"{where}: {key}")
                for key, cls in (("model", ModelConfig), ("loss", LossConfig), ("optim", OptimConfig))}
    built = {key: make(cls, sections[key], f"{where}: {key}")
             for key, cls in (("model", ModelConfig), ("loss", LossConfig), ("optim", OptimConfig))}
    problem = guided_attention_problem(built["loss"], built["model"])
    if problem:
        raise ConfigError(f"{where}: {problem}")
    if cfg.train.precision in ("bf16-true", "16-true") and "step" in getattr(dec_cls, "capabilities", ()):
        raise ConfigError(f"{where}: train.precision {cfg.train.precision}: an autoregressive decoder's search keeps "
                          "its scores in float32, which a model held in half precision cannot feed (its validation "
                          "decode fails after the first steps); use bf16-mixed or 16-mixed")
    if cfg.train.init_from == "teacher" and cfg.distill is None:
        raise ConfigError(f"{where}: train.init_from: teacher needs a teacher (distill.teacher, or a grid cell's "
                          "teacher key)")
    distill = cfg.distill
    if distill is not None:
        name, opts = named(distill.strategy, f"{where}: distill.strategy")
        opts = checked(_lookup(STRATEGIES, name, f"{where}: distill.strategy.name"), opts, f"{where}: distill.strategy")
        make(STRATEGIES.get(name), opts, f"{where}: distill.strategy")
        distill = dataclasses.replace(distill, strategy=_spec(distill.strategy, name, opts))
    strategies = []
    for i, (name, opts) in enumerate(cfg.strategy_specs()):
        strat_cls = _lookup(STRATEGIES, name, f"{where}: eval.strategies[{i}].name")
        opts = checked(strat_cls, opts, f"{where}: eval.strategies[{i}] ({name})")
        strategy = make(strat_cls, opts, f"{where}: eval.strategies[{i}] ({name})")
        strategies.append(_spec(cfg.eval.strategies[i], name, opts))
        problem = compatibility_problem(dec_cls, dec_options, strategy)  # the one check, also at decode time
        if problem:
            raise ConfigError(f"{where}: eval.strategies[{i}] ({name}): {problem}")
        if strategy.uses_teacher and cfg.distill is None:
            raise ConfigError(f"{where}: eval.strategies[{i}] ({name}) runs an AT teacher beside the decoder (npd "
                              "re-ranks with it, speculative drafts for it): give the run a teacher (grid: teacher: "
                              "CELL; a run: distill.teacher)")
    try:  # the files the task reads, checked now, not when the cell starts
        task_cls(make(task_cls.Options, task_opts, f"{where}: task ({task_name})"), cache_dir=CACHE_DIR).check_files()
    except ConfigError:
        raise
    except AtnatError as err:
        raise ConfigError(f"{where}: {err}") from None
    for name in cfg.eval.extra_tests:  # read now, not after hours of training
        try:
            path_part(name, "a name")  # it names the run's files references@NAME.txt and hyps/LABEL@NAME.txt
            task_cls(make(task_cls.Options, task_opts, f"{where}: task ({task_name})"), cache_dir=CACHE_DIR).extra_split(name)
        except AtnatError as err:
            raise ConfigError(f"{where}: eval.extra_tests: {err}") from None
    labels: dict[str, int] = {}
    for i, spec in enumerate(strategies):
        label = build_strategy(spec)[0]
        try:  # a label names the system's output files (hyps/<label>.txt)
            path_part(label, f"{where}: eval.strategies[{i}]: its label")
        except AtnatError as err:
            raise ConfigError(str(err)) from None
        if label in labels:
            j = labels[label]
            raise ConfigError(f"{where}: eval.strategies[{j}] ({json_text(strategies[j])}) and eval.strategies[{i}] "
                              f"({json_text(spec)}) are the same system (label {label!r}): their hypotheses and "
                              "numbers would overwrite each other; drop one or change an option")
        labels[label] = i
    return dataclasses.replace(
        cfg, task=_spec(cfg.task, task_name, task_opts), decoder=_spec(cfg.decoder, dec_name, dec_opts),
        **sections, distill=distill, eval=dataclasses.replace(cfg.eval, strategies=tuple(strategies)))


def json_text(value: Any) -> str:
    return json.dumps(value, default=str)


def _spec(section: Any, name: str, opts: dict) -> Any:
    """A `{name: x, **options}` section with its checked options (a bare name stays a name)."""
    return section if isinstance(section, str) else {"name": name, **opts}


def _lookup(registry, name: str, where: str):
    try:
        return registry.get(name)
    except AtnatError as err:
        raise ConfigError(f"{where}: {err}") from None


def teacher_problem(student: RunConfig, teacher: RunConfig) -> str | None:
    """Why `teacher`'s model cannot serve `student` (None if it can): its decoder cannot run the student's
    distill.strategy, or a strategy of the student's that runs a teacher (npd, speculative) needs an AT.
    Asked when a grid is read, before the teacher trains for hours."""
    dec_cls = DECODERS.get(teacher.decoder_name)
    opts = {k: v for k, v in teacher.decoder.items() if k != "name"} if isinstance(teacher.decoder, dict) else {}
    dec_options = build_config(dec_cls.Options, opts)
    if student.distill is not None and student.distill.targets:
        label, strategy = build_strategy(student.distill.strategy)
        problem = compatibility_problem(dec_cls, dec_options, strategy)
        if problem:
            return f"distill.strategy {label} cannot decode with the teacher: {problem}"
    for spec in student.eval.strategies:
        label, strategy = build_strategy(spec)
        if strategy.uses_teacher and "step" not in dec_cls.capabilities:
            return (f"eval strategy {label} runs its teacher as an AT (re-ranking or verifying), but the teacher's "
                    f"decoder {teacher.decoder_name!r} is not autoregressive")
    return None


def default_strategy(decoder) -> dict:
    """The strategy a run evaluates with when its config names none: its decoder's validation strategy
    (greedy for an AT, ctc for CTC, dag-lookahead for DA-Transformer), else greedy where the decoder
    section cannot be read (its error comes from the check that reads it)."""
    try:
        name, opts = named(decoder, "decoder")
        dec_cls = DECODERS.get(name)
        options = make(dec_cls.Options, opts, "decoder")
    except (AtnatError, KeyError, TypeError, ValueError):
        return {"name": "greedy"}
    return dict(dec_cls.validation_strategy(options))  # a decoder with no default says so (Decoder.validation_strategy)


def build_strategy(spec) -> tuple[str, Any]:
    """`{name: beam, beam_size: 5}` (or a bare name) -> (its label, e.g. "beam5", the strategy). Strategies are
    frozen, so each spec is built once per process and the same object returned after."""
    try:  # the class registered under the name now (a plugin re-registered is another class)
        key = (STRATEGIES.get(named(spec, "strategy")[0]), json.dumps(spec, sort_keys=True))
    except TypeError:  # a value JSON cannot write: built each time
        return _build_strategy(spec)
    if key not in _STRATEGIES_BUILT:
        _STRATEGIES_BUILT[key] = _build_strategy(spec)
    return _STRATEGIES_BUILT[key]


_STRATEGIES_BUILT: dict[tuple, tuple[str, Any]] = {}


def _build_strategy(spec) -> tuple[str, Any]:
    name, opts = named(spec, "strategy")
    strategy = make(STRATEGIES.get(name), opts, f"strategy ({name})")
    return strategy.label, strategy


def extra_test_split(cfg: RunConfig, name: str) -> tuple[list[str], list[str]]:
    """(sources, targets) of one of the run's eval.extra_tests."""
    task_name, opts = named(cfg.task, "task")
    task_cls = TASKS.get(task_name)
    return task_cls(make(task_cls.Options, opts, f"task ({task_name})"), cache_dir=CACHE_DIR / "spm").extra_split(name)


def task_of(cfg: RunConfig):
    """The run's task, not loaded (its options checked; nothing read)."""
    name, opts = named(cfg.task, "task")
    task_cls = TASKS.get(name)
    return task_cls(make(task_cls.Options, opts, f"task ({name})"), cache_dir=CACHE_DIR / "spm")


def load_task(cfg: RunConfig) -> TaskData:
    """The run's task, loaded (sentences, tokenizer; a sentencepiece model is trained once and cached)."""
    return task_of(cfg).load()


def run_config_from_dict(data: Any, where: str, *, recorded: bool = False) -> RunConfig:
    """A run's config from its parsed YAML or JSON. `recorded`: a record read back from a results folder
    (a run's config.json), whose `plugins:` are never imported (nothing read back runs code): the names
    must be among the plugins this process already loaded from the user's own config or --plugins."""
    data = dict(check_keys(RunConfig, data, where))
    plugins = data.get("plugins") or ()
    if not isinstance(plugins, (list, tuple)) or not all(isinstance(p, str) for p in plugins):
        raise ConfigError(f"{where}: plugins: expected a list of module names, got {plugins!r}")
    if recorded:
        missing = [p for p in plugins if p not in sys.modules]
        if missing:
            raise ConfigError(f"{where}: the run was made with plugins {', '.join(missing)}, which a record read back "
                              "does not import; name them in your config's plugins: or with --plugins")
    else:
        load_plugins(plugins, f"{where}: plugins")  # before any name is looked up
    for key in ("name", "task", "decoder"):
        if key not in data:
            raise ConfigError(f"{where}: missing required key {key!r}")
    data["train"] = make(TrainSettings, data.get("train"), f"{where}: train")
    ev = dict(check_keys(EvalSettings, data.get("eval"), f"{where}: eval"))
    if "strategies" in ev:
        if not isinstance(ev["strategies"], list) or not ev["strategies"]:
            raise ConfigError(f"{where}: eval.strategies must be a non-empty list")
        ev["strategies"] = tuple(ev["strategies"])
    else:  # the decoder's own (greedy drives an AT only); a decoder that cannot be built is refused below
        try:
            ev["strategies"] = (default_strategy(data["decoder"]),)
        except AtnatError as err:
            raise ConfigError(f"{where}: no eval.strategies given, and {err}; or name eval.strategies") from None
    data["eval"] = make(EvalSettings, ev, f"{where}: eval")
    if data.get("distill") is not None:
        if isinstance(data["distill"], dict) and data["distill"].get("teacher") is None:
            raise ConfigError(f"{where}: distill: no teacher to distil from: give this cell one (grid: teacher: CELL, "
                              "with distill: in that cell rather than in base:; a run: distill.teacher: RUN)")
        data["distill"] = make(DistillSettings, data["distill"], f"{where}: distill")
    for key in ("model", "loss", "optim"):
        if data.get(key) is None:
            data[key] = {}
        elif not isinstance(data[key], dict):
            raise ConfigError(f"{where}: {key}: expected a mapping, got {data[key]!r}")
    try:
        cfg = RunConfig(**checked(RunConfig, data, where, section=False))
    except TypeError as err:
        raise ConfigError(f"{where}: {err}") from None
    return validate(cfg, where)


def load_yaml(path: str | Path) -> Any:
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path} is a folder; give a YAML file (a grid file, or a run's config)")
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        text = read_utf8(path, "")
    except AtnatError as err:
        raise ConfigError(str(err)) from None
    try:
        return yaml.load(text, Loader=ConfigLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None


class ConfigLoader(yaml.SafeLoader):
    """YAML's safe loader, with YAML 1.2's plain scalars and a key given twice refused. PyYAML follows
    YAML 1.1, where `no`, `off`, `yes` and `on` are booleans (a language code `no` became false), `1:30` is
    a base-60 number (90) and `017` an octal one (15): here only true/false are booleans, numbers are
    decimal (or 0x hex), and everything else (a date too) stays text. A repeated key (plain YAML keeps the last one
    silently, and with it drops what the first one set) is an error."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (list, dict)):
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark, "a key must be a name, not a list or a mapping",
                    key_node.start_mark)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping", node.start_mark, f"the key {key!r} is given twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


_YAML_11 = {"tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:timestamp"}
ConfigLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _YAML_11]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
ConfigLoader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                   list("tTfF"))
ConfigLoader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?(?:0|[1-9][0-9_]*)|0x[0-9a-fA-F_]+)$"),
                                   list("-+0123456789"))
ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:\.[0-9][0-9_]*|(?:0|[1-9][0-9_]*)(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?"
               r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."))


def load_run_config(path: str | Path, overrides: dict | None = None) -> RunConfig:
    data = load_yaml(path)
    if isinstance(data, dict):
        for key in ("task", "decoder"):  # `decoder: ctc` is `decoder: {name: ctc}`: an override adds to it
            if isinstance(data.get(key), str) and isinstance((overrides or {}).get(key), dict):
                data = {**data, key: {"name": data[key]}}
        data = deep_update(data, overrides or {})
    return run_config_from_dict(data, str(path))


def deep_update(base: dict, upd: dict) -> dict:
    out = dict(base)
    for k, v in upd.items():
        out[k] = deep_update(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def parse_override(text: str) -> dict:
    """`train.max_steps=100` -> {"train": {"max_steps": 100}} (value parsed as YAML)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected KEY.PATH=VALUE")
    key, value = text.split("=", 1)
    out: dict = {}
    cur = out
    parts = key.split(".")
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
    cur[parts[-1]] = yaml_value(value, f"override {text!r}")
    return out


def yaml_value(text: str, what: str) -> Any:
    """A command-line value read as YAML (plain data only: a tag such as !!python/... is refused)."""
    try:
        return yaml.load(text, Loader=ConfigLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as err:
        problem = " ".join(str(getattr(err, "problem", None) or err).split())
        raise ConfigError(f"{what}: not a plain YAML value ({problem})") from None
