#!/usr/bin/env bash
# bulkload.sh [KEYS] [ROUNDS]: Redis's mass insertion, `redis-cli --pipe`,
# of KEYS (default 1,000,000) new SETs on one connection, through one node of
# a 3-rack lab (DC_ONE) and through nutcracker to one redis-server, the two
# interleaved. It prints each run's wall time, redis-cli's error count and
# the node's time over nutcracker's. Every run writes new keys: the lab's
# redis-servers and nutcracker's are flushed before each, so no run
# overwrites keys an earlier one wrote. docs/store.md#limits-and-backpressure.
#
# nutcracker does not support ECHO, which redis-cli --pipe sends last to
# learn that every reply has arrived: it closes the connection instead, and
# redis-cli may end before the last replies. So nutcracker's time runs until
# its redis-server holds every key (DBSIZE, polled every 10 ms, for at most a
# minute after redis-cli ends), and redis-cli's own count is shown beside.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/need redis-server redis-cli nutcracker
export PATH=$PATH:/usr/sbin
keys=${1:-1000000}
rounds=${2:-2}
troop=${TROOP:-bin/troop}
[ -x "$troop" ] || { echo "bulkload: $troop is missing: run make build first" >&2; exit 1; }
dir=$(mktemp -d)
rpid= npid=
cleanup() {
  "$troop" lab down --dir "$dir/lab" >/dev/null 2>&1 || true
  [ -n "$npid" ] && kill "$npid" 2>/dev/null
  [ -n "$rpid" ] && kill "$rpid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT

# A free loopback port: one nothing answers on.
freeport() {
  while :; do
    local p=$((20000 + RANDOM % 40000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
}

"$troop" lab up --dir "$dir/lab" --racks 3 >/dev/null
eval "$("$troop" lab env --dir "$dir/lab")"
node=${TROOP_NODES%%,*}

rport=$(freeport)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
  --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --dir "$dir"
for _ in $(seq 50); do [ -s "$dir/redis.pid" ] && break; sleep 0.1; done
rpid=$(cat "$dir/redis.pid")
nport=$(freeport)
cat >"$dir/nutcracker.yml" <<EOF
store:
  listen: 127.0.0.1:$nport
  hash: fnv1a_64
  distribution: ketama
  redis: true
  preconnect: true
  server_connections: 1
  auto_eject_hosts: false
  servers:
    - 127.0.0.1:$rport:1
EOF
nutcracker -d -c "$dir/nutcracker.yml" -s "$(freeport)" -a 127.0.0.1 -o "$dir/nutcracker.log" -p "$dir/nutcracker.pid"
for _ in $(seq 50); do redis-cli -p "$nport" PING >/dev/null 2>&1 && break; sleep 0.1; done
npid=$(cat "$dir/nutcracker.pid")

awk -v n="$keys" 'BEGIN { for (i = 0; i < n; i++) { k = "bulk:" i; v = "value:" i;
  printf "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", length(k), k, length(v), v } }' >"$dir/sets.resp"

flush() { for a in "$@"; do redis-cli -h "${a%:*}" -p "${a#*:}" FLUSHALL >/dev/null; done; }
run() { # run NAME HOST:PORT [REDIS-PORT]: seconds, and redis-cli's last line
  local s e out
  s=$(date +%s.%N)
  out=$(redis-cli -h "${2%:*}" -p "${2#*:}" --pipe <"$dir/sets.resp" 2>&1 | tail -1) || true
  if [ -n "${3:-}" ]; then
    for _ in $(seq 6000); do
      [ "$(redis-cli -p "$3" DBSIZE)" -ge "$keys" ] && break
      sleep 0.01
    done
  fi
  e=$(date +%s.%N)
  echo "$1 $(echo "$e - $s" | bc) $out"
}
echo "bulk load: redis-cli --pipe, $keys SETs, one connection; $(redis-server --version | cut -d' ' -f3), $(nutcracker --version 2>&1 | grep -o 'nutcracker-[0-9.]*')"
for r in $(seq "$rounds"); do
  flush "127.0.0.1:$rport"
  nc=$(run nutcracker "127.0.0.1:$nport" "$rport")
  held=$(redis-cli -p "$rport" DBSIZE)
  echo "round $r: $nc (redis-server holds $held keys)"
  flush ${TROOP_REDIS//,/ }
  nd=$(run node "$node")
  echo "round $r: $nd"
  echo "round $r: node/nutcracker $(echo "scale=2; $(echo "$nd" | cut -d' ' -f2) / $(echo "$nc" | cut -d' ' -f2)" | bc)"
done
