#!/usr/bin/env bash
# Counts the instructions a Redis server spends per fixed-window check, under
# valgrind's callgrind: a count that does not move with whatever else the
# machine runs, unlike the CPU seconds of `cargo bench -p runlimit-redis
# --bench redis`. It drives the code crates/runlimit-redis/src builds with
# redis-benchmark, on 10,000 random keys already stored, as the client sends
# it: a function library called with FCALL. What it runs:
#   MEMBERS          invocations of MEMBERS lone checks sharing their policy
#                    through the coalesced entry point (default 15, what 32
#                    tasks through one limiter gather);
#   lone             one check per invocation through the single-check entry;
#   script MEMBERS   the coalesced code as a script (EVALSHA), what servers
#                    without functions run;
#   script lone      the single-check code as a script;
#   minimal          the floor the Redis bench compares against (TIME, GET,
#                    SET ... PX in one script).
# With MARKED=1 the checks are marked as those of a policy that continues
# from another (a negative window): what a check of a subject whose counter
# carried already costs. With ALGORITHM=sliding the checks are sliding-window
# checks of the same limit and window (their arguments: limit, an eighth of
# the window, cost; a marked check's limit is negative).
# Usage: [MARKED=1] [ALGORITHM=sliding] scripts/redis-script-cost.sh [script] [MEMBERS|lone] | minimal.
# Needs valgrind, redis-server and redis-benchmark; takes about a minute.
set -euo pipefail
form=function
if [[ "${1:-}" == script ]]; then
    form=script
    shift
fi
what="${1:-15}"
invocations="${INVOCATIONS:-2000}"
limit=1000000000
window=60000000
if [[ "${MARKED:-0}" == 1 ]]; then
    window=-60000000
fi
algorithm="${ALGORITHM:-fixed}"
parts=(fixed_window.lua)
coalesced_parts=(fixed_window.lua fixed_window_coalesced.lua)
if [[ "$algorithm" == sliding ]]; then
    parts=(eighths.lua sliding_window.lua)
    coalesced_parts=(eighths.lua sliding_window.lua sliding_window_coalesced.lua)
    window=7500000
    if [[ "${MARKED:-0}" == 1 ]]; then
        limit=-1000000000
    fi
fi
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

# The command that runs PARTS... then the entry point ENTRY (the last
# argument), as the client builds it (limiter.rs, `script!`), in `command`.
prepare() {
    local parts=("${@:1:$#-1}") entry="${*: -1}"
    if [[ "$form" == script ]]; then
        local sha
        sha="$(cat "$source_dir/script.lua" "$source_dir/common.lua" \
            "${parts[@]/#/$source_dir/}" "$source_dir/$entry" |
            redis-cli -p "$port" -x script load)"
        command=(evalsha "$sha")
    else
        {
            echo "#!lua name=runlimit_cost"
            cat "$source_dir/library.lua" "$source_dir/common.lua" "${parts[@]/#/$source_dir/}"
            printf '\nlocal function entry()\n'
            cat "$source_dir/$entry"
            echo "end"
            sed 's/RUNLIMIT_FUNCTION/runlimit_cost/' "$source_dir/library_entry.lua"
        } | redis-cli -p "$port" -x function load >/dev/null
        command=(fcall runlimit_cost)
    fi
}

if [[ "$what" == minimal ]]; then
    members=1
    form=script
    script="local now = redis.call('TIME') local state = redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], '1:1', 'PX', 60000) return 0"
    sha="$(redis-cli -p "$port" script load "$script")"
    command=(evalsha "$sha" 1 "rl:{bench}:__rand_int__")
elif [[ "$what" == lone ]]; then
    members=1
    prepare "${parts[@]}" single.lua
    # One key; its limit, window (an eighth of it for a sliding window) in
    # microseconds and cost.
    command+=(1 "rl:{bench}:__rand_int__" "$limit" "$window" 1)
else
    members="$what"
    prepare "${coalesced_parts[@]}" coalesced.lua coalesced_script.lua
    # KEYS: one random key per member; ARGV: one run of lone checks sharing
    # their arguments (0: no key repeats; -MEMBERS, then limit, window in
    # microseconds, cost).
    command+=("$members")
    for _ in $(seq 1 "$members"); do command+=("rl:{bench}:__rand_int__"); done
    command+=(0 "-$members" "$limit" "$window" 1)
fi

drive() {
    redis-benchmark -p "$port" -c 4 -P 1 -n "$1" -r 10000 -q "${command[@]}" >/dev/null 2>&1
}
# Store every key first (with unmarked checks: a marked check of a key that
# holds nothing answers that it must carry, and stores nothing), then count
# only the checks that follow.
measured=("${command[@]}")
command=("${command[@]/#-60000000/60000000}")
command=("${command[@]/#-1000000000/1000000000}")
drive $((40000 / members + 1000))
command=("${measured[@]}")
callgrind_control -z >/dev/null 2>&1
drive "$invocations"
callgrind_control -d >/dev/null 2>&1
dump="$(ls "$work"/callgrind.out.* | head -n 1)"
total="$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')"
marked=""
if [[ "${MARKED:-0}" == 1 ]]; then
    marked=", marked"
fi
# The command's own instructions, its script's included: the total less the
# server's periodic work (expiry, timers), which grows with the run's wall
# time on a busy machine.
entry=fcallCommand
if [[ "$form" == script ]]; then
    entry=evalShaCommand
fi
own="$(callgrind_annotate --inclusive=yes "$dump" 2>/dev/null |
    awk -v entry="$entry" '!found && $0 ~ entry { found = 1; gsub(",", "", $1); print $1 }')"
echo "$members member(s) per invocation ($algorithm, $form$marked): $((total / (invocations * members))) server instructions per check, $((${own:-0} / (invocations * members))) in $entry"
