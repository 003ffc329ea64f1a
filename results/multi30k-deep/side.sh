#!/usr/bin/env bash
# Side work beside the running deep grid (tests, reports), without disturbing a timing: wait for any
# `atnat time` to end, hold watch.py (SIGSTOP: it then starts no timing; never while it holds the grid
# paused), run the command at autogroup nice 19 (the grid keeps its cores), and let watch.py go on after.
#   bash results/multi30k-deep/side.sh COMMAND [ARGS...]      (from the repository's root)
#   bash results/multi30k-deep/side.sh --pause COMMAND [ARGS...]
# Stopping watch.py does not stop an `atnat time` it started: hence the wait. At nice 19 beside two
# training cells a command gets ~2% of a core (a few test files: an hour); --pause stops the grid too,
# runs the command at full speed, lets the grid go on after and logs the pause to RESULTS/pauses.log
# (start, end, seconds, the command), as a full test run needs. Killed (TERM, INT, HUP), it kills the
# command first, then lets the grid and watch.py go on; a SIGKILL leaves them stopped (`kill -CONT`).
# One side.sh at a time (a lock): a second one waits, so that neither lets watch.py go on under the other.
pause=0
if [ "${1:-}" = "--pause" ]; then pause=1; shift; fi
w=results/multi30k-deep/watch.py
pgid_file=${DEEP_PGID_FILE:-/work/deep-pgid}
res=${DEEP_RESULTS:-/work/deep-results}
timing="bin/atnat time"  # the timing process (watch.py's or time_seed.sh's), not a command line that names it
exec 9> "$res/side.lock"
flock 9
[ "$pause" = 1 ] || echo 19 > /proc/self/autogroup
while true; do
  while pgrep -f "$timing" > /dev/null; do sleep 10; done
  pkill -STOP -f "$w"
  stopped=$(ps -o stat= -g "$(cat "$pgid_file" 2>/dev/null || echo 0)" 2>/dev/null | grep -c '^T')
  if pgrep -f "$timing" > /dev/null || [ "$stopped" != 0 ]; then pkill -CONT -f "$w"; sleep 10; continue; fi
  break
done
child=0
paused=0
resume() {
  if [ "$child" != 0 ]; then kill "$child" 2>/dev/null; wait "$child" 2>/dev/null; fi
  if [ "$paused" = 1 ]; then
    kill -CONT -- "-$pgid"
    end=$(date +%s)
    echo "$(date -u -d "@$start" '+%F %T') $(date -u -d "@$end" '+%F %T') $((end - start)) side.sh --pause $what" >> "$res/pauses.log"
  fi
  pkill -CONT -f "$w"
}
trap resume EXIT
trap 'exit 143' TERM HUP
trap 'exit 130' INT
if [ "$pause" = 1 ]; then
  pgid=$(tr -d ' \n' < "$pgid_file" 2>/dev/null)
  if [ -z "$pgid" ] || [ "$pgid" = "$(ps -o pgid= $$ | tr -d ' ')" ]; then
    echo "side.sh: $pgid_file names no grid process group apart from this shell's: nothing paused" >&2; exit 2
  fi
  if ! kill -STOP -- "-$pgid" 2>/dev/null; then
    echo "side.sh: the grid's process group $pgid is gone: runs without a pause, none logged" >&2
  else
    paused=1 start=$(date +%s) what="$*"
    sleep 3  # the stopped cells' threads leave the cores
  fi
fi
"$@" &
child=$!
wait "$child"
rc=$?
child=0
exit $rc
