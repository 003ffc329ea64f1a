#!/usr/bin/env bash
# The NAT decoders' best allowed token before (OLD: a checkout of 65572a5, masked copies of the rows whose
# arg-max is a banned id) and after (this checkout: one max over a view), on the bench's random weights, where
# every position of the CMLM and the DAG has a banned arg-max: the same bench rows, runs alternating old/new.
#   bash results/bench/argmax_ab.sh OLD_CHECKOUT OUT_DIR     (from the repository root, nothing else running)
set -euo pipefail
old="$1"; out="$2"; mkdir -p "$out"
shim="$(mktemp -d)"; ln -s "$(cd "$old" && pwd)" "$shim/atnat"  # `import atnat` finds the old checkout first
args=(bench decode --threads 1 --no-hf --no-ct2 --strategies parallel,mask-predict-4,mask-predict-10,dag-lookahead)
for run in 1 2; do
  PYTHONPATH="$shim" .venv/bin/python -m atnat.experiments.cli "${args[@]}" --out "$out/argmax_old_$run.csv" | tail -n 12
  .venv/bin/python -m atnat.experiments.cli "${args[@]}" --out "$out/argmax_new_$run.csv" | tail -n 12
done
