"""NAT strategies on hand-written tables: exact tokens, per-token log-probs, scores and passes."""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from atnat.core.errors import AtnatError
from atnat.decoding.base import STRATEGIES
from atnat.decoding.candidates import pick_best, top_lengths
from atnat.decoding.ctc_search import CTC, ctc_collapse
from atnat.decoding.length_beam import LengthBeam
from atnat.decoding.mask_predict import MaskPredict, lowest_slots, remask_schedule
from atnat.decoding.npd import NoisyParallel
from atnat.decoding.parallel import Parallel
from tests.nat_tables import BLANK, MASK, PAD, SPECIAL, A, B, C, D, FakeCTC, ids, nat_model, sampling_model

log = math.log


def run(strategy, model, *sentences, src_lengths=None, **kw):
    src = torch.tensor(src_lengths or [3] * len(sentences))
    return strategy.search(model, ids(*sentences), src_lengths=src, special=SPECIAL, **kw)


def best(hyp, b=0, n=0):
    """(tokens, positional log-probs, score) of hypothesis n of sentence b, without padding."""
    k = int(hyp.lengths[b, n])
    return (hyp.tokens[b, n, :k].tolist(), hyp.positional_scores[b, n, :k].tolist(),
            float(hyp.scores[b, n]))


def approx(values):
    return pytest.approx(values, abs=1e-5)


# ---------------------------------------------------------------- length helpers, length-beam

def test_length_candidates_are_the_argmax_and_its_neighbours_skip_zero_clamp_and_fill():
    lp = torch.tensor([[0.5, 0.1, 0.3, 0.05, 0.05], [0.1, 0.2, 0.1, 0.1, 0.5]]).log()
    assert top_lengths(lp, 2, 4).tolist() == [[2, 1], [4, 3]]  # argmax, then -1, +1, ...; never 0
    assert top_lengths(lp, 3, 4).tolist() == [[2, 1, 3], [4, 3, 2]]
    assert top_lengths(lp, 2, torch.tensor([4, 3])).tolist() == [[2, 1], [3, 2]]  # per-sentence cap
    assert top_lengths(lp, 6, 4).tolist() == [[2, 1, 3, 4, 2, 2], [4, 3, 2, 1, 4, 4]]  # too few: best fills


def test_length_candidates_ignore_a_far_away_runner_up_of_a_peaked_predictor():
    probs = torch.full((1, 71), 1e-6)
    probs[0, 8], probs[0, 70] = 0.9, 0.09  # an 8-token sentence, and an absurd 70-token mode
    assert top_lengths(probs.log(), 3, 70).tolist() == [[8, 7, 9]]
    assert pick_best(torch.tensor([0.1, 0.3, 0.3, -1.0, 2.0, 0.0]), 3).tolist() == [1, 4]


def test_length_beam_picks_mean_log_prob_not_sum_and_sorts():
    model = nat_model()
    hyp = run(LengthBeam(length_beam=3), model, 1)
    assert hyp.lengths.tolist() == [[3, 2, 1]]  # candidates 2 (argmax), 1, 3; length 0 skipped
    assert best(hyp, n=0) == ([C, D, A], approx([log(.9), log(.8), log(.4)]),
                              approx((log(.9) + log(.8) + log(.4)) / 3))
    assert best(hyp, n=1) == ([A, B], approx([log(.5), log(.6)]), approx((log(.5) + log(.6)) / 2))
    assert best(hyp, n=2)[0] == [D]
    assert hyp.n_steps == 1 and len(model.calls) == 1
    assert model.orders[0].tolist() == [0, 0, 0]
    assert model.mask_counts() == [[2, 1, 3]] and model.untouched()


def test_parallel_with_length_beam_equals_length_beam():
    a, b = run(Parallel(length_beam=3), nat_model(), 1, 0), run(LengthBeam(), nat_model(), 1, 0)
    for name in ("tokens", "positional_scores", "scores", "lengths"):
        assert torch.equal(getattr(a, name), getattr(b, name))


def test_parallel_predicted_length_argmax():
    model = nat_model()
    hyp = run(Parallel(), model, 1)
    assert best(hyp) == ([A, B], approx([log(.5), log(.6)]), approx((log(.5) + log(.6)) / 2))
    assert model.orders == [] and model.untouched()


def test_parallel_fixed_length_cut_at_first_eos():
    model = nat_model()
    strategy = Parallel(length="fixed", fixed_len_a=1.0, fixed_len_b=1)
    hyp = run(strategy, model, 2, 3, src_lengths=[2, 1])
    assert model.length_calls == 0
    assert model.calls[0]["tokens"].tolist() == [[MASK] * 3, [MASK, MASK, PAD]]
    assert best(hyp, 0) == ([A], approx([log(.7)]), approx(log(.7)))
    assert best(hyp, 1) == ([B, C], approx([log(.8), log(.7)]), approx((log(.8) + log(.7)) / 2))
    assert hyp.tokens[0, 0].tolist() == [A, PAD, PAD]  # EOS and what follows are cut
    assert hyp.sequences(SPECIAL) == [[A], [B, C]]


@pytest.mark.parametrize("options, field", [
    ({"length": "oracle"}, "length"), ({"length_beam": 0}, "length_beam"),
    ({"length": "fixed", "length_beam": 2}, "length_beam"),
])
def test_parallel_refuses_bad_options(options, field):
    with pytest.raises(AtnatError, match=field):
        Parallel(**options)
    with pytest.raises(AtnatError, match="predicted, fixed"):
        Parallel(length="oracle")


# ---------------------------------------------------------------- mask-predict

def test_remask_schedule_and_lowest_slots():
    assert remask_schedule(torch.tensor([4, 3, 1]), 4).tolist() == [
        [4, 3, 1], [3, 2, 0], [2, 1, 0], [1, 0, 0]]
    assert remask_schedule(torch.tensor([4]), 10).flatten().tolist() == [4, 3, 3, 2, 2, 2, 1, 1, 0, 0]
    probs = torch.tensor([[-0.1, -2.0, -0.5, 0.0], [-3.0, -0.2, -0.2, 0.0]])
    pad = torch.tensor([[False] * 4, [False, False, False, True]])
    assert lowest_slots(probs, pad, torch.tensor([2, 3])).tolist() == [
        [False, True, True, False], [True, True, True, False]]


EXPECTED_REFINE = {  # iterations -> (tokens, per-token probabilities, masked slots per pass)
    1: ([A, C, C, D], [.9, .5, .6, .7], [4]),
    2: ([A, B, C, D], [.9, .8, .6, .7], [4, 2]),
    4: ([A, B, C, D], [.9, .8, .95, .85], [4, 3, 2, 1]),
}


@pytest.mark.parametrize("iterations", [1, 2, 4])
def test_mask_predict_exact_after_t_iterations(iterations):
    model = nat_model()
    hyp = run(MaskPredict(iterations=iterations), model, 0)
    tokens, probs, counts = EXPECTED_REFINE[iterations]
    logs = [log(p) for p in probs]
    assert best(hyp) == (tokens, approx(logs), approx(sum(logs) / 4))
    assert hyp.n_steps == iterations == len(model.calls)
    assert model.mask_counts() == [[n] for n in counts]
    assert model.untouched()


def test_mask_predict_only_masked_slots_are_updated():
    model = nat_model()
    hyp = run(MaskPredict(iterations=4, record_history=True), model, 0)
    assert [h.tolist() for h in hyp.history] == [
        [[A, C, C, D]], [[A, B, C, D]], [[A, B, C, A]], [[A, B, C, D]]]
    for call, before, after in zip(model.calls[1:], hyp.history, hyp.history[1:]):
        kept = call["tokens"] != MASK
        assert torch.equal(after[kept], before[kept])  # slot 0 stays a, though d scores .99 there
        assert torch.equal(call["tokens"][kept], before[kept])


def test_mask_predict_early_stop_and_schedule_seen_by_model():
    stopped = nat_model()
    hyp = run(MaskPredict(iterations=10, early_stop=True), stopped, 0)
    assert hyp.n_steps == 3 and stopped.mask_counts() == [[4], [3], [3]]
    assert best(hyp)[:2] == ([A, B, C, D], approx([log(.9), log(.8), log(.6), log(.7)]))
    full = nat_model()
    hyp = run(MaskPredict(iterations=10, early_stop=False), full, 0)
    assert full.mask_counts() == [[4], [3], [3], [2], [2], [2], [1], [1]]  # then 0: no pass
    assert hyp.n_steps == 8
    assert best(hyp)[:2] == ([A, B, C, D], approx([log(.9), log(.8), log(.95), log(.85)]))


def test_mask_predict_runs_its_whole_schedule_by_default():
    """The adaptive early stop froze a sentence after a pass that changed nothing, though
    the next pass masks fewer slots and can change it; on the quickstart's fertility CMLMs 10
    iterations then scored below 4 (81.71 vs 83.21 BLEU, 3-seed means), and 87.91 without it. The paper's schedule
    (fairseq: --iter-decode-force-max-iter) is the default now; early_stop is opt-in and labelled."""
    model = nat_model()
    hyp = run(MaskPredict(iterations=10), model, 0)
    assert hyp.n_steps == 8 and best(hyp)[:2] == ([A, B, C, D], approx([log(.9), log(.8), log(.95), log(.85)]))
    assert MaskPredict(iterations=10).label == "mask-predict-10"
    assert MaskPredict(iterations=10, early_stop=True).label == "mask-predict-10-early_stop=true"


def test_mask_predict_winner_among_lengths_and_history():
    model = nat_model()
    hyp = run(MaskPredict(iterations=10, length_beam=2, record_history=True, early_stop=True), model, 0)
    assert hyp.n_steps == 3  # length 3 stops changing after pass 1, length 4 after pass 2
    assert model.mask_counts() == [[4, 3], [3, 2], [3]]  # one call per pass; converged rows leave
    assert [o.tolist() for o in model.orders] == [[0, 0], [0]]
    assert best(hyp, n=0) == ([C, C, C], approx([log(.97)] * 3), approx(log(.97)))
    assert best(hyp, n=1)[0] == [A, B, C, D]
    assert [h.tolist() for h in hyp.history] == [[[C, C, C, PAD]]] * 3
    assert run(MaskPredict(), nat_model(), 0).history is None


@pytest.mark.parametrize("early_stop, third", [(True, A), (False, B)])
def test_mask_predict_batch_equals_each_alone(early_stop, third):
    strategy = MaskPredict(iterations=4, length_beam=3, early_stop=early_stop)
    together = run(strategy, nat_model(), 0, 1)
    for b, sid in enumerate((0, 1)):
        alone = run(strategy, nat_model(), sid)
        for n in range(3):
            tokens, positional, score = best(alone, 0, n)
            assert best(together, b, n) == (tokens, approx(positional), approx(score))
    # sentence 1, length 3: "c d a" converges at once under early stop (sentence 0 goes on);
    # without it, slot 2 is re-masked alone at pass 3 and becomes b given d
    probs = [.9, .8, .4 if third == A else .7]
    assert best(together, 1) == ([C, D, third], approx([log(p) for p in probs]),
                                 approx(sum(log(p) for p in probs) / 3))


# ---------------------------------------------------------------- noisy parallel decoding

TEACHER = {(A, B): -0.6, (C, D, A): -1.2, (D,): -0.5}


def teacher(seen):
    def scorer(tokens, padding_mask, sentence_index):
        seen.append((tokens.clone(), padding_mask.clone(), sentence_index.clone()))
        rows = [tuple(t for t, p in zip(r, m) if not p) for r, m in
                zip(tokens.tolist(), padding_mask.tolist())]
        return torch.tensor([TEACHER.get(r, -50.0) for r in rows])
    return scorer


@pytest.mark.parametrize("normalize, order, score", [
    (True, [[A, B], [D], [C, D, A]], -0.6 / 3), (False, [[D], [A, B], [C, D, A]], -0.5)])
def test_npd_teacher_reranks(normalize, order, score):
    model, seen = nat_model(), []
    hyp = run(NoisyParallel(length_beam=3, normalize=normalize), model, 1, scorer=teacher(seen))
    assert [best(hyp, n=n)[0] for n in range(3)] == order  # the NAT alone ranks c d a first
    assert float(hyp.scores[0, 0]) == approx(score)
    assert best(hyp)[1] == approx([log(.5), log(.6)] if normalize else [log(.3)])
    assert hyp.n_steps == 1 and len(model.calls) == 1 and len(seen) == 1
    assert seen[0][2].tolist() == [0, 0, 0] and seen[0][0].shape == (3, 3)
    assert model.untouched()


def test_npd_batch_sentence_index_and_needs_teacher():
    seen = []
    hyp = run(NoisyParallel(length_beam=3), nat_model(), 0, 1, scorer=teacher(seen))
    assert seen[0][2].tolist() == [0, 0, 0, 1, 1, 1]
    assert best(hyp, 1)[0] == [A, B]
    with pytest.raises(AtnatError, match="AT teacher"):
        run(NoisyParallel(), nat_model(), 0)


def test_npd_samples_from_the_same_pass():
    def sample(**options):
        model, seen = sampling_model(), []
        hyp = run(NoisyParallel(length_beam=1, samples_per_length=16, **options), model, 4,
                  scorer=teacher(seen))
        assert len(model.calls) == 1 and seen[0][0].shape == (17, 2)
        return seen[0][0], hyp

    drawn, hyp = sample()
    assert drawn[0].tolist() == [A, C]  # the argmax candidate comes first
    assert set(drawn[:, 0].tolist()) == {A, B} and set(drawn[:, 1].tolist()) == {C, D}
    assert torch.equal(sample()[0], drawn)  # same seed, same samples
    assert not torch.equal(sample(seed=1)[0], drawn)
    assert (sample(temperature=1e-3)[0] == torch.tensor([A, C])).all()  # cold: argmax only
    first = {A: .55, B: .45}
    for n in range(17):
        tokens, positional, _ = best(hyp, n=n)
        assert positional[0] == approx(log(first[tokens[0]]))


# ---------------------------------------------------------------- CTC

def test_ctc_collapse_hand_alignments():
    alignments = torch.tensor([
        [A, A, BLANK, A, B, B, C],  # blank between repeats keeps both
        [BLANK, BLANK, BLANK, BLANK, BLANK, BLANK, BLANK],  # all blanks: empty output
        [C, C, C, D, D, A, A],  # padding after slot 3 ignored
    ])
    pad = torch.zeros(3, 7, dtype=torch.bool)
    pad[2, 4:] = True
    slot_lp = torch.arange(21, dtype=torch.float).reshape(3, 7).neg()
    tokens, scores = ctc_collapse(alignments, pad, BLANK, slot_lp)
    assert tokens == [[A, A, B, C], [], [C, D]]
    assert scores == [[0.0, -3.0, -4.0, -6.0], [], [-14.0, -17.0]]


CTC_ROWS = {
    0: [{A: .6}, {A: .7}, {BLANK: .8}, {A: .5}, {B: .9}, {B: .6}],
    1: [{BLANK: .9}, {C: .8}, {C: .7}],
}


def test_ctc_best_path_end_to_end_with_padding():
    model = FakeCTC(CTC_ROWS)
    hyp = run(CTC(), model, 0, 1)
    assert best(hyp, 0) == ([A, A, B], approx([log(.6), log(.5), log(.9)]),
                            approx(sum(log(p) for p in (.6, .7, .8, .5, .9, .6))))
    assert best(hyp, 1) == ([C], approx([log(.8)]), approx(log(.9) + log(.8) + log(.7)))
    assert hyp.n_steps == 1 and model.untouched()
    assert best(run(CTC(), FakeCTC(CTC_ROWS), 1)) == best(hyp, 1)


def labelings(rows):
    """Exact log-probability of every output, summed over all alignments (brute force)."""
    symbols = [BLANK, A, B]
    totals = {}
    for path in itertools.product(symbols, repeat=len(rows)):
        out = tuple(s for i, s in enumerate(path) if s != BLANK and (i == 0 or path[i - 1] != s))
        p = math.prod(row.get(s, 0.0) for row, s in zip(rows, path))
        totals[out] = totals.get(out, 0.0) + p
    return {out: log(p) for out, p in totals.items() if p > 0}


def test_ctc_prefix_beam_search_matches_brute_force():
    rows = [{BLANK: .5, A: .3, B: .2}, {BLANK: .4, A: .4, B: .2},
            {BLANK: .2, A: .3, B: .5}, {BLANK: .6, A: .1, B: .3}]
    exact = sorted(labelings(rows).items(), key=lambda kv: -kv[1])
    model = FakeCTC({0: rows, 1: rows[:2]})
    hyp = run(CTC(beam_size=32), model, 0, 1)
    found = [(tuple(best(hyp, 0, n)[0]), float(hyp.scores[0, n])) for n in range(len(exact))]
    assert [s for _, s in found] == approx([s for _, s in exact])
    assert dict(found) == approx(dict(exact))
    assert float(hyp.scores[0, len(exact)]) == float("-inf")
    short = sorted(labelings(rows[:2]).items(), key=lambda kv: -kv[1])[0]
    assert (tuple(best(hyp, 1)[0]), float(hyp.scores[1, 0])) == (short[0], approx(short[1]))
    assert model.untouched()


def test_ctc_beam_prefers_the_output_best_path_misses():
    rows = {0: [{BLANK: .6, A: .4}, {BLANK: .6, A: .4}]}
    assert best(run(CTC(), FakeCTC(rows), 0))[0] == []  # best path: blank blank (.36)
    hyp = run(CTC(beam_size=2), FakeCTC(rows), 0)
    assert best(hyp)[0] == [A] and float(hyp.scores[0, 0]) == approx(log(.64))
    assert best(hyp, n=1)[0] == [] and float(hyp.scores[0, 1]) == approx(log(.36))


# ---------------------------------------------------------------- registry

def test_registered_with_requirements():
    expected = {"parallel": "parallel", "length-beam": "parallel", "mask-predict": "parallel",
                "npd": "parallel", "ctc": "ctc"}
    for name, needs in expected.items():
        assert STRATEGIES.get(name).requires == needs
    with pytest.raises(AtnatError, match="beam_size"):
        CTC(beam_size=0)


# ---------------------------------------------------------------- special symbols never emitted

def special_model():
    """Sentence 5, length 3: the arg-max of slot 0 is pad, of slot 1 mask, of slot 2 eos."""
    from tests.nat_tables import FakeParallel, Slot

    EOS = SPECIAL.eos
    tables = {(5, 3): [Slot({PAD: 0.5, A: 0.3}), Slot({MASK: 0.6, B: 0.2}), Slot({EOS: 0.7, C: 0.1})]}
    return FakeParallel(lengths={5: {3: 1.0}}, tables=tables)


@pytest.mark.parametrize("strategy", [Parallel(), LengthBeam(length_beam=1), MaskPredict(iterations=2)])
def test_nat_strategies_never_emit_special_symbols(strategy):
    tokens, positional, _ = best(run(strategy, special_model(), 5))
    assert tokens == [A, B, C]
    assert positional == approx([log(.3), log(.2), log(.1)])  # the model's own log-probs of them


def test_npd_samples_never_contain_special_symbols():
    strategy = NoisyParallel(length_beam=1, samples_per_length=40, temperature=3.0)
    hyp = run(strategy, special_model(), 5, scorer=lambda t, m, i: torch.zeros(t.size(0)))
    assert not torch.isin(hyp.tokens, torch.tensor([SPECIAL.bos, SPECIAL.eos, MASK, BLANK])).any()
    assert bool((hyp.tokens[0, :, :3] != PAD).all())  # no pad inside a candidate


def test_npd_at_a_temperature_near_zero_samples_each_slots_best_token():
    """temperature 1e-40 made every log-prob / temperature -inf (a softmax of NaN: multinomial's RuntimeError); as the
    temperature goes to 0 sampling becomes each slot's argmax among the tokens it may emit."""
    from atnat.decoding.npd import sample_tokens

    torch.manual_seed(0)
    log_probs = torch.randn(2, 4, 12).log_softmax(-1)
    log_probs[:, :, SPECIAL.eos] = 0.0  # a special symbol the best: never sampled
    padding = torch.tensor([[False, False, False, True], [False, False, False, False]])
    ids, _ = sample_tokens(log_probs, padding, 3, temperature=1e-40, seeds=[1, 2], special=SPECIAL)
    from atnat.decoding.candidates import never_emitted

    allowed = log_probs.index_fill(-1, torch.tensor(never_emitted(SPECIAL)), float("-inf"))
    best = allowed.argmax(-1)  # (2, 4)
    for c in range(2):
        for t in range(4):
            if not padding[c, t]:
                assert ids[c, :, t].tolist() == [best[c, t].item()] * 3  # tokens (C, n, T)


def test_ctc_never_emits_special_symbols_but_blank():
    rows = {0: [{SPECIAL.eos: 0.6, A: 0.3}, {BLANK: 0.9}, {PAD: 0.5, B: 0.4}, {SPECIAL.bos: 0.8, C: 0.1}]}
    for beam in (1, 3):
        tokens, _, _ = best(CTC(beam_size=beam).search(FakeCTC(rows), ids(0), src_lengths=torch.tensor([2]),
                                                       special=SPECIAL))
        assert tokens == [A, B, C], beam


def test_length_candidates_of_a_sentence_do_not_depend_on_its_batch():
    """The predictor's table is as wide as the batch's longest source allows; a short sentence's lengths past
    its own longest (log-prob -inf) must not become candidates because a longer source shares its batch."""
    from atnat.decoding.candidates import predicted_lengths

    inf = float("-inf")
    short = torch.tensor([inf, -3.0, -2.0, -1.0, -0.5, -0.1])  # lengths 1..5, the most likely its longest
    table = torch.stack([torch.cat([short, torch.full((4,), inf)]), torch.linspace(-9, -1, 10)])  # (2, 10)

    class Predictor:
        def __init__(self, rows):
            self.rows = rows

        def predict_length(self, memory):
            return self.rows

    in_batch = predicted_lengths(Predictor(table), None, 3)
    alone = predicted_lengths(Predictor(short[None]), None, 3)
    assert in_batch[0].tolist() == alone[0].tolist() == [5, 4, 3]


def test_npd_samples_of_a_sentence_do_not_depend_on_its_batch():
    """One draw over the whole batch's table made a sentence's samples (and so the teacher's pick) depend on
    its neighbours and its padded width; each candidate row now draws from its own generator."""
    from atnat.models.seq2seq import Seq2SeqModule

    torch.manual_seed(0)
    model = Seq2SeqModule(vocab_size=16, decoder="cmlm", model=dict(
        d_model=32, n_heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2, dropout=0.0)).eval()
    strategy = NoisyParallel(length_beam=2, samples_per_length=8, seed=3)

    def candidates(src, row):
        hyp = model.decode(src, (src != 0).sum(1), strategy,
                           scorer=lambda t, m, i: t.masked_fill(m, 0).sum(1).float())  # a score of the candidate alone
        return sorted(tuple(hyp.tokens[row, n, :hyp.lengths[row, n]].tolist()) for n in range(hyp.tokens.size(1)))

    x, other = torch.tensor([[6, 7, 8, 9]]), torch.tensor([[10, 11, 12, 13, 14, 6, 7]])
    padded = torch.cat([other, torch.nn.functional.pad(x, (0, 3))])
    alone = candidates(x, 0)
    assert candidates(padded, 1) == alone and candidates(padded.flip(0), 0) == alone
    assert len(set(alone)) > 2  # samples were drawn


def test_npd_ranks_a_candidate_longer_than_its_teacher_writes_last_instead_of_failing():
    """The teacher scores a candidate and its EOS by teacher forcing: a candidate of the NAT's max_positions
    tokens needed one position more than an AT teacher of the same table has, and npd failed (ValueError)."""
    from atnat.experiments.evaluation.assemble import needs_teacher
    from atnat.models.seq2seq import Seq2SeqModule

    sizes = dict(d_model=16, n_heads=2, ffn_dim=32, encoder_layers=1, decoder_layers=1, dropout=0.0, max_positions=16)
    torch.manual_seed(0)
    teacher = Seq2SeqModule(vocab_size=40, decoder="at", model=sizes).eval()
    cmlm = Seq2SeqModule(vocab_size=40, decoder="cmlm", model=sizes).eval()
    with torch.no_grad():  # lengths: the source's + 1 (16 tokens) first, then 15, then 17 (over the table: not offered)
        cmlm.decoder.length_predictor.proj.bias[cmlm.decoder.length_predictor.max_offset + 1] += 50
    src = torch.randint(6, 40, (1, 15), generator=torch.Generator().manual_seed(1))
    strategy = NoisyParallel(length_beam=2)
    with torch.inference_mode():
        hyps = cmlm.decode(src, torch.tensor([15]), strategy, **needs_teacher(strategy, teacher, src))
    assert hyps.lengths[0].tolist() == [15, 16]  # the one the teacher can score first, the 16-token one last
    assert math.isfinite(float(hyps.scores[0, 0])) and hyps.scores[0, 1] == float("-inf")


@pytest.mark.parametrize("make, field", [
    (lambda: __import__("atnat.decoding.beam", fromlist=["Beam"]).Beam(beam_size=4, length_norm="gnmt", alpha=60),
     "alpha"),  # every finished hypothesis scored -0.0: the ranking and the stopping were arbitrary ties
    (lambda: __import__("atnat.decoding.npd", fromlist=["NoisyParallel"]).NoisyParallel(temperature=1e-46),
     "temperature"),  # 0.0 in float32: NaN probabilities, then a bare RuntimeError from multinomial
])
def test_options_beyond_float32_range_are_refused(make, field):
    with pytest.raises(AtnatError, match=field):
        make()
