"""Decoding engines (experiments/modelfiles/engines.py): every exact engine decodes the tokens eager
decodes, greedy and beam 5, at batch 1 and on a padded batch whose sentences end at different steps;
the packed linear layers also for the NAT decoders (parallel, mask-predict, CTC); bf16 runs and says
it is not exact; int8 models take the engines that apply to them; a compiled step is compiled in
this process and never loaded from disk. The compiling engines (inductor, aoti) are `slow`."""
from __future__ import annotations

import copy
import os
import zipfile

import pytest
import torch

from atnat.core.engine_names import DEFAULT_ENGINE, ENGINES, OPTIONS, parse_engine, touches
from atnat.core.errors import AtnatError
from atnat.decoding.beam import Beam
from atnat.decoding.ctc_search import CTC
from atnat.decoding.dag_walk import DAGGreedy, DAGLookahead, DAGViterbi
from atnat.decoding.greedy import Greedy
from atnat.decoding.mask_predict import MaskPredict
from atnat.decoding.parallel import Parallel
from atnat.experiments.modelfiles import aoti
from atnat.experiments.modelfiles.engines import apply_engine
from atnat.experiments.modelfiles.packed import PackedLinear
from atnat.experiments.modelfiles.quantize import quantize_int8
from atnat.models.seq2seq import Seq2SeqModule
from tests.test_static_step import SMALL, eos_prone_model

V = 40  # eos_prone_model's vocabulary
STRATEGIES = {"greedy": Greedy(max_len_a=1.0, max_len_b=2, min_len=1),
              "beam5": Beam(beam_size=5, max_len_a=1.0, max_len_b=2, min_len=1)}


def at_model() -> Seq2SeqModule:
    """A random AT model whose outputs end at different steps (tests/test_static_step.py's)."""
    return eos_prone_model()


def nat_model(decoder: str, **options) -> Seq2SeqModule:
    torch.manual_seed(3)
    return Seq2SeqModule(vocab_size=V, decoder=decoder, model=SMALL, decoder_options=options or None).eval()


def batches() -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Batch 1, and 6 sentences padded to 4 lengths."""
    g = torch.Generator().manual_seed(2)
    src = torch.randint(6, V, (6, 8), generator=g)  # (B, S)
    src[3, 6:] = 0
    src[4, 5:] = 0
    src[5, 3:] = 0
    lengths = src.ne(0).sum(1)
    return {"b1": (src[:1], lengths[:1]), "padded": (src, lengths)}


def assert_same_tokens(model, engine: str, strategies: dict, *, decode_twice: bool = True, scores: bool = True):
    """The model with `engine` decodes every strategy and batch with the tokens (and lengths, and
    decoder passes) of the eager model."""
    engined = copy.deepcopy(model)
    info = apply_engine(engined, engine)
    assert info.exact and engined.engine_info is info
    for name, strategy in strategies.items():
        for batch, (src, lengths) in batches().items():
            with torch.inference_mode():
                ref = model.decode(src, lengths, strategy)
                for _ in range(2 if decode_twice else 1):  # the second reuses buffers / compiled code
                    out = engined.decode(src, lengths, strategy)
                    assert torch.equal(out.tokens, ref.tokens), f"{engine} {name} {batch}: tokens differ"
                    assert torch.equal(out.lengths, ref.lengths) and out.n_steps == ref.n_steps
                    if scores:
                        torch.testing.assert_close(out.scores, ref.scores, atol=1e-4, rtol=1e-4)
    return info


def test_the_padded_batch_ends_at_different_steps():
    """What makes the exactness tests bite: rows finish (EOS) at different steps, beams reorder."""
    src, lengths = batches()["padded"]
    with torch.inference_mode():
        for strategy in STRATEGIES.values():
            out = at_model().decode(src, lengths, strategy)
            assert len(set(out.lengths[:, 0].tolist())) >= 3


@pytest.mark.parametrize("engine", ["static", "static+fused", "packed", "packed+onednn"])
def test_exact_eager_engines_decode_the_tokens_of_eager(engine):
    info = assert_same_tokens(at_model(), engine, STRATEGIES)
    if engine.startswith("packed"):
        assert info.swapped > 0
    assert info.compile_s != info.compile_s  # nothing compiled: NaN


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["inductor", "aoti", "aoti+fused", "aoti+autotune+fused", "aoti+cppgemm+fused"])
def test_compiled_engines_decode_the_tokens_of_eager(engine):
    info = assert_same_tokens(at_model(), engine, STRATEGIES)
    built = sorted(r.what for r in info.records)
    steps = [w for w in built if "group" in w]
    assert len(steps) == 2 and info.compile_s > 0  # greedy (group 1) and beam 5 (group 5), each compiled once
    assert built == steps + (["encoder pass"] if engine.startswith("aoti") else [])  # aoti compiles the encoder too


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["aoti", "auto"])
def test_compiled_nat_passes_decode_the_tokens_of_eager(engine):
    """The encoder and each NAT decoder's pass as one package with dynamic batch and lengths: the
    same tokens as eager at batch 1 and on the padded batch, with length beams and iterations."""
    for decoder, options, strategies in NAT_CASES:
        info = assert_same_tokens(nat_model(decoder, **options), engine, strategies, decode_twice=False)
        kind = pass_kind(decoder)
        assert sorted(r.what for r in info.records) == sorted(["encoder pass", f"{kind} pass"])


@pytest.mark.slow
def test_auto_decodes_the_tokens_of_eager_with_a_compiled_step_for_one_sentence_only():
    """auto = packed+onednn everywhere, and the aoti+fused step for single-sentence AT decodes: the
    batch-1 decodes run the compiled package (traced through the packed layers' plain products),
    the padded batch of 6 the packed eager step; tokens and scores are eager's either way."""
    info = assert_same_tokens(at_model(), "auto", STRATEGIES)
    assert info.swapped > 0 and info.exact and not info.fallback
    assert sorted(r.what for r in info.records) == ["at step, group 1", "at step, group 5", "encoder pass"]


def traced_not_compiled(monkeypatch) -> list[str]:
    """PackageCache.get_or_compile replaced by the traced module itself (no export, no compile):
    the wiring of the compiled engines - which calls go to a package, with which tensors - in
    milliseconds. -> the names of the packages asked for."""
    asked = []

    def fake(self, what, fields, build, configs, context=None):
        asked.append(what)
        module = build().module
        return (lambda *tensors: module(*tensors)), aoti.CompileRecord(what, "", True, 0.0, 0.0)

    monkeypatch.setattr(aoti.PackageCache, "get_or_compile", fake)
    return asked


def test_auto_compiles_where_single_sentences_are_decoded_and_packs_only_elsewhere(monkeypatch):
    """auto with step_rows=1 (the timing phase): the encoder's package for every batch, the AT step's
    for the one-sentence decode only (the padded batch of 6 grows its cache, packed); step_rows=0
    (translate in batches): no package at all. Tokens are eager's throughout."""
    asked = traced_not_compiled(monkeypatch)
    model = at_model()
    src, lengths = batches()["padded"]
    for rows, expected in ((1, ["encoder pass"]), (0, [])):
        asked.clear()
        engined = copy.deepcopy(model)
        info = apply_engine(engined, "auto", step_rows=rows)
        with torch.inference_mode():
            for strategy in STRATEGIES.values():
                ref, out = model.decode(src, lengths, strategy), engined.decode(src, lengths, strategy)
                assert torch.equal(out.tokens, ref.tokens) and torch.equal(out.lengths, ref.lengths)
        assert sorted(set(asked)) == expected and info.swapped > 0
    engined = copy.deepcopy(model)
    apply_engine(engined, "auto")
    asked.clear()
    single = {"b1": batches()["b1"]}
    with torch.inference_mode():
        for strategy in STRATEGIES.values():
            for src, lengths in single.values():
                assert torch.equal(engined.decode(src, lengths, strategy).tokens, model.decode(src, lengths, strategy).tokens)
    assert sorted(set(asked)) == ["at step, group 1", "at step, group 5", "encoder pass"]


def test_a_package_serves_only_a_model_that_computes_the_same(monkeypatch):
    """Packages were keyed by weights, class and sizes: a NAT whose masked slots read copied encoder states
    (inputs: copy) and one that reads mask embeddings, with equal weights, shared one package, so the second
    decoded with the first one's pass. The package cache's own keying and reuse, the compile replaced by
    the traced module."""
    class Traced(aoti.PackageCache):
        def get_or_compile(self, what, fields, build, configs, context=None):
            key = self.key({**fields, "configs": configs})
            if key not in self.runners:
                module = build().module
                self.runners[key] = ((lambda *tensors: module(*tensors)), 0.0)
                return self.runners[key][0], aoti.CompileRecord(what, key, True, 0.0, 0.0)
            return self.runners[key][0], aoti.CompileRecord(what, key, False, 0.0, 0.0)

    cache, (src, lengths) = Traced(), batches()["padded"]
    for inputs in ("copy", "mask"):
        model = nat_model("nat", inputs=inputs)
        engined = copy.deepcopy(model)
        info = apply_engine(engined, "aoti", cache=cache)
        with torch.inference_mode():
            assert torch.equal(engined.decode(src, lengths, Parallel()).tokens, model.decode(src, lengths, Parallel()).tokens)
        assert [r.compiled for r in info.records if r.what.startswith("parallel")] == [True]  # its own package


NAT_CASES = [
    ("nat", {}, {"parallel": Parallel(), "parallel-lb3": Parallel(length_beam=3)}),
    ("cmlm", {}, {"mask-predict": MaskPredict(iterations=4, length_beam=2)}),
    ("ctc", {"upsample": 2}, {"ctc": CTC(), "ctc-beam4": CTC(beam_size=4)}),
    ("dag", {"upsample": 2.5}, {"dag-lookahead": DAGLookahead(), "dag-greedy": DAGGreedy(),
                                "dag-viterbi": DAGViterbi()}),
]
NAT_IDS = ["nat", "cmlm", "ctc", "dag"]


def pass_kind(decoder: str) -> str:
    """The compiled pass of a NAT decoder's family (aoti.TensorPass kinds)."""
    return decoder if decoder in ("ctc", "dag") else "parallel"


@pytest.mark.parametrize("decoder,options,strategies", NAT_CASES, ids=NAT_IDS)
def test_nat_passes_go_to_their_package_with_the_right_tensors(monkeypatch, decoder, options, strategies):
    """Every NAT pass and the encoder go through their (here traced) package; a source of one token
    is outside the packages' ranges (export specialises a size of 1) and runs eager."""
    asked = traced_not_compiled(monkeypatch)
    model = nat_model(decoder, **options)
    assert_same_tokens(model, "aoti", strategies, decode_twice=False)
    kind = pass_kind(decoder)
    assert sorted(set(asked)) == sorted(["encoder pass", f"{kind} pass"])
    engined = copy.deepcopy(model)
    apply_engine(engined, "aoti")
    asked.clear()
    one = torch.tensor([[7]])
    with torch.inference_mode():
        for strategy in strategies.values():
            ref = model.decode(one, torch.tensor([1]), strategy)
            assert torch.equal(engined.decode(one, torch.tensor([1]), strategy).tokens, ref.tokens)
    assert "encoder pass" not in asked
    engined.decoder.record_attention = True  # the maps are set inside the pass: eager records them
    with torch.inference_mode():
        engined.decode(torch.tensor([[7, 8, 9]]), torch.tensor([3]), next(iter(strategies.values())))
    assert engined.decoder.recorded_attention is not None and "encoder pass" in asked
    engined.train()
    with pytest.raises(AtnatError, match="is for inference; the model was put back in training mode"):
        engined.encode(torch.tensor([[7, 8, 9]]))


def test_auto_packs_a_nat_decoder_and_runs_eager_where_it_cannot_pack(monkeypatch):
    traced_not_compiled(monkeypatch)
    nat = assert_same_tokens(nat_model("ctc", upsample=2), "auto", {"ctc": CTC()}, decode_twice=False)
    assert nat.swapped > 0 and touches(parse_engine("auto"), "ctc") and touches(parse_engine("auto"), "step")
    assert touches(parse_engine("aoti"), "parallel")
    with pytest.raises(AtnatError, match="inference only"):
        apply_engine(at_model().train(), "auto")
    with pytest.raises(AtnatError, match=r"\+bf16 applies to"):
        parse_engine("auto+bf16")


@pytest.mark.parametrize("decoder,options,strategies", NAT_CASES, ids=NAT_IDS)
def test_packed_linears_decode_the_nat_tokens_of_eager(decoder, options, strategies):
    model = nat_model(decoder, **options)
    info = assert_same_tokens(model, "packed", strategies, decode_twice=False)
    assert info.swapped > 0


def test_step_engines_leave_a_nat_decoder_as_it_is():
    model = nat_model("nat")
    info = apply_engine(model, "static")
    assert info.swapped == 0 and not touches(parse_engine("static"), "parallel")
    assert touches(parse_engine("packed"), "parallel") and touches(parse_engine("aoti+bf16"), "ctc")


@pytest.mark.parametrize("engine", ["packed+bf16", "static+bf16"])
def test_bf16_runs_and_says_it_is_not_exact(engine):
    model = at_model()
    if engine.startswith("packed") and not bf16_packing_supported():  # e.g. an AVX2-only CPU: one clear refusal
        with pytest.raises(AtnatError, match="this CPU cannot run it"):
            apply_engine(model, engine)
        return
    info = apply_engine(model, engine)
    assert not info.exact and not parse_engine(engine).exact and info.swapped > 0
    src, lengths = batches()["padded"]
    with torch.inference_mode():
        for strategy in STRATEGIES.values():
            out = model.decode(src, lengths, strategy)
            assert out.tokens.shape[0] == 6 and torch.isfinite(out.scores).all()
    assert all(p.dtype == torch.bfloat16 for m in model.modules() if isinstance(m, PackedLinear) for p in [m.weight])


def bf16_packing_supported() -> bool:
    """Whether oneDNN can pack a bfloat16 weight on this CPU."""
    try:
        torch.ops.mkldnn._reorder_linear_weight(torch.zeros(4, 4, dtype=torch.bfloat16), 1)
        return True
    except RuntimeError:
        return False


def test_int8_models_take_the_static_and_packed_engines():
    """On an int8 model, static replaces the step: the same tokens here, but not the same scores
    (dynamic int8 scales each step's activations by the whole batch's range, and the static step
    keeps finished rows in its batch where eager drops them; so int8 is not exact by construction,
    with or without an engine). packed leaves the int8 layers as they are (no float linear map left)."""
    model = quantize_int8(at_model())
    static = apply_engine(copy.deepcopy(model), "static")
    assert not static.exact and "int8" in static.inexact_reason  # tokens may differ on batches (found by a search)
    src, lengths = batches()["b1"]
    with torch.inference_mode():  # one sentence: no finished row in the step's batch, the int8 model's tokens
        engined = copy.deepcopy(model)
        apply_engine(engined, "static")
        for strategy in STRATEGIES.values():
            assert torch.equal(engined.decode(src, lengths, strategy).tokens, model.decode(src, lengths, strategy).tokens)
    assert assert_same_tokens(model, "packed", {"greedy": STRATEGIES["greedy"]}).swapped == 0


def test_torch_compile_and_autotune_refuse_int8_models():
    """inductor refuses int8 layers; +autotune too: benchmarking inductor's int8 GEMM templates
    aborted the bench process (glibc: double free or corruption, torch 2.13), so it is not offered."""
    with pytest.raises(AtnatError, match="does not compile int8 models.*use aoti or auto"):
        apply_engine(quantize_int8(at_model()), "inductor")
    for engine in ("aoti+autotune+fused", "aoti+cppgemm"):
        with pytest.raises(AtnatError, match=r"\+autotune and \+cppgemm do not compile int8 models.*heap corruption"):
            apply_engine(quantize_int8(at_model()), engine)


def test_auto_compiles_an_int8_model_through_its_wrapped_int8_layers(monkeypatch):
    """auto on an int8 model (before: eager, `auto=eager`): every int8 layer wrapped (eager calls
    stay FBGEMM's), and the same packages as a float model's, here traced: the encoder's, and the
    AT step's for the one-sentence decodes; tokens are the int8 model's own."""
    from atnat.experiments.modelfiles.quantize import CompilableInt8Linear

    asked = traced_not_compiled(monkeypatch)
    model = quantize_int8(at_model())
    engined = copy.deepcopy(model)
    info = apply_engine(engined, "auto")
    assert not info.fallback and info.label == "auto" and info.exact
    assert info.swapped == sum(isinstance(m, CompilableInt8Linear) for m in engined.modules()) > 0
    src, lengths = batches()["b1"]
    with torch.inference_mode():
        for strategy in STRATEGIES.values():
            assert torch.equal(engined.decode(src, lengths, strategy).tokens, model.decode(src, lengths, strategy).tokens)
    assert sorted(set(asked)) == ["at step, group 1", "at step, group 5", "encoder pass"]


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["aoti", "auto"])
def test_compiled_int8_engines_decode_the_int8_tokens_on_onednns_int8_gemm(monkeypatch, engine):
    """An int8 model's packages run oneDNN's int8 GEMM (qlinear in the generated code, not a
    dequantized float product) and decode the int8 model's tokens: at batch 1 also its scores (the
    same activation ranges); on the padded batch tokens only (aoti's static step keeps finished rows
    in the range, as `static` does)."""
    sources = []
    real = torch._inductor.aoti_compile_and_package

    def keep_source(program, package_path, inductor_configs):
        out = real(program, package_path=package_path, inductor_configs=inductor_configs)
        with zipfile.ZipFile(package_path) as z:
            sources.append("".join(z.read(n).decode(errors="ignore") for n in z.namelist() if n.endswith(".cpp")))
        return out

    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", keep_source)
    model = quantize_int8(at_model())
    engined = copy.deepcopy(model)
    info = apply_engine(engined, engine)
    assert info.exact == (engine == "auto")  # auto compiles the step for one sentence only
    src, lengths = batches()["b1"]
    with torch.inference_mode():
        for strategy in STRATEGIES.values():
            ref, out = model.decode(src, lengths, strategy), engined.decode(src, lengths, strategy)
            assert torch.equal(out.tokens, ref.tokens)
            torch.testing.assert_close(out.scores, ref.scores, atol=1e-4, rtol=1e-4)
    assert info.records and sources and all("qlinear" in code for code in sources)


@pytest.mark.parametrize("text,message", [
    ("turbo", "unknown engine 'turbo'; valid: engines eager, static, packed, inductor, aoti, auto; options \\+autotune"),
    ("aoti+fast", "unknown option 'fast'"),
    ("packed+autotune", r"\+autotune applies to inductor, aoti, not packed"),
    ("aoti+autotune+cppgemm", r"\+autotune and \+cppgemm exclude each other"),
])
def test_a_bad_engine_is_one_error_naming_the_valid_ones(text, message):
    with pytest.raises(AtnatError, match=message):
        parse_engine(text, "--engine")


def test_engine_names_and_the_default():
    assert parse_engine(None).label == DEFAULT_ENGINE == "auto"
    assert parse_engine("aoti+fused+autotune").label == "aoti+autotune+fused"  # options sorted: one spelling
    assert set(ENGINES) == {"eager", "static", "packed", "inductor", "aoti", "auto"}
    assert set(OPTIONS) == {"autotune", "cppgemm", "fused", "onednn", "bf16"}


def test_an_engine_is_applied_once_and_in_eval_mode_only():
    model = at_model()
    apply_engine(model, "static")
    for other in ("packed", "eager", "static"):  # eager too: it labelled the model eager and kept the static step
        with pytest.raises(AtnatError, match="already decodes with static"):
            apply_engine(model, other)
    assert model.engine_info.label == "static" and model.decoder.static_cache
    with pytest.raises(AtnatError, match="inference only"):
        apply_engine(at_model().train(), "packed")


def test_aoti_packages_are_compiled_in_process_and_kept_in_memory_only(monkeypatch, tmp_path):
    """Nothing read from disk runs: a package is loaded only right after this process compiled it
    (into a private temporary folder, gone afterwards); the same weights and engine in the same
    process reuse it, other weights compile anew. inductor's compile stands in for a fake here."""
    compiled, loaded = [], []
    folders = []

    def fake_compile(program, package_path, inductor_configs):
        folders.append(package_path)
        with open(package_path, "w") as f:
            f.write("package")
        compiled.append(package_path)

    def fake_load(path):
        assert path in compiled, "a package this process did not just compile was loaded"
        loaded.append(path)
        return lambda *args: "ran"

    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", fake_compile)
    monkeypatch.setattr(torch._inductor, "aoti_load_package", fake_load)
    monkeypatch.setattr(aoti, "PACKAGES", aoti.PackageCache())
    monkeypatch.setattr(torch.export, "export", lambda module, args, **kw: None)
    for name in ("TORCHINDUCTOR_CACHE_DIR", "ATNAT_PRIVATE_COMPILE_CACHE", "TRITON_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    first = at_model()
    info = apply_engine(first, "aoti")
    step = first.decoder._static_impl
    assert step(*[None] * 7, 1) == "ran" and step(*[None] * 7, 1) == "ran"
    second = at_model()  # same weights: the package of the first
    info2 = apply_engine(second, "aoti")
    assert second.decoder._static_impl(*[None] * 7, 1) == "ran"
    assert len(compiled) == 1 and [r.compiled for r in info.records + info2.records] == [True, False]
    # inductor's own cache: a private folder of this process, not the shared /tmp/torchinductor_<user>
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == os.environ["ATNAT_PRIVATE_COMPILE_CACHE"]
    third = at_model()
    with torch.no_grad():
        third.decoder.output.bias.add_(1.0)
    apply_engine(third, "aoti")
    third.decoder._static_impl(*[None] * 7, 1)
    assert len(compiled) == 2  # other weights: compiled again
    assert not any(os.path.exists(os.path.dirname(p)) for p in folders)  # the temporary folders are gone


def test_auto_on_a_gpu_graphs_the_single_sentence_at_step_and_says_so(monkeypatch):
    """The default engine must work wherever a model decodes. On a GPU it used to decode all eager,
    which left our AT 3.7x slower at batch 1 than the CUDA-graphed static step of the same model
    (an H100, results/bench/README.md), so every NAT speed-up over it was inflated: now auto graphs the
    AT step of single-sentence decodes there (label auto=cudagraphs; NAT passes: tests/test_cuda_graphs.py),
    and stays eager for batch work and int8 (auto=eager, saying why); an explicit CPU engine is refused
    on a GPU."""
    calls = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: calls.append(kw) or fn)
    monkeypatch.setattr(Seq2SeqModule, "device", property(lambda self: torch.device("cuda")))
    model = at_model()
    info = apply_engine(model, "auto")  # step_rows: AUTO_STEP_ROWS, single sentences
    assert info.label == "auto=cudagraphs" and not info.fallback and info.swapped == 0
    assert model.decoder.static_cache and model.decoder._static_max_rows == 1
    assert calls == [{"mode": "reduce-overhead", "dynamic": None}]
    assert not any(isinstance(m, PackedLinear) for m in model.modules())  # CPU-only layers stay out
    batch = at_model()
    info = apply_engine(batch, "auto", step_rows=0)  # batch work: nothing compiled
    assert info.label == "auto=eager" and "cuda" in info.fallback and not batch.decoder.static_cache
    assert apply_engine(nat_model("nat"), "auto").label == "auto=cudagraphs" and len(calls) == 1  # its passes
    with pytest.raises(AtnatError, match="runs on the CPU only"):
        apply_engine(at_model(), "packed")


@pytest.mark.slow
def test_autos_step_decodes_the_bench_models_tokens():
    """auto's AT step (AUTO_STEP_ENGINE, aoti+cppgemm+fused) at the bench size (D=256, 3+3 layers,
    V=8000), where inductor's CPP GEMM templates replace library GEMMs: random sources at batch 1,
    greedy and beam 5 pinned to 30 tokens, the tokens of eager and scores within 1e-4."""
    from atnat.core.engine_names import AUTO_STEP_ENGINE
    from atnat.experiments.bench import Models, make_spec, our_strategy

    spec = make_spec(threads=1)
    model = Models(spec).get("at")
    engined = copy.deepcopy(model)
    apply_engine(engined, AUTO_STEP_ENGINE)
    g = torch.Generator().manual_seed(5)
    with torch.inference_mode():
        for name in ("greedy", "beam5"):
            strategy = our_strategy(name, 30)[1]
            for _ in range(6):
                src = torch.randint(6, spec.vocab, (1, spec.src_len), generator=g)
                lengths = torch.tensor([spec.src_len])
                ref, out = model.decode(src, lengths, strategy), engined.decode(src, lengths, strategy)
                assert torch.equal(out.tokens, ref.tokens), name
                torch.testing.assert_close(out.scores, ref.scores, atol=1e-4, rtol=1e-4)


def test_a_packed_layer_takes_the_plain_product_below_its_row_threshold(monkeypatch):
    """Few rows run F.linear on the layer's own weight (faster there: results/bench/packed_small_rows.csv),
    many rows the packed kernel; both give the product."""
    import torch.nn.functional as F

    from atnat.experiments.modelfiles.packed import PLAIN_ROWS

    torch.manual_seed(0)
    w, b = torch.randn(24, 16), torch.randn(24)
    layer = PackedLinear(w, b, backend="onednn")
    calls, real = [], torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", lambda *a: calls.append(a[0].shape) or real(*a))
    with torch.inference_mode():
        one = torch.randn(1, PLAIN_ROWS - 1, 16)  # 15 rows: plain
        many = torch.randn(2, PLAIN_ROWS - 1, 16)  # 30 rows: packed
        assert torch.equal(layer(one), F.linear(one, w, b))
        torch.testing.assert_close(layer(many), F.linear(many, w, b), atol=1e-5, rtol=1e-5)
    assert calls == [torch.Size([2 * (PLAIN_ROWS - 1), 16])]  # the 30-row call only


@pytest.fixture
def measured_products(monkeypatch):
    """packed.compare_products replaced by `table` (rows -> (plain s, packed s)), nothing measured before or
    after; -> the table to fill and the row counts the rule measured."""
    from atnat.experiments.modelfiles import packed

    table, asked = {}, []

    def compare(layer, x):
        asked.append(x.size(0))
        return table[x.size(0)]

    monkeypatch.setattr(packed, "compare_products", compare)
    packed.forget_measurements()
    yield table, asked
    packed.forget_measurements()


@pytest.fixture
def packed_calls(monkeypatch):
    """The row counts of every product run by oneDNN's packed kernel."""
    calls, real = [], torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", lambda *a: calls.append(a[0].size(0)) or real(*a))
    return calls


@pytest.mark.parametrize("pays", [False, True], ids=["packing-slower", "packing-faster"])
def test_auto_takes_the_packed_product_only_where_it_measured_faster_once_per_shape(monkeypatch, measured_products,
                                                                                    packed_calls, pays):
    """On a CPU where oneDNN's packed product measures slower than the plain one at every row count, auto's
    layers stay on the plain product: a batch decode of 64 rows runs no packed kernel (the old auto packed every
    layer from 16 rows). Where it measures faster, the packed kernel runs. Each weight shape is measured once."""
    from atnat.experiments.modelfiles.packed import CALIBRATION_ROWS

    table, asked = measured_products
    table.update({rows: (1.0, 0.5 if pays else 1.2) for rows in CALIBRATION_ROWS})
    traced_not_compiled(monkeypatch)
    model = at_model()
    engined = copy.deepcopy(model)
    apply_engine(engined, "auto", step_rows=0)
    g = torch.Generator().manual_seed(3)
    src, lengths = torch.randint(6, V, (64, 7), generator=g), torch.full((64,), 7)
    with torch.inference_mode():
        for strategy in STRATEGIES.values():
            ref, out = model.decode(src, lengths, strategy), engined.decode(src, lengths, strategy)
            assert torch.equal(out.tokens, ref.tokens)
    assert bool(packed_calls) == pays
    layers = [m for m in engined.modules() if isinstance(m, PackedLinear)]
    shapes = {(m.in_features, m.out_features) for m in layers}
    assert len(asked) == len(CALIBRATION_ROWS) * len(shapes)  # each shape measured once, at each row count
    # a packed copy of a weight only where its packed product ran: none at all where packing never paid
    assert any(m.packed is not None for m in layers) == pays


@pytest.mark.parametrize("engine", ["packed", "packed+onednn"])
def test_a_model_on_packed_weights_can_be_copied(engine):
    """copy.deepcopy of a model whose linear layers hold packed weights (opaque tensors, which cannot be copied)
    raised NotImplementedError; the copy now packs its own and decodes the same tokens."""
    model = at_model()
    apply_engine(model, engine, step_rows=0)
    g = torch.Generator().manual_seed(5)
    src, lengths = torch.randint(6, V, (64, 7), generator=g), torch.full((64,), 7)
    with torch.inference_mode():
        ref = model.decode(src, lengths, STRATEGIES["greedy"])  # every layer has run its packed product
        twin = copy.deepcopy(model)
        assert torch.equal(twin.decode(src, lengths, STRATEGIES["greedy"]).tokens, ref.tokens)


def test_threads_making_a_shapes_first_product_at_once_measure_it_once(monkeypatch, measured_products):
    import threading
    import time

    from atnat.experiments.modelfiles import packed

    table, asked = measured_products
    table.update({rows: (1.0, 0.5) for rows in packed.CALIBRATION_ROWS})
    lookup = packed.compare_products  # the fixture's table, made slow enough for the threads to meet
    monkeypatch.setattr(packed, "compare_products", lambda layer, x: (time.sleep(0.02), lookup(layer, x))[1])
    found = []
    threads = [threading.Thread(target=lambda: found.append(packed.packed_from_rows(16, 24, "onednn")))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert found == [16] * 4
    assert len(asked) == len(packed.CALIBRATION_ROWS)  # one thread measured; the others took its answer


def test_a_measured_layer_packs_from_the_rows_where_packing_paid_there_and_beyond(measured_products, packed_calls):
    from atnat.experiments.modelfiles.packed import forget_measurements, packed_from_rows

    table, asked = measured_products
    torch.manual_seed(0)
    w, b = torch.randn(24, 16), torch.randn(24)
    layer = PackedLinear(w, b, backend="onednn", measured=True)
    with torch.inference_mode():
        layer(torch.randn(15, 16))
        assert not asked  # below PLAIN_ROWS the product is plain, nothing measured
        table.update({16: (1.0, 1.2), 64: (1.0, 0.8), 256: (1.0, 0.7)})  # pays from 64 rows
        for rows in (20, 63, 64, 300):
            x = torch.randn(rows, 16)
            torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, w, b), atol=1e-5, rtol=1e-5)
    assert packed_calls == [64, 300] and packed_from_rows(16, 24, "onednn") == 64
    threads = torch.get_num_threads()
    for more, (pattern, expected) in enumerate((((True, False, True), 256), ((False, True, True), 64),
                                                ((True, True, True), 16), ((False, False, False), float("inf"))), 1):
        table.update({rows: (1.0, 0.5 if paid else 1.0) for rows, paid in zip((16, 64, 256), pattern)})
        torch.set_num_threads(threads + more)  # another thread count: measured again
        try:
            assert packed_from_rows(16, 24, "onednn") == expected, pattern
        finally:
            torch.set_num_threads(threads)
    for share, packs in ((0.95, True), (0.96, False)):  # packed at most 0.95 of the plain product's time
        forget_measurements()
        table.update({rows: (1.0, share) for rows in (16, 64, 256)})
        assert (packed_from_rows(16, 24, "onednn") == 16) == packs, share


def test_a_traced_layer_measures_nothing(monkeypatch, measured_products):
    table, asked = measured_products
    layer = PackedLinear(torch.randn(24, 16), None, backend="onednn", measured=True)
    monkeypatch.setattr(torch.compiler, "is_exporting", lambda: True)
    with torch.inference_mode():
        layer(torch.randn(300, 16))
    assert not asked


def test_the_measurement_runs_on_this_cpu_and_leaves_the_global_generator_alone():
    from atnat.experiments.modelfiles.packed import CALIBRATION_ROWS, forget_measurements, packed_from_rows

    forget_measurements()
    state = torch.get_rng_state()
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the measurement turns autocast off for itself
        assert packed_from_rows(16, 24, "onednn") in (*CALIBRATION_ROWS, float("inf"))
    assert torch.equal(torch.get_rng_state(), state)
    forget_measurements()


def test_the_packed_shapes_are_named(measured_products):
    from atnat.experiments.modelfiles.packed import packed_from_rows, packing_summary

    table, _ = measured_products
    model = at_model()
    apply_engine(model, "auto", step_rows=0)
    assert packing_summary(model) == "none"  # nothing measured yet: every product plain
    table.update({16: (1.0, 1.2), 64: (1.0, 0.5), 256: (1.0, 0.5)})
    d = SMALL["d_model"]
    packed_from_rows(d, V, "onednn")  # the output projection pays from 64 rows
    assert packing_summary(model) == f"{d}->{V} from 64 rows"
    assert packing_summary(at_model()) == ""  # no measured layer: not the auto engine


class _NoPackages:
    """A package cache whose every export fails, as a plugin's data-dependent branch makes torch.export fail."""

    def get_or_compile(self, *args, **kwargs):
        raise RuntimeError("Could not guard on data-dependent expression u0 > 0\nmore lines")


def test_a_pass_or_step_that_cannot_be_compiled_runs_eager_and_says_so(capsys):
    """A plugin NAT whose pass holds a data-dependent branch failed torch.export inside `auto`: evaluate and the
    timing phase ended in a bare traceback, after training, instead of running that pass eager."""
    torch.manual_seed(0)
    module = Seq2SeqModule(vocab_size=40, decoder="nat", model=SMALL).eval()
    src = torch.randint(4, 40, (3, 6))
    src[1, -2:] = module.special.pad
    before = module.encode(src).states
    info = apply_engine(module, "auto", cache=_NoPackages())
    after = module.encode(src).states
    assert torch.equal(before, after)
    assert "encoder pass eager: RuntimeError: Could not guard on data-dependent expression u0 > 0" in info.label
    assert "encoder pass could not be compiled" in capsys.readouterr().err
    module.encode(src)  # tried once only: no second message
    assert "could not be compiled" not in capsys.readouterr().err
    plain, at = eos_prone_model(), eos_prone_model()
    steps = apply_engine(at, "auto", cache=_NoPackages())
    source = torch.randint(4, 20, (1, 5))
    want = Greedy().search(plain.decoder, plain.encode(source), src_lengths=torch.tensor([5]), special=plain.special)
    got = Greedy().search(at.decoder, at.encode(source), src_lengths=torch.tensor([5]), special=at.special)
    assert torch.equal(got.tokens, want.tokens) and "AT step eager: RuntimeError: Could not guard" in steps.label
