#!/usr/bin/env bash
# Starts (or reuses) a 3-master Redis Cluster on loopback ports 7101-7103 for
# the cluster tests, and prints the node URLs for RUNLIMIT_REDIS_CLUSTER_TEST_NODES.
# Usage: scripts/redis-cluster.sh [start|stop]. Data is kept nowhere but memory.
set -euo pipefail
ports=(7101 7102 7103)
base="${RUNLIMIT_REDIS_CLUSTER_DIR:-/tmp/runlimit-redis-cluster}"

nodes() {
    local list=()
    for port in "${ports[@]}"; do list+=("redis://127.0.0.1:$port/"); done
    (IFS=,; echo "${list[*]}")
}

healthy() {
    redis-cli -h 127.0.0.1 -p "${ports[0]}" cluster info 2>/dev/null | grep -q '^cluster_state:ok'
}

case "${1:-start}" in
    stop)
        for port in "${ports[@]}"; do
            redis-cli -h 127.0.0.1 -p "$port" shutdown nosave >/dev/null 2>&1 || true
        done
        rm -rf "$base"
        exit 0
        ;;
    start) ;;
    *) echo "usage: $0 [start|stop]" >&2; exit 2 ;;
esac

if healthy; then
    nodes
    exit 0
fi
command -v redis-server >/dev/null 2>&1 || { echo "redis-server is not installed" >&2; exit 1; }
for port in "${ports[@]}"; do
    redis-cli -h 127.0.0.1 -p "$port" shutdown nosave >/dev/null 2>&1 || true
done
rm -rf "$base"
for port in "${ports[@]}"; do
    mkdir -p "$base/$port"
    redis-server --port "$port" --bind 127.0.0.1 --cluster-enabled yes \
        --cluster-config-file "nodes-$port.conf" --dir "$base/$port" \
        --save "" --appendonly no --daemonize yes --logfile "$base/$port/redis.log"
done
for port in "${ports[@]}"; do
    for _ in $(seq 1 50); do
        redis-cli -h 127.0.0.1 -p "$port" ping >/dev/null 2>&1 && break
        sleep 0.1
    done
done
redis-cli --cluster create 127.0.0.1:7101 127.0.0.1:7102 127.0.0.1:7103 \
    --cluster-replicas 0 --cluster-yes >/dev/null
for _ in $(seq 1 100); do
    healthy && { nodes; exit 0; }
    sleep 0.1
done
echo "the Redis Cluster did not become healthy" >&2
exit 1
