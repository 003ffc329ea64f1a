#!/usr/bin/env bash
# Side work beside the running deep grid (tests, reports), without disturbing a timing: wait for any
# `atnat time` to end, hold watch.py (SIGSTOP: it then starts no timing; never while it holds the grid
# paused), run the command at autogroup nice 19 (the grid keeps its cores), and let watch.py go on after.
#   bash results/multi30k-deep/side.sh COMMAND [ARGS...]      (from the repository's root)
# Stopping watch.py does not stop an `atnat time` it started: hence the wait. A full test run still
# pauses the grid itself (STATUS.md, "To go on").
echo 19 > /proc/self/autogroup
w=results/multi30k-deep/watch.py
pgid_file=${DEEP_PGID_FILE:-/work/deep-pgid}
while true; do
  while pgrep -f "atnat time" > /dev/null; do sleep 10; done
  pkill -STOP -f "$w"
  stopped=$(ps -o stat= -g "$(cat "$pgid_file" 2>/dev/null || echo 0)" 2>/dev/null | grep -c '^T')
  if pgrep -f "atnat time" > /dev/null || [ "$stopped" != 0 ]; then pkill -CONT -f "$w"; sleep 10; continue; fi
  break
done
trap 'pkill -CONT -f "$w"' EXIT
"$@"
