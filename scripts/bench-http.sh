#!/usr/bin/env bash
# Requests per second of an Axum hello-world handler, bare, behind
# RateLimitLayer (memory backend, PeerIp keys kept per connection by
# PeerConnection) and, for comparison, behind tower_governor's GovernorLayer
# without and with its headers, measured in one run with wrk on loopback; also
# behind RateLimitLayer keyed on the unhashed peer, which separates the layer
# from the HMAC key tower_governor does not compute, and behind the first
# layer served with SocketAddr, which derives the key per request.
# Usage: scripts/bench-http.sh [seconds per run, default 5] [rounds, default 9]
# Prints every round and the median ratios: single rounds on a shared 2-core VM
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
read -r bare limited governor governor_headers unhashed per_request < <(sed -E 's/bare=([^ ]+) limited=([^ ]+) governor=([^ ]+) governor_headers=([^ ]+) unhashed=([^ ]+) per_request=([^ ]+)/\1 \2 \3 \4 \5 \6/' "$server_log")
rate() { taskset -c 1 wrk -t1 -c32 -d"${seconds}s" "http://$1/" | awk '/Requests\/sec/ {print $2}'; }
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# Alternate the targets so drift on the machine affects all alike.
limited_ratios=()
governor_ratios=()
headers_ratios=()
peer_ratios=()
unhashed_ratios=()
per_request_ratios=()
declare -A rates
for round in $(seq 1 "$rounds"); do
    # Every other round in reverse order, so no target always follows another;
    # the two the target compares run next to each other, so that the VM's
    # drift between them is smallest.
    order=(bare limited governor_headers governor unhashed per_request)
    if (( round % 2 == 0 )); then
        order=(per_request unhashed governor governor_headers limited bare)
    fi
    for target in "${order[@]}"; do
        rates[$target]="$(rate "${!target}")"
    done
    b="${rates[bare]}" l="${rates[limited]}" g="${rates[governor]}" h="${rates[governor_headers]}" u="${rates[unhashed]}" q="${rates[per_request]}"
    read -r lr gr hr pr ur qr < <(awk -v b="$b" -v l="$l" -v g="$g" -v h="$h" -v u="$u" -v q="$q" 'BEGIN { printf "%.3f %.3f %.3f %.3f %.3f %.3f\n", l / b, g / b, h / b, l / h, u / h, q / h }')
    limited_ratios+=("$lr")
    governor_ratios+=("$gr")
    headers_ratios+=("$hr")
    peer_ratios+=("$pr")
    unhashed_ratios+=("$ur")
    per_request_ratios+=("$qr")
    echo "round $round: bare $b req/s; runlimit $l ($lr); tower_governor $g ($gr); tower_governor with headers $h ($hr); runlimit / tower_governor with headers $pr; runlimit with the unhashed key $u, / tower_governor with headers $ur; runlimit with the key per request $q, / tower_governor with headers $qr"
done
echo "median ratio to bare: runlimit $(printf '%s\n' "${limited_ratios[@]}" | median)," \
    "tower_governor $(printf '%s\n' "${governor_ratios[@]}" | median)," \
    "tower_governor with headers $(printf '%s\n' "${headers_ratios[@]}" | median);" \
    "runlimit / tower_governor with headers, median of rounds: $(printf '%s\n' "${peer_ratios[@]}" | median);" \
    "runlimit with the unhashed key / tower_governor with headers: $(printf '%s\n' "${unhashed_ratios[@]}" | median);" \
    "runlimit with the key per request / tower_governor with headers: $(printf '%s\n' "${per_request_ratios[@]}" | median)"
