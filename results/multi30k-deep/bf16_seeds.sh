#!/usr/bin/env bash
# bf16 against fp32 seed by seed: the grid's report pairs the twins over their seeds (2 and 3: a t
# interval at 1 degree of freedom, wide); this gives each seed's own difference with its interval over
# the test sentences, by the same code (`atnat report --interim` over that seed's bf16 teacher and fp32
# twin alone, copied from the collected cells), both test sets, beam 5 and greedy; and both seeds again.
#   bash results/multi30k-deep/bf16_seeds.sh      (from the repository's root) -> bf16_seeds.csv
# Columns: the seeds paired ("2 3": both, as the report pairs them), test set, strategy, both BLEU scores,
# fp32 minus bf16 with its paired 95% interval and the report's verdict (equivalence margin: the grid's).
set -euo pipefail
cd "$(dirname "$0")/../.."
here=results/multi30k-deep
grid=experiments/grids/multi30k-deep.yaml
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out="$here/bf16_seeds.csv"
for seeds in 2 3 "2 3"; do
  kept="$tmp/kept${seeds// /}" res="$tmp/res${seeds// /}"
  mkdir -p "$kept" "$res"
  for seed in $seeds; do
    for cell in en-de-at-s$seed en-de-at-fp32-s$seed; do
      [ -f "$here/finished-cells/$cell/metrics.json" ] || { echo "bf16_seeds.sh: $cell is not collected yet" >&2; exit 1; }
      cp -r "$here/finished-cells/$cell" "$kept/"
    done
  done
  bash experiments/env.sh atnat report --interim "$grid" --collected "$kept" --results "$res" --no-figures > /dev/null
  python3 - "$res/multi30k-deep/interim/ranking.csv" "$seeds" "$tmp/all.csv" <<'PY'
import csv, os, sys
path, seeds, dest = sys.argv[1:]
with open(path, newline="") as f:  # the grid's `compare` pairs: bf16 teacher minus its fp32 twin
    rows = [r for r in csv.DictReader(f) if "compare" in r["relation"].split()
            and r["against"] == r["system"].replace("en-de-at /", "en-de-at-fp32 /")]
if len(rows) != 4:
    sys.exit(f"bf16_seeds.sh: {len(rows)} bf16/fp32 pairs in {path}, not 4 (2 strategies x 2 test sets)")
new = not os.path.exists(dest)
with open(dest, "a", newline="") as f:
    w = csv.writer(f)
    if new:
        w.writerow(["seeds", "test_set", "strategy", "fp32_bleu", "bf16_bleu", "fp32_minus_bf16", "ci_low", "ci_high",
                    "verdict"])
    named = {"ahead": "bf16 ahead", "behind": "fp32 ahead"}  # the report's verdicts are the bf16 system's
    for r in sorted(rows, key=lambda r: (r["split_name"], r["system"])):  # the sign turned: fp32 minus bf16,
        w.writerow([seeds, r["split_name"], r["system"].split(" / ")[1], r["against_bleu"], r["system_bleu"],  # as in
                    -float(r["bleu_diff"]), -float(r["diff_ci_high"]), -float(r["diff_ci_low"]),  # the README's run 1
                    named.get(r["verdict"], r["verdict"])])
PY
done
mv "$tmp/all.csv" "$out"
echo "bf16_seeds.sh: wrote $out ($(($(wc -l < "$out") - 1)) rows)"
