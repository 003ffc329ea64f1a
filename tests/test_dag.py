"""The DAG decoder (DA-Transformer): the path-marginal likelihood and the best path against brute-force
enumeration of every path (values and gradients, padding, targets that do not fit), the three
decoding strategies on hand-written graphs with hand-computed answers, glancing on the best path,
graph sizes, refusals, and learning the copy task."""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from atnat.core.errors import AtnatError
from atnat.core.special import SpecialTokens
from atnat.decoding.dag_walk import DAGGreedy, DAGLookahead, DAGViterbi, read_paths
from atnat.experiments.config.run import ConfigError, run_config_from_dict
from atnat.models.batch import Batch
from atnat.models.decoders.dag import graph_size
from atnat.models.decoders.dag_paths import dag_best_alignment, dag_log_likelihood
from atnat.models.seq2seq import Seq2SeqModule
from tests.training import TINY_MODEL, decode_split, fit

SP = SpecialTokens()
A, B, C, D = 6, 7, 8, 9
V = 10


def allowed(L: int, sizes: torch.Tensor) -> torch.Tensor:
    """(B, L, L) True where a link i -> j exists: i < j, both inside the row's graph."""
    inside = torch.arange(L)[None, :] < sizes[:, None]  # (B, L)
    return torch.ones(L, L, dtype=torch.bool).triu(1)[None] & inside[:, :, None] & inside[:, None, :]


def random_graph(sizes, M, seed=0):
    g = torch.Generator().manual_seed(seed)
    sizes = torch.tensor(sizes)
    L = int(sizes.max())
    match = torch.randn(len(sizes), M, L, generator=g).log_softmax(-1)
    ok = allowed(L, sizes)
    links = torch.randn(len(sizes), L, L, generator=g).masked_fill(~ok, -1e9).log_softmax(-1).masked_fill(~ok, -math.inf)
    return match.requires_grad_(), links.requires_grad_(), sizes


def paths(L: int, M: int):
    """Every path of M vertices from 0 to L - 1."""
    for middle in itertools.combinations(range(1, L - 1), M - 2):
        yield (0, *middle, L - 1)


def brute(match, links, L, M):
    """(log of the sum over paths, best path's score, best path) by enumeration."""
    if M == 1:
        scores = [(match[0, 0], (0,))] if L == 1 else []
    else:
        scores = [(sum(links[i, j] for i, j in zip(p, p[1:])) + sum(match[m, v] for m, v in enumerate(p)), p)
                  for p in paths(L, M)]
    if not scores:
        return None, None, None
    best = max(scores, key=lambda s: float(s[0].detach()))
    return torch.logsumexp(torch.stack([s for s, _ in scores]), 0), best[0], best[1]


def test_likelihood_and_gradients_equal_the_sum_over_every_path():
    match, links, sizes = random_graph([7, 5, 6, 3], M=4, seed=1)
    targets = torch.tensor([4, 3, 4, 4])  # row 3: four tokens do not fit three vertices
    ll = dag_log_likelihood(match, links, sizes, targets)
    assert ll[3].item() == -math.inf
    expected = torch.stack([brute(match[b], links[b], int(sizes[b]), int(targets[b]))[0] for b in range(3)])
    torch.testing.assert_close(ll[:3], expected, atol=1e-5, rtol=1e-5)
    grads = torch.autograd.grad(ll[:3].sum(), [match, links])
    want = torch.autograd.grad(expected.sum(), [match, links])
    for got, ref in zip(grads, want):
        torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
        assert torch.isfinite(got).all()


@pytest.mark.parametrize("gap", [100.0, 1000.0])  # below float32's range; below float64's too
def test_likelihood_is_exact_when_the_only_way_to_the_end_is_far_below_the_best_vertex(gap):
    """Vertex 1 takes nearly all of the first link's mass, but only vertex 2 links to the last vertex,
    and vertex 1's link to it is e^-gap: the target's paths lie gap nats below the step's best."""
    match, links, sizes = random_graph([4, 5], M=3, seed=4)
    with torch.no_grad():
        links[:, 0, 1], links[:, 0, 2], links[:, 1, 3] = 0.0, -gap, -gap
        links[1, 1, 4] = links[1, 2, 4] = -gap
    targets = torch.tensor([3, 3])
    ll = dag_log_likelihood(match, links, sizes, targets)
    md, ld = match.detach().double().requires_grad_(), links.detach().double().requires_grad_()
    expected = torch.stack([brute(md[b], ld[b], int(sizes[b]), 3)[0] for b in range(2)])
    torch.testing.assert_close(ll.double(), expected, atol=1e-4, rtol=1e-6)
    grads = torch.autograd.grad(ll.sum(), [match, links])
    for got, ref in zip(grads, torch.autograd.grad(expected.sum(), [md, ld])):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got.double(), ref, atol=1e-5, rtol=1e-5)


def test_an_unreachable_vertex_carries_no_mass_into_the_answer():
    """Vertex 0 links almost surely to the last vertex, so after it the only vertex with any mass is one
    that no path of 4 tokens can use; the paths that can (y2 on vertices 1 to 3) lie 100 nats lower, no
    log-prob below -60. A floored value at that vertex must not reach the answer."""
    L, M = 5, 4
    ok = torch.ones(L, L, dtype=torch.bool).triu(1)
    raw = torch.zeros(L, L)
    raw[0, 1] = raw[0, 2] = raw[0, 3] = -60.0
    links = raw.masked_fill(~ok, -1e9).log_softmax(-1).masked_fill(~ok, -math.inf)[None].requires_grad_()
    match = torch.zeros(1, M, L)
    match[0, 2, 2:] = -40.0  # y2 certain only at vertex 1
    match.requires_grad_()
    ll = dag_log_likelihood(match, links, torch.tensor([L]), torch.tensor([M]))
    md, ld = match.detach().double().requires_grad_(), links.detach().double().requires_grad_()
    expected = brute(md[0], ld[0], L, M)[0]
    assert ll.item() == pytest.approx(expected.item(), abs=1e-4)
    for got, ref in zip(torch.autograd.grad(ll.sum(), [match, links]), torch.autograd.grad(expected, [md, ld])):
        torch.testing.assert_close(got.double(), ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("scale", [30.0, 400.0])
def test_likelihood_is_exact_on_peaked_random_graphs(scale):
    """Logits scaled up as a trained model's: most vertices are far below their step's best."""
    g = torch.Generator().manual_seed(5)
    sizes, M = torch.tensor([7, 6, 5]), 4
    ok = allowed(7, sizes)
    match = (torch.randn(3, M, 7, generator=g) * scale).log_softmax(-1).requires_grad_()
    links = (torch.randn(3, 7, 7, generator=g) * scale).masked_fill(~ok, -1e9).log_softmax(-1).masked_fill(~ok, -math.inf)
    links.requires_grad_()
    targets = torch.tensor([4, 3, 4])
    ll = dag_log_likelihood(match, links, sizes, targets)
    md, ld = match.detach().double().requires_grad_(), links.detach().double().requires_grad_()
    expected = torch.stack([brute(md[b], ld[b], int(sizes[b]), int(targets[b]))[0] for b in range(3)])
    torch.testing.assert_close(ll.double(), expected, atol=1e-3, rtol=1e-6)
    grads = torch.autograd.grad(ll.sum(), [match, links])
    for got, ref in zip(grads, torch.autograd.grad(expected.sum(), [md, ld])):
        torch.testing.assert_close(got.double(), ref, atol=1e-5, rtol=1e-5)


def test_best_alignment_is_the_best_path_by_enumeration():
    match, links, sizes = random_graph([7, 6, 4], M=4, seed=2)
    targets = torch.tensor([4, 3, 4])
    path, score = dag_best_alignment(match.detach(), links.detach(), sizes, targets)
    for b in range(3):
        _, best, best_path = brute(match[b].detach(), links[b].detach(), int(sizes[b]), int(targets[b]))
        assert score[b].item() == pytest.approx(float(best), abs=1e-5)
        assert path[b, : targets[b]].tolist() == list(best_path)
        assert (path[b, targets[b]:] == -1).all()


@pytest.mark.parametrize("size,tokens", [(3, 5), (3, 1)])  # longer than the graph; one token, first != last vertex
def test_a_target_that_no_path_emits_has_no_path(size, tokens):
    match, links, sizes = random_graph([size], M=tokens, seed=3)
    path, score = dag_best_alignment(match.detach(), links.detach(), sizes, torch.tensor([tokens]))
    assert score.item() == -math.inf and (path == -1).all()
    assert dag_log_likelihood(match, links, sizes, torch.tensor([tokens])).item() == -math.inf


# ---------------------------------------------------------------- decoding a hand-written graph

def vertex(dist: dict[int, float]) -> list[float]:
    row = [1e-9] * V
    for tok, p in dist.items():
        row[tok] = p
    return row


class HandGraph:
    """A DAGModel returning fixed tables: vertex 0 emits bos, vertex 4 eos (see the test below)."""

    def __init__(self):
        emit = [vertex({SP.bos: 1.0}), vertex({A: .3, B: .25, C: .25, D: .2}), vertex({B: .9, C: .1}),
                vertex({C: .7, A: .3}), vertex({SP.eos: 1.0})]
        links = [[0, .4, .35, .15, .1], [0, 0, .5, .4, .1], [0, 0, 0, .4, .6], [0, 0, 0, 0, 1.0], [0] * 5]
        self.log_probs = torch.tensor([emit]).log()  # (1, 5, V)
        self.links = torch.tensor([links]).log()  # (1, 5, 5), -inf where there is no link
        self.padding_mask = torch.zeros(1, 5, dtype=torch.bool)

    def forward_dag(self, memory):
        return self.log_probs, self.links, self.padding_mask


def decode(strategy, model=None):
    out = strategy.search(model or HandGraph(), None, src_lengths=torch.tensor([2]), special=SP)
    return out.sequences(SP)[0], out


def test_greedy_follows_the_likeliest_link():
    tokens, out = decode(DAGGreedy())  # 0 -(.4)-> 1 [A] -(.5)-> 2 [B] -(.6)-> 4
    assert tokens == [A, B] and out.n_steps == 1
    assert out.scores[0, 0].item() == pytest.approx(math.log(.4 * .3 * .5 * .9 * .6), abs=1e-5)
    assert out.positional_scores[0, 0, :2].tolist() == pytest.approx([math.log(.3), math.log(.9)], abs=1e-5)


def test_lookahead_weighs_the_next_vertex_token():
    # from 0: .4 x .3 (vertex 1) < .35 x .9 (vertex 2); from 2: .4 x .7 (vertex 3) < .6 x 1.0 (eos at 4)
    assert decode(DAGLookahead())[0] == [B]
    assert decode(DAGLookahead(beta=0.0))[0] == [A, B]  # beta 0: greedy on links


def test_joint_viterbi_picks_path_and_length():
    # best path per count of middle vertices: K=1 0-2-4 (.189), K=2 0-2-3-4 (.0882), K=3 0-1-2-3-4 (.01512);
    # per token: log .189 / 1 = -1.67 < log .0882 / 2 = -1.21 > log .01512 / 3 = -1.40 -> K = 2
    tokens, out = decode(DAGViterbi())
    assert tokens == [B, C]
    assert out.scores[0, 0].item() == pytest.approx(math.log(.0882), abs=1e-4)
    assert decode(DAGViterbi(beta=0.0))[0] == [B]  # the highest total, unnormalised: K = 1


def test_joint_viterbis_length_exponent_may_be_a_whole_number_and_is_bounded():
    """beta = 20 written as an int overflowed (K ** 20 an int too big for a tensor), beta = 1e308 overflowed in K ** beta:
    a whole number decodes as its float does, and an exponent beyond float range is refused when the strategy is built."""
    torch.manual_seed(4)
    module = Seq2SeqModule(vocab_size=40, decoder="dag", model=TINY_MODEL, decoder_options={"upsample": 4.0}).eval()
    src = torch.randint(6, 40, (3, 9))
    lengths = torch.tensor([9, 7, 5])
    whole = module.decode(src, lengths, DAGViterbi(beta=20)).sequences(SP)
    assert whole == module.decode(src, lengths, DAGViterbi(beta=20.0)).sequences(SP)
    assert len(whole[0]) >= len(module.decode(src, lengths, DAGViterbi(beta=0.0)).sequences(SP)[0])  # favours length
    for beta in (1e308, float("inf"), 51):
        with pytest.raises(AtnatError, match=r"strategy 'dag-viterbi': beta must be a finite number from 0 to 50"):
            DAGViterbi(beta=beta)


def test_equal_neighbours_merge_unless_dedup_is_off():
    model = HandGraph()
    model.log_probs[0, 2] = torch.tensor(vertex({A: .9, C: .1})).log()  # vertex 2 now repeats vertex 1's A
    assert decode(DAGGreedy(), model)[0] == [A]
    assert decode(DAGGreedy(dedup=False), model)[0] == [A, A]


def test_a_paths_score_is_its_links_plus_its_tokens_and_rows_keep_their_own_paths():
    torch.manual_seed(2)
    B, L = 4, 9
    links, scores, tokens = torch.randn(B, L, L), torch.randn(B, L), torch.randint(6, 40, (B, L))
    paths = [[0, 8], [0, 1, 2, 3, 4, 5, 6, 7, 8], [0, 3, 5], [0, 2, 4, 6]]  # rows end at their own last vertex
    out = read_paths(paths, links, scores, tokens, SP, dedup=False)
    for b, path in enumerate(paths):
        total = sum(links[b, i, j].item() for i, j in zip(path, path[1:])) + sum(scores[b, v].item() for v in path[1:-1])
        assert out.scores[b, 0].item() == pytest.approx(total, abs=1e-5)
        assert out.tokens[b, 0, : out.lengths[b, 0]].tolist() == tokens[b, path[1:-1]].tolist()


def test_a_padded_batch_decodes_each_graph_as_alone():
    torch.manual_seed(4)
    module = Seq2SeqModule(vocab_size=40, decoder="dag", model=TINY_MODEL, decoder_options={"upsample": 2.0}).eval()
    src = torch.randint(6, 40, (3, 6))
    src[1, 4:], src[2, 2:] = 0, 0
    lengths = src.ne(0).sum(1)
    for strategy in (DAGGreedy(), DAGLookahead(), DAGViterbi()):
        batch = module.decode(src, lengths, strategy).sequences(SP)
        alone = [module.decode(src[b:b + 1, : lengths[b]], lengths[b:b + 1], strategy).sequences(SP)[0] for b in range(3)]
        assert batch == alone


# ---------------------------------------------------------------- the decoder

def test_graph_size_and_the_longest_source():
    assert [graph_size(s, 2.5) for s in (1, 2, 3)] == [4, 7, 9]
    assert graph_size(torch.tensor([3, 4]), 8.0).tolist() == [26, 34]
    module = Seq2SeqModule(vocab_size=V, decoder="dag", model=dict(TINY_MODEL, max_positions=50),
                           decoder_options={"upsample": 4.0})
    assert module.decoder.max_source_length == 12  # 4 * 12 + 2 = 50 vertices fit 50 positions, 13 would not


def batch_of(src, tgt):
    src, tgt = torch.tensor(src), torch.tensor(tgt)
    return Batch(src, tgt, src.ne(0).sum(1), tgt.ne(0).sum(1), torch.arange(len(src)))


def test_loss_is_finite_and_counts_the_targets_that_do_not_fit():
    torch.manual_seed(5)
    module = Seq2SeqModule(vocab_size=V, decoder="dag", model=TINY_MODEL, decoder_options={"upsample": 1.0}).train()
    batch = batch_of([[A, B, C], [A, 0, 0]], [[A, B, C, 0], [A, B, C, D]])  # 5 tokens on 5 vertices; 6 on 3
    parts = module.decoder.loss(batch, module.encode(batch.src), step=0)
    assert parts["unfit"].value.item() == 0.5 and torch.isfinite(parts["tokens"].value)
    parts["tokens"].value.backward()
    assert all(torch.isfinite(p.grad).all() for p in module.parameters() if p.grad is not None)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_model_cast_to_half_precision_trains_and_decodes_with_float32_links(dtype):
    """precision bf16-true / 16-true (weights in half precision): the link scores are computed in float32
    (as under autocast), close to the float32 model's; the loss is finite and back-propagates."""
    torch.manual_seed(5)
    module = Seq2SeqModule(vocab_size=V, decoder="dag", model=TINY_MODEL, decoder_options={"upsample": 2.0})
    batch = batch_of([[A, B, C], [A, 0, 0]], [[A, B, C, 0], [A, B, 0, 0]])
    with torch.no_grad():
        ref = module.eval().decoder.forward_dag(module.encode(batch.src))[1]
    half = module.to(dtype)
    with torch.no_grad():
        _, links, _ = half.decoder.forward_dag(half.encode(batch.src))
    assert links.dtype == torch.float32
    finite = ref.isfinite()
    assert torch.equal(finite, links.isfinite()) and torch.allclose(links[finite], ref[finite], atol=0.1)
    parts = half.train().decoder.loss(batch, half.encode(batch.src), step=0)
    assert torch.isfinite(parts["tokens"].value)
    parts["tokens"].value.backward()
    assert half.decoder.link_query.weight.grad is not None


def test_engines_that_replace_the_link_layers_still_run_them():
    """int8 (its layers' weight is a method) and +bf16 layers are called as they are, not bypassed."""
    from atnat.experiments.modelfiles.engines import apply_engine
    from atnat.experiments.modelfiles.quantize import quantize_int8

    torch.manual_seed(5)
    src = torch.tensor([[A, B, C], [A, B, 0]])
    for make in (lambda m: quantize_int8(m), lambda m: (apply_engine(m, "static+bf16"), m)[1]):
        module = make(Seq2SeqModule(vocab_size=V, decoder="dag", model=TINY_MODEL,
                                    decoder_options={"upsample": 2.0}).eval())
        layer = module.decoder.link_query
        assert type(layer) is not torch.nn.Linear
        calls = []
        layer.register_forward_hook(lambda *args: calls.append(1))
        with torch.inference_mode():
            _, links, _ = module.decoder.forward_dag(module.encode(src))
        assert calls and links.dtype == torch.float32 and links.isfinite().any()


def test_glancing_shows_reference_tokens_on_the_best_path_only():
    torch.manual_seed(6)
    module = Seq2SeqModule(vocab_size=V, decoder="dag", model=TINY_MODEL,
                           decoder_options={"upsample": 3.0, "glat_ratio_start": 1.0, "glat_anneal_steps": 0,
                                            "glat_ratio_end": 1.0}).train()
    dec = module.decoder
    batch = batch_of([[A, B, C], [D, C, 0]], [[B, B, C], [A, 0, 0]])
    memory = module.encode(batch.src)
    sizes, padding = dec.graph(memory)
    targets, lengths = dec.targets(batch)
    tokens, glanced = dec.glance(memory, padding, sizes, targets, lengths, step=0)
    on_path = tokens != SP.pad
    assert on_path.sum(1).tolist() == lengths.tolist()  # every reference token sits on one vertex
    assert [row[on].tolist() for row, on in zip(tokens, on_path)] == [[SP.bos, B, B, C, SP.eos], [SP.bos, A, SP.eos]]
    assert not (glanced & ~on_path).any()  # only path vertices are shown their token
    with torch.no_grad():
        logits, _, _ = dec.decode_graph(memory, padding)
    wrong = ((logits.argmax(-1) != tokens) & on_path).sum(1)  # ratio 1: every wrong path vertex is shown
    assert glanced.sum(1).tolist() == wrong.tolist()


def test_dag_strategies_and_decoders_are_refused_elsewhere():
    def config(decoder, strategy):
        return run_config_from_dict({"name": "r", "task": {"name": "copy"}, "decoder": decoder,
                                     "eval": {"strategies": [strategy]}}, "test")
    with pytest.raises(ConfigError, match="needs the capability 'dag'"):
        config("cmlm", "dag-lookahead")
    with pytest.raises(ConfigError, match="usable: dag-greedy, dag-lookahead, dag-viterbi"):
        config("dag", "greedy")
    with pytest.raises(AtnatError, match="upsample"):
        config({"name": "dag", "upsample": 0.5}, "dag-lookahead")


@pytest.mark.slow
def test_learns_copy():
    """Exact match on the references without a repeated neighbour (lookahead merges equal neighbours,
    as the paper's decoders do). Measured: 0.85 / 1.00 (fit seeds 0 / 1) after 300 steps, ~45 s."""
    model, task = fit("dag", "copy", steps=300, decoder_options={"upsample": 2.0}, max_tokens=1024,
                      vocab=10, min_len=3, max_len=8, n_train=2000, n_test=200)
    hyps, refs, passes = decode_split(model, task, DAGLookahead())
    kept = [(h, r) for h, r in zip(hyps, refs) if all(a != b for a, b in zip(r, r[1:]))]
    assert sum(h == r for h, r in kept) / len(kept) >= 0.8


def test_joint_viterbi_equals_brute_force_over_every_path_and_length_in_a_padded_batch():
    """Every increasing path from vertex 0 to a row's last vertex, scored links + middle tokens, over K^beta."""
    import itertools

    torch.manual_seed(11)
    B, L = 5, 8
    last = [7, 5, 2, 3, 1]  # rows of 8, 6, 3, 4 and 2 vertices (the rest padding)
    padding_mask = torch.arange(L)[None, :] > torch.tensor(last)[:, None]
    links = torch.randn(B, L, L).masked_fill(~torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    links = links.masked_fill(padding_mask[:, None, :] | padding_mask[:, :, None], float("-inf"))
    ahead = torch.randn(B, L)
    for beta in (0.0, 1.0, 2.5):
        paths = DAGViterbi(beta=beta).choose(links, ahead, padding_mask, last)
        for b in range(B):
            if last[b] <= 1:
                assert paths[b] == [0, last[b]]
                continue
            best = max((sum(links[b, i, j].item() for i, j in zip(p, p[1:])) + sum(ahead[b, v].item() for v in p[1:-1]))
                       / (len(p) - 2) ** beta for p in ([0, *mid, last[b]] for k in range(1, last[b])
                                                         for mid in itertools.combinations(range(1, last[b]), k)))
            got = paths[b]
            score = (sum(links[b, i, j].item() for i, j in zip(got, got[1:])) + sum(ahead[b, v].item() for v in got[1:-1])) \
                / (len(got) - 2) ** beta
            assert got[0] == 0 and got[-1] == last[b] and got == sorted(set(got)), (beta, b, got)
            assert score == pytest.approx(best, abs=1e-4), (beta, b, got)


def test_a_nan_model_is_a_non_finite_loss_not_targets_that_do_not_fit(monkeypatch):
    """A row whose likelihood was NaN counted as a target too long for its graph: its loss became 0, the divergence
    guard saw nothing, and the unfit guard stopped the run saying to raise upsample."""
    from atnat.models.decoders.dag import DAGDecoder

    module = Seq2SeqModule(vocab_size=V, decoder="dag", model=TINY_MODEL, decoder_options={"upsample": 2.0}).eval()
    monkeypatch.setattr(DAGDecoder, "emissions", staticmethod(
        lambda logits, targets: torch.full((logits.size(0), targets.size(1), logits.size(1)), float("nan"))))
    batch = batch_of([[A, B, C]], [[A, B, 0]])
    parts = module.decoder.loss(batch, module.encode(batch.src))
    assert not torch.isfinite(parts["tokens"].value) and parts["unfit"].value.item() == 0


def test_a_walk_along_links_that_do_not_advance_is_one_error_not_an_endless_loop():
    from atnat.decoding.dag_walk import walk

    assert walk([[2, 0, 4, 0, 0]], [4]) == [[0, 2, 4]]
    with pytest.raises(AtnatError, match="row 0: vertex 2 links to vertex 2, not a later one"):
        walk([[2, 2, 2, 4, 0]], [4])


@pytest.mark.parametrize("upsample", [float("inf"), float("nan"), 65.0, 0.5])
def test_upsample_is_a_finite_number_of_vertices_per_source_token(upsample):
    from atnat.models.decoders.dag import DAGOptions

    with pytest.raises(AtnatError, match="upsample must be a number from 1 to 64"):
        DAGOptions(upsample=upsample)


@pytest.mark.parametrize("strategy", [DAGGreedy(), DAGLookahead(), DAGViterbi()], ids=lambda s: s.registered_name)
@pytest.mark.parametrize("table", ["links", "log_probs"])
def test_a_graph_with_nan_scores_is_one_error_not_an_output(strategy, table):
    """A review's finding: argmax over a row of NaN links picks the next vertex, so the walk went on and the guard
    for a link back never fired; dag-viterbi never walked. Each strategy returned tokens scored NaN, no word said."""
    graph = HandGraph()
    broken = getattr(graph, table).clone()
    broken[0, 1:3] = float("nan")
    setattr(graph, table, broken)
    with pytest.raises(AtnatError, match="DAG decoding: the model's scores are not finite"):
        decode(strategy, graph)


def test_ties_go_to_the_lower_vertex_and_joint_viterbi_to_the_shorter_output():
    """The two tie rules the docs state: the best alignment's lower predecessor vertex, joint Viterbi's fewer tokens."""
    emit = [vertex({SP.bos: 1.0}), vertex({A: 1.0}), vertex({A: 1.0}), vertex({B: 1.0}), vertex({SP.eos: 1.0})]
    links = [[0, .5, .5, 0, 0], [0, 0, 0, .5, .5], [0, 0, 0, .5, .5], [0, 0, 0, 0, 1.0], [0] * 5]
    log_probs, link_lp = torch.tensor([emit]).log(), torch.tensor([links]).log()
    target = torch.tensor([SP.bos, A, SP.eos])
    match = log_probs[:, :, target].transpose(1, 2)  # (1, M, L): each target token's log-prob at each vertex
    path, _ = dag_best_alignment(match, link_lp, torch.tensor([5]), torch.tensor([3]))
    assert path[0].tolist() == [0, 1, 4]  # 0-1-4 and 0-2-4 score alike
    graph = HandGraph()
    graph.log_probs, graph.links = log_probs, link_lp
    assert decode(DAGViterbi(beta=0.0), graph)[0] == [A]  # K = 1 (0-1-4: .25) against K = 2 (0-1-3-4: .25)
