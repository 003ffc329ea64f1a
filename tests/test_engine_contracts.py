"""The engines keep a plugin's computation: an AT whose embedding, attention or layer is a plugin's own class
keeps its own (eager) step under the default engine and says why; overrides of `step` and `forward` are
kept as before; every plugin AT decodes the tokens eager decodes, at batch 1 (translate --batch-size 1,
the timing phase) and on a padded batch; the timing phase checks its tokens against the evaluated ones."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from atnat.core.errors import AtnatError
from atnat.decoding.beam import Beam
from atnat.decoding.greedy import Greedy
from atnat.experiments.config.speed import SpeedSettings
from atnat.experiments.evaluation.timing import System, time_systems
from atnat.experiments.modelfiles.engines import apply_engine
from atnat.models.decoders.autoregressive import AutoregressiveDecoder
from atnat.models.decoders.base import DecoderLayer
from atnat.models.decoders.static_cache import static_step_problem
from atnat.models.layers import MultiHeadAttention, TokenEmbedding
from tests.test_engines import batches, traced_not_compiled
from tests.test_static_step import eos_prone_model

STRATEGIES = {"greedy": Greedy(max_len_a=1.0, max_len_b=2, min_len=1),
              "beam3": Beam(beam_size=3, max_len_a=1.0, max_len_b=2, min_len=1)}


class NormedEmbedding(TokenEmbedding):
    """A plugin's embedding: a LayerNorm after the tokens and positions (its own forward)."""

    def forward(self, tokens, offset=0):
        return self.norm(super().forward(tokens, offset))


class WarmAttention(MultiHeadAttention):
    """A plugin's attention: queries scaled before attending (its own attend)."""

    def attend(self, q, k, v, **kwargs):
        return super().attend(q * 1.7, k, v, **kwargs)


class GatedLayer(DecoderLayer):
    """A plugin's layer with its own forward (the AT step runs a layer's sublayers, not this)."""

    def forward(self, *args, **kwargs):
        x, w = super().forward(*args, **kwargs)
        return x * 0.9, w


class BiasedStep(AutoregressiveDecoder):
    """A plugin AT overriding step (and forward): log-probs shifted towards token 9."""

    def step(self, prev_tokens, state):
        logp, state = super().step(prev_tokens, state)
        return logp + torch.nn.functional.one_hot(torch.tensor(9), logp.size(-1)).float() * 3.0, state

    def forward(self, prev_tokens, memory, need_weights=False):
        logits, attns = super().forward(prev_tokens, memory, need_weights)
        return logits * 1.0, attns


class ScaledCross(AutoregressiveDecoder):
    """A plugin AT with its own cross-attention in the step (the fixed-shape step never calls _cross)."""

    def _cross(self, layer, h, state, i):
        return super()._cross(layer, h * 1.3, state, i)


def plugin_model(kind: str):
    model = eos_prone_model()
    dec = model.decoder
    if kind == "embedding":
        dec.embed.__class__ = NormedEmbedding
        dec.embed.norm = nn.LayerNorm(dec.cfg.d_model)
        with torch.no_grad():
            dec.embed.norm.weight.uniform_(0.5, 2.0)
    elif kind == "attention":
        for layer in dec.layers:
            layer.self_attn.__class__ = WarmAttention
    elif kind == "layer":
        dec.layers[1].__class__ = GatedLayer
    elif kind == "cross":
        dec.__class__ = ScaledCross
    else:
        dec.__class__ = BiasedStep
    return model.eval()


@pytest.mark.parametrize("kind,reason", [
    ("embedding", "embed is tests.test_engine_contracts.NormedEmbedding, not atnat's TokenEmbedding"),
    ("attention", "layers.0.self_attn is tests.test_engine_contracts.WarmAttention, not atnat's MultiHeadAttention"),
    ("layer", "layers.1 is tests.test_engine_contracts.GatedLayer, not atnat's DecoderLayer"),
    ("cross", "tests.test_engine_contracts.ScaledCross overrides _cross, which the fixed-shape step does not call"),
    ("step", "tests.test_engine_contracts.BiasedStep overrides step, which may not read the fixed-shape step's "
             "state (declare static_step_exact = True where it reaches it through super())"),
])
def test_a_plugin_at_decodes_the_tokens_of_eager_under_the_default_engine(monkeypatch, kind, reason):
    """Trials: an AT with a LayerNorm inside its embedding decoded other tokens under auto than eager on 12 of
    20 sentences at greedy, without a word. Now the step stays the plugin's own where the static step would
    not compute it, the engine says why, and the tokens are eager's."""
    traced_not_compiled(monkeypatch)
    model = plugin_model(kind)
    assert static_step_problem(model.decoder) == reason
    engined = copy.deepcopy(model)
    info = apply_engine(engined, "auto", step_rows=1)  # what translate --batch-size 1 and the timing phase use
    assert info.eager_step == (reason or "")
    if reason:
        assert info.label == f"auto (AT step eager: {reason})"
        assert not engined.decoder.static_cache
    else:
        assert engined.decoder.static_cache  # step overridden on top of the static step: kept static
    for name, strategy in STRATEGIES.items():
        for batch, (src, lengths) in batches().items():
            with torch.inference_mode():
                ref, out = model.decode(src, lengths, strategy), engined.decode(src, lengths, strategy)
            assert torch.equal(out.tokens, ref.tokens), f"{kind} {name} {batch}"


def test_the_fixed_shape_step_is_refused_for_a_plugin_it_would_not_reproduce():
    model = plugin_model("embedding")
    with pytest.raises(AtnatError, match="the fixed-shape step would not compute this decoder's own step: embed is"):
        model.decoder.use_static_cache(True)  # translate --compile
    NormedEmbedding.static_step_exact = True  # a plugin declaring that the static step is exact for it
    try:
        assert static_step_problem(model.decoder) is None
    finally:
        del NormedEmbedding.static_step_exact


def test_the_timing_phase_checks_its_tokens_against_the_evaluated_hypotheses():
    """Each row says which share of its timed sentences decoded to the hypothesis that was evaluated."""
    model = eos_prone_model()
    model.detokenize = lambda ids: " ".join(map(str, ids))
    sources = [[7, 8, 9, 10], [11, 12], [13, 14, 15], [16, 17, 18, 19]]
    greedy = STRATEGIES["greedy"]
    with torch.inference_mode():
        own = [model.detokenize(model.decode(torch.tensor([s]), torch.tensor([len(s)]), greedy).sequences(model.special)[0])
               for s in sources]
    speed = SpeedSettings(latency_sentences=4, throughput_sentences=4, throughput_batch=2, repeats=1, warmup=0,
                          bootstrap=10)
    right = System("at", "greedy", model, greedy, sources, expected=own)
    wrong = System("other", "greedy", model, greedy, sources, expected=own[:2] + ["x", "y"])
    table = time_systems([right, wrong], speed, {}).set_index("cell")
    assert table.loc["at"].timed_equals_evaluated == 1.0 and table.loc["other"].timed_equals_evaluated == 0.5


@pytest.mark.parametrize("kind", ["embedding", "attention", "layer", "step", "cross"])
def test_speculative_decoding_refuses_a_verifier_its_block_pass_would_not_reproduce(kind):
    """The block pass is written against atnat's own parts, as the static step is: with a plugin's part or
    step it would verify with other arithmetic than the AT's greedy, and the output would not be lossless."""
    from atnat.experiments.evaluation.assemble import teacher_verifier

    model = plugin_model(kind)
    with pytest.raises(AtnatError, match="speculative decoding cannot verify with this AT teacher in one block pass"):
        teacher_verifier(model, torch.tensor([[7, 8, 9]]))


def test_speculative_decoding_verifies_with_the_packed_engine_but_not_with_int8():
    from atnat.experiments.evaluation.assemble import teacher_verifier
    from atnat.experiments.modelfiles.quantize import quantize_int8

    model = eos_prone_model()
    assert "verifier" in teacher_verifier(model, torch.tensor([[7, 8, 9]]))
    engined = copy.deepcopy(model)
    apply_engine(engined, "auto", step_rows=1)
    assert "verifier" in teacher_verifier(engined, torch.tensor([[7, 8, 9]]))  # its packed float layers: exact
    with pytest.raises(AtnatError, match="is int8 with activations scaled per call"):
        teacher_verifier(quantize_int8(model), torch.tensor([[7, 8, 9]]))


def test_a_plugin_at_with_its_own_step_keeps_it_eager_under_every_engine():
    """A plugin whose `step` was its own (not through super()) passed the check and ran on the fixed-shape state:
    under static, a padded greedy batch died on a size mismatch (the buffers keep finished rows)."""

    class OwnStep(AutoregressiveDecoder):
        def step(self, prev_tokens, state):  # its own arithmetic, written against the growing cache
            return AutoregressiveDecoder.step(self, prev_tokens, state)

    model = eos_prone_model()
    model.decoder.__class__ = OwnStep
    assert "overrides step" in static_step_problem(model.decoder)
    engined = copy.deepcopy(model.eval())
    info = apply_engine(engined, "static")
    assert "overrides step" in info.label and not engined.decoder.static_cache
    for name, strategy in STRATEGIES.items():
        for batch, (src, lengths) in batches().items():
            with torch.inference_mode():
                ref, out = model.decode(src, lengths, strategy), engined.decode(src, lengths, strategy)
            assert torch.equal(out.tokens, ref.tokens), f"{name} {batch}"
    OwnStep.static_step_exact = True  # where the plugin says the static step is exact for it
    assert static_step_problem(model.decoder) is None
