#!/usr/bin/env bash
# A seed's last timing, on a quiet machine: stop the grid and watch.py, time the seed's cells anew as a
# whole in one session, let both go on (also when the timing fails or is killed). The pause is logged to
# RESULTS/pauses.log (start, end, seconds): it counts in the paused cells' train_time_s (Lightning's timer
# runs on), and the compute the grid took is its training time less these pauses and watch.py's.
#   bash results/multi30k-deep/time_seed.sh 'en-de-*-s2' [--partial]     (from the repository's root)
# --partial when a cell of the seed (an fp32 twin) has not trained yet: it is timed beside the baseline later.
set -u
pattern="$1"; shift
res=${DEEP_RESULTS:-/work/deep-results}
pgid_file=${DEEP_PGID_FILE:-/work/deep-pgid}
w=results/multi30k-deep/watch.py
if pgrep -f "atnat time" > /dev/null; then echo "time_seed.sh: an atnat time runs already" >&2; exit 1; fi
pkill -STOP -f "$w"
kill -STOP -- "-$(cat "$pgid_file")"
start=$(date +%s)
resume() {
  kill -CONT -- "-$(cat "$pgid_file")"; pkill -CONT -f "$w"
  end=$(date +%s)
  echo "$(date -u -d "@$start" '+%F %T') $(date -u -d "@$end" '+%F %T') $((end - start)) time_seed.sh $pattern" >> "$res/pauses.log"
}
trap resume EXIT
sleep 5  # the stopped cells' threads leave the cores
echo "$(date -u) atnat time --anew --only $pattern $*"
bash experiments/env.sh atnat time experiments/grids/multi30k-deep.yaml --results "$res" --anew --only "$pattern" "$@"
rc=$?
echo "$(date -u) atnat time exited $rc"
exit $rc
