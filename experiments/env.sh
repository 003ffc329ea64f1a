#!/usr/bin/env bash
# Set up (once) and enter atnat's environment, then run the given command in the repo root.
#   bash experiments/env.sh atnat run experiments/grids/quickstart.yaml
#   bash experiments/env.sh python -m pytest
# Installs atnat with the dev and bench extras (pytest; transformers for the HF speed peer), or
# those in $ATNAT_EXTRAS (e.g. ATNAT_EXTRAS=bench); asking for an extra the venv lacks installs it.
# A command that runs pytest, as root where apt-get exists, also installs Chromium when missing, for
# the report's browser test (once: 25 Debian packages, a 124 MB download, 414 MB on disk); elsewhere
# that test skips.
# The venv (.venv, or $ATNAT_VENV) sees the system's packages, so a torch that is already
# installed (a GPU machine's) is used as it is and pinned while atnat's dependencies install;
# without one, the CPU wheel torch==2.13.0+cpu is installed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${ATNAT_VENV:-$root/.venv}"
case "$venv" in /*) ;; *) venv="$PWD/$venv" ;; esac  # the caller's folder: the command runs in the root
python="${PYTHON:-python3}"
extras="${ATNAT_EXTRAS:-dev,bench}"

if [ ! -x "$venv/bin/python" ]; then
  echo "atnat: creating $venv" >&2
  "$python" -m venv --system-site-packages "$venv"
fi
stamp="$venv/.atnat-installed"  # names the extras installed
missing=""
for extra in ${extras//,/ }; do
  [[ ",$(cat "$stamp" 2>/dev/null || true)," == *,"$extra",* ]] || missing="$missing $extra"
done
if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ] || [ -n "$missing" ]; then
  if ! "$venv/bin/python" -c "import torch" >/dev/null 2>&1; then
    echo "atnat: no torch found; installing the CPU wheel torch==2.13.0+cpu" >&2
    if [ "$(uname -s)-$(uname -m)" = Linux-x86_64 ]; then
      # the +cpu build (PyPI's own torch 2.13.0 for Linux is the CUDA build: gigabytes of CUDA packages): from
      # the wheels pip's configuration names (find-links, an index mirror), else from PyTorch's CPU index
      "$venv/bin/python" -m pip install --quiet "torch==2.13.0+cpu" \
        || "$venv/bin/python" -m pip install --quiet "torch==2.13.0+cpu" --extra-index-url https://download.pytorch.org/whl/cpu
    else  # macOS and ARM: PyPI's torch is the CPU build there, without a +cpu tag
      "$venv/bin/python" -m pip install --quiet "torch==2.13.0"
    fi
  fi
  pin="$venv/torch-pin.txt"
  "$venv/bin/python" -c "import torch; print('torch==' + torch.__version__)" > "$pin"
  echo "atnat: installing atnat and its dependencies (keeping $(cat "$pin"))" >&2
  "$venv/bin/python" -m pip install --quiet --constraint "$pin" -e "$root[$extras]"
  echo "$extras" > "$stamp"
fi
if [[ " $* " == *pytest* ]] && [ ! -f "$venv/.chromium-tried" ] && ! command -v chromium >/dev/null 2>&1 \
    && ! command -v chromium-browser >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "atnat: installing chromium (apt) for tests/test_report_browser.py; log in $venv/chromium-apt.log" >&2
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium; } \
    > "$venv/chromium-apt.log" 2>&1 || echo "atnat: chromium not installed (see the log); the browser test will skip" >&2
  touch "$venv/.chromium-tried"
fi
cd "$root"
export PATH="$venv/bin:$PATH"
exec "$@"
