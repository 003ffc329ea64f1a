"""train.json's `throughput`: the tokens a run trained on and the time its training loop took without
its validations (experiments/training/throughput.py)."""
import json

import pytest

from atnat.experiments.config.run import run_config_from_dict
from atnat.experiments.training import throughput
from atnat.experiments.training.train import train
from atnat.models.seq2seq import Seq2SeqModule
from tests.test_grid import TINY


def test_a_run_records_the_tokens_it_trained_on_and_its_loop_time_without_validation(tmp_path, monkeypatch):
    seen = []  # (source, target) tokens of each training batch, read where the model trains on it
    step = Seq2SeqModule.training_step

    def spy(self, batch, batch_idx):
        seen.append((int(batch.src_lengths.sum()), int(batch.tgt_lengths.sum())))
        return step(self, batch, batch_idx)

    monkeypatch.setattr(Seq2SeqModule, "training_step", spy)
    monkeypatch.setattr(throughput, "WARM_STEPS", 3)
    compiles = iter([5, 7, 10])  # torch.compile's graphs so far: at the start, after the warm steps, at the end
    monkeypatch.setattr(throughput, "graphs_compiled", lambda: next(compiles))
    raw = {**TINY["base"], "name": "speed", "decoder": {"name": "at"}}
    raw["train"] = {**raw["train"], "max_steps": 12, "val_every_steps": 4}
    train(run_config_from_dict(raw, "test"), tmp_path / "run")
    record = json.loads((tmp_path / "run" / "train.json").read_text())["throughput"]
    assert len(seen) == 12 and record["steps"] == 12
    assert record["source_tokens"] == sum(s for s, _ in seen) and record["target_tokens"] == sum(t for _, t in seen)
    assert record["validation_s"] > 0 and record["loop_s"] > 0  # three validations, at steps 4, 8 and 12
    assert abs(record["target_tokens_per_s"] * record["loop_s"] / record["target_tokens"] - 1) < 0.01  # loop_s rounded
    steady = record["steady"]
    assert steady["after_steps"] == 3 and steady["steps"] == 9
    assert steady["target_tokens"] == sum(t for _, t in seen[3:])
    assert 0 < steady["loop_s"] <= record["loop_s"]
    assert record["graphs_compiled"] == 5 and steady["graphs_compiled"] == 3  # compiling after the warm steps shows


def test_validation_time_is_left_out_of_the_loop(tmp_path, monkeypatch):
    """A validation made slow on purpose lengthens validation_s, not loop_s."""
    import time

    validate = Seq2SeqModule.validation_step

    def slow(self, batch, batch_idx):
        time.sleep(0.5)
        return validate(self, batch, batch_idx)

    monkeypatch.setattr(Seq2SeqModule, "validation_step", slow)
    monkeypatch.setattr(throughput, "WARM_STEPS", 3)
    raw = {**TINY["base"], "name": "slow", "decoder": {"name": "at"}}
    raw["train"] = {**raw["train"], "max_steps": 12, "val_every_steps": 2}  # validations at 2 (in the first 3 steps), ..., 12
    train(run_config_from_dict(raw, "test"), tmp_path / "run")
    record = json.loads((tmp_path / "run" / "train.json").read_text())["throughput"]
    assert record["validation_s"] >= 3.0  # six validations of at least one batch each
    assert record["loop_s"] < 1.0 < record["validation_s"]
    # the steady part takes off the five validations after step 3, not the one before: 9 tiny steps, not 9 steps
    # plus 2.5 s of validation (none taken off), nor minus 0.5 s (all taken off)
    assert 0 < record["steady"]["loop_s"] < 1.0


def test_a_short_run_has_no_steady_part(tmp_path):
    raw = {**TINY["base"], "name": "short", "decoder": {"name": "at"}}
    raw["train"] = {**raw["train"], "max_steps": 4, "val_every_steps": 2}
    train(run_config_from_dict(raw, "test"), tmp_path / "run")
    record = json.loads((tmp_path / "run" / "train.json").read_text())["throughput"]
    assert record["steps"] == 4 and "steady" not in record  # none after the first 10


def test_a_resume_that_finds_training_finished_keeps_the_runs_measured_speed(tmp_path, monkeypatch):
    """A run trained again once finished (its averaging changed, say) trains no step in its next attempt: its
    train.json keeps the speed the attempt that trained measured, and names that attempt."""
    monkeypatch.setattr(throughput, "WARM_STEPS", 3)
    raw = {**TINY["base"], "name": "again", "decoder": {"name": "at"}}
    raw["train"] = {**raw["train"], "max_steps": 8, "val_every_steps": 4}
    cfg = run_config_from_dict(raw, "test")
    train(cfg, tmp_path / "run")
    first = json.loads((tmp_path / "run" / "train.json").read_text())["throughput"]
    assert first["attempt"] == 1 and first["step"] == "eager" and first["steady"]["steps"] == 5
    train(cfg, tmp_path / "run")  # resumes from last.ckpt at max_steps: Lightning skips its training loop
    info = json.loads((tmp_path / "run" / "train.json").read_text())
    assert len(info["attempts"]) == 2 and info["throughput"] == first


def test_an_attempt_without_a_steady_state_keeps_the_last_one_of_its_own_step_form():
    ours = {"steps": 0, "target_tokens": 0}
    earlier = {"throughput": {"steps": 40, "step": "eager", "steady": {"target_tokens_per_s": 9.0}, "attempt": 1}}
    assert throughput.run_record(None, earlier, attempt=2, form="eager") == earlier["throughput"]
    assert throughput.run_record(ours, earlier, attempt=2, form="compiled") == {**ours, "attempt": 2, "step": "compiled"}
    assert throughput.run_record(None, {"throughput": "fast"}, attempt=2, form="eager") is None  # read back: untrusted
    assert throughput.run_record(None, None, attempt=1, form="eager") is None
    steady = {**ours, "steady": {"target_tokens_per_s": 3.0}}
    assert throughput.run_record(steady, earlier, attempt=3, form="eager")["steady"] == steady["steady"]


def tiny_cpu_grid(tmp_path):
    import yaml

    grid = tmp_path / "tiny.yaml"
    grid.write_text(yaml.safe_dump({**TINY, "base": {**TINY["base"], "train": {**TINY["base"]["train"], "accelerator": "cpu"}}}))
    return grid


def script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "results" / "bench" / "real_run_forms.py"
    spec = importlib.util.spec_from_file_location("real_run_forms", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_real_run_script_trains_the_cell_as_the_grid_gives_it_but_for_its_steps_and_form(tmp_path):
    grid = tiny_cpu_grid(tmp_path)
    raw = script().cell_config(str(grid), "at-s1", 14, "fused")
    assert raw["decoder"] == {"name": "at"} and raw["model"] == TINY["base"]["model"]
    assert raw["train"]["max_steps"] == raw["train"]["val_every_steps"] == 14 and raw["train"]["step"] == "fused"
    assert raw["train"]["max_time_s"] is None and raw["train"]["max_tokens"] == TINY["base"]["train"]["max_tokens"]
    assert raw["train"]["devices"] == 1  # the bare step is one device's; a multi-device cell's tokens are summed
    with pytest.raises(SystemExit, match="no cell 'nat-s1'; cells: at-s1, cmlm-kd-s1"):
        script().cell_config(str(grid), "nat-s1", 14, "eager")
    with pytest.raises(SystemExit, match="cmlm-kd-s1 learns from a teacher"):
        script().cell_config(str(grid), "cmlm-kd-s1", 14, "eager")
    with pytest.raises(SystemExit, match="STEPS: more than 10 .*got 10"):
        script().main(str(tmp_path / "x.csv"), str(grid), "at-s1", "10")
    assert [script().bench_precision(p) for p in ("bf16-mixed", "32-true", "16-mixed")] == ["bf16", "fp32", None]


@pytest.mark.slow
def test_the_real_run_script_times_a_grid_cell_in_each_form_beside_the_bare_step(tmp_path):
    """results/bench/real_run_forms.py as a user runs it: each form's run trains the cell, nothing is evaluated,
    and each row holds the run's tokens per second beside the bare step's."""
    import subprocess
    import sys
    from pathlib import Path

    import pandas as pd

    root = Path(__file__).resolve().parents[1]
    grid = tiny_cpu_grid(tmp_path)
    out = tmp_path / "forms.csv"
    done = subprocess.run([sys.executable, str(root / "results" / "bench" / "real_run_forms.py"), str(out), str(grid),
                           "at-s1", "14", "eager,fused", "tiny"], cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    table = pd.read_csv(out)
    assert list(table["form"]) == ["eager", "fused"] and (table["steps"] == 14).all()
    assert (table["steady_after_steps"] == 10).all() and (table["target_tokens"] > 0).all()
    assert (table["bare_target_tokens_per_s"] > 0).all()
    assert (abs(table["share_of_bare"] - table["steady_target_tokens_per_s"] / table["bare_target_tokens_per_s"])
            < 1e-9).all()
    assert (table["threads"] == 1).all() and (table["steady_target_tokens_per_step"] > 0).all()


def test_a_grids_results_and_report_carry_each_cells_training_speed(tmp_path, monkeypatch):
    import pandas as pd

    from atnat.experiments.cli.commands import main
    from atnat.experiments.reporting.records import training_throughput
    from tests.test_grid import write_grid

    monkeypatch.chdir(tmp_path)
    base = {**TINY["base"], "train": {**TINY["base"]["train"], "max_steps": 12, "val_every_steps": 12}}
    grid = write_grid(tmp_path, {**TINY, "base": base, "cells": {"at": TINY["cells"]["at"]}})
    assert main(["run", str(grid), "--results", "res"]) == 0
    out = tmp_path / "res" / "tiny"
    steady = json.loads((out / "runs" / "at-s1" / "train.json").read_text())["throughput"]["steady"]
    table = pd.read_csv(out / "results.csv")
    assert (table["train_tokens_per_s"] == steady["target_tokens_per_s"]).all() and steady["target_tokens_per_s"] > 0
    assert f"The training loops ran at {steady['target_tokens_per_s']:,.0f} target tokens a second (1 cell;" in \
        (out / "report.md").read_text()
    # read back as untrusted: anything but a positive number is no speed
    for record in ({}, {"throughput": None}, {"throughput": {"steps": 4}}, {"throughput": {"steady": {"target_tokens_per_s": "9"}}},
                   {"throughput": {"steady": {"target_tokens_per_s": True}}}, {"throughput": {"steady": {"target_tokens_per_s": -1}}},
                   {"throughput": {"steady": {"target_tokens_per_s": float("inf")}}},
                   {"throughput": {"steady": {"target_tokens_per_s": 10 ** 400}}}):
        assert pd.isna(training_throughput(record)), record
    assert training_throughput({"throughput": {"steady": {"target_tokens_per_s": 512.5}}}) == 512.5


def test_under_ddp_the_record_sums_every_ranks_tokens():
    """Each rank trains on its own share of the batches (and only rank 0 writes train.json): the tokens are
    summed over the ranks when training ends, before and after the first steps alike."""
    import types

    import torch

    from atnat.models.batch import Batch

    reduced = []

    def reduce(tensor, reduce_op):
        reduced.append(reduce_op)
        return tensor * 2  # two ranks with equal shares

    trainer = types.SimpleNamespace(strategy=types.SimpleNamespace(reduce=reduce), world_size=2)
    module = types.SimpleNamespace(device=torch.device("cpu"))
    one = Batch(torch.ones(2, 3, dtype=torch.long), torch.ones(2, 4, dtype=torch.long), torch.tensor([3, 2]),
                torch.tensor([4, 1]), torch.arange(2))
    counter = throughput.Throughput()
    counter.on_train_start(trainer, module)
    for step in range(throughput.WARM_STEPS + 2):
        counter.on_train_batch_end(trainer, module, None, one, step)
    counter.on_train_end(trainer, module)
    record = counter.record()
    assert reduced == ["sum", "sum"] and record["world_size"] == 2
    assert record["target_tokens"] == 2 * 5 * (throughput.WARM_STEPS + 2) and record["source_tokens"] == 2 * 5 * (throughput.WARM_STEPS + 2)
    assert record["steady"]["target_tokens"] == 2 * 5 * 2


def test_the_real_run_script_keeps_each_forms_row_when_a_later_form_fails(tmp_path, monkeypatch):
    """The CSV was written after the last form only: a time limit hit while `compiled` compiled lost eager's row."""
    import subprocess
    from pathlib import Path

    import pandas as pd

    module = script()
    grid = tiny_cpu_grid(tmp_path)

    def run(argv, limit=None):
        if "--train-only" in argv:
            if argv[-2].endswith("compiled.yaml"):
                raise subprocess.CalledProcessError(124, argv)
            steady = {"after_steps": 10, "steps": 4, "target_tokens": 400, "s_per_step": 0.1, "target_tokens_per_s": 1000.0}
            Path(argv[-1]).mkdir(parents=True)
            Path(argv[-1], "train.json").write_text(json.dumps({
                "accelerator": "CPUAccelerator", "precision": "32-true", "throughput": {
                    "steps": 14, "world_size": 1, "target_tokens_per_s": 900.0, "loop_s": 1.0, "validation_s": 0.1,
                    "target_tokens": 900, "steady": steady}}))
        else:  # the bare step's bench
            pd.DataFrame({"tokens_per_s": [2000.0]}).to_csv(argv[argv.index("--out") + 1], index=False)

    monkeypatch.setattr(module, "run_limited", run)
    out = tmp_path / "forms.csv"
    with pytest.raises(subprocess.CalledProcessError):
        module.main(str(out), str(grid), "at-s1", "14", "eager,compiled", "tiny")
    table = pd.read_csv(out)
    assert list(table["form"]) == ["eager"] and table["share_of_bare"].iloc[0] == 0.5


def test_the_real_run_script_stops_a_form_at_its_own_time_limit_and_goes_on(tmp_path):
    """On a borrowed GPU the script ran under one `timeout` for all its forms: a slow first form took the
    time of the next, and the SIGTERM let its run save a checkpoint past the cap. Each form's run (and its
    bare step) now has its own limit: a form stopped there is a row that says so, the next form still runs,
    and the script fails (exit 1) after writing the table."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    import pandas as pd

    root = Path(__file__).resolve().parents[1]
    grid = tiny_cpu_grid(tmp_path)
    out = tmp_path / "forms.csv"
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(root / "results" / "bench" / "real_run_forms.py"), str(out), str(grid),
                           "at-s1", "14", "eager,fused", "none", "0.5"], cwd=root, capture_output=True, text=True)
    assert done.returncode == 1 and "eager: stopped at its limit of 0.5 s" in done.stdout + done.stderr
    assert time.monotonic() - started < 30  # two forms cut at half a second each, not trained to the end
    table = pd.read_csv(out)
    assert list(table["form"]) == ["eager", "fused"] and list(table["status"]) == ["stopped at its limit of 0.5 s"] * 2
    with pytest.raises(SystemExit, match="LIMIT_S: a positive number of seconds, got 'soon'"):
        script().main(str(tmp_path / "x.csv"), str(grid), "at-s1", "14", "eager", "none", "soon")


def test_the_real_run_script_stopped_by_a_signal_stops_the_run_it_started(tmp_path):
    """A review's finding: each form's run is a session of its own (so that its process group can be killed at the
    form's limit); a `timeout` stopping the script left that run training on, past every cap."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    grid = tiny_cpu_grid(tmp_path)
    script = subprocess.Popen([sys.executable, str(root / "results" / "bench" / "real_run_forms.py"), str(tmp_path / "f.csv"),
                               str(grid), "at-s1", "5000", "eager", "none"], cwd=root)

    def child() -> int | None:  # the form's run: a child of the script, in a session of its own
        listed = subprocess.run(["ps", "-ww", "-eo", "pid=,ppid=,args="], capture_output=True, text=True).stdout.splitlines()
        return next((int(line.split()[0]) for line in listed if int(line.split()[1]) == script.pid
                     and "--train-only" in line), None)

    deadline = time.monotonic() + 60
    while child() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    run = child()
    assert run is not None
    script.send_signal(signal.SIGTERM)
    assert script.wait(timeout=30) != 0
    for _ in range(50):
        try:
            os.kill(run, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(run, signal.SIGKILL)
        raise AssertionError("the form's run outlived the script")
