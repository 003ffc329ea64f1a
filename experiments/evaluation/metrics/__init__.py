"""Evaluation metrics for AT vs NAT decoding, in four families.

- quality: corpus BLEU/chrF with bootstrap CIs, paired significance, exact match (sacrebleu).
- error_propagation: accuracy by position, first errors, alignments, conditional error rate,
  prefix-corruption effect, BLEU by reference length.
- nat: repetition rate, length accuracy, variant mixing (multi-modality).
- speed: median timing with CUDA synchronisation, peak and current memory.

The registered metrics (the columns of results.csv) are row.py's. Importing this package imports each of
its modules, so a new metric is one new file here (register_metric), or a plugin.
"""
from atnat.core.registry import import_package_modules
from atnat.experiments.evaluation.metrics.error_propagation import (
    ConditionalError,
    accuracy_by_position,
    align,
    bleu_by_length,
    closest_references,
    conditional_error_rate,
    corruption_effect,
    first_error_distribution,
    first_error_positions,
)
from atnat.experiments.evaluation.metrics.nat import (
    LengthAccuracy,
    length_accuracy,
    repetition_rate,
    variant_mixing_rate,
    variant_mixing_tokens,
)
from atnat.experiments.evaluation.metrics.quality import (
    Quality,
    corpus_quality,
    exact_match,
    holm,
    paired_significance,
    tokenized_bleu,
)
from atnat.experiments.evaluation.metrics.speed import Timing, current_rss_mb, measure, peak_memory_mb, reset_peak

import_package_modules(__name__, __path__)

__all__ = [
    "ConditionalError",
    "LengthAccuracy",
    "Quality",
    "Timing",
    "accuracy_by_position",
    "align",
    "bleu_by_length",
    "closest_references",
    "conditional_error_rate",
    "corpus_quality",
    "corruption_effect",
    "current_rss_mb",
    "exact_match",
    "first_error_distribution",
    "first_error_positions",
    "holm",
    "length_accuracy",
    "measure",
    "paired_significance",
    "peak_memory_mb",
    "repetition_rate",
    "reset_peak",
    "tokenized_bleu",
    "variant_mixing_rate",
    "variant_mixing_tokens",
]
