"""`atnat bench`: a tiny decode run yields every row with equal work across systems and ratios
that follow from the medians; the KV-cached fast paths equal a no-cache reference; the HF and
CTranslate2 peers emit exactly the forced number of tokens; the training benchmark runs every decoder."""
from dataclasses import dataclass
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from numpy.testing import assert_allclose

import atnat.decoding  # noqa: F401  (registers strategies)
import atnat.models.decoders  # noqa: F401  (registers decoders)
from atnat.core.errors import AtnatError
from atnat.decoding.beam import Beam
from atnat.decoding.greedy import Greedy
from atnat.decoding.processors import forbidden_ids
from atnat.experiments import bench
from atnat.experiments.bench import ct2_peer as bench_ct2
from atnat.experiments.bench import hf as bench_hf
from atnat.models.encoder import EncoderOut
from atnat.models.seq2seq import Seq2SeqModule

HF = bench_hf.available()
CT2 = bench_ct2.available()
PASSES = {"greedy": 30, "beam5": 30, "parallel": 1, "mask-predict-4": 4, "mask-predict-10": 10, "ctc": 1,
          "dag-lookahead": 1, "dag-viterbi": 1}


@pytest.fixture(scope="module")
def tiny():
    spec = bench.make_spec(tiny=True, threads=1, warmup=1, repeats=1, quantize="int8")
    return bench.run_decode(spec, log=lambda *_: None)


def test_tiny_decode_has_every_row_and_column(tiny):
    assert list(tiny.columns) == bench.COLUMNS
    ours = {(s, b) for s in bench.STRATEGIES for b in (1, 64)}
    at = {(s, b) for s in ("greedy", "beam5") for b in (1, 64)}
    expected = {"ours": ours, "ours-int8": ours, "hf": at if HF else set(),
                "ct2-f32": at if CT2 else set(), "ct2-int8": at if CT2 else set()}
    for system, rows in expected.items():
        assert set(zip(tiny.strategy[tiny.system == system], tiny.batch[tiny.system == system])) == rows
    assert len(tiny) == sum(map(len, expected.values()))
    assert (tiny.median_s > 0).all() and (tiny.peak_mem_mb > 0).all()
    assert (tiny.threads == 1).all() and (tiny.device == "cpu").all() and (tiny.src_len == 20).all()
    memory = pd.DataFrame(tiny.attrs["memory"])  # the leak check: beam 5 at batch 64, every system
    assert list(memory.system) == ["ours", "ours-int8"] + (["hf"] if HF else []) + (
        ["ct2-f32", "ct2-int8"] if CT2 else [])
    assert (memory.strategy == "beam5").all() and (memory.batch == 64).all() and (memory.calls == 1).all()
    assert (memory.delta_mb == memory.after_mb - memory.before_mb).all() and (memory.peak_mb > 0).all()


def test_every_system_does_the_same_work(tiny):
    assert (tiny.out_len == 30).all()
    fixed = tiny[tiny.strategy != "ctc"]
    assert (fixed.tokens_out == 30).all()  # every AT/NAT/HF/CTranslate2 sentence has exactly 30 tokens
    counted = tiny[~((tiny.system.str.startswith("ct2")) & (tiny.strategy == "beam5"))]
    assert (counted.passes == counted.strategy.map(PASSES)).all()  # HF: a hook; CTranslate2 greedy: its callback
    assert tiny.passes[tiny.system.str.startswith("ct2") & (tiny.strategy == "beam5")].isna().all()
    assert (tiny.slots[tiny.strategy == "ctc"] == 60).all()  # 3 x 20 upsampled slots
    assert (tiny.slots[tiny.strategy.str.startswith("dag-")] == 82).all()  # 4 x 20 + 2 vertices, a path of 30 forced
    ctc = tiny[tiny.strategy == "ctc"]  # CTC emits fewer tokens than the nominal 30: counted as emitted
    assert (ctc.tokens_out < 30).all()
    assert_allclose(ctc.emitted_tokens_per_s, ctc.batch * ctc.tokens_out / ctc.median_s)


def test_ratios_follow_from_the_medians(tiny):
    fixed = tiny[tiny.strategy != "ctc"]
    assert_allclose(fixed.emitted_tokens_per_s, fixed.batch * fixed.out_len / fixed.median_s)
    key = ["strategy", "batch"]
    at = tiny[(tiny.system == "ours") & (tiny.strategy == "greedy")].set_index("batch").median_s
    speed = at.loc[tiny.batch].to_numpy() / tiny.median_s.to_numpy()  # same sentences: time ratio
    assert_allclose(tiny.speedup_vs_at_greedy, speed)
    for peer, column, pairs in (("hf", "ratio_vs_hf", [("ours", "hf"), ("ours-int8", "hf")]),
                                ("ct2", "ratio_vs_ct2", [("ours", "ct2-f32"), ("ours-int8", "ct2-int8")])):
        if not (HF if peer == "hf" else CT2):
            assert tiny[column].isna().all()
            continue
        for ours, theirs in pairs:
            joined = tiny[tiny.system == ours].merge(tiny[tiny.system == theirs], on=key, suffixes=("", "_p"))
            assert len(joined) == 4
            assert_allclose(joined[column], joined.median_s_p / joined.median_s)  # same sentences
        assert tiny[column][~tiny.system.str.startswith("ours")].isna().all()
        assert tiny[column][~tiny.strategy.isin(["greedy", "beam5"])].isna().all()


def test_add_ratios_definition():
    base = dict(src_len=20, out_len=30, batch=1)
    df = pd.DataFrame([dict(base, system="ours", strategy="greedy", sents_per_s=300.0),
                       dict(base, system="hf", strategy="greedy", sents_per_s=100.0),
                       dict(base, system="ct2-f32", strategy="greedy", sents_per_s=400.0),
                       dict(base, system="ours-int8", strategy="greedy", sents_per_s=600.0),
                       dict(base, system="ct2-int8", strategy="greedy", sents_per_s=1200.0),
                       dict(base, system="ours", strategy="parallel", sents_per_s=6000.0)])
    for col in bench.COLUMNS:
        df[col] = df.get(col, 0)
    out = bench.add_ratios(df).set_index(["system", "strategy"])
    assert out.ratio_vs_hf[("ours", "greedy")] == 3.0
    assert out.ratio_vs_ct2[("ours", "greedy")] == 0.75 and out.ratio_vs_ct2[("ours-int8", "greedy")] == 0.5
    assert out.ratio_vs_ct2[["ct2-f32", "hf"]].isna().all()
    assert out.speedup_vs_at_greedy[("ours", "parallel")] == 20.0
    assert out.speedup_vs_at_greedy[("hf", "greedy")] == pytest.approx(1 / 3)


@pytest.mark.skipif(not CT2, reason="ctranslate2 is not installed")
@pytest.mark.parametrize("beams", [1, 5])
def test_ct2_peer_runs_our_weights_and_emits_exactly_30_tokens(beams):
    spec = bench.make_spec(tiny=True)
    module = bench.Models(spec).get("at")
    peer = bench_ct2.Peer(module, device="cpu", threads=1)
    src = torch.randint(6, spec.vocab, (3, 20), generator=torch.Generator().manual_seed(0))
    for system in bench_ct2.SYSTEMS:
        fn, first = peer.peer(system, beams, src, 30)
        counts = first()
        assert counts["tokens_out"] == 30 and (counts["passes"] == 30 if beams == 1 else counts["passes"] != counts["passes"])
    if beams == 1:  # float32 CTranslate2 on our weights: our greedy, token for token
        _, strategy = bench.our_strategy("greedy", 30)
        with torch.inference_mode():
            ours = bench.our_fn(module, strategy, src, 30)().tokens[:, 0].tolist()
        theirs = [[peer.tokens.index(t) for t in r.hypotheses[0]] for r in peer.peer("ct2-f32", 1, src, 30)[0]()]
        assert theirs == ours
    results = peer.peer("ct2-f32", beams, src, 30)[0]()
    with pytest.raises(AtnatError, match="expected exactly 31"):
        bench_ct2.check_output(results, 3, 31)


def small_model(seed=0):
    torch.manual_seed(seed)
    model = dict(d_model=32, n_heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2, dropout=0.0)
    return Seq2SeqModule(vocab_size=40, decoder="at", model=model).eval()


def sources(b=4, s=7, seed=1):
    src = torch.randint(6, 40, (b, s), generator=torch.Generator().manual_seed(seed))
    src[-1, s - 2:] = 0  # one padded sentence
    return src, src.ne(0).sum(1)


def reference_greedy(module, src, length):
    """Greedy by full recomputation: the teacher-forced forward on the growing prefix, no cache."""
    memory = module.encode(src)
    prefix = torch.ones(src.size(0), 1, dtype=torch.long)  # BOS
    banned = list(forbidden_ids(module.special)) + [module.special.eos]  # EOS: min length
    for _ in range(length):
        logits, _ = module.decoder(prefix, memory)
        lp = F.log_softmax(logits[:, -1].float(), -1)
        lp[:, banned] = float("-inf")
        prefix = torch.cat([prefix, lp.argmax(-1, keepdim=True)], 1)
    return prefix[:, 1:]


@torch.no_grad()
def test_greedy_equals_full_recomputation():
    module = small_model()
    src, lengths = sources()
    hyps = module.decode(src, lengths, Greedy(min_len=12, max_len_a=0.0, max_len_b=12))
    assert torch.equal(hyps.tokens[:, 0], reference_greedy(module, src, 12))


@dataclass
class NoCacheState:
    prefix: torch.Tensor  # (R, t) decoder inputs so far, BOS first
    memory: EncoderOut  # R rows


class NoCacheModel:
    """StepModel by full recomputation: every step re-runs the teacher-forced decoder."""

    def __init__(self, decoder):
        self.decoder = decoder
        self.max_output_length = decoder.max_output_length

    def init_state(self, memory, **_):
        return NoCacheState(torch.empty(memory.states.size(0), 0, dtype=torch.long), memory)

    def step(self, prev, state):
        prefix = torch.cat([state.prefix, prev[:, None]], 1)
        logits, _ = self.decoder(prefix, state.memory)
        return F.log_softmax(logits[:, -1].float(), -1), NoCacheState(prefix, state.memory)

    def reorder_state(self, state, order):
        return NoCacheState(state.prefix[order], state.memory.index_select(order))


@pytest.mark.parametrize("strategy", [Beam(beam_size=5, min_len=10, max_len_a=0.0, max_len_b=10),
                                      Beam(beam_size=5, max_len_a=1.0, max_len_b=3)])
@torch.no_grad()
def test_cached_beam_equals_no_cache_beam(strategy):
    module = small_model(seed=2)
    src, lengths = sources(seed=3)
    fast = module.decode(src, lengths, strategy)
    slow = strategy.search(NoCacheModel(module.decoder), module.encode(src), src_lengths=lengths,
                           special=module.special)
    torch.testing.assert_close(fast.scores, slow.scores, atol=1e-4, rtol=0)
    assert torch.equal(fast.tokens, slow.tokens)


@pytest.mark.skipif(not HF, reason="transformers is not installed")
@pytest.mark.parametrize("beams", [1, 5])
def test_hf_and_ours_emit_exactly_30_tokens(beams):
    spec = bench.make_spec(tiny=True)
    hf = bench_hf.build_marian(spec.model, spec.vocab)
    src = torch.randint(6, spec.vocab, (3, 20), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        ids, passes = bench_hf.count_decoder_passes(hf, bench_hf.generate_fn(hf, src, beams, 30))
        assert bench_hf.check_output(ids, 3, 30) == 30 and passes == 30
        module = bench.Models(spec).get("at")
        _, strategy = bench.our_strategy("greedy" if beams == 1 else "beam5", 30)
        assert bench.check_ours(bench.our_fn(module, strategy, src, 30)(), "greedy", 30, module.special) == 30
    with pytest.raises(AtnatError, match="EOS or pad"):
        bench_hf.check_output(torch.cat([ids[:, :-1], torch.full((3, 1), 2)], 1), 3, 30)
    with pytest.raises(AtnatError, match="shape"):
        bench_hf.check_output(ids[:, :-1], 3, 30)


def test_forced_length_and_short_outputs_are_refused():
    module = bench.Models(bench.make_spec(tiny=True)).get("cmlm")
    _, strategy = bench.our_strategy("mask-predict-4", 17)
    src = torch.randint(6, 64, (2, 20))
    with torch.inference_mode():
        hyps = bench.our_fn(module, strategy, src, 17)()
    assert hyps.lengths.tolist() == [[17], [17]] and hyps.n_steps == 4
    with pytest.raises(AtnatError, match="expected exactly 18"):
        bench.check_ours(hyps, "mask-predict-4", 18, module.special)


@pytest.mark.parametrize("name", ["dag-lookahead", "dag-viterbi"])
def test_a_forced_dag_path_emits_its_vertices_tokens_and_a_short_graph_is_refused(name):
    from atnat.experiments.bench.systems import ForcedPath

    module = bench.Models(bench.make_spec(tiny=True)).get("dag", 4)
    _, strategy = bench.our_strategy(name, 17)
    src = torch.randint(6, 64, (2, 20))
    with torch.inference_mode():
        hyps = bench.our_fn(module, strategy, src, 17)()
        log_probs, _, _ = module.decoder.forward_dag(module.encode(src))
    on = torch.linspace(0, 81, 19).round().long()[1:-1]  # the 17 middle vertices of 4 x 20 + 2
    best = log_probs[:, :, module.special.first_ordinary:].argmax(-1) + module.special.first_ordinary
    assert hyps.lengths.tolist() == [[17], [17]] and hyps.n_steps == 1
    assert hyps.tokens[:, 0].tolist() == best[:, on].tolist()  # each path vertex's best ordinary token
    with pytest.raises(AtnatError, match="at least 83 vertices; got 82"), torch.inference_mode():
        ForcedPath(module.decoder, 81).forward_dag(module.encode(src))
    padded = src.clone()
    padded[1, 15:] = module.special.pad
    with pytest.raises(AtnatError, match="graphs of one size: sources without padding"), torch.inference_mode():
        ForcedPath(module.decoder, 17).forward_dag(module.encode(padded))


def test_a_failing_system_keeps_its_error_and_the_others_are_still_measured(tmp_path, monkeypatch):
    """A row that raises (in its first call, or in a later one) is written with its error and no time; the
    other rows are measured and written, and the command then fails naming it."""
    from atnat.experiments.bench.systems import ForcedPath

    def broken(self, memory):
        raise RuntimeError("no kernel for this graph\nsecond line")

    calls = {"n": 0}
    real = bench.systems.ForcedLength.predict_length

    def fails_later(self, memory):  # the parallel NAT fails on its third call: after its checked first call
        calls["n"] += 1
        if calls["n"] == 3:
            raise ValueError("lost the device")
        return real(self, memory)

    monkeypatch.setattr(ForcedPath, "forward_dag", broken)
    monkeypatch.setattr(bench.systems.ForcedLength, "predict_length", fails_later)
    csv = tmp_path / "d.csv"
    with pytest.raises(AtnatError, match=r"3 of 6 rows failed \(column error of .*d.csv\): ours/parallel at batch "
                                         r"1: ValueError: lost the device; ours/dag-lookahead at batch 1: RuntimeError: "
                                         r"no kernel for this graph; ours/dag-lookahead at batch 64: RuntimeError"):
        bench.main(["decode", "--tiny", "--no-hf", "--no-ct2", "--threads", "1", "--repeats", "2",
                    "--strategies", "greedy,parallel,dag-lookahead", "--out", str(csv)])
    df = pd.read_csv(csv, keep_default_na=False, na_values=[""])
    ok, bad = df[df.error.isna()], df[df.error.notna()]
    assert list(zip(ok.strategy, ok.batch)) == [("greedy", 1), ("greedy", 64), ("parallel", 64)]
    assert (ok.median_s > 0).all() and (ok.sents_per_s > 0).all()
    assert list(zip(bad.strategy, bad.batch)) == [("parallel", 1), ("dag-lookahead", 1), ("dag-lookahead", 64)]
    assert bad.median_s.isna().all() and bad.sents_per_s.isna().all()
    assert set(bad.error[bad.strategy == "dag-lookahead"]) == {"RuntimeError: no kernel for this graph"}


def test_bad_options_are_user_errors():
    with pytest.raises(AtnatError, match="repeats"):
        bench.run_decode(bench.make_spec(tiny=True, repeats=0))
    with pytest.raises(AtnatError, match="--strategies greedy,beam: unknown beam; valid: greedy, beam5, "):
        bench.main(["decode", "--tiny", "--strategies", "greedy,beam"])
    with pytest.raises(AtnatError, match="--strategies greedy,ctc,greedy: given twice: greedy; valid: "):
        bench.main(["decode", "--tiny", "--strategies", "greedy,ctc,greedy"])
    if not torch.cuda.is_available():
        with pytest.raises(AtnatError, match="cuda"):
            bench.main(["decode", "--tiny", "--device", "cuda"])


def test_train_benchmark_runs_every_decoder_in_fp32_and_bf16():
    spec = bench.make_spec(tiny=True, threads=1, warmup=0)
    df = bench.run_train(spec, steps=2, tokens=120, precisions=("fp32", "bf16"), log=lambda *_: None)
    assert list(df.decoder) == ["at", "at", "nat", "nat", "cmlm", "cmlm", "ctc", "ctc"]
    assert list(df.precision) == ["fp32", "bf16"] * 4
    assert (df.tgt_tokens == 120).all() and (df.tokens_per_s > 0).all()  # training: target tokens/s
    from atnat.experiments.bench.flops import train_step_flops

    expected = [train_step_flops(spec.model, vocab=spec.vocab, decoder=d, batch=4, src_len=spec.src_len, tgt_len=30,
                                 upsample=3 if d == "ctc" else 1) for d in df.decoder]
    assert list(df.flops_per_step) == expected and df.mfu.isna().all()  # the source side and CTC's slots counted
    assert df.set_index("decoder").flops_per_step["ctc"].max() > df.set_index("decoder").flops_per_step["nat"].max()
    assert (df[df.precision == "fp32"].speedup_vs_fp32 == 1).all()
    both = df.pivot(index="decoder", columns="precision", values="last_loss")  # the same model, two precisions
    assert ((both.bf16 - both.fp32).abs() < 0.1 * both.fp32).all()
    with pytest.raises(AtnatError, match="--precision among fp32, bf16"):
        bench.run_train(spec, steps=1, tokens=120, precisions=("fp16",), log=lambda *_: None)


def test_precision_auto_picks_bf16_where_the_cpu_does_it(tmp_path):
    from atnat.experiments.config.precision import resolve_precision

    with_bf16, without = tmp_path / "a", tmp_path / "b"
    with_bf16.write_text("model name : X\nflags : fpu avx2 avx512f avx512_bf16\n")
    without.write_text("model name : Y\nflags : fpu avx2 avx512f\n")
    assert resolve_precision("auto", "cpu", with_bf16) == "bf16-mixed"
    assert resolve_precision("auto", "cpu", without) == "32-true"
    assert resolve_precision("32-true", "cpu", with_bf16) == "32-true"


def test_cli_prints_table_writes_csv_and_sweep_png(tiny, tmp_path, monkeypatch, capsys):
    seen = []
    monkeypatch.setattr("atnat.experiments.bench.decode_run.run_decode", lambda spec: seen.append(spec) or tiny)
    csv = tmp_path / "sweep.csv"
    bench.main(["decode", "--sweep", "--threads", "1", "--repeats", "2", "--out", str(csv)])
    assert seen[0].shapes == ((1, 10), (1, 30), (1, 50), (1, 100), (8, 30), (64, 30), (256, 30))
    assert seen[0].repeats == 2 and seen[0].threads == 1 and seen[0].model == bench.FULL
    assert seen[0].ct2 and seen[0].quantize is None
    bench.main(["decode", "--tiny", "--no-ct2", "--quantize", "int8", "--strategies", "greedy, dag-viterbi"])
    assert not seen[1].ct2 and seen[1].quantize == "int8" and seen[1].strategies == ("greedy", "dag-viterbi")
    assert seen[0].strategies == bench.STRATEGIES  # all by default
    assert "speedup_vs_at_greedy" in capsys.readouterr().out
    assert list(pd.read_csv(csv).columns) == bench.COLUMNS
    assert (tmp_path / "sweep.png").stat().st_size > 1000
    assert len(pd.read_csv(tmp_path / "sweep_memory.csv")) == len(tiny.attrs["memory"])


@pytest.mark.slow
def test_compiled_static_step_rows_sit_beside_the_eager_ones(monkeypatch):
    """--compile: the AT strategies again with the static-cache step under torch.compile, same
    weights, same outputs, with their own ratio to the HF peer (greedy only: one compilation)."""
    spec = bench.make_spec(tiny=True, threads=1, warmup=1, repeats=1, compile="default", hf=False, ct2=False,
                           shapes=((2, 6),), strategies=("greedy",))
    models = bench.Models(spec)
    df = bench.run_decode(spec, log=lambda *_: None, models=models)
    assert list(df.system) == ["ours", "ours-compiled"] and (df.passes == 6).all()
    src = torch.randint(6, spec.vocab, (2, spec.src_len))
    _, strategy = bench.our_strategy("greedy", 6)
    eager, fast = models.get("at"), models.get("at", 0, "default")
    assert fast.decoder.static_cache and not eager.decoder.static_cache
    with torch.inference_mode():
        a, b = (bench.our_fn(m, strategy, src, 6)() for m in (eager, fast))
    assert torch.equal(a.tokens, b.tokens)
    torch.testing.assert_close(a.scores, b.scores, atol=1e-4, rtol=1e-4)


def test_profile_lists_where_a_strategy_spends_its_time(capsys):
    spec = bench.make_spec(tiny=True, threads=1)
    df = bench.run_profile(spec, "greedy", batch=2, out_len=6, calls=2, top=15)  # tiny ops: noisy order
    assert len(df) == 15 and (df.self_ms.diff().dropna() <= 0).all()  # sorted, largest first
    assert df.share.between(0, 1).all() and df.share.sum() <= 1.0 + 1e-9
    assert any(op in " ".join(df.op) for op in ("addmm", "linear", "mm"))  # the matmuls show up
    bench.main(["profile", "--tiny", "--strategy", "parallel", "--batch", "1", "--calls", "1"])
    assert "ours/parallel, batch 1, 30 tokens: self time per call by op" in capsys.readouterr().out


def engine_rows(monkeypatch, engines, int8_engines=()):
    spec = bench.make_spec(tiny=True, threads=1, warmup=0, repeats=1, hf=False, ct2=False, shapes=((2, 6),),
                           quantize="int8" if int8_engines else None, engines=engines, int8_engines=int8_engines,
                           strategies=("greedy", "beam5", "parallel"))
    models = bench.Models(spec)
    return bench.run_decode(spec, log=lambda *_: None, models=models), models


def test_engine_rows_sit_beside_the_eager_ones(monkeypatch):
    """--engine static,packed (and --int8-engine static): rows ours-ENGINE for the strategies the
    engine changes (a step engine: the AT ones; packed: all), same work, first call and compile
    time recorded; the int8 engine works on its own copy of the int8 model."""
    df, models = engine_rows(monkeypatch, ("static", "packed"), ("static",))
    rows = set(zip(df.system, df.strategy))
    assert rows == {(s, st) for s in ("ours", "ours-packed", "ours-int8") for st in ("greedy", "beam5", "parallel")} | {
        ("ours-static", "greedy"), ("ours-static", "beam5"), ("ours-int8-static", "greedy"), ("ours-int8-static", "beam5")}
    assert (df.tokens_out == 6).all() and (df.first_call_s > 0).all() and df.compile_s.isna().all()
    assert df.ratio_vs_ct2.isna().all()
    assert not models.get("at", quantize="int8").decoder.static_cache  # the shared int8 model left eager
    assert models.get("at", quantize="int8", engine="static").decoder.static_cache


def test_a_rows_compile_time_is_what_its_own_first_call_compiled():
    """compile_s summed every package of the model so far: beam 5's row also carried greedy's step and the
    encoder. Each package 'compiles' in 1 s here (the cache's keying and reuse kept, the compile replaced)."""
    from atnat.experiments.modelfiles import aoti

    class OneSecond(aoti.PackageCache):
        def get_or_compile(self, what, fields, build, configs, context=None):
            key = self.key({**fields, "configs": configs})
            if key in self.runners:
                return self.runners[key][0], aoti.CompileRecord(what, key, False, 0.0, 1.0)
            module = build().module
            self.runners[key] = ((lambda *tensors: module(*tensors)), 1.0)
            return self.runners[key][0], aoti.CompileRecord(what, key, True, 1.0, 1.0)

    spec = bench.make_spec(tiny=True, threads=1, warmup=0, repeats=1, hf=False, ct2=False, shapes=((1, 6),),
                           engines=("aoti",), strategies=("greedy", "beam5"))
    df = bench.run_decode(spec, log=lambda *_: None, models=bench.Models(spec, cache=OneSecond()))
    rows = df[df.system == "ours-aoti"].set_index("strategy")
    assert rows.loc["greedy", "compile_s"] == 2.0  # the encoder and the greedy step (group 1)
    assert rows.loc["beam5", "compile_s"] == 1.0  # its own step (group 5): it said 3.0


@pytest.mark.parametrize("argv,said", [
    (["data", "--pairs", "abc"], "argument --pairs: expected a positive integer, got 'abc'"),
    (["data", "--pairs", "0"], "argument --pairs: expected a positive integer, got 0"),
    (["count", "--batches", "x"], "argument --batches: expected a positive integer, got 'x'"),
    (["profile", "--tiny", "--batch", "0"], "argument --batch: expected a positive integer, got 0"),
    (["profile", "--tiny", "--calls", "0"], "argument --calls: expected a positive integer, got 0"),
    (["train", "--tiny", "--peak-tflops", "-1"], "argument --peak-tflops: expected a positive number, got -1.0"),
])
def test_bad_numbers_are_one_usage_error_naming_the_flag(argv, said, capsys):
    """They were tracebacks from deep inside (ValueError, a RuntimeError of the length rules, KeyError 'self_ms'),
    a bare RuntimeError around the failed phase's own traceback, or (a negative peak) a negative MFU and exit 0."""
    with pytest.raises(SystemExit) as exit_:
        bench.main(argv)
    assert exit_.value.code == 2 and said in capsys.readouterr().err


def test_an_out_path_that_names_a_folder_is_refused_before_measuring(tmp_path, monkeypatch):
    """`bench decode --out DIR` measured every row, then failed to write (IsADirectoryError): the rows were lost."""
    monkeypatch.setattr("atnat.experiments.bench.decode_run.run_decode", lambda *a, **k: pytest.fail("measured first"))
    with pytest.raises(AtnatError, match=f"--out {tmp_path}: a folder; give the path of a CSV file to write"):
        bench.main(["decode", "--tiny", "--out", str(tmp_path)])


def test_bad_engine_is_one_error_naming_the_valid_ones():
    with pytest.raises(AtnatError, match="unknown engine 'fast'; valid: engines eager, static, packed"):
        bench.main(["decode", "--tiny", "--engine", "static,fast"])
    with pytest.raises(AtnatError, match="--int8-engine needs --quantize int8"):
        bench.main(["decode", "--tiny", "--int8-engine", "static"])


@pytest.mark.slow
def test_compiled_engine_rows_record_their_compile_time(monkeypatch):
    df, _ = engine_rows(monkeypatch, ("inductor", "aoti"))
    compiled = df[df.system.isin(["ours-inductor", "ours-aoti"])]
    assert set(zip(compiled.system, compiled.strategy)) == {(s, st) for s in ("ours-inductor", "ours-aoti")
                                                            for st in ("greedy", "beam5")} | {("ours-aoti", "parallel")}
    # (aoti also compiles a NAT decoder's pass; inductor only the AT step)
    assert (compiled.compile_s > 0).all() and (compiled.tokens_out == 6).all()


@pytest.mark.slow
def test_count_gives_instructions_per_call_by_kind_of_code():
    import shutil

    if not (shutil.which("valgrind") and shutil.which("gcc")):
        pytest.skip("needs valgrind and gcc")
    from atnat.experiments.bench.count import count

    df = count(["ours", "ours-static", "ct2-f32"], ["greedy"], [1], calls=1, tiny=True, log=lambda *_: None)
    ours, ct2 = df[df.system != "ct2-f32"], df[df.system == "ct2-f32"]
    assert (ours.instructions_per_call > 1e6).all() and (ours.passes == 30).all() and (ours.error == "").all()
    shares = ours[[c for c in df.columns if c.endswith("_share")]].sum(axis=1)
    assert ((shares > 0.99) & (shares < 1.01)).all()
    assert ct2.instructions_per_call.isna().all() and ct2.error.str.contains("worker thread").all()  # not counted


def test_each_timed_bench_call_follows_an_untimed_call_of_its_own_system(monkeypatch):
    """As in the grid's timing phase: no system is timed on caches another system warmed."""
    from atnat.experiments.bench import systems as bench_systems

    log = []
    monkeypatch.setattr(bench_systems, "timed_call", lambda fn, spec: (log.append("timed"), fn(), (0.0, 0.0))[-1])
    rows = [bench_systems.System(name, "greedy", lambda name=name: log.append(name), lambda: {})
            for name in ("ours", "ours-static", "ct2-f32")]
    spec = SimpleNamespace(warmup=1, repeats=3)
    bench_systems.time_round_robin(rows, spec)
    assert log.count("timed") == 9
    for i, entry in enumerate(log):
        if entry == "timed":
            assert log[i - 1] == log[i + 1] != "timed"  # untimed call, timed call: the same system


def test_count_shares_are_each_functions_self_cost_once(tmp_path):
    """callgrind_annotate appends the annotated source of every file it finds on disk (inductor's generated
    C++ for a compiled engine): its lines were read as more functions, and shares summed to 3.4."""
    import shutil
    import subprocess

    if not (shutil.which("valgrind") and shutil.which("gcc") and shutil.which("callgrind_annotate")):
        pytest.skip("needs valgrind and gcc")
    from atnat.experiments.bench.count import breakdown

    (tmp_path / "prog.c").write_text(
        "#include <stdio.h>\ndouble work(int n){ double s=0; for(int i=0;i<n;i++){ s+=i*0.5; } return s; }\n"
        'int main(){ double t=0; for(int k=0;k<200;k++) t+=work(10000); printf("%f\\n",t); return 0; }\n')
    subprocess.run(["gcc", "-g", "-O0", "-o", "prog", "prog.c"], cwd=tmp_path, check=True)
    subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=cg.out", "./prog"], cwd=tmp_path,
                   check=True, capture_output=True)
    total, shares = breakdown(tmp_path / "cg.out")
    assert total > 1e6 and sum(shares.values()) == pytest.approx(1.0, abs=0.01)


def test_bench_count_fails_only_for_rows_that_failed(monkeypatch, capsys):
    """A counted row had no `error` value (NaN), which the failure check read as an error: `atnat bench count`
    exited 2 naming every counted row as failed."""
    import pandas as pd

    from atnat.experiments.bench import count as bench_count
    from atnat.experiments.cli.commands import main

    rows = {"ours": dict(system="ours", strategy="greedy", batch=1, out_len=30, calls=1, instructions_per_call=1e8,
                         passes=30.0, instructions_per_pass=3e6),
            "ct2-f32": dict(system="ct2-f32", strategy="greedy", batch=1, out_len=30, calls=1,
                            error=bench_count.CT2_NOT_COUNTED)}
    monkeypatch.setattr(bench_count, "count", lambda systems, *a, **k: pd.DataFrame(
        [rows[s] for s in systems], columns=bench_count.COLUMNS))
    assert main(["bench", "count", "--tiny", "--systems", "ours", "--calls", "1"]) == 0
    assert main(["bench", "count", "--tiny", "--systems", "ours,ct2-f32", "--calls", "1"]) == 2
    err = capsys.readouterr().err
    assert "1 of 2 rows failed" in err and "ours/greedy" not in err


@pytest.mark.parametrize("argv, flag", [
    (["count", "--device", "cuda"], "--device"), (["count", "--warmup", "3"], "--warmup"),
    (["count", "--threads", "2"], "--threads"), (["profile", "--warmup", "3"], "--warmup"),
    (["profile", "--engine", "eager,auto"], "--engine with more than one engine")])
def test_bench_options_a_command_would_ignore_are_refused(argv, flag, capsys):
    from atnat.experiments.cli.commands import main

    assert main(["bench", *argv, "--tiny"]) == 2
    assert f"atnat bench {argv[0]}: {flag} would be ignored" in capsys.readouterr().err
