#!/usr/bin/env bash
# threads.sh PID [SECONDS]: where a process's CPU time goes, thread by
# thread, over SECONDS (default 4) of whatever load runs meanwhile: time on
# a CPU, time runnable but waiting for one, and how many times the thread
# was scheduled in (/proc/PID/task/*/schedstat). Threads with under 1 ms on
# a CPU are left out. In a Go program the thread started right after the
# main one runs the runtime's monitor (sysmon). perf/NOTES.md, "The
# runtime's monitor thread".
set -euo pipefail
pid=${1:?usage: threads.sh PID [SECONDS]}
secs=${2:-4}
[ -d "/proc/$pid" ] || { echo "threads.sh: no process $pid" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
snap() {
  for t in /proc/"$pid"/task/*; do
    echo "$(basename "$t") $(cat "$t/schedstat" 2>/dev/null || echo 0 0 0)"
  done | sort >"$1"
}
snap "$dir/a"
sleep "$secs"
snap "$dir/b"
second=$(ls /proc/"$pid"/task | sort -n | awk -v p="$pid" '$1 > p {print; exit}')
join "$dir/a" "$dir/b" |
  awk -v main="$pid" -v second="$second" '
    {run = ($5 - $2) / 1e6; wait = ($6 - $3) / 1e6; slices = $7 - $4
     role = $1 == main ? "main" : $1 == second ? "second" : ""
     if (run >= 1) printf "thread %-8s %-6s  on a CPU %7.0f ms  waiting for one %7.0f ms  scheduled in %7d times\n", $1, role, run, wait, slices
     R += run; W += wait; S += slices}
    END {printf "all threads      on a CPU %7.0f ms  waiting for one %7.0f ms  scheduled in %7d times\n", R, W, S}'
