"""The static-cache AT step (use_static_cache) is static for real: the compiled step is called on
the same tensors (data pointers and shapes) at every step of a decode, whatever rows finish and
however beams reorder, so torch.compile traces it once (and CUDA graphs can replay it); and it
decodes token for token like the growing cache. CPU-only: a counting backend stands in for inductor."""
import dataclasses

import pytest
import torch
import torch._dynamo
from torch._dynamo.testing import CompileCounter

from atnat.decoding.beam import Beam
from atnat.decoding.greedy import Greedy
from atnat.models.seq2seq import Seq2SeqModule

SMALL = dict(d_model=32, n_heads=4, ffn_dim=64, encoder_layers=2, decoder_layers=2, dropout=0.0)
STRATEGIES = [Greedy(max_len_a=1.0, max_len_b=2, min_len=1), Beam(beam_size=5, max_len_a=1.0, max_len_b=2, min_len=1)]


def eos_prone_model() -> Seq2SeqModule:
    """A random AT model whose outputs end at different steps: weights x2 (less uniform states) and
    an EOS bias, found by a scan (on `padded_batch`: greedy lengths [10, 10, 10, 2, 7, 5], beam-5
    [2, 2, 10, 2, 2, 5])."""
    torch.manual_seed(2)
    model = Seq2SeqModule(vocab_size=40, decoder="at", model=SMALL).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(2.0)
        model.decoder.output.bias[model.special.eos] += 1.0
    return model


def padded_batch(pad: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    src = torch.randint(6, 40, (6, 8), generator=g)  # (B, S)
    if pad:
        src[4, 5:] = 0
        src[5, 3:] = 0
    return src, src.ne(0).sum(1)


def tensors_in(obj):
    """Every tensor reachable from obj through tuples, lists, dicts and dataclass fields."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from tensors_in(getattr(obj, f.name))
    elif isinstance(obj, (tuple, list)):
        for x in obj:
            yield from tensors_in(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from tensors_in(x)


def record_step_inputs(decoder) -> list:
    """Wrap the decoder's (possibly compiled) static step; returns the list it appends to: per
    call, the (data pointer, shape) of every tensor the step is given."""
    calls, impl = [], decoder._static_impl

    def recorded(*args, **kwargs):
        calls.append([(t.data_ptr(), tuple(t.shape)) for t in tensors_in((args, kwargs))])
        return impl(*args, **kwargs)

    decoder._static_impl = recorded
    return calls


@pytest.fixture
def counting_compile(monkeypatch):
    """torch.compile as use_static_cache calls it, but with a frame-counting eager backend."""
    real = torch.compile
    counter = CompileCounter()

    def fake(fn, *, mode=None, **kwargs):
        return real(fn, backend=counter, **kwargs)

    torch._dynamo.reset()
    monkeypatch.setattr(torch, "compile", fake)
    yield counter
    torch._dynamo.reset()


def finish_steps(hyps) -> set[int]:
    return set(hyps.lengths[:, 0].tolist())


@pytest.mark.parametrize("strategy", STRATEGIES, ids=["greedy", "beam5"])
def test_static_step_is_given_the_same_buffers_at_every_step(strategy):
    model = eos_prone_model()
    src, lengths = padded_batch()
    ref = model.decode(src, lengths, strategy)
    assert len(finish_steps(ref)) >= 3  # sentences end at different steps (EOS and max length)
    model.decoder.use_static_cache(True)
    calls = record_step_inputs(model.decoder)
    out = model.decode(src, lengths, strategy)
    assert torch.equal(out.tokens, ref.tokens)
    assert len(calls) == out.n_steps == ref.n_steps
    changed = [i for i, c in enumerate(calls) if c != calls[0]]
    assert not changed, f"the step's tensors moved or changed shape at steps {changed}"


@pytest.mark.parametrize("strategy", STRATEGIES, ids=["greedy", "beam5"])
def test_the_next_decode_of_the_same_shapes_reuses_the_buffers(strategy):
    """A CUDA graph replays on fixed addresses: new buffers per batch would re-record it."""
    model = eos_prone_model()
    src, lengths = padded_batch()
    model.decoder.use_static_cache(True)
    calls = record_step_inputs(model.decoder)
    first = model.decode(src, lengths, strategy)
    n = len(calls)
    again = model.decode(src, lengths, strategy)
    assert torch.equal(first.tokens, again.tokens) and len(calls) == 2 * n
    assert calls[n] == calls[0]


def test_a_state_whose_buffers_a_newer_decode_took_refuses_to_step():
    from atnat.core.errors import AtnatError

    model = eos_prone_model()
    src, _ = padded_batch()
    dec = model.decoder
    dec.use_static_cache(True)
    memory = model.encode(src)
    prev = torch.ones(6, dtype=torch.long)
    with torch.no_grad():
        old = dec.init_state(memory, max_steps=4)
        dec.step(prev, old)
        new = dec.init_state(memory, max_steps=4)  # same shapes: the same buffers
        assert new.self_k.data_ptr() == old.self_k.data_ptr()
        with pytest.raises(AtnatError, match="lost its buffers to a newer init_state"):
            dec.step(prev, old)
        dec.step(prev, new)


@pytest.mark.parametrize("strategy", STRATEGIES, ids=["greedy", "beam5"])
def test_every_input_of_the_compiled_step_has_a_static_address(strategy, monkeypatch):
    """What CUDA graphs ("reduce-overhead") need: the caches the graph writes in place and the
    step's inputs are marked static (else cudagraphs skip a graph that mutates an input, and copy
    every other input into a private buffer at each replay)."""
    real, seen = torch.compile, []

    def backend(gm, example_inputs):
        seen.extend((tuple(x.shape), getattr(x, "_dynamo_static_input_type", None))
                    for x in example_inputs if isinstance(x, torch.Tensor))
        return gm.forward

    torch._dynamo.reset()
    monkeypatch.setattr(torch, "compile", lambda fn, *, mode=None, **kw: real(fn, backend=backend, **kw))
    model = eos_prone_model()
    src, lengths = padded_batch()
    model.decoder.use_static_cache(True, "reduce-overhead")
    model.decode(src, lengths, strategy)
    torch._dynamo.reset()
    assert seen and [shape for shape, marked in seen if marked is None] == []


@pytest.mark.parametrize("strategy", STRATEGIES, ids=["greedy", "beam5"])
def test_compiled_static_step_compiles_once_per_decode(strategy, counting_compile):
    model = eos_prone_model()
    src, lengths = padded_batch()
    ref = model.decode(src, lengths, strategy)
    model.decoder.use_static_cache(True, "reduce-overhead")
    first = model.decode(src, lengths, strategy)
    assert counting_compile.frame_count == 1, f"{counting_compile.frame_count} graphs compiled"
    again = model.decode(src, lengths, strategy)  # same shapes: nothing new to compile
    assert counting_compile.frame_count == 1
    for out in (first, again):
        assert torch.equal(out.tokens, ref.tokens)
        torch.testing.assert_close(out.scores, ref.scores, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("strategy", [
    Greedy(max_len_a=1.0, max_len_b=2), Greedy(max_len_a=0.5, max_len_b=3, min_len=3),
    Beam(beam_size=5, max_len_a=1.0, max_len_b=2), Beam(beam_size=5, max_len_a=1.0, max_len_b=2, min_len=2),
    Beam(beam_size=3, n_best=3, length_norm="none", max_len_a=1.0, max_len_b=1),
    Beam(beam_size=4, stopping="fairseq", max_len_a=1.0, max_len_b=2),
    Beam(beam_size=4, stopping="exact", length_norm="length", max_len_a=0.5, max_len_b=4),
], ids=lambda s: repr(s)[:60])
@pytest.mark.parametrize("pad", [True, False], ids=["padded", "unpadded"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_static_step_decodes_like_the_growing_cache(strategy, pad, compiled, counting_compile):
    model = eos_prone_model()
    src, lengths = padded_batch(pad)
    ref = model.decode(src, lengths, strategy)
    model.decoder.use_static_cache(True, "default" if compiled else None)
    out = model.decode(src, lengths, strategy)
    assert torch.equal(out.tokens, ref.tokens) and torch.equal(out.lengths, ref.lengths)
    assert out.n_steps == ref.n_steps
    torch.testing.assert_close(out.scores, ref.scores, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.positional_scores, ref.positional_scores, atol=1e-5, rtol=1e-5)


def test_static_reorders_equal_the_plain_ones():
    """Reorders in place (permute, drop, duplicate within a memory row's block: the same buffers)
    and relayouts (more rows than a block holds) give the growing cache's log-probs at every step."""
    model = eos_prone_model()
    src, _ = padded_batch()
    dec, memory = model.decoder, model.encode(src)
    orders = [([5, 4, 3, 2, 1, 0], True), ([0, 2, 3], True),  # permute; drop rows
              ([0, 0, 1, 1, 2, 2], False),  # 2 copies of each row mid-decode: relaid out
              (torch.arange(6).repeat_interleave(2).tolist(), False),  # 12 rows: blocks of 2 buffer rows
              ([1, 1, 2, 3, 5, 4], True),  # within blocks: copy one beam, keep, swap; 3 blocks leave
              ([3, 2, 0], True), ([2, 2, 2], False)]  # drop; 3 copies outgrow a block
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        plain = dec.init_state(memory)
        dec.use_static_cache(True)
        static = dec.init_state(memory, max_steps=len(orders) + 1)
        for order, in_place in [(None, True), *orders]:
            if order is not None:
                before = static.static, static.self_k.data_ptr(), static.self_k.shape
                plain, static = (dec.reorder_state(s, torch.tensor(order)) for s in (plain, static))
                assert not in_place or (static.static, static.self_k.data_ptr(), static.self_k.shape) == before
            tok = torch.randint(6, 40, (len(order or range(6)),), generator=g)
            a, plain = dec.step(tok, plain)
            b, static = dec.step(tok, static)
            torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("strategy", STRATEGIES, ids=["greedy", "beam5"])
def test_an_empty_source_decodes_like_eager_with_the_fused_attention(strategy):
    """An empty line is a source of padding only: the fused attention's softmax over keys that are all
    masked gave NaN (eager's SDPA gives a zero context), so `auto` translated it differently from eager."""
    from atnat.experiments.modelfiles.engines import apply_engine

    eager = eos_prone_model()
    fused = eos_prone_model()
    apply_engine(fused, "static+fused")
    src, lengths = padded_batch()
    src[2] = 0
    lengths = src.ne(0).sum(1)
    with torch.inference_mode():
        for x, n, row in ((src[2:3, :1], lengths[2:3], 0), (src, lengths, 2)):  # alone and in a batch
            a, b = eager.decode(x, n, strategy), fused.decode(x, n, strategy)
            assert torch.equal(a.tokens, b.tokens) and torch.isfinite(b.scores[row]).all()
            torch.testing.assert_close(a.scores, b.scores)


def test_a_compiled_step_hands_shapes_past_its_package_to_the_decoders_own_static_step(monkeypatch):
    """The package is exported for sources and caches of up to StaticStep.DIMS positions; a longer one (a
    plugin's model with more positions) failed in the package instead of stepping on."""
    from atnat.experiments.modelfiles.aoti import CompiledStep
    from atnat.models.decoders.static_cache import StaticStep

    monkeypatch.setattr(StaticStep, "DIMS", {"M": (1, 65536), "S": (1, 5), "C": (1, 4096)})
    asked = []

    class Packages:
        def get_or_compile(self, what, fields, build, configs):
            asked.append(what)
            return (lambda *args: "package"), None

    decoder = eos_prone_model().decoder
    calls = []
    monkeypatch.setattr(type(decoder), "_static_step", lambda self, *args: calls.append(args[4].size(3)) or "own")
    step = CompiledStep(decoder, Packages(), fields={}, configs={})
    cache = lambda n, t: torch.zeros(2, n, 4, t, 8)  # (L, rows, H, positions, Dh)
    for source, expected in ((5, "package"), (6, "own")):
        out = step(torch.full((1,), 4), torch.zeros((), dtype=torch.long), cache(1, 16), cache(1, 16),
                   cache(1, source), cache(1, source), torch.ones(1, 1, 1, source, dtype=torch.bool), 1)
        assert out == expected
    assert calls == [6] and asked == ["at step, group 1"]
