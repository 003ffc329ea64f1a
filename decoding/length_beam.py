"""`length-beam`: one parallel pass over l lengths around the predicted one; every candidate kept."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from torch import Tensor

from atnat.core.options import require_positive
from atnat.core.special import SpecialTokens
from atnat.decoding.base import Hypotheses, Strategy, register_strategy
from atnat.decoding.candidates import decode_lengths, predicted_lengths


@register_strategy("length-beam")
@dataclass(frozen=True)
class LengthBeam(Strategy):
    """One parallel pass over l lengths around the predicted one; each sentence keeps all l candidates,
    ranked by mean token log-prob (Gu et al. 2018's length beam without a teacher)."""

    requires: ClassVar[str] = "parallel"

    length_beam: int = 3  # lengths tried per sentence (argmax, -1, +1, ...; never 0)

    def __post_init__(self) -> None:
        require_positive(f"strategy {self.registered_name!r}", length_beam=self.length_beam)

    @property
    def label(self) -> str:
        return f"{self.registered_name}-{self.length_beam}"

    def search(self, model: Any, memory_or_state: Any, *, src_lengths: Tensor,
               special: SpecialTokens) -> Hypotheses:
        """-> Hypotheses (B, length_beam, T), n_steps = 1."""
        lengths = predicted_lengths(model, memory_or_state, self.length_beam)
        return decode_lengths(model, memory_or_state, lengths, special)
