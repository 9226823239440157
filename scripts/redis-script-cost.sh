#!/usr/bin/env bash
# Counts the instructions a Redis server spends per fixed-window check, under
# valgrind's callgrind: a count that does not move with whatever else the
# machine runs, unlike the CPU seconds of `cargo bench -p runlimit-redis
# --bench redis`. It drives the scripts crates/runlimit-redis/src builds with
# redis-benchmark, on 10,000 random keys already stored: invocations of
# MEMBERS lone checks sharing their policy through the coalesced function
# library, as the client calls it (default 11, what 32 tasks through one
# limiter gather); with `script MEMBERS`, the same code as a script
# (EVALSHA, what servers without functions run); with `lone`, one
# check per invocation through the single-check script; with `minimal`, the
# floor the Redis bench compares against (TIME, GET, SET ... PX in one
# script).
# Usage: scripts/redis-script-cost.sh [MEMBERS|script MEMBERS|lone|minimal]. Needs valgrind,
# redis-server and redis-benchmark; takes about a minute.
set -euo pipefail
members="${1:-11}"
mode=coalesced_function
if [[ "$members" == script ]]; then
    mode=coalesced_script
    members="${2:-11}"
fi
invocations="${INVOCATIONS:-2000}"
source_dir="$(cd "$(dirname "$0")/../crates/runlimit-redis/src" && pwd)"
work="$(mktemp -d)"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.out" \
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
    >"$work/server.log" 2>&1 &
for _ in $(seq 1 120); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.5
done

if [[ "$members" == minimal ]]; then
    members=1
    mode=single
    script="local now = redis.call('TIME') local state = redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], '1:1', 'PX', 60000) return 0"
    sha="$(redis-cli -p "$port" script load "$script")"
    command=(evalsha "$sha" 1 "rl:{bench}:__rand_int__")
elif [[ "$members" == lone ]]; then
    members=1
    mode=single
    script="$(cat "$source_dir/script.lua" "$source_dir/common.lua" "$source_dir/fixed_window.lua" "$source_dir/single.lua")"
    sha="$(redis-cli -p "$port" script load "$script")"
    # One key; its limit, window in microseconds and cost.
    command=(evalsha "$sha" 1 "rl:{bench}:__rand_int__" 1000000000 60000000 1)
elif [[ "$mode" == coalesced_script ]]; then
    script="$(cat "$source_dir/script.lua" "$source_dir/common.lua" "$source_dir/fixed_window.lua" \
        "$source_dir/fixed_window_coalesced.lua" "$source_dir/coalesced.lua" "$source_dir/coalesced_script.lua")"
    sha="$(redis-cli -p "$port" script load "$script")"
    command=(evalsha "$sha" "$members")
else
    # The library as the client builds it, under a name of its own.
    { echo "#!lua name=runlimit_cost"
      cat "$source_dir/library.lua" "$source_dir/common.lua" "$source_dir/fixed_window.lua" \
        "$source_dir/fixed_window_coalesced.lua" "$source_dir/coalesced.lua" "$source_dir/library_entry.lua" |
        sed 's/RUNLIMIT_FUNCTION/runlimit_cost/'
    } > "$work/library.lua"
    redis-cli -p "$port" -x function load < "$work/library.lua" >/dev/null
    command=(fcall runlimit_cost "$members")
fi
if [[ "$mode" != single ]]; then
    # KEYS: one random key per member; ARGV: one run of lone checks sharing
    # their arguments (0: no key repeats; -MEMBERS, then limit, window in
    # microseconds, cost).
    for _ in $(seq 1 "$members"); do command+=("rl:{bench}:__rand_int__"); done
    command+=(0 "-$members" 1000000000 60000000 1)
fi

drive() {
    redis-benchmark -p "$port" -c 4 -P 1 -n "$1" -r 10000 -q "${command[@]}" >/dev/null 2>&1
}
# Store every key first, then count only the checks that follow.
drive $((40000 / members + 1000))
callgrind_control -z >/dev/null 2>&1
drive "$invocations"
callgrind_control -d >/dev/null 2>&1
dump="$(ls "$work"/callgrind.out.* | head -n 1)"
total="$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')"
echo "$members member(s) per invocation: $((total / (invocations * members))) server instructions per check"
