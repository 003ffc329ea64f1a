"""Experiment grids: one YAML file -> named cells (variants x axes x seeds), validated up front.

```yaml
name: quickstart
base: {task: {name: copy}, decoder: {name: at}, train: {max_steps: 500}}   # shared RunConfig
cells:                                # named variants, each a partial RunConfig (+ teacher)
  at: {decoder: {name: at}}
  cmlm-kd: {decoder: {name: cmlm}, teacher: at}   # distilled from cell `at` (same axes, seed)
axes:                                 # dotted key -> values; cartesian product over axes
  task: {fertility: {name: fertility}, dialect: {name: dialect}}          # label -> value
zip: [[task, model.d_model]]          # axes that vary together instead of crossing
exclude: [{cell: cmlm-kd, task: dialect}]                                 # label matches
seeds: [1]
smoke: {train: {max_steps: 20}, speed: {repeats: 1}}   # merged in by `atnat run --smoke`
untimed: [at-fp32]                    # cells the timing phase never times (e.g. a precision control)
```
"""
from __future__ import annotations

import fnmatch
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atnat.core.errors import AtnatError
from atnat.core.options import build_config
from atnat.experiments.config.plugins import load_plugins
from atnat.experiments.config.report import ReportSettings
from atnat.experiments.config.run import (
    ConfigError,
    RunConfig,
    build_strategy,
    checked,
    deep_update,
    load_yaml,
    make,
    run_config_from_dict,
    teacher_problem,
    unknown_key,
)
from atnat.experiments.config.speed import SpeedSettings
from atnat.experiments.evaluation.baseline import autoregressive, is_baseline_cell, task_of
from atnat.experiments.evaluation.metrics.row import check_metric_plugins
from atnat.experiments.files import path_part
from atnat.experiments.reporting.goals import parse_goals
from atnat.models.sizes import ModelConfig

GRID_KEYS = {  # every key of a grid file, with what it means (the reference in experiments/grids/REFERENCE.md)
    "name": "the grid's name: its results go to <results>/<name>/ (default: the file's name)",
    "description": "one line saying what the grid compares (shown in the report)",
    "base": "the run config every cell starts from (sections task, decoder, model, loss, optim, train, eval, distill)",
    "cells": "cell name -> the settings that differ from base (a partial run config), plus `teacher: CELL` for a "
             "student distilled from that cell (same axes and seed; not beside distill.teacher); no name:, seed: "
             "or output_dir (the grid sets them), nor a key an axis varies",
    "axes": "dotted key -> values (a list, or label -> value): every cell runs once per combination (not name, "
            "seed or output_dir)",
    "zip": "lists of axes that advance together instead of crossing",
    "exclude": "label mappings ({task: en-fr, cell: at-fp32, seed: 2}): combinations left out",
    "seeds": "the training seeds every cell runs with (default [1])",
    "smoke": "settings merged into every cell by `atnat run --smoke` (tiny sizes: a check in minutes)",
    "speed": "how the timing phase measures speed (the speed: section below)",
    "goals": "what the grid sets out to show, judged in the report (reporting/goals.py)",
    "compare": "[system, system] pairs the report compares with paired intervals on every test set",
    "baseline": "the cell every comparison is against (default: the plain AT cell)",
    "plugins": "modules to import first (they register decoders, strategies, metrics, tasks); imported "
               "whenever the grid is read, --dry-run and status included",
    "equivalence_margin": "±BLEU inside which a difference's whole interval counts as equivalent (default 1)",
    "report": "what the report draws (the report: section below)",
    "untimed": "cells the timing phase never times (precision controls: their BLEU is the question)",
}


@dataclass
class Cell:
    """One training run of a grid."""

    name: str  # unique: axis labels, variant, seed
    variant: str  # key in `cells`
    labels: dict[str, str]  # axis -> label of its value
    seed: int
    raw: dict  # the merged config (before the teacher path is filled in)
    teacher: str | None = None  # name of the teacher cell
    config: RunConfig | None = None


@dataclass
class Grid:
    name: str
    path: Path
    cells: list[Cell]
    speed: dict = field(default_factory=dict)
    description: str = ""
    goals: list = field(default_factory=list)  # the grid's `goals:` as written (reporting/goals.py)
    baseline: str | None = None  # the cell (name in `cells`) every comparison is against; None: the plain AT
    # cell (evaluation/baseline.py)
    equivalence_margin: float = 1.0  # ±BLEU: two systems are called equivalent only when the whole interval of
    # their difference lies inside it (reporting/judging.py)
    compare: list = field(default_factory=list)  # `compare:` [(system, against), ...]: pairs the report
    # compares on every test set with a paired interval (reporting/ranking.py)
    report: ReportSettings = field(default_factory=ReportSettings)  # `report:` what the run's report draws
    untimed: list = field(default_factory=list)  # `untimed:` cell names (of `cells`) the timing phase leaves out:
    # controls whose BLEU is the question, not their speed (`atnat run`, `atnat time` and `atnat status` skip them)
    source: bytes = b""  # the grid file's bytes as read: a run keeps them as grid-as-run.yaml (the file may be
    # edited while the run goes on)

    def by_name(self) -> dict[str, Cell]:
        return {c.name: c for c in self.cells}

    def timed_cells(self, cells: list[Cell] | None = None) -> list[Cell]:
        """`cells` (default: the grid's) less those of its `untimed:` variants."""
        return [c for c in (self.cells if cells is None else cells) if c.variant not in self.untimed]

    def never_timed(self, cells: list[Cell] | None = None) -> list[Cell]:
        """`cells` (default: the grid's) of its `untimed:` variants."""
        return [c for c in (self.cells if cells is None else cells) if c.variant in self.untimed]


def set_dotted(data: dict, key: str, value: Any) -> dict:
    """Copy of `data` with `a.b.c` set (dict values are merged into what is there)."""
    head, _, rest = key.partition(".")
    out = dict(data)
    if rest:
        out[head] = set_dotted(out.get(head) or {}, rest, value)
    elif isinstance(value, dict) and isinstance(out.get(head), dict):
        out[head] = deep_update(out[head], value)
    else:
        out[head] = value
    return out


def axis_values(key: str, values: Any, where: str) -> list[tuple[str, Any]]:
    """Axis values as (label, value): a mapping gives labels; a list uses names or str(value)."""
    if isinstance(values, dict):
        pairs = [(str(k), v) for k, v in values.items()]
    elif isinstance(values, list) and values:
        pairs = [(str(v["name"]) if isinstance(v, dict) and "name" in v else str(v), v) for v in values]
    else:
        raise ConfigError(f"{where}: axes.{key} must be a non-empty list or a label -> value mapping")
    for label, _ in pairs:  # a label is part of every cell's folder name
        checked_part(label, f"{where}: axes.{key}")
    return pairs


def checked_part(name, key: str) -> str:
    """path_part as a ConfigError (a grid file's name that would leave its results folder)."""
    try:
        return path_part(name, key)
    except AtnatError as err:
        raise ConfigError(str(err)) from None


def expand_axes(axes: dict, zips: list, where: str) -> list[dict[str, tuple[str, Any]]]:
    """All combinations {axis: (label, value)}; axes in one zip group advance together."""
    grouped, seen = [], set()
    if zips is not None and (not isinstance(zips, list) or not all(isinstance(g, list) for g in zips)):
        raise ConfigError(f"{where}: zip must be a list of axis groups, e.g. [[model.d_model, optim.lr]], got {zips!r}")
    for group in zips or []:
        for key in group:
            if key in seen:
                raise ConfigError(f"{where}: zip names axis {key!r} in two groups; an axis advances with one group")
            if key not in axes:
                raise ConfigError(f"{where}: zip names axis {key!r}, which is not in axes ({', '.join(axes)})")
        vals = [axis_values(k, axes[k], where) for k in group]
        if len({len(v) for v in vals}) != 1:
            raise ConfigError(f"{where}: zipped axes {group} have different numbers of values")
        grouped.append([dict(zip(group, combo)) for combo in zip(*vals)])
        seen.update(group)
    for key in axes:
        if key not in seen:
            grouped.append([{key: v} for v in axis_values(key, axes[key], where)])
    return [{k: v for part in combo for k, v in part.items()} for combo in itertools.product(*grouped)] or [{}]


def excluded(labels: dict[str, str], rules: list[dict]) -> bool:
    return any(all(str(labels.get(k)) == str(v) for k, v in rule.items()) for rule in rules or [])


def check_exclude(rules: Any, known: dict[str, list[str]], where: str) -> None:
    """exclude: a list of mappings whose keys are axes, `cell` or `seed` and whose values are their labels,
    cell names or seeds (`known`): a misspelt key or value matched nothing, so the rule excluded nothing,
    without a word."""
    keys = list(known)
    if rules is None:
        return
    if not isinstance(rules, list):
        raise ConfigError(f"{where}: exclude must be a list of mappings such as {{cell: NAME, seed: 2}}, got {rules!r}")
    for i, rule in enumerate(rules):
        if not isinstance(rule, dict) or not rule:
            raise ConfigError(f"{where}: exclude[{i}] must be a mapping such as {{cell: NAME, seed: 2}}, got {rule!r}")
        unknown = [k for k in rule if k not in keys]
        if unknown:
            raise ConfigError(f"{where}: exclude[{i}] names {unknown[0]!r}, which is no axis, 'cell' or 'seed' "
                              f"(valid: {', '.join(keys)})")
        for key, value in rule.items():
            if str(value) not in known[key] or isinstance(value, (list, dict)):
                raise ConfigError(f"{where}: exclude[{i}].{key}: {value!r} is none of its values (valid: "
                                  f"{', '.join(known[key])}), so the rule would exclude nothing")


def check_seeds(seeds: Any, where: str) -> list[int]:
    if seeds is None:
        return [1]
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                                            for s in seeds):
        raise ConfigError(f"{where}: seeds must be a non-empty list of integers >= 0, e.g. [1, 2, 3]; got {seeds!r}")
    return seeds


def load_grid(path: str | Path, *, smoke: bool = False, results_dir: Path | None = None) -> Grid:
    """Read, expand and validate a grid; `results_dir` is where teacher runs will live."""
    path = Path(path)
    source = path.read_bytes() if path.is_file() else b""
    data = load_yaml(path)
    where = str(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: a grid must be a mapping with keys {', '.join(GRID_KEYS)}")
    unknown = [k for k in data if k not in GRID_KEYS]
    if unknown:
        raise unknown_key(where, unknown[0], GRID_KEYS)
    name = checked_part(data.get("name") or path.stem, f"{where}: name")
    plugins = data.get("plugins") or []
    if not isinstance(plugins, list) or not all(isinstance(p, str) for p in plugins):
        raise ConfigError(f"{where}: plugins: expected a list of module names, got {plugins!r}")
    load_plugins(plugins, f"{where}: plugins")  # before any decoder, strategy, metric or task is looked up
    try:
        check_metric_plugins()  # now, not when the first cell is scored
    except AtnatError as err:
        raise ConfigError(f"{where}: {err}") from None
    variants = data.get("cells") or {"default": {}}
    if not isinstance(variants, dict):
        raise ConfigError(f"{where}: cells must map a cell name to its settings")
    for key in ("base", "smoke", "speed", "axes", "report"):  # each a mapping of settings
        if data.get(key) is not None and not isinstance(data[key], dict):
            raise ConfigError(f"{where}: {key}: expected a mapping of settings, got {data[key]!r}")
    if data.get("baseline") is not None and not isinstance(data["baseline"], str):
        raise ConfigError(f"{where}: baseline: expected a cell name, got {data['baseline']!r}")
    axes = data.get("axes") or {}
    sections = [("base", data.get("base") or {}), ("smoke", data.get("smoke") or {})]
    for variant, settings in variants.items():
        if not isinstance(variant, str):
            raise ConfigError(f"{where}: cells: a cell name must be text, got {variant!r}")
        if settings is not None and not isinstance(settings, dict):
            raise ConfigError(f"{where}: cells.{variant}: expected a mapping of settings (e.g. decoder: {{name: at}}), "
                              f"got {settings!r}")
        if (settings or {}).get("teacher") is not None and not isinstance(settings["teacher"], str):
            raise ConfigError(f"{where}: cells.{variant}.teacher: expected a cell name, got {settings['teacher']!r}")
        checked_part(variant, f"{where}: cells")
        sections.append((f"cells.{variant}", settings or {}))
        if isinstance(settings, dict) and settings.get("teacher") is not None \
                and isinstance(settings.get("distill"), dict) and "teacher" in settings["distill"]:
            raise ConfigError(f"{where}: cells.{variant}: teacher: and distill.teacher both name a teacher; keep one "
                              "(teacher: CELL pairs each seed with that cell's run)")
    for part, section in sections:
        if not isinstance(section, dict):
            continue
        for key, why in (("output_dir", "a grid writes every cell under its results folder (--results DIR); set that "
                                        "instead"),
                         ("name", "a grid names each cell (axis labels, cell name, seed)"),
                         ("seed", "a grid sets each cell's seed from seeds:")):
            if key in section:
                raise ConfigError(f"{where}: {part}.{key}: {why}")
    for key in axes:
        if key.split(".")[0] in ("output_dir", "name", "seed"):
            raise ConfigError(f"{where}: axes.{key}: a grid sets each cell's {key.split('.')[0]} itself (seeds:, "
                              "--results, the cell names)")
        for variant, settings in variants.items():
            if isinstance(settings, dict) and has_dotted(settings, key):
                raise ConfigError(f"{where}: cells.{variant} sets {key}, which axes.{key} varies: the cell's value "
                                  "would replace every axis value; remove one")
    seeds = check_seeds(data.get("seeds"), where)
    check_exclude(data.get("exclude"), {**{key: [label for label, _ in axis_values(key, values, where)]
                                           for key, values in axes.items()},
                                        "cell": [str(v) for v in variants], "seed": [str(s) for s in seeds]}, where)
    base = data.get("base") or {}
    smoke_cfg = dict(data.get("smoke") or {}) if smoke else None
    speed = dict(data.get("speed") or {})
    if smoke_cfg and "speed" in smoke_cfg:
        speed.update(smoke_cfg.pop("speed") or {})
    runs_dir = (results_dir or Path("results") / name) / "runs"
    cells = []
    for combo in expand_axes(axes, data.get("zip"), where):
        for variant, settings in variants.items():
            for seed in seeds:
                labels = {k: lab for k, (lab, _) in combo.items()} | {"cell": variant, "seed": str(seed)}
                if excluded(labels, data.get("exclude")):
                    continue
                cells.append(make_cell(name, base, combo, variant, dict(settings or {}), seed, labels,
                                       smoke_cfg, f"{where}: cells.{variant}", plugins))
    if not cells and data.get("exclude"):  # a dry run and status would show an empty grid; `atnat run` had nothing to judge
        raise ConfigError(f"{where}: exclude leaves no cell of the grid: nothing would run (exclude: {data['exclude']!r})")
    named: dict[str, Cell] = {}
    for cell in cells:  # a name is a run folder: two cells sharing one would report one's numbers for both
        other = named.setdefault(cell.name, cell)
        if other is not cell:
            what = "the same seed twice in seeds" if other.labels == cell.labels else \
                f"{other.labels} and {cell.labels} (axis labels and cell names joined by '-' coincide)"
            raise ConfigError(f"{where}: two cells are both named {cell.name!r} (one run folder for both): {what}; "
                              "rename an axis label or a cell")
    speed = checked(SpeedSettings, speed, f"{where}: speed")  # the runner builds SpeedSettings(**speed)
    make(SpeedSettings, speed, f"{where}: speed")
    parse_goals(data.get("goals"), where)  # refused now, not after hours of training
    baseline = data.get("baseline")
    if baseline is not None and baseline not in variants:
        raise ConfigError(f"{where}: baseline: {baseline!r} is not a cell of this grid (cells: {', '.join(variants)})")
    margin = data.get("equivalence_margin", 1.0)
    if isinstance(margin, str):  # YAML reads 5e-1 (no dot) as text; every number field takes it
        try:
            margin = float(margin)
        except ValueError:
            pass
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 < margin < float("inf"):
        raise ConfigError(f"{where}: equivalence_margin must be a positive number of BLEU points, got {margin!r}")
    grid = Grid(name, path, cells, speed=speed, description=data.get("description", ""),
                goals=list(data.get("goals") or []), baseline=baseline, equivalence_margin=float(margin),
                compare=parse_compare(data.get("compare"), where),
                report=make(ReportSettings, data.get("report") or {}, f"{where}: report"), source=source)
    resolve_teachers(grid, runs_dir, where)
    grid.untimed = parse_untimed(data.get("untimed"), variants, grid.cells, baseline, where)  # needs their configs
    check_reference_at(grid, variants, where)
    check_goal_systems(grid, parse_goals(data.get("goals"), where), where)
    known = systems_of(grid)
    for i, pair in enumerate(grid.compare):
        for name in pair:
            if name not in known:
                raise ConfigError(f"{where}: compare[{i}]: no system {name!r} in this grid (systems: {', '.join(known)})")
    if not smoke and data.get("smoke"):  # smoke: checked too (a dry run promises every key), as --smoke reads it
        try:
            load_grid(path, smoke=True, results_dir=results_dir)
        except ConfigError as err:
            raise ConfigError(f"{err} (with the grid's smoke: settings, which --smoke applies)") from None
    return grid


def check_reference_at(grid: Grid, variants: dict, where: str) -> None:
    """speed.reference_at names an AT cell of the grid that the timing phase times (its greedy is the
    second speed reference of its task and seed)."""
    ref = grid.speed.get("reference_at")
    if ref is None:
        return
    if ref not in variants:
        raise ConfigError(f"{where}: speed.reference_at: {ref!r} is not a cell of this grid (cells: {', '.join(variants)})")
    if ref in grid.untimed:
        raise ConfigError(f"{where}: speed.reference_at: {ref!r} is listed in untimed: a speed reference must be timed")
    for cell in (c for c in grid.cells if c.variant == ref):
        if not autoregressive(cell.config.decoder_name):
            raise ConfigError(f"{where}: speed.reference_at: {ref!r} must be an AT cell (a decoder with the 'step' "
                              f"capability); its decoder is {cell.config.decoder_name!r}")
        if "greedy" not in [build_strategy(s)[0] for s in cell.config.eval.strategies]:
            raise ConfigError(f"{where}: speed.reference_at: {ref!r} must evaluate with greedy (speed-ups over it are "
                              "over its greedy)")


def parse_untimed(raw, variants: dict, cells: list[Cell], baseline: str | None, where: str) -> list[str]:
    """The grid's `untimed:` - a list of cell names of `cells:` whose cells are never timed - checked: each a
    cell of the grid, none a baseline (every speed-up of its task and seed is measured beside it)."""
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        raise ConfigError(f"{where}: untimed: expected a list of cell names (of `cells:`), got {raw!r}")
    for name in raw:
        if name not in variants:
            raise ConfigError(f"{where}: untimed: {name!r} is not a cell of this grid (cells: {', '.join(variants)})")
    bases = sorted({c.variant for c in cells if c.variant in raw and is_baseline_cell(c, baseline)})
    if bases:
        raise ConfigError(f"{where}: untimed: {', '.join(bases)} is its tasks' baseline (every speed-up is measured "
                          "beside it): the timing phase cannot leave it out")
    return list(dict.fromkeys(raw))


def parse_compare(raw, where: str) -> list[tuple[str, str]]:
    """The grid's `compare:` - a list of [system, against] pairs, each `<family> / <strategy>` - or
    one ConfigError naming the entry at fault."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: compare must be a list of [system, against] pairs")
    pairs = []
    for i, pair in enumerate(raw):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(s, str) and " / " in s for s in pair)):
            raise ConfigError(f"{where}: compare[{i}]: expected a pair [<family> / <strategy>, <family> / <strategy>], "
                              f"got {pair!r}")
        if pair[0] == pair[1]:
            raise ConfigError(f"{where}: compare[{i}]: a system compared with itself ({pair[0]!r})")
        pairs.append((pair[0], pair[1]))
    return pairs


def describe(cell: Cell) -> dict:
    """A cell as a row of the plan (`atnat run --dry-run`) and of results.csv: what it trains, on what."""
    cfg = cell.config
    loss, dec_opts = cfg.loss or {}, {k: v for k, v in cfg.decoder.items() if k != "name"} \
        if isinstance(cfg.decoder, dict) else {}
    family = cell.name[: -len(f"-s{cell.seed}")] if cell.name.endswith(f"-s{cell.seed}") else cell.name
    sizes = build_config(ModelConfig, cfg.model)
    return {"cell": cell.name, "family": family, "variant": cell.variant, "task": task_of(cell),
            "decoder": cfg.decoder_name, "autoregressive": autoregressive(cfg.decoder_name), "seed": cell.seed,
            "layers": f"{sizes.encoder_layers}+{sizes.decoder_layers}",
            "distilled": cfg.distill is not None and cfg.distill.targets,
            "guided_attention": float(loss.get("guided_attention_weight", 0) or 0) > 0,
            "options": ", ".join(f"{k}={v}" for k, v in dec_opts.items()), "teacher": cell.teacher or ""}


def systems_of(grid: Grid) -> list[str]:
    """Every system of the grid as goals and the report name it: `<family> / <strategy label>`."""
    out = []
    for cell in grid.cells:
        family = cell.name[: -len(f"-s{cell.seed}")] if cell.name.endswith(f"-s{cell.seed}") else cell.name
        out += [f"{family} / {build_strategy(spec)[0]}" for spec in cell.config.eval.strategies]
    return list(dict.fromkeys(out))


def check_goal_systems(grid: Grid, goals: list, where: str) -> None:
    """A goal naming a system the grid does not have is refused now (it would only ever be "not
    measured"), with the systems it has."""
    known = systems_of(grid)
    for i, goal in enumerate(goals):
        for name in (*goal.systems, *([goal.of] if goal.of else [])):
            if name not in known:
                raise ConfigError(f"{where}: goals[{i}]: no system {name!r} in this grid (systems: {', '.join(known)})")


def has_dotted(settings: dict, key: str) -> bool:
    """Whether a nested settings mapping sets the dotted key (train.max_steps)."""
    node: Any = settings
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def named_sections(settings: dict) -> dict:
    """`decoder: ctc` and `task: copy` (a bare name) as `{name: ...}`, so that an axis or `smoke:` setting one
    of their keys adds to them rather than being lost or losing the name."""
    return {k: {"name": v} if k in ("decoder", "task") and isinstance(v, str) else v for k, v in settings.items()}


def make_cell(grid_name, base, combo, variant, settings, seed, labels, smoke, where, plugins=()) -> Cell:
    teacher = settings.pop("teacher", None)
    # the cell over base (a cell's bare `decoder: ctc` replaces base's decoder), then the axes (never a key the
    # cell sets: refused above), then smoke; a bare name is read as {name: ...}, so later keys add to it
    raw = named_sections(deep_update(named_sections(base), settings))
    for key, (_, value) in combo.items():
        head = key.partition(".")[0]
        if "." in key and raw.get(head) is not None and not isinstance(raw[head], dict):
            raise ConfigError(f"{where}: {head} is {raw[head]!r}, not a section, so axes.{key} cannot set a key in it")
        raw = set_dotted(raw, key, value)
    if smoke:
        raw = deep_update(raw, named_sections(smoke))
    axis_part = "-".join(lab for k, lab in labels.items() if k not in ("cell", "seed"))
    name = "-".join(p for p in (axis_part, variant, f"s{seed}") if p)
    raw.update(name=name, seed=seed)
    if plugins:
        raw["plugins"] = list(dict.fromkeys([*plugins, *(raw.get("plugins") or [])]))
    return Cell(name, variant, labels, seed, raw, teacher)


def resolve_teachers(grid: Grid, runs_dir: Path, where: str) -> None:
    """Point each student at its teacher's run (same axes and seed) and validate every config."""
    by_key = {(c.variant, tuple(sorted((k, v) for k, v in c.labels.items() if k != "cell"))): c for c in grid.cells}
    for cell in grid.cells:
        if cell.teacher is not None:
            key = (cell.teacher, tuple(sorted((k, v) for k, v in cell.labels.items() if k != "cell")))
            if key not in by_key:
                raise ConfigError(f"{where}: cells.{cell.variant}.teacher names {cell.teacher!r}, but no cell "
                                  f"{cell.teacher!r} exists for {cell.name} (valid: "
                                  f"{', '.join(sorted({c.variant for c in grid.cells}))})")
            teacher = by_key[key]
            distill = dict(cell.raw.get("distill") or {})
            distill["teacher"] = str(runs_dir / teacher.name)
            cell.raw["distill"] = distill
            cell.teacher = teacher.name
        cell.raw.setdefault("output_dir", str(runs_dir / cell.name))
        cell.config = run_config_from_dict(cell.raw, f"{where}: cell {cell.name}")
    by_name = {c.name: c for c in grid.cells}
    for cell in grid.cells:  # now, not after the teacher has trained for hours
        problem = teacher_problem(cell.config, by_name[cell.teacher].config) if cell.teacher is not None else None
        if problem:
            raise ConfigError(f"{where}: cells.{cell.variant}: its teacher {cell.teacher}: {problem}")


def teacher_cycles(teacher_of: dict[str, str]) -> list[list[str]]:
    """Each cycle of `teacher_of` (cell -> its teacher, every one with a teacher among them), as [a, b, a],
    once each, in the order first met."""
    cycles, seen = [], set()
    for start in teacher_of:
        walk = [start]
        while walk[-1] not in walk[:-1] and walk[-1] not in seen:
            walk.append(teacher_of[walk[-1]])
        seen.update(walk)
        if walk.count(walk[-1]) == 2:  # came round to itself on this walk: a new cycle
            cycles.append(walk[walk.index(walk[-1]):])
    return cycles


def run_order(grid: Grid) -> list[Cell]:
    """Teachers before their students (stable otherwise)."""
    done, order = set(), []
    pending = list(grid.cells)
    while pending:
        ready = [c for c in pending if c.teacher is None or c.teacher in done]
        if not ready:
            cycles = teacher_cycles({c.name: c.teacher for c in pending})
            waiting = [c.name for c in pending if not any(c.name in cycle for cycle in cycles)]
            raise ConfigError(f"{grid.path}: teacher dependencies form {'a cycle' if len(cycles) == 1 else 'cycles'}: "
                              + "; ".join(" -> ".join(cycle) for cycle in cycles) + " (each learns from the next)"
                              + (f"; waiting on {'it' if len(cycles) == 1 else 'them'}: {', '.join(waiting)}"
                                 if waiting else ""))
        for c in ready:
            order.append(c)
            done.add(c.name)
        pending = [c for c in pending if c.name not in done]
    return order


def load_grid_into(path, results_root: Path, smoke: bool):
    """The validated grid whose cells write under `results_root/<grid name>[-smoke]`, and that folder."""
    out = results_root / (grid_name(path) + ("-smoke" if smoke else ""))
    return load_grid(path, smoke=smoke, results_dir=out), out  # read and validated once


def grid_name(path) -> str:
    """A grid file's `name` (default: the file's stem), checked as a folder name, without expanding the grid."""
    path = Path(path)
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a grid must be a mapping with keys {', '.join(GRID_KEYS)}")
    return checked_part(data.get("name") or path.stem, f"{path}: name")


def select_cells(cells: list[Cell], only: list[str] | None, path) -> list[Cell]:
    """The cells named by `--only` patterns: exact names or shell-style globs (`*-at-s1`, `en-de-*`);
    a pattern that matches no cell is an error naming the cells."""
    if not only:
        return cells
    unmatched = [p for p in only if not any(fnmatch.fnmatchcase(c.name, p) for c in cells)]
    if unmatched:
        raise AtnatError(f"{path}: --only {unmatched[0]!r} matches no cell (an exact name or a glob such as "
                         f"'*-at-s1'); cells: {', '.join(c.name for c in cells)}")
    return [c for c in cells if any(fnmatch.fnmatchcase(c.name, p) for p in only)]
