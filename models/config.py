"""The model-size configuration shared by the encoder and every decoder."""
from __future__ import annotations

from dataclasses import dataclass


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
