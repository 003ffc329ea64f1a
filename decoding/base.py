"""Strategy interfaces, the model protocols they drive, and the Hypotheses they return.

A strategy is model-agnostic: tests drive it with hand-written probability tables.
Shapes: B batch, N hypotheses kept per sentence, T output length, V vocabulary, L lengths.
"""
from __future__ import annotations

import dataclasses
import functools
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from torch import Tensor

from atnat.core.errors import AtnatError
from atnat.core.registry import Registry
from atnat.core.special import SpecialTokens, length_budget


@dataclass
class Hypotheses:
    """The n-best output of a strategy for a batch.

    tokens: (B, N, T) ids, padded with `pad` after the end; an AT hypothesis ends with EOS when it
        finished, NAT hypotheses carry no EOS. positional_scores: (B, N, T) log-prob of each token,
        0 at padding. scores: (B, N) the ranking score (after length normalisation / penalty), best
        first. lengths: (B, N) tokens per hypothesis, EOS included. n_steps: decoder passes run.
    history: optional per-iteration token snapshots (mask-predict), each (B, T).
    passes: the passes of each model where a strategy runs two ({"drafter": 4, "verifier": 4}); their
        sum is n_steps. accepted: tokens a speculative search accepted per sentence and verifier pass,
        summed over the batch, as (tokens, sentence-passes).
    """

    tokens: Tensor
    positional_scores: Tensor
    scores: Tensor
    lengths: Tensor
    n_steps: int
    history: list[Tensor] | None = None
    passes: dict[str, int] | None = None
    accepted: tuple[int, int] | None = None

    def sequences(self, special: SpecialTokens, n: int = 0) -> list[list[int]]:
        """The n-th best hypothesis of every sentence as a list of ids, without EOS and padding."""
        out = []
        for row, length in zip(self.tokens[:, n].tolist(), self.lengths[:, n].tolist()):
            out.append([t for t in row[:length] if t not in (special.eos, special.pad)])
        return out


class StepModel(Protocol):
    """What AT strategies drive: one incremental decoder step with an explicit, caller-owned state."""

    def init_state(self, memory: Any, *, window: tuple[int, int] | None = None,
                   max_steps: int | None = None) -> Any:
        """The state for decoding the memory's B rows: `window` (back, forward) restricts
        cross-attention to a band that only moves forward; `max_steps` bounds the steps the
        search will run (a fixed-shape cache may use it)."""

    max_output_length: int | None  # the most tokens an output can have (its positions); None: no cap

    def step(self, prev_tokens: Tensor, state: Any) -> tuple[Tensor, Any]:
        """prev_tokens (B,) -> log_probs (B, V) over the next token, and the new state."""

    def reorder_state(self, state: Any, order: Tensor) -> Any:
        """Select/duplicate batch rows of the state: order (B',) indexes the current batch. Consumes
        `state` (the result may reuse its buffers, or reorder them in place): use only the result."""


class ParallelModel(Protocol):
    """What NAT strategies drive: a length distribution and one parallel decoder pass."""

    def predict_length(self, memory: Any) -> Tensor:
        """-> (B, Lmax+1) log-probs over absolute target lengths 0..Lmax."""

    def forward_parallel(self, tokens: Tensor, memory: Any, padding_mask: Tensor) -> Tensor:
        """tokens (B, T) decoder inputs (mask ids where unknown), padding_mask (B, T) True at pad
        -> log_probs (B, T, V)."""

    def reorder_memory(self, memory: Any, order: Tensor) -> Any:
        """Select/duplicate batch rows of the encoder memory: order (B',)."""


class CTCModel(Protocol):
    """What the CTC strategy drives: one pass over the upsampled source, no length prediction."""

    def forward_ctc(self, memory: Any) -> tuple[Tensor, Tensor]:
        """-> log_probs (B, T', V) over output slots incl. blank, padding_mask (B, T') True at pad."""


class DAGModel(Protocol):
    """What the DAG strategies drive: one pass that returns a graph of vertices (DA-Transformer)."""

    def forward_dag(self, memory: Any) -> tuple[Tensor, Tensor, Tensor]:
        """-> token log_probs per vertex (B, L, V), link log-probs (B, L, L) from vertex i to j (-inf
        unless i < j within the graph), padding_mask (B, L) True at pad. A path runs from vertex 0 to
        each row's last vertex; those two emit bos and eos."""


class BlockVerifier(Protocol):
    """An AT model checking proposed tokens (speculative decoding): per row, one cached pass over a
    block gives the next-token distribution after each of its prefixes. Owned by one search: a
    strategy takes `verifier=`, a function that builds a fresh one for its batch."""

    max_output_length: int | None  # the most content tokens an output can have; None: no cap

    def step_block(self, tokens: Tensor, start: Tensor) -> Tensor:
        """tokens (R, J) at positions start (R,) .. start + J - 1 of each row's decoder input (BOS at
        0) -> log_probs (R, J, V) over the token after each; keys past what a row keeps are rewritten."""

    def keep(self, rows: Tensor) -> None:
        """Keep only batch rows `rows` (R',), in that order."""


class SequenceScorer(Protocol):
    """An AT model scoring given candidates in one teacher-forced pass (NPD re-ranking)."""

    def score_sequences(self, memory: Any, tokens: Tensor, padding_mask: Tensor) -> Tensor:
        """tokens (B, T) without BOS/EOS -> (B,) sum of log-probs incl. the final EOS."""


class Strategy(ABC):
    """Base of all search strategies. Subclasses are frozen dataclasses whose fields are options.

    `requires` names the model capability the strategy drives ("step", "parallel", "ctc", "dag");
    a decoder lists its capabilities, and a mismatch is refused when a config is read and again
    before decoding (`compatibility_problem`). A strategy describes itself: `label` names it in
    tables and file names, `needs_scorer` says it re-ranks with an AT teacher (it then takes
    `scorer=`), `needs_verifier` that an AT teacher checks its drafts (it then takes `verifier=`).
    """

    requires: ClassVar[str] = ""
    needs_scorer: ClassVar[bool] = False
    needs_verifier: ClassVar[bool] = False
    registered_name: ClassVar[str] = ""
    label_options: ClassVar[tuple[str, ...]] = ()  # options `short_label` already shows

    @property
    def uses_teacher(self) -> bool:
        """Whether the strategy runs an AT teacher beside the decoder it drives (npd, speculative)."""
        return self.needs_scorer or self.needs_verifier

    @property
    def short_label(self) -> str:
        """The readable part of the label: greedy, beam5, mask-predict-4-lb3 ... (subclasses)."""
        return self.registered_name

    @property
    def label(self) -> str:
        """The system's name in tables and file names: `short_label` and every other option that
        differs from its default (`beam5-alpha=0.6`), so two different searches never share a label.
        A field with `metadata={"in_label": False}` (what is recorded, not how it decodes) is left out."""
        return self.short_label + "".join(f"-{name}={label_value(value)}" for name, value in self.non_defaults())

    def non_defaults(self) -> list[tuple[str, Any]]:
        """(option, value) of the options set away from their defaults, beyond `label_options`."""
        out = []
        for f in dataclasses.fields(self):
            if f.name in self.label_options or not f.metadata.get("in_label", True):
                continue
            default = f.default if f.default is not dataclasses.MISSING else (
                f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
            value = getattr(self, f.name)
            if default is dataclasses.MISSING or value != default:
                out.append((f.name, value))
        return out

    def problem_with(self, decoder: Any) -> str | None:
        """Why this strategy cannot drive `decoder` (a decoder instance), or None."""
        return compatibility_problem(type(decoder), decoder.options, self)

    def checked_search(self, model: Any, memory: Any, *, src_lengths: Tensor, special: SpecialTokens,
                       **kwargs: Any) -> Hypotheses:
        """`search`, its output checked against the Hypotheses contract (`checked_hypotheses`): what the model
        assembly calls, so that a strategy that breaks the contract is named where it does."""
        hyps = self.search(model, memory, src_lengths=src_lengths, special=special, **kwargs)
        return checked_hypotheses(hyps, self, int(src_lengths.shape[0]))

    @abstractmethod
    def search(self, model: Any, memory: Any, *, src_lengths: Tensor, special: SpecialTokens) -> Hypotheses:
        """Decode a batch from the encoder memory (B rows). src_lengths (B,) source lengths (for
        length budgets a * S + b)."""


def label_value(value: Any) -> str:
    """An option's value as a label shows it: 0.6, true, 2x3, none."""
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (tuple, list)):
        return "x".join(label_value(v) for v in value)
    return str(value)


def compatibility_problem(decoder_cls: Any, options: Any, strategy: Strategy) -> str | None:
    """Why `strategy` cannot drive a decoder of class `decoder_cls` built with `options` (None if
    it can): the one check behind config validation and decoding, answered once per (decoder class,
    options, strategy) and remembered. The decoder class is duck-typed (capabilities, registered_name,
    strategy_problem), so decoding/ never imports models/."""
    try:
        return _remembered_problem(decoder_cls, options, strategy)
    except TypeError:  # options or a strategy that cannot be hashed: asked each time
        return _compatibility_problem(decoder_cls, options, strategy)


@functools.lru_cache(maxsize=512)
def _remembered_problem(decoder_cls: Any, options: Any, strategy: Strategy) -> str | None:
    return _compatibility_problem(decoder_cls, options, strategy)


def _compatibility_problem(decoder_cls: Any, options: Any, strategy: Strategy) -> str | None:
    name = strategy.registered_name or type(strategy).__name__
    if strategy.requires not in decoder_cls.capabilities:
        usable = [n for n in STRATEGIES.names() if STRATEGIES.get(n).requires in decoder_cls.capabilities]
        return (f"strategy {name!r} cannot drive decoder {decoder_cls.registered_name!r}: it needs the capability "
                f"{strategy.requires!r}, the decoder has {sorted(decoder_cls.capabilities)}; "
                f"usable: {', '.join(usable)}")
    return decoder_cls.strategy_problem(options, strategy)


def checked_hypotheses(hyps: Any, strategy: Strategy, batch_size: int) -> Hypotheses:
    """`hyps`, what `strategy.search` returned for a batch of `batch_size` sentences, when it is a Hypotheses of
    consistent shapes (tokens and positional_scores (B, N, T), scores and lengths (B, N), 0 <= lengths <= T): a
    strategy that breaks the contract is named here, not by a shape error in whatever reads its output next."""
    where = f"strategy {strategy.registered_name or type(strategy).__name__!r} ({type(strategy).__module__})"
    if not isinstance(hyps, Hypotheses):
        raise AtnatError(f"{where}: search() returned {type(hyps).__name__}, not atnat.decoding.base.Hypotheses")
    tokens = hyps.tokens
    problem = None
    if not isinstance(tokens, Tensor) or tokens.dim() != 3 or tokens.shape[0] != batch_size:
        problem = (f"tokens must be (B, N, T) with B = {batch_size} sentences, not "
                   f"{tuple(tokens.shape) if isinstance(tokens, Tensor) else type(tokens).__name__}")
    else:
        b, n, t = tokens.shape
        for field, want in (("positional_scores", (b, n, t)), ("scores", (b, n)), ("lengths", (b, n))):
            value = getattr(hyps, field)
            if not isinstance(value, Tensor) or tuple(value.shape) != want:
                problem = (f"{field} must be {want} beside tokens {(b, n, t)}, not "
                           f"{tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__}")
                break
        else:
            if bool(((hyps.lengths < 0) | (hyps.lengths > t)).any()):
                problem = f"lengths must lie in 0..T = {t} (tokens per hypothesis, EOS included), not {hyps.lengths.tolist()}"
    if problem:
        raise AtnatError(f"{where}: search() returned Hypotheses whose {problem}")
    return hyps


def strategy_problem(cls: type) -> str | None:
    """Why `cls` cannot be a strategy: its options are dataclass fields (labels, configs and `atnat list` read
    them), and `requires` names the capability it drives."""
    if not dataclasses.is_dataclass(cls):
        return ("a strategy is a dataclass whose fields are its options: decorate it with @dataclass(frozen=True), "
                "written below @register_strategy so that it applies first")
    if not (isinstance(cls.requires, str) and cls.requires):
        return ("its `requires` must name the decoder capability it drives (\"step\", \"parallel\", \"ctc\", \"dag\" or "
                f"a plugin decoder's own), not {cls.requires!r}")
    return None


STRATEGIES: Registry[Strategy] = Registry("strategy", Strategy, entry_point_group="atnat.strategies",
                                          check=strategy_problem)
register_strategy = STRATEGIES.register


def max_lengths(src_lengths: Tensor, a: float, b: int, cap: int) -> Tensor:
    """Per-sentence output budget `a * S + b`, at least 1 and at most cap: (B,) long."""
    return length_budget(src_lengths, a, b, cap)
