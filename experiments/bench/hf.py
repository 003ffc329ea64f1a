"""The Hugging Face peer of `atnat bench decode`: a MarianMTModel of our dimensions, decoded by
`generate` with exactly the work our AT strategies do.

Why Marian: it is the encoder-decoder in `transformers` closest to our Transformer (post-LN,
sinusoidal positions, embeddings scaled by sqrt(D), tied input/output embeddings). We set ReLU
(ours) instead of its default SiLU; everything else that costs time is the same shape.

How the amount of work is pinned (so both sides emit exactly L tokens in exactly L decoder passes):
- `min_new_tokens = max_new_tokens = L`: the min-length processor masks EOS for the first L tokens,
  and generation stops at L new tokens; so no row (greedy) or beam (beam search) ever finishes
  early and beam search's early-stopping rule never fires.
- `forced_eos_token_id = None`: Marian's default forces EOS as the last token, which would make
  the L-th token an EOS; we turn it off.
- eos = 2, pad = 0, decoder start = 1 (our ids); sampling off; `use_cache=True` (HF's default
  DynamicCache); beams via `num_beams`, one returned sequence.
`check_output` verifies the shape, that no EOS/pad was emitted, and the decoder-pass count.
"""
from __future__ import annotations

import torch
from torch import Tensor

from atnat.core.errors import AtnatError

INSTALL_HINT = "pip install 'atnat[bench]'"


def available() -> bool:
    """True when `transformers` (with Marian) can be imported."""
    try:
        from transformers import MarianConfig, MarianMTModel  # noqa: F401
    except ImportError:
        return False
    return True


def build_marian(model: dict, vocab_size: int, *, seed: int = 0, dropout: float = 0.0):
    """A random-init, eval-mode MarianMTModel with our dimensions (`model` is a ModelConfig dict) and
    `dropout` where ours has it (after attention, after the FFN, on the embeddings)."""
    from transformers import MarianConfig, MarianMTModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # no advice about generation flags on every call
    cfg = MarianConfig(
        vocab_size=vocab_size, d_model=model["d_model"],
        encoder_layers=model["encoder_layers"], decoder_layers=model["decoder_layers"],
        encoder_attention_heads=model["n_heads"], decoder_attention_heads=model["n_heads"],
        encoder_ffn_dim=model["ffn_dim"], decoder_ffn_dim=model["ffn_dim"],
        activation_function="relu", scale_embedding=True, dropout=dropout,
        max_position_embeddings=model.get("max_positions", 1024),
        pad_token_id=0, eos_token_id=2, bos_token_id=None, forced_eos_token_id=None,
        decoder_start_token_id=1)
    torch.manual_seed(seed)
    return MarianMTModel(cfg).eval()


def generation_config(num_beams: int, out_len: int):
    """The GenerationConfig that pins the work to exactly `out_len` tokens (module docstring)."""
    from transformers import GenerationConfig

    return GenerationConfig(
        do_sample=False, num_beams=num_beams, num_return_sequences=1, early_stopping=False,
        min_new_tokens=out_len, max_new_tokens=out_len, use_cache=True,
        decoder_start_token_id=1, pad_token_id=0, eos_token_id=2, forced_eos_token_id=None)


def generate_fn(hf_model, src: Tensor, num_beams: int, out_len: int):
    """-> a no-argument callable running `generate` on src (B, S); returns ids (B, 1 + out_len)."""
    gen = generation_config(num_beams, out_len)
    mask = torch.ones_like(src)

    def run() -> Tensor:
        return hf_model.generate(input_ids=src, attention_mask=mask, generation_config=gen)
    return run


def count_decoder_passes(hf_model, fn) -> tuple[Tensor, int]:
    """Run fn once with a hook on the decoder stack: -> its output and the decoder calls made."""
    calls = []
    handle = hf_model.get_decoder().register_forward_hook(lambda *_: calls.append(1))
    try:
        out = fn()
    finally:
        handle.remove()
    return out, len(calls)


def peer(hf_model, num_beams: int, src: Tensor, out_len: int):
    """-> (fn, first): `fn` runs generate on src (B, S); `first()` runs it once with the pass
    counter, checks the output and returns passes, tokens_out, slots (systems.System's contract)."""
    fn = generate_fn(hf_model, src, num_beams, out_len)

    def first() -> dict:
        ids, passes = count_decoder_passes(hf_model, fn)
        return dict(passes=passes, tokens_out=check_output(ids, src.size(0), out_len), slots=out_len)
    return fn, first


def check_output(ids: Tensor, batch: int, out_len: int) -> float:
    """Refuse an HF output that is not exactly out_len content tokens per sentence (after the
    decoder-start id), with no EOS or pad; -> tokens per sentence."""
    if tuple(ids.shape) != (batch, 1 + out_len):
        raise AtnatError(f"HF generate returned shape {tuple(ids.shape)}, expected ({batch}, {1 + out_len})")
    new = ids[:, 1:]
    if bool((new == 2).any() | (new == 0).any()):
        raise AtnatError("HF generate emitted EOS or pad inside the forced length")
    return float(out_len)
