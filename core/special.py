"""Token ids every vocabulary in atnat shares, and the output-length budget floor(a * S + b)."""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from atnat.core.options import require_between, require_number_between

MAX_LEN_A = 1000.0  # tokens per source token, at most: beyond, a * S + b overflowed into one-token outputs
MAX_LEN_B = 100_000  # tokens beyond a * source length, at most

NEG_INF = float("-inf")  # the score of a masked choice


@dataclass(frozen=True)
class SpecialTokens:
    """Ids of the special symbols every vocabulary in atnat has (ids below `first_ordinary`)."""

    pad: int = 0  # padding; never predicted
    bos: int = 1  # first decoder input of an AT decoder
    eos: int = 2  # end of sentence; emitted by AT decoders, absent from NAT outputs
    unk: int = 3  # unknown piece
    mask: int = 4  # masked slot (CMLM, NAT mask inputs)
    blank: int = 5  # CTC blank

    @property
    def first_ordinary(self) -> int:
        """The smallest id of an ordinary token (a word piece or symbol)."""
        return max(self.pad, self.bos, self.eos, self.unk, self.mask, self.blank) + 1


def check_length_rule(a, b, owner: str, prefix: str, why: str = "") -> None:
    """`<prefix>_a` and `<prefix>_b` of a length_budget rule, bounded (a value beyond overflowed mid-decode)."""
    require_number_between(a, 0, MAX_LEN_A, owner, f"{prefix}_a", why)
    require_between(b, 0, MAX_LEN_B, owner, f"{prefix}_b")


def length_budget(src_lengths: Tensor, a: float, b: float, cap: int | None = None) -> Tensor:
    """floor(a * S + b) per source length S, at least 1 (and at most `cap`): (B,) long on the
    lengths' device. The one formula behind AT maximum lengths and fixed-length NAT slots."""
    out = (src_lengths.float() * a + b).floor().long().clamp(min=1)
    return out if cap is None else out.clamp(max=cap)
