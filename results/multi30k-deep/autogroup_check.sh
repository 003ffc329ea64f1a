#!/bin/bash
# The CPU share a busy side job takes from the running grid's two workers, with `nice -n 19` alone
# (the job in a session autogroup of its own, as a new terminal gets) and with its autogroup set to
# 19 too. Prints the %CPU of the side job and of each `atnat ... cell` worker over 20 s (pidstat-like,
# from /proc/<pid>/stat). Run while the grid trains; it loads the machine for 40 s.
set -eu
workers=$(pgrep -f "atnat.experiments.cli cell" | tr '\n' ' ')
[ -n "$workers" ] || { echo "no grid worker running"; exit 1; }
ticks() { awk '{print $14 + $15}' /proc/$1/stat; }
measure() {  # $1: label; $2: autogroup nice of the side job
  setsid bash -c "echo $2 > /proc/self/autogroup; exec nice -n 19 python3 -c 'while True: pass'" &
  sleep 1; side=$(pgrep -n -f "while True: pass")
  declare -A t0; for p in $side $workers; do t0[$p]=$(ticks $p); done
  sleep 20
  line="$1: side job $(( ( $(ticks $side) - ${t0[$side]} ) * 100 / (20 * $(getconf CLK_TCK)) ))%"
  for p in $workers; do line+=", worker $p $(( ( $(ticks $p) - ${t0[$p]} ) * 100 / (20 * $(getconf CLK_TCK)) ))%"; done
  kill $side; wait 2>/dev/null || true; echo "$line"
}
measure "nice -n 19, autogroup 0" 0
measure "nice -n 19, autogroup 19" 19
