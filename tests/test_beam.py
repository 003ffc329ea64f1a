"""Beam search on hand tables and against exhaustive search: exact tokens, scores and lengths."""
import itertools
import math

import pytest
import torch

from atnat.core.errors import AtnatError
from atnat.decoding.base import STRATEGIES
from atnat.decoding.beam import Beam
from atnat.decoding.greedy import Greedy
from tests.tables import (
    EOS,
    PAD,
    SPECIAL,
    A,
    B,
    C,
    D,
    TableModel,
    random_table,
    sequence_logprob,
)

# Greedy takes a (0.5) then EOS: 0.2. Beam (K=2) finds b EOS: 0.36.
BEATS_GREEDY = {
    (): {A: 0.5, B: 0.4, EOS: 0.1},
    (A,): {A: 0.3, B: 0.25, C: 0.05, EOS: 0.4},
    (B,): {EOS: 0.9, C: 0.1},
}
# With max length 4, the winner depends on the ranking: raw log-probs EOS (-1.0), a EOS (-1.1),
# b b b EOS (-1.8); "none" picks EOS, "gnmt" a EOS (-0.943), "length" b b b EOS (-0.45).
P_EOS, P_AEOS, P_BBBEOS = math.exp(-1.0), math.exp(-1.1), math.exp(-1.8)
NORMS = {
    (): {A: 0.4, EOS: P_EOS, B: 1 - 0.4 - P_EOS},
    (A,): {EOS: P_AEOS / 0.4, C: 1 - P_AEOS / 0.4},
    (A, C): {C: 1.0},
    (A, C, C): {C: 1.0},
    (B,): {B: 1.0},
    (B, B): {B: 1.0},
    (B, B, B): {EOS: P_BBBEOS / (0.6 - P_EOS), D: 0.2, A: 1 - 0.2 - P_BBBEOS / (0.6 - P_EOS)},
}


def run(strategy, model: TableModel, src_lengths, sentences=None):
    src = torch.tensor(src_lengths)
    memory = sentences if sentences is not None else len(src_lengths)  # the tables' sentence ids
    return strategy.search(model, memory, src_lengths=src, special=SPECIAL)


def fixed(max_len: int, **options) -> Beam:
    """A beam whose maximum is `max_len` content tokens whatever the source length."""
    return Beam(max_len_a=0.0, max_len_b=max_len, **options)


def expected(beam: Beam, model: TableModel, seqs, sentence: int = 0) -> list[float]:
    """Ranking scores of `seqs` under the same rules (float32 sums, then normalised)."""
    return [float(torch.tensor(sequence_logprob(model, sentence, s)) / beam.normaliser(len(s)))
            for s in seqs]


def nbest(hyp, i: int = 0) -> list[list[int]]:
    """Sentence i's hypotheses as token lists (EOS kept), best first."""
    return [row[:n] for row, n in zip(hyp.tokens[i].tolist(), hyp.lengths[i].tolist())]


def test_registered_and_validated():
    assert STRATEGIES.get("beam") is Beam and Beam.requires == "step"
    with pytest.raises(AtnatError, match="length_norm.*none, length, gnmt"):
        Beam(length_norm="average")
    with pytest.raises(AtnatError, match="n_best"):
        Beam(beam_size=2, n_best=3)
    with pytest.raises(AtnatError, match="beam_size"):
        Beam(beam_size=0)
    with pytest.raises(AtnatError, match="stopping.*heuristic, exact, fairseq"):
        Beam(stopping="never")
    for alpha in (-0.5, float("nan")):
        with pytest.raises(AtnatError, match="alpha must be a finite number from 0 to 10"):
            Beam(alpha=alpha)


def test_beam_finds_what_greedy_misses():
    model = TableModel(BEATS_GREEDY)
    greedy = run(Greedy(), TableModel(BEATS_GREEDY), [3])
    assert greedy.tokens.tolist() == [[[A, EOS]]]
    beam = fixed(6, beam_size=2, n_best=2, length_norm="none")
    hyp = run(beam, model, [3])
    assert nbest(hyp) == [[B, EOS], [A, EOS]]
    assert hyp.scores[0].tolist() == expected(beam, model, [[B, EOS], [A, EOS]])
    assert hyp.scores[0, 0].item() == pytest.approx(math.log(0.36), abs=1e-6)
    assert torch.equal(hyp.positional_scores[0, 0], torch.tensor([math.log(0.4), math.log(0.9)]))
    assert hyp.lengths.tolist() == [[2, 2]]
    # step 1 finished 2 and the best live beam (a a, 0.15) is below 0.2: stop after 2 passes
    assert hyp.n_steps == 2 == model.n_calls
    assert model.orders[0].tolist() == [0, 0]  # the initial state expanded to K rows
    assert model.untouched()


RAW_ACCC = math.log(0.4 - P_AEOS)  # a c c c, truncated at 4


def test_normaliser():
    assert Beam(length_norm="none").normaliser(4) == 1.0
    assert Beam(length_norm="length").normaliser(4) == 4.0
    assert Beam(length_norm="gnmt", alpha=1.0).normaliser(4) == pytest.approx(1.5)
    assert Beam(length_norm="gnmt", alpha=0.6).normaliser(1) == 1.0
    assert Beam(length_norm="gnmt", alpha=0.6).normaliser(7) == pytest.approx(2.0 ** 0.6)


@pytest.mark.parametrize("norm,winners,scores", [
    ("none", [[EOS], [A, EOS], [B, B, B, EOS]], [-1.0, -1.1, -1.8]),
    ("length", [[B, B, B, EOS], [A, EOS], [A, C, C, C]], [-0.45, -0.55, RAW_ACCC / 4]),
    ("gnmt", [[A, EOS], [EOS], [B, B, B, EOS]], [-1.1 * 6 / 7, -1.0, -1.8 / 1.5]),
])
def test_length_normalisation_changes_the_winner(norm, winners, scores):
    model = TableModel(NORMS)
    beam = fixed(4, beam_size=3, n_best=3, length_norm=norm)
    hyp = run(beam, model, [1])
    assert nbest(hyp) == winners
    assert hyp.scores[0].tolist() == pytest.approx(scores, abs=1e-6)
    assert hyp.scores[0].tolist() == pytest.approx(expected(beam, model, winners), abs=1e-6)
    assert hyp.lengths[0].tolist() == [len(w) for w in winners]
    assert hyp.n_steps == 4
    for n, w in enumerate(winners):
        logps = [model.dist(0, tuple(w[:i]))[tok] for i, tok in enumerate(w)]
        assert hyp.positional_scores[0, n, :len(w)].tolist() == pytest.approx(logps)


def test_raw_scores_of_the_norm_table():
    model = TableModel(NORMS)
    raw = [sequence_logprob(model, 0, s) for s in ([EOS], [A, EOS], [B, B, B, EOS])]
    assert raw == pytest.approx([-1.0, -1.1, -1.8], abs=1e-6)


def test_max_length_finalises_live_beams_without_eos():
    model = TableModel(NORMS)
    beam = fixed(2, beam_size=3, n_best=3, length_norm="none")
    hyp = run(beam, model, [1])
    assert nbest(hyp) == [[EOS], [A, EOS], [B, B]]
    assert hyp.tokens[0].tolist() == [[EOS, PAD], [A, EOS], [B, B]]
    assert hyp.scores[0].tolist() == expected(beam, model, [[EOS], [A, EOS], [B, B]])
    assert hyp.positional_scores[0, 0].tolist() == [pytest.approx(-1.0), 0.0]
    assert hyp.n_steps == 2 == model.n_calls


def test_min_length():
    model = TableModel(NORMS)
    beam = fixed(4, beam_size=3, n_best=3, length_norm="none", min_len=2)
    hyp = run(beam, model, [1])
    winners = [[B, B, B, EOS], [A, C, C, C], [B, B, B, D]]
    assert nbest(hyp) == winners
    assert hyp.scores[0].tolist() == expected(beam, model, winners)


def test_finished_hypotheses_are_never_lost():
    # EOS at once (0.55) stays best while the live beam (0.45 * 0.9^k) keeps going to the end
    table = lambda sid, prefix: {EOS: 0.55, A: 0.45} if not prefix else {A: 0.9, EOS: 0.1}
    model = TableModel(table)
    beam = fixed(6, beam_size=2, n_best=2, length_norm="none")
    hyp = run(beam, model, [1])
    assert nbest(hyp) == [[EOS], [A] * 6]
    assert hyp.scores[0].tolist() == expected(beam, model, [[EOS], [A] * 6])
    assert hyp.n_steps == 6


def test_stops_as_soon_as_no_live_beam_can_enter_the_list():
    # K = 2, "none": the list is [EOS 0.5, a EOS 0.18] after step 1 with a c (0.27) still live;
    # at step 2 nothing ends, but a c d (0.162) and a c a (0.108) can no longer enter: stop there
    table = {(): {EOS: 0.5, A: 0.45, B: 0.05}, (A,): {EOS: 0.4, C: 0.6},
             (A, C): {D: 0.6, A: 0.4}}
    model = TableModel(table)
    hyp = run(fixed(6, beam_size=2, n_best=2, length_norm="none"), model, [1])
    assert nbest(hyp) == [[EOS], [A, EOS]]
    assert hyp.scores[0].tolist() == pytest.approx([math.log(0.5), math.log(0.18)], abs=1e-6)
    assert hyp.n_steps == 3 == model.n_calls


@pytest.mark.parametrize("norm", ["none", "gnmt"])
def test_fewer_hypotheses_than_n_best_leaves_empty_slots(norm):
    model = TableModel({(): {EOS: 1.0}})  # the only hypothesis: EOS at once
    hyp = run(fixed(5, beam_size=3, n_best=3, length_norm=norm), model, [1])
    assert hyp.tokens.tolist() == [[[EOS], [PAD], [PAD]]]
    assert hyp.scores.tolist() == [[0.0, float("-inf"), float("-inf")]]
    assert hyp.lengths.tolist() == [[1, 0, 0]]
    assert hyp.n_steps == 1  # no live beam left: stop


# "length" norm, K = 2, n_best = 1: after step 1 the best finished is EOS (-0.5 per token) and
# the live a b has log-prob -2.0: ending next it would score -2/3 (heuristic: stop), but c c c c
# then EOS for free reach -2/7 (exact: keeps going); fairseq stops at 2 finished (EOS, a EOS).
P_A = 1 - math.exp(-0.5)
LATE = {(): {EOS: math.exp(-0.5), A: P_A},
        (A,): {B: math.exp(-2.0) / P_A, EOS: 1 - math.exp(-2.0) / P_A},
        (A, B): {C: 1.0}, (A, B, C): {C: 1.0}, (A, B, C, C): {C: 1.0}, (A, B, C, C, C): {C: 1.0}}


@pytest.mark.parametrize("stopping,winner,score,steps", [
    ("heuristic", [EOS], -0.5, 2),
    ("exact", [A, B, C, C, C, C, EOS], -2.0 / 7, 7),
    ("fairseq", [EOS], -0.5, 2),
])
def test_stopping_rules(stopping, winner, score, steps):
    model = TableModel(LATE)
    hyp = run(fixed(8, beam_size=2, length_norm="length", stopping=stopping), model, [1])
    assert nbest(hyp) == [winner]
    assert hyp.scores[0, 0].item() == pytest.approx(score, abs=1e-6)
    assert hyp.n_steps == steps == model.n_calls


def test_exact_stopping_bounds_with_the_maximum_length():
    # max 7: EOS scores -0.3; a b (-2.0) can only win by reaching |Y| = 7 (-2/7 > -0.3 > -2/6)
    p_a = 1 - math.exp(-0.3)
    table = {**LATE, (): {EOS: math.exp(-0.3), A: p_a},
             (A,): {B: math.exp(-2.0) / p_a, EOS: 1 - math.exp(-2.0) / p_a}}
    hyp = run(fixed(7, beam_size=2, length_norm="length", stopping="exact"), TableModel(table), [1])
    assert nbest(hyp) == [[A, B, C, C, C, C, EOS]] and hyp.n_steps == 7
    hyp = run(fixed(7, beam_size=2, length_norm="length"), TableModel(table), [1])
    assert nbest(hyp) == [[EOS]] and hyp.n_steps == 1


def test_fairseq_stopping_misses_a_late_end_that_the_heuristic_finds():
    # EOS ranks second at every step of a peaked path: two poor endings fill a K = 2 list early
    peak = {A: 0.9, EOS: 0.06, B: 0.04}
    table = {(): peak, (A,): peak, (A, A): peak, (A, A, A): {EOS: 0.95, B: 0.05}}
    fairseq = run(fixed(8, beam_size=2, length_norm="length", stopping="fairseq"),
                  TableModel(table), [1])
    assert nbest(fairseq) == [[A, EOS]] and fairseq.n_steps == 2
    model = TableModel(table)
    beam = fixed(8, beam_size=2, length_norm="length")
    hyp = run(beam, model, [1])
    assert nbest(hyp) == [[A, A, A, EOS]]
    assert hyp.scores[0, 0].item() == pytest.approx(math.log(0.9 ** 3 * 0.95) / 4, abs=1e-6)
    assert hyp.n_steps == 4  # then a a a b (0.036) could not beat it even ending at once


def test_beam_of_one_equals_greedy():
    tables = [BEATS_GREEDY, NORMS, random_table([A, B, C], seed=1), random_table([A, B], seed=2)]
    src = [3, 1, 4, 7]
    for opts in ({}, {"min_len": 2}, {"no_repeat_ngram": 1}):
        greedy = run(Greedy(max_len_a=1.0, max_len_b=1, **opts), TableModel(tables), src)
        beam = Beam(beam_size=1, length_norm="none", max_len_a=1.0, max_len_b=1, **opts)
        hyp = run(beam, TableModel(tables), src)
        assert torch.equal(hyp.tokens, greedy.tokens)
        assert torch.equal(hyp.positional_scores, greedy.positional_scores)
        assert torch.equal(hyp.scores, greedy.scores)
        assert torch.equal(hyp.lengths, greedy.lengths)
        assert hyp.n_steps == greedy.n_steps


@pytest.mark.parametrize("beam,sizes", [
    (Beam(beam_size=3, n_best=3, length_norm="none", max_len_a=1.0, max_len_b=0),
     [9, 9, 6, 6, 3]),  # sentence 1 (max 2) leaves after 2 steps, sentence 0 (max 4) after 4
    (Beam(beam_size=3, n_best=2, length_norm="gnmt", alpha=0.6, max_len_a=1.0, max_len_b=0,
          no_repeat_ngram=2), [9, 9, 3]),
])
def test_batch_equals_each_sentence_alone(beam, sizes):
    tables = [NORMS, BEATS_GREEDY, random_table([A, B, C], seed=3)]
    src = [4, 2, 5]  # different maximum lengths
    model = TableModel(tables)
    hyp = run(beam, model, src)
    for i in range(3):
        alone = run(beam, TableModel(tables), [src[i]], sentences=[i])
        assert nbest(hyp, i) == nbest(alone)
        width = alone.tokens.size(2)
        assert torch.equal(hyp.positional_scores[i, :, :width], alone.positional_scores[0])
        assert (hyp.positional_scores[i, :, width:] == 0).all()
        assert torch.equal(hyp.scores[i], alone.scores[0])
    assert model.batch_sizes == sizes  # stopped sentences leave the batch
    assert model.untouched()


def exhaustive(beam: Beam, model: TableModel, words, max_len: int) -> list[tuple[float, list]]:
    """Every hypothesis the rules allow, with its ranking score, best first."""
    seqs = [list(w) for w in itertools.product(words, repeat=max_len)]
    for n in range(beam.min_len, max_len):
        seqs += [list(w) + [EOS] for w in itertools.product(words, repeat=n)]
    if beam.no_repeat_ngram:
        n = beam.no_repeat_ngram
        seqs = [s for s in seqs if len({tuple(s[i:i + n]) for i in range(len(s) - n + 1)})
                == len(s) - n + 1]
    return sorted(zip(expected(beam, model, seqs), seqs), key=lambda x: -x[0])


@pytest.mark.parametrize("norm,min_len,ngram", [
    ("none", 0, 0), ("length", 0, 0), ("gnmt", 0, 0), ("gnmt", 2, 0), ("none", 0, 2),
])
def test_beam_equals_exhaustive_search(norm, min_len, ngram):
    words, max_len = [A, B, C], 4  # with EOS: a vocabulary of 4 (the other ids are forbidden)
    model = TableModel(random_table(words, seed=7))
    opts = dict(length_norm=norm, min_len=min_len, no_repeat_ngram=ngram)
    beam = fixed(max_len, beam_size=128, n_best=10, stopping="exact", **opts)  # keeps everything
    truth = exhaustive(beam, model, words, max_len)
    hyp = run(beam, model, [1])
    assert nbest(hyp) == [s for _, s in truth[:10]]
    assert hyp.scores[0].tolist() == pytest.approx([x for x, _ in truth[:10]], abs=1e-6)
    for k in (1, 2, 3):
        small = fixed(max_len, beam_size=k, **opts)
        best = run(small, model, [1])
        tokens = nbest(best)[0]
        own = expected(small, model, [tokens])[0]
        assert best.scores[0, 0].item() == pytest.approx(own, abs=1e-6)
        assert own <= truth[0][0] + 1e-6
        assert tokens in [s for _, s in truth]
