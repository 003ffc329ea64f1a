"""What the report's summary says, phrased from the numbers: per task the best AT and the best NAT
system, whether they differ beyond the seed spread (aggregate.py's rules) or are tied, the NAT
speed-ups, and the systems not clearly beaten in both quality and speed."""
from __future__ import annotations

import pandas as pd

from atnat.experiments.evaluation.baseline import is_at_rows
from atnat.experiments.reporting.aggregate import aggregate_seeds, beyond_spread, robust_front, significant
from atnat.experiments.reporting.results import GridResults, ok_rows


def summary(g: GridResults) -> str:
    """One paragraph per grid phrased from the numbers: per task, best AT and best NAT system, and
    whether they differ beyond the seed spread (aggregate.py's rules) or are tied."""
    parts = [_task_summary(task, part) for task, part in ok_rows(g.table).groupby("task", sort=False)]
    failed, total = g.table.loc[g.table["status"] != "ok", "cell"].nunique(), g.table["cell"].nunique()
    tail = f"; {failed} failed (listed below)." if failed else "."
    return " ".join([*parts, f"{total - failed} of {total} cells finished{tail}"])


def _best(agg: pd.DataFrame) -> pd.Series | None:
    scored = agg.dropna(subset=["bleu"])
    return None if scored.empty else scored.loc[scored["bleu"].idxmax()]


def _name(r: pd.Series) -> str:
    seeds = f", {int(r['n_seeds'])} seeds" if r["n_seeds"] > 1 else ""
    return f"`{r['family']} / {r['strategy']}` ({r['bleu']:.2f} BLEU{seeds})"


def _verdict(nat: pd.Series, at: pd.Series) -> str:
    """How the best NAT system compares with the best AT one, claimed only beyond the spread."""
    gap = nat["bleu"] - at["bleu"]
    beyond = beyond_spread(nat, at, "bleu")
    tested = str(nat.get("p_baseline", "")).split(" / ")[-1] == at["strategy"]  # p is against that system
    agrees = significant(nat) if tested else True
    where = "behind" if gap < 0 else "ahead of"
    if beyond and agrees:
        how = "beyond the seed spread" if nat["n_seeds"] > 1 and at["n_seeds"] > 1 else "beyond the 95% intervals"
        test = " and significant (Holm p < 0.05 in every seed)" if tested else ""
        return f"{abs(gap):.2f} BLEU {where} it, {how}{test}"
    several = nat["n_seeds"] > 1 and at["n_seeds"] > 1
    why = ("not significant in every seed (Holm)" if beyond else
           "within the spread over seeds" if several else "within the 95% intervals; one seed")
    return f"tied with it ({gap:+.2f} BLEU, {why})"


def _mixing(agg: pd.DataFrame) -> str:
    """Dialect-like tasks: which systems mix target variants inside a sentence, and how often."""
    rows = agg.dropna(subset=["mixing_rate"])
    if rows.empty:
        return ""
    ordered = rows.sort_values("mixing_rate", kind="stable")
    listed = ", ".join(f"`{r['family']} / {r['strategy']}` {100 * r['mixing_rate']:.1f}%" for _, r in ordered.iterrows())
    return f" Variant mixing (sentences whose words come from more than one target variant): {listed}."


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _task_summary(task: str, part: pd.DataFrame) -> str:
    """Mixing first where a task measures it; best AT and best NAT system (mean BLEU), the verdict,
    the NAT speed-ups, and the front of systems not clearly beaten in both BLEU and speed-up."""
    agg = aggregate_seeds(part)
    mixing = _mixing(agg)
    at_rows = is_at_rows(agg)
    at, nat = _best(agg[at_rows]), _best(agg[~at_rows])
    rest = f"the best AT system is {_name(at)}" if at is not None else "there is no AT baseline"
    text = f"On `{task}`:{mixing} {_capital(rest) if mixing else rest}"
    if nat is None:
        return text + " and no NAT system."
    text += f"; the best NAT system is {_name(nat)}"
    if at is not None:
        text += ", " + _verdict(nat, at)
    speed = [f"{nat[c]:.2f}× {how}" for c, how in _SPEEDS if pd.notna(nat[c])]
    text += f", with a speed-up over AT greedy of {' and '.join(speed)}" if speed else ""
    front = robust_front(agg, "speedup_vs_at", "bleu")
    listed = [f"`{r['family']} / {r['strategy']}`" for _, r in front.iterrows()]
    return text + (f". Not clearly beaten in both BLEU and speed-up: {', '.join(listed)}." if listed else ".")
_SPEEDS = (("speedup_vs_at", "at batch 1"), ("throughput_speedup_vs_at", "in large-batch throughput"))
