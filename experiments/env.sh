#!/usr/bin/env bash
# Set up (once) and enter atnat's environment, then run the given command in the repo root.
#   bash experiments/env.sh atnat run experiments/grids/quickstart.yaml
#   bash experiments/env.sh python -m pytest
# Installs atnat with the dev and bench extras (pytest; transformers for the HF speed peer).
# The venv (.venv, or $ATNAT_VENV) sees the system's packages, so a torch that is already
# installed (a GPU machine's) is used as it is and pinned while atnat's dependencies install;
# without one, the CPU wheel torch==2.13.0 is installed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${ATNAT_VENV:-$root/.venv}"
python="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
  echo "atnat: creating $venv" >&2
  "$python" -m venv --system-site-packages "$venv"
fi
stamp="$venv/.atnat-installed"
if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ]; then
  if ! "$venv/bin/python" -c "import torch" >/dev/null 2>&1; then
    echo "atnat: no torch found; installing the CPU wheel torch==2.13.0" >&2
    "$venv/bin/python" -m pip install --quiet "torch==2.13.0"
  fi
  pin="$venv/torch-pin.txt"
  "$venv/bin/python" -c "import torch; print('torch==' + torch.__version__)" > "$pin"
  echo "atnat: installing atnat and its dependencies (keeping $(cat "$pin"))" >&2
  "$venv/bin/python" -m pip install --quiet --constraint "$pin" -e "$root[dev,bench]"
  touch "$stamp"
fi
cd "$root"
export PATH="$venv/bin:$PATH"
exec "$@"
