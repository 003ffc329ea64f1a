"""experiments/env.sh, the README's setup: which environment it enters, from wherever it is called."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def fake_venv(folder: Path, extras: str = "dev,bench") -> Path:
    """A venv env.sh takes as set up: bin/python, and a stamp newer than pyproject.toml naming its extras."""
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "python").symlink_to(sys.executable)
    (folder / ".atnat-installed").write_text(extras + "\n")
    return folder


def env_sh(*command: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ROOT / "experiments" / "env.sh"), *command], cwd=cwd, capture_output=True,
                          text=True, env={**os.environ, **env}, timeout=60)


def test_a_relative_venv_is_the_callers_and_the_command_runs_in_it(tmp_path):
    """ATNAT_VENV=myvenv was set up relative to the caller's folder, but after env.sh moved to the repository
    root the command's PATH pointed at <root>/myvenv/bin, which does not exist: the command ran outside it."""
    caller = tmp_path / "caller"
    venv = fake_venv(caller / "myvenv")
    out = env_sh("bash", "-c", "command -v python; pwd", cwd=caller, ATNAT_VENV="myvenv")
    assert out.returncode == 0, out.stderr
    python, where = out.stdout.split()
    assert python == str(venv / "bin" / "python") and where == str(ROOT)


def test_the_commands_exit_status_comes_through(tmp_path):
    fake_venv(tmp_path / "v")
    assert env_sh("bash", "-c", "exit 7", cwd=tmp_path, ATNAT_VENV=str(tmp_path / "v")).returncode == 7


def test_a_venv_with_more_extras_than_asked_is_not_set_up_again(tmp_path):
    fake_venv(tmp_path / "v", extras="dev,bench")
    out = env_sh("true", cwd=tmp_path, ATNAT_VENV=str(tmp_path / "v"), ATNAT_EXTRAS="bench")
    assert out.returncode == 0 and "installing" not in out.stderr, out.stderr
