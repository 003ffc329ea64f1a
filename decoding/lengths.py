"""Output-length options of the AT strategies (greedy, beam) and their per-sentence budgets.

Max and min lengths count CONTENT tokens, EOS excluded: a sentence with source length S may emit
up to floor(a * S + b) content tokens (at least 1, at most the cap).
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from atnat.core.options import require, require_between
from atnat.core.special import MAX_LEN_B, check_length_rule
from atnat.decoding.base import max_lengths

CAPPED = "output tokens per source token; the output is capped by max_len_cap anyway"


def step_budget(limits: "LengthLimits", src_lengths: Tensor, model_cap: int | None = None) -> tuple[Tensor, int, set[int]]:
    """-> max content tokens per sentence (B,) on src_lengths' device, their maximum T, and the
    set of step counts after which some sentence reaches its maximum (known on the host).
    `model_cap`: the longest output the model can emit (its positions), if it says so."""
    cap = limits.max_len_cap if model_cap is None else min(limits.max_len_cap, model_cap)
    max_len = max_lengths(src_lengths, limits.max_len_a, limits.max_len_b, cap)
    max_len = max_len.to(src_lengths.device)
    return max_len, int(max_len.max()), set(max_len.tolist())


@dataclass(frozen=True)
class LengthLimits:
    """Length options shared by the AT strategies (greedy, beam)."""

    max_len_a: float = 2.0  # max content tokens = floor(a * source length + b) ...
    max_len_b: int = 10  # ... (see max_len_a) ...
    max_len_cap: int = 1024  # ... and never more than this
    min_len: int = 0  # EOS forbidden before this many content tokens
    no_repeat_ngram: int = 0  # forbid repeating any n-gram of this order (0: off)
    attention_window: tuple[int, int] | None = None  # decode-time monotonic cross-attention window
    # (back, forward) around the source position attended last; handed to the model's init_state

    def max_steps(self, src_lengths: Tensor) -> int:
        """The most steps the search can run for these sources (one host sync)."""
        return int(max_lengths(src_lengths, self.max_len_a, self.max_len_b, self.max_len_cap).max())

    def __post_init__(self) -> None:
        owner = f"strategy {self.registered_name!r}"
        for name, low in (("max_len_cap", 1), ("min_len", 0), ("no_repeat_ngram", 0)):
            require_between(getattr(self, name), low, MAX_LEN_B, owner, name)
        check_length_rule(self.max_len_a, self.max_len_b, owner, "max_len", CAPPED)
        w = self.attention_window
        require(w is None or (len(w) == 2 and all(isinstance(x, int) and x >= 0 for x in w)), owner,
                "attention_window", "[back, forward] (integers >= 0)", w)
