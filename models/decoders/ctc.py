"""CTC non-autoregressive decoder (Libovicky & Helcl 2018), optionally with glancing.

The encoder states are upsampled k times (repeat-interleave, or the paper's Linear(D, k D) split
into k states), given target positions, and run through non-causal decoder layers with
cross-attention to the memory. Every slot predicts a token or `blank`; the CTC loss sums over all
alignments, so no length predictor is needed (the output length is whatever survives the collapse).
Shapes: B batch, S source length, T' = k S slots, D model width, V vocabulary (blank included).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from atnat.core.options import require_between
from atnat.models.batch import Batch
from atnat.models.decoders.base import Decoder, register_decoder
from atnat.models.decoders.glancing import GlancingOptions, ctc_viterbi, feed_tokens, glance_positions, glancing_ratio
from atnat.models.encoder import EncoderOut
from atnat.models.losses import Loss, ctc_loss

MAX_UPSAMPLE = 64  # slots per source position, at most (papers use 2-3; its layers run over k S positions)


@dataclass(frozen=True)
class CTCOptions(GlancingOptions):
    """Options of the CTC decoder (plus the glat_* fields of GlancingOptions)."""

    upsample: int = 3  # k: output slots per source position (T' = k S; must allow |y| + repeats)
    upsample_linear: bool = False  # split each state through Linear(D, k D) (the paper) instead of repeating it

    def __post_init__(self):
        super().__post_init__()
        require_between(self.upsample, 1, MAX_UPSAMPLE, "decoder options", "upsample")


@register_decoder("ctc")
class CTCDecoder(Decoder):
    """Upsampled source -> non-causal layers -> per-slot tokens or blank; trained with CTC."""

    capabilities = frozenset({"ctc"})
    Options = CTCOptions

    def __init__(self, cfg, options, **kwargs):
        super().__init__(cfg, options, **kwargs)
        k = options.upsample
        self.split = nn.Linear(cfg.d_model, k * cfg.d_model) if options.upsample_linear else None

    @property
    def max_target_length(self) -> None:
        return None  # a target takes no positions: the slots come from the source (the loss leaves out a longer one)

    @property
    def max_source_length(self) -> int:
        return self.cfg.max_positions // self.options.upsample  # k S slots need k S positions

    def upsample(self, memory: EncoderOut) -> tuple[Tensor, Tensor]:
        """-> slot vectors (B, k S, D) without positions, and their padding mask (B, k S)."""
        k, states = self.options.upsample, memory.states
        if self.split is None:
            slots = states.repeat_interleave(k, dim=1)  # (B, k S, D)
        else:
            b, s, d = states.shape
            slots = self.split(states).view(b, s * k, d)  # (B, S, k D) -> (B, k S, D)
        return slots, memory.padding_mask.repeat_interleave(k, dim=1)  # (B, k S)

    def decode_logits(self, memory: EncoderOut, tokens: Tensor | None = None, glanced: Tensor | None = None,
                      need_weights: bool = False) -> tuple[Tensor, Tensor, list[Tensor | None]]:
        """One pass -> logits (B, T', V), padding mask (B, T'), cross-attention per layer.
        With tokens/glanced (B, T'), the glanced slots read the embedding of their token."""
        vectors, padding_mask = self.upsample(memory)
        if glanced is not None:
            vectors = feed_tokens(vectors, tokens, glanced, self.embed)  # (B, T', D)
        x = self.embed.add_positions(vectors)  # (B, T', D)
        logits, attns = self.run_layers(x, memory, self_mask=~padding_mask[:, None, None, :], causal=False,
                                        need_weights=need_weights)
        return logits, padding_mask, attns

    def forward_ctc(self, memory: EncoderOut) -> tuple[Tensor, Tensor]:
        """-> log-probs (B, T', V) incl. blank, padding mask (B, T') True at pad (the CTCModel protocol)."""
        logits, padding_mask, _ = self.decode_logits(memory)
        return F.log_softmax(logits.float(), -1), padding_mask

    def glance(self, batch: Batch, memory: EncoderOut, step: int) -> tuple[Tensor, Tensor]:
        """GLAT for CTC: the first pass's best alignment of the reference says what each slot should
        emit; floor(ratio * d) random slots (d = Hamming distance between the first pass's argmax
        and that alignment) read it. -> aligned tokens (B, T'), glanced slots (B, T')."""
        with torch.no_grad():
            logits, padding_mask, _ = self.decode_logits(memory)
            log_probs = F.log_softmax(logits.float(), -1)  # (B, T', V)
            aligned, score = ctc_viterbi(log_probs, (~padding_mask).sum(1), batch.tgt, batch.tgt_lengths,
                                         self.special.blank)
        unfit = padding_mask | torch.isinf(score)[:, None]  # a target too long for its slots glances nothing
        glanced = glance_positions(log_probs.argmax(-1), aligned, unfit, glancing_ratio(self.options, step))
        return aligned, glanced

    def loss(self, batch: Batch, memory: EncoderOut, *, step: int = 0) -> dict[str, Loss]:
        aligned = glanced = None
        if self.options.glat and self.training:
            aligned, glanced = self.glance(batch, memory, step)
        logits, padding_mask, attns = self.decode_logits(memory, aligned, glanced,
                                                         need_weights=self.wants_attention)
        log_probs = F.log_softmax(logits.float(), -1)  # (B, T', V)
        tokens, fits = ctc_loss(log_probs, padding_mask, batch.tgt, batch.tgt_lengths, self.special.blank)
        parts = {"tokens": Loss(tokens), "unfit": Loss((~fits).float().mean().detach(), 0.0)}  # (the guard reads it)
        parts.update(self.guided_attention_part(attns, memory, (~padding_mask).sum(1)))
        return parts
