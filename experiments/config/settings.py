"""A run's full settings, recorded and compared: what `runs/<cell>/config.json` holds (every setting,
defaults filled in), which part the trained weights depend on, and what changed since a run recorded
its settings (experiments/training/train.py refuses such a resume; running/stale.py finds such cells)."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atnat.decoding.base import STRATEGIES
from atnat.experiments.config.run import ConfigError, RunConfig, json_text, make, named, run_config_from_dict
from atnat.experiments.data.tasks import TASKS
from atnat.models.decoders.base import DECODERS, LossConfig
from atnat.models.optim import OptimConfig
from atnat.models.sizes import ModelConfig

NOT_SETTINGS = ("name", "output_dir", "plugins")  # where a run lives and what is imported, not what it is
TRAIN_DOES_NOT_CHANGE = ("progress_bar", "loggers", "num_threads", "step", "save_every_s")  # train keys that change
# the weights no more than float rounding does (threads and step forms: tests/test_step_forms.py; a resume is exact)


def resolved(cfg: RunConfig) -> dict:
    """Every setting of a validated run with its defaults filled in (task, decoder and strategy
    options, model, loss, optim, train, eval, distill): what `runs/<cell>/config.json` records, so
    that a number can be read back to every setting that made it, even after a default changes."""

    def full(registry, section, where: str) -> dict:
        name, opts = named(section, where)
        cls = registry.get(name)
        return {"name": name, **_plain(dataclasses.asdict(make(getattr(cls, "Options", cls), opts, where)))}

    out = _plain(dataclasses.asdict(cfg))
    out["task"] = full(TASKS, cfg.task, "task")
    out["decoder"] = full(DECODERS, cfg.decoder, "decoder")
    for key, cls in (("model", ModelConfig), ("loss", LossConfig), ("optim", OptimConfig)):
        out[key] = _plain(dataclasses.asdict(make(cls, getattr(cfg, key), key)))
    out["eval"]["strategies"] = [full(STRATEGIES, s, "eval.strategies") for s in cfg.eval.strategies]
    if cfg.distill is not None:
        out["distill"]["strategy"] = full(STRATEGIES, cfg.distill.strategy, "distill.strategy")
    return out


def _plain(value: Any) -> Any:
    """JSON's view of a value (tuples -> lists), so a recorded config compares equal to a fresh one."""
    return json.loads(json.dumps(value, default=str))


def training_settings(settings: dict) -> dict:
    """The part of resolved settings the trained weights depend on (everything but eval, the
    run's name and folder, the train keys that change only speed or logging, the task's test-only keys,
    and distill.strategy when targets is false)."""
    out = {k: v for k, v in settings.items() if k not in NOT_SETTINGS + ("eval",)}
    out["train"] = {k: v for k, v in (settings.get("train") or {}).items() if k not in TRAIN_DOES_NOT_CHANGE}
    if isinstance(settings.get("task"), dict):
        only = test_only_keys(settings["task"])
        out["task"] = {k: v for k, v in settings["task"].items() if k not in only}
    if out.get("distill"):  # the teacher is known by its run's name: a results folder may move
        out["distill"] = {**out["distill"], "teacher": teacher_name(out["distill"]["teacher"])}
        if out["distill"].get("targets") is False:  # no distilled targets: the teacher's decoding is unused
            out["distill"].pop("strategy", None)
    return out


def evaluation_settings(settings: dict) -> dict:
    """The part of resolved settings only the scores depend on: eval, and the task's test-only keys."""
    task = settings.get("task") if isinstance(settings.get("task"), dict) else {}
    only = test_only_keys(task)
    return {"eval": settings.get("eval"), **({"task": {k: task[k] for k in only if k in task}} if only else {})}


def test_only_keys(task: dict) -> tuple[str, ...]:
    """The task options that choose only the test split (Task.test_only), not the training or validation data."""
    try:
        return tuple(getattr(TASKS.get(str(task.get("name"))), "test_only", ()))
    except Exception:  # noqa: BLE001 - an unknown task keeps every key a training setting
        return ()


def teacher_name(teacher: Any) -> str:
    """A teacher as far as a moved results folder keeps it: a run folder by its name, a checkpoint in a run by
    <run>/checkpoints/<file>, any other file by <folder>/<file> (two runs' best.ckpt are two teachers)."""
    path = Path(str(teacher))
    if path.parent.name == "checkpoints":
        return "/".join(path.parts[-3:])
    if path.suffix in (".ckpt", ".pt", ".safetensors") or path.is_file():
        return "/".join(path.parts[-2:])
    return path.name


def settings_hash(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def differences(old: Any, new: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted key, old value, new value) for every leaf that differs between two settings trees."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new), key=str):
            path = f"{prefix}.{key}" if prefix else str(key)
            out += differences(old.get(key, "(absent)"), new.get(key, "(absent)"), path)
        return out
    return [] if old == new else [(prefix, old, new)]


UNREADABLE = "config.json"  # the key of a change that is a record this atnat cannot read (its reason, not a value)


@dataclass(frozen=True)
class SettingsChange:
    """How a run's recorded settings differ from the ones asked for now."""

    training: list  # (key, recorded, now) of settings the weights depend on: the run is stale
    evaluation: list  # (key, recorded, now) under eval: the weights stand, the scores do not

    def __bool__(self) -> bool:
        return bool(self.training or self.evaluation)

    def describe(self, limit: int = 6) -> str:
        changes = self.training + self.evaluation
        text = "; ".join(f"config.json cannot be read as this atnat's settings: {a}" if k == UNREADABLE else
                         "{}: {} -> {}".format(k, *_pair(a, b)) for k, a, b in changes[:limit])  # (a reason: whole)
        return text + (f"; and {len(changes) - limit} more" if len(changes) > limit else "")


def _pair(a: Any, b: Any, width: int = 60) -> tuple[str, str]:
    """Two values as text, each cut to about `width` characters around where they first differ (a long
    list that only gained an item must show that item, not the same first 60 characters twice)."""
    x, y = json_text(a), json_text(b)
    if len(x) <= width and len(y) <= width:
        return x, y
    first = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
    start = max(0, first - width // 3)
    cut = lambda t: ("..." if start else "") + t[start:start + width - 3] + ("..." if len(t) > start + width - 3 else "")
    return cut(x), cut(y)


def recorded_settings(run_dir: Path) -> dict | None:
    """The settings recorded in `run_dir/config.json` as this atnat resolves them (a record written by
    an older atnat, or one holding only the keys given, gets today's defaults for the rest); None
    when the run has no record. A record this atnat cannot read is a ConfigError naming it."""
    path = Path(run_dir) / "config.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return resolved(run_config_from_dict(data, str(path), recorded=True))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ConfigError(f"{path}: the run's recorded settings are unreadable ({err}); move the run folder "
                          "aside to train it afresh") from None


def settings_change(run_dir: Path, cfg: RunConfig) -> SettingsChange:
    """What differs between the settings a run recorded and `cfg` (nothing when it recorded none)."""
    try:
        old = recorded_settings(run_dir)
    except ConfigError as err:  # e.g. a key this atnat no longer knows: the run cannot be trusted as is
        return SettingsChange([(UNREADABLE, str(err), "(this atnat's settings)")], [])
    if old is None:
        return SettingsChange([], [])
    new = resolved(cfg)
    return SettingsChange(differences(training_settings(old), training_settings(new)),
                          differences(evaluation_settings(old), evaluation_settings(new)))
