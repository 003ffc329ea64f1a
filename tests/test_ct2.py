"""CTranslate2 export: the converted model computes our log-probs (post-/pre-LN, tied/untied,
sinusoidal/learned positions), its greedy output equals ours token for token, its beam n-best
equals ours under the paired settings (length_penalty=1 with EOS counted = our length_norm
"length" with stopping "fairseq"), and what it cannot express is refused with the reason."""
import pytest
import torch

import atnat.decoding  # noqa: F401  (registers strategies)
import atnat.models.decoders  # noqa: F401  (registers decoders)
from atnat.core.errors import AtnatError
from atnat.decoding.beam import Beam
from atnat.decoding.greedy import Greedy
from atnat.experiments.cli.commands import main
from atnat.experiments.data.batching import collate, encode_split
from atnat.experiments.data.tokenize import SymbolTokenizer
from atnat.experiments.modelfiles import ct2
from atnat.experiments.modelfiles.loading import attach_tokenizer
from atnat.models.seq2seq import Seq2SeqModule
from tests.training import fit

pytestmark = pytest.mark.skipif(not ct2.available(), reason="ctranslate2 is not installed (atnat[bench])")
SMALL = dict(d_model=32, n_heads=2, ffn_dim=64, encoder_layers=2, decoder_layers=2, dropout=0.0)


def random_module(vocab: int = 40, **model):
    torch.manual_seed(0)
    module = Seq2SeqModule(vocab_size=vocab, decoder="at", model={**SMALL, **model}).eval()
    tokenizer = SymbolTokenizer([f"w{i}" for i in range(vocab - 6)])
    attach_tokenizer(module, tokenizer, "none")
    return module, tokenizer


def our_nbest(module, sources, strategy):
    batch = collate([(i, s, []) for i, s in enumerate(sources)])
    with torch.inference_mode():
        h = module.decode(batch.src, batch.src_lengths, strategy)
    out = []
    for b in range(len(sources)):
        out.append([([t for t in h.tokens[b, n, : h.lengths[b, n]].tolist() if t != module.special.eos],
                     float(h.scores[b, n])) for n in range(h.tokens.size(1)) if h.scores[b, n] > float("-inf")])
    return out


@pytest.mark.parametrize("model", [{}, {"pre_ln": True}, {"tie_embeddings": False, "learned_positions": True}])
def test_converted_model_scores_sequences_with_our_log_probs(model, tmp_path):
    module, tokenizer = random_module(**model)
    with torch.no_grad():  # learned positions and untied tables start non-trivial
        for p in module.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    ct2.export_ctranslate2(module, tokenizer, tmp_path / "m")
    translator = ct2.load_translator(tmp_path / "m")
    gen = torch.Generator().manual_seed(1)
    src = [torch.randint(6, 40, (n,), generator=gen).tolist() for n in (7, 3, 12)]
    tgt = [torch.randint(6, 40, (n,), generator=gen).tolist() for n in (5, 9, 2)]
    words = ct2.vocabulary(tokenizer, 40)
    theirs = translator.score_batch([[words[i] for i in s] for s in src], [[words[i] for i in t] for t in tgt])
    batch = collate([(i, s, t) for i, (s, t) in enumerate(zip(src, tgt))])
    with torch.no_grad():
        ours = module.decoder.score_sequences(module.encode(batch.src), batch.tgt, batch.tgt.eq(0))  # incl. EOS
    for o, r, t in zip(ours.tolist(), theirs, tgt):
        assert r.tokens == [words[i] for i in t] + ["</s>"]
        assert sum(r.log_probs) == pytest.approx(o, abs=1e-4)


def test_greedy_equals_ours_token_for_token_on_random_weights():
    module, tokenizer = random_module()
    gen = torch.Generator().manual_seed(2)
    sources = [torch.randint(6, 40, (n,), generator=gen).tolist() for n in (4, 9, 1, 15, 6)]
    for strategy in (Greedy(max_len_a=1.0, max_len_b=2), Greedy(min_len=8, max_len_a=0.0, max_len_b=8),
                     Greedy(min_len=6, max_len_a=1.0, max_len_b=0)):  # min_len above some budgets
        decoder = ct2.ct2_decoder((module, tokenizer), strategy)
        ours = [ids for ((ids, _),) in our_nbest(module, sources, strategy)]
        assert decoder(sources) == ours  # budgets differ per sentence: cut at each one's own
        if strategy.min_len:  # EOS forbidden until min_len, and never past the budget
            assert all(min(strategy.min_len, b) <= len(ids) <= b for ids, b in zip(ours, decoder.budgets(sources)))


@pytest.mark.parametrize("strategy", [
    Beam(beam_size=4, n_best=3, length_norm="length", stopping="fairseq", max_len_a=1.0, max_len_b=2),
    Beam(beam_size=3, length_norm="none", max_len_a=0.5, max_len_b=4)])
def test_beam_nbest_equals_ours_on_random_weights(strategy):
    """Budgets differ per sentence (one CTranslate2 call per budget) and mostly bind."""
    module, tokenizer = random_module()
    gen = torch.Generator().manual_seed(3)
    sources = [torch.randint(6, 40, (n,), generator=gen).tolist() for n in (4, 9, 1, 15, 6, 9)]
    theirs = ct2.ct2_decoder((module, tokenizer), strategy).n_best(sources)
    ours = renormalised_nbest(module, sources, strategy)
    assert [[ids for ids, _ in s] for s in theirs] == [[ids for ids, _ in s] for s in ours]
    for t, o in zip(theirs, ours):
        assert [s for _, s in t] == pytest.approx([s for _, s in o], abs=1e-4)


def test_what_ctranslate2_cannot_express_is_refused(tmp_path):
    torch.manual_seed(0)
    nat = Seq2SeqModule(vocab_size=20, decoder="nat", model=SMALL)
    assert "decoder 'nat' is not the AT decoder" in ct2.conversion_problem(nat)
    with pytest.raises(AtnatError, match="non-autoregressive decoders have no CTranslate2 form"):
        ct2.build_spec(nat, [f"t{i}" for i in range(20)])
    special = nat.special
    refusals = {Beam(beam_size=4): "GNMT length penalty",
                Beam(beam_size=4, length_norm="length"): "stopping='fairseq'",
                Beam(beam_size=4, length_norm="none", n_best=2): "n_best=1",
                Beam(beam_size=4, length_norm="length", stopping="fairseq", min_len=3): "renormalises",
                Greedy(attention_window=(1, 2)): "monotonic attention window"}
    for strategy, reason in refusals.items():
        with pytest.raises(AtnatError, match=reason):
            ct2.ct2_options(strategy, special)
    approx = ct2.ct2_options(Beam(beam_size=4, alpha=0.6), special, exact=False)
    assert approx["length_penalty"] == 0.6 and approx["beam_size"] == 4
    exact = ct2.ct2_options(Beam(beam_size=4, n_best=3, length_norm="length", stopping="fairseq"), special)
    assert (exact["length_penalty"], exact["num_hypotheses"], exact["return_end_token"]) == (1.0, 3, True)


def test_cli_exports_an_at_run_and_refuses_a_nat_one(tmp_path, capsys):
    from atnat.experiments.modelfiles.export import export_safetensors

    module, _ = random_module()
    export_safetensors(module, tmp_path / "at")
    assert main(["export", str(tmp_path / "at"), str(tmp_path / "ct2"), "--format", "ctranslate2"]) == 0
    names = {p.name for p in (tmp_path / "ct2").iterdir()}
    assert {"model.bin", "config.json", "shared_vocabulary.json", "symbols.json"} <= names
    (tmp_path / "s.txt").write_text("w1 w2\n")
    src = str(tmp_path / "s.txt")
    for command in (["translate", "--checkpoint"], ["evaluate", "--src", src, "--ref", src, "--checkpoint"]):
        assert main([*command, str(tmp_path / "ct2")]) == 2  # not "checkpoints/best.ckpt does not exist"
        assert f"{tmp_path / 'ct2'} is a CTranslate2 model folder (model.bin)" in capsys.readouterr().err
    nat = Seq2SeqModule(vocab_size=40, decoder="nat", model=SMALL)
    attach_tokenizer(nat, SymbolTokenizer([f"w{i}" for i in range(34)]), "none")
    export_safetensors(nat, tmp_path / "nat")
    assert main(["export", str(tmp_path / "nat"), str(tmp_path / "nat-ct2"), "--format", "ctranslate2"]) == 2
    assert "cannot export to CTranslate2: CTranslate2 runs autoregressive" in capsys.readouterr().err


class Renormalised:
    """Our AT decoder's step with the never-emitted ids removed from the softmax (CTranslate2's
    suppress_sequences renormalises; our search masks after the log-softmax)."""

    def __init__(self, decoder):
        from atnat.decoding.processors import forbidden_ids

        self.decoder, self.ids = decoder, torch.tensor(list(forbidden_ids(decoder.special)))
        self.max_output_length = decoder.max_output_length

    def init_state(self, memory, **kwargs):
        return self.decoder.init_state(memory, **kwargs)

    def step(self, prev, state):
        logp, state = self.decoder.step(prev, state)
        return logp.index_fill(-1, self.ids, float("-inf")).log_softmax(-1), state  # (R, V)

    def reorder_state(self, state, order):
        return self.decoder.reorder_state(state, order)


def renormalised_nbest(module, sources, strategy):
    batch = collate([(i, s, []) for i, s in enumerate(sources)])
    with torch.inference_mode():
        h = strategy.search(Renormalised(module.decoder), module.encode(batch.src), src_lengths=batch.src_lengths,
                            special=module.special)
    return [[([t for t in h.tokens[b, n, : h.lengths[b, n]].tolist() if t != module.special.eos],
              float(h.scores[b, n])) for n in range(h.tokens.size(1)) if h.scores[b, n] > float("-inf")]
            for b in range(len(sources))]


@pytest.mark.slow
def test_trained_quickstart_at_greedy_and_beam_nbest_equal_ours():
    """The quickstart grid's AT (fertility, its model and optimiser settings), trained here.
    Greedy: token for token with our plain search. Beam: the n-best (tokens and scores) equals
    our Beam driven by the same step with the never-emitted ids renormalised away, which is
    what CTranslate2's suppress_sequences does; that search is ours, the step is the only change."""
    module, task = fit("at", "fertility", steps=500, model=dict(SMALL, d_model=64, n_heads=4, ffn_dim=256),
                       lr=0.002, warmup=60, max_tokens=768, vocab=10, min_len=3, max_len=8, n_train=4000,
                       n_test=200)
    attach_tokenizer(module, task.tokenizer, task.bleu_tokenize)
    src, tgt = task.splits["test"]
    sources = [list(s) for s in encode_split(task.tokenizer, src, tgt, name="test").src]
    greedy = ct2.ct2_decoder((module, task.tokenizer), Greedy())
    assert greedy(sources) == [ids for ((ids, _),) in our_nbest(module, sources, Greedy())]
    strategies = [Greedy(), Beam(beam_size=5, n_best=5, length_norm="length", stopping="fairseq"),
                  Beam(beam_size=4, n_best=2, length_norm="length", stopping="fairseq", max_len_a=0.0, max_len_b=9),
                  Beam(beam_size=5, length_norm="none")]
    for strategy in strategies:
        theirs = ct2.ct2_decoder((module, task.tokenizer), strategy).n_best(sources)
        ours = renormalised_nbest(module, sources, strategy)
        assert [[ids for ids, _ in s] for s in theirs] == [[ids for ids, _ in s] for s in ours], strategy
        for t, o in zip(theirs, ours):
            assert [s for _, s in t] == pytest.approx([s for _, s in o], abs=1e-4)


@pytest.mark.parametrize("strategy", [Greedy(max_len_a=2.0, max_len_b=10),
                                      Beam(beam_size=3, length_norm="length", stopping="fairseq", max_len_a=2.0,
                                           max_len_b=10)], ids=["greedy", "beam"])
def test_ctranslate2_keeps_to_the_models_own_output_cap(strategy):
    """Our search never emits more tokens than the model has positions; CTranslate2 was given a*S+b alone,
    so sources whose budget passed that cap crashed it (or, at the default sizes, decoded longer than ours)."""
    module, tokenizer = random_module(max_positions=12)
    gen = torch.Generator().manual_seed(2)
    sources = [torch.randint(6, 40, (n,), generator=gen).tolist() for n in (4, 9, 11)]
    decoder = ct2.ct2_decoder((module, tokenizer), strategy)
    assert max(decoder.budgets(sources)) <= module.decoder.max_output_length
    assert decoder(sources) == [best[0][0] for best in our_nbest(module, sources, strategy)]
