"""`length-beam`: another name for `parallel` with a length beam (default 3), kept for configs that
use it: one parallel pass over l lengths around the predicted one, every candidate kept and ranked
by mean token log-prob (Gu et al. 2018's length beam without a teacher). Same search, same label."""
from __future__ import annotations

from dataclasses import dataclass

from atnat.decoding.base import register_strategy
from atnat.decoding.parallel import Parallel


@register_strategy("length-beam")
@dataclass(frozen=True)
class LengthBeam(Parallel):
    """One parallel pass over l lengths around the predicted one; each sentence keeps all l candidates,
    ranked by mean token log-prob (Gu et al. 2018's length beam without a teacher).

    The same search as `parallel` with `length_beam`, whose label it shares (parallel-lb3)."""

    length_beam: int = 3  # lengths tried per sentence (argmax, -1, +1, ...; never 0)
