"""Cells in parallel worker processes, DDP training of one cell (CPU, 2 processes), bf16 training."""
import json
import os
import re
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from atnat.experiments.cli.commands import main
from atnat.experiments.config.run import ConfigError
from atnat.experiments.data import batching as data_module
from atnat.experiments.data.batching import encode_split, make_loader
from atnat.experiments.data.tokenize import SymbolTokenizer
from atnat.experiments.evaluation.timing import AA_SUFFIX
from atnat.experiments.running.grid import load_grid
from atnat.experiments.running.launchers import local as scheduler
from atnat.experiments.running.launchers.local import Lane, lanes_needed, make_lanes, run_parallel, worker_env
from tests.test_grid import TINY, run_cli, write_grid

STUDENT = {"decoder": {"name": "nat"}, "teacher": "at", "distill": {"strategy": {"name": "greedy"}},
           "eval": {"strategies": ["parallel"]}}


def test_training_batches_are_split_between_ranks_and_evaluation_batches_are_not(monkeypatch):
    words = [f"w{i}" for i in range(9)]
    lines = [" ".join(words[: 1 + i % 8]) for i in range(60)]
    split = encode_split(SymbolTokenizer(words), lines, lines, name="train")
    seen = []
    for rank in (0, 1):
        monkeypatch.setattr(data_module, "shard", lambda rank=rank: (rank, 2))
        loader = make_loader(split, 24, shuffle=True, seed=3, distributed=True)
        seen.append([b.ids.tolist() for b in loader])
        assert len(loader) == len(seen[-1])
        evaluation = [b.ids.tolist() for b in make_loader(split, 24, shuffle=False)]
        assert sorted(i for b in evaluation for i in b) == list(range(60))  # every rank sees all of it
    full = make_loader(split, 24, shuffle=True, seed=3).batch_sampler._make(__import__("random").Random(3))
    assert len(seen[0]) == len(seen[1]) == len(full) // 2  # equal counts, or DDP would hang
    ids0, ids1 = {i for b in seen[0] for i in b}, {i for b in seen[1] for i in b}
    assert not ids0 & ids1 and len(ids0) + len(ids1) > 40  # disjoint shares of one shuffled list


def test_lanes_follow_devices_and_refuse_impossible_gpu_requests(tmp_path):
    assert make_lanes(None, ["2", "5"]) == [Lane("2"), Lane("5")]
    assert all(lane.gpu is None for lane in make_lanes(3, None))  # no GPU on this machine
    env = worker_env([Lane("2"), Lane("5")], 4)
    assert env["CUDA_VISIBLE_DEVICES"] == "2,5"
    assert worker_env([Lane("0")], 3)["CUDA_VISIBLE_DEVICES"] == "0"  # `--devices 0,0,0`: 3 cells on GPU 0
    assert scheduler.shared([Lane("0"), Lane("0")]) and not scheduler.shared([Lane("0"), Lane("1")])
    grid = load_grid(write_grid(tmp_path, {**TINY, "cells": {"at": {"decoder": {"name": "at"},
                                                                        "train": {"devices": 3}}}}))
    cell = grid.cells[0]
    assert lanes_needed(cell, [Lane(None)] * 2) == 2  # CPU lanes: takes what there is
    with pytest.raises(ConfigError, match=r"cell at-s1: train.devices asks for 3 GPUs, but the grid runs on 2 \(0, 1\)"):
        lanes_needed(cell, [Lane("0"), Lane("1"), Lane("1")])
    a, b, c = Lane("0"), Lane("0"), Lane("1")
    assert scheduler.take([a, b, c], 2) == [a, c]  # a DDP cell gets two different GPUs
    assert scheduler.take([a, b], 2) is None and scheduler.take([a, b], 1) == [a]


@pytest.mark.slow
def test_parallel_grid_matches_a_sequential_run_and_orders_teachers(tmp_path, monkeypatch):
    data = {**TINY, "cells": {**TINY["cells"], "nat-kd": STUDENT}}
    grid = write_grid(tmp_path, data)
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(grid), "--results", "par", "--workers", "2"]) == 0
    assert main(["run", str(grid), "--results", "seq"]) == 0
    par, seq = (pd.read_csv(tmp_path / r / "tiny" / "results.csv") for r in ("par", "seq"))
    assert (par.status == "ok").all() and len(par) == 4
    cols = ["cell", "strategy", "bleu", "exact_match", "repetition_rate", "length_exact", "train_devices"]
    pd.testing.assert_frame_equal(par[cols], seq[cols])
    runs = tmp_path / "par" / "tiny" / "runs"
    teacher_done = (runs / "at-s1" / "metrics.json").stat().st_mtime
    for student in ("cmlm-kd-s1", "nat-kd-s1"):  # students started after their teacher finished
        assert (runs / student / "distill.json").stat().st_mtime >= teacher_done
        assert (runs / student / "worker.log").exists()
    env = json.loads((tmp_path / "par" / "tiny" / "environment.json").read_text())
    assert env["parallel_cells"] == 2 and env["lanes"] == "cpu, cpu" and "side by side" in env["timing"]
    for run in ("par", "seq"):  # cells trained at once, but speed was measured afterwards, all together
        timing = pd.read_csv(tmp_path / run / "tiny" / "timing.csv")
        control = timing.strategy.str.endswith(AA_SUFFIX)  # the A/A control: the baseline timed twice
        assert timing[control].cell.tolist() == ["at-s1"]
        assert sorted(zip(timing[~control].cell, timing[~control].strategy)) == sorted(zip(par.cell, par.strategy))


def test_workers_take_cells_seed_by_seed_each_seeds_teachers_first():
    """A seed's comparison completes (and can be timed) before the next seed's starts; within a seed
    the teachers come first and the rest keeps the grid file's order (a control declared last, last)."""
    from types import SimpleNamespace

    from atnat.experiments.running.scheduler import priority_order

    declared = [(name, seed, teacher) for seed in (1, 2) for name, teacher in
                (("kd", "at"), ("at", None), ("fr-at", None), ("control", None))]
    cells = [SimpleNamespace(name=f"{n}-s{seed}", seed=seed, teacher=f"{t}-s{seed}" if t else None)
             for n, seed, t in declared]
    grid = SimpleNamespace(cells=cells)
    assert [c.name for c in priority_order(grid, cells[::-1])] == [
        "at-s1", "kd-s1", "fr-at-s1", "control-s1", "at-s2", "kd-s2", "fr-at-s2", "control-s2"]
    # a run stopped with seed 2's student half-trained and resumed with seed 1's cells added (a wider --only):
    # the work in progress finishes first, then seed by seed as before
    resumed = priority_order(grid, cells[::-1], started=lambda c: c.name in ("control-s2", "kd-s2"))
    assert [c.name for c in resumed] == [
        "kd-s2", "control-s2", "at-s1", "kd-s1", "fr-at-s1", "control-s1", "at-s2", "fr-at-s2"]


@pytest.mark.slow
def test_failed_teacher_fails_its_students_without_running_them(tmp_path, monkeypatch):
    broken = {"decoder": {"name": "at"}, "train": {"max_len": 1}}  # drops every pair: fails at run time
    grid = write_grid(tmp_path, {**TINY, "cells": {"at": broken, "nat-kd": STUDENT}})
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(grid), "--results", "res", "--workers", "2"]) == 1  # after writing the table
    df = pd.read_csv(tmp_path / "res" / "tiny" / "results.csv").set_index("cell")
    assert df.loc["at-s1", "status"] == "failed" and "no usable sentence pairs" in df.loc["at-s1", "error"]
    assert df.loc["nat-kd-s1", "error"] == "teacher cell at-s1 failed"
    assert not (tmp_path / "res" / "tiny" / "runs" / "nat-kd-s1" / "worker.log").exists()


@pytest.mark.slow
def test_a_failed_teacher_fixed_is_retried_first_then_its_student_runs(tmp_path, monkeypatch):
    broken = {"decoder": {"name": "at"}, "train": {"max_len": 1}}
    grid = write_grid(tmp_path, {**TINY, "cells": {"at": broken, "nat-kd": STUDENT}})
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(grid), "--results", "res", "--workers", "2"]) == 1
    fixed = {"decoder": {"name": "at"}, "train": {"max_len": 256}}
    grid = write_grid(tmp_path, {**TINY, "cells": {"at": fixed, "nat-kd": STUDENT}})
    assert main(["run", str(grid), "--results", "res", "--workers", "2"]) == 0
    df = pd.read_csv(tmp_path / "res" / "tiny" / "results.csv")
    assert (df.status == "ok").all() and set(df.cell) == {"at-s1", "nat-kd-s1"}


def test_a_worker_that_dies_is_recorded_as_failed(tmp_path, monkeypatch):
    grid = load_grid(write_grid(tmp_path, {**TINY, "cells": {"at": TINY["cells"]["at"]}}), results_dir=tmp_path)
    monkeypatch.setattr(scheduler, "cell_command", lambda *a: [sys.executable, "-c", "raise SystemExit(3)"])
    failures, finished = {}, []
    run_parallel(grid.path, grid.cells, [Lane(None)], results_root=tmp_path, smoke=False,
                 status=lambda cell: None, mark_failed=lambda cell, msg: failures.update({cell.name: msg}),
                 on_finish=lambda cell, state, s: finished.append((cell.name, state)))
    assert finished == [("at-s1", "failed")]
    assert failures["at-s1"].startswith("worker exited with code 3; see ")


@pytest.mark.slow
def test_one_cell_trains_with_ddp_on_two_cpu_processes_even_with_parameters_left_unused(tmp_path):
    """One cell on two CPU processes (gloo): both ranks train, only rank 0 evaluates. The decoder is a NAT
    with loss.length_weight: 0, which leaves its length predictor out of the loss: DDP must not stop on
    parameters without a gradient (it raised "Expected to have finished reduction" on step 2). One DDP
    run checks both (each costs ~15 s of two processes' start-up)."""
    import yaml

    cfg = {**{k: v for k, v in TINY["base"].items()}, "name": "ddp-nat", "decoder": {"name": "nat"},
           "loss": {"length_weight": 0.0}, "eval": {"strategies": [{"name": "parallel", "length_beam": 2}],
                                                    "n_bootstrap": 10}}
    cfg["train"] = {**cfg["train"], "devices": 2, "accelerator": "cpu"}
    path = tmp_path / "ddp.yaml"
    path.write_text(yaml.safe_dump(cfg))
    # Each rank ends its process group after training: a gloo group left to the exit-time destructors
    # aborted a rank now and then ("terminate called without an active exception"), and Lightning then
    # killed the run (-9). Lightning starts rank 1 with this script too: both ranks report.
    script = tmp_path / "train_then_check.py"
    script.write_text("import sys, torch.distributed as dist\n"
                      "from atnat.experiments.cli.commands import main\n"
                      "code = main(sys.argv[1:])\n"
                      "print('process group still open:', dist.is_initialized(), flush=True)\n"
                      "sys.exit(code)\n")
    proc = run_cli(["train", str(path), "--output-dir", "run"], tmp_path, program=(str(script),))
    log = proc.communicate(timeout=240)[0].decode()
    assert proc.returncode == 0, log[-3000:]
    info = json.loads((tmp_path / "run" / "train.json").read_text())
    assert info["world_size"] == 2 and info["global_step"] == 8
    rows = json.loads((tmp_path / "run" / "metrics.json").read_text())["rows"]
    assert [r["train_devices"] for r in rows] == [2]
    headers = [line for line in log.splitlines() if re.match(r"\s*strategy\s+bleu\b", line)]
    assert len(headers) == 1, log[-3000:]  # only rank 0 evaluated and printed its table
    assert log.count("process group still open: False") == 2, log[-3000:]


@pytest.mark.parametrize("decoder, strategy", [
    ({"name": "at"}, "greedy"), ({"name": "nat", "glat": True}, "parallel"),
    ({"name": "cmlm"}, "mask-predict"), ({"name": "ctc", "glat": True}, "ctc")])
def test_bf16_mixed_training_runs_for_every_decoder_family(tmp_path, decoder, strategy):
    from atnat.experiments.config.run import run_config_from_dict
    from atnat.experiments.running.cell import run_cell

    raw = {**TINY["base"], "name": "bf16", "decoder": decoder, "loss": {"guided_attention_weight": 0.5},
           "eval": {"n_bootstrap": 10, "strategies": [strategy]}}
    raw["train"] = {**raw["train"], "precision": "bf16-mixed", "accelerator": "cpu"}
    result = run_cell(run_config_from_dict(raw, "test"), tmp_path / "run")
    info = json.loads((tmp_path / "run" / "train.json").read_text())
    assert info["precision"] == "bf16-mixed" and info["global_step"] == 8
    losses = pd.read_csv(tmp_path / "run" / "logs" / "metrics.csv")["val/loss"].dropna()
    assert len(losses) and losses.map(lambda v: v == v and abs(v) < 1e4).all()  # finite
    assert result.rows[0]["bleu"] == result.rows[0]["bleu"]  # evaluated (fp32 weights from the checkpoint)


def test_students_distilling_at_once_share_one_teacher_decode(tmp_path, monkeypatch):
    import threading
    import time
    import types

    from atnat.experiments.training import distill

    calls = []

    def slow_decode(module, tokenizer, sources, spec, **_):
        calls.append(1)
        time.sleep(0.3)  # a second student arriving now must wait for this one, not decode again
        return [s.upper() for s in sources]

    monkeypatch.setattr(distill, "distill_sources", slow_decode)
    module = types.SimpleNamespace(bleu_tokenize="none", decoder=types.SimpleNamespace(max_source_length=100))
    monkeypatch.setattr(distill, "load_module", lambda path, map_location: (module, types.SimpleNamespace(encode=str.split)))
    teacher = tmp_path / "teacher"
    (teacher / "checkpoints").mkdir(parents=True)
    (teacher / "checkpoints" / "best.ckpt").write_bytes(b"weights")
    out = []
    threads = [threading.Thread(target=lambda: out.append(distill.distilled_targets(
        teacher, ["a b", "c"], ["a b", "c"], {"name": "greedy"}))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and [lines for lines, _ in out] == [["A B", "C"]] * 2


def test_decoding_runs_on_the_gpu_when_the_run_may_use_one(monkeypatch):
    import torch

    from atnat.experiments.config.devices import inference_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert inference_device("auto") == "cuda" and inference_device("gpu") == "cuda"
    assert inference_device("cpu") == "cpu"  # a CPU run evaluates on the CPU even on a GPU box
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert inference_device("auto") == "cpu" and inference_device("gpu") == "cpu"


def test_a_wall_clock_budget_ends_training_and_the_run_still_evaluates(tmp_path):
    import time

    from atnat.experiments.config.run import run_config_from_dict
    from atnat.experiments.running.cell import run_cell

    raw = {**TINY["base"], "name": "budget", "decoder": {"name": "at"}}
    raw["train"] = {**raw["train"], "max_steps": 10**6, "val_every_steps": 50, "max_time_s": 2}
    started = time.time()
    result = run_cell(run_config_from_dict(raw, "test"), tmp_path / "run")
    info = json.loads((tmp_path / "run" / "train.json").read_text())
    assert 0 < info["global_step"] < 10**6 and time.time() - started < 60
    assert result.rows and result.rows[0]["train_steps"] > 0
    with pytest.raises(ConfigError, match=r"train: max_time_s must be a positive, finite number of seconds or null \(no limit\), got -1"):
        run_config_from_dict({**raw, "train": {**raw["train"], "max_time_s": -1}}, "test")


def test_cell_command_names_the_grid_and_the_valid_cells(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path)
    assert main(["cell", str(grid), "nope-s1", "--results", "res"]) == 2
    err = capsys.readouterr().err
    assert f"{grid}: no cell named 'nope-s1' (cells: at-s1, cmlm-kd-s1)" in err
    assert main(["run", str(grid), "--workers", "0"]) == 2
    assert "--workers 0: expected a positive number of worker processes" in capsys.readouterr().err


def test_cells_starting_together_train_one_sentencepiece_model(tmp_path, monkeypatch):
    import threading

    from atnat.experiments.data.tokenize import SentencePieceTokenizer

    trained = []
    real = SentencePieceTokenizer._train_to

    def counting(path, lines, vocab_size, model_type):
        trained.append(path)
        real(path, lines, vocab_size, model_type)

    monkeypatch.setattr(SentencePieceTokenizer, "_train_to", staticmethod(counting))
    texts = [f"the cat number {i} sat on mat {i % 7}" for i in range(300)]
    out = []
    threads = [threading.Thread(target=lambda: out.append(SentencePieceTokenizer.train(
        texts, vocab_size=60, cache_dir=tmp_path))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(trained) == 1 and len({tok.proto for tok in out}) == 1 and len(out) == 3


def test_a_resumed_run_finishes_its_half_trained_cells_before_it_starts_new_ones(tmp_path, monkeypatch):
    """The deep grid resumed with a wider --only (en->fr's seed 1 added while seed 3's students were
    half-trained): the workers take the cells with training saved in a checkpoint first, whatever their seed."""
    from atnat.experiments.running import scheduler as runner

    class Taken(Exception):
        pass

    order = []

    def spy(path, todo, *args, **kwargs):  # the order the workers would take the cells in; nothing trains
        order.append([c.name for c in todo])
        raise Taken

    monkeypatch.setattr(runner, "run_parallel", spy)
    monkeypatch.chdir(tmp_path)
    grid = write_grid(tmp_path, {**TINY, "cells": {"at": TINY["cells"]["at"]}, "seeds": [1, 2]})
    with pytest.raises(Taken):
        main(["run", str(grid), "--results", "res", "--workers", "2"])
    assert order == [["at-s1", "at-s2"]]  # seed by seed
    saved = tmp_path / "res" / "tiny" / "runs" / "at-s2" / "checkpoints"
    (saved / "averaged.ckpt").parent.mkdir(parents=True)
    (saved / "averaged.ckpt").write_bytes(b"")  # a mean of weights, never resumed from: not saved training
    with pytest.raises(Taken):
        main(["run", str(grid), "--results", "res", "--workers", "2"])
    assert order[-1] == ["at-s1", "at-s2"]
    (saved / "step=4.ckpt").write_bytes(b"")
    with pytest.raises(Taken):
        main(["run", str(grid), "--results", "res", "--workers", "2"])
    assert order[-1] == ["at-s2", "at-s1"]  # the half-trained seed 2 before seed 1


def test_a_stopped_grid_lets_its_workers_save_their_step_and_kills_those_that_do_not_end(tmp_path, monkeypatch):
    """Ctrl-C on `atnat run`: every worker gets SIGTERM (a training worker ends its step and saves it,
    tests/test_resume.py) and is waited for; one that has not ended after STOP_WAIT_S is killed."""
    import signal
    import subprocess
    import time

    from atnat.experiments.running.launchers.local import Running, stop_workers

    saver = ("import signal, sys, time\n"
             "def term(*a):\n    time.sleep(0.5); open(sys.argv[1], 'w').write('saved'); sys.exit(0)\n"
             "signal.signal(signal.SIGTERM, term)\nprint('ready', flush=True)\ntime.sleep(60)\n")
    stubborn = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(60)\n"
    jobs = []
    for code, args in ((saver, [str(tmp_path / "saved")]), (stubborn, [])):
        proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"  # its handler is installed
        jobs.append(Running(None, proc, [], open(tmp_path / f"log{len(jobs)}", "w"), time.time()))
    monkeypatch.setattr(scheduler, "STOP_WAIT_S", 3)
    began = time.time()
    stop_workers(jobs)
    assert (tmp_path / "saved").read_text() == "saved" and jobs[0].proc.returncode == 0
    assert jobs[1].proc.returncode == -signal.SIGKILL and 3 <= time.time() - began < 8


def test_a_worker_killed_after_an_earlier_failure_is_recorded_with_its_own_end(tmp_path, monkeypatch):
    """The cell failed once (its record says why); its retry is killed with SIGKILL and records nothing: the
    earlier failure must not stand for this one."""
    import signal
    import sys
    import types

    import atnat.experiments.running.launchers.local as local
    from atnat.experiments.reporting.records import cell_status, write_record

    run = tmp_path / "runs" / "at-s1"
    run.mkdir(parents=True)
    write_record(run, "failed", [], "out of memory (the earlier attempt)")
    old = time.time() - 60
    os.utime(run / "metrics.json", (old, old))
    cell = types.SimpleNamespace(name="at-s1", teacher=None,
                                 config=types.SimpleNamespace(output_dir=str(run), train=types.SimpleNamespace(devices=1)))
    monkeypatch.setattr(local, "cell_command", lambda *a: [sys.executable, "-c",
                                                          f"import os; os.kill(os.getpid(), {int(signal.SIGKILL)})"])
    marked = []
    local.run_parallel(Path("g.yaml"), [cell], [local.Lane(None)], results_root=tmp_path, smoke=False,
                       status=lambda c: cell_status(Path(c.config.output_dir)), mark_failed=lambda c, m: marked.append(m))
    assert marked == [f"worker exited with code -{int(signal.SIGKILL)}; see {run / 'worker.log'}"]


def test_a_cell_another_process_trains_is_not_failed_nor_are_its_students(tmp_path):
    """A worker that found its cell held by another live process exited 2, read as a failure: its students were
    recorded "teacher cell failed" while the other process went on to finish the teacher."""
    grid = load_grid(write_grid(tmp_path, {**TINY, "cells": {"at": TINY["cells"]["at"], "nat-kd": STUDENT}}),
                     results_dir=tmp_path)
    script = "raise SystemExit(75)"  # the code of a worker whose cell another process holds
    failures, finished = {}, []
    original = scheduler.cell_command
    try:
        scheduler.cell_command = lambda *a: [sys.executable, "-c", script]
        run_parallel(grid.path, grid.cells, [Lane(None)], results_root=tmp_path, smoke=False,
                     status=lambda cell: None, mark_failed=lambda cell, msg: failures.update({cell.name: msg}),
                     on_finish=lambda cell, state, s: finished.append((cell.name, state)))
    finally:
        scheduler.cell_command = original
    assert failures == {}
    assert finished == [("at-s1", "trained by another process"),
                        ("nat-kd-s1", "skipped (its teacher at-s1 is trained by another process)")]


def test_a_worker_whose_cell_is_held_exits_with_its_own_code(tmp_path, monkeypatch, capsys):
    from atnat.experiments.locks import cell_lock, held
    from atnat.experiments.running.launchers.local import ELSEWHERE

    grid = write_grid(tmp_path)
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "res" / "tiny" / "runs" / "at-s1"
    run_dir.mkdir(parents=True)
    with held(cell_lock(run_dir), "cell at-s1"):
        assert main(["cell", str(grid), "at-s1", "--results", "res"]) == ELSEWHERE
    assert "cell at-s1 not run here" in capsys.readouterr().err and not (run_dir / "metrics.json").exists()
