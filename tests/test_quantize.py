"""Dynamic int8 quantization (`quantize_int8`, `--quantize int8`): every linear map of an AT or NAT
model becomes int8 (the fused attention projections and the tied vocabulary projection included),
the float model is left untouched, and a trained model decodes nearly as well."""
import io

import pytest
import torch
from torch import nn

import atnat.decoding  # noqa: F401  (registers strategies)
from atnat.core.errors import AtnatError
from atnat.decoding.greedy import Greedy
from atnat.decoding.parallel import Parallel
from atnat.experiments.cli.commands import main
from atnat.experiments.modelfiles.export import export_safetensors
from atnat.experiments.modelfiles.loading import attach_tokenizer
from atnat.experiments.modelfiles.quantize import Int8Attention, maybe_quantize, quantize_int8
from atnat.models.layers import MultiHeadAttention
from atnat.models.seq2seq import Seq2SeqModule
from tests.training import decode_split, exact_match, fit

MODEL = dict(d_model=32, n_heads=2, ffn_dim=64, encoder_layers=2, decoder_layers=2, dropout=0.0)


@pytest.mark.parametrize("decoder", ["at", "nat", "cmlm", "ctc", "dag"])
def test_int8_model_quantizes_every_linear_and_leaves_the_float_model_untouched(decoder):
    torch.manual_seed(0)
    module = Seq2SeqModule(vocab_size=12, decoder=decoder, model=MODEL).eval()
    before = {k: v.clone() for k, v in module.state_dict().items()}
    q = quantize_int8(module)
    assert not any(type(m) is nn.Linear for m in q.modules())  # every float Linear replaced
    attns = [m for m in q.modules() if isinstance(m, MultiHeadAttention)]
    assert attns and all(isinstance(m, Int8Attention) for m in attns)
    assert "quantized.dynamic" in type(q.decoder.output).__module__
    assert all(torch.equal(v, module.state_dict()[k]) for k, v in before.items())  # original untouched


@pytest.mark.slow
@pytest.mark.parametrize("decoder, strategy", [("at", Greedy()), ("nat", Parallel())])
def test_an_int8_model_decodes_nearly_as_well_as_its_float_model(decoder, strategy):
    module, task = fit(decoder, "reverse", steps=250, model=MODEL, vocab=8, min_len=2, max_len=6,
                       n_train=600, n_test=60)
    q = quantize_int8(module)
    with torch.inference_mode():
        float_hyps, refs, _ = decode_split(module, task, strategy)
        int8_hyps, _, _ = decode_split(q, task, strategy)
    assert exact_match(float_hyps, refs) > 0.3  # it learned something worth keeping
    assert abs(exact_match(int8_hyps, refs) - exact_match(float_hyps, refs)) <= 0.1
    assert sum(a == b for a, b in zip(float_hyps, int8_hyps)) >= 0.8 * len(refs)


def test_translate_quantize_int8_and_bad_values(tmp_path, monkeypatch, capsys):
    module, task = fit("at", "copy", steps=150, model=MODEL, vocab=6, min_len=2, max_len=5, n_train=400, n_test=10)
    attach_tokenizer(module, task.tokenizer, task.bleu_tokenize)
    export_safetensors(module, tmp_path / "exp")
    text = "".join(s + "\n" for s in task.splits["test"][0])
    outs = []
    for extra in ([], ["--quantize", "int8"]):
        monkeypatch.setattr("sys.stdin", io.StringIO(text))
        assert main(["translate", "--checkpoint", str(tmp_path / "exp"), *extra]) == 0
        outs.append(capsys.readouterr().out.split("\n"))
    assert len(outs[1]) == len(outs[0]) == 11
    assert sum(a == b for a, b in zip(*outs)) >= 8
    with pytest.raises(AtnatError, match="--quantize 'int4'; valid: none, int8"):
        maybe_quantize(module, "int4")
    assert maybe_quantize(module, "none") is module


def test_int8_decodes_on_the_cpu_where_a_gpu_is_visible(tmp_path, monkeypatch, capsys):
    """--device auto (the default) on a GPU machine: int8 takes the CPU and says so; --device gpu
    with int8 is refused by name (PyTorch has no CUDA kernels for dynamic int8)."""
    module, task = fit("at", "copy", steps=20, model=MODEL, vocab=6, min_len=2, max_len=5, n_train=100, n_test=4)
    attach_tokenizer(module, task.tokenizer, task.bleu_tokenize)
    export_safetensors(module, tmp_path / "exp")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU box, as far as atnat can tell
    text = "".join(s + "\n" for s in task.splits["test"][0])
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    assert main(["translate", "--checkpoint", str(tmp_path / "exp"), "--quantize", "int8"]) == 0
    out = capsys.readouterr()
    assert len(out.out.split("\n")) == 5 and "--quantize int8 decodes on the CPU" in out.err
    ref = tmp_path / "ref.txt"
    ref.write_text("".join(s + "\n" for s in task.splits["test"][1]))
    src = tmp_path / "src.txt"
    src.write_text(text)
    assert main(["evaluate", "--checkpoint", str(tmp_path / "exp"), "--src", str(src), "--ref", str(ref),
                 "--quantize", "int8", "--no-speed", "--n-bootstrap", "2"]) == 0
    assert "--quantize int8 decodes on the CPU" in capsys.readouterr().err
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    assert main(["translate", "--checkpoint", str(tmp_path / "exp"), "--quantize", "int8", "--device", "gpu"]) == 2
    assert "--quantize int8 runs on the CPU only" in capsys.readouterr().err


def _dynamic_layer(per_channel: bool) -> nn.Module:
    """A dynamic int8 Linear (24 -> 40) as quantize_int8 builds them, or with per-channel weights."""
    from torch.ao.quantization import per_channel_dynamic_qconfig

    from atnat.experiments.modelfiles.quantize import _int8_linear
    torch.manual_seed(0)
    weight, bias = torch.randn(40, 24) * 0.2, torch.randn(40) * 0.1
    return _int8_linear(weight, bias, per_channel_dynamic_qconfig if per_channel else None)


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
def test_the_compilable_int8_layer_traces_to_the_layers_own_arithmetic(per_channel):
    """What a compiled engine runs for an int8 layer (its decomposed ops, as torch.export traces them)
    equals the layer's FBGEMM output up to float rounding, on 3-d inputs of several row counts:
    the same activation range (0..127: the layer's reduce_range), scales and integer products.
    Eager, the wrapper is the layer itself."""
    from atnat.experiments.modelfiles.quantize import CompilableInt8Linear

    layer = _dynamic_layer(per_channel)
    wrapped = CompilableInt8Linear(layer)
    assert wrapped.act_max == 127
    rows = torch.export.Dim("rows", min=1, max=64)
    program = torch.export.export(wrapped, (torch.randn(3, 5, 24),), dynamic_shapes=({0: rows},), strict=False)
    traced = program.module()
    ops = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert {"quantized_decomposed.choose_qparams.tensor", "quantized_decomposed.dequantize_per_channel.default"} <= ops
    for n in (1, 2, 7):
        x = torch.randn(n, 5, 24) * 3
        with torch.no_grad():
            ref = layer(x)
            assert torch.equal(wrapped(x), ref)
            out = traced(x)
        assert out.shape == (n, 5, 40)
        torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-5)
    wrong = CompilableInt8Linear(layer)
    wrong.act_max = 255  # the full uint8 range: not the layer's activations grid
    program = torch.export.export(wrong, (x,), strict=False)
    assert (program.module()(x) - ref).abs().max() > 1e-3


def test_compilable_int8_wraps_every_int8_layer_and_is_still_an_int8_model():
    from atnat.experiments.modelfiles.quantize import CompilableInt8Linear, compilable_int8, is_quantized
    from atnat.models.seq2seq import Seq2SeqModule

    model = quantize_int8(Seq2SeqModule(vocab_size=20, decoder="at", model=MODEL).eval())
    layers = sum(1 for m in model.modules() if type(m).__name__ == "Linear" and "dynamic" in type(m).__module__)
    assert compilable_int8(model) == layers > 0
    assert sum(isinstance(m, CompilableInt8Linear) for m in model.modules()) == layers and is_quantized(model)
    assert compilable_int8(model) == 0  # wrapped once
    assert not is_quantized(Seq2SeqModule(vocab_size=20, decoder="at", model=MODEL))
