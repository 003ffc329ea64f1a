"""results/multi30k-families/run_seeds.sh, the families grid's chain, with a stand-in `atnat`: a seed runs, is
collected, and is marked done; a restart passes over done seeds; a collect that fails stops the chain."""
import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "results" / "multi30k-families" / "run_seeds.sh"
STAND_IN = """#!/usr/bin/env bash
echo "$1 $*" >> "$CALLS"
[ "$1" = collect ] && [ -n "${FAIL_COLLECT:-}" ] && exit 1
exit 0
"""


def chain(tmp_path, **env) -> tuple[int, list[str]]:
    worktree = tmp_path / "wt"
    (worktree / ".venv" / "bin").mkdir(parents=True, exist_ok=True)
    atnat = worktree / ".venv" / "bin" / "atnat"
    atnat.write_text(STAND_IN)
    atnat.chmod(0o755)
    calls = tmp_path / "calls.log"
    calls.write_text("")
    done = subprocess.run(["bash", str(SCRIPT), str(worktree), str(tmp_path / "res"), str(tmp_path / "kept")],
                          env={**os.environ, "CALLS": str(calls), "SEEDS": "1 2", **env}, capture_output=True, text=True,
                          timeout=60)
    return done.returncode, [line.split()[0] + " " + next((a for a in line.split() if a.startswith("*-s")), "")
                             for line in calls.read_text().splitlines()]


def test_each_seed_runs_is_collected_and_a_restart_passes_over_done_seeds(tmp_path):
    rc, calls = chain(tmp_path)
    assert rc == 0 and calls == ["run *-s1", "collect ", "run *-s2", "collect "]
    assert (tmp_path / "res" / "seed-1.done").is_file() and (tmp_path / "res" / "seed-2.done").is_file()
    rc, calls = chain(tmp_path)
    assert rc == 0 and calls == []  # a finished seed's run would time the next seed's finished cells apart
    assert "seed 1: done before" in (tmp_path / "res" / "chain.log").read_text()


def test_a_collect_that_fails_stops_the_chain_before_the_next_seed(tmp_path):
    rc, calls = chain(tmp_path, FAIL_COLLECT="1")
    assert rc == 1 and calls == ["run *-s1", "collect "] and not (tmp_path / "res" / "seed-1.done").exists()
