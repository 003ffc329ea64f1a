"""One declaration per column of results.csv: its name, type, how it prints, what it means and
which way is better. The table orders its columns by it, the report reads types and directions
from it, the CLI prints with its formats. A metric's columns are declared beside the metric
(evaluation/metrics/row.py); the rest here; evaluation/columns.py puts them together in table order.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    """One column of results.csv."""

    name: str  # the column's name in results.csv
    kind: str  # "label" (text), "flag" (bool), "number"
    description: str  # what it holds, in one sentence
    better: str = ""  # "higher" or "lower" when one value is better than another, else ""
    fmt: str = ""  # how the CLI and the report print it: a format spec such as ".2f"; "auto" (about three
    # significant digits, no exponent: 0.84, 12.3, 1520); "p" (a p-value: <0.001 or 0.123); "" = as is
    required: bool = False  # the report refuses a results.csv without it
    shown: bool = True  # a metric column the report's overview shows (False: auxiliary, e.g. an interval)
    header: str = ""  # its heading in the report's overview ("" = the column's name); {speed_base} and
    # {p_base} name the task's baselines
    scale: float = 1.0  # the overview shows value x scale (100: a share shown in %)
    spread: bool = False  # the overview shows mean ± sd over seeds (one seed: the value and its 95% interval)
    with_column: str = ""  # the overview shows "this / that" in one cell (length exact / within one)
    secondary: bool = False  # the HTML overview folds it behind "more columns" (the first screen fits 1400 px)

    def __post_init__(self):
        if self.kind not in ("label", "flag", "number") or self.better not in ("", "higher", "lower"):
            raise ValueError(f"column {self.name}: kind {self.kind!r} / better {self.better!r}")

    @property
    def heading(self) -> str:
        return self.header or self.name

    def accepts(self, value) -> bool:
        """Whether `value` is one of this column's kind: a string for a label, a bool or number for a flag,
        a real number (not a bool) for a number; None or NaN (does not apply) fits every kind."""
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return True
        if self.kind == "label":
            return isinstance(value, str)
        if self.kind == "flag":
            return isinstance(value, (bool, numbers.Number))
        return isinstance(value, numbers.Real) and not isinstance(value, bool)

    def format(self, value) -> str:
        """The value as the CLI and the report print it ("–" for a missing one)."""
        return format_value(value, self.fmt)


MISSING = "–"  # shown for a value that does not apply (NaN in the table)


def format_value(value, fmt: str) -> str:
    """`value` printed with a column's format (see Column.fmt)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if fmt == "auto":
        return f"{value:.{2 if abs(value) < 10 else 1 if abs(value) < 1000 else 0}f}"
    if fmt == "p":
        return "<0.001" if value < 0.001 else f"{value:.3f}"
    return format(value, fmt) if fmt else str(value)


def _c(name, kind, description, better="", fmt="", required=False, shown=True, **presentation) -> Column:
    return Column(name, kind, description, better, fmt, required, shown, **presentation)


LABELS = (
    _c("cell", "label", "the grid cell (axis labels, variant, seed)", required=True),
    _c("family", "label", "the cell without its seed: the system that seeds repeat"),
    _c("task", "label", "the task label", required=True),
    _c("decoder", "label", "the decoder family", required=True),
    _c("autoregressive", "flag", "the decoder decodes step by step (an AT: it offers the `step` capability)"),
    _c("strategy", "label", "the search strategy's label (beam5, mask-predict-4, ...)", required=True),
    _c("strategy_name", "label", "the strategy's registered name"),
    _c("strategy_settings", "label", "every option of the strategy, defaults included (JSON): what the label names"),
    _c("iterations", "number", "mask-predict iterations"),
    _c("seed", "number", "the training seed"),
    _c("distilled", "flag", "trained on an AT teacher's outputs"),
    _c("guided_attention", "flag", "trained with the guided-attention loss", required=True),
    _c("options", "label", "the decoder's options"),
    _c("layers", "label", "encoder + decoder layers (3+3; a deep-encoder/shallow-decoder AT: 5+1)"),
)
COMPARISONS = (
    _c("bleu_p_vs_at", "number", "paired test p (two-sided) of BLEU against the task's AT baseline (same seed)",
       required=True, fmt=".3f", shown=False),
    _c("bleu_p_holm", "number", "paired test of BLEU against the task's baseline (same sentences), Holm-corrected "
                                "over the systems of the task and seed; with several seeds, the largest over seeds",
       fmt="p", header="p vs {p_base} (Holm)"),
    _c("p_baseline", "label", "the baseline of the paired test (cell / strategy)"),
    _c("bleu_p_sides", "number", "2: bleu_p_vs_at and bleu_p_holm are two-sided p-values (a results.csv without this "
                                 "column holds sacreBLEU's one-tailed bootstrap p, doubled when read)", shown=False),
    _c("verifier_greedy_match", "number", "speculative decoding: the share of test sentences whose output equals its "
                                          "AT verifier's own greedy output (lossless: 1)", "higher", ".3f",
       header="= AT greedy", scale=100.0, secondary=True),
)
SPEED = (
    _c("latency_ms_b1", "number", "mean decoding time per sentence at batch 1 (ms), timing phase", "lower",
       "auto", required=True, header="Latency ms (b=1)", secondary=True),
    _c("latency_ms_b1_ci_low", "number", "95% bootstrap interval of latency_ms_b1 (low)"),
    _c("latency_ms_b1_ci_high", "number", "95% bootstrap interval of latency_ms_b1 (high)"),
    _c("throughput_sents_s", "number", "sentences per second over large batches, timing phase", "higher", "auto",
       required=True, header="Throughput sent/s", secondary=True),
    _c("speedup_vs_at", "number", "the baseline's batch-1 time over this system's, on the same sentences", "higher",
       ".2f", required=True, header="Speed-up × vs {speed_base} (b=1)", spread=True),
    _c("speedup_ci_low", "number", "95% paired interval of speedup_vs_at (low)"),
    _c("speedup_ci_high", "number", "95% paired interval of speedup_vs_at (high)"),
    _c("throughput_speedup_vs_at", "number", "this system's large-batch throughput over the baseline's", "higher",
       ".2f", required=True, header="Thr. speed-up ×", spread=True),
    _c("throughput_speedup_ci_low", "number", "95% paired interval of the throughput ratio (low)"),
    _c("throughput_speedup_ci_high", "number", "95% paired interval of the throughput ratio (high)"),
    _c("speed_baseline", "label", "the AT greedy system the speed-ups are against"),
    _c("speedup_vs_ct2", "number", "the plain AT exported to CTranslate2 (greedy)'s batch-1 time over this "
                                   "system's", "higher", ".2f", header="Speed-up × vs CTranslate2 greedy (b=1)",
       spread=True),
    _c("speedup_vs_ct2_ci_low", "number", "95% paired interval of speedup_vs_ct2 (low)"),
    _c("speedup_vs_ct2_ci_high", "number", "95% paired interval of speedup_vs_ct2 (high)"),
    _c("throughput_speedup_vs_ct2", "number", "this system's large-batch throughput over the CTranslate2 AT's "
                                              "(greedy)", "higher", ".2f", header="Thr. speed-up × vs CTranslate2",
       spread=True),
    _c("throughput_speedup_vs_ct2_ci_low", "number", "95% paired interval of the throughput ratio to "
                                                     "CTranslate2 (low)"),
    _c("throughput_speedup_vs_ct2_ci_high", "number", "95% paired interval of the throughput ratio to "
                                                      "CTranslate2 (high)"),
    _c("speedup_vs_at_beam", "number", "the baseline AT's beam search's batch-1 time over this system's, same "
                                       "sentences (the speed-up over the usual quality reference)", "higher", ".2f",
       header="Speed-up × vs AT beam (b=1)", spread=True, secondary=True),
    _c("speedup_vs_at_beam_ci_low", "number", "95% paired interval of speedup_vs_at_beam (low)"),
    _c("speedup_vs_at_beam_ci_high", "number", "95% paired interval of speedup_vs_at_beam (high)"),
    _c("throughput_speedup_vs_at_beam", "number", "this system's large-batch throughput over the baseline AT's "
                                                  "beam search's", "higher", ".2f", secondary=True),
    _c("throughput_speedup_vs_at_beam_ci_low", "number", "95% paired interval of "
                                                         "throughput_speedup_vs_at_beam (low)"),
    _c("throughput_speedup_vs_at_beam_ci_high", "number", "95% paired interval of "
                                                          "throughput_speedup_vs_at_beam (high)"),
    _c("at_beam_baseline", "label", "the AT beam system (cell / strategy) of the speedup_vs_at_beam columns"),
    _c("speedup_vs_ref_at", "number", "the reference AT's (speed.reference_at, e.g. a deep-encoder/shallow-decoder "
                                      "AT) greedy batch-1 time over this system's, same sentences", "higher", ".2f",
       header="Speed-up × vs {ref_base} (b=1)", spread=True),
    _c("speedup_vs_ref_at_ci_low", "number", "95% paired interval of speedup_vs_ref_at (low)"),
    _c("speedup_vs_ref_at_ci_high", "number", "95% paired interval of speedup_vs_ref_at (high)"),
    _c("throughput_speedup_vs_ref_at", "number", "this system's large-batch throughput over the reference AT's "
                                                 "(greedy)", "higher", ".2f", header="Thr. speed-up × vs {ref_base}",
       spread=True),
    _c("throughput_speedup_vs_ref_at_ci_low", "number", "95% paired interval of throughput_speedup_vs_ref_at "
                                                        "(low)"),
    _c("throughput_speedup_vs_ref_at_ci_high", "number", "95% paired interval of "
                                                         "throughput_speedup_vs_ref_at (high)"),
    _c("ref_at_baseline", "label", "the reference AT system (cell / strategy) of the speedup_vs_ref_at columns"),
    _c("speed_noise_low", "number", "the A/A control: the baseline timed twice as two systems, their batch-1 "
                                    "time ratio's 95% interval (low); batch-1 ratios (speedup_vs_at, "
                                    "speedup_vs_ct2) inside it are not distinguishable from the control"),
    _c("speed_noise_high", "number", "the A/A control's batch-1 95% interval (high)"),
    _c("throughput_noise_low", "number", "the A/A control in throughput: the baseline's and its twin's "
                                         "large-batch time ratio's 95% interval (low); throughput ratios "
                                         "(throughput_speedup_vs_at, throughput_speedup_vs_ct2) inside it are not "
                                         "distinguishable from the control"),
    _c("throughput_noise_high", "number", "the A/A control's throughput 95% interval (high)"),
    _c("timing_threads", "number", "CPU threads each system decoded with in the timing phase"),
    _c("timing_engine", "label", "the decoding engine each system ran with in the timing phase (speed.engine: eager, "
                                 "static, packed, inductor, aoti; ctranslate2 for a CTranslate2 twin)"),
    _c("timing_engine_packed", "label", "the auto engine's linear weight shapes that took oneDNN's packed product in "
                                        "the timing phase, each from the rows where it measured faster on this CPU "
                                        "(none: every product plain; empty for other engines)"),
    _c("decoder_passes", "number", "decoder passes per sentence at batch 1", "lower", ".1f", required=True,
       header="Passes", secondary=True),
    _c("verifier_passes", "number", "of decoder_passes, those of the AT verifier (speculative decoding; the rest "
                                    "are the drafter's)", "lower", ".1f", header="Verifier passes", secondary=True),
    _c("acceptance_length", "number", "tokens a speculative search keeps per verifier pass, at batch 1 (drafted "
                                      "tokens the AT agreed with, plus its own next token)", "higher", ".2f",
       header="Tokens per verifier pass", secondary=True),
    _c("decode_memory_mb", "number", "peak memory of a large-batch decode above what the process held before it "
                                     "(CPU: peak resident size, freed memory given back to the system first; GPU: "
                                     "torch's allocator, so not measured, empty, for a CTranslate2 twin)",
       "lower", "auto", header="Memory MiB", secondary=True),
    _c("decode_memory_basis", "label", "how decode_memory_mb was read: cuda-allocator or cpu-resident (see "
                                       "decode_memory_mb); empty where it was not measured"),
    _c("timed_equals_evaluated", "number", "the share of the batch-1 timed sentences whose output equals the "
                                           "hypothesis evaluated for them (1: the timed computation is the scored "
                                           "one)", "higher", ".3f", header="Timed = scored %", scale=100.0,
       secondary=True),
    _c("timing_spread", "number", "median over the batch-1 calls of (max - min) / median of their repeated timings"),
    _c("timing_session", "label", "when the timing phase that timed this row ran (UTC): a row's speed-ups were "
                                  "measured beside its task and seed's baseline in that session; rows of different "
                                  "sessions were not timed side by side"),
    _c("timed_with", "label", "the commit of the code that timed this row (`*`: tracked files edited since; empty: "
                              "not recorded, or not timed)"),
)
PROBES = (
    _c("error_propagation", "number", "error propagation, measured causally: the drop in token accuracy after "
                                      "one error is injected (an AT reads back a wrong token; an iterative NAT a "
                                      "wrong kept token in its later passes), over the positions downstream of it; "
                                      "0 when nothing is read back (one-pass NAT, CTC) and for speculative decoding "
                                      "(the error is drafted, and its AT verifier replaces it)", "lower", ".3f",
       header="Error propagation", spread=True),
    _c("error_propagation_ci_low", "number", "95% bootstrap interval of error_propagation over sentences (low)"),
    _c("error_propagation_ci_high", "number", "95% bootstrap interval of error_propagation over sentences (high)"),
    _c("error_propagation_n", "number", "test sentences the injected-error probe measured"),
)
RUN = (
    _c("distill_bleu", "number", "BLEU of the distilled training targets against the references"),
    _c("train_steps", "number", "optimizer steps trained"),
    _c("evaluated_checkpoint", "label", "the weights evaluated: best.ckpt, or averaged.ckpt (the mean of several)"),
    _c("averaged_steps", "label", "the training steps of the checkpoints averaged into the evaluated weights "
                                  "(train.average; only from the last train.average_window of training, past the "
                                  "warm-up), '+'-joined; 'final N': no checkpoint was in that part, the final "
                                  "weights (step N) alone; empty: one checkpoint"),
    _c("val_bleu_evaluated", "number", "validation BLEU (greedy / one pass, as the validation curve) of the "
                                       "evaluated weights: where an average lands against the curve"),
    _c("train_time_s", "number", "training wall time of the cell (s), every attempt of a resumed run counted"),
    _c("train_tokens_per_s", "number", "training speed: target tokens a second of the last training attempt's loop "
                                       "after its first 10 steps (every device's batches), validation left out, "
                                       "checkpoint writes counted (train.json throughput; wall clock, so a paused "
                                       "run's pauses count; empty where not recorded)"),
    _c("trained_with", "label", "the code of each training attempt: git commits in order, `+`-joined, `*` where "
                                "tracked files were edited (train.json attempts; empty where not recorded)"),
    _c("evaluated_with", "label", "the code that evaluated the cell: git commit, `*` where edited (metrics.json)"),
    _c("status", "label", "ok, failed or not run", required=True),
    _c("error", "label", "why the cell failed", required=True),
)
