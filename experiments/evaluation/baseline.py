"""Which systems are autoregressive, and which one a task's comparisons are against: the one rule.

A decoder is autoregressive (AT) when it can be driven step by step: its registered class offers
the `step` capability (models/decoders/base.py) - whatever its name, so a plugin's `shallow-at` is
an AT. A task's baseline (speed-ups, paired tests) is, per seed, its plain AT cell: an AT decoder
with no options, not distilled, no guided attention - or the grid's own choice, `baseline: CELL`
(a cell name of the grid file, without axes and seed). Every module asks here, as it does which
cells are timed together: a task and seed, beside that seed's baseline (timing_group).
"""
from __future__ import annotations

import pandas as pd

from atnat.core.errors import AtnatError
from atnat.models.decoders.base import DECODERS


def autoregressive(decoder: str) -> bool:
    """True when the decoder registered under this name decodes step by step (an AT)."""
    try:
        return "step" in DECODERS.get(decoder).capabilities
    except AtnatError:  # a decoder no longer registered (a plugin not installed here): judge by its name
        return decoder == "at"


def plain_at(decoder: str, options: dict | str | None, distilled: bool, guided_attention: bool) -> bool:
    """An AT decoder with no options, trained on the references, without guided attention."""
    return autoregressive(decoder) and not options and not distilled and not guided_attention


def plain_at_config(cfg) -> bool:
    """`plain_at` of a RunConfig."""
    options = {k: v for k, v in cfg.decoder.items() if k != "name"} if isinstance(cfg.decoder, dict) else {}
    guided = bool(float((cfg.loss or {}).get("guided_attention_weight", 0) or 0))
    return plain_at(cfg.decoder_name, options, cfg.distill is not None, guided)


def is_baseline_cell(cell, baseline: str | None = None) -> bool:
    """A grid cell (`.variant`, `.config`) is its task's baseline: the grid's `baseline` variant when
    it names one, else a plain AT cell."""
    return cell.variant == baseline if baseline else plain_at_config(cell.config)


def is_at_rows(df: pd.DataFrame) -> pd.Series:
    """Per row of a results table: is the system autoregressive? (the `autoregressive` column; tables
    written before it existed: by the decoder's registration)."""
    if "autoregressive" in df and df["autoregressive"].notna().all():
        return df["autoregressive"].astype(bool)
    return df["decoder"].map(autoregressive).astype(bool)


def is_speculative_rows(df: pd.DataFrame) -> pd.Series:
    """Per row: a speculative strategy (a NAT drafts, the AT verifies). Its output is meant to be the
    AT's greedy output at another speed, so it is neither a NAT system nor the AT reference."""
    return df.get("strategy_name", pd.Series("", index=df.index)).astype(str) == "speculative"


def is_nat_rows(df: pd.DataFrame) -> pd.Series:
    """Per row: a non-autoregressive system (its own output, not the AT's: no speculative strategy)."""
    return ~is_at_rows(df) & ~is_speculative_rows(df)


ENGINE_TWIN = "-ct2"  # strategy suffix of a plain AT's CTranslate2 twin (evaluation/exported.py)


def is_engine_twin(df: pd.DataFrame) -> pd.Series:
    """Per row: a system that is another system's weights run by an outside engine (a CTranslate2
    twin): a speed and quality reference, never the task's best AT that comparisons are against."""
    return df["strategy"].astype(str).str.endswith(ENGINE_TWIN)


def baseline_cells(df: pd.DataFrame, baseline: str | None = None) -> dict[tuple, str]:
    """(task, seed) -> the baseline cell of a results table: the grid's `baseline` variant when it
    names one, else the plain AT cell (the first in table order when there are several)."""
    ok = df[df["status"] == "ok"]
    if baseline:
        chosen = ok[ok["variant"] == baseline] if "variant" in ok else ok.iloc[0:0]
    else:
        chosen = ok[is_at_rows(ok) & ~ok["distilled"].astype(bool) & ~ok["guided_attention"].astype(bool)
                    & (ok["options"].fillna("") == "")]
    return {key: grp["cell"].iloc[0] for key, grp in chosen.groupby(["task", "seed"])}


def reference_at_rows(df: pd.DataFrame, baseline: str | None = None) -> pd.Series:
    """Per row: may the system be the AT reference that a task's comparisons and summary verdict are
    against (the best of these by mean BLEU)? Our AT systems, not an engine twin; where the grid names
    a `baseline` cell and the table has its rows, only that cell's strategies (a precision control
    such as an fp32 twin must not become the reference by scoring a hair higher)."""
    ours = is_at_rows(df) & ~is_engine_twin(df)
    if baseline and "variant" in df:
        declared = ours & (df["variant"].astype(str) == baseline)
        if declared.any():
            return declared
    return ours


def task_of(cell) -> str:
    """The task a grid cell's systems are compared and timed within: its `task` axis label (else the task's
    name), with the label of every other axis over the task's settings (`task.data_dir`, `task.vocab_size`:
    other data, so other test sentences, are another task, never paired with this one)."""
    task = str(cell.labels.get("task", cell.config.task_name))
    return "-".join([task, *(str(lab) for key, lab in cell.labels.items() if key.startswith("task."))])


def timing_group(cell) -> tuple[str, int]:
    """The unit the timing phase times side by side: a task and a seed (a seed's systems and that seed's
    AT baseline with its A/A twin: every ratio of the group is measured within it)."""
    return task_of(cell), int(getattr(cell, "seed", 0) or 0)


def timing_groups(cells: list) -> dict[tuple[str, int], list]:
    """`cells` by timing_group, in their order."""
    groups: dict[tuple[str, int], list] = {}
    for cell in cells:
        groups.setdefault(timing_group(cell), []).append(cell)
    return groups
