#!/usr/bin/bash
# troop-entrypoint runs one store node and the redis-server behind it in one
# container: redis-server on loopback (port TROOP_REDIS_PORT, default 6379,
# which the node's `servers` entry names), with its append-only file in
# /data, then troop-node (the node alone, as `troop node`) with this
# script's arguments. When either exits, the other is stopped and the
# container exits with the first one's status, so that the engine's restart
# policy, or Kubernetes, restarts the pair.
# SIGTERM and SIGINT stop both (redis-server writes its file, the node closes
# its connections). Extra redis-server options go in TROOP_REDIS_ARGS.
set -u
redis-server --bind 127.0.0.1 --port "${TROOP_REDIS_PORT:-6379}" --dir /data \
	--appendonly yes --save '' ${TROOP_REDIS_ARGS:-} &
troop-node "$@" &
trap 'kill -TERM $(jobs -p) 2>/dev/null' TERM INT
wait -n
status=$?
kill -TERM $(jobs -p) 2>/dev/null
wait
exit "$status"
