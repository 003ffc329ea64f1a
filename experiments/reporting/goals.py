"""Goals a grid sets itself, checked against its results and stated in the report as met or missed.

In a grid file::

    goals:
      - {system: en-de-at / beam5, at_least: 30}                         # BLEU unless `metric` says
      - {system: en-de-cmlm-kd / mask-predict-10-lb3, within: 4, of: en-de-at / beam5}
      - {goal: best single-pass NAT within 8 BLEU of AT beam 5,          # the best of several systems
         system: [en-de-nat-kd / parallel-lb3, en-de-ctc-glat-kd / ctc], within: 8, of: en-de-at / beam5}

A system is `<family> / <strategy>` as the report names it (family = cell name without the seed);
with several seeds its mean is compared. `at_least` / `at_most` compare with a number, `within`
with another system (value >= that system's - within). A goal whose system did not finish is
"not measured", never met. Why a goal was missed is the authors' to say: a hand-written
`notes.md` in the results folder is shown in the report under its own heading.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from atnat.core.errors import AtnatError
from atnat.experiments.config.run import ConfigError
from atnat.experiments.reporting.aggregate import interval, seeds_alone, seeds_of
from atnat.experiments.reporting.names import lossy_mark
from atnat.experiments.reporting.ranking import paired

GOAL_KEYS = ("goal", "system", "metric", "at_least", "at_most", "within", "of")


@dataclass(frozen=True)
class Goal:
    systems: tuple[str, ...]  # "<family> / <strategy>"; the best of them by `metric` is judged
    metric: str = "bleu"
    at_least: float | None = None
    at_most: float | None = None
    within: float | None = None
    of: str | None = None
    text: str = ""

    def describe(self) -> str:
        if self.text:
            return self.text
        who = self.systems[0] if len(self.systems) == 1 else "best of " + ", ".join(self.systems)
        if self.within is not None:
            return f"{who}: {self.metric} within {self.within:g} of {self.of}"
        bound = f">= {self.at_least:g}" if self.at_least is not None else f"<= {self.at_most:g}"
        return f"{who}: {self.metric} {bound}"


def parse_goals(raw, where: str) -> list[Goal]:
    """The grid's `goals:` list -> Goals; one ConfigError naming the goal and the key at fault."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: goals must be a list of mappings")
    goals = []
    for i, item in enumerate(raw):
        at = f"{where}: goals[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f"{at}: a goal is a mapping with keys {', '.join(GOAL_KEYS)}")
        unknown = [k for k in item if k not in GOAL_KEYS]
        if unknown:
            raise ConfigError(f"{at}: unknown key {unknown[0]!r}; valid keys: {', '.join(GOAL_KEYS)}")
        systems = item.get("system")
        systems = [systems] if isinstance(systems, str) else systems
        if not systems or not all(isinstance(s, str) and " / " in s for s in systems):
            raise ConfigError(f"{at}.system: expected '<family> / <strategy>' or a list of them, got {systems!r}")
        bounds = [k for k in ("at_least", "at_most", "within") if item.get(k) is not None]
        if len(bounds) != 1:
            raise ConfigError(f"{at}: give exactly one of at_least, at_most, within (got {bounds or 'none'})")
        for key in bounds:
            if isinstance(item[key], bool) or not isinstance(item[key], (int, float)) or not math.isfinite(item[key]):
                raise ConfigError(f"{at}.{key}: expected a finite number, got {item[key]!r}")
        if ("within" in bounds) != isinstance(item.get("of"), str):
            raise ConfigError(f"{at}: `within` needs `of: <family> / <strategy>` (and `of` needs `within`)")
        metric = str(item.get("metric", "bleu"))
        known = numeric_columns()
        if metric not in known:
            raise ConfigError(f"{at}.metric: {metric!r} is no numeric column of results.csv (e.g. "
                              f"{', '.join(known[:8])}; experiments/evaluation/schema.py lists them all)")
        goals.append(Goal(tuple(systems), metric, item.get("at_least"),
                          item.get("at_most"), item.get("within"), item.get("of"), str(item.get("goal", ""))))
    return goals


def numeric_columns() -> list[str]:
    """The results.csv columns a goal may judge (registered metrics' included)."""
    from atnat.experiments.evaluation.columns import columns  # lazy: the metric registry

    return [c.name for c in columns() if c.kind == "number"]


def goal_pairs(goals: list[Goal]) -> list[tuple[str, str]]:
    """(system, of) of every goal judged against another system: the pairs ranking.csv compares."""
    return list(dict.fromkeys((s, g.of) for g in goals if g.of is not None for s in g.systems))


def check_goals(goals: list[Goal], aggregated: pd.DataFrame, ranking: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per goal: the system judged, its value, the target, the speed-up over AT greedy,
    `met` / `missed` / `not measured` (on the means), and how far past the target it lies with an
    interval: `Over target` (positive: on the goal's side), `Over low` / `Over high` and
    `Interval` saying what they span - for a goal against another system the paired 95% interval of
    their difference (ranking.csv; then Value and Target are both means over the seeds it pairs),
    else the 95% interval of the system's mean (aggregate.interval) - and `Beyond noise` (yes / no:
    whether that interval excludes 0). The best of m systems is judged among those with a result; a
    miss while some of them have none is `not measured`, the row naming them. Picking the best of m
    noisy values favours a lucky one, so its intervals are simultaneous over the m (Bonferroni: each
    at 1 - 0.05/m, `level`), and a miss is beyond noise only when every one of the m misses beyond
    noise. `aggregated` has one row per (family, strategy), seeds averaged."""
    named = aggregated.assign(system=aggregated["family"] + " / " + aggregated["strategy"].astype(str))
    values = named.set_index("system")
    rows = []
    for goal in goals:
        if goal.metric not in named:
            raise AtnatError(f"goal {goal.describe()!r}: results have no column {goal.metric!r}")
        present = [s for s in goal.systems if s in values.index and pd.notna(values.at[s, goal.metric])]
        row = {"Goal": goal.describe(), "System": "", "Value": float("nan"), "Target": float("nan"),
               "Speed-up vs AT greedy": float("nan"), "Result": "not measured", "Over target": float("nan"),
               "Over low": float("nan"), "Over high": float("nan"), "Interval": "", "Beyond noise": ""}
        target = goal.at_least if goal.at_least is not None else goal.at_most
        if goal.of is not None:
            ref = values.at[goal.of, goal.metric] if goal.of in values.index else float("nan")
            target = ref - goal.within if pd.notna(ref) else float("nan")
        if present and target is not None and pd.notna(target):
            best = max(present, key=lambda s: values.at[s, goal.metric] * (-1 if goal.at_most is not None else 1))
            value = float(values.at[best, goal.metric])
            met = value <= target if goal.at_most is not None else value >= target
            speed = values.at[best, "speedup_vs_at"] if "speedup_vs_at" in values else float("nan")
            row |= {"System": best, "Value": value, "Target": float(target), "Speed-up vs AT greedy": speed,
                    "Result": "met" if met else "missed"}
            row |= _over_target(goal, best, value, float(target), values.loc[best], ranking)
            if "Paired value" in row:  # a goal against another system: both sides on the seeds paired
                row["Value"], row["Target"] = row.pop("Paired value"), row.pop("Paired target")
                row["Result"] = "met" if row["Over target"] >= 0 else "missed"
            if row["Result"] == "missed" and row["Beyond noise"] == "yes" and len(present) > 1:
                others = [_over_target(goal, s, float(values.at[s, goal.metric]), float(target), values.loc[s],
                                       ranking) for s in present if s != best]
                if not all(o.get("Over high", float("nan")) < 0 for o in others):  # one of them may still meet it
                    row["Beyond noise"] = "no"
            lossy = lossy_mark(values.loc[best])
            if lossy:  # a speculative system is judged as what it claims to be: the AT's greedy output, faster
                row |= {"Result": "missed: not lossless", "System": best + lossy, "Beyond noise": ""}
            absent = [s for s in goal.systems if s not in present]
            if row["Result"] == "missed" and absent:  # one of those without a result might have met it
                row["Result"] = "not measured"
                row["System"] = f"{best} (no result for {', '.join(absent)})"
        else:
            missing = [s for s in (*goal.systems, *([goal.of] if goal.of else [])) if s not in values.index]
            row["System"] = "no result for " + ", ".join(missing) if missing else "no value"
        rows.append(row)
    return pd.DataFrame(rows)


def level_for(goal: Goal) -> float:
    """The confidence of each of a goal's intervals: 95%, or for the best of m systems 1 - 0.05/m
    (Bonferroni), so that the m intervals hold together at 95% and the choice of the best among
    them cannot make noise look like a result."""
    return 1 - 0.05 / len(goal.systems)


def _over_target(goal: Goal, system: str, value: float, target: float, row: pd.Series,
                 ranking: pd.DataFrame | None) -> dict:
    """How far `system` lies past the goal's target, signed so that positive meets it, with the
    interval of that margin (at level_for(goal)) and whether it excludes 0 (see check_goals)."""
    sign = -1.0 if goal.at_most is not None else 1.0
    over = sign * (value - target)
    level = level_for(goal)
    m = len(goal.systems)
    confidence = "95%" if m == 1 else f"{100 * level:.1f}% (simultaneous over {m} systems, Bonferroni)"
    pair = paired(ranking, system, goal.of, level) if goal.of is not None and goal.metric == "bleu" else None
    paired_sides = {}
    if goal.of is not None:
        if pair is None:
            return {"Over target": over, "Interval": "no paired interval"}
        # value - target = (system - of) + within, all on the seeds the difference pairs
        low, high, over = pair["low"] + goal.within, pair["high"] + goal.within, pair["diff"] + goal.within
        kind = f"paired {confidence} ({pair['n_seeds']} seed{'s' if pair['n_seeds'] != 1 else ''})"
        paired_sides = {"Paired value": float(pair["a"]), "Paired target": float(pair["b"] - goal.within)}
    else:
        low, high = interval(row, goal.metric, level)
        low, high = sorted((sign * (low - target), sign * (high - target)))
        k, n = seeds_of(row, goal.metric), int(row.get("n_seeds", 1) or 1)  # a speed may have fewer seeds timed
        alone = ", over the seeds alone" if seeds_alone(row, goal.metric) else ""  # no per-sentence interval to add
        of = (f"{k} of {n} seeds" if k < n else f"{n} seeds") + alone
        kind = f"{confidence} of the mean ({of})" if k > 1 else f"{confidence} (one seed{f', {k} of {n}' if k < n else ''})"
    if pd.isna(low) or pd.isna(high) or (low == high == over and not paired_sides):
        return {"Over target": over, "Interval": "none recorded", **paired_sides}
    return {"Over target": over, "Over low": low, "Over high": high, "Interval": kind,
            "Beyond noise": "yes" if low > 0 or high < 0 else "no", **paired_sides}
