"""`atnat translate` streams and survives long lines: output is written window by
window, a line over the model's limit gets an empty line and one message (or is cut with
`--long-lines truncate`), and every other line is translated."""
import io

import pytest
import pytorch_lightning as pl
import torch

import atnat.decoding  # noqa: F401
import atnat.models.decoders  # noqa: F401
from atnat.decoding.base import STRATEGIES
from atnat.experiments.cli.commands import main
from atnat.experiments.data.tokenize import SymbolTokenizer
from atnat.experiments.evaluation import translate
from atnat.experiments.modelfiles.checkpoints import write_checksum
from atnat.models.seq2seq import Seq2SeqModule
from tests.training import TINY_MODEL

WORDS = [f"w{i}" for i in range(12)]


def save_untrained(path, decoder: str, options: dict | None = None, max_positions: int = 30):
    """A checkpoint `atnat translate` loads: an untrained model (deterministic outputs) + tokenizer."""
    tok = SymbolTokenizer(WORDS)
    torch.manual_seed(0)
    module = Seq2SeqModule(vocab_size=tok.vocab_size, decoder=decoder, decoder_options=options,
                           model={**TINY_MODEL, "max_positions": max_positions})
    torch.save({"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams),
                "pytorch-lightning_version": pl.__version__, "atnat_tokenizer": tok.to_state()}, path)
    write_checksum(path)  # as atnat records with every checkpoint it writes
    return path


def line(n: int, start: int = 0) -> str:
    return " ".join(WORDS[(start + i) % len(WORDS)] for i in range(n))


def translate_cli(monkeypatch, capsys, stdin, *args):
    monkeypatch.setattr("sys.stdin", stdin)
    capsys.readouterr()
    code = main(["translate", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def ctc_ckpt(tmp_path_factory):
    # max_positions 30, upsample 3: sources of up to 10 tokens
    return save_untrained(tmp_path_factory.mktemp("ctc") / "ctc.ckpt", "ctc", {"upsample": 3})


def alone(ckpt, text: str, monkeypatch, capsys) -> str:
    return translate_cli(monkeypatch, capsys, io.StringIO(text + "\n"), "--checkpoint", str(ckpt),
                         "--strategy", "ctc")[1].rstrip("\n")


def test_a_line_over_the_limit_is_left_empty_with_a_message_and_the_rest_is_translated(ctc_ckpt, monkeypatch, capsys):
    lines = [line(3), line(10, 1), line(5, 2), line(14, 3), line(1, 4), line(8, 5)]
    code, out, err = translate_cli(monkeypatch, capsys, io.StringIO("\n".join(lines) + "\n"),
                                   "--checkpoint", str(ctc_ckpt), "--strategy", "ctc", "--batch-size", "2")
    assert code == 1
    outs = out.split("\n")
    assert len(outs) == 7 and outs[-1] == "" and outs[3] == ""
    assert "line 4: 14 tokens, longer than the model's limit of 10" in err
    assert "1 of 6 lines were too long" in err and "Traceback" not in err
    for i in (0, 1, 2, 4, 5):  # each line as translated on its own: order kept, nothing shifted
        assert outs[i] == alone(ctc_ckpt, lines[i], monkeypatch, capsys)


def test_long_lines_truncate_cuts_to_the_limit_with_a_warning(ctc_ckpt, monkeypatch, capsys):
    lines = [line(4), line(14, 3)]
    code, out, err = translate_cli(monkeypatch, capsys, io.StringIO("\n".join(lines) + "\n"),
                                   "--checkpoint", str(ctc_ckpt), "--strategy", "ctc", "--long-lines", "truncate")
    assert code == 0 and "warning: line 2: 14 tokens, cut to the model's limit of 10" in err
    assert out.split("\n")[1] == alone(ctc_ckpt, line(10, 3), monkeypatch, capsys)


def test_outputs_are_written_window_by_window_so_a_kill_loses_at_most_one(ctc_ckpt, monkeypatch, capsys):
    def stdin():
        for i in range(10):
            yield line(1 + i % 5, i) + "\n"
        raise KeyboardInterrupt  # the user stops it while the third window is being read

    monkeypatch.setattr(translate, "WINDOW", 4)
    code, out, _ = translate_cli(monkeypatch, capsys, stdin(), "--checkpoint", str(ctc_ckpt), "--strategy", "ctc",
                                 "--batch-size", "3")
    assert code == 130
    assert len(out.split("\n")) - 1 == 8  # two whole windows were written before the interrupt


CASES = [("at", {}, {"name": "greedy"}), ("at", {}, {"name": "beam", "beam_size": 2}),
         ("nat", {}, {"name": "parallel", "length_beam": 2}),
         ("nat", {"length": "fixed", "fixed_len_a": 1.5, "fixed_len_b": 3},
          {"name": "parallel", "length": "fixed", "fixed_len_a": 1.5, "fixed_len_b": 3}),
         ("cmlm", {}, {"name": "mask-predict", "iterations": 2}), ("cmlm", {}, {"name": "length-beam", "length_beam": 3}),
         ("ctc", {}, {"name": "ctc"}), ("ctc", {"upsample": 2}, {"name": "ctc", "beam_size": 2})]


@pytest.mark.parametrize("decoder, options, spec", CASES)
def test_each_decoder_states_its_real_source_limit(decoder, options, spec):
    """A source of max_source_length tokens decodes (untrained models emit no EOS and predict
    long lengths: the worst case), one token more does not fit the positional table."""
    torch.manual_seed(0)
    model = {**TINY_MODEL, "d_model": 16, "ffn_dim": 32, "max_positions": 40}
    module = Seq2SeqModule(vocab_size=20, decoder=decoder, decoder_options=options, model=model).eval()
    spec = dict(spec)
    strategy = STRATEGIES.get(spec.pop("name"))(**spec)
    limit = module.decoder.max_source_length
    # ctc: k S slots; fixed-length nat: floor(1.5 S + 3) slots, and floor(1.5 * 25 + 3) = 40
    expected = {"ctc": 40 // options.get("upsample", 3), "nat": 25 if options else 40}.get(decoder, 40)
    assert limit == expected
    for s in (1, limit):
        src = torch.randint(6, 20, (2, s))
        hyps = module.decode(src, torch.tensor([s, s]), strategy)
        assert hyps.lengths.max() <= 40
    with pytest.raises(ValueError, match="exceeds max_positions=40"):
        module.decode(torch.randint(6, 20, (2, limit + 1)), torch.tensor([limit + 1] * 2), strategy)


@pytest.mark.parametrize("size", ["0", "-1", "x"])
def test_a_batch_size_that_is_not_positive_is_refused(ctc_ckpt, monkeypatch, capsys, size):
    with pytest.raises(SystemExit) as stop:
        translate_cli(monkeypatch, capsys, io.StringIO("a b\n"), "--checkpoint", str(ctc_ckpt), "--batch-size", size)
    assert stop.value.code == 2 and "--batch-size: expected a positive integer" in capsys.readouterr().err


def test_input_that_is_not_utf8_is_named_by_its_line(ctc_ckpt, monkeypatch, capsys):
    stdin = io.TextIOWrapper(io.BytesIO(b"a b\n\xff\xfe c\n"), encoding="utf-8", errors="surrogateescape")
    code, out, err = translate_cli(monkeypatch, capsys, stdin, "--checkpoint", str(ctc_ckpt), "--batch-size", "1",
                                   "--engine", "eager")  # (auto would compile a batch-1 package: tests/test_engines.py)
    assert code == 2 and "stdin line 2 is not valid UTF-8" in err
    assert len(out.splitlines()) == 1  # the line before it translated and written (its window was lost)
    monkeypatch.setattr("atnat.experiments.evaluation.translate.WINDOW", 2)  # windows of 2 lines: a b / a b / a b, bad
    stdin = io.TextIOWrapper(io.BytesIO(b"a b\n" * 3 + b"\xff\n"), encoding="utf-8", errors="surrogateescape")
    code, out, err = translate_cli(monkeypatch, capsys, stdin, "--checkpoint", str(ctc_ckpt), "--batch-size", "1",
                                   "--engine", "eager")
    assert code == 2 and "stdin line 4 is not valid UTF-8" in err and len(out.splitlines()) == 3


def test_an_empty_source_line_translates_to_an_empty_line_everywhere(tmp_path, monkeypatch, capsys):
    """An empty (or blank) source has nothing to translate: translate, evaluate and the split decoder
    give an empty output for it, as CTranslate2 does, and decode nothing for it; before, the model
    decoded a source of EOS alone into whatever its first tokens were."""
    from atnat.decoding.greedy import Greedy
    from atnat.experiments.data.batching import encode_split
    from atnat.experiments.evaluation.decode import decode_split

    ckpt = save_untrained(tmp_path / "at.ckpt", "at")
    lines = [line(3), "", line(5, 2), "   ", line(1, 4)]
    code, out, err = translate_cli(monkeypatch, capsys, io.StringIO("\n".join(lines) + "\n"), "--checkpoint", str(ckpt),
                                   "--strategy", "greedy", "--batch-size", "2")
    outs = out.split("\n")[:-1]
    assert code == 0 and len(outs) == 5 and outs[1] == outs[3] == ""
    for i in (0, 2, 4):
        assert outs[i] == translate_cli(monkeypatch, capsys, io.StringIO(lines[i] + "\n"), "--checkpoint", str(ckpt),
                                        "--strategy", "greedy")[1].rstrip("\n") != ""
    (tmp_path / "src.txt").write_text("\n".join(lines) + "\n")
    assert main(["evaluate", "--checkpoint", str(ckpt), "--src", str(tmp_path / "src.txt"), "--ref",
                 str(tmp_path / "src.txt"), "--no-speed", "--hyps", str(tmp_path / "hyps.txt")]) == 0
    assert (tmp_path / "hyps.txt").read_text().split("\n")[:-1] == outs
    from atnat.experiments.modelfiles.loading import load_module

    module, tok = load_module(ckpt)
    split = encode_split(tok, lines, lines, name="test")
    decoded = decode_split(module, split, Greedy(), max_tokens=4000)
    assert decoded.hyps[1] == decoded.hyps[3] == [] and all(decoded.hyps[i] for i in (0, 2, 4))
    alone_passes = decode_split(module, encode_split(tok, [lines[0]], [lines[0]], name="test"), Greedy(),
                                max_tokens=4000).passes
    assert decoded.passes >= alone_passes > 0


@pytest.mark.parametrize("closed", ["stdin", "stdout"])
def test_a_closed_stdin_or_stdout_is_one_message(ctc_ckpt, monkeypatch, capsys, closed):
    """`atnat translate <&-` (or `>&-`): Python sets the stream to None, and translate failed with a traceback."""
    monkeypatch.setattr(f"sys.{closed}", None)
    assert main(["translate", "--checkpoint", str(ctc_ckpt), "--strategy", "ctc"]) == 2
    assert f"atnat: error: {closed} is closed" in capsys.readouterr().err


def test_a_teacher_that_reads_shorter_sources_sets_the_limit(tmp_path, monkeypatch, capsys):
    """A CMLM reading 64 positions with an AT teacher reading 16: a 20-token line crashed translate (and
    evaluate) inside the teacher, losing the lines before it. The smaller limit, the teacher's, now
    applies: the long line is left empty (or cut) with a message, the others are translated."""
    cmlm = save_untrained(tmp_path / "cmlm.ckpt", "cmlm", max_positions=64)
    at = save_untrained(tmp_path / "at.ckpt", "at", max_positions=16)
    lines = [line(2), line(3, 1), line(20, 2)]
    args = ["--checkpoint", str(cmlm), "--teacher", str(at), "--strategy", "speculative"]
    code, out, err = translate_cli(monkeypatch, capsys, io.StringIO("\n".join(lines) + "\n"), *args)
    outs = out.split("\n")[:-1]
    assert code == 1 and len(outs) == 3 and outs[2] == "" and outs[0] and outs[1]
    assert "line 3: 20 tokens, longer than its teacher's limit of 16" in err and "Traceback" not in err
    code, out, err = translate_cli(monkeypatch, capsys, io.StringIO("\n".join(lines) + "\n"), *args,
                                   "--long-lines", "truncate")
    assert code == 0 and "cut to its teacher's limit of 16" in err and len(out.split("\n")[:-1]) == 3
    (tmp_path / "src.txt").write_text("\n".join(lines) + "\n")
    assert main(["evaluate", *args, "--src", str(tmp_path / "src.txt"), "--ref", str(tmp_path / "src.txt"),
                 "--no-speed"]) == 2
    assert "line 3: 20 tokens, more than the 16 its teacher reads" in capsys.readouterr().err
