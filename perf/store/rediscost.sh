#!/usr/bin/env bash
# rediscost.sh [ROUNDS]: what each way of writing a versioned 1 KB value costs
# one redis-server, in CPU microseconds per command (from /proc/PID/stat),
# measured with redis-benchmark over 100,000 random keys, 10 connections,
# depth 10, the variants interleaved. docs/performance.md#repair.
#
#   SET      the plain command (troop_versions: false)
#   MSET     value and version key in one command (a SET the version cache vouches for)
#   LUASET   a Lua script that only runs the SET: the price of the Lua call
#   WRITE    troop's write script, as a plain SET runs it
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/need redis-server redis-benchmark redis-cli
rounds=${1:-3}
dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
# A free loopback port: one nothing answers on, which our server then holds
# (its pid file appears only once it listens).
for _ in $(seq 20); do
  port=$((20000 + RANDOM % 40000))
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && continue
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
    --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --dir "$dir"
  for _ in $(seq 50); do [ -s "$dir/redis.pid" ] && break; sleep 0.1; done
  if [ -s "$dir/redis.pid" ] && redis-cli -p "$port" PING >/dev/null 2>&1; then
    pid=$(cat "$dir/redis.pid")
    break
  fi
done
[ -n "$pid" ] || { echo "rediscost: could not start redis-server on a free port (log: $dir/redis.log)" >&2; exit 1; }

value=$(head -c 1024 /dev/zero | tr '\0' x)
version=0000018f0000000000a1
write_script=$(awk '/^const writeScript = `/{f=1;next} f&&/^`/{exit} f' node/datastore.go)
write_sha=$(redis-cli -p "$port" SCRIPT LOAD "$write_script")
set_sha=$(redis-cli -p "$port" SCRIPT LOAD "return redis.call('SET', KEYS[1], ARGV[1])")
n=300000

cpu_ticks() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
measure() {
  local name=$1; shift
  local before after
  before=$(cpu_ticks)
  redis-benchmark -p "$port" -n "$n" -P 10 -c 10 -q -r 100000 "$@" >/dev/null
  after=$(cpu_ticks)
  # ticks are 1/100 s: µs per command = ticks * 10,000 / n
  echo "$name $(( (after - before) * 10000 * 100 / n ))"
}
# An unmeasured pass first creates the keys: a round then overwrites them, as
# troop's benchmark does over its preloaded keys.
redis-benchmark -p "$port" -n "$n" -P 10 -c 10 -q -r 100000 MSET k:__rand_int__ "$value" __troop:v:k:__rand_int__ "$version" >/dev/null
{
  for _ in $(seq "$rounds"); do
    measure SET SET k:__rand_int__ "$value"
    measure MSET MSET k:__rand_int__ "$value" __troop:v:k:__rand_int__ "$version"
    measure LUASET EVALSHA "$set_sha" 1 k:__rand_int__ "$value"
    measure WRITE EVALSHA "$write_sha" 2 k:__rand_int__ __troop:v:k:__rand_int__ "$version" lww 600000 persist SET k:__rand_int__ "$value"
  done
} | awk '
  { us = $2 / 100; v[$1] = v[$1] sprintf(" %6.2f", us); if ($1 == "SET") set = us; else r[$1] = r[$1] sprintf(" %5.2f", us / set) }
  END {
    print "redis-server CPU µs per command, each round (and its ratio to that round'"'"'s SET):"
    split("SET MSET LUASET WRITE", order, " ")
    for (i = 1; i <= 4; i++) printf "  %-7s%s%s\n", order[i], v[order[i]], (i > 1 ? "   (x" r[order[i]] ")" : "")
  }'
