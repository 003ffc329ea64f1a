"""The GPU tier: the suite's main job end to end on CUDA. Run with `pytest -m gpu` on a machine with a
CUDA device; everywhere else these tests are deselected (default suite) or skipped (no CUDA)."""
import io
import json
import subprocess
import sys

import pandas as pd
import pytest
import torch

from atnat.experiments.cli.commands import main

from tests.test_grid import TINY, write_grid

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

GPU_TRAIN = {"accelerator": "gpu", "precision": "bf16-mixed", "num_threads": None}
CELLS = {
    "at": {"decoder": {"name": "at"}, "eval": {"strategies": ["greedy", {"name": "beam", "beam_size": 3}]}},
    "nat-kd": {"decoder": {"name": "nat", "glat": True}, "teacher": "at", "distill": {"strategy": {"name": "greedy"}},
               "eval": {"strategies": ["parallel", {"name": "npd", "length_beam": 3}]}},
    "cmlm-kd": {"decoder": {"name": "cmlm"}, "teacher": "at", "distill": {"strategy": {"name": "greedy"}},
                "eval": {"strategies": [{"name": "mask-predict", "iterations": 3, "record_history": True}]}},
    "ctc-kd": {"decoder": {"name": "ctc", "glat": True}, "teacher": "at", "distill": {"strategy": {"name": "greedy"}},
               "eval": {"strategies": ["ctc", {"name": "ctc", "beam_size": 3}]}},
    "nat-fixed": {"decoder": {"name": "nat", "length": "fixed"},
                  "eval": {"strategies": [{"name": "parallel", "length": "fixed"}]}},
}


@pytest.fixture(scope="module")
def gpu_grid(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu")
    base = {**TINY["base"], "train": {**TINY["base"]["train"], **GPU_TRAIN, "max_steps": 30, "val_every_steps": 10}}
    grid = write_grid(root, {**TINY, "base": base, "cells": CELLS})
    return root, grid


def test_smoke_grid_trains_in_bf16_and_evaluates_probes_distils_and_reports_on_cuda(gpu_grid, monkeypatch):
    root, grid = gpu_grid
    monkeypatch.chdir(root)
    assert main(["run", str(grid), "--results", "res"]) == 0
    out = root / "res" / "tiny"
    df = pd.read_csv(out / "results.csv")
    assert (df.status == "ok").all(), df[df.status != "ok"][["cell", "error"]].to_string()
    assert set(df.decoder) == {"at", "nat", "cmlm", "ctc"}
    for cell in df.cell.unique():
        trained = json.loads((out / "runs" / cell / "train.json").read_text())
        assert trained["accelerator"] == "CUDAAccelerator" and "bf16" in trained["precision"]
    assert json.loads((out / "environment.json").read_text())["device"] == torch.cuda.get_device_name(0)
    curves = out / "curves"
    assert (curves / "position_accuracy.csv").exists() and (curves / "prefix_corruption.csv").exists()
    assert (curves / "attention.csv").exists() and (out / "report.html").exists()
    timing = pd.read_csv(out / "timing.csv")
    assert timing.speedup_vs_at.notna().all() and (timing.decode_memory_mb >= 0).all()


def test_translate_and_distill_on_cuda(gpu_grid, monkeypatch, capsys):
    root, _ = gpu_grid
    monkeypatch.chdir(root)
    run = root / "res" / "tiny" / "runs" / "at-s1"
    lines = (run / "references.txt").read_text().split("\n")[:5]
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(lines) + "\n"))
    capsys.readouterr()
    assert main(["translate", "--checkpoint", str(run), "--device", "gpu", "--strategy", "beam", "--beam", "3"]) == 0
    assert len(capsys.readouterr().out.split("\n")) == 6
    assert main(["distill", "--teacher", str(run), "--device", "gpu", "--output", "kd.txt", "--strategy",
                 "greedy"]) == 0


def test_cuda_graph_static_step_gives_the_eager_tokens():
    from atnat.decoding.beam import Beam
    from atnat.decoding.greedy import Greedy
    from atnat.models.seq2seq import Seq2SeqModule

    torch.manual_seed(0)
    model = Seq2SeqModule(vocab_size=64, decoder="at", model=dict(d_model=32, n_heads=2, ffn_dim=64, encoder_layers=1,
                                                                  decoder_layers=2, dropout=0.0)).eval().cuda()
    src = torch.randint(6, 64, (4, 9), device="cuda")
    src[2, 6:] = 0  # padding
    lengths = src.ne(0).sum(1)
    for strategy in (Greedy(max_len_a=1.0, max_len_b=4), Beam(beam_size=3, max_len_a=1.0, max_len_b=4)):
        eager = model.decode(src, lengths, strategy)
        model.decoder.use_static_cache(True, "reduce-overhead")
        graphed = model.decode(src, lengths, strategy)
        again = model.decode(src, lengths, strategy)  # replays the captured graphs
        model.decoder.use_static_cache(False)
        assert torch.equal(eager.tokens, graphed.tokens) and torch.equal(eager.tokens, again.tokens)


def test_probes_run_on_cuda():
    from atnat.experiments.data.batching import collate, encode_split
    from atnat.experiments.evaluation.probes import attention_map, oracle_predictions, prefix_corruption

    from tests.training import fit

    module, task = fit("at", "copy", steps=20, vocab=8, min_len=3, max_len=6, n_train=100, n_test=10)
    module = module.cuda()
    split = encode_split(task.tokenizer, *task.splits["test"], name="test")
    batch = collate([split[i] for i in range(4)]).to("cuda")
    assert len(oracle_predictions(module, batch)) == 4
    clean, noisy, valid = prefix_corruption(module, batch, 1)
    assert clean.shape == valid.shape
    assert attention_map(module, split) is not None


def test_bench_decode_tiny_on_cuda(tmp_path):
    out = tmp_path / "decode.csv"
    done = subprocess.run([sys.executable, "-m", "atnat.experiments.cli", "bench", "decode", "--tiny", "--device",
                           "cuda", "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    df = pd.read_csv(out)
    assert (df.device == "cuda").all() and df.median_s.gt(0).all()
