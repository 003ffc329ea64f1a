"""The arithmetic of one training step, for MFU (`atnat bench train`) and for sizing a grid: the
matrix-multiply FLOPs of the encoder, the decoder and the output projection on the padded shapes
the device computes, and the dense bf16 peak of the GPU that runs them.

A multiply-add is 2 FLOPs; a backward pass costs twice its forward pass. Per batch of B sentences
padded to S source positions and T decoder positions (D model width, F FFN width, V vocabulary,
Le / Ld layers):

    encoder  = Le * (2 B S (4 D^2 + 2 D F)  +  4 B S^2 D)
    decoder  = Ld * (2 B T (4 D^2 + 2 D^2 + 2 D F)  +  2 B S 2 D^2  +  4 B T^2 D  +  4 B T S D)  +  2 B T D V
               (self-attention q k v o, cross-attention q o, FFN on the T positions; cross-attention k v
               on the S memory states; the score and weighted-sum products of self- and cross-attention;
               the vocabulary projection)
    step     = 3 (encoder + decoder)  +  extra_passes * decoder

T is what the decoder runs on: the target length + 1 for AT (BOS y / y EOS), the target length for
NAT and CMLM, k S slots for CTC (upsample k: its slots, not its targets, set the work), the graph's
floor(lambda S) + 2 vertices for the DAG decoder, which also scores links between every two vertices
(query and key projections of [state; position], 2 (2 B T 2D D), and their product, 2 B T^2 D); GLAT's
glancing pass, and scheduled sampling's first pass, are one extra decoder forward without backward
(`extra_passes`). Left out: biases, layer norms, softmaxes, embedding look-ups, the length
predictor (D (2 max_offset + 1) per sentence), CTC's loss and Viterbi alignment, the DAG's link gate
(2D -> H per vertex) and its path dynamic programmes, the optimizer. (The DAG's link scores run in
float32, yet MFU divides them by the bf16 peak like the rest.) A causal self-attention is counted
whole (what SDPA's math kernel computes). `6 x parameters x target tokens`, the rule this replaces,
ignores the source side (the encoder, and cross-attention's keys and values) and CTC's slots: it
undercounts every seq2seq step.
"""
from __future__ import annotations

import re

from atnat.models.decoders.dag import graph_size

# dense (no sparsity) bf16 tensor-core peaks in TFLOPS, from NVIDIA's data sheets, by a pattern of the
# name torch.cuda.get_device_name gives; the first match wins, so the specific forms come first
PEAKS: tuple[tuple[str, float], ...] = (
    (r"H100.*PCIe", 756.0),  # H100 PCIe (350 W)
    (r"H100.*NVL", 835.0),  # H100 NVL (one card of the pair)
    (r"H100.*(SXM|HBM3)", 989.0),  # H100 SXM5 ("NVIDIA H100 80GB HBM3")
    (r"GH200", 989.0),
    (r"H200.*NVL", 835.0),
    (r"H200", 989.0),  # H200 SXM ("NVIDIA H200")
    (r"A100", 312.0),  # A100, SXM4 and PCIe alike
)


def peak_tflops(device_name: str) -> float | None:
    """The dense bf16 peak of a GPU from its name, or None when the name does not say which card it
    is (an "H100" without PCIe/NVL/SXM/HBM3: the three differ by up to 30%): give --peak-tflops."""
    return next((value for pattern, value in PEAKS if re.search(pattern, device_name, re.IGNORECASE)), None)


def decoder_positions(decoder: str, tgt_len: int, src_len: int, upsample: float = 3) -> int:
    """T of the formula: the positions a decoder family runs its layers on for a target of tgt_len."""
    if decoder == "at":
        return tgt_len + 1
    if decoder == "ctc":
        return int(upsample * src_len)
    if decoder == "dag":
        return graph_size(src_len, upsample)
    return tgt_len


def forward_flops(*, d_model: int, ffn_dim: int, vocab: int, encoder_layers: int, decoder_layers: int,
                  batch: int, src_len: int, dec_len: int) -> tuple[int, int]:
    """(encoder, decoder) forward FLOPs of one padded batch (B, S) -> (B, T); see the module docstring."""
    D, F, V, B, S, T = d_model, ffn_dim, vocab, batch, src_len, dec_len
    encoder = encoder_layers * (2 * B * S * (4 * D * D + 2 * D * F) + 4 * B * S * S * D)
    decoder = decoder_layers * (2 * B * T * (6 * D * D + 2 * D * F) + 2 * B * S * 2 * D * D
                                + 4 * B * T * T * D + 4 * B * T * S * D) + 2 * B * T * D * V
    return encoder, decoder


def train_step_flops(model: dict, *, vocab: int, decoder: str, batch: int, src_len: int, tgt_len: int,
                     upsample: float = 3, extra_passes: int = 0) -> int:
    """FLOPs of one training step: 3 x (encoder + decoder) forward + `extra_passes` decoder forwards
    (GLAT, scheduled sampling); `model` holds ModelConfig fields (d_model, ffn_dim, encoder_layers,
    decoder_layers)."""
    T, D = decoder_positions(decoder, tgt_len, src_len, upsample), model["d_model"]
    encoder, dec = forward_flops(d_model=D, ffn_dim=model["ffn_dim"], vocab=vocab,
                                 encoder_layers=model["encoder_layers"], decoder_layers=model["decoder_layers"],
                                 batch=batch, src_len=src_len, dec_len=T)
    if decoder == "dag":  # the link scores: query and key projections, then their product
        dec += 2 * (2 * batch * T * 2 * D * D) + 2 * batch * T * T * D
    return 3 * (encoder + dec) + extra_passes * dec
