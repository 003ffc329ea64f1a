"""The code is lint-clean (ruff: pycodestyle, pyflakes, import sorting; settings in pyproject.toml), so that a
duplicate import or an unused variable is caught by the test command, not by a reader."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_finds_nothing():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
