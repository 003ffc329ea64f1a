"""The decoder interface every decoder family implements, the shared decoder layer, the registry.

A decoder is one file: subclass `Decoder`, set `capabilities` and `Options`, decorate with
`@register_decoder("name")`. Capabilities name what strategies can drive it: "step" (AT search),
"parallel" (NAT strategies with a length distribution), "ctc" (CTC collapse).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from atnat.core.errors import AtnatError
from atnat.core.options import require_fraction, require_non_negative, require_positive
from atnat.core.registry import Registry
from atnat.core.special import SpecialTokens
from atnat.models.batch import Batch
from atnat.models.encoder import EncoderOut
from atnat.models.layers import FeedForward, MultiHeadAttention, OutputProjection, Residual, TokenEmbedding
from atnat.models.losses import Loss, guided_attention_loss
from atnat.models.sizes import ModelConfig


def guided_attention_problem(loss_cfg: "LossConfig", cfg: ModelConfig) -> str | None:
    """Why the guided layers or heads do not exist in a model of `cfg` (None when they do)."""
    for what, chosen, n, owner in (("layer", loss_cfg.guided_attention_layers, cfg.decoder_layers, "the decoder"),
                                   ("head", loss_cfg.guided_attention_heads or (), cfg.n_heads, "the model")):
        for i in chosen:
            if not -n <= i < n:
                return (f"loss: guided_attention_{what}s names {what} {i} but {owner} has {n} {what}{'s' * (n != 1)} "
                        f"(0 to {n - 1}, or -{n} to -1)")
    return None


@dataclass(frozen=True)
class NoOptions:
    """A decoder without options of its own."""


@dataclass(frozen=True)
class LossConfig:
    """Loss settings common to all decoders."""

    label_smoothing: float = 0.1  # epsilon of label-smoothed cross-entropy (at, nat, cmlm; ctc and dag have none)
    length_weight: float = 0.1  # weight of the length-prediction loss (NAT decoders)
    guided_attention_weight: float = 0.0  # weight of the diagonal-prior cross-attention loss; 0 = off
    guided_attention_sigma: float = 0.2  # width g of the diagonal prior
    guided_attention_layers: tuple[int, ...] = (-1,)  # decoder layers whose cross-attention is guided
    guided_attention_heads: tuple[int, ...] | None = None  # heads guided (None = all)

    def __post_init__(self) -> None:
        require_fraction(self.label_smoothing, "loss", "label_smoothing")
        require_non_negative("loss", length_weight=self.length_weight,
                             guided_attention_weight=self.guided_attention_weight)
        require_positive("loss", guided_attention_sigma=self.guided_attention_sigma)


class DecoderLayer(nn.Module):
    """Self-attention (causal for AT, full for NAT) -> cross-attention -> FFN, each residual."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.ffn_dim, cfg.dropout)
        self.res_self = Residual(cfg.d_model, cfg.dropout, cfg.pre_ln)
        self.res_cross = Residual(cfg.d_model, cfg.dropout, cfg.pre_ln)
        self.res_ffn = Residual(cfg.d_model, cfg.dropout, cfg.pre_ln)

    def forward(self, x: Tensor, memory: EncoderOut, *, self_mask: Tensor | None, causal: bool,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """x (B, T, D) -> (B, T, D) and the cross-attention weights (B, H, T, S) if asked."""
        x, _ = self.res_self(x, lambda h: self.self_attn(h, h, mask=self_mask, is_causal=causal))
        x, weights = self.res_cross(x, lambda h: self.cross_attn(
            h, memory.states, mask=memory.attn_mask, need_weights=need_weights))
        x, _ = self.res_ffn(x, lambda h: (self.ffn(h), None))
        return x, weights


# the strategy validation decodes with, by the decoder's capability (Decoder.validation_strategy)
VALIDATION_STRATEGIES = {"step": "greedy", "parallel": "parallel", "ctc": "ctc", "dag": "dag-lookahead"}


class Decoder(nn.Module, ABC):
    """Base of every decoder family.

    Training contract: `loss(batch, memory, step=) -> dict[str, Loss]`. Inference contracts are
    the protocols in atnat.decoding.base (StepModel, ParallelModel, CTCModel) per capability.
    """

    capabilities: ClassVar[frozenset[str]] = frozenset()
    Options: ClassVar[type] = NoOptions
    registered_name: ClassVar[str] = ""

    def __init__(self, cfg: ModelConfig, options: Any, *, embed: TokenEmbedding, vocab_size: int,
                 special: SpecialTokens, loss_cfg: LossConfig):
        super().__init__()
        self.cfg, self.options, self.special, self.loss_cfg = cfg, options, special, loss_cfg
        self.embed = embed
        self.vocab_size = vocab_size
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        problem = guided_attention_problem(loss_cfg, cfg)
        if problem:
            raise AtnatError(problem)
        self.final_norm = nn.LayerNorm(cfg.d_model) if cfg.pre_ln else nn.Identity()
        self.output = OutputProjection(cfg.d_model, vocab_size)
        self.record_attention = False  # probes set this to keep the last layer's cross-attention
        self.recorded_attention: Tensor | None = None
        if cfg.tie_embeddings:
            self.output.weight = embed.tokens.weight

    @classmethod
    def strategy_problem(cls, options: Any, strategy: Any) -> str | None:
        """Why `strategy` cannot decode a decoder built with `options` (None if it can). Checked
        when a config is read and before decoding, beyond the capability match."""
        return None

    @classmethod
    def validation_strategy(cls, options: Any) -> dict:
        """The strategy validation decodes with (a {name: ..., options} spec): by default the plainest
        strategy of the decoder's first capability (VALIDATION_STRATEGIES); a decoder of another capability
        overrides this."""
        for capability in sorted(cls.capabilities):
            if capability in VALIDATION_STRATEGIES:
                return {"name": VALIDATION_STRATEGIES[capability]}
        raise AtnatError(f"decoder {cls.__name__} (capabilities {', '.join(sorted(cls.capabilities))}) has no default "
                         f"validation strategy (there is one for {', '.join(VALIDATION_STRATEGIES)}): override "
                         "validation_strategy(options) to return a strategy spec such as {'name': ...}")

    @abstractmethod
    def loss(self, batch: Batch, memory: EncoderOut, *, step: int = 0) -> dict[str, Loss]:
        """Named, weighted loss parts for one batch (logged as {stage}/{name})."""

    def run_layers(self, x: Tensor, memory: EncoderOut, *, self_mask: Tensor | None, causal: bool,
                   need_weights: bool = False) -> tuple[Tensor, list[Tensor | None]]:
        """All layers over a full sequence: x (B, T, D) -> logits (B, T, V), cross-attn per layer."""
        guided = {i % len(self.layers) for i in self.loss_cfg.guided_attention_layers}
        last = len(self.layers) - 1
        attns = []
        for i, layer in enumerate(self.layers):
            want = (need_weights and i in guided) or (self.record_attention and i == last)
            x, w = layer(x, memory, self_mask=self_mask, causal=causal, need_weights=want)
            attns.append(w)
        if self.record_attention:
            self.recorded_attention = attns[last]  # (B, H, T, S), for probes and figures
        return self.output(self.final_norm(x)), attns

    def guided_attention_part(self, attns: list[Tensor | None], memory: EncoderOut,
                              tgt_lengths: Tensor) -> dict[str, Loss]:
        """The diagonal-prior loss on the guided layers/heads, or nothing when it is off."""
        if self.loss_cfg.guided_attention_weight <= 0:
            return {}
        heads = self.loss_cfg.guided_attention_heads
        maps = [a if heads is None else a[:, list(heads)] for a in attns if a is not None]
        value = torch.stack([guided_attention_loss(a, memory.lengths, tgt_lengths,
                                                   self.loss_cfg.guided_attention_sigma) for a in maps]).mean()
        return {"guided_attention": Loss(value, self.loss_cfg.guided_attention_weight)}

    @property
    def max_source_length(self) -> int:
        """The longest source (in tokens) the model can decode: the positional table the encoder
        shares with the decoder. Decoders whose slots grow with the source (CTC, fixed-length
        NAT) state less; output lengths are kept within the table by the decoder and decode()."""
        return self.cfg.max_positions

    @property
    def max_target_length(self) -> int | None:
        """The longest target (in tokens, without EOS) the loss can teacher-force: one position a token. None
        where targets take no positions (their slots come from the source: CTC, DAG)."""
        return self.cfg.max_positions

    @property
    def wants_attention(self) -> bool:
        return self.loss_cfg.guided_attention_weight > 0

    def use_static_cache(self, enabled: bool = True, compile_mode: str | None = None) -> None:
        """Decode with a fixed-shape, optionally compiled, incremental step (AT decoders; see
        AutoregressiveDecoder). A decoder without an incremental step refuses."""
        if enabled:
            raise AtnatError(f"a compiled step applies to decoders with an incremental step (capability 'step'); "
                             f"decoder {self.registered_name!r} has {sorted(self.capabilities)}")

    @property
    def predicts_length(self) -> bool:
        """True when the decoder has a length predictor (NAT decoders driven by "parallel")."""
        return False

    @contextmanager
    def recording_attention(self):
        """Within the block, every full pass keeps its last layer's cross-attention; yields a
        function returning the latest one (B, H, T, S), or None before any pass (probes, figures)."""
        self.record_attention, self.recorded_attention = True, None
        try:
            yield lambda: self.recorded_attention
        finally:
            self.record_attention, self.recorded_attention = False, None


# what each capability's strategies call (the protocols of decoding/base.py, by name: models/ imports nothing of decoding/)
CAPABILITY_METHODS = {"step": ("init_state", "step", "reorder_state"),
                      "parallel": ("predict_length", "forward_parallel", "reorder_memory"),
                      "ctc": ("forward_ctc",), "dag": ("forward_dag",)}


def capability_problem(cls: type) -> str | None:
    """Why a decoder class cannot be registered: a capability it declares whose methods it does not define
    (a strategy would fail on it mid-decode, after training)."""
    for capability in sorted(getattr(cls, "capabilities", ())):
        missing = [m for m in CAPABILITY_METHODS.get(capability, ()) if not callable(getattr(cls, m, None))]
        if missing:
            return (f"it declares the capability {capability!r} but does not define {', '.join(missing)} (what the "
                    "strategies that drive it call: decoding/base.py's protocols)")
    return None


DECODERS: Registry[Decoder] = Registry("decoder", Decoder, entry_point_group="atnat.decoders", check=capability_problem)
register_decoder = DECODERS.register
