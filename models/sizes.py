"""The model-size configuration shared by the encoder and every decoder."""
from __future__ import annotations

from dataclasses import dataclass

from atnat.core.options import require, require_between, require_fraction

# the declared range of each size (from 1): far above any model this project trains, and small enough that
# a typo (or an altered model file) is refused before anything is allocated
RANGES = {"d_model": 16384, "n_heads": 1024, "ffn_dim": 262144, "encoder_layers": 256, "decoder_layers": 256,
          "max_positions": 1 << 20}
MAX_VOCAB = 1 << 22  # vocabulary sizes up to ~4.2 M entries


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
        for name, high in RANGES.items():
            require_between(getattr(self, name), 1, high, "model", name)
        require(self.d_model % self.n_heads == 0, "model", "d_model",
                f"a multiple of n_heads ({self.n_heads}): every head gets d_model / n_heads dimensions", self.d_model)
        require_fraction(self.dropout, "model", "dropout")
        require_fraction(self.attention_dropout, "model", "attention_dropout")
