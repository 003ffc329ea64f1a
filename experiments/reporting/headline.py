"""The report's first screen: the verdict in plain system names (at most three sentences a task), then a
headline table of every system against the task's AT reference, with the intervals the claims rest on.

Systems are named the way a paper names them (names.py).
Every number comes with its 95% interval (Student's t over seeds with the test-sentence variance added;
one seed: its bootstrap interval), never a standard deviation.
"""
from __future__ import annotations

import re

import pandas as pd

from atnat.experiments.evaluation.baseline import is_engine_twin, is_nat_rows, reference_at_rows
from atnat.experiments.reporting.aggregate import (
    ALPHA,
    aggregate_seeds,
    beyond_spread,
    interval,
    seeds_alone,
    seeds_of,
    significant,
)
from atnat.experiments.reporting.blocks import Block
from atnat.experiments.reporting.judging import REACH_NAMED, families_of, picked, tested_against, within_reach
from atnat.experiments.reporting.names import plain_names
from atnat.experiments.reporting.ranking import shown, signed, within_margin
from atnat.experiments.reporting.ranking import verdict as ranking_verdict
from atnat.experiments.reporting.results import GridResults, ok_rows


def _interval_text(row: pd.Series, col: str, digits: int = 2, suffix: str = "") -> str:
    if pd.isna(row.get(col)):
        return "–"
    low, high = interval(row, col)
    inside = f" [{low:.{digits}f}, {high:.{digits}f}]" if pd.notna(low) and pd.notna(high) and low != high else ""
    k, n = seeds_of(row, col), int(row.get("n_seeds", 1) or 1)
    return (f"{row[col]:.{digits}f}{suffix}{inside}" + (f" ({k} of {n} seeds)" if k < n else "")
            + (" (over the seeds alone)" if inside and seeds_alone(row, col) else ""))


def _diff_text(diff: pd.Series, margin: float) -> str:
    """A paired difference with its interval, e.g. -1.67 [-2.30, -1.04] (no interval: one seed and no
    bootstrap over the sentences, eval.n_bootstrap < 2)."""
    if pd.isna(diff["diff_ci_low"]) or pd.isna(diff["diff_ci_high"]):
        return f"{diff['bleu_diff']:+.2f} (no interval)"
    low, high = max(diff["diff_ci_low"], -100.0), min(diff["diff_ci_high"], 100.0)  # what two BLEU scores can differ by
    return f"{diff['bleu_diff']:+.2f} [{signed(low, margin)}, {signed(high, margin)}]"


def _paired_on(diff: pd.Series, r: pd.Series) -> str:
    """' (paired on 1 seed)' where the difference pairs fewer seeds than the system has (the reference has fewer)."""
    paired, own = diff.get("n_seeds"), int(r["n_seeds"])
    if pd.isna(paired) or int(paired) >= own:
        return ""
    return f" (paired on {int(paired)} seed{'s' if int(paired) != 1 else ''})"


def _word(diff: pd.Series | None, margin: float, agrees: bool = True, r: pd.Series | None = None,
          reference: pd.Series | None = None) -> str:
    """ahead / behind (the paired interval excludes 0, and the paired test agrees where it was run against
    the same system: `agrees`, as the summary's rule), equivalent (inside ±margin), not resolved. Without a
    paired interval (the hypotheses are not in the results folder): ahead / behind where the two systems'
    own intervals do not overlap (`r`, `reference`: the conservative rule the summary uses), else not resolved."""
    if diff is not None and (pd.isna(diff["diff_ci_low"]) or pd.isna(diff["diff_ci_high"])):
        return "not resolved"  # a paired difference without an interval claims nothing
    if diff is None:
        if r is not None and reference is not None and r["system"] != reference["system"] \
                and not any(pd.isna(v) for v in (*interval(r, "bleu"), *interval(reference, "bleu"))):
            if beyond_spread(r, reference, "bleu"):
                return "ahead" if r["bleu"] > reference["bleu"] else "behind"
            return "not resolved"
        return "–"
    low, high = diff["diff_ci_low"], diff["diff_ci_high"]
    if low > 0 and agrees:
        return "ahead"
    if high < 0 and agrees:
        return "behind"
    return "equivalent" if within_margin(low, high, margin) else "not resolved"


def _held_back(diff: pd.Series, r: pd.Series, word: str) -> str:
    """' (Holm p 0.25)' where the interval alone excludes 0 but the paired test, Holm-corrected over the systems
    compared with the reference, does not agree: the reader sees why such a row is not resolved (ranking.csv,
    which judges each pair by its interval alone, calls it ahead or behind)."""
    low, high = diff["diff_ci_low"], diff["diff_ci_high"]
    if word != "not resolved" or pd.isna(low) or pd.isna(high) or not (low > 0 or high < 0):
        return ""
    p = r.get("bleu_p_holm_max", r.get("bleu_p_holm"))
    return f" (Holm p {p_text(p)})" if pd.notna(p) else ""


def p_text(p: float) -> str:
    """A p-value at two decimals, more where two would round it onto the threshold (0.054 is no "0.05")."""
    digits = 2
    while digits < 4 and f"{p:.{digits}f}" == f"{ALPHA:.{digits}f}" and p != ALPHA:
        digits += 1
    return f"{p:.{digits}f}"


def _agrees(r: pd.Series, reference: pd.Series | None, part: pd.DataFrame) -> bool:
    """Does r's paired test (if it was run against the reference itself) agree in every seed?"""
    if reference is None:
        return True
    return significant(r) if tested_against(r, reference, families_of(part)) else True


def _interval_only(r: pd.Series, reference: pd.Series | None, part: pd.DataFrame, word: str) -> str:
    """' (interval only)' after ahead or behind where r's corrected paired test was run against another system
    than the reference (a grid without `baseline:` compares with its best AT, tests against its plain AT): the
    paired interval alone decided, without the correction over the systems compared."""
    if word not in ("ahead", "behind") or reference is None or r["system"] == reference["system"]:
        return ""
    return "" if tested_against(r, reference, families_of(part)) else " (interval only)"


def _task(g: GridResults, task: str, part: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.Series | None]:
    """The systems of one task (means over seeds), their paired differences to the task's AT reference
    (comparisons.csv, main test set), and that reference."""
    agg = aggregate_seeds(part).reset_index(drop=True)
    agg = agg.assign(system=agg["family"].astype(str) + " / " + agg["strategy"].astype(str))
    refs = agg[reference_at_rows(agg, g.baseline)].dropna(subset=["bleu"])
    reference = refs.loc[refs["bleu"].idxmax()] if len(refs) else None
    comparisons = g.comparisons if g.comparisons is not None else pd.DataFrame()
    if len(comparisons):
        comparisons = comparisons[(comparisons["task"].astype(str) == str(task))
                                  & (comparisons.get("test_set", "main") == "main")]
    return agg, comparisons, reference


def speed_family(agg: pd.DataFrame, reference: pd.Series | None) -> str | None:
    """The family whose greedy search a task's speed-ups are over (results.csv `speed_baseline`: the baseline
    cell, which need not be the AT reference's: a grid without `baseline:` compares with its best AT but times
    against its plain AT); the reference's family where none is recorded."""
    recorded = {baseline_family(v) for v in agg.get("speed_baseline", pd.Series(dtype=str)).dropna()
                if str(v) and str(v) != "nan"}
    return recorded.pop() if len(recorded) == 1 else None if reference is None else str(reference["family"])


def headline_rows(agg: pd.DataFrame, reference: pd.Series | None) -> pd.DataFrame:
    """The systems the headline shows, best BLEU first: the AT reference, AT greedy (the speed baseline),
    each other cell's best strategy by BLEU among its own (not speculative: that is its AT verifier's output,
    which would always outscore the cell's own decoding), and every speculative system (the AT's output at
    another speed); engine twins stay in the full tables."""
    own = agg[~is_engine_twin(agg) & agg["bleu"].notna()]
    best = own.sort_values("bleu", ascending=False, kind="stable")
    speculative = best.get("strategy_name", pd.Series("", best.index)).astype(str) == "speculative"
    keep = set(best[~speculative].groupby("family", sort=False).head(1).index) | set(best.index[speculative])
    timed_against = speed_family(agg, reference)
    keep |= set(own.index[own["strategy"].astype(str) == "greedy"] if timed_against is None else
                own.index[(own["family"] == timed_against) & (own["strategy"].astype(str) == "greedy")])
    return best.loc[[i for i in best.index if i in keep]]


HEADLINE_COLUMNS = ("System", "Seeds", "BLEU [95%]", "Δ BLEU vs AT reference [95%]", "Verdict", "× AT greedy, batch 1",
                    "× AT greedy, throughput", "× AT beam, batch 1", "× reference AT greedy, batch 1")  # in this order;
# a column no task has is left out. The reference AT: speed.reference_at's (a deep-encoder/shallow-decoder AT)


def headline_table(g: GridResults, task: str, part: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """One row per headline system (headline_rows): its BLEU, its paired difference to the AT reference,
    the verdict word, its speed-ups over AT greedy (batch 1, throughput) and over AT beam at batch 1, each
    with its 95% interval. -> (table, the verdict word of each row). Every system is in the overview."""
    agg, comparisons, reference = _task(g, task, part)
    names = plain_names(agg)
    rows, words = [], []
    for _, r in headline_rows(agg, reference).iterrows():
        found = comparisons[comparisons["system"] == r["system"]] if len(comparisons) else comparisons
        diff = found.iloc[0] if len(found) else None
        is_ref = reference is not None and r["system"] == reference["system"]
        word = "reference" if is_ref else _word(diff, g.equivalence_margin, _agrees(r, reference, part), r, reference)
        words.append(word)
        rows.append({"System": names[r["system"]], "Seeds": str(int(r["n_seeds"])),
                     "BLEU [95%]": _interval_text(r, "bleu"),
                     "Δ BLEU vs AT reference [95%]": "–" if diff is None else _diff_text(diff, g.equivalence_margin)
                     + _paired_on(diff, r),
                     "Verdict": word if diff is None else shown(word, diff["diff_ci_low"], diff["diff_ci_high"],
                                                                g.equivalence_margin) + _held_back(diff, r, word)
                     + _interval_only(r, reference, part, word),
                     "× AT greedy, batch 1": _interval_text(r, "speedup_vs_at", suffix="×"),
                     "× AT greedy, throughput": _interval_text(r, "throughput_speedup_vs_at", suffix="×"),
                     "× AT beam, batch 1": _interval_text(r, "speedup_vs_at_beam", suffix="×"),
                     "× reference AT greedy, batch 1": _interval_text(r, "speedup_vs_ref_at", suffix="×")
                     if "speedup_vs_ref_at" in r else "–"})
    table = pd.DataFrame(rows)
    return table.loc[:, [c for c in table.columns if not (table[c] == "–").all()]], words


def _on_other_test_sets(g: GridResults, task: str, system: str) -> str:
    """' (on test2017: -1.31 [-2.39, -0.21], behind)' for each of eval.extra_tests where comparisons.csv pairs
    `system` with the AT reference (judged by its interval alone, as ranking.csv: the paired test runs on the
    main test set only), so that the verdict does not rest on one test year."""
    comparisons = g.comparisons if g.comparisons is not None else pd.DataFrame()
    if comparisons.empty or "test_set" not in comparisons:
        return ""
    rows = comparisons[(comparisons["task"].astype(str) == str(task)) & (comparisons["system"] == system)
                       & (comparisons["test_set"].astype(str) != "main")]
    parts = []
    for _, d in rows.iterrows():
        judged = "" if pd.isna(d["diff_ci_low"]) or pd.isna(d["diff_ci_high"]) else \
            ": " + shown(ranking_verdict(d["diff_ci_low"], d["diff_ci_high"], g.equivalence_margin), d["diff_ci_low"],
                         d["diff_ci_high"], g.equivalence_margin)
        parts.append(f"on {d['test_set']}: {_diff_text(d, g.equivalence_margin)}{judged.replace(': ', ', ', 1)}")
    return f" ({'; '.join(parts)})" if parts else ""


def _mean_on_shared_seeds(part: pd.DataFrame, reference: pd.Series, other: pd.Series) -> float | None:
    """The reference's mean BLEU over the seeds where `other` has a BLEU too: what a difference paired on
    fewer seeds than the reference has is taken from (its mean over all its seeds is another number)."""
    ok = part[part["bleu"].notna()] if "bleu" in part else part.iloc[:0]

    def seeds(system: pd.Series) -> pd.Series:
        rows = ok[(ok["family"].astype(str) == str(system["family"])) & (ok["strategy"].astype(str) == str(system["strategy"]))]
        return rows.set_index("seed")["bleu"]
    ref, oth = seeds(reference), seeds(other)
    shared = ref.index.intersection(oth.index)
    return float(ref.loc[shared].mean()) if len(shared) else None


def baseline_family(system: object) -> str:
    """The family of a recorded baseline, e.g. "en-de-at-deep-s1 / greedy" -> "en-de-at-deep"."""
    return re.sub(r"-s[0-9]+$", "", str(system).split(" / ")[0])


def verdict(g: GridResults, task: str, part: pd.DataFrame, threads: str) -> str:
    """At most three sentences: the best NAT against the AT reference (its paired difference and verdict,
    its batch-1 speed-up over AT greedy, and the NATs within reach of it: the best of noisy means is not a
    winner by itself); the fastest system the AT reference does not beat beyond noise, by the corrected test
    nor by its paired interval alone, with that interval (and those whose speed interval reaches its own); the
    best NAT against the greedy of speed.reference_at's AT (a deep-encoder/shallow-decoder AT), if timed."""
    agg, comparisons, reference = _task(g, task, part)
    if reference is None:
        return f"{task}: no finished AT system to compare with."
    names = plain_names(agg)
    ref_name = names[reference["system"]]
    nats = agg[is_nat_rows(agg) & agg["bleu"].notna()]

    def diff_of(system: str) -> pd.Series | None:
        found = comparisons[comparisons["system"] == system] if len(comparisons) else comparisons
        return found.iloc[0] if len(found) else None

    def word(r: pd.Series) -> str:
        return _word(diff_of(r["system"]), g.equivalence_margin, _agrees(r, reference, part), r, reference)

    seeds = int(reference["n_seeds"])
    counts = sorted({int(n) for n in agg.loc[agg["bleu"].notna(), "n_seeds"].dropna()} | {seeds})
    told = f"{counts[0]} seed{'s' if counts[0] != 1 else ''}" if len(counts) == 1 else \
        f"{counts[0]} to {counts[-1]} seeds a system"  # the table's Seeds column says which
    where = "" if not threads else f"; speed {threads}" if threads.startswith("on ") else f"; speed at {threads}"
    sentences = [f"{task} ({told}{where}):"]
    if len(nats):
        best = nats.loc[nats["bleu"].idxmax()]
        diff = diff_of(best["system"])
        if diff is not None:
            paired = int(diff["n_seeds"]) if pd.notna(diff.get("n_seeds")) else seeds  # not recorded: the reference's
            fewer_paired = (f" (paired on the {paired} seed{'s' if paired != 1 else ''} both have)"
                            if paired < max(int(best["n_seeds"]), seeds) else "")
            judged, level = _word(diff, g.equivalence_margin, _agrees(best, reference, part), best, reference), ""
            if judged in ("ahead", "equivalent") and len(nats) > 1:  # claims the pick favours: widened for it first
                diff = picked(diff, len(nats))
                judged = _word(diff, g.equivalence_margin, _agrees(best, reference, part), best, reference)
                level = f" ({100 * diff['level']:.1f}%: simultaneous over the {len(nats)} NAT systems it is the best of)"
            on_shared = _mean_on_shared_seeds(part, reference, best) if fewer_paired else None
            ref_value = f"{reference['bleu']:.2f}" + ("" if on_shared is None else
                                                      f"; {on_shared:.2f} on the seed{'s' if paired != 1 else ''} paired")
            gap = (f", {_diff_text(diff, g.equivalence_margin)}{level}{fewer_paired} against {ref_name} "
                   f"({ref_value}): "
                   f"{shown(judged, diff['diff_ci_low'], diff['diff_ci_high'], g.equivalence_margin)}"
                   f"{_interval_only(best, reference, part, judged)}")
        elif best["system"] != reference["system"]:  # no paired interval: the two systems' own intervals
            apart = word(best)
            gap = (f", {best['bleu'] - reference['bleu']:+.2f} against {ref_name} ({reference['bleu']:.2f}): " +
                   (f"{apart}, beyond both systems' 95% intervals" if apart in ("ahead", "behind") else
                    "not resolved (their intervals overlap, and the results folder holds no paired interval)"))
        else:
            gap = ""
        gap += _on_other_test_sets(g, task, best["system"])
        speed = "" if pd.isna(best.get("speedup_vs_at")) else \
            f", at {_interval_text(best, 'speedup_vs_at', suffix='×')} AT greedy's batch-1 speed"
        near = [names[r["system"]] for r, _ in within_reach(nats, best, g.ranking)]
        reach = (f"; {_listing(near)} {'is' if len(near) == 1 else 'are'} within reach of it"
                 + ("" if len(near) <= 2 else " (the summary lists them)" if len(near) <= REACH_NAMED else
                    " (the summary lists the closest)")) if near else ""
        scored = seeds_of(best, "bleu")  # the seeds its mean BLEU stands on (a failed seed has none)
        fewer = f" ({scored} of {max(seeds, int(best['n_seeds']))} seeds)" if scored < max(seeds, int(best["n_seeds"])) else ""
        sentences.append(f"the best NAT by mean BLEU is {names[best['system']]} at {best['bleu']:.2f} BLEU{fewer}{gap}"
                         f"{speed}{reach}.")
    def behind_on_its_interval(r: pd.Series) -> bool:  # the interval alone, even where the corrected test holds back
        diff = diff_of(r["system"])
        return diff is not None and pd.notna(diff["diff_ci_high"]) and diff["diff_ci_high"] < 0

    timed = [r for _, r in agg.iterrows() if r["system"] != reference["system"] and pd.notna(r.get("speedup_vs_at"))
             and not is_engine_twin(pd.DataFrame([r])).iloc[0]]
    level = [r for r in timed if word(r) not in ("behind", "–") and not behind_on_its_interval(r)]
    if timed and not level and all(word(r) == "behind" or behind_on_its_interval(r) for r in timed):
        sentences.append(f"No timed system's BLEU interval against {ref_name} reaches 0.")
    if level:
        fast = max(level, key=lambda r: r["speedup_vs_at"])
        low = interval(fast, "speedup_vs_at")[0]
        rivals = [names[r["system"]] for r in level if r["system"] != fast["system"]
                  and pd.notna(interval(r, "speedup_vs_at")[1]) and interval(r, "speedup_vs_at")[1] >= low]
        overlap = "" if not rivals else (f" (on the mean: the speed interval of {_listing(rivals)} reaches its own)"
                                         if len(rivals) == 1 else
                                         f" (on the mean: the speed intervals of {_listing(rivals)} reach its own)")
        fast_diff = diff_of(fast["system"])
        fast_gap = "" if fast_diff is None else f" ({_diff_text(fast_diff, g.equivalence_margin)} against it)"
        which = (f"whose paired BLEU interval against {ref_name} does not lie below 0" if fast_diff is not None else
                 f"not behind {ref_name} beyond both systems' 95% intervals (the results folder holds no paired "
                 "interval)")
        sentences.append(f"The fastest system {which} is {names[fast['system']]}{fast_gap}, "
                         f"at {_interval_text(fast, 'speedup_vs_at', suffix='×')} AT greedy's batch-1 speed{overlap}.")
    if len(nats) and "speedup_vs_ref_at" in agg and pd.notna(best.get("speedup_vs_ref_at")):
        family = baseline_family(best.get("ref_at_baseline", ""))
        ref_at = names.get(f"{family} / greedy", f"{family} AT greedy")
        sentences.append(f"Against {ref_at}, {names[best['system']]} runs at "
                         f"{_interval_text(best, 'speedup_vs_ref_at', suffix='×')} at batch 1.")
    if len(sentences) == 1:  # no NAT, and no other system to name
        sentences.append(f"no NAT system has finished; the AT reference is {ref_name} at "
                         f"{_interval_text(reference, 'bleu')} BLEU.")
    return " ".join(sentences[:1] + [sentences[1][0].upper() + sentences[1][1:]] + sentences[2:4])


def speculation(g: GridResults, task: str, part: pd.DataFrame) -> list[str]:
    """A sentence for each speculative system of a task: its passes a sentence at batch 1, the drafter's and the
    verifier's apart, the tokens kept per verifier pass, how often its output was AT greedy's, and its speed."""
    agg, _, _ = _task(g, task, part)
    if "strategy_name" not in agg:
        return []
    names = plain_names(agg)
    out = []
    for _, r in agg[agg["strategy_name"].astype(str) == "speculative"].iterrows():
        passes, verifier = r.get("decoder_passes"), r.get("verifier_passes")
        if pd.isna(passes) or pd.isna(verifier):
            continue
        match = r.get("verifier_greedy_match")
        same = "" if match is None or pd.isna(match) else \
            f"; its output is AT greedy's in {100 * float(match):.1f}% of the test sentences"
        out.append(f"Speculative decoding ({task}, batch 1): {names[r['system']]} takes {passes - verifier:.1f} drafter and "
                   f"{verifier:.1f} verifier passes a sentence, keeping {r.get('acceptance_length', float('nan')):.2f} "
                   f"tokens per verifier pass{same}; it runs at {_interval_text(r, 'speedup_vs_at', suffix='×')} AT "
                   "greedy's batch-1 speed.")
    return out


def cautions(ok: pd.DataFrame, extra: pd.DataFrame | None = None) -> list[str]:
    """Sentences for the first screen where a run did not do what its numbers assume: a speculative system
    whose output differs from its AT verifier's greedy output (on the test split, or on a further test set of
    `extra`, extra_tests.csv), a system whose timed computation did not reproduce the hypotheses scored for
    it, a distilled student scoring above the targets it learnt from (one reference). Per task, seed by seed
    (a mean would hide one bad seed)."""
    out = []
    for col, what in (("verifier_greedy_match", "is not lossless: its output differs from its AT verifier's greedy "
                                                "output in some test sentences"),
                      ("timed_equals_evaluated", "was timed on a computation that did not reproduce the hypotheses "
                                                 "scored for it in every timed sentence, so its speed is not that of its "
                                                 "BLEU")):
        if col not in ok:
            continue
        bad = ok[pd.to_numeric(ok[col], errors="coerce") < 1.0]
        for (task, family, strategy), rows in bad.groupby(["task", "family", "strategy"], sort=False):
            shares = ", ".join((f"seed {int(r['seed'])}: " if pd.notna(r.get("seed")) else "") + f"{100 * float(r[col]):.1f}%"
                               for _, r in rows.iterrows())
            out.append(f"Caution ({task}): `{family} / {strategy}` {what} ({col} {shares}).")
    if {"distill_bleu", "bleu_ci_low", "n_refs"} <= set(ok.columns):  # a score its teacher's outputs cannot explain
        one = ok[pd.to_numeric(ok["n_refs"], errors="coerce") == 1]  # (distill_bleu has one reference: so must the test)
        above = one[pd.to_numeric(one["bleu_ci_low"], errors="coerce") > pd.to_numeric(one["distill_bleu"], errors="coerce")]
        for (task, family, strategy), rows in above.groupby(["task", "family", "strategy"], sort=False):
            told = "; ".join((f"seed {int(r['seed'])}: " if pd.notna(r.get("seed")) else "")
                             + f"{r['bleu']:.2f} BLEU [{r['bleu_ci_low']:.2f}, {r['bleu_ci_high']:.2f}] against the targets' "
                             f"{r['distill_bleu']:.2f}" for _, r in rows.iterrows())
            out.append(f"Caution ({task}): `{family} / {strategy}` scores above the distilled targets it learnt from "
                       f"(their BLEU on the training references; {told}): its score did not come from its teacher (a "
                       "teacher trained too little? a task it solves untrained?).")
    if extra is not None and "verifier_greedy_match" in extra and not extra.empty:
        bad = extra[pd.to_numeric(extra["verifier_greedy_match"], errors="coerce") < 1.0]
        for (task, cell, strategy, test_set), rows in bad.groupby(["task", "cell", "strategy", "test_set"], sort=False):
            shares = ", ".join(f"{100 * float(v):.1f}%" for v in rows["verifier_greedy_match"])
            out.append(f"Caution ({task}, {test_set}): `{cell} / {strategy}` is not lossless: its output differs from "
                       f"its AT verifier's greedy output in some {test_set} sentences (verifier_greedy_match {shares}).")
    return out


def left_out(table: pd.DataFrame) -> str:
    """A first-screen sentence naming the cells the verdict does not stand on: failed, or with no result yet
    ('' when every cell finished)."""
    cells = table.drop_duplicates("cell")
    failed = cells.loc[~cells["status"].isin(["ok", "not run"]), "cell"].astype(str).tolist()
    not_run = cells.loc[cells["status"] == "not run", "cell"].astype(str).tolist()
    parts = ([f"{len(failed)} failed cell{'s' if len(failed) != 1 else ''} ({_listing([f'`{c}`' for c in failed])})"]
             if failed else []) + ([f"{len(not_run)} cell{'s' if len(not_run) != 1 else ''} with no result yet "
                                    f"({_listing([f'`{c}`' for c in not_run])})"] if not_run else [])
    return f"Not in this verdict: {' and '.join(parts)}." if parts else ""  # the Overview lists them


def _listing(names: list[str], shown: int = 3) -> str:
    """'A', 'A and B', 'A; B; C' (names hold commas), or the first `shown` and how many more: a reader is told
    which systems, not only how many."""
    if len(names) <= 2:
        return " and ".join(names)
    more = len(names) - shown
    return "; ".join(names[:shown]) + (f" and {more} more" if more > 0 else "")


def column_names(g: GridResults, tasks: list[tuple[str, pd.DataFrame]]) -> dict[str, str]:
    """The headline columns that compare with a system, named by that system where every task has the same one
    (AT 3+3 beam 5, AT 3+3 greedy, AT 5+1 greedy: "AT reference" beside "reference AT" told a reader neither)."""
    seen: dict[str, set[str]] = {}
    for task, part in tasks:
        agg, _, reference = _task(g, task, part)
        if reference is None:
            return {}
        names = plain_names(agg)
        seen.setdefault("Δ BLEU vs AT reference [95%]", set()).add(f"Δ BLEU vs {names[reference['system']]} [95%]")
        greedy = names.get(f"{speed_family(agg, reference)} / greedy")
        for column in ("× AT greedy, batch 1", "× AT greedy, throughput"):
            seen.setdefault(column, set()).add(column.replace("AT greedy", greedy) if greedy else column)
        family = {baseline_family(v) for v in agg.get("ref_at_baseline", pd.Series(dtype=str)).dropna() if str(v)}
        ref_at = names.get(f"{family.pop()} / greedy") if len(family) == 1 else None
        seen.setdefault("× reference AT greedy, batch 1", set()).add(f"× {ref_at}, batch 1" if ref_at else
                                                                    "× reference AT greedy, batch 1")
    return {column: names_.pop() for column, names_ in seen.items() if len(names_) == 1}


def headline_blocks(g: GridResults, threads: str) -> tuple[list[Block], list[Block]]:
    """(the verdict and the headline table, shown first; the note on their intervals, shown after the
    headline figure). One table for every task (a Task column where there are several), so that the first
    screen holds the verdict, the table and the top of the figure."""
    ok = ok_rows(g.table)
    if ok.empty:
        return [Block("heading", "Verdict", 2), Block("para", "No cell has finished: nothing to compare yet.")], []
    tasks = list(ok.groupby("task", sort=False))
    said = [verdict(g, task, part, threads) for task, part in tasks]
    if (absent := left_out(g.table)):  # within the last verdict's paragraph: the first screen has no line to spare
        said[-1] += " " + absent
    blocks = [Block("heading", "Verdict", 2), *[Block("para", text) for text in said]]
    blocks += [Block("para", text) for text in cautions(ok, g.extra_tests)]
    blocks += [Block("para", text) for task, part in tasks for text in speculation(g, task, part)]
    tables = [headline_table(g, task, part)[0].assign(Task=task) for task, part in tasks]
    table = pd.concat(tables, ignore_index=True).fillna("–")
    order = (["Task"] if len(tasks) > 1 else []) + [c for c in HEADLINE_COLUMNS if any(c in t for t in tables)]
    named = column_names(g, tasks)
    blocks.append(Block("table", frame=table[[c for c in order if c in table]].rename(columns=named)))
    note = Block("note", "Headline table: intervals are 95%: Student's t over the seeds with the test-sentence variance "
                         "added (one seed: the test sentences resampled only). Δ BLEU is paired with the AT "
                         "reference, sentence by sentence and seed by seed; the verdict says ahead or behind "
                         "when its interval excludes 0 and the paired test agrees (p < 0.05, Holm-corrected over "
                         "the systems compared with the reference: a row whose interval alone excludes 0 shows that "
                         "p, and ranking.csv, which judges each pair by its interval alone, calls it ahead or "
                         "behind; \"interval only\": its corrected test ran against another AT than the reference, "
                         f"the one its p column names), equivalent inside ±{g.equivalence_margin:g} BLEU, not "
                         "resolved otherwise. The verdict's best NAT is picked by its mean on these same sentences from "
                         "m NAT systems, which favours a lucky one: before the verdict calls it ahead or equivalent, "
                         "its interval is widened to 1 - 0.05/m (Bonferroni, as the goals table does for a best of "
                         "several); behind or not resolved stand at 95%, as in the table. Speed-ups are paired "
                         "ratios of the same sentences' times, widened to "
                         "the A/A noise floor; the last speed-up is over the greedy search of the grid's "
                         "speed.reference_at (the AT the verdict names last). Every system, every strategy: the "
                         "overview below.")
    return blocks, [note]
