"""results/multi30k-families/run_seeds.sh, the families grid's chain, with a stand-in `atnat`: a seed runs, is
collected, and is marked done; a restart passes over done seeds; a collect that fails stops the chain; with RETIME=
the cells train one by one, teachers first, and the seed is timed once, by the retiming."""
import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "results" / "multi30k-families" / "run_seeds.sh"
STAND_IN = """#!/usr/bin/env bash
echo "$1 $*" >> "$CALLS"
[ "$1" = collect ] && [ -n "${FAIL_COLLECT:-}" ] && exit 1
if [ "$1" = cell ]; then
  cell=${@: -1}
  [ "$cell" = "${FAIL_CELL:-}" ] && exit 1
  mkdir -p "$RES/multi30k-families/runs/$cell"
fi
exit 0
"""


def stand_in(checkout: Path) -> None:
    (checkout / ".venv" / "bin").mkdir(parents=True, exist_ok=True)
    atnat = checkout / ".venv" / "bin" / "atnat"
    atnat.write_text(STAND_IN)
    atnat.chmod(0o755)


def chain(tmp_path, **env) -> tuple[int, list[str]]:
    worktree = tmp_path / "wt"
    stand_in(worktree)
    calls = tmp_path / "calls.log"
    calls.write_text("")
    done = subprocess.run(["bash", str(SCRIPT), str(worktree), str(tmp_path / "res"), str(tmp_path / "kept")],
                          env={**os.environ, "CALLS": str(calls), "SEEDS": "1 2", "RES": str(tmp_path / "res"), **env}, capture_output=True, text=True,
                          timeout=60)
    return done.returncode, [line.split()[0] + " " + next((a for a in line.split() if a.startswith(("*-s", "en-de-"))), "")
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


def test_with_retime_the_cells_train_teachers_first_and_the_seed_is_timed_once(tmp_path):
    stand_in(tmp_path / "retime")
    rc, calls = chain(tmp_path, RETIME=str(tmp_path / "retime"), SEEDS="1")
    assert rc == 0, (tmp_path / "res" / "chain.log").read_text()
    assert not [c for c in calls if c.startswith("run ")]  # no `atnat run`: its timing phase would time the seed twice
    assert sorted(calls[:2]) == ["cell en-de-at-deep-s1", "cell en-de-at-s1"]
    assert sorted(calls[2:6]) == sorted(f"cell en-de-{c}-s1" for c in ("dat-kd", "dat", "ctc-glat-kd", "cmlm-kd"))
    assert calls[6:] == ["collect ", "time *-s1", "collect "]
    assert (tmp_path / "res" / "seed-1.done").is_file()
    copied = sorted(p.name for p in (tmp_path / "res-retimed" / "multi30k-families" / "runs").iterdir())
    assert len(copied) == 6 and "en-de-at-s1" in copied


def test_with_retime_a_teacher_that_fails_stops_the_seed_before_its_students(tmp_path):
    stand_in(tmp_path / "retime")
    rc, calls = chain(tmp_path, RETIME=str(tmp_path / "retime"), SEEDS="1", FAIL_CELL="en-de-at-s1")
    assert rc == 1 and sorted(calls) == ["cell en-de-at-deep-s1", "cell en-de-at-s1"]
    assert "cell en-de-at-s1 rc=1" in (tmp_path / "res" / "chain.log").read_text()
    assert not (tmp_path / "res" / "seed-1.done").exists()
