"""CUDA graphs of whole-sequence passes (experiments/modelfiles/cuda_graphs.py), on the CPU: GraphedPass
with `Rerun`, CudaGraph's contract without a GPU (static buffers in and out, every call overwriting the
outputs as a replay does). What these tests show is the wiring: which calls replay a graph, one graph
per shape, copies out, eager where it must be; that a real capture gives eager's tokens is the GPU
tier's (tests/test_gpu.py)."""
from __future__ import annotations

import copy

import pytest
import torch

from atnat.core.engine_names import AUTO_GRAPH_ROWS
from atnat.core.errors import AtnatError
from atnat.experiments.modelfiles import cuda_graphs
from atnat.experiments.modelfiles.aoti import CompiledPass
from atnat.experiments.modelfiles.cuda_graphs import GraphedPass, Rerun
from atnat.experiments.modelfiles.engines import apply_engine
from atnat.models.seq2seq import Seq2SeqModule
from tests.test_engines import NAT_CASES, NAT_IDS, STRATEGIES, at_model, batches, nat_model

LENGTHS = (3, 7, 5, 7, 2, 3)  # batch-1 sources, shapes repeating
STRATEGIES_NAT = NAT_CASES[0][2]["parallel"]


def graphed(model, max_rows: int = 16, max_graphs: int = 1024) -> dict[str, GraphedPass]:
    """A copy of `model` whose encoder and NAT pass replay Rerun graphs -> (copy, {kind: pass})."""
    twin = copy.deepcopy(model)
    passes = {}
    for part in (twin.encoder, twin.decoder):
        kind = CompiledPass.kind_of(part)
        if kind is not None:
            passes[kind] = GraphedPass(part, kind, max_rows=max_rows, max_graphs=max_graphs, graph=Rerun)
            passes[kind].install()
    return twin, passes


def sources() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(5)
    out = [(torch.randint(6, 40, (1, n), generator=g), torch.tensor([n])) for n in LENGTHS]
    return out + [batches()["padded"]]


def assert_decodes_as_eager(model, twin, strategies: dict) -> None:
    with torch.inference_mode():
        for name, strategy in strategies.items():
            for src, lengths in sources():
                ref, out = model.decode(src, lengths, strategy), twin.decode(src, lengths, strategy)
                assert torch.equal(out.tokens, ref.tokens), f"{name}, source of {src.shape[1]}: tokens differ"
                assert torch.equal(out.lengths, ref.lengths) and out.n_steps == ref.n_steps
                torch.testing.assert_close(out.scores, ref.scores, atol=0, rtol=0)


@pytest.mark.parametrize("decoder,options,strategies", NAT_CASES, ids=NAT_IDS)
def test_graphed_nat_passes_decode_the_eager_tokens_one_graph_per_shape(decoder, options, strategies):
    model = nat_model(decoder, **options)
    twin, passes = graphed(model)
    assert set(passes) == {"encoder", "parallel" if decoder in ("nat", "cmlm") else decoder}
    assert_decodes_as_eager(model, twin, strategies)
    encoder = passes["encoder"]
    # every source shape once (the padded batch too: 6 rows <= 16), however often it was decoded
    assert len(encoder.graphs) == len(set(LENGTHS)) + 1
    assert encoder.replays == len(strategies) * len(sources())
    assert all(p.replays > 0 for p in passes.values())


def test_an_at_model_replays_its_encoder():
    model = at_model()
    twin, passes = graphed(model)
    assert set(passes) == {"encoder"}
    assert_decodes_as_eager(model, twin, STRATEGIES)
    assert passes["encoder"].replays == len(STRATEGIES) * len(sources())


def test_a_replay_returns_copies_that_a_later_replay_leaves_alone():
    """The graph's outputs are its own buffers, rewritten at every replay: what a call returned must
    survive the next call at the same shape (mask-predict keeps one iteration's scores into the next)."""
    model = nat_model("cmlm")
    twin, passes = graphed(model)
    src = torch.randint(6, 40, (1, 5), generator=torch.Generator().manual_seed(0))
    padding = src.eq(0)
    with torch.inference_mode():
        first = twin.encoder(src, padding).states
        kept = first.clone()
        second = twin.encoder(src.flip(1), padding).states  # same shape: the same graph, other inputs
        assert not torch.equal(second, kept)
        assert torch.equal(first, kept)
        assert torch.equal(second, model.encoder(src.flip(1), padding).states)
    assert len(passes["encoder"].graphs) == 1


def test_batches_grad_attention_maps_and_shapes_past_the_cap_run_eager():
    model = nat_model("nat")
    twin, passes = graphed(model, max_rows=2, max_graphs=2)
    encoder = passes["encoder"]
    src, lengths = batches()["padded"]  # 6 rows > 2
    with torch.inference_mode():
        assert torch.equal(twin.decode(src, lengths, STRATEGIES_NAT).tokens, model.decode(src, lengths, STRATEGIES_NAT).tokens)
    assert not encoder.graphs and encoder.replays == 0
    one = torch.tensor([[7, 8, 9]])
    with torch.no_grad():  # gradients off, but not inference mode: a graph of its own
        twin.encode(one)
    assert len(encoder.graphs) == 1
    twin.encode(one)  # gradients on: eager
    assert len(encoder.graphs) == 1 and encoder.replays == 1
    twin.decoder.record_attention = True  # the maps are set inside the pass: eager records them
    with torch.inference_mode():
        twin.decode(one, torch.tensor([3]), STRATEGIES_NAT)
    assert twin.decoder.recorded_attention is not None and passes["parallel"].replays == 0
    twin.decoder.record_attention = False
    with torch.inference_mode():
        for n in (2, 3, 4, 5):  # past the cap of 2 from shape 3 on (3 under no_grad was another graph)
            src = torch.full((1, n), 9)
            assert torch.equal(twin.encode(src).states, model.encode(src).states)
    assert len(encoder.graphs) == 2
    twin.train()
    with pytest.raises(AtnatError, match="is for inference; the model was put back in training mode"):
        twin.encode(one)


def test_auto_on_a_gpu_graphs_every_nat_pass_and_says_so(monkeypatch):
    """auto on a GPU replays the encoder and a NAT decoder's pass from graphs for single-sentence decodes
    (label auto=cudagraphs); a batch decoder (step_rows 0) stays eager."""
    monkeypatch.setattr(Seq2SeqModule, "device", property(lambda self: torch.device("cuda")))
    for decoder, options, _ in NAT_CASES:
        model = nat_model(decoder, **options)
        info = apply_engine(model, "auto")
        assert info.label == "auto=cudagraphs" and not info.fallback and info.swapped == 0
        encoder = vars(model.encoder)["forward"]
        assert isinstance(encoder, GraphedPass) and encoder.max_rows == 1 and not encoder.graphs
        method = {"ctc": "forward_ctc", "dag": "forward_dag"}.get(decoder, "forward_parallel")
        nat_pass = vars(model.decoder)[method]
        assert isinstance(nat_pass, GraphedPass) and nat_pass.max_rows == AUTO_GRAPH_ROWS
    batch = nat_model("nat")
    assert apply_engine(batch, "auto", step_rows=0).label == "auto=eager" and "forward" not in vars(batch.encoder)


def test_auto_on_a_gpu_times_the_at_steps_first_call_where_it_compiles(monkeypatch):
    """The CPU's compiled step recorded its first call (the compile) in the engine's records; the GPU's did not, so
    a bench row said it compiled nothing and counted the compile in its first call."""
    from atnat.experiments.modelfiles.engines import FirstCallTimer

    monkeypatch.setattr(Seq2SeqModule, "device", property(lambda self: torch.device("cuda")))
    model = at_model()
    info = apply_engine(model, "auto")
    assert isinstance(model.decoder._static_impl, FirstCallTimer) and model.decoder._static_impl.records is info.records


def test_auto_replays_single_sentence_decodes_only_and_a_batch_runs_eager(monkeypatch):
    """A decode of more sentences than step_rows runs eager in every pass, the decoder's too (its rows,
    a few sentences' length candidates, could be within AUTO_GRAPH_ROWS)."""
    monkeypatch.setattr(cuda_graphs, "CudaGraph", Rerun)
    monkeypatch.setattr(Seq2SeqModule, "device", property(lambda self: torch.device("cuda")))
    model = nat_model("nat")
    twin = copy.deepcopy(model)
    apply_engine(twin, "auto")
    encoder, decoder = vars(twin.encoder)["forward"], vars(twin.decoder)["forward_parallel"]
    src, lengths = batches()["padded"]  # 6 sentences: 6 rows <= AUTO_GRAPH_ROWS in the decoder's pass
    with torch.inference_mode():
        assert torch.equal(twin.decode(src, lengths, STRATEGIES_NAT).tokens, model.decode(src, lengths, STRATEGIES_NAT).tokens)
        assert not encoder.graphs and not decoder.graphs
        one, n = batches()["b1"]
        assert torch.equal(twin.decode(one, n, STRATEGIES_NAT).tokens, model.decode(one, n, STRATEGIES_NAT).tokens)
    assert len(encoder.graphs) == len(decoder.graphs) == 1 and decoder.replays == 1


def test_a_pass_that_cannot_be_captured_warns_once_and_runs_eager():
    model = nat_model("ctc", upsample=2)
    twin = copy.deepcopy(model)
    attempts = []

    class Refused(Rerun):
        def __init__(self, run, tensors, pool=None):
            attempts.append(tensors[0].shape)
            raise RuntimeError("operation not permitted when stream is capturing")

    GraphedPass(twin.decoder, "ctc", max_rows=16, graph=Refused).install()
    with torch.inference_mode():
        with pytest.warns(UserWarning, match=r"ctc pass of CTCDecoder cannot be replayed .* runs eager \(RuntimeError"):
            for src, lengths in sources():
                assert torch.equal(twin.decode(src, lengths, CTC_STRATEGY).tokens, model.decode(src, lengths, CTC_STRATEGY).tokens)
    assert len(attempts) == 1  # not tried again


CTC_STRATEGY = NAT_CASES[2][2]["ctc"]


def test_new_shapes_run_eager_once_the_graphs_hold_max_bytes():
    model = at_model()
    twin = copy.deepcopy(model)
    encoder = GraphedPass(twin.encoder, "encoder", max_rows=1, max_bytes=1, graph=Rerun)
    encoder.install()
    with torch.inference_mode():
        for n in (3, 4, 5, 3):
            src = torch.full((1, n), 9)
            assert torch.equal(twin.encode(src).states, model.encode(src).states)
    assert len(encoder.graphs) == 1 and encoder.replays == 2  # shape 3 captured and replayed; 4 and 5 eager
    assert encoder.bytes == sum(t.nbytes for t in (*encoder.graphs[next(iter(encoder.graphs))].inputs,
                                                   model.encode(torch.full((1, 3), 9)).states))


def test_an_input_eager_refuses_raises_eagers_error_and_the_pass_stays_graphed():
    """A source longer than the positions fails in the capture's warm-up and in eager alike: the caller gets
    eager's error, nothing is marked broken, and the next sentence replays."""
    model = at_model()
    twin = copy.deepcopy(model)
    encoder = GraphedPass(twin.encoder, "encoder", max_rows=1, graph=Rerun)
    encoder.install()
    too_long = torch.full((1, model.encoder.embed.max_positions + 1), 9)
    with torch.inference_mode(), pytest.raises(ValueError, match="exceeds max_positions"):
        twin.encode(too_long)
    assert not encoder.broken
    with torch.inference_mode():
        twin.encode(torch.full((1, 3), 9))
        twin.encode(torch.full((1, 3), 9))
    assert len(encoder.graphs) == 1 and encoder.replays == 2


def test_a_pass_that_fails_to_capture_later_frees_its_graphs():
    model = at_model()
    twin = copy.deepcopy(model)

    class RefusesFive(Rerun):
        def __init__(self, run, tensors, pool=None):
            if tensors[0].size(1) == 5:
                raise RuntimeError("operation not permitted when stream is capturing")
            super().__init__(run, tensors, pool)

    encoder = GraphedPass(twin.encoder, "encoder", max_rows=1, graph=RefusesFive)
    encoder.install()
    with torch.inference_mode():
        twin.encode(torch.full((1, 3), 9))
        assert len(encoder.graphs) == 1 and encoder.bytes > 0
        with pytest.warns(UserWarning, match="cannot be replayed"):
            assert torch.equal(twin.encode(torch.full((1, 5), 9)).states, model.encode(torch.full((1, 5), 9)).states)
        twin.encode(torch.full((1, 3), 9))
    assert encoder.broken and not encoder.graphs and encoder.bytes == 0 and encoder.replays == 1
