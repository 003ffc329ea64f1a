"""The metrics of a results row: each a small class with its columns, registered by name.

A metric sees one system's outputs on the test set (`Outputs`) and returns a value per column it
declares; `score` runs every registered metric. Adding a metric is one class (anywhere: a plugin
registers it through the entry-point group "atnat.metrics") with its `columns`; the table, the
report and the CLI read those declarations (evaluation/schema.py, evaluation/columns.py).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from atnat.core.errors import AtnatError
from atnat.core.registry import Registry
from atnat.experiments.evaluation.metrics.error_propagation import conditional_error_rate
from atnat.experiments.evaluation.metrics.nat import length_accuracy, repetition_rate, variant_mixing_rate
from atnat.experiments.evaluation.metrics.quality import corpus_quality, exact_match, tokenized_bleu
from atnat.experiments.evaluation.schema import COMPARISONS, LABELS, PROBES, RUN, SPEED, Column, _c


@dataclass(frozen=True)
class Outputs:
    """One system's test-set outputs and what they are scored against."""

    hyps: list[list[int]]  # output ids per sentence (no BOS/EOS/pad)
    hyp_txt: list[str]  # detokenised outputs
    refs: list[list[int]]  # per sentence, the reference ids closest to its output
    ref_txt: list[list[str]]  # every reference stream, raw text
    task: Any  # TaskData: bleu_tokenize, lang, token_variant
    n_bootstrap: int  # resamples of the BLEU interval
    compound_split: bool = False  # tokenised BLEU splits hyphenated compounds


class Metric(ABC):
    """A metric of a results row: `columns` it fills, `compute` their values."""

    columns: ClassVar[tuple[Column, ...]] = ()
    registered_name: ClassVar[str] = ""

    @abstractmethod
    def compute(self, out: Outputs) -> dict[str, Any]:
        """-> {column name: value} for every column in `columns`."""


def metric_problem(cls: type) -> str | None:
    """Why `cls` cannot be a metric: its `columns` must be Column declarations whose names are its own, so that no
    metric overwrites another's value or a built-in column (BLEU, a label, a speed) in the results row."""
    columns = getattr(cls, "columns", None)
    if not isinstance(columns, (tuple, list)) or not columns or not all(isinstance(c, Column) for c in columns):
        return ("its `columns` must be a non-empty tuple of atnat.experiments.evaluation.schema.Column, one per value "
                f"`compute` returns (it has {columns!r})")
    names = [c.name for c in columns]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        return f"it declares the column(s) {', '.join(twice)} more than once"
    taken = {c.name: "a built-in column of results.csv" for c in LABELS + PROBES + COMPARISONS + SPEED + RUN}
    for other_name, other in METRICS.loaded().items():
        if other is not cls:
            taken.update({c.name: f"a column of metric {other_name!r} ({other.__module__})" for c in other.columns})
    clash = [f"{n!r} is {taken[n]}" for n in names if n in taken]
    return ("its column names must be its own: " + "; ".join(clash) + " (a metric's value would overwrite it in "
            "every row); rename the column") if clash else None


METRICS: Registry[Metric] = Registry("metric", Metric, entry_point_group="atnat.metrics", check=metric_problem)
register_metric = METRICS.register


def checked_values(name: str, metric: Metric, values: Any) -> dict[str, Any]:
    """`values`, one metric's `compute` result, when it holds exactly the declared columns with values of their
    kinds (a number, or None/NaN where it does not apply; a label a string): otherwise one error naming the metric."""
    where = f"metric {name!r} ({type(metric).__module__}.{type(metric).__qualname__})"
    if not isinstance(values, dict):
        raise AtnatError(f"{where}: compute() returned {type(values).__name__}, not a dict {{column: value}}")
    declared = {c.name: c for c in metric.columns}
    missing, extra = sorted(set(declared) - set(values)), sorted(set(values) - set(declared))
    if missing or extra:
        raise AtnatError(f"{where}: compute() must return a value for each declared column and no other: "
                         + "; ".join(part for part in (f"missing {', '.join(missing)}" if missing else "",
                                                       f"undeclared {', '.join(map(str, extra))}" if extra else "")
                                     if part))
    for column, value in values.items():
        if not declared[column].accepts(value):
            raise AtnatError(f"{where}: column {column!r} is declared {declared[column].kind!r} but compute() returned "
                             f"{type(value).__name__} {value!r}")
    return values


def check_metric_plugins() -> None:
    """Every installed metric plugin loaded: a broken one would leave its columns out of every row without a word
    (a decoder, strategy or task plugin fails where a config names it; every metric applies to every row)."""
    METRICS.in_order()  # loads the entry points
    if METRICS.plugin_errors:
        raise AtnatError("; ".join(METRICS.plugin_errors.values()) + ": its columns would be missing from every row; "
                         "fix or uninstall it")


def score(out: Outputs) -> dict[str, Any]:
    """Every registered metric's columns for one system."""
    check_metric_plugins()
    row: dict[str, Any] = {}
    for name in METRICS.in_order():
        metric = METRICS.get(name)()
        try:
            values = metric.compute(out)
        except AtnatError:
            raise
        except Exception as err:  # noqa: BLE001 - a plugin's failure, named (not a bare error in every cell)
            raise AtnatError(f"metric {name!r} ({type(metric).__module__}.{type(metric).__qualname__}): compute() "
                             f"raised {type(err).__name__}: {err}") from err
        row.update(checked_values(name, metric, values))
    return row


@register_metric("sacrebleu")
class SacreBLEU(Metric):
    """Corpus BLEU and chrF (sacrebleu defaults) against every reference stream, BLEU's bootstrap interval."""

    columns = (_c("bleu", "number", "sacreBLEU (cased, detokenised, 13a or none) against every reference stream",
                  "higher", ".2f", required=True, header="BLEU", spread=True),
               _c("chrf", "number", "chrF2 (sacrebleu)", "higher", ".1f", required=True, header="chrF", secondary=True),
               _c("bleu_ci_low", "number", "95% bootstrap interval of BLEU (low)", required=True, shown=False),
               _c("bleu_ci_high", "number", "95% bootstrap interval of BLEU (high)", required=True, shown=False),
               _c("bleu_signature", "label", "sacrebleu's BLEU signature", shown=False),
               _c("bleu_tokenize", "label", "sacrebleu's tokenizer of this BLEU", shown=False),
               _c("n_refs", "number", "reference streams scored against", shown=False))

    def compute(self, out: Outputs) -> dict[str, Any]:
        q = corpus_quality(out.hyp_txt, out.ref_txt, tokenize=out.task.bleu_tokenize, n_bootstrap=out.n_bootstrap)
        return {"bleu": q.bleu, "chrf": q.chrf, "bleu_ci_low": q.bleu_ci_low, "bleu_ci_high": q.bleu_ci_high,
                "bleu_signature": q.bleu_signature, "bleu_tokenize": out.task.bleu_tokenize,
                "n_refs": len(out.ref_txt)}


@register_metric("tokenized-bleu")
class TokenizedBLEU(Metric):
    """BLEU on Moses-tokenised text, as NAT papers report it (not comparable with sacreBLEU)."""

    columns = (_c("bleu_tok", "number", "BLEU on Moses-tokenised text (sacremoses), as NAT papers report it: "
                                        "comparable with their tables, not with sacreBLEU", "higher", ".2f",
                  header="Tok. BLEU", secondary=True),)

    def compute(self, out: Outputs) -> dict[str, Any]:
        return {"bleu_tok": tokenized_bleu(out.hyp_txt, out.ref_txt, lang=out.task.lang,
                                           compound_split=out.compound_split)}


@register_metric("exact-match")
class ExactMatch(Metric):
    """Share of outputs identical to a reference."""

    columns = (_c("exact_match", "number", "share of outputs identical to a reference", "higher", ".3f",
                  required=True, header="Exact %", scale=100, secondary=True),)

    def compute(self, out: Outputs) -> dict[str, Any]:
        return {"exact_match": exact_match(out.hyps, out.refs)}


@register_metric("repetition")
class Repetition(Metric):
    """Share of output tokens equal to their predecessor (NAT's repeated-token failure)."""

    columns = (_c("repetition_rate", "number", "share of tokens equal to the previous one", "lower", ".3f",
                  required=True, header="Repetition %", scale=100, secondary=True),)

    def compute(self, out: Outputs) -> dict[str, Any]:
        return {"repetition_rate": repetition_rate(out.hyps)}


@register_metric("length")
class Length(Metric):
    """Output length against the closest reference's."""

    columns = (_c("length_exact", "number", "share of outputs as long as their reference / within one token of "
                                            "it", "higher", ".3f", required=True, header="Length exact / ±1 %",
                  scale=100, with_column="length_within1", secondary=True),
               _c("length_within1", "number", "share within one token of the reference length", "higher", ".3f",
                  required=True, shown=False),
               _c("length_mae", "number", "mean absolute length error (tokens)", "lower", ".2f", shown=False))

    def compute(self, out: Outputs) -> dict[str, Any]:
        lengths = length_accuracy([len(h) for h in out.hyps], [len(r) for r in out.refs])
        return {"length_exact": lengths.exact, "length_within1": lengths.within_1,
                "length_mae": lengths.mean_abs_error}


@register_metric("error-clustering")
class ErrorClustering(Metric):
    """Do errors sit next to errors beyond what their number explains (metrics/error_propagation.py)?
    A statistic of clustering, not of causation: a wrong word split into pieces or a reworded phrase
    clusters errors in NAT outputs too; the causal measure is the injected-error probe (probes.py)."""

    columns = (_c("cond_error_excess", "number", "errors clustering: P(err | err before) - P(err | match before), "
                                                  "minus its within-sentence shuffle expectation; > 0 also for "
                                                  "NAT outputs, where no output feeds back", "", ".3f",
                  header="Error clustering", shown=False),)

    def compute(self, out: Outputs) -> dict[str, Any]:
        return {"cond_error_excess": conditional_error_rate(out.hyps, out.refs).excess}


@register_metric("variant-mixing")
class VariantMixing(Metric):
    """Share of outputs mixing target variants (multi-modal tasks such as dialect)."""

    columns = (_c("mixing_rate", "number", "share of outputs whose words come from several target variants",
                  "lower", ".3f", required=True, header="Mixing %", scale=100),)

    def compute(self, out: Outputs) -> dict[str, Any]:
        variants = out.task.token_variant
        return {"mixing_rate": variant_mixing_rate(out.hyps, variants) if variants else float("nan")}
