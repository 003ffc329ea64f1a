"""The GPU tier: what users run, end to end on CUDA. `pytest -m gpu` on a machine with a CUDA device;
everywhere else these tests are deselected (default suite) or skipped (no CUDA).

Every test builds what it reads (its own module-scoped fixture, or nothing), so `-n auto` may put
each test on a worker of its own. Covered: a grid in bf16 with every decoder family on a
sentencepiece task, pre-LN layers, guided attention, scheduled sampling, GLAT, length beam, NPD,
mask-predict history and CTC beam, in `--workers 2` worker processes, with distillation, probes,
timing and the report; `--devices` (cells pinned to a GPU, the timing phase on it); DDP on two GPUs;
the CTranslate2 baseline of the timing phase; translate / distill / int8 on a GPU machine; CUDA
graphs of the static AT step and of every NAT pass; the probes; `atnat bench decode` with its CTranslate2 rows.
"""
import copy
import io
import json
import subprocess
import sys

import pandas as pd
import pytest
import torch
import yaml

from atnat.experiments.cli.commands import main
from tests.test_export import parallel_files
from tests.test_grid import TINY, run_cli, write_grid

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

MODEL = {"d_model": 32, "n_heads": 2, "ffn_dim": 64, "encoder_layers": 1, "decoder_layers": 2, "dropout": 0.1,
         "pre_ln": True}
GPU_TRAIN = {"accelerator": "gpu", "precision": "bf16-mixed", "num_threads": None, "max_steps": 30,
             "val_every_steps": 10, "max_tokens": 256, "progress_bar": False}
KD = {"teacher": "at", "distill": {"strategy": {"name": "greedy"}}, "train": {"init_from": "teacher"}}
CELLS = {
    "at": {"decoder": {"name": "at"}, "eval": {"strategies": ["greedy", {"name": "beam", "beam_size": 3}]}},
    "at-ga-ss": {"decoder": {"name": "at", "scheduled_sampling": "inverse_sigmoid", "sampling_k": 5,
                             "sampling_max": 0.5},
                 "loss": {"guided_attention_weight": 0.5}, "eval": {"strategies": ["greedy"]}},
    "nat-kd": {"decoder": {"name": "nat", "glat": True}, **KD,
               "eval": {"strategies": ["parallel", {"name": "length-beam", "length_beam": 3},
                                       {"name": "npd", "length_beam": 3}]}},
    "cmlm-kd": {"decoder": {"name": "cmlm"}, **KD,
                "eval": {"strategies": [{"name": "mask-predict", "iterations": 3, "record_history": True}]}},
    "ctc-kd": {"decoder": {"name": "ctc", "glat": True}, **KD,
               "eval": {"strategies": ["ctc", {"name": "ctc", "beam_size": 3}]}},
    "nat-fixed": {"decoder": {"name": "nat", "length": "fixed"},
                  "eval": {"strategies": [{"name": "parallel", "length": "fixed"}]}},
}


def text_task(root) -> dict:
    """A word-for-word 'translation' in root/ with a sentencepiece tokenizer (what real data uses)."""
    parallel_files(root)
    return {"name": "parallel", "data_dir": str(root), "src": "xx", "tgt": "yy", "valid": "valid", "test": "test",
            "vocab_size": 60}


def copy_grid(root, cells, **extra) -> tuple:
    """TINY's copy task trained on the GPU: (grid file, results root)."""
    base = {**TINY["base"], "train": {**TINY["base"]["train"], **GPU_TRAIN}}
    return write_grid(root, {**TINY, "base": base, "cells": cells, **extra}), root / "res"


@pytest.fixture(scope="module")
def gpu_grid(tmp_path_factory):
    """Every decoder family, trained and evaluated by `atnat run --workers 2` on the GPU."""
    root = tmp_path_factory.mktemp("gpu-grid")
    base = {"task": text_task(root), "model": MODEL, "train": GPU_TRAIN, "eval": {"n_bootstrap": 10}}
    grid = write_grid(root, {**TINY, "base": base, "cells": CELLS})
    assert main(["run", str(grid), "--results", str(root / "res"), "--workers", "2"]) == 0
    return root / "res" / "tiny"


def test_a_grid_trains_in_bf16_in_workers_and_evaluates_probes_distils_times_and_reports(gpu_grid):
    out = gpu_grid
    df = pd.read_csv(out / "results.csv")
    assert (df.status == "ok").all(), df[df.status != "ok"][["cell", "error"]].to_string()
    assert set(df.decoder) == {"at", "nat", "cmlm", "ctc"} and len(df) == 10
    for cell in df.cell.unique():
        run = out / "runs" / cell
        trained = json.loads((run / "train.json").read_text())
        assert trained["accelerator"] == "CUDAAccelerator" and "bf16" in trained["precision"]
        assert (run / "worker.log").is_file()  # trained in a worker process (--workers 2)
        assert json.loads((run / "config.json").read_text())["model"]["pre_ln"] is True
    for student in ("nat-kd-s1", "cmlm-kd-s1", "ctc-kd-s1"):  # from the teacher's weights, on its outputs
        trained = json.loads((out / "runs" / student / "train.json").read_text())
        assert trained["initialised_from"]["tensors"] > 0 and (out / "runs" / student / "distill.json").is_file()
    guided = pd.read_csv(out / "runs" / "at-ga-ss-s1" / "logs" / "metrics.csv")["train/guided_attention"].dropna()
    assert len(guided) and guided.map(float).between(0, 1).all()  # the guided-attention part computed on CUDA
    assert df.set_index(["cell", "strategy"]).loc[("nat-kd-s1", "parallel-lb3"), "bleu"] >= 0  # length beam
    assert json.loads((out / "environment.json").read_text())["device"] == torch.cuda.get_device_name(0)
    curves = out / "curves"
    assert (curves / "position_accuracy.csv").exists() and (curves / "prefix_corruption.csv").exists()
    assert (curves / "attention.csv").exists() and (out / "report.html").exists()
    timing = pd.read_csv(out / "timing.csv")
    settings = json.loads((out / "timing.json").read_text())
    assert settings["device"].startswith("cuda") and settings["device_name"] == torch.cuda.get_device_name(0)
    assert timing.speedup_vs_at.notna().all() and (timing.latency_ms_b1 > 0).all()
    assert (timing.decode_memory_mb > 0).all()  # each system's own GPU memory, read from torch's allocator


@pytest.fixture(scope="module")
def at_run(tmp_path_factory):
    """One AT run trained on the GPU with `atnat train` on a sentencepiece task."""
    root = tmp_path_factory.mktemp("gpu-at")
    config = {"name": "at", "task": text_task(root), "decoder": {"name": "at"}, "model": MODEL,
              "train": GPU_TRAIN, "eval": {"strategies": ["greedy"], "n_bootstrap": 10}}
    (root / "at.yaml").write_text(yaml.safe_dump(config))
    assert main(["train", str(root / "at.yaml"), "--output-dir", str(root / "run")]) == 0
    return root


def test_translate_distill_and_int8_on_a_gpu_machine(at_run, monkeypatch, capsys):
    run = at_run / "run"
    lines = (at_run / "test.xx").read_text().split("\n")[:5]
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(lines) + "\n"))
    capsys.readouterr()
    assert main(["translate", "--checkpoint", str(run), "--device", "gpu", "--strategy", "beam", "--beam", "3"]) == 0
    assert len(capsys.readouterr().out.split("\n")) == 6
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(lines) + "\n"))
    assert main(["translate", "--checkpoint", str(run), "--quantize", "int8"]) == 0  # --device auto: the CPU
    out = capsys.readouterr()
    assert len(out.out.split("\n")) == 6 and "--quantize int8 decodes on the CPU" in out.err
    kd = at_run / "kd.txt"
    assert main(["distill", "--teacher", str(run), "--device", "gpu", "--output", str(kd), "--strategy",
                 "greedy"]) == 0
    assert len(kd.read_text().splitlines()) == len((at_run / "train.xx").read_text().splitlines())


def test_devices_pin_cells_to_a_gpu_and_the_timing_phase_decodes_there(tmp_path):
    last = str(torch.cuda.device_count() - 1)
    grid, res = copy_grid(tmp_path, {"at": TINY["cells"]["at"],
                                     "cmlm-kd": {**TINY["cells"]["cmlm-kd"], "train": {"init_from": "teacher"}}})
    assert main(["run", str(grid), "--results", str(res), "--devices", f"{last},{last}"]) == 0
    out = res / "tiny"
    for cell in ("at-s1", "cmlm-kd-s1"):
        assert json.loads((out / "runs" / cell / "train.json").read_text())["accelerator"] == "CUDAAccelerator"
        assert (out / "runs" / cell / "worker.log").is_file()
    settings = json.loads((out / "timing.json").read_text())
    assert settings["device"] == f"cuda:{last}" and settings["device_name"] == torch.cuda.get_device_name(int(last))
    assert json.loads((out / "environment.json").read_text())["lanes"] == f"{last}, {last}"


@pytest.mark.skipif(torch.cuda.device_count() < 2,
                    reason=f"DDP over 2 GPUs needs 2 CUDA devices; this machine has {torch.cuda.device_count()}")
def test_one_cell_trains_with_ddp_on_two_gpus(tmp_path):
    for name, decoder, loss in (("ddp-at", {"name": "at"}, {}),
                                ("ddp-nat", {"name": "nat"}, {"length_weight": 0.0})):  # unused parameters
        cfg = {**TINY["base"], "name": name, "decoder": decoder, "loss": loss,
               "train": {**TINY["base"]["train"], **GPU_TRAIN, "devices": 2},
               "eval": {"strategies": ["greedy" if decoder["name"] == "at" else "parallel"], "n_bootstrap": 10}}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
        proc = run_cli(["train", str(tmp_path / f"{name}.yaml"), "--output-dir", name], tmp_path)
        log = proc.communicate(timeout=600)[0].decode()
        assert proc.returncode == 0, log[-3000:]
        info = json.loads((tmp_path / name / "train.json").read_text())
        assert info["world_size"] == 2 and info["accelerator"] == "CUDAAccelerator" and info["global_step"] == 30
        rows = json.loads((tmp_path / name / "metrics.json").read_text())["rows"]
        assert [r["train_devices"] for r in rows] == [2]


def ct2_gpu_problem() -> str | None:
    """Why CTranslate2 cannot decode on this machine's GPU (its 4.x wheel needs CUDA 12's cuBLAS,
    which a CUDA-13-only machine lacks), or None: its tests are skipped for that reason, by name."""
    pytest.importorskip("ctranslate2", reason="the CTranslate2 baseline needs atnat[bench]")
    from atnat.experiments.modelfiles import ct2

    return ct2.device_problem("cuda")


def test_the_timing_phase_times_the_ctranslate2_twin_on_the_gpu(tmp_path):
    if problem := ct2_gpu_problem():
        pytest.skip(problem)
    grid, res = copy_grid(tmp_path, {"at": TINY["cells"]["at"]},
                          speed={**TINY["speed"], "ct2_baseline": True})
    assert main(["run", str(grid), "--results", str(res)]) == 0  # stops before training if CTranslate2 sees no GPU
    timing = pd.read_csv(res / "tiny" / "timing.csv").set_index("strategy")
    assert {"greedy-ct2", "beam2-ct2"} <= set(timing.index)
    assert (timing.loc[["greedy-ct2", "beam2-ct2"], "latency_ms_b1"] > 0).all()
    assert timing.loc[["greedy", "beam2"], "speedup_vs_ct2"].notna().all()
    assert timing.loc[["greedy-ct2", "beam2-ct2"], "decode_memory_mb"].isna().all()  # outside torch: not measured
    assert timing.loc[["greedy", "beam2"], "decode_memory_mb"].gt(0).all()
    assert timing.loc[["greedy", "beam2"], "decode_memory_basis"].eq("cuda-allocator").all()
    assert timing.loc[["greedy-ct2", "beam2-ct2"], "decode_memory_basis"].isna().all()  # read back as empty


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


def test_the_auto_engine_graphs_single_sentence_at_steps_with_the_eager_tokens():
    """auto on a GPU: batch-1 decodes of sentences of many lengths (new shapes for the graphs, as the
    timing phase's latency sentences are) give eager's tokens; a batch decodes eager, the same too."""
    from atnat.decoding.beam import Beam
    from atnat.decoding.greedy import Greedy
    from atnat.experiments.modelfiles.engines import apply_engine
    from atnat.models.seq2seq import Seq2SeqModule

    torch.manual_seed(0)
    eager = Seq2SeqModule(vocab_size=64, decoder="at", model=dict(d_model=32, n_heads=2, ffn_dim=64, encoder_layers=1,
                                                                  decoder_layers=2, dropout=0.0)).eval().cuda()
    graphed = copy.deepcopy(eager)
    assert apply_engine(graphed, "auto").label == "auto=cudagraphs"
    g = torch.Generator().manual_seed(1)
    sources = [torch.randint(6, 64, (1, n), generator=g).cuda() for n in (3, 9, 5, 14, 9, 7, 3)]
    for strategy in (Greedy(max_len_a=1.0, max_len_b=4), Beam(beam_size=3, max_len_a=1.0, max_len_b=4)):
        for src in sources:
            lengths = src.ne(0).sum(1)
            assert torch.equal(eager.decode(src, lengths, strategy).tokens, graphed.decode(src, lengths, strategy).tokens)
        batch = torch.cat([s[:, :3] for s in sources])
        lengths = batch.ne(0).sum(1)
        assert torch.equal(eager.decode(batch, lengths, strategy).tokens, graphed.decode(batch, lengths, strategy).tokens)


def test_the_auto_engine_graphs_every_nat_pass_with_the_eager_tokens():
    """auto on a GPU: the encoder and every NAT family's pass replay CUDA graphs (one per shape) at batch 1,
    sentences of many lengths, each decoded twice (the second replays); eager's tokens, lengths and scores.
    A batch decodes eager, the same too."""
    from atnat.experiments.modelfiles.cuda_graphs import GraphedPass
    from atnat.experiments.modelfiles.engines import apply_engine
    from atnat.models.seq2seq import Seq2SeqModule
    from tests.test_engines import NAT_CASES

    g = torch.Generator().manual_seed(1)
    sources = [torch.randint(6, 40, (1, n), generator=g).cuda() for n in (3, 9, 5, 14, 9, 7, 3)]
    for decoder, options, strategies in NAT_CASES:
        torch.manual_seed(3)
        eager = Seq2SeqModule(vocab_size=40, decoder=decoder, model=dict(d_model=32, n_heads=4, ffn_dim=64,
                              encoder_layers=2, decoder_layers=2, dropout=0.0),
                              decoder_options=options or None).eval().cuda()
        graphed = copy.deepcopy(eager)
        assert apply_engine(graphed, "auto").label == "auto=cudagraphs"
        for name, strategy in strategies.items():
            for src in sources + sources:
                lengths = src.ne(0).sum(1)
                ref, out = eager.decode(src, lengths, strategy), graphed.decode(src, lengths, strategy)
                assert torch.equal(ref.tokens, out.tokens), f"{decoder} {name}: tokens differ"
                assert torch.equal(ref.lengths, out.lengths) and torch.equal(ref.scores, out.scores)
            batch = torch.cat([s[:, :3] for s in sources])
            lengths = batch.ne(0).sum(1)
            passes = [p for p in (*vars(graphed.encoder).values(), *vars(graphed.decoder).values())
                      if isinstance(p, GraphedPass)]
            before = [len(p.graphs) for p in passes]
            assert torch.equal(eager.decode(batch, lengths, strategy).tokens, graphed.decode(batch, lengths, strategy).tokens)
            assert [len(p.graphs) for p in passes] == before  # a batch: eager
        encoder = vars(graphed.encoder)["forward"]
        assert len(encoder.graphs) == 5 and encoder.replays == 2 * len(sources) * len(strategies)
        assert len(passes) == 2 and all(p.replays > 0 and not p.broken for p in passes)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_graphed_passes_capture_on_the_models_own_gpu():
    """A model on the second GPU (the timing phase decodes on the first of --devices without making it
    current): its graphs are captured and replayed there, with eager's tokens."""
    from atnat.decoding.mask_predict import MaskPredict
    from atnat.experiments.modelfiles.engines import apply_engine
    from atnat.models.seq2seq import Seq2SeqModule

    torch.manual_seed(3)
    eager = Seq2SeqModule(vocab_size=40, decoder="cmlm", model=dict(d_model=32, n_heads=4, ffn_dim=64, encoder_layers=2,
                          decoder_layers=2, dropout=0.0)).eval().to("cuda:1")
    graphed = copy.deepcopy(eager)
    apply_engine(graphed, "auto")
    assert torch.cuda.current_device() == 0
    g = torch.Generator().manual_seed(1)
    for n in (3, 9, 5, 9):
        src = torch.randint(6, 40, (1, n), generator=g).to("cuda:1")
        lengths = src.ne(0).sum(1)
        strategy = MaskPredict(iterations=3, length_beam=2)
        assert torch.equal(eager.decode(src, lengths, strategy).tokens, graphed.decode(src, lengths, strategy).tokens)
    assert vars(graphed.decoder)["forward_parallel"].replays > 0


def test_probes_run_on_cuda():
    from atnat.experiments.data.batching import collate, encode_split
    from atnat.experiments.evaluation.probes import attention_map, oracle_predictions, prefix_corruption
    from tests.training import fit

    module, task = fit("at", "copy", steps=20, vocab=8, min_len=3, max_len=6, n_train=100, n_test=10)
    module = module.cuda()
    split = encode_split(task.tokenizer, *task.splits["test"], name="test")
    batch = collate([split[i] for i in range(4)]).to("cuda")
    assert len(oracle_predictions(module, batch)) == 4
    clean, noisy, valid = prefix_corruption(module, batch, 1)  # host arrays, as the report reads them
    on_cpu = prefix_corruption(module.cpu(), batch.to("cpu"), 1)
    assert clean.shape == noisy.shape == valid.shape == on_cpu[2].shape and clean.dtype == bool
    assert (valid == on_cpu[2]).all() and (clean == on_cpu[0]).mean() > 0.9  # the same probe on either device
    module.cuda()
    assert attention_map(module, split) is not None


def test_bench_decode_tiny_on_cuda_with_its_ctranslate2_rows(tmp_path):
    from tests.test_bench import PASSES

    out = tmp_path / "decode.csv"
    done = subprocess.run([sys.executable, "-m", "atnat.experiments.cli", "bench", "decode", "--tiny", "--device",
                           "cuda", "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    df = pd.read_csv(out)
    ours = df[df.system == "ours"]
    assert set(ours.strategy) == set(PASSES) and (ours.passes == ours.strategy.map(PASSES)).all()  # equal work
    assert df.median_s.gt(0).all() and df.peak_mem_mb[df.system == "ours"].gt(0).all()
    try:
        problem = ct2_gpu_problem()
    except pytest.skip.Exception:  # not installed
        return
    if problem:  # skipped with the reason, and no row claims otherwise
        assert f"CTranslate2 rows skipped: {problem}" in done.stdout + done.stderr
        assert not df.system.str.startswith("ct2").any()
        return
    assert "CTranslate2 rows skipped" not in done.stdout + done.stderr  # installed: its rows are there, on CUDA
    assert {"ct2-f32", "ct2-int8"} <= set(df.system) and df.ratio_vs_ct2[df.system == "ours"].notna().any()


def test_an_eager_optimizer_state_resumed_under_fused_keeps_its_step_counters_on_the_gpu():
    """The fused kernel reads each parameter's step counter on the device; a state saved by the eager form
    keeps them on the CPU, so resuming moves them (and a fused state resumed as eager moves them back)."""
    from atnat.models.optim import OptimConfig
    from atnat.models.step_forms import apply_to_optimizer, make_optimizer

    model = torch.nn.Linear(8, 8).cuda()
    eager = make_optimizer(model.parameters(), OptimConfig(), "eager")
    model(torch.randn(4, 8, device="cuda")).sum().backward()
    eager.step()
    fused = make_optimizer(model.parameters(), OptimConfig(), "fused")
    fused.load_state_dict(eager.state_dict())
    apply_to_optimizer(fused, "fused")
    assert all(s["step"].device.type == "cuda" for s in fused.state.values())
    model(torch.randn(4, 8, device="cuda")).sum().backward()
    fused.step()
    assert all(float(s["step"]) == 2 for s in fused.state.values())
    apply_to_optimizer(fused, "eager")
    assert all(s["step"].device.type == "cpu" for s in fused.state.values())


def test_validation_on_a_gpu_leaves_trainings_random_state_and_repeats_its_loss():
    """Validation forks the CPU generator and the model's GPU's, seeds them per batch, and gives them back."""
    from atnat.experiments.data.batching import encode_split, make_loader
    from atnat.models.seq2seq import Seq2SeqModule
    from tests.training import TINY_MODEL, make_task

    task = make_task("reverse")
    src, tgt = task.splits["valid"]
    batch = next(iter(make_loader(encode_split(task.tokenizer, src, tgt, name="valid"), 512, shuffle=False)))
    batch = batch.to("cuda")
    module = Seq2SeqModule(vocab_size=task.tokenizer.vocab_size, decoder="cmlm", model=TINY_MODEL).cuda().eval()
    logged = []
    module.log = lambda name, value, **_: logged.append((name, float(value)))
    runs = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        before = (torch.get_rng_state(), torch.cuda.get_rng_state())
        with torch.no_grad():
            module.validation_step(batch, 0)
        assert torch.equal(torch.get_rng_state(), before[0]) and torch.equal(torch.cuda.get_rng_state(), before[1])
        runs.append(list(logged))
        logged.clear()
    assert runs[0] == runs[1]
