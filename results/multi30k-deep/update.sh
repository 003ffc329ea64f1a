#!/usr/bin/env bash
# After cells of the deep grid finish: copy their results here (atnat collect: no checkpoints, no
# data), then regenerate the interim report from every cell collected here (atnat report --interim
# --collected: cells whose machine is gone included) with this checkout's code, keeping the
# hand-written notes.
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
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
atnat report --interim "$grid" --collected "$here/finished-cells" --results "$stage"
if [ -f "$here/interim/notes.md" ]; then  # the notes live in the repository; the report embeds them
  cp "$here/interim/notes.md" "$stage/multi30k-deep/interim/notes.md"
  atnat report "$stage/multi30k-deep/interim"
fi
rm -rf "$here/interim"
cp -r "$stage/multi30k-deep/interim" "$here/interim"
echo "update.sh: $here/interim regenerated from $(ls "$here/finished-cells" | wc -l) collected cells"
