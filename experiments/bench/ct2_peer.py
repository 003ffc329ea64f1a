"""The CTranslate2 peer of `atnat bench decode`: OUR random-weight AT module converted by
experiments/ct2.py (so both sides run the same weights), decoded by `translate_batch` in float32
(`ct2-f32`) and int8 (`ct2-int8`, CTranslate2's int8 weights with float32 activations elsewhere)
with exactly the work our AT strategies do.

Pinned work: `min_decoding_length = max_decoding_length = L` (EOS masked for L steps, stop at L),
`return_end_token=False`, the same never-emitted ids suppressed as ours (pad, bos, mask, blank),
beams via `beam_size`, one hypothesis. `check_output` refuses any output that is not exactly L
tokens without EOS. Decoder passes are counted with the step callback for greedy; CTranslate2
has no callback for beam search, so its pass count stays empty there.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from torch import Tensor

from atnat.core.errors import AtnatError
from atnat.core.special import SpecialTokens
from atnat.experiments.data.tokenize import SymbolTokenizer
from atnat.experiments.modelfiles import ct2  # the converter (experiments/ct2.py), not this module

INSTALL_HINT = ct2.INSTALL_HINT
SYSTEMS = {"ct2-f32": "float32", "ct2-int8": "int8"}  # bench system name -> compute type


def available() -> bool:
    return ct2.available()


def device_problem(device: str) -> str | None:
    """Why CTranslate2 cannot run on `device` here (None if it can): modelfiles/ct2.py's one check."""
    return ct2.device_problem(device)


class Peer:
    """Our AT module converted once into a temporary CTranslate2 directory; one Translator per
    compute type, all with the bench's thread count."""

    def __init__(self, module, *, device: str, threads: int):
        vocab = module.decoder.vocab_size
        tokenizer = SymbolTokenizer([f"t{i}" for i in range(vocab - SpecialTokens().first_ordinary)])
        self.tokens = ct2.vocabulary(tokenizer, vocab)
        self._dir = tempfile.TemporaryDirectory(prefix="atnat-bench-ct2-")
        path = Path(self._dir.name) / "model"
        ct2.export_ctranslate2(module, tokenizer, path)
        self.translators = {name: ct2.load_translator(path, compute_type=ctype, device=device, threads=threads)
                            for name, ctype in SYSTEMS.items()}
        self.suppress = [[self.tokens[i]] for i in (module.special.pad, module.special.bos,
                                                    module.special.mask, module.special.blank)]

    def peer(self, system: str, beams: int, src: Tensor, out_len: int):
        """-> (fn, first) for systems.System: fn translates src (B, S) (as token strings, built
        once); first() runs it once, counting passes (greedy), and checks the output."""
        translator = self.translators[system]
        source = [[self.tokens[i] for i in row] for row in src.tolist()]
        opts = dict(beam_size=beams, num_hypotheses=1, min_decoding_length=out_len,
                    max_decoding_length=out_len, max_input_length=0, suppress_sequences=self.suppress)

        def fn():
            return translator.translate_batch(source, **opts)

        def first() -> dict:
            passes = float("nan")
            if beams == 1:
                record, callback = ct2.step_counter()
                results = translator.translate_batch(source, callback=callback, **opts)
                passes = record[0]
            else:
                results = fn()
            return dict(passes=passes, tokens_out=check_output(results, len(source), out_len), slots=out_len)
        return fn, first


def check_output(results, batch: int, out_len: int) -> float:
    """Refuse a CTranslate2 output that is not exactly out_len tokens per sentence without EOS;
    -> tokens per sentence."""
    if len(results) != batch:
        raise AtnatError(f"CTranslate2 returned {len(results)} results for {batch} sentences")
    lengths = {len(r.hypotheses[0]) for r in results}
    if lengths != {out_len} or any("</s>" in r.hypotheses[0] for r in results):
        raise AtnatError(f"CTranslate2 emitted lengths {sorted(lengths)}, expected exactly {out_len} tokens and no EOS")
    return float(out_len)
