#!/usr/bin/env bash
# How the families grid runs here: seed by seed, each seed's run ending with its own timing phase (the seed
# timed whole, nothing else running), then collected with its speed; a failed cell or timing stops the chain.
#   results/multi30k-families/run_seeds.sh WORKTREE RESULTS COLLECTED [PID]
# WORKTREE: a checkout of the commit the grid runs under, with its .venv; RESULTS: the results folder (outside
# the checkout); COLLECTED: where finished seeds are copied; PID: a run of the grid already under way, waited for
# first. Resumable: run it again after a stop (finished cells are kept, unfinished ones resume from last.ckpt).
set -u
worktree=$1 results=$2 collected=$3 wait_for=${4:-}
grid=experiments/grids/multi30k-families.yaml
log=$results/chain.log
cd "$worktree" || exit 1
if [ -n "$wait_for" ]; then
  while kill -0 "$wait_for" 2>/dev/null; do sleep 30; done
  echo "$(date -u +%FT%TZ) run $wait_for ended" >> "$log"
fi
for s in 1 2 3; do
  echo "$(date -u +%FT%TZ) seed $s: run" >> "$log"
  .venv/bin/atnat run "$grid" --workers 2 --only "*-s$s" --results "$results" >> "$results/run-chain-s$s.log" 2>&1
  rc=$?
  echo "$(date -u +%FT%TZ) seed $s: run rc=$rc" >> "$log"
  [ $rc -eq 0 ] || exit $rc
  .venv/bin/atnat collect "$grid" --results "$results" --to "$collected" >> "$log" 2>&1
  echo "$(date -u +%FT%TZ) seed $s: collected rc=$?" >> "$log"
done
