#!/usr/bin/env bash
# Side work beside the running deep grid (tests, reports), without disturbing a timing: wait for any
# `atnat time` to end, hold watch.py (SIGSTOP: it then starts no timing; never while it holds the grid
# paused), run the command at autogroup nice 19 (the grid keeps its cores), and let watch.py go on after.
#   bash results/multi30k-deep/side.sh COMMAND [ARGS...]      (from the repository's root)
#   bash results/multi30k-deep/side.sh --pause COMMAND [ARGS...]
# Stopping watch.py does not stop an `atnat time` it started: hence the wait. At nice 19 beside two
# training cells a command gets ~2% of a core (a few test files: an hour); --pause stops the grid too,
# runs the command at full speed, lets the grid go on after (also when the command fails or is killed)
# and logs the pause to RESULTS/pauses.log (start, end, seconds, the command), as a full test run needs.
pause=0
if [ "${1:-}" = "--pause" ]; then pause=1; shift; fi
[ "$pause" = 1 ] || echo 19 > /proc/self/autogroup
w=results/multi30k-deep/watch.py
pgid_file=${DEEP_PGID_FILE:-/work/deep-pgid}
res=${DEEP_RESULTS:-/work/deep-results}
while true; do
  while pgrep -f "atnat time" > /dev/null; do sleep 10; done
  pkill -STOP -f "$w"
  stopped=$(ps -o stat= -g "$(cat "$pgid_file" 2>/dev/null || echo 0)" 2>/dev/null | grep -c '^T')
  if pgrep -f "atnat time" > /dev/null || [ "$stopped" != 0 ]; then pkill -CONT -f "$w"; sleep 10; continue; fi
  break
done
if [ "$pause" = 1 ]; then
  kill -STOP -- "-$(cat "$pgid_file")"
  start=$(date +%s) what="$*"
  resume() {
    kill -CONT -- "-$(cat "$pgid_file")"; pkill -CONT -f "$w"
    end=$(date +%s)
    echo "$(date -u -d "@$start" '+%F %T') $(date -u -d "@$end" '+%F %T') $((end - start)) side.sh --pause $what" >> "$res/pauses.log"
  }
  trap resume EXIT
  sleep 3  # the stopped cells' threads leave the cores
else
  trap 'pkill -CONT -f "$w"' EXIT
fi
"$@"
