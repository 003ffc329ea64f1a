#!/usr/bin/env bash
# Does training on this CPU model reproduce the deep grid's earlier runs (AMD EPYC, avx512_bf16)?
# Trains the fp32 twin of en-de seed 1 (run 1's config.json) for 60 steps here and prints its step-49
# training loss beside run 1's; the bf16 teachers' step-49 losses are read from a running grid's logs
# (DIR, default /work/deep-results) beside their AMD copies (run2-amd/). Output: check.txt beside this file.
#   bash results/multi30k-deep/cpu-model-check/check.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/../../.."
here=results/multi30k-deep/cpu-model-check
res="${1:-/work/deep-results}"
tmp=$(mktemp -d)
python3 - "$tmp" <<'PY'
import json, sys
c = json.load(open("results/multi30k-deep/run1/finished-cells/en-de-at-fp32-s1/config.json"))
c["output_dir"] = sys.argv[1] + "/run"
c["train"].update(max_steps=60, val_every_steps=1000)
json.dump(c, open(sys.argv[1] + "/cfg.json", "w"))
PY
.venv/bin/atnat train "$tmp/cfg.json" > "$tmp/log.txt" 2>&1 &
pid=$!
until grep -q '"phase": "evaluating"' "$tmp/run/progress.json" 2>/dev/null || ! kill -0 $pid 2>/dev/null; do sleep 5; done
kill $pid 2>/dev/null || true  # trained: its evaluation is not needed
wait $pid 2>/dev/null || true
step49() { grep -E "^[0-9]+,[0-9]+,49," "$1" | head -1 | cut -d, -f4,5; }
{
  echo "# $(date -u +%F) on: $(lscpu | sed -n 's/^Model name: *//p'), $(grep -o -E 'avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "# cell, precision, step-49 train/loss and token accuracy: this CPU | the collected run (AMD EPYC)"
  echo "en-de-at-fp32-s1, 32-true, $(step49 "$tmp/run/logs/metrics.csv") | $(step49 results/multi30k-deep/run1/finished-cells/en-de-at-fp32-s1/logs/metrics.csv)"
  for s in 2 3; do
    log="$res/multi30k-deep/runs/en-de-at-s$s/logs/metrics.csv"
    [ -f "$log" ] && echo "en-de-at-s$s, bf16-mixed, $(step49 "$log") | $(step49 results/multi30k-deep/run2-amd/en-de-at-s$s/logs/metrics.csv)"
  done
} > "$here/check.txt"
rm -rf "$tmp"
cat "$here/check.txt"
