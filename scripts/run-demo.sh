#!/usr/bin/env bash
# Runs the demo that README's first command shows (and its multi-replica form),
# so CI proves both still work.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo run --quiet --locked -p runlimit-demo
cargo run --quiet --locked -p runlimit-demo -- --replicas 3 --metrics 127.0.0.1:0
cargo run --quiet --locked -p runlimit-demo -- --replicas 3 --leased
cargo run --quiet --locked -p runlimit-memory --example login_burst
# The shared-quota form, when a PostgreSQL URL is configured (CI sets one).
# Without RUNLIMIT_REQUIRE_SERVICES=1 an unreachable database skips it, as the
# database tests do.
if [[ -n "${RUNLIMIT_POSTGRES_TEST_DATABASE_URL:-}" ]]; then
    if ! cargo run --quiet --locked -p runlimit-demo -- --replicas 3 \
        --database-url "$RUNLIMIT_POSTGRES_TEST_DATABASE_URL"; then
        if [[ "${RUNLIMIT_REQUIRE_SERVICES:-}" == "1" ]]; then
            exit 1
        fi
        echo "skipping the PostgreSQL demo: the database at RUNLIMIT_POSTGRES_TEST_DATABASE_URL is unreachable"
    fi
fi
# The Redis form, likewise.
if [[ -n "${RUNLIMIT_REDIS_TEST_URL:-}" ]]; then
    if ! cargo run --quiet --locked -p runlimit-demo -- --replicas 3 \
        --redis-url "$RUNLIMIT_REDIS_TEST_URL"; then
        if [[ "${RUNLIMIT_REQUIRE_SERVICES:-}" == "1" ]]; then
            exit 1
        fi
        echo "skipping the Redis demo: Redis at RUNLIMIT_REDIS_TEST_URL is unreachable"
    fi
fi
