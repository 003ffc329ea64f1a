#!/usr/bin/env bash
# After cells of the deep grid finish: copy their results here (atnat collect: no checkpoints, no
# data), then regenerate the interim report from every cell collected here (atnat report --interim
# --collected: cells whose machine is gone included) with this checkout's code, keeping the
# hand-written notes, and compare run 2 with run 1 (reproduce.py -> reproducibility.csv).
#   bash results/multi30k-deep/update.sh [RESULTS_DIR]     (default: /work/deep-results)
# Then update STATUS.md's state and the README bullet, and commit.
set -euo pipefail
cd "$(dirname "$0")/../.."
res="${1:-/work/deep-results}"
grid=experiments/grids/multi30k-deep.yaml
here=results/multi30k-deep
atnat() { bash experiments/env.sh atnat "$@"; }
if [ -d "$res/multi30k-deep/runs" ]; then
  atnat collect "$grid" --results "$res" --to "$here/finished-cells" || echo "update.sh: collect refused a file (named above)" >&2
fi
# the report is written in place (results/<grid>/interim/), notes.md kept and embedded, so that the
# command it records reproduces it from the repository's root
find "$here/interim" -mindepth 1 -not -name notes.md -delete 2>/dev/null || true
atnat report --interim "$grid" --collected "$here/finished-cells"
echo "update.sh: $here/interim regenerated from $(ls "$here/finished-cells" | wc -l) collected cells"
# run 2 against run 1, cell by cell (reproducibility.csv)
python3 "$here/reproduce.py" > /dev/null && echo "update.sh: $here/reproducibility.csv rewritten ($(($(wc -l < "$here/reproducibility.csv") - 1)) rows)"
