#!/usr/bin/env bash
# After cells of the deep grid finish: copy their results here (atnat collect: no checkpoints, no
# data) and regenerate the interim report with this checkout's code, keeping the hand-written notes.
#   bash results/multi30k-deep/update.sh [RESULTS_DIR]     (default: /work/deep-results)
# Then update STATUS.md's state and the README bullet, and commit.
set -euo pipefail
cd "$(dirname "$0")/../.."
res="${1:-/work/deep-results}"
grid=experiments/grids/multi30k-deep.yaml
here=results/multi30k-deep
atnat() { bash experiments/env.sh atnat "$@"; }
atnat collect "$grid" --results "$res" --to "$here/finished-cells" || echo "update.sh: collect refused a file (named above)" >&2
atnat report --interim "$grid" --results "$res"
if [ -f "$here/interim/notes.md" ]; then  # the notes live in the repository; the report embeds them
  cp "$here/interim/notes.md" "$res/multi30k-deep/interim/notes.md"
  atnat report "$res/multi30k-deep/interim"
fi
rm -rf "$here/interim"
cp -r "$res/multi30k-deep/interim" "$here/interim"
echo "update.sh: $here/finished-cells and $here/interim updated; $(ls "$here/finished-cells" | wc -l) cells collected"
