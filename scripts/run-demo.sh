#!/usr/bin/env bash
# Runs the demo that README's first command shows (and its multi-replica form),
# so CI proves both still work.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo run --quiet --locked -p runlimit-demo
cargo run --quiet --locked -p runlimit-demo -- --replicas 3
cargo run --quiet --locked -p runlimit-memory --example login_burst
# The shared-quota form, when a PostgreSQL URL is configured (CI sets one).
if [[ -n "${RUNLIMIT_POSTGRES_TEST_DATABASE_URL:-}" ]]; then
    cargo run --quiet --locked -p runlimit-demo -- --replicas 3 \
        --database-url "$RUNLIMIT_POSTGRES_TEST_DATABASE_URL"
fi
