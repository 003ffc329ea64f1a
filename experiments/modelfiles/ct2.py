"""CTranslate2 as the AT speed peer: `atnat export RUN DIR --format ctranslate2` and a decoding
callable over the exported model (`ct2_decoder`), for the bench and for timing a grid's AT cell.

The converter reads OUR weights into `ctranslate2.specs.TransformerSpec` (no detour through
Marian/fairseq: their loaders assume other special ids): the fused q|k|v rows of our attention are
CTranslate2's fused self-attention projection (cross-attention: q, then the fused k|v rows), the
FFN is linear_0/ReLU/linear_1, each sublayer's LayerNorm sits in the sublayer's spec (post-LN or
pre-LN + final norms), embeddings are scaled by sqrt(D), and the position table is ours (sinusoidal
or learned; CTranslate2's own sinusoid orders sin/cos differently). Vocabulary = our tokenizer's
strings by id (pad=0 <s>=1 </s>=2 <unk>=3 ...); the decoder starts from our BOS.

Search: CTranslate2's greedy equals our Greedy; its beam search equals our Beam where the two
rules coincide (`ct2_options`): length_penalty=1 with the end token counted (return_end_token)
is our length_norm="length" with stopping="fairseq" (it stops a sentence at K finished
hypotheses), and length_penalty=0 is our length_norm="none" for the 1-best. GNMT's
((5+|Y|)/6)^alpha has no CTranslate2 form. One difference stays: CTranslate2 masks a token
(our never-emitted pad/bos/mask/blank, EOS before the minimum length, repeated n-grams) before its
log-softmax, so the other tokens' log-probs are renormalised; ours masks after it. Greedy picks the
same tokens either way; scores differ by log(1 - masked mass) per step, which for a trained model
and the never-emitted tokens is ~0, but for EOS under a minimum length it reorders beams: beam
search with min_len or no_repeat_ngram is refused as not exact.
"""
from __future__ import annotations

import functools
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from atnat.core.errors import AtnatError
from atnat.core.options import build_config
from atnat.decoding.base import STRATEGIES
from atnat.decoding.beam import Beam
from atnat.decoding.greedy import Greedy
from atnat.decoding.lengths import step_budget
from atnat.decoding.processors import forbidden_ids
from atnat.experiments.modelfiles.export import CT2_MARKER, staged, stamp_ct2_export, tokenizer_file
from atnat.experiments.modelfiles.loading import load_module

INSTALL_HINT = "pip install 'atnat[bench]'"
MODEL_FILE = CT2_MARKER  # model.bin
COMPUTE_TYPES = ("float32", "int8")


def available() -> bool:
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        return False
    return True


def require() -> Any:
    try:
        import ctranslate2
    except ImportError as err:
        raise AtnatError(f"CTranslate2 is not installed ({INSTALL_HINT})") from err
    return ctranslate2


def split_device(device: str) -> tuple[str, int]:
    """torch's device string -> CTranslate2's (device, device_index): "cuda:1" -> ("cuda", 1)."""
    kind, _, index = str(device).partition(":")
    return kind, int(index or 0)


def device_problem(device: str) -> str | None:
    """Why CTranslate2 cannot decode on `device` ("cpu", "cuda", "cuda:N") in this process, or None:
    checked before a grid with speed.ct2_baseline trains, not in its timing phase hours later."""
    try:
        ctranslate2 = require()
    except AtnatError as err:
        return str(err)
    kind, index = split_device(device)
    if kind == "cuda":
        count = ctranslate2.get_cuda_device_count()
        if count <= index:
            return (f"CTranslate2 {ctranslate2.__version__} sees {count} CUDA device(s), so it cannot decode on "
                    f"{device} (a CPU-only build, or CUDA libraries that do not match the driver)")
        failure = trial_decode(kind, index)
        if failure:
            return f"CTranslate2 {ctranslate2.__version__} sees the GPU but cannot decode on {device}: {failure}"
    return None


@functools.lru_cache(maxsize=None)
def trial_decode(kind: str, index: int) -> str | None:
    """Why one translation by a one-layer random model fails on the device, or None. CTranslate2's
    wheel links the CUDA runtime statically, so it counts a GPU even where the cuBLAS it loads at its
    first decode (libcublas.so.12 for the 4.x wheels) is missing: only a decode shows that."""
    from atnat.core.special import SpecialTokens
    from atnat.experiments.data.tokenize import SymbolTokenizer
    from atnat.models.seq2seq import Seq2SeqModule

    tokenizer = SymbolTokenizer(["a", "b"])
    with torch.random.fork_rng(devices=[]):  # the caller's random stream stays as it was
        torch.manual_seed(0)
        module = Seq2SeqModule(vocab_size=tokenizer.vocab_size, decoder="at",
                               model={"d_model": 8, "n_heads": 1, "ffn_dim": 8, "encoder_layers": 1,
                                      "decoder_layers": 1, "dropout": 0.0}).eval()
    first = vocabulary(tokenizer, tokenizer.vocab_size)[SpecialTokens().first_ordinary]
    with tempfile.TemporaryDirectory(prefix="atnat-ct2-trial-") as tmp:
        try:
            export_ctranslate2(module, tokenizer, Path(tmp) / "model")
            translator = load_translator(Path(tmp) / "model", device=f"{kind}:{index}")
            translator.translate_batch([[first]], max_decoding_length=2)
        except Exception as err:  # noqa: BLE001 - whatever the library raises is the reason
            return f"{type(err).__name__}: {err}"
    return None


# ---- conversion ----------------------------------------------------------------------------
def vocabulary(tokenizer, vocab_size: int) -> list[str]:
    """Our ids as CTranslate2 token strings (one per id, all distinct)."""
    if getattr(tokenizer, "kind", None) == "sentencepiece":
        tokens = [tokenizer.sp.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    elif getattr(tokenizer, "kind", None) == "symbols":
        tokens = list(tokenizer.symbols)
    else:
        raise AtnatError(f"CTranslate2 export: unknown tokenizer {type(tokenizer).__name__}")
    if len(tokens) != vocab_size:
        raise AtnatError(f"CTranslate2 export: the tokenizer has {len(tokens)} tokens, the model {vocab_size}")
    if len(set(tokens)) != len(tokens):
        raise AtnatError("CTranslate2 export: the vocabulary has duplicate token strings "
                         "(CTranslate2 maps tokens by string)")
    return tokens


def conversion_problem(module) -> str | None:
    """Why CTranslate2 cannot run this model (None if it can)."""
    decoder = module.decoder
    name = getattr(decoder, "registered_name", type(decoder).__name__)
    if "step" not in getattr(decoder, "capabilities", ()) or name != "at":
        return (f"CTranslate2 runs autoregressive Transformer decoders; decoder {name!r} is not the AT "
                "decoder (non-autoregressive decoders have no CTranslate2 form)")
    norms = {m.eps for m in module.modules() if isinstance(m, torch.nn.LayerNorm)}
    if len(norms) > 1:
        return f"CTranslate2 uses one LayerNorm epsilon; this model has {sorted(norms)}"
    return None


def _np(t: torch.Tensor):
    return t.detach().float().cpu().contiguous().numpy()


def _linear(spec, weight, bias) -> None:
    spec.weight = _np(weight)
    spec.bias = _np(bias)


def _norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _np(norm.weight), _np(norm.bias)


def _ffn(spec, ffn, norm) -> None:
    _linear(spec.linear_0, ffn.net[0].weight, ffn.net[0].bias)
    _linear(spec.linear_1, ffn.net[3].weight, ffn.net[3].bias)
    _norm(spec.layer_norm, norm)


def _self_attention(spec, attn, norm) -> None:
    _linear(spec.linear[0], attn.in_weight, attn.in_bias)  # rows q | k | v, as CTranslate2 fuses them
    _linear(spec.linear[1], attn.out_proj.weight, attn.out_proj.bias)
    _norm(spec.layer_norm, norm)


def _cross_attention(spec, attn, norm) -> None:
    d = attn.d
    _linear(spec.linear[0], attn.in_weight[:d], attn.in_bias[:d])  # q
    _linear(spec.linear[1], attn.in_weight[d:], attn.in_bias[d:])  # k | v
    _linear(spec.linear[2], attn.out_proj.weight, attn.out_proj.bias)
    _norm(spec.layer_norm, norm)


def _embedding(spec_side, embed, emb_spec) -> None:
    emb_spec.weight = _np(embed.tokens.weight)
    spec_side.scale_embeddings = True  # x sqrt(D), as TokenEmbedding
    spec_side.position_encodings.encodings = _np(embed.positions[: embed.max_positions])  # (P, D)


def build_spec(module, tokens: list[str]):
    """Our AT module -> a validated `ctranslate2.specs.TransformerSpec`."""
    require()
    from ctranslate2.specs import common_spec, transformer_spec

    problem = conversion_problem(module)
    if problem:
        raise AtnatError(f"cannot export to CTranslate2: {problem}")
    cfg, enc, dec = module.model_cfg, module.encoder, module.decoder
    spec = transformer_spec.TransformerSpec.from_config(
        (cfg.encoder_layers, cfg.decoder_layers), cfg.n_heads, pre_norm=cfg.pre_ln,
        activation=common_spec.Activation.RELU)
    _embedding(spec.encoder, enc.embed, spec.encoder.embeddings[0])
    for layer_spec, layer in zip(spec.encoder.layer, enc.layers):
        _self_attention(layer_spec.self_attention, layer.attn, layer.res_attn.norm)
        _ffn(layer_spec.ffn, layer.ffn, layer.res_ffn.norm)
    _embedding(spec.decoder, dec.embed, spec.decoder.embeddings)
    for layer_spec, layer in zip(spec.decoder.layer, dec.layers):
        _self_attention(layer_spec.self_attention, layer.self_attn, layer.res_self.norm)
        _cross_attention(layer_spec.attention, layer.cross_attn, layer.res_cross.norm)
        _ffn(layer_spec.ffn, layer.ffn, layer.res_ffn.norm)
    if cfg.pre_ln:
        _norm(spec.encoder.layer_norm, enc.final_norm)
        _norm(spec.decoder.layer_norm, dec.final_norm)
    _linear(spec.decoder.projection, dec.output.weight, dec.output.bias)
    sp = module.special
    spec.config.layer_norm_epsilon = next(m.eps for m in module.modules() if isinstance(m, torch.nn.LayerNorm))
    spec.config.unk_token, spec.config.bos_token = tokens[sp.unk], tokens[sp.bos]
    spec.config.eos_token, spec.config.decoder_start_token = tokens[sp.eos], tokens[sp.bos]
    spec.register_source_vocabulary(tokens)
    spec.register_target_vocabulary(tokens)
    spec.validate()
    return spec


def export_ctranslate2(module, tokenizer, out: str | Path, *, quantization: str | None = None) -> Path:
    """Write a CTranslate2 model directory (model.bin, config.json, vocabulary) with our tokenizer
    file beside it (sentencepiece.model or symbols.json) and atnat's stamp (export.py); -> out."""
    out = Path(out)
    spec = build_spec(module, vocabulary(tokenizer, module.decoder.vocab_size))
    spec.optimize(quantization=quantization)
    with staged(out, MODEL_FILE) as stage:  # written whole beside `out`, then put in its place
        spec.save(str(stage))
        name, data = tokenizer_file(tokenizer.to_state())  # the tokenizer whose strings are the vocabulary
        (stage / name).write_bytes(data)
        stamp_ct2_export(stage)
    return out


# ---- search options ------------------------------------------------------------------------
def ct2_options(strategy, special, *, exact: bool = True) -> dict:
    """translate_batch keyword options that run our Greedy / Beam `strategy`. exact=True refuses
    what CTranslate2 would decode differently (naming the nearest setting that matches);
    exact=False maps it to the nearest CTranslate2 search (for timing, not for equality)."""
    if not isinstance(strategy, (Greedy, Beam)):
        raise AtnatError(f"CTranslate2 decodes with greedy or beam search; not with {type(strategy).__name__}")
    if strategy.attention_window is not None:
        raise AtnatError("CTranslate2 has no monotonic attention window (attention_window)")
    opts = dict(beam_size=1, num_hypotheses=1, length_penalty=0.0, min_decoding_length=strategy.min_len,
                no_repeat_ngram_size=strategy.no_repeat_ngram, return_end_token=True, return_scores=True,
                max_input_length=0, patience=1.0)
    if isinstance(strategy, Greedy):
        return opts
    opts.update(beam_size=strategy.beam_size, num_hypotheses=strategy.n_best)
    problem = None
    if strategy.min_len or strategy.no_repeat_ngram:
        problem = ("CTranslate2 renormalises log-probs after masking EOS (min_len) or repeated n-grams "
                   "(no_repeat_ngram), which reorders beams; ours does not")
    if strategy.length_norm == "length":
        opts["length_penalty"] = 1.0
        if strategy.stopping != "fairseq" and not problem:
            problem = (f"with length_norm='length' CTranslate2 stops a sentence at beam_size finished "
                       f"hypotheses: our stopping='fairseq' (not {strategy.stopping!r})")
    elif strategy.length_norm == "none":
        if (strategy.n_best != 1 or strategy.stopping == "fairseq") and not problem:
            problem = ("with length_norm='none' CTranslate2 stops when its best candidate ends, which "
                       "equals ours for n_best=1 with stopping 'heuristic' or 'exact'")
    else:
        opts["length_penalty"] = strategy.alpha  # |Y| ** alpha: the nearest, not GNMT's (5+|Y|)/6
        problem = problem or ("GNMT length penalty ((5+|Y|)/6)^alpha has no CTranslate2 form; length_norm='length' "
                              "with stopping='fairseq' (or length_norm='none' for the 1-best) decodes identically")
    if problem and exact:
        raise AtnatError(f"CTranslate2 cannot run this beam search exactly: {problem} "
                         "(exact=False runs the nearest CTranslate2 search, for timing)")
    return opts


def _suppressed(tokens: list[str], special) -> list[list[str]]:
    return [[tokens[i]] for i in forbidden_ids(special) if i < len(tokens)]


# ---- the decoding callable -----------------------------------------------------------------
@dataclass
class CT2Decoder:
    """Decodes lists of source id lists with CTranslate2 as our `strategy` would: call it on
    sources -> the best output id lists (no BOS/EOS); `n_best` -> [(ids, score)] per sentence.
    Per-sentence length budgets (max_len_a * S + b): greedy runs to the batch's largest budget and
    cuts each output to its own (exact); beam search runs one call per distinct budget when exact,
    else one call at the largest budget (a sentence whose budget binds may then differ)."""

    translator: Any
    tokens: list[str]
    strategy: Any
    special: Any
    options: dict
    exact: bool = True
    model_dir: Path | None = None
    max_output_length: int | None = None  # the model's own cap (its positions), as our search keeps to it
    _keep: Any = field(default=None, repr=False)  # a TemporaryDirectory kept alive with the model
    _index: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self._index = {t: i for i, t in enumerate(self.tokens)}
        self.options = dict(self.options, suppress_sequences=_suppressed(self.tokens, self.special) or None)

    def budgets(self, sources: list[list[int]]) -> list[int]:
        return step_budget(self.strategy, torch.tensor([len(s) for s in sources]), self.max_output_length)[0].tolist()

    def _translate(self, sources: list[list[int]], max_len: int, **extra) -> list:
        src = [[self.tokens[i] for i in s] for s in sources]
        opts = dict(self.options, min_decoding_length=min(self.options["min_decoding_length"], max_len))
        return self.translator.translate_batch(src, max_decoding_length=max_len, **opts, **extra)

    def _ids(self, hyp: list[str]) -> list[int]:
        ids = [self._index[t] for t in hyp]
        return ids[:-1] if ids and ids[-1] == self.special.eos else ids

    def n_best(self, sources: list[list[int]], **extra) -> list[list[tuple[list[int], float]]]:
        """Every sentence's n-best as (ids without EOS, score), best first. extra: more
        translate_batch options (a step callback, for counting passes)."""
        if not sources:
            return []
        budgets = self.budgets(sources)
        greedy = self.options["beam_size"] == 1
        groups = {max(budgets): list(range(len(sources)))} if greedy or not self.exact else {}
        if not groups:
            for i, b in enumerate(budgets):
                groups.setdefault(b, []).append(i)
        out: list = [None] * len(sources)
        for max_len, rows in groups.items():
            results = self._translate([sources[i] for i in rows], max_len, **extra)
            for i, res in zip(rows, results):
                hyps = [(self._ids(h), float(s)) for h, s in zip(res.hypotheses, res.scores)]
                if greedy:  # cut at the sentence's own budget (content tokens, EOS excluded)
                    hyps = [(ids[: budgets[i]], s) for ids, s in hyps]
                out[i] = hyps
        return out

    def __call__(self, sources: list[list[int]]) -> list[list[int]]:
        return [hyps[0][0] for hyps in self.n_best(sources)]


def load_translator(model_dir: str | Path, *, compute_type: str = "float32", device: str = "cpu",
                    threads: int = 1):
    ctranslate2 = require()
    if compute_type not in COMPUTE_TYPES:
        raise AtnatError(f"compute_type {compute_type!r}; valid: {', '.join(COMPUTE_TYPES)}")
    kind, index = split_device(device)
    return ctranslate2.Translator(str(model_dir), device=kind, device_index=index, compute_type=compute_type,
                                  intra_threads=threads, inter_threads=1)


def strategy_from_spec(spec):
    """A strategy object from `{name: greedy | beam, ...}` (or a bare name), its options type-checked."""
    name, opts = (spec, {}) if isinstance(spec, str) else (spec["name"], {k: v for k, v in spec.items() if k != "name"})
    return build_config(STRATEGIES.get(name), opts)


def ct2_decoder(model, strategy, *, compute_type: str = "float32", device: str = "cpu", threads: int = 1,
                exact: bool = True, model_dir: str | Path | None = None) -> CT2Decoder:
    """The API for timing an exported AT beside our own: `model` is a run directory, checkpoint
    or export directory, or a (module, tokenizer) pair; `strategy` a Greedy/Beam object or a spec
    ({"name": "beam", "beam_size": 5, "length_norm": "length", "stopping": "fairseq"}).
    -> CT2Decoder: decoder(list of source id lists) -> list of output id lists. The model is
    converted into `model_dir` (default: a temporary directory that lives as long as the decoder)."""
    module, tokenizer = model if isinstance(model, tuple) else load_module(model)
    if isinstance(strategy, (str, dict)):
        strategy = strategy_from_spec(strategy)
    options = ct2_options(strategy, module.special, exact=exact)
    keep = None
    if model_dir is None:
        keep = tempfile.TemporaryDirectory(prefix="atnat-ct2-")
        model_dir = Path(keep.name) / "model"
    export_ctranslate2(module, tokenizer, model_dir)
    translator = load_translator(model_dir, compute_type=compute_type, device=device, threads=threads)
    return CT2Decoder(translator, vocabulary(tokenizer, module.decoder.vocab_size), strategy, module.special,
                      options, exact=exact, model_dir=Path(model_dir),
                      max_output_length=module.decoder.max_output_length, _keep=keep)


def step_counter() -> tuple[list[int], Callable]:
    """(record, callback) for translate_batch(callback=...) (greedy only): record[0] ends as the
    number of decoder passes (the largest step + 1 over the batch)."""
    record = [0]

    def callback(step_result) -> bool:
        record[0] = max(record[0], step_result.step + 1)
        return False
    return record, callback
