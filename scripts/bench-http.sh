#!/usr/bin/env bash
# Requests per second of an Axum hello-world handler, bare and behind
# RateLimitLayer (memory backend), measured in one run with wrk on loopback.
# Usage: scripts/bench-http.sh [seconds per run, default 5] [rounds, default 9]
# Prints every round and the median ratio: single rounds on a shared 2-core VM
# swing by ±10%.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seconds="${1:-5}"
rounds="${2:-9}"
if ! command -v wrk >/dev/null 2>&1; then
    echo "==> installing wrk (Debian package)"
    apt-get install -y -qq wrk >/dev/null
fi
cargo build --quiet --release --locked -p runlimit-axum --example bench_server
server_log="$(mktemp)"
# The server gets core 0 and wrk core 1, so they do not steal each other's time.
taskset -c 0 "${CARGO_TARGET_DIR:-target}/release/examples/bench_server" >"$server_log" &
server=$!
trap 'kill "$server" 2>/dev/null || true; rm -f "$server_log"' EXIT
for _ in $(seq 1 50); do
    [[ -s "$server_log" ]] && break
    sleep 0.1
done
read -r bare limited < <(sed -E 's/bare=([^ ]+) limited=([^ ]+)/\1 \2/' "$server_log")
rate() { taskset -c 1 wrk -t1 -c32 -d"${seconds}s" "http://$1/" | awk '/Requests\/sec/ {print $2}'; }
# Alternate the two targets so drift on the machine affects both alike.
ratios=()
for round in $(seq 1 "$rounds"); do
    b="$(rate "$bare")"
    l="$(rate "$limited")"
    ratio="$(awk -v b="$b" -v l="$l" 'BEGIN { printf "%.3f", l / b }')"
    ratios+=("$ratio")
    echo "round $round: bare $b req/s, limited $l req/s, ratio $ratio"
done
median="$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')"
echo "median ratio (limited / bare): $median"
