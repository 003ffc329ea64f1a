"""One runner per results folder and one process per cell (locks that die with their process),
workers that die with their `atnat run`, and exit codes that say when a cell failed."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from atnat.experiments.cli.commands import main
from tests.test_grid import TINY, run_cli, write_grid

LONG = {**TINY, "cells": {"at": {"decoder": {"name": "at"},  # trains until stopped (60 s at most)
                                 "train": {"max_steps": 10**6, "val_every_steps": 50, "max_time_s": 60}}}}
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")  # a zombie has exited


def children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            pass
    return out


def wait_until(condition, timeout: float) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


@linux_only
@pytest.mark.slow
def test_a_second_runner_and_a_hand_run_cell_are_refused_and_a_killed_grid_leaves_no_worker(
        tmp_path, monkeypatch, capsys):
    grid = write_grid(tmp_path, LONG)
    monkeypatch.chdir(tmp_path)
    runner = run_cli(["run", str(grid), "--results", "res", "--workers", "2"], tmp_path)
    run_dir = tmp_path / "res" / "tiny" / "runs" / "at-s1"
    workers: list[int] = []
    try:
        assert wait_until(lambda: (run_dir / "cell.lock.json").exists() or runner.poll() is not None, 120)
        workers = children(runner.pid)
        assert main(["run", str(grid), "--results", "res"]) == 2  # refused at once, nothing trained
        err = capsys.readouterr().err
        assert f"results folder res/tiny is in use by pid {runner.pid} on {socket.gethostname()} since " in err
        assert "cli/__main__.py run " in err and "lock file res/tiny/runner.lock" in err
        worker = json.loads((run_dir / "cell.lock.json").read_text())["pid"]
        assert worker in workers
        assert main(["cell", str(grid), "at-s1", "--results", "res"]) == 2  # the same cell by hand
        assert f"cell at-s1 is in use by pid {worker} " in capsys.readouterr().err
        runner.kill()  # kill -9: no chance to stop its workers itself
        runner.wait()
        assert wait_until(lambda: not any(alive(p) for p in workers), 30), "a worker outlived its runner"
    finally:
        runner.kill()
        for pid in workers:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    from atnat.experiments.locks import is_held

    # the dead processes' locks block nobody (the holder files they left are overwritten)
    assert not is_held(tmp_path / "res" / "tiny" / "runner.lock") and not is_held(run_dir / "cell.lock")
    assert not (run_dir / "metrics.json").exists()  # the killed cell is not marked failed: it resumes


def hold_in_subprocess(lock: Path) -> subprocess.Popen:
    code = ("import sys, time; from pathlib import Path; from atnat.experiments.locks import held\n"
            f"with held(Path({str(lock)!r}), 'the thing'):\n    print('held', flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"held\n"
    return proc


def test_a_lock_names_its_holder_and_dies_with_it(tmp_path):
    from atnat.experiments.locks import LockHeld, held, is_held

    lock = tmp_path / "runner.lock"
    proc = hold_in_subprocess(lock)
    try:
        with pytest.raises(LockHeld, match=rf"the thing is in use by pid {proc.pid} on {socket.gethostname()} "
                                           rf"since .* \(-c\); wait for it to end or stop it"):
            with held(lock, "the thing"):
                pass
        assert is_held(lock)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert json.loads((tmp_path / "runner.lock.json").read_text())["pid"] == proc.pid  # left behind by kill -9
    with held(lock, "the thing"):  # a dead holder's lock does not block
        assert json.loads((tmp_path / "runner.lock.json").read_text())["pid"] == os.getpid()
    assert not (tmp_path / "runner.lock.json").exists() and not is_held(lock)


def test_a_removable_lock_is_exclusive_leaves_no_file_and_takes_the_file_that_replaced_a_removed_one(
        tmp_path, monkeypatch):
    """A lock in a user's folder (beside an export) goes with its release. A process that opened the file
    just before its holder removed it, and locks it just after, holds a lock nobody else sees: it must take
    the file now at the path instead."""
    import fcntl

    from atnat.experiments import locks

    lock = tmp_path / ".model.export.lock"
    proc = hold_in_subprocess(lock)
    try:
        with pytest.raises(locks.LockHeld, match="in use by pid"):
            with locks.held(lock, "export target model", remove=True):
                pass
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with locks.held(lock, "export target model", remove=True):  # a killed holder's file is taken, then removed
        assert lock.exists()
    assert list(tmp_path.iterdir()) == []
    real = fcntl.flock
    raced = []

    def flock_after_the_holder_left(fd, op):  # the holder removes the file between our open and our lock
        if not raced:
            raced.append(fd)
            lock.unlink()
            lock.write_text("")  # the next export's file
            taker = os.open(lock, os.O_RDWR)
            real(taker, fcntl.LOCK_EX)  # ... which holds it now
            raced.append(taker)
        return real(fd, op)

    monkeypatch.setattr(locks.fcntl, "flock", flock_after_the_holder_left)
    with pytest.raises(locks.LockHeld):  # the old file's lock is no lock: the new file's holder wins
        with locks.held(lock, "export target model", remove=True):
            pass
    os.close(raced[1])
    monkeypatch.undo()
    with locks.held(lock, "export target model", remove=True):
        pass
    assert list(tmp_path.iterdir()) == []


@linux_only
@pytest.mark.parametrize("prctl", [True, False])
@pytest.mark.slow
def test_a_worker_ends_when_its_parent_is_killed(tmp_path, prctl):
    """With prctl(PR_SET_PDEATHSIG) and, without it (not Linux), by watching the parent pid."""
    worker = ("import sys, time\n"
              "from atnat.experiments.running.launchers.local import die_with_parent\n"
              + ("" if prctl else "sys.platform = 'darwin'  # no prctl: the fallback alone\n")
              + "die_with_parent(); print('ready', flush=True); time.sleep(600)")
    from atnat.experiments.running.launchers.local import PARENT_ENV

    parent = ("import os, subprocess, sys, time\n"  # a stand-in for `atnat run`: starts the worker, waits
              f"child = subprocess.Popen([sys.executable, '-c', {worker!r}], env=dict(os.environ, {PARENT_ENV}=str(os.getpid())))\n"
              "print(child.pid, flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE)
    child = int(proc.stdout.readline())
    try:
        assert proc.stdout.readline() == b"ready\n"  # the worker has called die_with_parent
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert wait_until(lambda: not alive(child), 15), "the worker outlived its parent"
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)


@linux_only
def test_a_worker_leaves_ctrl_c_to_its_runner_and_a_lone_cell_does_not():
    """Ctrl-C reaches every process of the terminal's group: a runner's worker ignores it (the runner sends it
    SIGTERM, on which it saves its step), while `atnat cell` run by hand stops on it as before."""
    from atnat.experiments.running.launchers.local import PARENT_ENV

    code = ("import signal, time\n"  # Ctrl-C's default, as in a terminal (a background job inherits it ignored)
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "from atnat.experiments.running.launchers.local import die_with_parent\n"
            "die_with_parent(); print('ready', flush=True); time.sleep(600)")
    procs = {worker: subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                      env=dict(os.environ, **({PARENT_ENV: str(os.getpid())} if worker else {})))
             for worker in (True, False)}  # started together: each spends seconds importing
    try:
        for proc in procs.values():
            assert proc.stdout.readline() == b"ready\n"
            proc.send_signal(signal.SIGINT)
        assert wait_until(lambda: procs[False].poll() is not None, 15), "a lone cell must stop on Ctrl-C"  # (a loaded machine)
        assert procs[True].poll() is None, "a worker must outlive Ctrl-C"
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


def test_failed_cells_exit_1_after_the_table_and_report_are_written(tmp_path, monkeypatch, capsys):
    broken = {"decoder": {"name": "at"}, "train": {"max_len": 1}}  # drops every pair: fails at run time
    grid = write_grid(tmp_path, {**TINY, "cells": {"at": broken, "nat": {"decoder": {"name": "nat"},
                                                                          "train": {"max_len": 1},
                                                                          "eval": {"strategies": ["parallel"]}}}})
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(grid), "--results", "res"]) == 1
    err = capsys.readouterr().err
    assert "failed: 2 of 2 cells: at-s1, nat-s1" in err
    assert "cell at-s1 failed: split 'train' has no usable sentence pairs" in err  # the reason, not only error.log
    out = tmp_path / "res" / "tiny"
    assert (pd.read_csv(out / "results.csv").status == "failed").all() and (out / "report.md").exists()
    assert main(["cell", str(grid), "at-s1", "--results", "res"]) == 1
    assert "cell at-s1 failed: split 'train' has no usable sentence pairs" in capsys.readouterr().err


@pytest.mark.slow
def test_a_failed_cell_in_a_worker_says_why_on_the_terminal(tmp_path, monkeypatch, capsys):
    """Trials: with --workers 2 a failing cell showed only "failed (11 s)"; its reason was in error.log alone."""
    broken = {"decoder": {"name": "at"}, "train": {"max_len": 1}}  # drops every pair: fails at run time
    grid = write_grid(tmp_path, {**TINY, "cells": {"at": broken}})
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(grid), "--results", "res", "--workers", "2"]) == 1
    out = capsys.readouterr().out
    assert "at-s1: failed" in out and "split 'train' has no usable sentence pairs" in out
