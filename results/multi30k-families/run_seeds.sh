#!/usr/bin/env bash
# How the families grid runs here: seed by seed, each seed's run ending with its own timing phase (the seed
# timed whole, nothing else running), then collected with its speed; a failed cell or timing stops the chain.
#   results/multi30k-families/run_seeds.sh WORKTREE RESULTS COLLECTED [PID]
# WORKTREE: a checkout of the commit the grid runs under, with its .venv; RESULTS: the results folder (outside
# the checkout); COLLECTED: where finished seeds are copied; PID: a run of the grid already under way, waited for
# first. Resumable: run it again after a stop (finished cells are kept, unfinished ones resume from last.ckpt).
# RETIME=WORKTREE2: after each seed is collected, time it again, whole, by the code checked out in WORKTREE2
# (its own .venv; the grid file is WORKTREE's, the one the cells ran from) on a copy of the seed's run folders
# (RESULTS-retimed; last.ckpt left out), collected into COLLECTED-retimed: a timing by newer code than trained
# the cells, made while their weights are at hand.
# A seed whose run, collect (and retiming, with RETIME=) have all ended well is marked RESULTS/seed-N.done and not
# run again at a restart (its run's timing phase would time the next seed's finished cells apart from the rest of
# their seed); remove the mark to run it again.
# With RETIME= a seed's cells train one by one (`atnat cell`, two at a time, the teacher ATs first) instead of
# through `atnat run`, whose own timing phase would time the seed once more by the older code: the retiming is
# the seed's one timing.
# SEEDS (default "1 2 3") and SMOKE=1 (the grid's smoke run) try the chain out at small scale.
set -uo pipefail
shopt -s nullglob
absolute() { realpath -m -- "$1"; }  # no trailing slash, independent of the folder the chain runs in
worktree=$(absolute "$1") results=$(absolute "$2") collected=$(absolute "$3") wait_for=${4:-}
grid=experiments/grids/multi30k-families.yaml
smoke="" name=multi30k-families
[ "${SMOKE:-}" = 1 ] && smoke=--smoke name=multi30k-families-smoke
retimed=$results-retimed
log=$results/chain.log
if [ -n "${RETIME:-}" ]; then
  RETIME=$(absolute "$RETIME")
  [ -x "$RETIME/.venv/bin/atnat" ] || { echo "RETIME=$RETIME: no .venv/bin/atnat there (bash experiments/env.sh true)" >&2; exit 2; }
fi
# The grid's cells, in the order `atnat cell` needs them: the ATs (the students' teacher and the 5+1), then the students.
first_cells="at at-deep" student_cells="dat-kd dat ctc-glat-kd cmlm-kd"
train_cell() {  # SEED CELL: one cell trained and evaluated, its output in its own log
  OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 .venv/bin/atnat cell "$grid" $smoke --results "$results" "en-de-$2-s$1" \
    >> "$results/run-chain-s$1-$2.log" 2>&1  # one thread each, as `atnat run`'s two workers on two cores
  local rc=$?
  echo "$(date -u +%FT%TZ) seed $1: cell en-de-$2-s$1 rc=$rc" >> "$log"
  return $rc
}
train_cells() {  # SEED: its ATs side by side, then its students two at a time; 1 when a cell failed
  local pids=() failed=0 cell pid
  for cell in $first_cells; do train_cell "$1" "$cell" & pids+=($!); done
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  [ $failed -eq 0 ] || return 1
  export -f train_cell; export grid smoke results log
  printf '%s\n' $student_cells | xargs -P 2 -I{} bash -c 'train_cell "$0" "$1"' "$1" {} || return 1
}
mkdir -p "$results"
cd "$worktree" || exit 1
if [ -n "$wait_for" ]; then
  while kill -0 "$wait_for" 2>/dev/null; do sleep 30; done
  echo "$(date -u +%FT%TZ) run $wait_for ended" >> "$log"
fi
for s in ${SEEDS:-1 2 3}; do
  seed_done=$results/seed-$s.done
  if [ -f "$seed_done" ]; then
    echo "$(date -u +%FT%TZ) seed $s: done before ($seed_done)" >> "$log"
    continue
  fi
  echo "$(date -u +%FT%TZ) seed $s: run" >> "$log"
  if [ -n "${RETIME:-}" ]; then
    train_cells "$s"
  else
    .venv/bin/atnat run "$grid" $smoke --workers 2 --only "*-s$s" --results "$results" >> "$results/run-chain-s$s.log" 2>&1
  fi
  rc=$?
  echo "$(date -u +%FT%TZ) seed $s: run rc=$rc" >> "$log"
  [ $rc -eq 0 ] || exit $rc
  .venv/bin/atnat collect "$grid" $smoke --results "$results" --to "$collected" >> "$log" 2>&1
  rc=$?
  echo "$(date -u +%FT%TZ) seed $s: collected rc=$rc" >> "$log"
  [ $rc -eq 0 ] || exit $rc  # a copy held back or refused: the seed is not safe elsewhere yet
  done_marker=$retimed/$name/seed-$s.retimed
  if [ -n "${RETIME:-}" ] && [ ! -f "$done_marker" ]; then
    runs=("$results/$name/runs/"*-s$s)
    [ ${#runs[@]} -gt 0 ] || { echo "$(date -u +%FT%TZ) seed $s: no run folders to time again" >> "$log"; exit 1; }
    mkdir -p "$retimed/$name/runs"
    for run in "${runs[@]}"; do
      copy=$retimed/$name/runs/${run##*/}
      rm -rf "$copy" && mkdir "$copy" \
        && tar -C "$run" -cf - --exclude='last.ckpt*' --exclude='*.lock' . | tar -C "$copy" -xf - \
        || { echo "$(date -u +%FT%TZ) seed $s: copying $run for the retiming failed" >> "$log"; exit 1; }
    done
    echo "$(date -u +%FT%TZ) seed $s: retime by $(git -C "$RETIME" rev-parse --short HEAD)" >> "$log"
    (cd "$RETIME" && .venv/bin/atnat time "$worktree/$grid" $smoke --anew --only "*-s$s" --results "$retimed") \
      >> "$retimed/retime-s$s.log" 2>&1
    rc=$?
    echo "$(date -u +%FT%TZ) seed $s: retimed rc=$rc" >> "$log"
    [ $rc -eq 0 ] || exit $rc
    (cd "$RETIME" && .venv/bin/atnat collect "$worktree/$grid" $smoke --results "$retimed" --to "$collected-retimed") \
      >> "$log" 2>&1
    rc=$?
    echo "$(date -u +%FT%TZ) seed $s: retimed collected rc=$rc" >> "$log"
    [ $rc -eq 0 ] || exit $rc
    touch "$done_marker"
  fi
  touch "$seed_done"
done
