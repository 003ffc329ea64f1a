"""Vanilla non-autoregressive Transformer (Gu et al. 2018), optionally with glancing (GLAT).

Every target slot is predicted at once from non-causal decoder layers. The decoder inputs are a
uniform copy of the source (here: of the encoder output states, since the memory carries no
source embeddings) or mask-token embeddings, plus target positions. The length is either
predicted (a LengthPredictor over offsets) or fixed to floor(a * S + b) slots ending in EOS.
`ParallelDecoder` is the shared base of this decoder and the CMLM.
Shapes: B batch, S source length, T target slots, D model width, V vocabulary.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from atnat.core.errors import AtnatError
from atnat.core.options import require_choice
from atnat.core.special import check_length_rule, length_budget
from atnat.models.batch import Batch
from atnat.models.decoders.base import Decoder, register_decoder
from atnat.models.decoders.glancing import GlancingOptions, feed_tokens, glance_positions, glancing_ratio
from atnat.models.encoder import EncoderOut, lengths_to_padding_mask
from atnat.models.length import LengthOptions, LengthPredictor
from atnat.models.losses import Loss, label_smoothed_nll, token_accuracy

INPUTS = ("copy", "mask")
LENGTHS = ("predict", "fixed")


@dataclass(frozen=True)
class NATOptions(GlancingOptions, LengthOptions):
    """Options of the vanilla NAT (plus the glat_* fields of GlancingOptions and length_max_offset
    of LengthOptions, used with length: predict)."""

    inputs: str = "copy"  # "copy": uniform copy of the encoder states; "mask": mask-token embeddings
    length: str = "predict"  # "predict": length predictor; "fixed": floor(a*S+b) slots, y then EOS
    fixed_len_a: float = 2.0  # "fixed": a (must equal the strategy parallel's fixed_len_a)
    fixed_len_b: int = 10  # "fixed": b (must equal the strategy parallel's fixed_len_b)

    def __post_init__(self):
        GlancingOptions.__post_init__(self)
        LengthOptions.__post_init__(self)
        require_choice(self.inputs, INPUTS, "decoder options", "inputs")
        require_choice(self.length, LENGTHS, "decoder options", "length")
        check_length_rule(self.fixed_len_a, self.fixed_len_b, "decoder options", "fixed_len", "slots per source token")


def uniform_copy_index(src_lengths: Tensor, padding_mask: Tensor) -> Tensor:
    """Slot j of a T_b-slot target reads source position round(j (S_b - 1) / (T_b - 1)) (0 when
    T_b = 1; rounding half up): (B,) source lengths, (B, T) True at pad -> (B, T) indices."""
    tgt_lengths = (~padding_mask).sum(1)  # (B,)
    j = torch.arange(padding_mask.size(1), device=padding_mask.device).float()[None, :]  # (1, T)
    step = (src_lengths - 1).clamp(min=0).float() / (tgt_lengths - 1).clamp(min=1).float()  # (B,)
    index = torch.floor(j * step[:, None] + 0.5).long()  # (B, T)
    return index.clamp(max=(src_lengths - 1).clamp(min=0)[:, None]).masked_fill(padding_mask, 0)


class ParallelDecoder(Decoder):
    """Base of decoders driven by the NAT strategies (the ParallelModel protocol): one non-causal
    pass over given input tokens, a length predictor, and the shared loss parts.

    A subclass writes `loss(batch, memory, step=)` and gets: `forward_parallel`, `predict_length`
    and `reorder_memory` (what the strategies drive); `input_vectors` (mask embeddings, or with
    input_mode "copy" the uniformly copied encoder states); `decode_logits` (one pass); `all_mask`;
    and the loss parts `token_parts`, `length_parts` and `finish` (the graded pass plus every part).
    Its `Options` subclass LengthOptions (length_max_offset of the length predictor)."""

    capabilities = frozenset({"parallel"})
    Options: ClassVar[type] = LengthOptions
    input_mode: ClassVar[str] = "mask"  # "mask" or "copy": what a slot holding `mask` reads

    @classmethod
    def strategy_problem(cls, options, strategy) -> str | None:
        if getattr(strategy, "length", "predicted") == "fixed":
            return (f"strategy parallel with length: fixed needs a nat trained with length: fixed (a "
                    f"{cls.registered_name or cls.__name__} has a length predictor and never learned to emit END); "
                    "use length: predicted")
        return None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if not (isinstance(cls.Options, type) and issubclass(cls.Options, LengthOptions)):
            raise TypeError(f"{cls.__name__}.Options must subclass atnat.models.length.LengthOptions (it "
                            "declares length_max_offset, which the length predictor reads), e.g. "
                            "@dataclass(frozen=True) class MyOptions(LengthOptions): ...")

    def __init__(self, cfg, options, **kwargs):
        super().__init__(cfg, options, **kwargs)
        self.length_predictor = (LengthPredictor(cfg.d_model, options.length_max_offset)
                                 if self.predicts_length else None)

    @property
    def predicts_length(self) -> bool:
        return True

    # ---- the ParallelModel protocol ----------------------------------------------------------
    def forward_parallel(self, tokens: Tensor, memory: EncoderOut, padding_mask: Tensor) -> Tensor:
        """tokens (B, T) (mask where unknown), padding_mask (B, T) True at pad -> log-probs (B, T, V)."""
        logits, _ = self.decode_logits(tokens, memory, padding_mask)
        return F.log_softmax(logits.float(), -1)

    def predict_length(self, memory: EncoderOut) -> Tensor:
        """-> (B, Lmax+1) log-probs over absolute target lengths (length 0 at -inf), Lmax at most
        max_positions: a longer output has no positions, so those lengths are not offered."""
        if self.length_predictor is None:
            raise AtnatError(
                f"decoder {self.registered_name!r} was built with length: fixed and has no length "
                "predictor; decode it with strategy 'parallel' and length: fixed (same fixed_len_a/b)")
        return self.length_predictor.log_probs_absolute(memory)[:, : self.cfg.max_positions + 1]

    def reorder_memory(self, memory: EncoderOut, order: Tensor) -> EncoderOut:
        return memory.index_select(order)

    # ---- the pass ----------------------------------------------------------------------------
    def input_vectors(self, tokens: Tensor, memory: EncoderOut, padding_mask: Tensor) -> Tensor:
        """Decoder inputs before positions (B, T, D): token embeddings; in copy mode the slots
        holding `mask` read the uniformly copied encoder states instead."""
        if self.input_mode == "mask":
            return self.embed.tokens(tokens) * self.embed.scale  # (B, T, D)
        index = uniform_copy_index(memory.lengths, padding_mask)  # (B, T)
        copied = memory.states.gather(1, index.unsqueeze(-1).expand(-1, -1, memory.states.size(-1)))  # (B, T, D)
        known = tokens.ne(self.special.mask) & ~padding_mask
        return feed_tokens(copied, tokens, known, self.embed)

    def decode_logits(self, tokens: Tensor, memory: EncoderOut, padding_mask: Tensor,
                      need_weights: bool = False) -> tuple[Tensor, list[Tensor | None]]:
        """One pass: tokens (B, T) -> logits (B, T, V) and the cross-attention maps per layer."""
        x = self.embed.add_positions(self.input_vectors(tokens, memory, padding_mask))  # (B, T, D)
        self_mask = ~padding_mask[:, None, None, :]  # (B, 1, 1, T)
        return self.run_layers(x, memory, self_mask=self_mask, causal=False, need_weights=need_weights)

    def all_mask(self, padding_mask: Tensor) -> Tensor:
        """(B, T) True at pad -> inputs (B, T): `mask` everywhere, `pad` at padding."""
        return torch.full(padding_mask.shape, self.special.mask, dtype=torch.long,
                          device=padding_mask.device).masked_fill(padding_mask, self.special.pad)

    # ---- loss parts --------------------------------------------------------------------------
    def token_parts(self, log_probs: Tensor, targets: Tensor, counted: Tensor) -> dict[str, Loss]:
        """Label-smoothed CE and accuracy over the slots `counted` (B, T) of log_probs (B, T, V)."""
        pad = self.special.pad
        kept = targets.masked_fill(~counted, pad)  # (B, T) pad = not counted
        return {"tokens": Loss(label_smoothed_nll(log_probs, kept, smoothing=self.loss_cfg.label_smoothing,
                                                  ignore_index=pad)),
                "token_accuracy": Loss(token_accuracy(log_probs.detach(), kept, pad), 0.0)}

    def length_parts(self, memory: EncoderOut, tgt_lengths: Tensor) -> dict[str, Loss]:
        """The weighted length loss and the logged exact-length accuracy."""
        ce, accuracy = self.length_predictor.loss(memory, tgt_lengths)
        return {"length": Loss(ce, self.loss_cfg.length_weight), "length_accuracy": Loss(accuracy, 0.0)}

    def finish(self, inputs: Tensor, targets: Tensor, counted: Tensor, padding_mask: Tensor,
               memory: EncoderOut, tgt_lengths: Tensor) -> dict[str, Loss]:
        """The graded pass on `inputs` and all loss parts (tokens on `counted` slots, length, guided)."""
        logits, attns = self.decode_logits(inputs, memory, padding_mask, need_weights=self.wants_attention)
        parts = self.token_parts(F.log_softmax(logits.float(), -1), targets, counted)
        if self.length_predictor is not None:
            parts.update(self.length_parts(memory, tgt_lengths))
        parts.update(self.guided_attention_part(attns, memory, tgt_lengths))
        return parts


@register_decoder("nat")
class NATDecoder(ParallelDecoder):
    """Vanilla NAT; with glat=True, glancing training (Qian et al. 2021)."""

    Options = NATOptions

    @property
    def input_mode(self) -> str:
        return self.options.inputs

    @classmethod
    def strategy_problem(cls, options, strategy) -> str | None:
        fixed = getattr(strategy, "length", "predicted") == "fixed"
        if options.length == "fixed":
            if not fixed:
                return ("nat with length: fixed has no length predictor and learned to end with END tokens; "
                        "decode it with strategy parallel and length: fixed")
            if (strategy.fixed_len_a, strategy.fixed_len_b) != (options.fixed_len_a, options.fixed_len_b):
                return (f"strategy parallel uses fixed_len_a/b = {strategy.fixed_len_a}/{strategy.fixed_len_b} but the "
                        f"decoder was trained with {options.fixed_len_a}/{options.fixed_len_b}; set them equal")
            return None
        return super().strategy_problem(options, strategy)

    @classmethod
    def validation_strategy(cls, options) -> dict:
        if options.length == "fixed":
            return {"name": "parallel", "length": "fixed", "fixed_len_a": options.fixed_len_a,
                    "fixed_len_b": options.fixed_len_b}
        return super().validation_strategy(options)

    @property
    def predicts_length(self) -> bool:
        return self.options.length == "predict"

    @property
    def max_source_length(self) -> int:
        """"fixed": the largest S whose floor(a * S + b) slots fit the positional table."""
        limit, o = self.cfg.max_positions, self.options
        if o.length != "fixed":
            return limit
        fits = length_budget(torch.arange(limit + 1), o.fixed_len_a, o.fixed_len_b) <= limit  # (limit+1,)
        return int(fits.nonzero().max()) if bool(fits.any()) else 0

    def training_targets(self, batch: Batch) -> tuple[Tensor, Tensor]:
        """-> targets (B, T) and their padding mask. "fixed": floor(a*S+b) slots holding y (cut to
        the slots if longer) then EOS; "predict": y itself."""
        if self.predicts_length:
            return batch.tgt, lengths_to_padding_mask(batch.tgt_lengths, batch.tgt.size(1))
        o = self.options
        slots = length_budget(batch.src_lengths, o.fixed_len_a, o.fixed_len_b)  # (B,)
        T = int(slots.max())
        y = F.pad(batch.tgt[:, :T], (0, max(0, T - batch.tgt.size(1))), value=self.special.pad)  # (B, T)
        positions = torch.arange(T, device=y.device)[None, :]  # (1, T)
        targets = torch.where(positions < batch.tgt_lengths[:, None], y, self.special.eos)
        padding_mask = positions >= slots[:, None]  # (B, T)
        return targets.masked_fill(padding_mask, self.special.pad), padding_mask

    def glance(self, inputs: Tensor, targets: Tensor, memory: EncoderOut, padding_mask: Tensor,
               step: int) -> tuple[Tensor, Tensor]:
        """GLAT: a pass without gradient, then reveal floor(ratio * d) reference tokens.
        -> second-pass inputs (B, T) and the slots the loss counts (the non-glanced ones)."""
        with torch.no_grad():
            logits, _ = self.decode_logits(inputs, memory, padding_mask)
        ratio = glancing_ratio(self.options, step)
        glanced = glance_positions(logits.argmax(-1), targets, padding_mask, ratio)  # (B, T)
        return torch.where(glanced, targets, inputs), ~padding_mask & ~glanced

    def loss(self, batch: Batch, memory: EncoderOut, *, step: int = 0) -> dict[str, Loss]:
        targets, padding_mask = self.training_targets(batch)
        inputs, counted = self.all_mask(padding_mask), ~padding_mask
        if self.options.glat and self.training:
            inputs, counted = self.glance(inputs, targets, memory, padding_mask, step)
        tgt_lengths = batch.tgt_lengths.minimum((~padding_mask).sum(1))  # "fixed": y cut to the slots
        return self.finish(inputs, targets, counted, padding_mask, memory, tgt_lengths)
