"""Training losses, each returned as a named, weighted part of the total."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor


@dataclass
class Loss:
    """One named part of the training objective: total = sum(weight * value).

    A part with weight 0 is only logged (e.g. an accuracy)."""

    value: Tensor
    weight: float = 1.0


def loss_parts_problem(parts: object) -> str | None:
    """Why `parts`, what a decoder's `loss` returned, is not a non-empty {name: Loss(0-dim tensor, weight)} (None
    when it is)."""
    if not isinstance(parts, dict) or not parts:
        return f"loss() must return a non-empty dict {{name: Loss(value, weight)}}, not {type(parts).__name__}"
    for name, part in parts.items():
        if not isinstance(name, str):
            return f"loss() returned a part named {name!r}; parts are named by strings (logged as train/<name>)"
        if not isinstance(part, Loss):
            return (f"loss() returned part {name!r} as {type(part).__name__}; wrap it: "
                    f"Loss(value, weight) from atnat.models.losses")
        if not isinstance(part.value, Tensor) or part.value.dim() != 0:
            return (f"loss part {name!r} must hold a 0-dim tensor (a mean), not "
                    f"{tuple(part.value.shape) if isinstance(part.value, Tensor) else type(part.value).__name__}")
    return None


def total_loss(parts: dict[str, Loss]) -> Tensor:
    weighted = [p.weight * p.value for p in parts.values() if p.weight != 0]
    if not weighted:
        raise ValueError("no loss part has a non-zero weight")
    return torch.stack(weighted).sum()


def label_smoothed_nll(log_probs: Tensor, target: Tensor, *, smoothing: float, ignore_index: int,
                       mask: Tensor | None = None) -> Tensor:
    """Mean label-smoothed NLL over non-ignored positions.

    log_probs (..., V), target (...). Smoothing spreads `smoothing` uniformly over the vocabulary
    (Szegedy et al. 2016). `mask` (...) True selects the positions that count (default: target !=
    ignore_index).
    """
    keep = target.ne(ignore_index) if mask is None else mask & target.ne(ignore_index)  # (...)
    safe = target.masked_fill(~keep, 0)  # (...) any valid id where not counted
    nll = -log_probs.gather(-1, safe.unsqueeze(-1)).squeeze(-1)  # (...)
    smooth = -log_probs.mean(-1)  # (...)
    per_token = torch.where(keep, (1.0 - smoothing) * nll + smoothing * smooth, 0.0)  # (...)
    # a masked sum, not log_probs[keep]: boolean indexing sizes its output on the host (a device sync)
    return per_token.sum() / keep.sum().clamp(min=1)


def token_accuracy(log_probs: Tensor, target: Tensor, ignore_index: int) -> Tensor:
    keep = target.ne(ignore_index)
    correct = (log_probs.argmax(-1) == target) & keep
    return correct.sum().float() / keep.sum().clamp(min=1)


def ctc_fits(input_lengths: Tensor, target: Tensor, target_lengths: Tensor) -> Tensor:
    """(B,) True where a target can be emitted at all in its input's slots: one slot per token and one blank
    between each two equal neighbours (CTC collapses repeats), so length + repeats <= slots."""
    positions = torch.arange(1, target.size(1), device=target.device)[None, :]  # (1, T-1)
    repeats = ((target[:, 1:] == target[:, :-1]) & (positions < target_lengths[:, None])).sum(1)
    return input_lengths >= target_lengths + repeats


def ctc_loss(log_probs: Tensor, input_mask: Tensor, target: Tensor, target_lengths: Tensor,
             blank: int) -> tuple[Tensor, Tensor]:
    """CTC (Graves et al. 2006) per-token-normalised loss, the mean over the sentences whose target fits its
    slots (ctc_fits), and those rows (B,). A target that does not fit has no alignment: it is left out of the
    mean (counted by the caller), not a zero that dilutes the others' loss.

    log_probs (B, T', V), input_mask (B, T') True at padding, target (B, T) padded.
    """
    input_lengths = (~input_mask).sum(1)
    fits = ctc_fits(input_lengths, target, target_lengths)
    loss = F.ctc_loss(log_probs.transpose(0, 1).float(), target, input_lengths, target_lengths,  # (T', B, V)
                      blank=blank, reduction="none", zero_infinity=True)
    per_token = (loss / target_lengths.clamp(min=1)).masked_fill(~fits, 0.0)
    return per_token.sum() / fits.sum().clamp(min=1), fits


def guided_attention_weights(src_lengths: Tensor, tgt_lengths: Tensor, s_max: int, t_max: int,
                             sigma: float) -> Tensor:
    """Diagonal-prior penalty W[t, s] = 1 - exp(-(s/S - t/T)^2 / (2 sigma^2)) (Tachibana et al.
    2018), zero at padding: (B, T, S)."""
    s = torch.arange(s_max, device=src_lengths.device).float()[None, None, :]  # (1, 1, S)
    t = torch.arange(t_max, device=src_lengths.device).float()[None, :, None]  # (1, T, 1)
    S = src_lengths.float().clamp(min=1)[:, None, None]
    T = tgt_lengths.float().clamp(min=1)[:, None, None]
    w = 1.0 - torch.exp(-((s / S - t / T) ** 2) / (2 * sigma**2))  # (B, T, S)
    valid = (s < S) & (t < T)
    return w * valid


def guided_attention_loss(attn: Tensor, src_lengths: Tensor, tgt_lengths: Tensor, sigma: float) -> Tensor:
    """attn (B, H, T, S) cross-attention weights -> the prior-weighted attention mass per target position:
    each (sentence, head)'s sum over its valid (t, s) cells divided by its target length T, then the mean over
    sentences and heads (0 on the diagonal, below 1 everywhere)."""
    b, _, t_max, s_max = attn.shape
    w = guided_attention_weights(src_lengths, tgt_lengths, s_max, t_max, sigma)  # (B, T, S)
    penalty = (attn * w.unsqueeze(1)).sum((-1, -2))  # (B, H)
    return (penalty / tgt_lengths.float().clamp(min=1)[:, None]).mean()
