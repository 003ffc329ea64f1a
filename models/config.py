"""The model-size configuration shared by the encoder and every decoder."""
from __future__ import annotations

from dataclasses import dataclass

from atnat.core.options import require, require_at_least, require_fraction


@dataclass(frozen=True)
class ModelConfig:
    """Transformer dimensions and regularisation (defaults: a small model that trains on CPU)."""

    d_model: int = 256  # model width D
    n_heads: int = 4  # attention heads H
    ffn_dim: int = 1024  # inner width of the position-wise feed-forward layer
    encoder_layers: int = 3  # encoder depth
    decoder_layers: int = 3  # decoder depth
    dropout: float = 0.1  # dropout on sublayer outputs and embeddings
    attention_dropout: float = 0.0  # dropout on attention weights
    pre_ln: bool = False  # pre-LayerNorm (stabler) instead of the paper's post-LN
    learned_positions: bool = False  # learned instead of sinusoidal positional encodings
    tie_embeddings: bool = True  # share source, target and output-projection embeddings
    max_positions: int = 1024  # longest sequence the positional table covers

    def __post_init__(self) -> None:
        for name in ("d_model", "n_heads", "ffn_dim", "encoder_layers", "decoder_layers", "max_positions"):
            require_at_least(getattr(self, name), 1, "model", name)
        require(self.d_model % self.n_heads == 0, "model", "d_model",
                f"a multiple of n_heads ({self.n_heads}): every head gets d_model / n_heads dimensions", self.d_model)
        require_fraction(self.dropout, "model", "dropout")
        require_fraction(self.attention_dropout, "model", "attention_dropout")
